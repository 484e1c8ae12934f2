// Sandbox: when a VM is renewed, replaced or left to expire, and what happens to VMs a lost
// allocation left behind: observe only reports them; the reconcile gives them back. Then a
// Sandbox moved in from another replica (sharding).
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Annotations, CONFIG_HASH_KEY, FINALIZER, MARKER_KEY, SECRETS_HASH_KEY } from "../../../src/api/names.js";
import type { Connection, Sandbox, SandboxStatus, Skill } from "../../../src/api/index.js";
import { allocationHash, renewalSoon, renewVMFor, sandboxes } from "../../../src/controllers/sandbox.js";
import { RetryNoLaterThan } from "../../../src/runtime/controller.js";
import { errorMessage } from "../../../src/lib/errors.js";
import { ServiceClient } from "../../../src/service/index.js";
import { API_KEY, condition, NS, ORG, secretOf, World } from "./helpers.js";

let w: World;
beforeEach(async () => {
  w = await World.start();
});
afterEach(async () => {
  await w.close();
});

const kind = () => w.kindOf(sandboxes);
const apply = (spec: Partial<Sandbox["spec"]>, name = "sb") =>
  w.apply<Sandbox>("sandboxes", { metadata: { name }, spec: { tier: "standard", ttlSeconds: 600, ...spec } });
const sandbox = (name = "sb") => w.get<Sandbox>("sandboxes", name);
const live = (id: string) => w.emu.state.vms.get(id)?.state === "allocated";
/** As after a sync period: the next observe reads the service's list again. */
const resync = () => w.handle().vms.invalidate();
/** The service answers 503 to every `method` on `path` from now on. */
const unavailable = (method: string, path: string | RegExp, errorCode = "unavailable") =>
  w.emu.injectFault({ method, path, times: 1_000, action: { status: 503, body: { code: 503, error_code: errorCode, message: "try again" } } });
/** The Sandbox deleted (kubectl delete: a deletion timestamp, the finalizer still there). */
const markDeleted = (): void => {
  w.apply<Sandbox>("sandboxes", { metadata: { name: "sb", deletionTimestamp: "2030-01-01T00:00:00Z", finalizers: sandbox().metadata.finalizers }, spec: sandbox().spec });
};

/** A Sandbox with its VM, deleted, whose VM's release will be answered a bare 404 (a gateway's) once: the VM's id. */
async function deletedWithBare404ToRelease(): Promise<string> {
  apply({});
  await w.reconcile(kind(), "sb");
  const vmId = sandbox().status?.vmId as string;
  markDeleted();
  w.emu.injectFault({ method: "POST", path: `/compute/v1/vms/${vmId}/release`, times: 1, action: { status: 404, body: "404 page not found" } });
  return vmId;
}

/** The error a reconcile threw (undefined if it did not). */
const reconcileError = (): Promise<unknown> =>
  w.reconcile(kind(), "sb").then(
    () => undefined,
    (err: unknown) => err,
  );

describe("a Sandbox's first pass after a restart (or a new leader, or a share moved in)", () => {
  it("goes on the priority lane when its renewal is due within two minutes by its status, as the VM's expiry is at least that near", () => {
    const now = Date.parse("2030-01-01T00:00:00Z");
    const at = (s: number) => new Date(now + s * 1000).toISOString();
    const box = (status: Partial<SandboxStatus>, spec: Partial<Sandbox["spec"]> = {}) =>
      ({ metadata: { name: "sb", namespace: NS, uid: "u" }, spec: { tier: "standard", ttlSeconds: 600, ...spec }, status }) as unknown as Sandbox;
    // ttl 600: renewed 120 s before it runs out.
    expect(renewalSoon(box({ vmId: "vm-1", expiresAt: at(200) }), now)).toBe(true); // due in 80 s
    expect(renewalSoon(box({ vmId: "vm-1", expiresAt: at(60) }), now)).toBe(true); // overdue
    expect(renewalSoon(box({ vmId: "vm-1", expiresAt: at(500) }), now)).toBe(false); // due in 380 s
    expect(renewalSoon(box({ expiresAt: at(60) }), now)).toBe(false); // no VM
    expect(renewalSoon(box({ vmId: "vm-1", expiresAt: at(60) }, { keepAlive: false }), now)).toBe(false); // not renewed
    expect(renewalSoon(box({ vmId: "vm-1", expiresAt: at(-600), state: "expired" }), now)).toBe(false); // gone: nothing to renew
  });
});

describe("a renewal (renewVMFor)", () => {
  it("is of use until the VM runs out: a hung attempt gives way to another before then, however long the client's timeout", async () => {
    const statuses: (number | "error")[] = [];
    const client = new ServiceClient({
      baseURL: w.emu.baseURL,
      authURL: w.emu.authURL,
      credentials: { apiKey: API_KEY },
      // The world's clock: the VM's expiry is on it.
      now: () => w.clock.ms,
      timeoutMs: 30_000,
      hooks: { onRequest: (ev) => ev.operation === "vms.renew" && statuses.push(ev.status) },
    });
    try {
      const vm = await client.vms.allocate({ tier: "standard", ttl_seconds: 600 });
      w.emu.injectFault({ method: "POST", path: `/compute/v1/vms/${vm.vm_id}/renew`, action: { delayMs: 8_000 } });
      // Due with 6 s left: the first attempt may take half of that.
      const expiresAt = new Date(w.clock.ms + 6_000).toISOString();
      const { renewed } = await renewVMFor({ client }, { id: vm.vm_id, state: "allocated", expires_at: expiresAt }, 600);
      expect(renewed.id).toBe(vm.vm_id);
      expect(statuses).toEqual(["error", 200]);
    } finally {
      await client.close();
    }
  });
});

