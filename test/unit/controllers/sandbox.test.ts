// Sandbox: when a VM is renewed, replaced or left to expire, and what happens to VMs a lost
// allocation left behind: observe only reports them; the reconcile gives them back.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { MARKER_KEY } from "../../../src/api/names.js";
import type { Sandbox } from "../../../src/api/index.js";
import { sandboxes } from "../../../src/controllers/sandbox.js";
import { condition, ORG, World } from "./helpers.js";

let w: World;
beforeEach(async () => {
  w = await World.start();
});
afterEach(async () => {
  await w.close();
});

const kind = () => sandboxes(w.ctx);
const apply = (spec: Partial<Sandbox["spec"]>, name = "sb") =>
  w.apply<Sandbox>("sandboxes", { metadata: { name }, spec: { tier: "standard", ttlSeconds: 600, ...spec } });
const sandbox = (name = "sb") => w.get<Sandbox>("sandboxes", name);
const live = (id: string) => w.emu.state.vms.get(id)?.state === "allocated";
/** As after a sync period: the next observe reads the service's list again. */
const resync = () => w.handle().vms.invalidate();

describe("Sandbox", () => {
  it("allocates one VM and comes back, on the priority lane, when the renewal is due", async () => {
    apply({});
    // ttl 600 s, renewBefore a fifth of it: due 480 s after the allocation.
    expect(await w.reconcile(kind(), "sb")).toEqual({ requeueAfterMs: 480_000, priority: true });
    expect(w.writes()).toEqual(["vms.allocate"]);
    const vmId = sandbox().status?.vmId as string;
    expect(live(vmId)).toBe(true);
    expect(sandbox().status).toMatchObject({ renewals: 0, state: "allocated" });
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "True", reason: "Available" });
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

  it("adopts the VM a crash left mid-replacement, and keeps it: the VM says which spec it was made for", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const lost = sandbox().status;
    apply({ tier: "large" });
    await w.reconcile(kind(), "sb");
    const replacement = sandbox().status?.vmId as string;
    // The process died before that status write landed: the next one finds the old VM gone.
    w.setStatus("sandboxes", "sb", { ...lost });
    resync();
    w.calls();
    await w.reconcile(kind(), "sb");
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(sandbox().status?.vmId).toBe(replacement);
    expect(live(replacement)).toBe(true);
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
