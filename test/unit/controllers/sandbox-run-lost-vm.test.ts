// A run whose step found its Sandbox's VM gone waits for the Sandbox's next VM rather than start
// its next attempt in the gone one, but not for ever: after a minute it tries the VM its Sandbox
// names again (a 404 that passes, such as a service list lagging behind, must not hold it).
import { describe, expect, it } from "vitest";
import type { Sandbox, SandboxRun } from "../../../src/api/index.js";
import { SandboxRunReconciler, type SandboxRunReconcilerOptions } from "../../../src/controllers/sandbox-run.js";
import { silentLogger } from "../../../src/runtime/logging.js";
import { FakeInformer, NS } from "./helpers.js";

const sandbox = (vmId: string): Sandbox =>
  ({
    metadata: { name: "box", namespace: NS, uid: "sb-uid", generation: 1 },
    spec: { tier: "standard" },
    status: { vmId, observedGeneration: 1, conditions: [{ type: "Ready", status: "True", reason: "Available", lastTransitionTime: "2030-01-01T00:00:00Z" }] },
  }) as unknown as Sandbox;

const run = { metadata: { name: "job", namespace: NS, uid: "run-uid", generation: 1 }, spec: { sandboxRef: { name: "box" }, steps: [{ name: "s", command: "true" }] } } as unknown as SandboxRun;

function reconciler(sandboxes: FakeInformer<Sandbox>, clock: { ms: number }): SandboxRunReconciler {
  const options = {
    runs: new FakeInformer<SandboxRun>().as<SandboxRun>(),
    sandboxes: sandboxes.as<Sandbox>(),
    // No usable Connection: the VMs cannot be read again, which the wait does not depend on.
    pool: { forResource: () => { throw new Error("no Connection in this test"); } },
    log: silentLogger,
    now: () => new Date(clock.ms),
  } as unknown as SandboxRunReconcilerOptions;
  return new SandboxRunReconciler(options);
}

describe("SandboxRun: a VM found gone", () => {
  it("waits up to a minute for another VM, then uses the one its Sandbox names", () => {
    const clock = { ms: Date.parse("2030-01-01T00:00:00Z") };
    const sandboxes = new FakeInformer<Sandbox>();
    sandboxes.set(sandbox("vm-a"));
    const r = reconciler(sandboxes, clock);
    expect(r.sandboxState(run, {})).toEqual({ state: "ready", vmId: "vm-a" });

    r.vmLost(run, "vm-a");
    const waiting = r.sandboxState(run, {});
    expect(waiting).toMatchObject({ state: "waiting", reason: "WaitingForSandbox" });
    expect(waiting.state === "waiting" && waiting.message).toContain("the VM vm-a of Sandbox \"box\" is gone");
    expect(r.lostVMWaitEnds(run)).toBe(clock.ms + 60_000);

    clock.ms += 59_000;
    expect(r.sandboxState(run, {}).state).toBe("waiting");

    // The Sandbox learnt of the loss and has another VM: no more waiting.
    sandboxes.set(sandbox("vm-b"));
    expect(r.sandboxState(run, {})).toEqual({ state: "ready", vmId: "vm-b" });

    // Or it never did (the 404 passed): after the minute the run goes ahead in the VM it names.
    sandboxes.set(sandbox("vm-a"));
    expect(r.sandboxState(run, {}).state).toBe("waiting");
    clock.ms += 1_000;
    expect(r.sandboxState(run, {})).toEqual({ state: "ready", vmId: "vm-a" });
    expect(r.lostVMWaitEnds(run)).toBeUndefined();
  });
});