describe("Sandbox", () => {
  it("allocates one VM and comes back, on the priority lane, when the renewal is due", async () => {
    apply({});
    // ttl 600 s, renewBefore a fifth of it: due 480 s after the allocation, less a jitter of
    // up to a tenth of the 120 s window.
    const result = await w.reconcile(kind(), "sb");
    expect(result).toMatchObject({ priority: true });
    expect((result as { requeueAfterMs: number }).requeueAfterMs).toBeGreaterThan(468_000);
    expect((result as { requeueAfterMs: number }).requeueAfterMs).toBeLessThanOrEqual(480_000);
    expect(w.writes()).toEqual(["vms.allocate"]);
    const vmId = sandbox().status?.vmId as string;
    expect(live(vmId)).toBe(true);
    expect(sandbox().status).toMatchObject({ renewals: 0, state: "allocated" });
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "True", reason: "Available" });
  });

  it("waits without a word for a Skill still being created; names the Skill's reason once it reports trouble", async () => {
    w.apply<Skill>("skills", { metadata: { name: "sk" }, spec: { content: "# c" } });
    apply({ skills: ["sk"] });
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(sandbox().status).toBeUndefined();
    expect(w.events).toEqual([]);

    w.setStatus("skills", "sk", { conditions: [{ type: "Ready", status: "False", reason: "ConnectionNotReady", lastTransitionTime: "2030-01-01T00:00:00Z" }] });
    await w.reconcile(kind(), "sb");
    expect(condition(sandbox(), "Ready")).toMatchObject({
      status: "False",
      reason: "WaitingForSkill",
      message: 'Skill "sk" (spec.skills) is not Ready yet: ConnectionNotReady',
    });
  });

  it("renews only once the renewal is due, and observe alone never renews", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.calls()).toEqual([]); // not even a read: the inventory is fresh

    w.advance(481_000);
    const observed = await kind().client(w.handle()).observe(sandbox());
    expect(observed.plan?.action).toBe("renew");
    expect(w.writes()).toEqual([]);

    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.renew"]);
    expect(sandbox().status?.renewals).toBe(1);
    expect(Date.parse(sandbox().status?.expiresAt ?? "")).toBe(w.clock.ms + 600_000);
  });

  it("reckons the next renewal from the TTL the service granted when it grants less than asked, without an error (not again a millisecond later, and again)", async () => {
    apply({ ttlSeconds: 3600 });
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    w.advance(2_881_000); // due: 719 s left of 3600
    // The service renews for 600 s only, and says so only in the answer.
    const granted = { id: vmId, state: "allocated", tier: "standard", ttl_seconds: 600, expires_at: new Date(w.clock.ms + 600_000).toISOString() };
    w.emu.injectFault({ method: "POST", path: `/compute/v1/vms/${vmId}/renew`, times: 1, action: { status: 200, body: granted } });
    w.calls();
    const result = (await w.reconcile(kind(), "sb")) as { requeueAfterMs: number };
    expect(w.writes()).toEqual(["vms.renew"]);
    // 600 s granted: renewed again a fifth of that (120 s, less up to 12 s of jitter) before it runs out.
    expect(result.requeueAfterMs).toBeGreaterThan(468_000);
    expect(result.requeueAfterMs).toBeLessThanOrEqual(480_000);
    // A pass before then (a resync, a watch event) does not renew it again, and status states
    // the cadence it has, not the spec's (2,880 s).
    w.advance(60_000);
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(sandbox().status?.renewEverySeconds).toBe(480);
  });

  it("does not take an expiry a few seconds short of the TTL asked (the answer's travel, the clocks' skew) for a cap: the cadence in status stays", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    expect(sandbox().status?.renewEverySeconds).toBe(480);
    w.advance(481_000); // due
    const skewed = { id: vmId, state: "allocated", tier: "standard", expires_at: new Date(w.clock.ms + 596_000).toISOString() };
    w.emu.injectFault({ method: "POST", path: `/compute/v1/vms/${vmId}/renew`, times: 1, action: { status: 200, body: skewed } });
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toContain("vms.renew");
    w.advance(10_000);
    await w.reconcile(kind(), "sb");
    expect(sandbox().status?.renewEverySeconds).toBe(480);
  });

  it("takes a renewal answered with an expiry already past for a failure: asked again before the VM runs out, not at once, over and over", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    w.advance(481_000); // due; 119 s left
    const past = { id: vmId, state: "allocated", tier: "standard", ttl_seconds: 600, expires_at: new Date(w.clock.ms - 1_000).toISOString() };
    w.emu.injectFault({ method: "POST", path: `/compute/v1/vms/${vmId}/renew`, times: 1, action: { status: 200, body: past } });
    const failed: unknown = await reconcileError();
    // A quarter of the time the VM has left, as after any failed renewal.
    expect(failed).toBeInstanceOf(RetryNoLaterThan);
    expect(failed).toMatchObject({ ms: 29_750, priority: true });
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "False", message: expect.stringContaining(`renewal of VM ${vmId} with an expiry already past`) });
    w.advance(29_750);
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.renew"]);
    expect(live(vmId)).toBe(true);
    expect(condition(sandbox(), "Ready")?.status).toBe("True");
  });

  it("retries a renewal the service refused once (a 400: a proxy's page, a one-off) before the VM runs out, not a sync period later, and keeps the VM", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    w.advance(481_000); // due; 119 s left
    w.emu.injectFault({ method: "POST", path: `/compute/v1/vms/${vmId}/renew`, times: 1, action: { status: 400, body: "<html>400 Bad Request</html>" } });
    const refused = (await w.reconcile(kind(), "sb")) as { requeueAfterMs: number; priority?: boolean };
    expect(refused.requeueAfterMs).toBeLessThanOrEqual(29_750);
    expect(refused.priority).toBe(true);
    w.advance(refused.requeueAfterMs);
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.renew"]);
    expect(sandbox().status?.vmId).toBe(vmId);
    expect(live(vmId)).toBe(true);
  });

  it("retries a failed renewal before the VM runs out when the API server fails the status write too (a network outage), not after a backoff", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    unavailable("POST", `/compute/v1/vms/${vmId}/renew`);
    w.writeFault = { path: /\/status$/, error: new Error("the API server cannot be reached") };
    w.advance(481_000); // due; 119 s left
    const failed: unknown = await reconcileError();
    expect(failed).toBeInstanceOf(RetryNoLaterThan);
    expect(failed).toMatchObject({ ms: 29_750, priority: true });
    w.writeFault = undefined;
  });

  it("does not replace a VM whose renewal got a bare 404 (a gateway's) while the VM is there: it is renewed again soon; a 404 of the service's own is its end", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    w.advance(481_000);
    w.emu.injectFault({ method: "POST", path: `/compute/v1/vms/${vmId}/renew`, times: 1, action: { status: 404, body: "404 page not found" } });
    w.calls();
    const failed: unknown = await reconcileError();
    expect(failed).toBeInstanceOf(RetryNoLaterThan);
    expect(w.writes()).toEqual(["vms.renew"]); // and a GET of the VM, no allocation
    expect(sandbox().status?.vmId).toBe(vmId);
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.renew"]);
    expect(live(vmId)).toBe(true);
    expect(sandbox().status?.vmId).toBe(vmId);
    // The gateway answers the GET that asks about the VM with the same bare 404: not known
    // either way, so not gone.
    w.advance(481_000);
    w.emu.injectFault({ method: "POST", path: `/compute/v1/vms/${vmId}/renew`, times: 1, action: { status: 404, body: "404 page not found" } });
    w.emu.injectFault({ method: "GET", path: `/compute/v1/vms/${vmId}`, times: 1, action: { status: 404, body: "404 page not found" } });
    expect(await reconcileError()).toBeInstanceOf(RetryNoLaterThan);
    expect(w.writes()).toEqual(["vms.renew"]);
    expect(sandbox().status?.vmId).toBe(vmId);
  });

  it("keeps its VM when the GET that reads it is answered a bare 404 (a gateway's): nothing allocated, nothing released; the service's own 404 is its end", async () => {
    // Polled every second: its VM is read by its id (one GET) once the snapshot is older than that.
    w.apply<Sandbox>("sandboxes", { metadata: { name: "sb", annotations: { [Annotations.pollInterval]: "1s" } }, spec: { tier: "standard", ttlSeconds: 600 } });
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    await new Promise((r) => setTimeout(r, 1_000));
    w.emu.injectFault({ method: "GET", path: `/compute/v1/vms/${vmId}`, times: 1, action: { status: 404, body: "404 page not found" } });
    w.calls();
    // A failed read, tried again before the VM runs out.
    expect(await reconcileError()).toBeInstanceOf(RetryNoLaterThan);
    expect(w.writes()).toEqual([]);
    expect(sandbox().status).toMatchObject({ vmId, state: "allocated" });
    expect(w.events.filter((e) => e.reason === "VMReplaced")).toEqual([]);
    // The next list shows it, and nothing else of the Sandbox's to give back: it runs on.
    resync();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(liveVMs()).toEqual([vmId]);
    expect(sandbox().status?.vmId).toBe(vmId);
    // The service's own 404 for it: gone, and replaced.
    w.emu.state.deleteVM(vmId);
    resync();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.allocate"]);
    expect(sandbox().status?.vmId).not.toBe(vmId);
    expect(w.events.at(-1)).toMatchObject({ type: "Warning", reason: "VMReplaced", message: expect.stringContaining(`VM ${vmId} is gone`) });
  });

  it("keeps its finalizer when the release at its deletion is answered a bare 404 (a gateway's) while the VM runs, and releases it on the retry", async () => {
    const vmId = await deletedWithBare404ToRelease();
    // Said so, with the way out should every 404 of the service come bare.
    expect(errorMessage(await reconcileError())).toMatch(/^vms.release: Not Found: 404 page not found.*, without the service's error body \(a gateway's\?\).*remove the finalizer by hand/);
    expect(sandbox().metadata.finalizers).toContain(FINALIZER);
    expect(live(vmId)).toBe(true);
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.release"]);
    expect(live(vmId)).toBe(false);
    expect(sandbox().metadata.finalizers ?? []).not.toContain(FINALIZER);
  });

  it("lets its finalizer go when the release at its deletion is answered a bare 404 and the service says the VM is gone", async () => {
    const vmId = await deletedWithBare404ToRelease();
    w.emu.state.expireVM(vmId); // ran out meanwhile: the GET that asks about it answers the service's own 404
    await w.reconcile(kind(), "sb");
    expect(sandbox().metadata.finalizers ?? []).not.toContain(FINALIZER);
  });

  it("retries a renewal the service failed no later than a quarter of the time the VM has left", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    unavailable("POST", `/compute/v1/vms/${vmId}/renew`);
    w.advance(481_000); // due; 119 s left
    const failed: unknown = await reconcileError();
    expect(failed).toBeInstanceOf(RetryNoLaterThan);
    expect(failed).toMatchObject({ ms: 29_750, priority: true });
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "False", reason: "ServiceUnavailable" });
  });

  it("renews its VM while the service's list of skills cannot be read", async () => {
    w.emu.state.createSkill({ name: "shared", content: "# made outside the cluster" });
    apply({ skills: ["shared"] });
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    unavailable("GET", "/compute/v1/skills");
    w.advance(481_000); // due
    w.handle().skills.invalidate(); // and the skills snapshot is past the sync period
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.renew"]);
    expect(w.emu.state.vms.get(vmId)?.expiresAt).toBe(w.clock.ms + 600_000);
  });

  it("renews its VM, looked up by its id, while the service's list of VMs cannot be read", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    unavailable("GET", "/compute/v1/vms");
    w.advance(481_000); // due
    resync(); // and the snapshot is past the sync period
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.renew"]);
    expect(w.emu.state.vms.get(vmId)?.expiresAt).toBe(w.clock.ms + 600_000);
    // The spec has not changed since the VM was found to match it: still Ready, no flapping.
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "True" });
  });

  it("does not say its VM matches a spec changed while the list of VMs cannot be read, and looks again soon, on its renewals' lane", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    unavailable("GET", "/compute/v1/vms");
    apply({ tier: "large" });
    resync();
    w.calls();
    const result = await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]); // no replacement on the old snapshot
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "False", reason: "ServiceUnavailable" });
    expect(condition(sandbox(), "Reconciling")).toMatchObject({ status: "True", message: expect.stringContaining("list of VMs cannot be read") });
    // The look takes the place of the renewal's timer: on the ordinary lane, behind a backlog
    // (a cold start), it could come after the VM ran out.
    expect(result).toEqual({ requeueAfterMs: 30_000, priority: true });
  });

  it("does not say its VM matches a changed spec it cannot compare it with (a Skill not Ready), and renews it meanwhile", async () => {
    w.apply<Skill>("skills", { metadata: { name: "sk" }, spec: { content: "# c" } });
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    apply({ tier: "large", skills: ["sk"] }); // the Skill is not Ready: no replacement can be made yet
    w.advance(481_000);
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.renew"]);
    expect(sandbox().status?.vmId).toBe(vmId);
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "False", reason: "WaitingForSkill" });
    expect(condition(sandbox(), "Reconciling")).toMatchObject({ status: "True" });
  });

  it("creates nothing while the list of VMs cannot be read: a lost allocation may have left one the old snapshot lacks", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    w.emu.state.releaseVM(sandbox().status?.vmId as string);
    const left = allocatedByPreviousOwner(); // an allocation whose answer was lost
    unavailable("GET", "/compute/v1/vms");
    resync();
    w.calls();
    expect(await reconcileError()).toBeDefined();
    expect(w.writes()).toEqual([]);
    expect(liveVMs()).toEqual([left]);
  });

  it("allocates nothing for a VM gone at a renewal made while the list of VMs cannot be read", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    allocatedByPreviousOwner(); // an allocation whose answer was lost: the old snapshot lacks it
    unavailable("GET", "/compute/v1/vms");
    w.emu.injectFault({ method: "POST", path: `/compute/v1/vms/${vmId}/renew`, times: 1, action: { status: 404, body: { code: 404, error_code: "not_found", message: "vm not found" } } });
    w.advance(481_000);
    resync();
    w.calls();
    await reconcileError();
    expect(w.writes()).toEqual(["vms.renew"]); // answered 404, and not replaced on the old snapshot
    // The pass that follows at once, the VM really gone and the list still unreadable: nothing either.
    w.emu.state.deleteVM(vmId);
    expect(await reconcileError()).toBeDefined();
    expect(w.writes()).toEqual([]);
  });

  it("plans no replacement while the list of VMs cannot be read, and renews the VM it has", async () => {
    const { first, replacement } = await replacedByPreviousOwner();
    unavailable("GET", "/compute/v1/vms");
    w.advance(481_000);
    resync();
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.renew"]);
    expect(liveVMs().sort()).toEqual([first, replacement].sort());
  });

  it("with a short TTL, comes back for the next renewal no sooner than 90 % of the time between renewals", async () => {
    apply({ ttlSeconds: 20 }); // renewBefore 19 s: a renewal every second
    for (let i = 0; i < 5; i++) {
      const { requeueAfterMs } = (await w.reconcile(kind(), "sb")) as { requeueAfterMs: number };
      expect(requeueAfterMs).toBeGreaterThanOrEqual(900);
      w.advance(requeueAfterMs);
    }
  });

  it("finds the renewal due when it wakes at the time it asked for, whichever pass asked", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    w.advance(60_000);
    // A pass that only observes (a resync) asks to come back for the renewal...
    const { requeueAfterMs } = (await w.reconcile(kind(), "sb")) as { requeueAfterMs: number };
    w.calls();
    w.advance(requeueAfterMs);
    // ...and then renews, rather than finding it not due yet and asking again a moment later.
    const after = (await w.reconcile(kind(), "sb")) as { requeueAfterMs: number };
    expect(w.writes()).toEqual(["vms.renew"]);
    expect(after.requeueAfterMs).toBeGreaterThan(400_000);
  });

  it("retries a read of its VM that failed before the VM runs out, however long the backoff has grown", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    unavailable("GET", "/compute/v1/vms");
    unavailable("GET", /^\/compute\/v1\/vms\/[^/]+$/);
    w.advance(481_000); // due; 119 s left
    resync();
    const failed: unknown = await reconcileError();
    expect(failed).toBeInstanceOf(RetryNoLaterThan);
    expect(failed).toMatchObject({ ms: 29_750, priority: true });
  });

  it("after a restart, retries a failed read of its VM within its renewal window, though status's expiresAt (reported every few minutes) is past", async () => {
    // Status is reported every ten minutes, as by default (run --sandbox-status-interval).
    const process = () => sandboxes({ ...w.ctx, options: { sandboxStatusIntervalMs: 600_000 } });
    const first = process();
    apply({ ttlSeconds: 60 }); // renewed every 30 s
    await w.reconcile(first, "sb");
    for (let i = 0; i < 3; i++) {
      w.advance(30_000);
      await w.reconcile(first, "sb");
    }
    const vmId = sandbox().status?.vmId as string;
    expect(Date.parse(sandbox().status?.expiresAt ?? "")).toBeLessThan(w.clock.ms);
    expect(w.emu.state.vms.get(vmId)?.expiresAt).toBeGreaterThan(w.clock.ms + 50_000);
    // A new process: no renewal of its own yet, and its first list of the VMs fails.
    w.restart();
    const restarted = process();
    w.handle().vms.remove(vmId);
    unavailable("GET", "/compute/v1/vms");
    unavailable("GET", /^\/compute\/v1\/vms\/[^/]+$/);
    resync();
    const failed: unknown = await w.reconcile(restarted, "sb").then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(failed).toBeInstanceOf(RetryNoLaterThan);
    expect(failed).toMatchObject({ ms: 7_500, priority: true });
  });

  it("replaces the VM when the tier changes: the new one first, then the old one released", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const before = sandbox().status?.vmId as string;
    w.calls();

    apply({ tier: "large" });
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.allocate", "vms.release"]);
    const after = sandbox().status?.vmId as string;
    expect(after).not.toBe(before);
    expect(live(before)).toBe(false);
    expect(w.emu.state.vms.get(after)?.tier).toBe("large");
    expect(w.events.at(-1)).toMatchObject({ type: "Normal", reason: "Replaced" });
  });

  it("keeps its VM when spec.skills are listed in another order, and one allocated when their order counted", async () => {
    for (const name of ["one", "two"]) w.emu.state.createSkill({ name, content: "# made outside the cluster" });
    apply({ skills: ["one", "two"] });
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    const asked = { tier: "standard", ttl_seconds: 600, org_id: ORG };
    expect(sandbox().status?.configHash).toBe(allocationHash(sandbox(), { ...asked, skills: ["one", "two"] }));
    apply({ skills: ["two", "one"] });
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "True" });

    // Status recorded by an operator that hashed the skills in the order listed: the same VM.
    const listed = allocationHash(sandbox(), { ...asked, skills: ["two", "one"] }, { legacy: "skillsAsListed" });
    expect(listed).not.toBe(sandbox().status?.configHash);
    w.setStatus("sandboxes", "sb", { ...sandbox().status, configHash: listed });
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(sandbox().status?.vmId).toBe(vmId);
    // ... and status now records the hash as computed today, so another order is the same VM too.
    expect(sandbox().status?.configHash).toBe(allocationHash(sandbox(), { ...asked, skills: ["one", "two"] }));
    apply({ skills: ["one", "two"] });
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);

    apply({ skills: ["two"] }); // a real change still replaces it
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.allocate", "vms.release"]);
  });

  it("keeps renewing its VM while the service refuses the replacement a spec change asks for", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    apply({ tier: "unknown-tier" }); // the service refuses to allocate it
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.allocate"]);
    expect(condition(sandbox(), "Stalled")).toMatchObject({ status: "True", reason: "ServiceRejected" });

    // Until the user fixes the spec, asking again is pointless; but the running VM is renewed.
    w.advance(481_000);
    const result = await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.renew"]);
    expect(w.emu.state.vms.get(vmId)?.expiresAt).toBe(w.clock.ms + 600_000);
    expect(condition(sandbox(), "Stalled")).toMatchObject({ status: "True", reason: "ServiceRejected" });
    expect(condition(sandbox(), "Ready")?.message).toContain("its VM is still renewed");
    expect(result).toMatchObject({ requeueAfterMs: expect.any(Number), priority: true });
    expect((result as { requeueAfterMs: number }).requeueAfterMs).toBeLessThanOrEqual(480_000);

    apply({ tier: "large" }); // fixed: replaced at once
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.allocate", "vms.release"]);
  });

  it("keeps a short value of an envFrom Secret out of the refusal it reports, and a short plain env value in it", async () => {
    w.secrets.set({ metadata: { name: "env", namespace: NS }, data: { PIN: Buffer.from("k9Zq").toString("base64") } });
    apply({ env: { MODE: "prod" }, envFrom: [{ secretRef: { name: "env" } }] });
    // A service that quotes the request it refuses.
    w.emu.injectFault({ method: "POST", path: "/compute/v1/vms/allocate", action: { status: 400, body: { code: 400, error_code: "invalid_env", message: "env PIN=k9Zq MODE=prod refused" } } });
    await w.reconcile(kind(), "sb").catch(() => undefined);
    const message = condition(sandbox(), "Ready")?.message ?? "";
    expect(message).toContain("env PIN=[REDACTED] MODE=prod refused");
    expect(JSON.stringify(sandbox().status)).not.toContain("k9Zq");
    expect(JSON.stringify(w.events)).not.toContain("k9Zq");
  });

  it("keeps renewing its VM while the replacement a spec change asks for cannot be allocated, and retries no later than the next renewal", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    unavailable("POST", "/compute/v1/vms/allocate", "pool_exhausted");
    apply({ tier: "large" });
    w.advance(481_000); // and the running VM's renewal is due
    w.calls();
    const failed = await reconcileError();
    expect(failed).toBeInstanceOf(RetryNoLaterThan);
    expect((failed as RetryNoLaterThan).ms).toBeLessThanOrEqual(480_000);
    expect(w.writes().filter((op) => op === "vms.renew")).toEqual(["vms.renew"]);
    expect(w.emu.state.vms.get(vmId)?.expiresAt).toBe(w.clock.ms + 600_000);
    expect(condition(sandbox(), "Ready")?.message).toContain("its VM is still renewed");
  });

  it("records the VM it allocated when its connection Secret cannot be written, and writes the Secret on the retry, no later than the renewal", async () => {
    apply({});
    w.writeFault = { path: /\/secrets/, error: new Error("secrets: the API server answered 503") };
    const failed = await reconcileError();
    // Status names the VM made (no second one on the retry), and the retry comes before the renewal.
    const vmId = sandbox().status?.vmId as string;
    expect(live(vmId)).toBe(true);
    expect(failed).toBeInstanceOf(RetryNoLaterThan);
    expect((failed as RetryNoLaterThan).ms).toBeLessThanOrEqual(480_000);
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "False", reason: "ReconcileError" });
    expect(w.secrets.get(NS, "sb-agentcompute")).toBeUndefined();

    w.writeFault = undefined;
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(sandbox().status?.vmId).toBe(vmId);
    const data = w.secrets.get(NS, "sb-agentcompute")?.data ?? {};
    expect(Buffer.from(data["vmId"] ?? "", "base64").toString()).toBe(vmId);
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "True" });
  });

  it("names the replacement in status when the old VM cannot be released, renews only the new one, and gives the old one back soon", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const old = sandbox().status?.vmId as string;
    unavailable("POST", `/compute/v1/vms/${old}/release`);
    apply({ tier: "large" });
    w.advance(481_000); // the old VM's renewal is due too
    w.calls();
    const result = await w.reconcile(kind(), "sb");
    const replacement = sandbox().status?.vmId as string;
    expect(replacement).not.toBe(old);
    expect(w.emu.state.vms.get(replacement)?.tier).toBe("large");
    expect(w.writes().filter((op) => op !== "vms.release")).toEqual(["vms.allocate"]); // the old VM is not renewed
    expect(w.events.at(-1)).toMatchObject({ type: "Warning", reason: "Replaced", message: expect.stringContaining(`releasing ${old} failed`) });
    expect(result).toMatchObject({ requeueAfterMs: 5_000 });
    expect(live(old)).toBe(true);

    w.emu.clearFaults();
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.release"]);
    expect(live(old)).toBe(false);
    expect(sandbox().status?.vmId).toBe(replacement);
  });

  /**
   * The Sandbox deleted after an allocation whose answer was lost: its finalizer stays for a
   * while (LANDING_MS), and the VM that lands meanwhile (of `tier`) is released at the next look.
   */
  async function deletedThenLandsLate(process: ReturnType<typeof kind>, cr: Sandbox, tier: string): Promise<void> {
    markDeleted();
    const result = (await w.reconcile(process, "sb")) as { requeueAfterMs: number } | undefined;
    expect(sandbox().metadata.finalizers).toContain(FINALIZER);
    expect(result?.requeueAfterMs).toBeGreaterThan(0);
    expect(result?.requeueAfterMs).toBeLessThanOrEqual(60_000);
    // The allocation lands now, after the first look.
    const late = w.emu.state.allocateVM({ tier, ttl_seconds: 600, org_id: ORG, metadata: { [MARKER_KEY]: cr.metadata.uid } });
    w.advance(60_001);
    await w.reconcile(process, "sb");
    expect(live(late.vm_id)).toBe(false);
    expect(sandbox().metadata.finalizers ?? []).not.toContain(FINALIZER);
  }

  it("deleted after a replacement whose allocation's answer was lost: keeps its finalizer a while, so a VM that lands late is released too", async () => {
    const process = kind(); // one operator process: it remembers the unknown outcome
    const cr = apply({});
    await w.reconcile(process, "sb");
    const old = sandbox().status?.vmId as string;
    w.emu.injectFault({ method: "POST", path: "/compute/v1/vms/allocate", times: 1, action: { drop: "before" } });
    apply({ tier: "large" });
    await w.reconcile(process, "sb").catch(() => undefined); // no answer: the VM may still be allocated
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "False", reason: "OutcomeUnknown" });
    await deletedThenLandsLate(process, cr, "large");
    expect(live(old)).toBe(false);
  });

  it("deleted after the VM gone at its renewal was replaced by an allocation whose answer was lost: keeps its finalizer a while, so a VM that lands late is released too", async () => {
    const process = kind();
    const cr = apply({});
    await w.reconcile(process, "sb");
    const first = sandbox().status?.vmId as string;
    w.advance(481_000);
    w.emu.state.releaseVM(first); // gone before its renewal
    w.emu.injectFault({ method: "POST", path: "/compute/v1/vms/allocate", times: 1, action: { drop: "before" } });
    w.calls();
    await w.reconcile(process, "sb").catch(() => undefined);
    expect(w.writes()).toEqual(["vms.renew", "vms.allocate"]);
    await deletedThenLandsLate(process, cr, "standard");
  });

  it("adopts the VM a crash left mid-replacement, and keeps it: the VM says which spec it was made for", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    apply({ tier: "large" });
    const lost = await w.losingStatus<SandboxStatus>("sandboxes", "sb", () => w.reconcile(kind(), "sb"));
    resync();
    w.calls();
    await w.reconcile(kind(), "sb");
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(sandbox().status?.vmId).toBe(lost.vmId);
    expect(live(lost.vmId as string)).toBe(true);
  });

  it("renews a VM it adopted while the VM's endpoint cannot be read, never shows the old VM's endpoint, and reads it once it can", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const old = sandbox().status?.vmId as string;
    expect(sandbox().status?.endpoint).toBeTruthy();
    w.emu.state.releaseVM(old);
    const adopted = allocatedByPreviousOwner(); // a replacement whose status write was lost
    unavailable("GET", `/compute/v1/vms/${adopted}/endpoint`);
    resync();
    w.calls();
    const result = await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(sandbox().status).toMatchObject({ vmId: adopted, endpoint: "", wsURL: "" });
    const secret = w.secrets.get(NS, "sb-agentcompute")?.data ?? {};
    expect(Buffer.from(secret["vmId"] ?? "", "base64").toString()).toBe(adopted);
    expect(secret["endpoint"]).toBe("");
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "False", reason: "EndpointUnknown", message: expect.stringContaining("endpoint could not be read") });
    expect((result as { requeueAfterMs: number }).requeueAfterMs).toBeLessThanOrEqual(30_000);

    // Paused meanwhile: the pause's conditions replace EndpointUnknown; status still says "unknown".
    const PAUSED = { [Annotations.paused]: "true" };
    w.apply<Sandbox>("sandboxes", { metadata: { name: "sb", annotations: PAUSED }, spec: { tier: "standard", ttlSeconds: 600 } });
    await w.reconcile(kind(), "sb");
    w.apply<Sandbox>("sandboxes", { metadata: { name: "sb", annotations: {} }, spec: { tier: "standard", ttlSeconds: 600 } });
    w.emu.clearFaults();
    await w.reconcile(kind(), "sb");
    expect(sandbox().status?.endpoint).toBe(w.emu.state.vms.get(adopted)?.endpoint ?? "unset in the emulator");
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "True" });
  });

  it("asks for an adopted VM's endpoint again only until the service answers, whatever keys the answer has", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    w.emu.state.releaseVM(sandbox().status?.vmId as string);
    const adopted = allocatedByPreviousOwner();
    const endpointPath = `/compute/v1/vms/${adopted}/endpoint`;
    unavailable("GET", endpointPath);
    resync();
    await w.reconcile(kind(), "sb");
    expect(sandbox().status).toMatchObject({ vmId: adopted, endpoint: "" });
    w.emu.clearFaults();
    w.emu.injectFault({ method: "GET", path: endpointPath, times: 1_000, action: { status: 200, body: {} } }); // keys not published: none today
    const endpointReads = () => w.emu.requests.filter((r) => r.operation === "vms.endpoint").length;
    w.calls();
    const sandboxes = kind(); // one process: what it read stays known between passes
    for (let i = 0; i < 3; i++) await w.reconcile(sandboxes, "sb");
    expect(endpointReads()).toBe(1);
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "True" });
  });

  it("never shows the old VM's endpoint or token for a VM it adopted whose endpoint answer or record lacks them", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const secretOf = () => Object.fromEntries(Object.entries(w.secrets.get(NS, "sb-agentcompute")?.data ?? {}).map(([k, v]) => [k, Buffer.from(v, "base64").toString()]));
    expect(secretOf()).toMatchObject({ endpoint: expect.stringMatching(/./), token: expect.stringMatching(/./) });
    w.emu.state.releaseVM(sandbox().status?.vmId as string);
    const adopted = allocatedByPreviousOwner();
    const stored = w.emu.state.vms.get(adopted) as { token?: string };
    delete stored.token; // a record without its token
    w.emu.injectFault({ method: "GET", path: `/compute/v1/vms/${adopted}/endpoint`, times: 1_000, action: { status: 200, body: {} } });
    resync();
    await w.reconcile(kind(), "sb");
    expect(sandbox().status).toMatchObject({ vmId: adopted, endpoint: "", wsURL: "" });
    expect(secretOf()).toMatchObject({ vmId: adopted, endpoint: "", wsURL: "", token: "" });
  });

  it("keeps a VM imported with the adoption annotation, even one another resource made for another spec", async () => {
    const other = w.emu.state.allocateVM({
      tier: "large",
      ttl_seconds: 600,
      org_id: ORG,
      metadata: { [MARKER_KEY]: "uid-of-another-sandbox", [CONFIG_HASH_KEY]: "0123456789abcdef" },
    });
    w.apply<Sandbox>("sandboxes", { metadata: { name: "sb", annotations: { [Annotations.externalId]: other.vm_id } }, spec: { tier: "large", ttlSeconds: 600 } });
    await w.reconcile(kind(), "sb");
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(sandbox().status?.vmId).toBe(other.vm_id);
    expect(live(other.vm_id)).toBe(true);
  });

  it("does not replace a VM the adoption annotation names when the spec changes: says how to let it, and renews the VM meanwhile", async () => {
    const vm = w.emu.state.allocateVM({ tier: "standard", ttl_seconds: 600, org_id: ORG, metadata: {} });
    const adopt = (tier: string, annotations: Record<string, string>) =>
      w.apply<Sandbox>("sandboxes", { metadata: { name: "sb", annotations }, spec: { tier, ttlSeconds: 600 } });
    adopt("standard", { [Annotations.externalId]: vm.vm_id });
    await w.reconcile(kind(), "sb");
    expect(sandbox().status?.vmId).toBe(vm.vm_id);

    adopt("large", { [Annotations.externalId]: vm.vm_id });
    w.calls();
    await w.reconcile(kind(), "sb").catch(() => undefined);
    expect(w.writes()).toEqual([]);
    expect(condition(sandbox(), "Stalled")).toMatchObject({ status: "True", reason: "AdoptedVMNotReplaced" });
    expect(condition(sandbox(), "Stalled")?.message).toContain(`remove the annotation ${Annotations.externalId}`);
    expect(condition(sandbox(), "Ready")?.message).toContain("its VM is still renewed");
    w.advance(481_000);
    await w.reconcile(kind(), "sb").catch(() => undefined);
    expect(w.writes()).toEqual(["vms.renew"]);
    expect(live(vm.vm_id)).toBe(true);

    // The annotation removed: replaced (the new VM first), and the new one is the one kept.
    adopt("large", {});
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.allocate", "vms.release"]);
    const replacement = sandbox().status?.vmId as string;
    expect(replacement).not.toBe(vm.vm_id);
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "True" });
    w.advance(481_000);
    await w.reconcile(kind(), "sb");
    // (Its renewal, after the token ran out on the clock moved on: a 401, then the same again.)
    expect(new Set(w.writes())).toEqual(new Set(["vms.renew"]));
    expect(w.emu.state.vms.get(replacement)?.expiresAt).toBe(w.clock.ms + 600_000);
    expect(live(replacement)).toBe(true);
  });

  it("does not allocate a VM in place of an adopted one found gone at its renewal, nor without Create: says it is gone", async () => {
    for (const [annotations, managementPolicies, reason] of [
      [true, undefined, "ExternalNotFound"],
      [false, ["Observe", "Update", "Delete"], "ExternalNotFound"],
    ] as const) {
      const vm = w.emu.state.allocateVM({ tier: "standard", ttl_seconds: 600, org_id: ORG, metadata: {} });
      w.apply<Sandbox>("sandboxes", {
        metadata: { name: "sb", annotations: annotations ? { [Annotations.externalId]: vm.vm_id } : {} },
        spec: { tier: "standard", ttlSeconds: 600, ...(managementPolicies && { managementPolicies: [...managementPolicies] }) },
      });
      if (!annotations) w.setStatus("sandboxes", "sb", { vmId: vm.vm_id }); // imported before, its id in status
      await w.reconcile(kind(), "sb");
      expect(sandbox().status?.vmId).toBe(vm.vm_id);
      w.advance(481_000); // the renewal is due
      w.emu.state.expireVM(vm.vm_id); // gone out of band, the snapshot still shows it
      w.calls();
      await w.reconcile(kind(), "sb").catch(() => undefined);
      await w.reconcile(kind(), "sb").catch(() => undefined);
      // (A renewal's 401 and its retry, once the token has run out on the clock moved on.)
      expect(new Set(w.writes())).toEqual(new Set(["vms.renew"]));
      expect(condition(sandbox(), "Ready")).toMatchObject({ status: "False", reason });
    }
  });

  it("imported read-only ([Observe]): never renewed, and comes back once its VM has run out, not in a loop meanwhile", async () => {
    const vm = w.emu.state.allocateVM({ tier: "standard", ttl_seconds: 600, org_id: ORG, metadata: {} });
    w.apply<Sandbox>("sandboxes", {
      metadata: { name: "sb", annotations: { [Annotations.externalId]: vm.vm_id } },
      spec: { tier: "standard", ttlSeconds: 600, managementPolicies: ["Observe"] },
    });
    await w.reconcile(kind(), "sb");
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "True" });
    // Past the time a renewal would be due (480 s of 600): nothing is written, nothing is
    // drifted, and the next look is when the VM runs out.
    w.advance(500_000);
    const result = (await w.reconcile(kind(), "sb")) as { requeueAfterMs: number };
    expect(w.writes()).toEqual([]);
    expect(result.requeueAfterMs).toBeGreaterThan(99_000);
    expect(result.requeueAfterMs).toBeLessThanOrEqual(101_000);
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "True" });
    expect(condition(sandbox(), "Drifted")).toMatchObject({ status: "False" });
  });

  it("keepAlive false and paused: a VM that ran out is not Ready, and the message says it expired", async () => {
    apply({ keepAlive: false });
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    w.apply<Sandbox>("sandboxes", { metadata: { name: "sb", annotations: { [Annotations.paused]: "true" } }, spec: { tier: "standard", ttlSeconds: 600, keepAlive: false } });
    await w.reconcile(kind(), "sb");
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "True", reason: "ReconcilePaused" });
    w.advance(601_000); // it runs out
    resync();
    await w.reconcile(kind(), "sb");
    expect(sandbox().status?.state).toBe("expired");
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "False", reason: "ReconcilePaused" });
    expect(condition(sandbox(), "Ready")?.message).toContain(`VM ${vmId} expired`);
  });

  it("keepAlive false: a VM that ran out is reported Expired, neither renewed nor replaced", async () => {
    apply({ keepAlive: false });
    await w.reconcile(kind(), "sb");
    w.calls();

    w.advance(601_000);
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "False", reason: "Expired" });
    expect(condition(sandbox(), "Reconciling")?.status).toBe("False");
    expect(condition(sandbox(), "Stalled")?.status).toBe("False");
    // Said once, as every change of the Ready reason is.
    await w.reconcile(kind(), "sb");
    expect(w.events.filter((e) => e.reason === "Expired")).toEqual([expect.objectContaining({ type: "Warning" })]);
  });

  it("says its VM is gone while no replacement can be allocated (the pool exhausted): state gone, no endpoint, no connection Secret; then names the replacement", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    expect(w.secrets.get(NS, "sb-agentcompute")).toBeDefined();
    w.emu.state.deleteVM(vmId); // out of band
    resync();
    unavailable("POST", "/compute/v1/vms/allocate", "pool_exhausted");
    expect(await reconcileError()).toBeDefined();
    const st = sandbox().status;
    expect(st).toMatchObject({ vmId, state: "gone" });
    expect(st?.endpoint).toBeUndefined();
    expect(st?.wsURL).toBeUndefined();
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "False", reason: "ServiceUnavailable", message: expect.stringContaining(`VM ${vmId} is gone`) });
    // Nor does the connection Secret hand out the endpoint and token of a VM that is gone.
    expect(w.secrets.get(NS, "sb-agentcompute")).toBeUndefined();

    w.emu.clearFaults();
    await w.reconcile(kind(), "sb");
    const replacement = sandbox().status?.vmId as string;
    expect(replacement).not.toBe(vmId);
    expect(sandbox().status).toMatchObject({ state: "allocated", endpoint: w.emu.state.vms.get(replacement)?.endpoint });
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "True" });
    const secret = w.secrets.get(NS, "sb-agentcompute");
    expect(Buffer.from(secret?.data?.vmId ?? "", "base64").toString()).toBe(replacement);
  });

  it("says its VM is gone, at once, while the replacement waits for a Skill", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    w.apply<Skill>("skills", { metadata: { name: "sk" }, spec: { content: "# c" } });
    apply({ skills: ["sk"] }); // a Skill still being made: no new VM can load it yet
    w.emu.state.expireVM(vmId);
    resync();
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(sandbox().status).toMatchObject({ vmId, state: "gone" });
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "False", reason: "WaitingForSkill", message: expect.stringContaining(`VM ${vmId} is gone`) });
  });

  it("says its VM is gone when it is found so at its renewal and no replacement can be allocated", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    w.emu.state.deleteVM(vmId); // the snapshot still shows it live
    unavailable("POST", "/compute/v1/vms/allocate", "pool_exhausted");
    w.advance(481_000);
    expect(await reconcileError()).toBeDefined();
    expect(sandbox().status).toMatchObject({ vmId, state: "gone" });
    expect(condition(sandbox(), "Ready")?.message).toContain(`VM ${vmId} is gone`);
  });

  it("reports a VM a lost allocation left behind without releasing it; the reconcile gives it back", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    const stray = w.emu.state.allocateVM({ tier: "standard", ttl_seconds: 600, org_id: ORG, metadata: { [MARKER_KEY]: sandbox().metadata.uid } });
    resync();
    w.calls();

    const observed = await kind().client(w.handle()).observe(sandbox());
    expect(observed).toMatchObject({ exists: true, upToDate: true, leftovers: [stray.vm_id] });
    expect(w.writes()).toEqual([]);
    expect(live(stray.vm_id)).toBe(true);

    // Otherwise up to date: the leftover goes all the same, and the VM in status stays.
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.release"]);
    expect(live(stray.vm_id)).toBe(false);
    expect(sandbox().status?.vmId).toBe(vmId);
    expect(live(vmId)).toBe(true);
  });

  it("gives leftovers back the way spec.onDelete says", async () => {
    apply({ onDelete: "Delete" });
    await w.reconcile(kind(), "sb");
    const stray = w.emu.state.allocateVM({ tier: "standard", ttl_seconds: 600, org_id: ORG, metadata: { [MARKER_KEY]: sandbox().metadata.uid } });
    resync();
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.delete"]);
    expect(live(stray.vm_id)).toBe(false);
  });

  it("adopts the newest VM carrying its marker when status names none, and gives back the older", async () => {
    const cr = apply({});
    const older = w.emu.state.allocateVM({ tier: "standard", ttl_seconds: 600, org_id: ORG, metadata: { [MARKER_KEY]: cr.metadata.uid } });
    w.advance(1_000);
    const newer = w.emu.state.allocateVM({ tier: "standard", ttl_seconds: 600, org_id: ORG, metadata: { [MARKER_KEY]: cr.metadata.uid } });
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.release"]);
    expect(sandbox().status?.vmId).toBe(newer.vm_id);
    expect(live(older.vm_id)).toBe(false);
    expect(live(newer.vm_id)).toBe(true);
  });
});

