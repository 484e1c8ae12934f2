// A step in a real (emulated) VM: started, followed, and started twice for one attempt (the
// operator killed between starting it and recording its command id) without running twice.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../../../dev/wait.js";
import { ALREADY_STARTED, runDir, shellQuote, stepScript } from "../../../src/runs/script.js";
import { observeStep, startStep, type StepObservation } from "../../../src/runs/steps.js";
import { ForwardedVM, VMGoneError } from "../../../src/runs/vm.js";
import { start, type Harness } from "../service/helpers.js";

let h: Harness;
let vmId: string;
let vm: ForwardedVM;

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
const ended = (ref: Parameters<typeof observeStep>[1], id: string) =>
  waitFor(async () => {
    const o = await observeStep(vm, ref, id);
    if (o.state !== "ended") return o.state === "running" ? undefined : o;
    const printed = await vm.readEnds(o.outputPath, 1 << 20, 0);
    return { state: o.state, exitCode: o.exitCode, output: printed?.head.toString("utf8") };
  }, { description: "the step ended" });

describe("a step in the VM", () => {
  it("runs a command with the run's env and reports its exit code and output", async () => {
    const ref = { runUid: "uid-1", attempt: 1, index: 0 };
    const id = await startStep(vm, ref, { command: 'echo "hi $WHO"; echo oops >&2; exit 4' }, { envs: { WHO: "there" } });
    expect(await ended(ref, id)).toEqual({ state: "ended", exitCode: 4, output: "hi there\noops\n" });
  });

  it("runs python code", async () => {
    const ref = { runUid: "uid-1", attempt: 1, index: 1 };
    const id = await startStep(vm, ref, { language: "python", code: "import sys\nprint('it''s', sum(range(10)))\nsys.exit(0)" }, {});
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
    const first = await startStep(vm, ref, step, {});
    // The operator dies here, before recording `first`; the next one starts the step again.
    const second = await startStep(vm, ref, step, {});
    await waitFor(async () => (await vm.status(second))?.running === false);
    expect((await vm.status(second))?.exitCode).toBe(ALREADY_STARTED);
    // Followed by the second id, the step is still running (the first start is at work)...
    expect(await observeStep(vm, ref, second)).toEqual<StepObservation>({ state: "running" });
    writeFileSync(gate, "");
    // ...and ends as the first start ends, with its output.
    expect(await ended(ref, second)).toEqual({ state: "ended", exitCode: 7, output: "done\n" });
    expect(await ended(ref, first)).toEqual({ state: "ended", exitCode: 7, output: "done\n" });
    expect(readFileSync(join(workspace(), "twice.txt"), "utf8")).toBe("ran\n");
    expect(rt.executions - before).toBe(2); // two commands, one of which ran nothing
    // Another attempt of the same run is another marker: it runs (the gate is open).
    const again = await startStep(vm, { ...ref, attempt: 2 }, step, {});
    expect(await ended({ ...ref, attempt: 2 }, again)).toMatchObject({ exitCode: 7 });
    expect(readFileSync(join(workspace(), "twice.txt"), "utf8")).toBe("ran\nran\n");
  });

  it("reports a step killed by the VM's timeout with the command's exit code", async () => {
    const ref = { runUid: "uid-3", attempt: 1, index: 0 };
    const id = await startStep(vm, ref, { command: "echo before; sleep 30" }, { timeoutMs: 300 });
    expect(await ended(ref, id)).toEqual({ state: "ended", exitCode: 124, output: "before\n" });
  });

  it("is lost when the VM knows neither the command nor an exit code", async () => {
    expect(await observeStep(vm, { runUid: "uid-4", attempt: 1, index: 0 }, "no-such-command")).toMatchObject({ state: "lost" });
  });

  it("uploads files, reads them back, and removes a run's directory", async () => {
    await vm.upload("/workspace/in/data.txt", "a 'quoted' line\n");
    expect(await vm.read("in/data.txt")).toBe("a 'quoted' line\n");
    expect(await vm.read("in/none.txt")).toBeUndefined();
    await vm.removeDir(runDir("uid-1"));
    expect(await vm.read(`${runDir("uid-1")}/0/0/exit`)).toBeUndefined();
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

describe("the step script", () => {
  it("quotes anything as one shell word", () => {
    expect(shellQuote("it's")).toBe(`'it'\\''s'`);
    expect(stepScript("d", { command: "echo '$HOME'" })).toContain(`/bin/sh -c 'echo '\\''$HOME'\\'''`);
  });
});
