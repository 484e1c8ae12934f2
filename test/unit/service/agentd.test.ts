// AgentdClient against the emulator's agentd (real HTTP, through /compute/v1/vms/{id}/r/): a
// command's output arrives while it runs, with its exit code at the end; background commands,
// status and kill by id; a refused token is replaced once; errors name the call, never the token.
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AgentdClient, toCommandStatus, toExecEvent, type ExecEvent } from "../../../src/service/agentd.js";
import { ServiceError } from "../../../src/service/index.js";
import { setServiceReplica } from "../../../src/service/user-agent.js";
import { agentdOf, start, waitFor, type Harness } from "./helpers.js";

let h: Harness;
let vmId: string;
const clients: AgentdClient[] = [];
const dir = mkdtempSync(join(tmpdir(), "agentd-client-"));

function vm(opts: Partial<ConstructorParameters<typeof AgentdClient>[0]> = {}): AgentdClient {
  const c = agentdOf(h, vmId, opts);
  clients.push(c);
  return c;
}

async function collect(events: AsyncIterable<ExecEvent>): Promise<ExecEvent[]> {
  const out: ExecEvent[] = [];
  for await (const e of events) out.push(e);
  return out;
}

const text = (events: ExecEvent[], type: "stdout" | "stderr") =>
  events.map((e) => (e.type === type ? e.text : "")).join("");

beforeAll(async () => {
  h = await start();
  vmId = (await h.client.vms.allocate({ tier: "standard" })).vm_id;
});