describe("a Sandbox's envFrom Secrets", () => {
  const secret = (value: string) => w.secrets.set(secretOf("env", { TOKEN: value }));
  const withSecret = () => apply({ env: { MODE: "prod" }, envFrom: [{ secretRef: { name: "env" } }] });
  /** The hash an operator before this one recorded: the Secret's value in it. */
  const hashedWithValue = (value: string) =>
    allocationHash(sandbox(), { tier: "standard", ttl_seconds: 600, org_id: ORG, env: { TOKEN: value, MODE: "prod" } }, { legacy: "secretValues" });

  it("replaces the VM when a value changes, and status.configHash tells nothing of the values (a view of the Sandbox cannot guess them)", async () => {
    secret("pin-1234");
    withSecret();
    await w.reconcile(kind(), "sb");
    const { vmId: first, configHash } = sandbox().status ?? {};
    expect(configHash).not.toBe(hashedWithValue("pin-1234"));

    secret("pin-5678");
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.allocate", "vms.release"]);
    expect(sandbox().status?.vmId).not.toBe(first);
    expect(w.emu.state.vms.get(sandbox().status?.vmId as string)?.env).toMatchObject({ TOKEN: "pin-5678" });
    // The same, whatever the value: nothing to try guesses against.
    expect(sandbox().status?.configHash).toBe(configHash);
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
  });

  it("keeps a VM whose status an operator before this one recorded with the values, and records it anew where the VM tells a rotation", async () => {
    secret("pin-1234");
    withSecret();
    await w.reconcile(kind(), "sb");
    const { vmId, configHash } = sandbox().status ?? {};
    w.setStatus("sandboxes", "sb", { ...sandbox().status, configHash: hashedWithValue("pin-1234") });
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(sandbox().status).toMatchObject({ vmId, configHash });

    secret("pin-5678");
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.allocate", "vms.release"]);
  });

  it("keeps the hash with the values of a VM allocated before its metadata recorded them, so that a rotation still replaces it", async () => {
    secret("pin-1234");
    withSecret();
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    const vm = w.emu.state.vms.get(vmId)!;
    vm.metadata[CONFIG_HASH_KEY] = hashedWithValue("pin-1234");
    delete vm.metadata[SECRETS_HASH_KEY];
    resync();
    const legacy = hashedWithValue("pin-1234");
    w.setStatus("sandboxes", "sb", { ...sandbox().status, configHash: legacy });
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(sandbox().status).toMatchObject({ vmId, configHash: legacy });

    secret("pin-5678");
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.allocate", "vms.release"]);
    expect(sandbox().status?.configHash).not.toBe(legacy);
  });

  it("keeps the hash with the values of such a VM recorded with its skills as listed in the form with them as a set: a new order is the same VM", async () => {
    for (const name of ["one", "two"]) w.emu.state.createSkill({ name, content: "# made outside the cluster" });
    secret("pin-1234");
    apply({ env: { MODE: "prod" }, envFrom: [{ secretRef: { name: "env" } }], skills: ["two", "one"] });
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    const request = { tier: "standard", ttl_seconds: 600, org_id: ORG, skills: ["two", "one"], env: { TOKEN: "pin-1234", MODE: "prod" } };
    const listed = allocationHash(sandbox(), request, { legacy: "skillsAsListed" });
    const vm = w.emu.state.vms.get(vmId)!;
    vm.metadata[CONFIG_HASH_KEY] = listed;
    delete vm.metadata[SECRETS_HASH_KEY];
    resync();
    w.setStatus("sandboxes", "sb", { ...sandbox().status, configHash: listed });
    await w.reconcile(kind(), "sb");
    expect(sandbox().status?.configHash).toBe(allocationHash(sandbox(), request, { legacy: "secretValues" }));

    apply({ env: { MODE: "prod" }, envFrom: [{ secretRef: { name: "env" } }], skills: ["one", "two"] });
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(sandbox().status?.vmId).toBe(vmId);
  });
});

