// A run's own VM (spec.sandboxTemplate) is found again by its marker rather than allocated
// twice, but not one its attempt found gone: the service's list may still show that one live.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { kindNames } from "../../../src/api/names.js";
import type { SandboxRun, Skill } from "../../../src/api/index.js";
import { ensureRunVM, type AllocationDeps } from "../../../src/runs/template-vm.js";
import { NS, World } from "../controllers/helpers.js";

let w: World;
beforeAll(async () => {
  w = await World.start();
});
afterAll(() => w.close());

const run = {
  apiVersion: "agentcompute.dev/v1alpha1",
  kind: "SandboxRun",
  metadata: { name: "job", namespace: NS, uid: "run-uid-template", generation: 1 },
  spec: { sandboxTemplate: { tier: "standard", ttlSeconds: 600 }, steps: [{ name: "s", command: "true" }] },
} as unknown as SandboxRun;

describe("ensureRunVM", () => {
  it("finds the run's VM by its marker, and allocates another in place of one found gone", async () => {
    const deps: AllocationDeps = { store: w.ctx.store, skills: w.informer(kindNames.skill).as<Skill>() as never, now: w.ctx.now };
    const allocations = () => w.emu.requests.filter((r) => r.operation === "vms.allocate").length;
    const first = await ensureRunVM(run, w.handle(), deps);
    expect(allocations()).toBe(1);
    // A retry before status holds the id (or after a crash): the same VM, nothing allocated.
    w.handle().vms.invalidate();
    expect(await ensureRunVM(run, w.handle(), deps)).toBe(first);
    expect(allocations()).toBe(1);
    // The attempt found it gone (a 404 through the forwarding route) while the list still shows it.
    expect(w.emu.state.vms.get(first)?.state).not.toBe("released");
    const second = await ensureRunVM(run, w.handle(), deps, first);
    expect(second).not.toBe(first);
    expect(allocations()).toBe(2);
  });
});
