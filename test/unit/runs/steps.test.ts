// A step in a real (emulated) VM: started, followed, and started twice for one attempt (the
// operator killed between starting it and recording its command id) without running twice.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../../../dev/wait.js";
import { ALREADY_STARTED, SETUP_FAILED, runPath, shellQuote, stepDir, stepScript } from "../../../src/runs/script.js";
import { HEARTBEAT_SILENCE_MS, Heartbeats, observeStep, startStep, stopStep, type StepObservation } from "../../../src/runs/steps.js";
import { ForwardedVM, VMGoneError, type RunVM } from "../../../src/runs/vm.js";
import type { CommandStatus } from "../../../src/service/agentd.js";
import { start, type Harness } from "../service/helpers.js";

let h: Harness;
let vmId: string;
let vm: ForwardedVM;
/** This test process as the operator: what it saw of the steps' heartbeats. */
const heartbeats = new Heartbeats();

beforeAll(async () => {
  h = await start();
  vmId = (await h.client.vms.allocate({ tier: "standard" })).vm_id;
  vm = new ForwardedVM({ baseURL: h.emu.baseURL, vmId, client: h.client });
});
afterAll(async () => {
  await vm.close();
  await h.close();
});

const workspace = () => h.emu.runtimes.get(vmId)!.workspace;
/** How the step ended, with what it printed (read from the file observeStep names). */
const ended = (ref: Parameters<typeof observeStep>[1], id: string | undefined) =>
  waitFor(async () => {
    const o = await observeStep(vm, ref, id, heartbeats);
    if (o.state !== "ended") return o.state === "running" ? undefined : o;
    const printed = await vm.readEnds(o.outputPath, 1 << 20, 0);
    return { state: o.state, exitCode: o.exitCode, output: printed?.head.toString("utf8") };
  }, { description: "the step ended" });

