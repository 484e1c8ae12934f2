// A Sandbox moved in from another replica (sharding): its previous owner may have allocated a
// VM for it just before it let go or died, with status never saying so, after this replica
// last read the service. What it costs (nothing, when the snapshot holds the VM status names)
// and that it never allocates a second VM next to the one the previous owner left.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { CONFIG_HASH_KEY, MARKER_KEY } from "../../../src/api/names.js";
import type { Sandbox } from "../../../src/api/index.js";
import { allocationHash, sandboxes } from "../../../src/controllers/sandbox.js";
import { ORG, World } from "./helpers.js";

let w: World;
beforeEach(async () => {
  w = await World.start();
});
afterEach(async () => {
  await w.close();
});

const kind = () => sandboxes(w.ctx);
const apply = (spec: Partial<Sandbox["spec"]>) => w.apply<Sandbox>("sandboxes", { metadata: { name: "sb" }, spec: { tier: "standard", ttlSeconds: 600, ...spec } });
const sandbox = () => w.get<Sandbox>("sandboxes", "sb");
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
    apply({});
    await w.reconcile(kind(), "sb");
    const first = sandbox().status?.vmId as string;
    // The previous owner replaced the VM for the new tier and let go before writing status.
    apply({ tier: "large" });
    const replacement = allocatedByPreviousOwner("large");
    w.emu.state.releaseVM(first);
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
