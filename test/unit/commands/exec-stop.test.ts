// `exec` stopped early (Ctrl-C, SIGTERM): the command is killed in the VM before exec exits,
// and where it cannot be (the VM's stream named no command id, or the kill failed), stderr says
// it may still be running, and in which VM, rather than exit as if it were killed. Against the
// in-process emulator's agentd, with exec's own streaming (runStreaming) and this process's
// stdout and stderr captured.
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { waitFor } from "../../../dev/wait.js";
import { runStreaming } from "../../../src/commands/exec.js";
import type { VMAccess } from "../../../src/commands/vm-access.js";
import { agentdOf, start, type Harness } from "../service/helpers.js";

let h: Harness;
let vmId: string;
let target: VMAccess;

beforeAll(async () => {
  h = await start();
  vmId = (await h.client.vms.allocate({ tier: "standard" })).vm_id;
  const vm = agentdOf(h, vmId);
  target = { vm, vmId, close: () => vm.close() };
});
afterAll(async () => {
  await target.close();
  await h.close();
});
afterEach(() => {
  vi.restoreAllMocks();
  h.emu.setOptions({ agentdNoStartEvent: false });
  h.emu.clearFaults();
});

/**
 * exec runs `command`, and gets `signal` once the command has printed "started"; how it exited,
 * what it wrote, and the command as the VM has it.
 */
async function interrupted(command: string, signal: "SIGINT" | "SIGTERM") {
  let stdout = "";
  let stderr = "";
  let sent = false;
  vi.spyOn(process.stdout, "write").mockImplementation((chunk: string | Uint8Array) => {
    stdout += String(chunk);
    if (!sent && stdout.includes("started")) {
      sent = true;
      // Once this write has returned, as a terminal's Ctrl-C comes between two of them.
      setImmediate(() => process.emit(signal));
    }
    return true;
  });
  vi.spyOn(process.stderr, "write").mockImplementation((chunk: string | Uint8Array) => {
    stderr += String(chunk);
    return true;
  });
  const began = Date.now();
  const code = await runStreaming(target, command, { cwd: "/workspace" }, "exec");
  vi.restoreAllMocks();
  const remote = [...h.emu.runtimes.get(vmId)!.commands.values()].find((c) => c.spec.command.includes(command));
  return { code, stdout, stderr, tookMs: Date.now() - began, remote };
}

describe("exec stopped early", () => {
  it("kills the command in the VM and exits 130, saying nothing more", async () => {
    const r = await interrupted("echo started; sleep 300 # killed", "SIGINT");
    expect(r).toMatchObject({ code: 130, stdout: "started\n", stderr: "" });
    await waitFor(() => r.remote?.running === false, { timeoutMs: 10_000, description: "the remote command to be killed" });
  });

  it("says the command may still be running, and where, when the VM's stream named no command id to kill it by", async () => {
    h.emu.setOptions({ agentdNoStartEvent: true });
    const r = await interrupted("echo started; sleep 300 # no id", "SIGINT");
    expect(r.code).toBe(130);
    expect(r.stderr).toBe(`exec: the command could not be stopped: the VM named no id to kill it by; it may still be running in VM ${vmId}\n`);
    expect(r.remote?.running).toBe(true);
    // Its output had begun: no id was coming, so no wait for one (5 s).
    expect(r.tookMs).toBeLessThan(4_000);
  });

  it("says the command may still be running when its kill failed (SIGTERM: 143)", async () => {
    h.emu.injectFault({ method: "DELETE", path: new RegExp(`/vms/${vmId}/r/v1/commands/[^/]+$`), times: 1, action: { status: 500, body: { code: 500, message: "agentd is restarting" } } });
    const r = await interrupted("echo started; sleep 300 # kill refused", "SIGTERM");
    expect(r.code).toBe(143);
    expect(r.stderr).toMatch(new RegExp(`^exec: command \\S+ could not be stopped: .*500.*; it may still be running in VM ${vmId}\\n$`));
    expect(r.remote?.running).toBe(true);
  });
});