/** The VMs the service keeps alive for the Sandbox (carrying its marker). */
const liveVMs = () => [...w.emu.state.vms.values()].filter((vm) => vm.metadata?.[MARKER_KEY] === sandbox().metadata.uid && vm.state === "allocated").map((vm) => vm.id);
/** What the previous owner did after this replica's last read: a VM allocated for the Sandbox as it is now. */
const allocatedByPreviousOwner = (tier = "standard") => {
  const request = { tier, ttl_seconds: 600, org_id: ORG };
  const metadata = { [MARKER_KEY]: sandbox().metadata.uid, [CONFIG_HASH_KEY]: allocationHash(sandbox(), request) };
  return w.emu.state.allocateVM({ ...request, metadata }).vm_id;
};
/** The Sandbox arrives here now. */
const arrives = () => w.handle().vms.arrived(sandbox().metadata.uid, Date.now());
/**
 * Status names a VM of the first spec; the spec changed to tier "large", and the previous owner
 * allocated the replacement for it and let go before status said so.
 */
const replacedByPreviousOwner = async (): Promise<{ first: string; replacement: string }> => {
  apply({});
  await w.reconcile(kind(), "sb");
  const first = sandbox().status?.vmId as string;
  apply({ tier: "large" });
  return { first, replacement: allocatedByPreviousOwner("large") };
};