afterAll(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await h.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("AgentdClient", () => {
  it("streams a command's stdout and stderr and ends with its exit code", async () => {
    const events = await collect(vm().runCommand('echo out; echo err >&2; printf "a\\nb\\n"; exit 3'));
    expect(events[0]).toMatchObject({ type: "start", id: expect.any(String) });
    expect(text(events, "stdout")).toBe("out\na\nb\n");
    expect(text(events, "stderr")).toBe("err\n");
    expect(events.at(-1)).toEqual({ type: "end", exitCode: 3, status: "error" });
  });

  it("hands over output while the command still runs", async () => {
    // The command waits for a file the test writes only once it has seen the first line.
    const gate = join(dir, "gate");
    const seen: ExecEvent[] = [];
    for await (const e of vm().runCommand(`echo waiting; while [ ! -f ${gate} ]; do sleep 0.05; done; echo released`)) {
      seen.push(e);
      if (e.type === "stdout" && e.text.includes("waiting")) writeFileSync(gate, "");
    }
    expect(text(seen, "stdout")).toBe("waiting\nreleased\n");
    expect(seen.at(-1)).toEqual({ type: "end", exitCode: 0, status: "ok" });
  });

  it("passes cwd, envs and timeout to the VM", async () => {
    const c = vm();
    await collect(c.runCommand("mkdir -p sub"));
    const events = await collect(c.runCommand('echo "$GREETING"; basename "$PWD"', { envs: { GREETING: "hi there" }, cwd: "/workspace/sub" }));
    expect(text(events, "stdout")).toBe("hi there\nsub\n");
    const timed = await collect(c.runCommand("sleep 30", { timeoutMs: 200 }));
    expect(timed.some((e) => e.type === "timeout")).toBe(true);
    expect(timed.at(-1)).toEqual({ type: "end", exitCode: 124, status: "error" });
  });

  it("starts a background command and follows it by id: status, then kill", async () => {
    const c = vm();
    const id = (await c.startCommand("sleep 30"))!;
    expect(await c.commandStatus(id)).toMatchObject({ id, running: true });
    expect(await c.killCommand(id)).toBe(true);
    await waitFor(() => h.emu.runtimes.get(vmId)?.command(id)?.running === false);
    expect(await c.commandStatus(id)).toMatchObject({ id, running: false, exitCode: 137 });
    expect(await c.killCommand("no-such-command")).toBe(false);
  });

  it("resolves with no id when a start's answer names none (the contract does not say where it is), and refuses on an error event", async () => {
    const c = vm();
    // An answer with no server-sent events at all (a JSON body where a stream was expected).
    h.emu.injectFault({ method: "POST", path: /\/r\/v1\/commands\/run$/, times: 1, action: { status: 200, body: { ok: true } } });
    expect(await c.startCommand("true")).toBeUndefined();
    // A stream whose only event is an error: the command did not start as asked.
    const server = createServer((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end('event: error\ndata: {"name":"SpawnError","value":"no shell"}\n\n');
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const refusing = new AgentdClient({ baseURL: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, vmId: "vm-refusing", accessToken: async () => "t" });
      clients.push(refusing);
      const err = await refusing.startCommand("true").catch((e: unknown) => e);
      expect(err).toMatchObject({ outcomeUnknown: true, message: "commands.run: the VM refused the command: SpawnError: no shell" });
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  it("starts a background command whose stream has no start event (emulator knob agentdNoStartEvent): no id, and it runs", async () => {
    h.emu.setOptions({ agentdNoStartEvent: true });
    try {
      expect(await vm().startCommand("echo hi > no-id.txt")).toBeUndefined();
      await waitFor(() => existsSync(join(h.emu.runtimes.get(vmId)!.workspace, "no-id.txt")));
    } finally {
      h.emu.setOptions({ agentdNoStartEvent: false });
    }
  });

  it("reads only the two ends of a large file as it streams, and nothing of a file that is not there", async () => {
    const c = vm();
    // 8 MiB between a head and a tail marker (the emulator streams the file).
    await collect(c.runCommand("printf HEAD > big.txt; head -c 8388608 /dev/zero | tr '\\0' x >> big.txt; printf TAIL >> big.txt"));
    const ends = await c.downloadFileEnds("/workspace/big.txt", 10, 6);
    expect(ends?.size).toBe(8 * 1024 * 1024 + 8);
    expect(ends?.head.toString()).toBe("HEADxxxxxx");
    expect(ends?.tail.toString()).toBe("xxTAIL");
    const small = await c.downloadFileEnds("/workspace/sub/../big.txt", 1 << 24, 6);
    expect(small?.head.length).toBe(8 * 1024 * 1024 + 8);
    expect(small?.tail.length).toBe(0);
    expect(await c.downloadFileEnds("/workspace/no-such-file", 10, 10)).toBeUndefined();
  });

  it("with a write gate that refuses (sharded mode, membership lapsed): starts nothing, still reads", async () => {
    const running = (await vm().startCommand("sleep 30"))!;
    let open = false;
    const c = vm({
      writeGate: () => {
        if (!open) throw new Error("membership lapsed");
      },
    });
    h.emu.clearRequests();
    await expect(c.startCommand("touch never")).rejects.toThrow("membership lapsed");
    await expect(collect(c.runCommand("echo never"))).rejects.toThrow("membership lapsed");
    await expect(c.killCommand(running)).rejects.toThrow("membership lapsed");
    expect(h.emu.requests.filter((r) => r.method !== "GET" && r.operation !== "token")).toEqual([]);
    expect(await c.commandStatus(running)).toMatchObject({ id: running, running: true });
    open = true;
    expect(await c.killCommand(running)).toBe(true);
  });

  it("stops reading when the caller breaks out, and the command can then be killed by its id", async () => {
    const c = vm();
    let id = "";
    for await (const e of c.runCommand("echo started; sleep 30")) {
      if (e.type === "start") id = e.id;
      if (e.type === "stdout") break;
    }
    expect(await c.commandStatus(id)).toMatchObject({ running: true });
    await c.killCommand(id);
    await waitFor(() => h.emu.runtimes.get(vmId)?.command(id)?.running === false);
  });

  it("gets a new token once when the service refuses the one it has", async () => {
    const asked: (string | undefined)[] = [];
    const c = vm({
      accessToken: async (refused) => {
        asked.push(refused);
        return refused === undefined ? "stale-token-value" : h.client.accessToken();
      },
    });
    const events = await collect(c.runCommand("echo ok"));
    expect(text(events, "stdout")).toBe("ok\n");
    expect(asked).toEqual([undefined, "stale-token-value"]);
  });

  it("gets another when the new token is refused too (fetched while the service revoked), and stops at the same one twice", async () => {
    const asked: (string | undefined)[] = [];
    const c = vm({
      accessToken: async (refused) => {
        asked.push(refused);
        if (refused === undefined) return "stale-token-one";
        return refused === "stale-token-one" ? "revoked-token-two" : h.client.accessToken();
      },
    });
    expect(text(await collect(c.runCommand("echo ok")), "stdout")).toBe("ok\n");
    expect(asked).toEqual([undefined, "stale-token-one", "revoked-token-two"]);

    const sameAgain = vm({ accessToken: async () => "handed-back-token" });
    await expect(collect(sameAgain.runCommand("true"))).rejects.toMatchObject({ status: 401 });
  });

  it("reports a refusal with the call and the service's message, never the token", async () => {
    const token = "never-valid-token-5d1e";
    const refused = await collect(vm({ accessToken: async () => token }).runCommand("true")).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ServiceError);
    expect((refused as ServiceError).status).toBe(401);
    expect((refused as ServiceError).message).toMatch(/^commands\.run: .*\(HTTP 401\)$/);
    expect((refused as ServiceError).message).not.toContain(token);

    const gone = await vm({ vmId: "00000000-0000-0000-0000-000000000000" }).commandStatus("x").catch((e: unknown) => e);
    expect(gone).toBeInstanceOf(ServiceError);
    expect((gone as ServiceError).status).toBe(404);
    expect((gone as ServiceError).message).toContain("commands.status");
  });

  it("keeps what a refused request carried of a Secret out of the error that quotes it: its envs' Secret values, a secret file's content", async () => {
    const refuse = (path: RegExp, body: unknown) => h.emu.injectFault({ method: "POST", path, action: { status: 400, body } });
    // A Secret's value of any length; a plain value only when long enough not to be a word.
    refuse(/\/r\/v1\/commands\/run$/, { error: "invalid envs: PIN=k9Z MODE=fast URL=https://db.internal:5432" });
    const env = await vm()
      .startCommand("true", { envs: { PIN: "k9Z", MODE: "fast", URL: "https://db.internal:5432" }, secretValues: ["k9Z"] })
      .catch((e: unknown) => e);
    expect((env as ServiceError).message).toBe("commands.run: invalid envs: PIN=[REDACTED] MODE=fast URL=[REDACTED] (HTTP 400)");

    // The same for a command streamed to a person (exec), and in a body a Go service wrote.
    refuse(/\/r\/v1\/commands\/run$/, '{"detail":"bad env TOKEN=tok\\u0026en-1234"}');
    const streamed = await collect(vm().runCommand("true", { envs: { TOKEN: "tok&en-1234" }, secretValues: ["tok&en-1234"] })).catch((e: unknown) => e);
    expect((streamed as ServiceError).message).toContain("TOKEN=[REDACTED]");

    refuse(/\/r\/v1\/files\/upload$/, { error: "not a key: -----BEGIN KEY-----\nsecret-key-body\n-----END KEY-----" });
    const upload = await vm()
      .uploadFile("/workspace/id_rsa", Buffer.from("-----BEGIN KEY-----\nsecret-key-body\n-----END KEY-----\n"), { secret: true })
      .catch((e: unknown) => e);
    expect((upload as ServiceError).message).toBe("files.upload: not a key: [REDACTED] (HTTP 400)");
  });

  it("uploads bytes as they are: a file that is not UTF-8 arrives unchanged", async () => {
    const bytes = Buffer.from([0x30, 0x82, 0x00, 0xff, 0xfe, 0x80, 0xc3, 0x28, 0x9f, 0x0d, 0x0a]);
    await vm().uploadFile("/workspace/bin/keystore.p12", bytes);
    expect(readFileSync(join(h.emu.runtimes.get(vmId)!.workspace, "bin", "keystore.p12")).equals(bytes)).toBe(true);
    await vm().uploadFile("/workspace/bin/note.txt", "héllo\n");
    expect(readFileSync(join(h.emu.runtimes.get(vmId)!.workspace, "bin", "note.txt"), "utf8")).toBe("héllo\n");
  });

  it("asks explainError about a 404 before taking it as agentd's, and throws what it answers instead", async () => {
    const asked: Array<number | undefined> = [];
    const answer: { instead?: Error } = {};
    const c = vm({
      explainError: async (err) => {
        asked.push(err.status);
        return answer.instead;
      },
    });
    // The VM is there: agentd's own 404s, as without the hook.
    expect(await c.downloadFile("/workspace/no-such-file")).toBeUndefined();
    expect(await c.killCommand("no-such-command")).toBe(false);
    await expect(c.commandStatus("no-such-command")).rejects.toMatchObject({ status: 404 });
    expect(asked).toEqual([404, 404, 404]);
    // Not: the hook's answer is thrown, even where a 404 would have been "no such file".
    const gone = (answer.instead = new Error("the VM is gone"));
    await expect(c.downloadFile("/workspace/no-such-file")).rejects.toBe(gone);
    await expect(c.downloadFileEnds("/workspace/no-such-file", 1, 1)).rejects.toBe(gone);
    await expect(c.removeDirectory("/workspace/no-such-dir/x")).resolves.toBeUndefined(); // no 404: nothing asked
    expect(asked).toHaveLength(5);
    // Other errors are not asked about.
    await expect(c.downloadFile("")).rejects.toMatchObject({ status: 400 });
    expect(asked).toHaveLength(5);
  });

  it("reports a service that cannot be reached", async () => {
    const c = vm({ baseURL: "http://127.0.0.1:9" });
    const err = await collect(c.runCommand("true")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ServiceError);
    expect((err as ServiceError).message).toMatch(/^commands\.run: cannot reach the service/);
  });
});

describe("AgentdClient with its Connection's client", () => {
  it("names the replica in its User-Agent in sharded mode, as the service client does", async () => {
    setServiceReplica("shard-r1");
    try {
      const id = (await h.client.vms.allocate({ tier: "standard" })).vm_id;
      const c = agentdOf(h, id);
      clients.push(c);
      await c.uploadFile("/workspace/ua.txt", "x");
      const forwarded = h.emu.requests.filter((r) => r.operation === "vms.forward").at(-1);
      expect(forwarded?.userAgent).toBe("agent-operator/agentd-client (replica shard-r1)");
    } finally {
      setServiceReplica(undefined);
    }
  });

  it("counts every attempt in the service client's request metrics, as agentd.<operation>, answered or not", async () => {
    const seen: Array<{ operation: string; method: string; status: number | "error" }> = [];
    const h2 = await start({}, { hooks: { onRequest: (e) => void seen.push({ operation: e.operation, method: e.method, status: e.status }) } });
    try {
      const id = (await h2.client.vms.allocate({ tier: "standard" })).vm_id;
      seen.length = 0;
      const c = new AgentdClient({ baseURL: h2.emu.baseURL, vmId: id, accessToken: (r) => h2.client.accessToken(r), forwarding: h2.client.forwarding });
      clients.push(c);
      await c.uploadFile("/workspace/f.txt", "hello");
      await c.downloadFile("/workspace/f.txt");
      expect(await c.downloadFile("/workspace/none.txt")).toBeUndefined(); // agentd's 404: no such file
      const agentd = seen.filter((e) => e.operation.startsWith("agentd."));
      expect(agentd).toEqual([
        { operation: "agentd.files.upload", method: "POST", status: 201 },
        { operation: "agentd.files.download", method: "GET", status: 200 },
        { operation: "agentd.files.download", method: "GET", status: 404 },
      ]);
      // No answer at all: counted as "error".
      const unreachable = new AgentdClient({ baseURL: "http://127.0.0.1:9", vmId: id, accessToken: (r) => h2.client.accessToken(r), forwarding: h2.client.forwarding });
      clients.push(unreachable);
      await expect(unreachable.downloadFile("/workspace/f.txt")).rejects.toBeInstanceOf(ServiceError);
      expect(seen.at(-1)).toEqual({ operation: "agentd.files.download", method: "GET", status: "error" });
    } finally {
      await h2.close();
    }
  });

  // The forwarding route is the compute service's: a burst of a run's calls to a VM must keep
  // under the service's limit with the rest of the Connection's calls, not meet its 429s.
  it("takes a token of the service client's bucket for every attempt: a burst above the service's limit gets no 429", async () => {
    const limited = await start({ rateLimit: 10 }, { rateLimit: { qps: 10, burst: 5 } });
    try {
      const id = (await limited.client.vms.allocate({ tier: "standard" })).vm_id;
      const c = new AgentdClient({ baseURL: limited.emu.baseURL, vmId: id, accessToken: (r) => limited.client.accessToken(r), forwarding: limited.client.forwarding });
      clients.push(c);
      await c.uploadFile("/workspace/f.txt", "hello");
      const reads = await Promise.all(Array.from({ length: 25 }, () => c.downloadFile("/workspace/f.txt")));
      expect(reads.every((r) => r === "hello")).toBe(true);
      expect(limited.emu.stats().byStatus["429"] ?? 0).toBe(0);
    } finally {
      await limited.close();
    }
  });

  it("hands the service's 429 and its Retry-After to the rate limit, so the whole client holds back", async () => {
    const limited = await start({ rateLimit: 1 });
    try {
      const id = (await limited.client.vms.allocate({ tier: "standard" })).vm_id;
      const throttled: Array<number | undefined> = [];
      const taken: string[] = [];
      const c = new AgentdClient({
        baseURL: limited.emu.baseURL,
        vmId: id,
        accessToken: (r) => limited.client.accessToken(r),
        forwarding: { take: async (op) => void taken.push(op), throttled: (ms) => void throttled.push(ms), attempted: () => undefined },
      });
      clients.push(c);
      const err = await c.downloadFile("/workspace/none.txt").then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ServiceError);
      expect((err as ServiceError).status).toBe(429);
      expect(taken).toEqual(["files.download"]);
      expect(throttled).toEqual([1000]);
    } finally {
      await limited.close();
    }
  });
});

describe("toExecEvent", () => {
  it("reads a finished command's status that leaves out a zero exit code (a Go server's omitempty) as exit 0", () => {
    const finished = { id: "c1", started_at: "2026-01-01T00:00:00Z", finished_at: "2026-01-01T00:00:01Z" };
    expect(toCommandStatus(finished, "c1")).toEqual({ id: "c1", running: false, exitCode: 0, startedAt: finished.started_at, finishedAt: finished.finished_at });
    expect(toCommandStatus({ ...finished, exit_code: 3 }, "c1")).toMatchObject({ running: false, exitCode: 3 });
    // Still running, or an answer that says nothing of an end: no exit code is made up.
    expect(toCommandStatus({ id: "c1", running: true, started_at: finished.started_at }, "c1")).toEqual({ id: "c1", running: true, startedAt: finished.started_at });
    expect(toCommandStatus({ id: "c1" }, "c1")).toEqual({ id: "c1", running: false });
  });

  it("reads a file whose body takes longer than the timeout, so long as it keeps coming", async () => {
    // 12 chunks, 100 ms apart: 1.1 s in all against a 400 ms timeout.
    const server = createServer((req, res) => {
      res.writeHead(200, { "content-type": "application/octet-stream" });
      let n = 0;
      const timer = setInterval(() => {
        res.write(`chunk-${String(n).padStart(2, "0")};`);
        if (++n === 12) {
          clearInterval(timer);
          res.end();
        }
      }, 100);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const c = new AgentdClient({ baseURL: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, vmId: "vm-slow", accessToken: async () => "t", timeoutMs: 400 });
      clients.push(c);
      const ends = await c.downloadFileEnds("/workspace/slow", 9, 9);
      expect(ends).toEqual({ head: Buffer.from("chunk-00;"), tail: Buffer.from("chunk-11;"), size: 12 * 9 });
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  it("takes a start whose answer began but named no id as started without one; gives up one not answered within the timeout, the outcome unknown", async () => {
    let answer = true;
    const server = createServer((_req, res) => {
      if (!answer) return; // a frozen VM: not even the headers
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.flushHeaders(); // and then nothing: an agentd that streams the whole run, and names no id
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const c = new AgentdClient({ baseURL: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, vmId: "vm-silent", accessToken: async () => "t", timeoutMs: 300 });
      clients.push(c);
      expect(await c.startCommand("sleep 1")).toBeUndefined();
      answer = false;
      const err = await c.startCommand("sleep 1").catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ServiceError);
      expect(err).toMatchObject({ retryable: true, outcomeUnknown: true });
      expect((err as ServiceError).message).toContain("the VM did not answer within 300 ms");
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  it("starts a command on an agentd whose background answer streams the whole run with no id, without waiting for its end (emulator knobs agentdBackgroundStreams, agentdNoStartEvent)", async () => {
    h.emu.setOptions({ agentdBackgroundStreams: true, agentdNoStartEvent: true });
    try {
      const c = agentdOf(h, vmId, { timeoutMs: 120_000 });
      clients.push(c);
      const rt = h.emu.runtimes.get(vmId)!;
      const gate = join(rt.workspace, "background-gate");
      // Resolves while the command still runs (it waits for the gate): not at its end, nor at the 120 s timeout.
      const before = new Set(rt.commands.keys());
      expect(await c.startCommand("while [ ! -e background-gate ]; do sleep 0.1; done")).toBeUndefined();
      const started = [...rt.commands.values()].filter((cmd) => !before.has(cmd.id));
      expect(started.map((cmd) => cmd.running)).toEqual([true]);
      writeFileSync(gate, "");
    } finally {
      h.emu.setOptions({ agentdBackgroundStreams: false, agentdNoStartEvent: false });
    }
  }, 30_000);

  it("reads exit 0 from an agentd that leaves zero values out (emulator knob agentdOmitEmpty)", async () => {
    h.emu.setOptions({ agentdOmitEmpty: true });
    try {
      const c = vm();
      const id = (await c.startCommand("true"))!;
      await waitFor(() => h.emu.runtimes.get(vmId)?.command(id)?.running === false);
      expect(await c.commandStatus(id)).toMatchObject({ id, running: false, exitCode: 0 });
    } finally {
      h.emu.setOptions({ agentdOmitEmpty: false });
    }
  });

  it("reads the emulator's events and the names the official SDK uses", () => {
    expect(toExecEvent("start", '{"id":"c1"}')).toEqual({ type: "start", id: "c1" });
    expect(toExecEvent("start", '{"context_id":"k1"}')).toEqual({ type: "start", id: "k1" });
    expect(toExecEvent("started", '{"command_id":"c2"}')).toEqual({ type: "start", id: "c2" });
    expect(toExecEvent("start", '{"commandId":"c3"}')).toEqual({ type: "start", id: "c3" });
    expect(toExecEvent("start", '{"id":""}')).toEqual({ type: "other", event: "start", data: '{"id":""}' });
    expect(toExecEvent("output", "line\n")).toEqual({ type: "stdout", text: "line\n" });
    expect(toExecEvent("end", '{"exit_code":0}')).toEqual({ type: "end", exitCode: 0 });
    expect(toExecEvent("done", "")).toEqual({ type: "end" });
    expect(toExecEvent("end", '{"status":"error"}')).toEqual({ type: "end", status: "error" });
    expect(toExecEvent("error", '{"name":"ValueError","value":"bad"}')).toEqual({ type: "error", name: "ValueError", value: "bad" });
    expect(toExecEvent("progress", "50%")).toEqual({ type: "other", event: "progress", data: "50%" });
  });
});
