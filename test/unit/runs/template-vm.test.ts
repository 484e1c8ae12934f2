// A run's own VM (spec.sandboxTemplate) is found again by its marker rather than allocated
// twice, but not one its attempt found gone: the service's list may still show that one live.
// While the run runs, the VM is renewed as a Sandbox's is, with the template's own TTL.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { kindNames } from "../../../src/api/names.js";
import type { SandboxRun, Skill } from "../../../src/api/index.js";
import { ensureRunVM, keepRunVM, releaseRunVMs, type AllocationDeps } from "../../../src/runs/template-vm.js";
import { NS, World } from "../controllers/helpers.js";

let w: World;
beforeAll(async () => {
  w = await World.start();
});
afterAll(() => w.close());

function runOf(name: string, template: Record<string, unknown>, extra: Record<string, unknown> = {}): SandboxRun {
  return {
    apiVersion: "agentcompute.dev/v1alpha1",
    kind: "SandboxRun",
    metadata: { name, namespace: NS, uid: `run-uid-${name}`, generation: 1 },
    spec: { sandboxTemplate: { tier: "standard", ...template }, steps: [{ name: "s", command: "true" }], ...extra },
  } as unknown as SandboxRun;
}

const run = {
  apiVersion: "agentcompute.dev/v1alpha1",
  kind: "SandboxRun",
  metadata: { name: "job", namespace: NS, uid: "run-uid-template", generation: 1 },
  spec: { sandboxTemplate: { tier: "standard", ttlSeconds: 600 }, steps: [{ name: "s", command: "true" }] },
} as unknown as SandboxRun;

describe("ensureRunVM", () => {
  it("finds the run's VM by its marker, and allocates another in place of one found gone", async () => {
    const deps: AllocationDeps = { store: w.ctx.store, skills: w.informer(kindNames.skill).as<Skill>() as never, now: w.ctx.now };
    const before = w.emu.requests.filter((r) => r.operation === "vms.allocate").length;
    const allocations = () => w.emu.requests.filter((r) => r.operation === "vms.allocate").length - before;
    const first = await ensureRunVM(run, w.handle(), deps);
    expect(allocations()).toBe(1);
    // A retry before status holds the id (or after a crash): the same VM, nothing allocated.
    w.handle().vms.invalidate();
    expect(await ensureRunVM(run, w.handle(), deps)).toBe(first);
    expect(allocations()).toBe(1);
    // The attempt found it gone (a 404 through the forwarding route) while the list still shows it.
    expect(w.emu.state.vms.get(first)?.state).toBe("allocated");
    const second = await ensureRunVM(run, w.handle(), deps, first);
    expect(second).not.toBe(first);
    expect(allocations()).toBe(2);
  });
});