// Moved in from another replica (sharding): its previous owner may have allocated a VM for it
// just before it let go or died, with status never saying so, after this replica last read the
// service. What it costs (nothing, when the snapshot holds the VM status names) and that it
// never allocates a second VM next to the one the previous owner left.
describe("a ttlSeconds the service refuses", () => {
  /** The answers to the renewals since the last look (a 401 and its retry with a new token aside). */
  const renewals = (): number[] => {
    const statuses = w.emu.requests.filter((r) => r.operation === "vms.renew" && r.status !== 401).map((r) => r.status as number);
    w.emu.clearRequests();
    return statuses;
  };
  it("costs no VM: it is renewed with the TTL it had, the refusal is reported, and the refused TTL is not asked for at each renewal after", async () => {
    apply({}); // 600 s
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    const expiry = () => w.emu.state.vms.get(vmId)?.expiresAt;
    w.emu.state.updatePoolConfig({ max_vm_ttl_seconds: 7_200 });
    apply({ ttlSeconds: 86_400 }); // above the pool's max
    w.emu.clearRequests();
    // Its window (a fifth of a day) is longer than the VM has left: renewed at once.
    const first = (await w.reconcile(kind(), "sb")) as { requeueAfterMs: number; priority: boolean };
    expect(renewals()).toEqual([400, 200]); // refused, then with 600 s
    expect(expiry()).toBe(w.clock.ms + 600_000);
    expect(condition(sandbox(), "Stalled")).toMatchObject({
      status: "True",
      reason: "ServiceRejected",
      message: expect.stringContaining("spec.ttlSeconds 86400 was refused at the VM's renewal: the VM is renewed with 600 s instead"),
    });
    expect(w.events.at(-1)).toMatchObject({ type: "Warning", reason: "ServiceRejected" });
    expect(sandbox().status?.renewEverySeconds).toBe(480);
    // Back for the next renewal, by the 600 s it is renewed with.
    expect(first.priority).toBe(true);
    expect(first.requeueAfterMs).toBeGreaterThan(420_000);
    expect(first.requeueAfterMs).toBeLessThanOrEqual(480_000);

    // A pass between two renewals (a resync, a Secret's event): the refusal stands, nothing sent.
    const warnings = w.events.length;
    w.advance(100_000);
    resync();
    w.emu.clearRequests();
    await w.reconcile(kind(), "sb");
    expect(renewals()).toEqual([]);
    expect(condition(sandbox(), "Stalled")).toMatchObject({ status: "True", reason: "ServiceRejected" });
    expect(condition(sandbox(), "Ready")?.status).toBe("False");
    expect(w.events.length).toBe(warnings);

    w.advance(first.requeueAfterMs - 100_000);
    w.emu.clearRequests();
    const second = (await w.reconcile(kind(), "sb")) as { requeueAfterMs: number };
    expect(renewals()).toEqual([200]);
    expect(expiry()).toBe(w.clock.ms + 600_000);
    expect(second.requeueAfterMs).toBeGreaterThan(420_000);
    expect(condition(sandbox(), "Stalled")).toMatchObject({ status: "True", reason: "ServiceRejected" });
    // Said again at each renewal, not once more each time.
    const said = condition(sandbox(), "Stalled")?.message;
    expect(said?.match(/its VM is still renewed meanwhile/g)).toHaveLength(1);
    w.advance(second.requeueAfterMs);
    await w.reconcile(kind(), "sb");
    expect(condition(sandbox(), "Stalled")?.message).toBe(said);

    // A TTL the service takes: applied at once (its window is longer than the VM has left too).
    apply({ ttlSeconds: 3_600 });
    w.emu.clearRequests();
    await w.reconcile(kind(), "sb");
    expect(renewals()).toEqual([200]);
    expect(expiry()).toBe(w.clock.ms + 3_600_000);
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "True" });
    expect(condition(sandbox(), "Stalled")).toMatchObject({ status: "False" });
    expect(sandbox().status?.vmId).toBe(vmId);
  });

  it("costs no VM when the pool's maximum is lowered below the TTL the VM has: renewed with the maximum", async () => {
    apply({}); // 600 s
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    w.emu.state.updatePoolConfig({ max_vm_ttl_seconds: 300 });
    w.advance(481_000); // due
    w.emu.clearRequests();
    const result = (await w.reconcile(kind(), "sb")) as { requeueAfterMs: number };
    expect(renewals()).toEqual([400, 200]);
    expect(w.emu.state.vms.get(vmId)?.expiresAt).toBe(w.clock.ms + 300_000);
    expect(condition(sandbox(), "Stalled")).toMatchObject({
      status: "True",
      reason: "ServiceRejected",
      message: expect.stringContaining("spec.ttlSeconds 600 was refused at the VM's renewal: the VM is renewed with 300 s instead"),
    });
    // On the 300 s TTL's window (60 s), not due again at once.
    expect(result.requeueAfterMs).toBeGreaterThan(230_000);
    expect(result.requeueAfterMs).toBeLessThanOrEqual(240_000);
    w.advance(result.requeueAfterMs);
    await w.reconcile(kind(), "sb");
    expect(renewals()).toEqual([200]);
    expect(w.emu.state.vms.get(vmId)?.expiresAt).toBe(w.clock.ms + 300_000);
  });

  it("after a restart, tries the refused TTL once, renews with the VM's own, and goes on with that", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    w.emu.state.updatePoolConfig({ max_vm_ttl_seconds: 7_200 });
    apply({ ttlSeconds: 86_400 });
    await w.reconcile(kind(), "sb"); // refused, renewed with 600 s
    w.restart();
    const restarted = w.kindOf((ctx) => sandboxes(ctx));
    w.advance(481_000);
    resync();
    w.emu.clearRequests();
    const result = (await w.reconcile(restarted, "sb")) as { requeueAfterMs: number; priority: boolean };
    expect(renewals()).toEqual([400, 200]);
    expect(w.emu.state.vms.get(vmId)?.expiresAt).toBe(w.clock.ms + 600_000);
    expect(result).toMatchObject({ priority: true });
    expect(result.requeueAfterMs).toBeGreaterThan(420_000);
    w.advance(result.requeueAfterMs);
    w.emu.clearRequests();
    await w.reconcile(restarted, "sb");
    expect(renewals()).toEqual([200]);
    expect(condition(sandbox(), "Stalled")).toMatchObject({ status: "True", reason: "ServiceRejected" });
  });
});