describe("a step in the VM", () => {
  it("runs a command with the run's env and reports its exit code and output", async () => {
    const ref = { runUid: "uid-1", attempt: 1, index: 0 };
    const id = (await startStep(vm, ref, { command: 'echo "hi $WHO"; echo oops >&2; exit 4' }, { envs: { WHO: "there" } }))!;
    expect(await ended(ref, id)).toEqual({ state: "ended", exitCode: 4, output: "hi there\noops\n" });
  });

  it("runs python code", async () => {
    const ref = { runUid: "uid-1", attempt: 1, index: 1 };
    const id = (await startStep(vm, ref, { language: "python", code: "import sys\nprint('it''s', sum(range(10)))\nsys.exit(0)" }, {}))!;
    expect(await ended(ref, id)).toEqual({ state: "ended", exitCode: 0, output: "its 45\n" });
  });

  it("started twice for one attempt, runs once; the second start is followed to the first one's end", async () => {
    const rt = h.emu.runtimes.get(vmId)!;
    const ref = { runUid: "uid-2", attempt: 1, index: 0 };
    // The first start stays at work until the test has looked at the second (a gate file the
    // test writes): a sleep of any length was once outlasted on a loaded machine.
    const gate = join(workspace(), "gate-uid-2");
    const step = { command: `echo ran >> twice.txt; while [ ! -f ${shellQuote(gate)} ]; do sleep 0.05; done; echo done; exit 7` };
    const before = rt.executions;
    const first = (await startStep(vm, ref, step, {}))!;
    // The first start has made its marker (on a loaded machine the second could otherwise get
    // there first, and be the one that runs the step).
    await waitFor(() => existsSync(join(workspace(), stepDir(ref.runUid, ref.attempt, ref.index), "started")));
    // The operator dies here, before recording `first`; the next one starts the step again.
    const second = (await startStep(vm, ref, step, {}))!;
    await waitFor(async () => (await vm.status(second))?.running === false);
    expect((await vm.status(second))?.exitCode).toBe(ALREADY_STARTED);
    // Followed by the second id, the step is still running (the first start is at work)...
    expect(await observeStep(vm, ref, second, heartbeats)).toEqual<StepObservation>({ state: "running" });
    writeFileSync(gate, "");
    // ...and ends as the first start ends, with its output.
    expect(await ended(ref, second)).toEqual({ state: "ended", exitCode: 7, output: "done\n" });
    expect(await ended(ref, first)).toEqual({ state: "ended", exitCode: 7, output: "done\n" });
    expect(readFileSync(join(workspace(), "twice.txt"), "utf8")).toBe("ran\n");
    expect(rt.executions - before).toBe(2); // two commands, one of which ran nothing
    // Another attempt of the same run is another marker: it runs (the gate is open).
    const again = (await startStep(vm, { ...ref, attempt: 2 }, step, {}))!;
    expect(await ended({ ...ref, attempt: 2 }, again)).toMatchObject({ exitCode: 7 });
    expect(readFileSync(join(workspace(), "twice.txt"), "utf8")).toBe("ran\nran\n");
  });

  it("reports a step killed by the VM's timeout with the command's exit code", async () => {
    const ref = { runUid: "uid-3", attempt: 1, index: 0 };
    const id = (await startStep(vm, ref, { command: "echo before; sleep 30" }, { timeoutMs: 300 }))!;
    expect(await ended(ref, id)).toEqual({ state: "ended", exitCode: 124, output: "before\n" });
  });

  it("is lost when the VM knows neither the command nor an exit code", async () => {
    expect(await observeStep(vm, { runUid: "uid-4", attempt: 1, index: 0 }, "no-such-command", heartbeats)).toMatchObject({ state: "lost" });
  });

  it("uploads files, reads them back, and removes a run's directory", async () => {
    await vm.upload("/workspace/in/data.txt", "a 'quoted' line\n");
    expect(await vm.read("in/data.txt")).toBe("a 'quoted' line\n");
    expect(await vm.read("in/none.txt")).toBeUndefined();
    await vm.removeDir(runPath("uid-1"));
    expect(await vm.read(`${runPath("uid-1")}/0/0/exit`)).toBeUndefined();
  });

  it("fails at once, running nothing, when the step's directory cannot be created (a file in its way), and says where", async () => {
    // A VM of its own: the file in the way would stop every other test's steps.
    const other = (await h.client.vms.allocate({ tier: "standard" })).vm_id;
    const blocked = new ForwardedVM({ baseURL: h.emu.baseURL, vmId: other, client: h.client });
    try {
      const ws = h.emu.runtimes.get(other)!.workspace;
      writeFileSync(join(ws, ".agent-operator"), "not a directory\n");
      const ref = { runUid: "uid-6", attempt: 1, index: 0 };
      const id = (await startStep(blocked, ref, { command: "echo ran > ran.txt" }, {}))!;
      await waitFor(async () => (await blocked.status(id))?.running === false);
      expect((await blocked.status(id))?.exitCode).toBe(SETUP_FAILED);
      const seen = await observeStep(blocked, ref, id, heartbeats);
      expect(seen).toEqual<StepObservation>({ state: "setupFailed", message: expect.stringContaining("the step's directory /workspace/.agent-operator/runs/uid-6/1/0") });
      expect(existsSync(join(ws, "ran.txt"))).toBe(false);
    } finally {
      await blocked.close();
    }
  });

  it("reports the exit code of a step that removed its own directory (a git clean of /workspace), even 213 or 214", async () => {
    for (const [index, code] of [[0, 214], [1, 213], [2, 3]] as const) {
      const ref = { runUid: "uid-clean", attempt: 1, index };
      const id = (await startStep(vm, ref, { command: `echo building; rm -rf .agent-operator; exit ${code}` }, {}))!;
      const o = await waitFor(async () => {
        const seen = await observeStep(vm, ref, id, heartbeats);
        return seen.state === "running" ? undefined : seen;
      }, { description: "the step ended" });
      expect(o).toMatchObject({ state: "ended", exitCode: code });
    }
  });

  it("says so when the VM itself is gone", async () => {
    const other = (await h.client.vms.allocate({ tier: "standard" })).vm_id;
    const gone = new ForwardedVM({ baseURL: h.emu.baseURL, vmId: other, client: h.client });
    await h.client.vms.release(other, false);
    await expect(gone.status("x")).rejects.toBeInstanceOf(VMGoneError);
    await expect(gone.read("x")).rejects.toBeInstanceOf(VMGoneError);
    await gone.close();
  });
});