describe("keepRunVM", () => {
  const deps = (): AllocationDeps => ({ store: w.ctx.store, skills: w.informer(kindNames.skill).as<Skill>() as never, now: w.ctx.now });
  const now = () => w.clock.ms;
  // Answered renewals (the access token, an hour long, runs out on this clock: a 401 and the retry).
  const renewals = () => w.emu.requests.filter((r) => r.operation === "vms.renew" && r.status !== 401);
  const expiresAt = (id: string) => Date.parse(w.handle().vms.get(id)?.expires_at ?? "");

  it("renews renewBeforeSeconds before the VM runs out, for the template's TTL, and not before", async () => {
    const r = runOf("renewed", { ttlSeconds: 600 });
    const id = await ensureRunVM(r, w.handle(), deps());
    const before = renewals().length;
    const firstExpiry = expiresAt(id);
    // Default window: a fifth of 600 s, less up to 10 % of it as jitter.
    const due = await keepRunVM(r, w.handle(), id, now);
    expect(due).toBeLessThanOrEqual(firstExpiry - 120_000);
    expect(due).toBeGreaterThan(firstExpiry - 132_000);
    expect(renewals().length).toBe(before);

    w.advance(due! - w.clock.ms);
    const next = await keepRunVM(r, w.handle(), id, now);
    expect(renewals().length).toBe(before + 1);
    expect(w.emu.state.vms.get(id)?.ttl_seconds).toBe(600);
    expect(expiresAt(id)).toBe(w.clock.ms + 600_000); // the snapshot holds the service's answer
    expect(next).toBeGreaterThan(w.clock.ms + 600_000 - 132_000);
    // Looked at again at once: nothing to do until then.
    expect(await keepRunVM(r, w.handle(), id, now)).toBe(next);
    expect(renewals().length).toBe(before + 1);
  });

  it("keeps renewing a VM whose renewal got a bare 404 (a gateway's) while the VM is there; stops on the service's own 404", async () => {
    const r = runOf("gateway", { ttlSeconds: 600 });
    const id = await ensureRunVM(r, w.handle(), deps());
    const due = await keepRunVM(r, w.handle(), id, now);
    w.advance(due! - w.clock.ms);
    w.emu.injectFault({ method: "POST", path: `/compute/v1/vms/${id}/renew`, times: 1, action: { status: 404, body: "404 page not found" } });
    await expect(keepRunVM(r, w.handle(), id, now)).rejects.toThrow(/404/);
    expect(w.handle().vms.get(id)).toBeDefined();
    // Tried again: renewed.
    expect(await keepRunVM(r, w.handle(), id, now)).toBeGreaterThan(w.clock.ms);
    expect(expiresAt(id)).toBe(w.clock.ms + 600_000);

    w.emu.state.releaseVM(id);
    w.advance(600_000);
    expect(await keepRunVM(r, w.handle(), id, now)).toBeUndefined();
  });

  it("with a deadline, keeps the window of the template's own TTL, not of the lengthened one", async () => {
    const r = runOf("deadline", { ttlSeconds: 600 }, { activeDeadlineSeconds: 3600 });
    const id = await ensureRunVM(r, w.handle(), deps());
    expect(w.emu.state.vms.get(id)?.ttl_seconds).toBe(3900); // asked to live as long as the run may
    const before = renewals().length;
    // 3,900 s left: nothing is due until 120 s (and the jitter) before the end.
    const due = await keepRunVM(r, w.handle(), id, now);
    expect(due).toBeGreaterThan(expiresAt(id) - 132_000);
    expect(renewals().length).toBe(before);
    w.advance(due! - w.clock.ms);
    await keepRunVM(r, w.handle(), id, now);
    expect(renewals().length).toBe(before + 1);
    expect(w.emu.state.vms.get(id)?.ttl_seconds).toBe(600);
  });

  it("renews with the pool's maximum when the service refuses the template's TTL (the maximum lowered since), on that TTL's window", async () => {
    const r = runOf("capped", { ttlSeconds: 600 });
    const id = await ensureRunVM(r, w.handle(), deps());
    w.emu.state.updatePoolConfig({ max_vm_ttl_seconds: 300 });
    try {
      const before = renewals().length;
      const due = await keepRunVM(r, w.handle(), id, now);
      w.advance(due! - w.clock.ms);
      const next = await keepRunVM(r, w.handle(), id, now);
      expect(renewals().slice(before).map((x) => x.status)).toEqual([400, 200]);
      expect(w.emu.state.vms.get(id)?.expiresAt).toBe(w.clock.ms + 300_000);
      // Not due again at once: on the 300 s TTL's window (a fifth of it, at least 30 s: 60 s).
      expect(next).toBeGreaterThan(w.clock.ms + 300_000 - 66_000);
      expect(next).toBeLessThanOrEqual(w.clock.ms + 300_000 - 60_000);
      // Each renewal asks for the template's TTL first (the maximum may be raised again), then
      // for the 300 s the VM has (no pool read then).
      w.advance(next! - w.clock.ms);
      await keepRunVM(r, w.handle(), id, now);
      expect(renewals().slice(before).map((x) => x.status)).toEqual([400, 200, 400, 200]);
    } finally {
      w.emu.state.updatePoolConfig({ max_vm_ttl_seconds: 30 * 86_400 });
    }
  });

  it("renews a VM of a template with another orgId, which the Connection's list never shows: asked for by its id", async () => {
    const r = runOf("other-org", { ttlSeconds: 600, orgId: "org-other" });
    const id = await ensureRunVM(r, w.handle(), deps());
    expect(w.emu.state.vms.get(id)?.org_id).toBe("org-other");
    await w.handle().vms.refresh(); // the sync period's read of the list: the Connection's org's VMs only
    expect(w.handle().vms.get(id)).toBeUndefined();
    const before = renewals().length;
    const due = await keepRunVM(r, w.handle(), id, now);
    expect(due).toBeGreaterThan(w.clock.ms);
    w.advance(due! - w.clock.ms);
    await w.handle().vms.refresh();
    const next = await keepRunVM(r, w.handle(), id, now);
    expect(renewals().length).toBe(before + 1);
    expect(next).toBeGreaterThan(w.clock.ms + 600_000 - 132_000);
    // A bare 404 for it (a gateway's) says nothing of the VM: a failure, tried again, not its end.
    await w.handle().vms.refresh();
    w.emu.injectFault({ method: "GET", path: `/compute/v1/vms/${id}`, times: 1, action: { status: 404, body: "404 page not found" } });
    await expect(keepRunVM(r, w.handle(), id, now)).rejects.toMatchObject({ status: 404 });
    // The service's own 404: gone, nothing to renew.
    w.emu.state.expireVM(id);
    expect(await keepRunVM(r, w.handle(), id, now)).toBeUndefined();
    expect(renewals().length).toBe(before + 1);
  });

  it("does not renew a VM whose template says keepAlive: false", async () => {
    const r = runOf("let-go", { ttlSeconds: 600, keepAlive: false });
    const id = await ensureRunVM(r, w.handle(), deps());
    const before = renewals().length;
    w.advance(590_000); // 10 s left
    expect(await keepRunVM(r, w.handle(), id, now)).toBeUndefined();
    expect(renewals().length).toBe(before);
  });

  it("drops a VM the service no longer has (renew answers 404) and has nothing more to renew", async () => {
    const r = runOf("gone", { ttlSeconds: 600 });
    const id = await ensureRunVM(r, w.handle(), deps());
    w.emu.state.expireVM(id); // out of band; the snapshot still shows it live
    expect(w.handle().vms.get(id)).toBeDefined();
    w.advance(500_000);
    expect(await keepRunVM(r, w.handle(), id, now)).toBeUndefined();
    expect(renewals().at(-1)?.status).toBe(404);
    expect(w.handle().vms.get(id)).toBeUndefined();
    // Nothing in the snapshot to renew: no call at the next look either.
    const calls = renewals().length;
    expect(await keepRunVM(r, w.handle(), id, now)).toBeUndefined();
    expect(renewals().length).toBe(calls);
  });
});