describe("a Sandbox moved in from another owner", () => {
  it("is renewed without reading the service's list when the snapshot holds the VM its status names", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    w.calls();
    arrives();
    w.advance(481_000); // the renewal is due
    await w.reconcile(kind(), "sb");
    expect(w.calls()).toEqual(["vms.renew"]);
    expect(sandbox().status?.renewals).toBe(1);
  });

  it("adopts the VM its previous owner allocated before status named one, after a read since it arrived", async () => {
    apply({});
    await w.handle().vms.refresh(); // this replica's last read
    const left = allocatedByPreviousOwner();
    arrives();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(sandbox().status?.vmId).toBe(left);
    expect(liveVMs()).toEqual([left]);
  });

  it("adopts the replacement its previous owner made for a changed spec instead of replacing again", async () => {
    const { first, replacement } = await replacedByPreviousOwner();
    w.emu.state.releaseVM(first); // and gave the old VM back
    w.calls();
    arrives();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(sandbox().status?.vmId).toBe(replacement);
    expect(liveVMs()).toEqual([replacement]);
    // It was made for this spec: the next pass keeps it.
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(sandbox().status?.vmId).toBe(replacement);
  });

  it("adopts the replacement its previous owner made before it gave the old VM back, and gives that one back", async () => {
    const { first, replacement } = await replacedByPreviousOwner();
    w.calls();
    arrives();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.release"]);
    expect(sandbox().status?.vmId).toBe(replacement);
    expect(liveVMs()).toEqual([replacement]);
    expect(live(first)).toBe(false);
  });

  it("adopts the VM its previous owner allocated when the one status names is gone at renewal", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const first = sandbox().status?.vmId as string;
    w.advance(481_000);
    // The previous owner found the VM gone, allocated another, and let go before writing status.
    w.emu.state.releaseVM(first);
    const replacement = allocatedByPreviousOwner();
    w.calls();
    arrives();
    // The renewal finds the VM gone; the pass after adopts the replacement.
    await w.reconcile(kind(), "sb");
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.renew"]);
    expect(sandbox().status?.vmId).toBe(replacement);
    expect(liveVMs()).toEqual([replacement]);
  });
});