describe("a step whose command's id the VM does not name (emulator knob agentdNoStartEvent)", () => {
  beforeAll(() => h.emu.setOptions({ agentdNoStartEvent: true }));
  afterAll(() => h.emu.setOptions({ agentdNoStartEvent: false }));

  it("is followed by its files: running while its heartbeat beats, then ended with its exit code and output", async () => {
    const ref = { runUid: "uid-noid", attempt: 1, index: 0 };
    const gate = join(workspace(), "gate-uid-noid");
    const id = await startStep(vm, ref, { command: `echo working; while [ ! -f ${shellQuote(gate)} ]; do sleep 0.05; done; exit 5` }, {});
    expect(id).toBeUndefined();
    const alive = join(workspace(), stepDir(ref.runUid, ref.attempt, ref.index), "alive");
    await waitFor(() => existsSync(alive));
    const first = readFileSync(alive, "utf8");
    expect(await observeStep(vm, ref, undefined, heartbeats)).toEqual<StepObservation>({ state: "running" });
    // It beats (a new count every HEARTBEAT_SECONDS) while the step runs.
    await waitFor(() => readFileSync(alive, "utf8") !== first, { timeoutMs: 10_000, description: "the next heartbeat" });
    writeFileSync(gate, "");
    expect(await ended(ref, undefined)).toEqual({ state: "ended", exitCode: 5, output: "working\n" });
  });

  it("is stopped through its cancel file: the step's process gets SIGTERM, and the step ends with 143", async () => {
    const ref = { runUid: "uid-noid", attempt: 1, index: 1 };
    await startStep(vm, ref, { command: "echo begun; sleep 60; echo never" }, {});
    const pid = join(workspace(), stepDir(ref.runUid, ref.attempt, ref.index), "pid");
    await waitFor(() => existsSync(pid) && readFileSync(pid, "utf8").trim() !== "");
    await stopStep(vm, ref, undefined);
    // (The step's shell may say "Terminated" after it: the step's output file is its stderr too.)
    const o = await ended(ref, undefined);
    expect(o).toMatchObject({ state: "ended", exitCode: 143, output: expect.stringMatching(/^begun\n/) });
    expect(JSON.stringify(o)).not.toContain("never");
  });
});