describe("releaseRunVMs", () => {
  const deps = (): AllocationDeps => ({ store: w.ctx.store, skills: w.informer(kindNames.skill).as<Skill>() as never, now: w.ctx.now });
  const live = (id: string) => w.emu.state.vms.get(id)?.state === "allocated";

  it("does not take a release answered a bare 404 (a gateway's) for one done while the VM runs: it fails, and the retry releases it", async () => {
    const r = runOf("released", { ttlSeconds: 600 });
    const id = await ensureRunVM(r, w.handle(), deps());
    w.emu.injectFault({ method: "POST", path: `/compute/v1/vms/${id}/release`, times: 1, action: { status: 404, body: "404 page not found" } });
    await expect(releaseRunVMs(r, w.handle(), id)).rejects.toMatchObject({ status: 404 });
    expect(live(id)).toBe(true);
    await releaseRunVMs(r, w.handle(), id);
    expect(live(id)).toBe(false);
  });

  it("takes a release answered a bare 404 for one done when the service says the VM is gone", async () => {
    const r = runOf("ran-out", { ttlSeconds: 600 });
    const id = await ensureRunVM(r, w.handle(), deps());
    w.emu.state.expireVM(id);
    w.emu.injectFault({ method: "POST", path: `/compute/v1/vms/${id}/release`, times: 1, action: { status: 404, body: "404 page not found" } });
    await releaseRunVMs(r, w.handle(), id);
    expect(w.handle().vms.get(id)).toBeUndefined();
  });
});