// The Connection is what every change goes through, and it is checked by its own controller
// (on the leader only, sharded). While it cannot be used (an edit not checked yet, a failed
// check, its Secret gone), nothing is created, replaced or changed; but a running VM must not
// run out over it: its renewals go on through the client built for the Connection.
describe("a Sandbox whose Connection cannot be used", () => {
  const connection = () => w.get<Connection>("connections", "default");
  /** kubectl apply of a new Connection spec that its controller has not checked yet. */
  const editConnection = () =>
    w.apply<Connection>("connections", { metadata: { name: "default" }, spec: { ...connection().spec, rateLimit: { qps: 40, burst: 80 } } });

  const connectionFailing = () => w.connectionNotReady("ServiceUnavailable", "usage: 503");

  it("keeps renewing its VM while an edit of the Connection is not checked yet, and changes nothing else", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    editConnection();
    apply({ tier: "large" }); // a replacement, which must wait for the Connection
    w.advance(481_000); // the renewal is due
    w.calls();
    const result = await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.renew"]);
    expect(live(vmId)).toBe(true);
    expect(w.emu.state.vms.get(vmId)?.expiresAt).toBe(w.clock.ms + 600_000);
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "False", reason: "ConnectionNotReady" });
    expect(condition(sandbox(), "Ready")?.message).toContain("its VM is still renewed");
    // Waiting for the Connection backs off, but never past the next renewal.
    expect(result).toMatchObject({ requeue: true, priority: true });
    expect((result as { requeueNoLaterThanMs: number }).requeueNoLaterThanMs).toBeGreaterThan(468_000);
    expect((result as { requeueNoLaterThanMs: number }).requeueNoLaterThanMs).toBeLessThanOrEqual(480_000);

    // Checked: the replacement the spec asks for goes ahead.
    w.setStatus("connections", "default", { observedGeneration: 2 });
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.allocate", "vms.release"]);
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "True" });
  });

  it("keeps renewing its VM while the Connection is not Ready, and through the client built before once its Secret is gone", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    connectionFailing();
    w.secrets.delete(NS, "creds");
    w.advance(481_000);
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.renew"]);
    expect(w.emu.state.vms.get(vmId)?.expiresAt).toBe(w.clock.ms + 600_000);
    expect(sandbox().status?.renewals).toBe(1);
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "False", reason: "ConnectionNotReady" });
  });

  it("keeps renewing its VM with the credentials last accepted when those of a rotated Secret are refused", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    // The Secret is rotated to a key the token service refuses, and the Connection says so.
    w.secrets.set({ metadata: { name: "creds", namespace: NS }, data: { apiKey: Buffer.from("a-mistyped-key").toString("base64") } });
    await expect(w.pool.clientFor(connection()).client.authenticate()).rejects.toThrow(/credentials refused/);
    w.connectionNotReady("Unauthorized", "credentials refused by the token service");
    w.advance(481_000);
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.renew"]);
    expect(w.emu.state.vms.get(vmId)?.expiresAt).toBe(w.clock.ms + 600_000);
    expect(condition(sandbox(), "Ready")?.message).toContain("its VM is still renewed");
  });

  it("retries a renewal that failed well before the VM runs out, however long the wait for the Connection has backed off", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    connectionFailing();
    unavailable("POST", `/compute/v1/vms/${vmId}/renew`);
    w.advance(481_000); // due; 119 s left
    const result = await w.reconcile(kind(), "sb");
    expect(condition(sandbox(), "Ready")?.message).toMatch(/cannot keep its VM alive meanwhile: ServiceUnavailable/);
    // A quarter of what the VM has left, on the priority lane; the backoff may be far longer by now.
    expect(result).toEqual({ requeue: true, requeueNoLaterThanMs: 29_750, priority: true });
    expect(w.emu.state.vms.get(vmId)?.state).toBe("allocated");
  });

  it("retries a status write that failed while the Connection is not Ready no later than the next renewal", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    connectionFailing();
    w.writeFault = { path: /\/status$/, error: new Error("the API server answered 503") };
    const failed = await reconcileError();
    expect(failed).toBeInstanceOf(RetryNoLaterThan);
    expect((failed as RetryNoLaterThan).ms).toBeLessThanOrEqual(480_000);
  });

  it("says its VM cannot be kept alive when its Connection is gone, without saying why twice", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    w.informer({ kind: "connections", plural: "connections" }).delete(NS, "default");
    w.events.length = 0;
    await w.reconcile(kind(), "sb");
    const ready = condition(sandbox(), "Ready");
    expect(ready).toMatchObject({ status: "False", reason: "ConnectionNotFound" });
    expect(ready?.message).toBe(`Connection "default" not found in namespace "${NS}"; create it or set spec.connectionRef.name; its VM cannot be kept alive meanwhile`);
  });

  it("deleted while its Connection is gone: keeps its finalizer, and says how to go on (restore it, or remove the finalizer to leave the VM)", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    w.informer({ kind: "connections", plural: "connections" }).delete(NS, "default");
    markDeleted();
    await w.reconcile(kind(), "sb").catch(() => undefined);
    expect(sandbox().metadata.finalizers).toContain("agentcompute.dev/finalizer");
    expect(condition(sandbox(), "Ready")?.message).toBe(
      `Connection "default" not found in namespace "${NS}"; create it or set spec.connectionRef.name; the deletion waits to delete its service object ${vmId}: restore what is missing, or remove the finalizer agentcompute.dev/finalizer to leave the object there`,
    );
    expect(live(vmId)).toBe(true);
  });

  it("deleted while its Connection is gone after an allocation whose answer was lost: keeps its finalizer, says how to go on, and releases the VM once the Connection is back", async () => {
    const cr = apply({});
    w.emu.injectFault({ method: "POST", path: "/compute/v1/vms/allocate", times: 1, action: { drop: "after" } });
    await w.reconcile(kind(), "sb").catch(() => undefined); // allocated; the answer lost
    expect(sandbox().status?.vmId).toBeUndefined();
    const made = [...w.emu.state.vms.values()].find((v) => v.metadata?.[MARKER_KEY] === cr.metadata.uid);
    expect(made).toBeDefined();
    const gone = connection();
    w.informer({ kind: "connections", plural: "connections" }).delete(NS, "default");
    markDeleted();
    await w.reconcile(kind(), "sb").catch(() => undefined);
    expect(sandbox().metadata.finalizers).toContain(FINALIZER);
    expect(condition(sandbox(), "Ready")?.message).toBe(
      `Connection "default" not found in namespace "${NS}"; create it or set spec.connectionRef.name; the deletion waits to delete what a create sent at 2030-01-01T00:00:00.000Z may have made (its answer never came, so status names nothing): restore what is missing, or remove the finalizer ${FINALIZER} to leave anything it made there`,
    );
    expect(live(made?.id ?? "")).toBe(true);
    // Still so long after the create: no look has found what it made.
    w.advance(120_000);
    await w.reconcile(kind(), "sb").catch(() => undefined);
    expect(sandbox().metadata.finalizers).toContain(FINALIZER);
    w.informer({ kind: "connections", plural: "connections" }).set(gone);
    await w.reconcile(kind(), "sb");
    expect(live(made?.id ?? "")).toBe(false);
    expect(sandbox().metadata.finalizers ?? []).not.toContain(FINALIZER);
  });

  it("deleted while its Connection is gone before it made anything (a namespace deleted at once): the finalizer goes at once", async () => {
    w.informer({ kind: "connections", plural: "connections" }).delete(NS, "default");
    apply({});
    await w.reconcile(kind(), "sb");
    expect(sandbox().metadata.finalizers).toContain(FINALIZER);
    markDeleted();
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(sandbox().metadata.finalizers ?? []).not.toContain(FINALIZER);
  });

  it("says nothing of renewals for a VM it does not keep alive (keepAlive false)", async () => {
    apply({ keepAlive: false });
    await w.reconcile(kind(), "sb");
    connectionFailing();
    await w.reconcile(kind(), "sb");
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "False", reason: "ConnectionNotReady" });
    expect(condition(sandbox(), "Ready")?.message).not.toContain("renewed");
  });

  it("allocates nothing for a Sandbox without a VM", async () => {
    connectionFailing();
    apply({});
    const result = await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(sandbox().status?.vmId).toBeUndefined();
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "False", reason: "ConnectionNotReady" });
    expect(condition(sandbox(), "Ready")?.message).not.toContain("renewed");
    expect(result).toEqual({ requeue: true });
  });
});
