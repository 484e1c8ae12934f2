import { mkdtempSync, readFileSync, rmSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { client, emulator } from "./helpers.js";
import { agentd, alive, allocate, endOf, eventually, parseSSE, startId, streamText } from "./runtime-helpers.js";
import { STREAM_LIMITS, StallWatch } from "../../../src/emulator/runtime/streams.js";

// A directory outside any VM's workspace where commands leave side effects for the test to see.
const outside = mkdtempSync(join(tmpdir(), "emu-cmd-test-"));
afterAll(() => rmSync(outside, { recursive: true, force: true }));

describe("emulator agentd: commands (r/v1/commands)", () => {
  it("runs a command in the VM's workspace and streams its output as server-sent events", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c, { env: { FROM_ALLOC: "a", BOTH: "alloc" } });
    const { res, events } = await agentd(c, vm.vm_id).run({
      command: 'echo "$FROM_ALLOC $FROM_REQ $BOTH"; pwd; echo oops >&2; exit 3',
      envs: { FROM_REQ: "r", BOTH: "request" },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    expect(events[0]?.event).toBe("start");
    const id = startId(events);
    expect(id).toMatch(/^[0-9a-f-]{36}$/);
    // The request's envs win over the allocation's env.
    expect(streamText(events, "stdout")).toBe(`a r request\n${emu.runtimes.get(vm.vm_id)!.workspace}\n`);
    expect(streamText(events, "stderr")).toBe("oops\n");
    expect(endOf(events)).toEqual({ exit_code: 3, status: "error", error: "command exited with code 3" });
    const status = await agentd(c, vm.vm_id).call(`GET`, `v1/commands/${id}/status`);
    expect(status.status).toBe(200);
    expect(status.body).toEqual({ id, running: false, exit_code: 3, started_at: expect.any(String), finished_at: expect.any(String) });
  });

  it("with agentdOmitEmpty answers as a Go server with omitempty: a zero exit code and running: false left out", async () => {
    const emu = await emulator({ agentdOmitEmpty: true });
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const { events } = await a.run({ command: "true" });
    expect(endOf(events)).toEqual({ status: "ok" });
    const id = startId(events);
    expect((await a.call("GET", `v1/commands/${id}/status`)).body).toEqual({ id, started_at: expect.any(String), finished_at: expect.any(String) });
    const failed = await a.run({ command: "exit 3" });
    expect(endOf(failed.events)).toEqual({ exit_code: 3, status: "error", error: "command exited with code 3" });
  });

  it("does not pass the emulator's own environment on (only PATH, HOME and the like)", async () => {
    process.env["EMU_TEST_SECRET"] = "do-not-leak";
    try {
      const emu = await emulator();
      const c = await client(emu);
      const vm = await allocate(c);
      const { events } = await agentd(c, vm.vm_id).run({ command: 'echo "[$EMU_TEST_SECRET]"; command -v sh >/dev/null && echo path-ok' });
      expect(streamText(events, "stdout")).toBe("[]\npath-ok\n");
    } finally {
      delete process.env["EMU_TEST_SECRET"];
    }
  });

  it("background: answers at once with the id; the status shows it running, then its exit code", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const { res, events } = await a.run({ command: "sleep 0.5; exit 7", background: true });
    expect(res.status).toBe(200);
    expect(events.map((e) => e.event)).toEqual(["start"]);
    const id = startId(events);
    const running = await a.call("GET", `v1/commands/${id}/status`);
    expect(running.body).toEqual({ id, running: true, started_at: expect.any(String) });
    await eventually(async () => ((await a.call<{ running: boolean }>("GET", `v1/commands/${id}/status`)).body.running === false), 5000, "the command to end");
    expect((await a.call("GET", `v1/commands/${id}/status`)).body).toMatchObject({ id, running: false, exit_code: 7 });
    expect((await a.call("GET", "v1/commands/nope/status")).body).toEqual({ code: 404, message: "command nope not found" });
  });

  it("DELETE v1/commands/{id} kills the command and everything it started", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const pidFile = join(outside, "kill.pid");
    // A child of the shell: killing only the shell would leave it running.
    const { events } = await a.run({ command: `sleep 30 & echo $! > ${pidFile}; wait`, background: true });
    const id = startId(events);
    await eventually(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== "", 5000, "the pid file");
    const pid = Number(readFileSync(pidFile, "utf8"));
    expect(alive(pid)).toBe(true);
    expect((await a.call("DELETE", `v1/commands/${id}`)).status).toBe(204);
    await eventually(() => !alive(pid), 5000, "the child to die");
    await eventually(async () => ((await a.call<{ running: boolean }>("GET", `v1/commands/${id}/status`)).body.running === false));
    expect((await a.call("GET", `v1/commands/${id}/status`)).body).toMatchObject({ running: false, exit_code: 137 });
    expect((await a.call("DELETE", "v1/commands/nope")).status).toBe(404);
  });

  it("kills what the shell left running in its group when it exits", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const pidFile = join(outside, "leftover.pid");
    const { events } = await agentd(c, vm.vm_id).run({ command: `sleep 30 >/dev/null 2>&1 & echo $! > ${pidFile}` });
    expect(endOf(events)).toEqual({ exit_code: 0, status: "ok" });
    const pid = Number(readFileSync(pidFile, "utf8"));
    await eventually(() => !alive(pid), 5000, "the leftover to die");
  });

  it.skipIf(process.platform !== "linux")("kills, when its VM ends, a process that left its group (setsid, a daemon), and nothing of another VM", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const [gone, kept] = [await allocate(c), await allocate(c)];
    const start = async (vmId: string, name: string) => {
      const pidFile = join(outside, `${name}.pid`);
      // setsid: a new session and group, out of the command's; background: the command runs on.
      await agentd(c, vmId).run({ command: `setsid sleep 300 >/dev/null 2>&1 < /dev/null & echo $! > ${pidFile}; sleep 0.2` });
      return Number(readFileSync(pidFile, "utf8"));
    };
    const [strayGone, strayKept] = [await start(gone.vm_id, "stray-gone"), await start(kept.vm_id, "stray-kept")];
    // Out of its group, it outlived the command's end.
    expect(alive(strayGone)).toBe(true);
    expect((await c.call("DELETE", `/compute/v1/vms/${gone.vm_id}`)).status).toBe(204);
    await eventually(() => !alive(strayGone), 5000, "the stray of the deleted VM to die");
    expect(alive(strayKept)).toBe(true);
    await emu.close();
    await eventually(() => !alive(strayKept), 5000, "the other VM's stray to die with the emulator");
  });

  it("timeout_ms kills the command: a timeout event, then exit code 124", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const started = Date.now();
    const { events } = await agentd(c, vm.vm_id).run({ command: "echo before; sleep 10; echo after", timeout_ms: 300 });
    expect(Date.now() - started).toBeLessThan(5000);
    expect(streamText(events, "stdout")).toBe("before\n");
    expect(events.find((e) => e.event === "timeout")?.data).toBe('{"timeout_ms":300}');
    expect(endOf(events)).toEqual({ exit_code: 124, status: "error", error: "command timed out after 300 ms" });
  });

  it("a timeout_ms longer than Node's longest timer (30 days: a VM's default maximum TTL) is no timeout yet", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const { events } = await agentd(c, vm.vm_id).run({ command: "sleep 0.3; echo done", timeout_ms: 2_592_000_000 });
    expect(events.find((e) => e.event === "timeout")).toBeUndefined();
    expect(streamText(events, "stdout")).toBe("done\n");
    expect(endOf(events)).toEqual({ exit_code: 0, status: "ok" });
  });

  it("a command still running is killed when its VM is released, deleted or expires; the VM then answers 404 on every r/ path", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const ends = ["release", "delete", "expire"] as const;
    // Three VMs, each running a command that would leave a marker after 2 s.
    const runs = await Promise.all(
      ends.map(async (end) => {
        const vm = await allocate(c);
        const pidFile = join(outside, `${end}.pid`);
        const { events } = await agentd(c, vm.vm_id).run({ command: `echo $$ > ${pidFile}; sleep 2; touch ${join(outside, `${end}.marker`)}`, background: true });
        await eventually(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== "", 5000, "the pid file");
        return { end, vm, id: startId(events), pid: Number(readFileSync(pidFile, "utf8")) };
      }),
    );
    for (const { end, vm, id, pid } of runs) {
      const a = agentd(c, vm.vm_id);
      const cmd = emu.runtimes.get(vm.vm_id)!.command(id)!;
      expect(alive(pid)).toBe(true);
      if (end === "release") expect((await c.post(`/compute/v1/vms/${vm.vm_id}/release`, {})).status).toBe(200);
      if (end === "delete") expect((await c.del(`/compute/v1/vms/${vm.vm_id}`)).status).toBe(204);
      if (end === "expire") emu.state.expireVM(vm.vm_id);
      await eventually(() => !alive(pid), 5000, `the command to die (${end})`);
      await cmd.execution.wait();
      expect(cmd.status()).toMatchObject({ running: false, exit_code: 137 });
      expect(emu.runtimes.get(vm.vm_id)).toBeUndefined();
      for (const [method, path] of [
        ["GET", `v1/commands/${id}/status`],
        ["POST", "v1/commands/run"],
        ["GET", "v1/metrics"],
      ] as const) {
        const res = await a.call(method, path, method === "POST" ? { command: "true" } : undefined);
        expect(res.status, `${end}: ${method} ${path}`).toBe(404);
        expect(res.body).toEqual({ code: 404, error_code: "not_found", message: `vm ${vm.vm_id} not found` });
      }
    }
    await new Promise((r) => setTimeout(r, 2500));
    for (const end of ends) expect(existsSync(join(outside, `${end}.marker`)), `${end}: the command never finished`).toBe(false);
  });

  it("the workspace directory is removed with the VM", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const dir = emu.runtimes.get(vm.vm_id)!.workspace;
    expect(existsSync(dir)).toBe(true);
    await c.post(`/compute/v1/vms/${vm.vm_id}/release`, {});
    await eventually(() => !existsSync(dir), 5000, "the workspace to go");
  });

  it("outputLimitBytes bounds what is kept for replay, never a live stream: a reader attached while output comes gets all of it, untouched", async () => {
    const emu = await emulator({ outputLimitBytes: 1000 });
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const command = "head -c 5000 /dev/zero | tr '\\0' x; echo; echo done >&2";
    // Live: every byte the command wrote, and no text the command did not write.
    const { events } = await a.run({ command });
    expect(streamText(events, "stdout")).toBe(`${"x".repeat(5000)}\n`);
    expect(streamText(events, "stderr")).toBe("done\n");
    expect(events.map((e) => e.event)).not.toContain("truncated");
    expect(endOf(events)).toEqual({ exit_code: 0, status: "ok" });
    // A reader that arrives after the output (an answer delayed by a fault rule) gets the replay:
    // the first 1000 bytes kept, then one `truncated` event where the rest was left out (D).
    emu.injectFault({ method: "POST", path: `${a.base}/v1/commands/run`, action: { delayMs: 500 } });
    const late = (await a.run({ command })).events;
    expect(streamText(late, "stdout")).toBe("x".repeat(1000));
    expect(streamText(late, "stderr")).toBe("");
    expect(late.map((e) => e.event)).toEqual([...late.slice(0, -2).map((e) => e.event), "truncated", "end"]);
    expect(JSON.parse(late.at(-2)!.data)).toEqual({ limit_bytes: 1000 });
    expect(endOf(late)).toEqual({ exit_code: 0, status: "ok" });
    const kept = [...emu.runtimes.get(vm.vm_id)!.commands.values()].map((cmd) => cmd.execution);
    expect(kept.map((e) => e.truncated)).toEqual([true, true]);
    expect(kept.map((e) => e.text("stdout"))).toEqual(["x".repeat(1000), "x".repeat(1000)]);
  });

  it("cuts a live reader that stops reading (its connection still open) once 64 MiB wait for it", async () => {
    const emu = await emulator({ outputLimitBytes: 1000 });
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const total = 100_000_000;
    const { request } = await import("node:http");
    const saved = { ...STREAM_LIMITS };
    STREAM_LIMITS.stalledMs = 2_000; // 10 s in use: shortened so that the test waits less (the reader shares this process, so not much less)
    /** Reads the stream after `stallMs` of reading nothing. */
    const read = (stallMs: number) =>
      new Promise<{ bytes: number; ended: boolean }>((resolve, reject) => {
        const req = request(`${emu.baseURL}${a.base}/v1/commands/run`, { method: "POST", headers: { authorization: `Bearer ${c.token}`, "content-type": "application/json" } }, (res) => {
          res.pause();
          let bytes = 0;
          let text = "";
          const done = () => resolve({ bytes, ended: text.includes("event: end") });
          res.on("data", (chunk: Buffer) => {
            bytes += chunk.length;
            text = (text + chunk.toString("latin1")).slice(-200);
          });
          res.on("end", done);
          res.on("error", done);
          res.on("aborted", done);
          setTimeout(() => res.resume(), stallMs);
        });
        req.on("error", reject);
        // Output written at once, then more a while later (what a stalled reader is looked at on).
        req.end(JSON.stringify({ command: `head -c ${total} /dev/zero | tr '\\0' x; sleep 3; echo more` }));
      });
    try {
      const stalled = await read(6_000);
      expect(stalled.ended).toBe(false);
      expect(stalled.bytes).toBeLessThan(total);
    } finally {
      Object.assign(STREAM_LIMITS, saved);
    }
  }, 90_000);

  it("tells a stalled reader from a slow one: only 64 MiB waiting with nothing sent for the stall time (10 s) is stalled", () => {
    const mib = 1 << 20;
    let t = 0;
    // Far behind (100 MiB waiting) but reading: 1 MiB more sent every second, for a minute.
    const slow = new StallWatch(() => t);
    expect(slow.stalled(100 * mib, 100 * mib)).toBe(false);
    for (let k = 1; k <= 60; k++) {
      t = k * 1_000;
      // 2 MiB more queued, 1 MiB of it read: what waits grows, and something goes out.
      expect(slow.stalled(2 * mib, (100 + k) * mib)).toBe(false);
    }
    // 100 MiB waiting and nothing sent: stalled once 10 s have passed, not before.
    t = 0;
    const stalled = new StallWatch(() => t);
    expect(stalled.stalled(100 * mib, 100 * mib)).toBe(false);
    t = 9_000;
    expect(stalled.stalled(0, 100 * mib)).toBe(false);
    t = 10_001;
    expect(stalled.stalled(0, 100 * mib)).toBe(true);
    // Under 64 MiB waiting: never, however long nothing is sent.
    t = 0;
    const small = new StallWatch(() => t);
    small.stalled(mib, mib);
    t = 60_000;
    expect(small.stalled(0, mib)).toBe(false);
  });

  it("ends a command's stream with status ok|error and, on failure, an error message beside exit_code (the keys the official SDK reads)", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    // A reader written from SERVICE.md ("the SDK reports {output, status: ok|error}"): it reads
    // status and error, never exit_code.
    const sdkView = (events: readonly { event: string; data: string }[]): { status: unknown; error?: unknown } => {
      const end = endOf(events);
      return { status: end["status"], ...(end["error"] !== undefined && { error: end["error"] }) };
    };
    expect(sdkView((await a.run({ command: "echo fine" })).events)).toEqual({ status: "ok" });
    expect(sdkView((await a.run({ command: "exit 3" })).events)).toEqual({ status: "error", error: "command exited with code 3" });
    expect(sdkView((await a.run({ command: "sleep 10", timeout_ms: 200 })).events)).toEqual({ status: "error", error: "command timed out after 200 ms" });
    // Additive: exit_code is still there, for readers of agentd's own events.
    expect(endOf((await a.run({ command: "exit 3" })).events)).toMatchObject({ exit_code: 3 });
    // The same over the older SDKs' POST /compute/v1/vms/{id}/execute.
    const viaExecute = await c.post(`/compute/v1/vms/${vm.vm_id}/execute`, { command: "exit 5" });
    expect(endOf(parseSSE(viaExecute.text))).toEqual({ exit_code: 5, status: "error", error: "command exited with code 5" });
  });

  it("refuses a bad request with 400 in agentd's dialect, naming the field", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const cases: [unknown, string][] = [
      [{}, "command is required"],
      [{ command: 5 }, "command must be a string"],
      [{ command: "ls", cwd: "/etc" }, 'cwd "/etc" is outside /workspace'],
      [{ command: "ls", cwd: "../.." }, 'cwd "../.." is outside /workspace'],
      [{ command: "ls", cwd: "/workspace/missing" }, "cwd is not an existing directory"],
      [{ command: "ls", envs: { A: 1 } }, "envs.A must be a string"],
      [{ command: "ls", timeout_ms: -1 }, "timeout_ms must be a non-negative integer"],
      [{ command: "ls", background: "yes" }, "background must be a boolean"],
    ];
    for (const [body, message] of cases) {
      const res = await c.post(`${a.base}/v1/commands/run`, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body).toEqual({ code: 400, message });
    }
    expect(emu.runtimes.get(vm.vm_id)!.executions).toBe(0);
    // A cwd inside the workspace is a VM path.
    await a.call("POST", "v1/directories", ["/workspace/sub"]);
    const { events } = await a.run({ command: "pwd", cwd: "/workspace/sub" });
    expect(streamText(events, "stdout")).toBe(`${emu.runtimes.get(vm.vm_id)!.workspace}/sub\n`);
  });

  it("counts every execution started, per VM and in all", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const one = await allocate(c);
    const two = await allocate(c);
    await agentd(c, one.vm_id).run({ command: "true" });
    await agentd(c, one.vm_id).run({ command: "true", background: true });
    await agentd(c, two.vm_id).run({ command: "false" });
    expect(emu.runtimes.get(one.vm_id)!.executions).toBe(2);
    expect(emu.runtimes.get(two.vm_id)!.executions).toBe(1);
    expect(emu.runtimes.executions).toBe(3);
    await c.post(`/compute/v1/vms/${one.vm_id}/release`, {});
    expect(emu.runtimes.executions, "released VMs still count").toBe(3);
  });

  it("a fault rule applies to the event stream: dropped before, nothing runs; dropped after, the command ran once", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const path = `${a.base}/v1/commands/run`;
    emu.injectFault({ method: "POST", path, action: { drop: "before" } });
    await expect(c.post(path, { command: `touch ${join(outside, "before")}` })).rejects.toThrow();
    expect(emu.runtimes.get(vm.vm_id)!.executions).toBe(0);
    emu.injectFault({ method: "POST", path, action: { drop: "after" } });
    await expect(c.post(path, { command: `touch ${join(outside, "after")}` })).rejects.toThrow();
    await eventually(() => existsSync(join(outside, "after")), 5000, "the command to run");
    expect(existsSync(join(outside, "before"))).toBe(false);
    expect(emu.runtimes.get(vm.vm_id)!.executions).toBe(1);
    emu.injectFault({ method: "POST", path, action: { delayMs: 200 } });
    const { events } = await a.run({ command: "echo late" });
    expect(streamText(events, "stdout"), "a delayed stream still carries every event from the start").toBe("late\n");
    expect(emu.requests.filter((r) => r.operation === "vms.forward").map((r) => r.status)).toEqual(["dropped", "dropped", 200]);
  });

  it("parses events from a stream that the SSE parser joins back", () => {
    expect(parseSSE("event: stdout\ndata: a\ndata: \n\n: keepalive\n\nevent: end\ndata: {}\n\n")).toEqual([
      { event: "stdout", data: "a\n" },
      { event: "end", data: "{}" },
    ]);
  });
});