describe("the step script", () => {
  it("quotes anything as one shell word", () => {
    expect(shellQuote("it's")).toBe(`'it'\\''s'`);
    expect(stepScript("d", { command: "echo '$HOME'" })).toContain(`/bin/sh -c 'echo '\\''$HOME'\\'''`);
  });

  it("exits ALREADY_STARTED only for a marker that is there, and SETUP_FAILED when the directory cannot be made", () => {
    const dir = stepDir("uid-1", 1, 0);
    const script = stepScript(dir, { command: "echo hello > ran.txt" });
    const sh = (cwd: string) => spawnSync("/bin/sh", ["-c", script], { cwd }).status;
    const root = mkdtempSync(join(tmpdir(), "step-script-"));
    try {
      // A file named .agent-operator in the way: nothing runs, and it is not a second start.
      const blocked = join(root, "blocked");
      mkdirSync(blocked);
      writeFileSync(join(blocked, ".agent-operator"), "");
      expect(sh(blocked)).toBe(SETUP_FAILED);
      expect(existsSync(join(blocked, "ran.txt"))).toBe(false);
      // The first start runs the command; a second one finds the marker and runs nothing.
      const ok = join(root, "ok");
      mkdirSync(ok);
      expect(sh(ok)).toBe(0);
      expect(readFileSync(join(ok, dir, "exit"), "utf8")).toBe("0\n");
      rmSync(join(ok, "ran.txt"));
      expect(sh(ok)).toBe(ALREADY_STARTED);
      expect(existsSync(join(ok, "ran.txt"))).toBe(false);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it("on a cancel file stops the step and what it started (not only its shell), and the step ends with 143", async () => {
    const root = mkdtempSync(join(tmpdir(), "step-cancel-"));
    const dir = stepDir("uid-c", 1, 0);
    // A compound command: its shell waits for a child that would write a file 3 s on.
    const script = stepScript(dir, { command: "echo begun; sleep 3 && echo leaked > leaked.txt" });
    const child = spawn("/bin/sh", ["-c", script], { cwd: root, stdio: "ignore" });
    const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
    try {
      await waitFor(() => existsSync(join(root, dir, "pid")) && readFileSync(join(root, dir, "pid"), "utf8").trim() !== "");
      writeFileSync(join(root, dir, "cancel"), "");
      expect(await exited).toBe(143);
      expect(readFileSync(join(root, dir, "exit"), "utf8")).toBe("143\n");
      await new Promise((resolve) => setTimeout(resolve, 4_000));
      expect(existsSync(join(root, "leaked.txt"))).toBe(false);
    } finally {
      child.kill("SIGKILL");
      rmSync(root, { recursive: true, force: true });
    }
  }, 20_000);

  it("on a cancel file stops the step whose pid file the watcher could not read (the run's directory removed before it did)", async () => {
    const root = mkdtempSync(join(tmpdir(), "step-nopid-"));
    const dir = stepDir("uid-p", 1, 0);
    // A directory where the pid file would go: the step cannot write its pid, as if the file had
    // gone with the run's directory before the watcher's first read of it.
    mkdirSync(join(root, dir, "pid"), { recursive: true });
    const script = stepScript(dir, { command: "echo begun; sleep 30" });
    const child = spawn("/bin/sh", ["-c", script], { cwd: root, stdio: "ignore" });
    const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
    try {
      await waitFor(() => existsSync(join(root, dir, "alive")) && readFileSync(join(root, dir, "output"), "utf8") !== "");
      writeFileSync(join(root, dir, "cancel"), "");
      expect(await exited).toBe(143);
      expect(readFileSync(join(root, dir, "exit"), "utf8")).toBe("143\n");
    } finally {
      child.kill("SIGKILL");
      rmSync(root, { recursive: true, force: true });
    }
  }, 20_000);

  it("writes the exit code where the step's directory is, even if the step made its working directory anew", () => {
    const root = mkdtempSync(join(tmpdir(), "step-anew-"));
    const ws = join(root, "ws");
    mkdirSync(ws);
    const dir = stepDir("uid-n", 1, 0);
    try {
      const script = stepScript(dir, { command: `cd /; rm -rf ${shellQuote(ws)}; mkdir ${shellQuote(ws)}; cd ${shellQuote(ws)}; echo cloned > cloned.txt; exit 7` });
      expect(spawnSync("/bin/sh", ["-c", script], { cwd: ws }).status).toBe(7);
      expect(readFileSync(join(ws, dir, "exit"), "utf8")).toBe("7\n");
      expect(readFileSync(join(ws, "cloned.txt"), "utf8")).toBe("cloned\n");
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

describe("a step, against a scripted VM", () => {
  /** A VM whose one command ended with `exitCode`, with these files (absolute paths); records what it was sent. */
  function scripted(exitCode: number, files: Record<string, string> = {}) {
    const sent = { cwd: [] as Array<string | undefined>, paths: [] as string[] };
    const vm = {
      start: async (_script: string, opts: { cwd?: string }) => {
        sent.cwd.push(opts.cwd);
        return "c1";
      },
      status: async (id: string): Promise<CommandStatus> => ({ id, running: false, exitCode }),
      read: async (path: string) => {
        sent.paths.push(path);
        return files[path];
      },
    } as unknown as RunVM;
    return { vm, sent };
  }
  const ref = { runUid: "uid-7", attempt: 1, index: 0 };
  const dir = "/workspace/.agent-operator/runs/uid-7/1/0";

  it("starts in /workspace and reads the step's files by absolute path", async () => {
    const { vm, sent } = scripted(0, { [`${dir}/exit`]: "3\n" });
    await startStep(vm, ref, { command: "true" }, {});
    expect(sent.cwd).toEqual(["/workspace"]);
    expect(await observeStep(vm, ref, "c1", heartbeats)).toEqual<StepObservation>({ state: "ended", exitCode: 3, outputPath: `${dir}/output` });
    expect(sent.paths).toEqual([`${dir}/exit`]);
  });

  it("reads SETUP_FAILED with the marker there as the step's own exit code (it did start)", async () => {
    const { vm } = scripted(SETUP_FAILED, { [`${dir}/started`]: "" });
    expect(await observeStep(vm, ref, "c1", heartbeats)).toEqual<StepObservation>({ state: "ended", exitCode: SETUP_FAILED, outputPath: `${dir}/output` });
    const none = scripted(SETUP_FAILED).vm;
    expect((await observeStep(none, ref, "c1", heartbeats)).state).toBe("setupFailed");
  });

  it("gives a step up once its heartbeat has not changed for HEARTBEAT_SILENCE_MS and it left no exit code, on this process's clock", async () => {
    const seen = new Heartbeats();
    const at = (index: number): string => `/workspace/.agent-operator/runs/uid-7/1/${index}`;
    const files: Record<string, string> = { [`${at(1)}/started`]: "", [`${at(1)}/alive`]: "7\n", [`${at(2)}/started`]: "", [`${at(2)}/alive`]: "1\n" };
    const { vm } = scripted(0, files);
    const noId = { ...ref, index: 1 };
    const t0 = 1_000_000;
    expect(await observeStep(vm, noId, undefined, seen, t0)).toEqual<StepObservation>({ state: "running" });
    expect(await observeStep(vm, noId, undefined, seen, t0 + HEARTBEAT_SILENCE_MS)).toEqual<StepObservation>({ state: "running" });
    files[`${at(1)}/alive`] = "8\n"; // a beat: the silence counts again from here
    expect(await observeStep(vm, noId, undefined, seen, t0 + HEARTBEAT_SILENCE_MS + 1)).toEqual<StepObservation>({ state: "running" });
    expect(await observeStep(vm, noId, undefined, seen, t0 + 2 * HEARTBEAT_SILENCE_MS)).toEqual<StepObservation>({ state: "running" });
    expect(await observeStep(vm, noId, undefined, seen, t0 + 2 * HEARTBEAT_SILENCE_MS + 2)).toEqual<StepObservation>({
      state: "lost",
      message: expect.stringContaining("heartbeat (/workspace/.agent-operator/runs/uid-7/1/1/alive) stopped for 30s and it left no exit code") as string,
      began: true, // what may still run of it is stopped before the next attempt
    });
    // A second start's id (it ran nothing) does not tell whether the step runs: the heartbeat does.
    const second = scripted(ALREADY_STARTED, files).vm;
    const other = { ...ref, index: 2 };
    expect(await observeStep(second, other, "c1", seen, t0)).toEqual<StepObservation>({ state: "running" });
    expect((await observeStep(second, other, "c1", seen, t0 + HEARTBEAT_SILENCE_MS + 1)).state).toBe("lost");
    // A step that left no trace at all, started without an id (its start's answer cut before
    // the VM had the command?): given the same time, then started again once, then lost.
    const empty = scripted(0).vm;
    const nothing = { ...ref, index: 3 };
    expect(await observeStep(empty, nothing, undefined, seen, t0)).toEqual<StepObservation>({ state: "running" });
    expect(await observeStep(empty, nothing, undefined, seen, t0 + HEARTBEAT_SILENCE_MS + 1)).toMatchObject({ state: "notStarted", message: expect.stringContaining("left no trace") });
    const again = t0 + HEARTBEAT_SILENCE_MS + 2;
    expect(await observeStep(empty, nothing, undefined, seen, again)).toEqual<StepObservation>({ state: "running" });
    expect(await observeStep(empty, nothing, undefined, seen, again + HEARTBEAT_SILENCE_MS + 1)).toMatchObject({ state: "lost", message: expect.stringContaining("left no trace"), began: false });
  });

  it("stops a step by its cancel file, which must land when the id is not known, and is a second chance after a kill by id", async () => {
    const calls: string[] = [];
    const vm = (uploadFails: boolean) =>
      ({
        kill: async (id: string) => void calls.push(`kill ${id}`),
        upload: async (path: string) => {
          calls.push(`upload ${path}`);
          if (uploadFails) throw new Error("no space left on device");
        },
      }) as unknown as RunVM;
    await stopStep(vm(false), ref, "c1");
    expect(calls).toEqual(["kill c1", `upload ${dir}/cancel`]);
    // A full disk does not hold a deletion up once the kill by id went through...
    await expect(stopStep(vm(true), ref, "c1")).resolves.toBeUndefined();
    // ...but without an id the cancel file is the stop.
    await expect(stopStep(vm(true), ref, undefined)).rejects.toThrow("no space left on device");
  });
});
