import { describe, expect, it } from "vitest";
import { Inventory } from "../../../src/managed/inventory.js";

interface Obj {
  id: string;
  uid?: string;
  v?: number;
}

function inventory(
  list: () => Promise<Obj[]>,
  opts: { maxAgeMs?: number; onChange?: (keys: string[]) => void; now?: () => number; arrivalGatherMs?: number } = {},
) {
  return new Inventory<Obj>({
    list,
    keyOf: (o) => o.id,
    markerOf: (o) => o.uid,
    maxAgeMs: opts.maxAgeMs ?? 1000,
    onChange: opts.onChange,
    now: opts.now,
    arrivalGatherMs: opts.arrivalGatherMs ?? 0,
    arrivalReadIntervalMs: 0,
  });
}

describe("Inventory", () => {
  it("knows per key how long ago the service last showed it: the list, or a later write or read of that key", async () => {
    let t = 0;
    const inv = inventory(async () => [{ id: "a" }, { id: "b" }], { maxAgeMs: 60_000, now: () => t });
    expect(inv.ageOf("a")).toBe(Infinity);
    t = 100;
    await inv.ensureFresh();
    t = 1_100;
    expect(inv.ageOf("a")).toBe(1_000);
    inv.put({ id: "b", v: 2 });
    inv.remove("c");
    t = 1_600;
    expect([inv.ageOf("a"), inv.ageOf("b"), inv.ageOf("c")]).toEqual([1_500, 500, 500]);
    await inv.refresh();
    t = 1_700;
    expect([inv.ageOf("a"), inv.ageOf("b")]).toEqual([100, 100]);
  });

  it("reads the service once for concurrent callers and again only when stale", async () => {
    let calls = 0;
    let t = 0;
    const inv = inventory(async () => {
      calls++;
      return [{ id: "a", uid: "u1" }];
    }, { now: () => t });
    await Promise.all([inv.ensureFresh(), inv.ensureFresh(), inv.ensureFresh()]);
    expect(calls).toBe(1);
    t = 500;
    await inv.ensureFresh();
    expect(calls).toBe(1);
    t = 1500;
    await inv.ensureFresh();
    expect(calls).toBe(2);
    inv.invalidate();
    await inv.ensureFresh();
    expect(calls).toBe(3);
  });

  it("finds every object carrying a marker, and forgets removed ones", async () => {
    const inv = inventory(async () => [
      { id: "a", uid: "u1" },
      { id: "b", uid: "u1" },
      { id: "c", uid: "u2" },
    ]);
    await inv.refresh();
    expect(inv.findByMarker("u1").map((o) => o.id).sort()).toEqual(["a", "b"]);
    inv.remove("a");
    expect(inv.findByMarker("u1").map((o) => o.id)).toEqual(["b"]);
    expect(inv.findByMarker("nobody")).toEqual([]);
  });

  it("keeps an object created while a list was in flight (the list may predate it)", async () => {
    let release!: (items: Obj[]) => void;
    const inv = inventory(() => new Promise<Obj[]>((r) => (release = r)));
    const loading = inv.refresh();
    inv.put({ id: "new", uid: "u9" });
    release([{ id: "old" }]);
    await loading;
    expect(inv.get("new")).toEqual({ id: "new", uid: "u9" });
    expect(inv.findByMarker("u9")).toHaveLength(1);
    expect(inv.get("old")).toBeDefined();
  });

  it("stays stale when marked so while a read was in flight: that read may predate an uncertain create", async () => {
    const service: Obj[] = [];
    let release!: () => void;
    let calls = 0;
    const inv = inventory(async () => {
      calls++;
      const listed = [...service]; // the page is read before the create lands
      if (calls === 1) await new Promise<void>((resolve) => (release = resolve));
      return listed;
    }, { maxAgeMs: 60_000 });
    const inFlight = inv.refresh();
    await Promise.resolve();
    // A create whose answer is lost: the service made the object after the page was read.
    service.push({ id: "vm-1", uid: "u1" });
    inv.invalidate();
    const lookup = inv.ensureFresh();
    release();
    await inFlight;
    await lookup;
    expect(calls).toBe(2);
    expect(inv.findByMarker("u1").map((o) => o.id)).toEqual(["vm-1"]);
  });

  it("reads again after a read in flight since before the snapshot was marked stale, for whoever asks for a read", async () => {
    const service: Obj[] = [];
    const releases: Array<() => void> = [];
    let calls = 0;
    const inv = inventory(async () => {
      calls++;
      const listed = [...service];
      await new Promise<void>((resolve) => releases.push(resolve));
      return listed;
    }, { maxAgeMs: 60_000 });
    const first = inv.refresh();
    await Promise.resolve();
    service.push({ id: "vm-1", uid: "u1" });
    inv.invalidate();
    // A deletion reads the service to find every object of the resource (SandboxClient.delete).
    const again = [inv.refresh(), inv.refresh()];
    releases.shift()!();
    await first;
    await new Promise((r) => setTimeout(r, 0));
    expect(calls).toBe(2); // one more read, shared by both callers
    releases.shift()!();
    await Promise.all(again);
    expect(inv.findByMarker("u1").map((o) => o.id)).toEqual(["vm-1"]);
    expect(inv.ageOf("vm-1")).toBeLessThan(Infinity);
  });

  it("reports objects that changed or vanished out of band", async () => {
    let items: Obj[] = [
      { id: "a", v: 1 },
      { id: "b", v: 1 },
      { id: "c", v: 1 },
    ];
    const changes: string[][] = [];
    const inv = inventory(async () => items, { onChange: (k) => changes.push(k) });
    await inv.refresh();
    expect(changes).toEqual([]);
    items = [
      { id: "a", v: 1 },
      { id: "b", v: 2 },
    ];
    await inv.refresh();
    expect(changes).toEqual([["b", "c"]]);
  });

  describe("resources that arrived from another owner", () => {
    it("have their lookups wait for one read that serves the whole batch; others never wait", async () => {
      let calls = 0;
      const items: Obj[] = [{ id: "a", uid: "u1" }];
      const inv = inventory(async () => (calls++, [...items]), { arrivalGatherMs: 50 });
      await inv.refresh();
      // Created by the previous owner after this read, just before it let go.
      items.push({ id: "b", uid: "u2" });
      inv.arrived("u1");
      const first = inv.readSinceArrival("u1");
      inv.arrived("u2"); // the same batch, a moment later
      expect(await inv.readSinceArrival("stayed")).toBe(false);
      expect(await Promise.all([first, inv.readSinceArrival("u2")])).toEqual([true, true]);
      expect(calls).toBe(2);
      expect(inv.findByMarker("u2").map((o) => o.id)).toEqual(["b"]);
      expect(await inv.readSinceArrival("u1")).toBe(false); // read since: no more waiting
      expect(calls).toBe(2);
    });

    it("need no read of their own when one started after they arrived", async () => {
      let calls = 0;
      const inv = inventory(async () => (calls++, []));
      inv.arrived("u1", Date.now() - 1);
      await inv.refresh(); // a resync
      inv.arrived("u2", Date.now() - 60_000); // arrived before the last read
      expect(await inv.readSinceArrival("u1")).toBe(false);
      expect(await inv.readSinceArrival("u2")).toBe(false);
      expect(calls).toBe(1);
    });

    it("are read again when the read in flight at their arrival started before it", async () => {
      let calls = 0;
      let release!: (items: Obj[]) => void;
      // A gather of a few ms, as in production: with none, the read after the arrival may start
      // in the same millisecond, which is not after it, and a third read is made.
      const inv = inventory(() => (calls++ === 0 ? new Promise<Obj[]>((r) => (release = r)) : Promise.resolve([{ id: "late", uid: "u1" }])), { arrivalGatherMs: 5 });
      const loading = inv.refresh();
      inv.arrived("u1", Date.now() + 1); // after that read started
      const waiting = inv.readSinceArrival("u1"); // joins it, then reads again
      release([]);
      await loading;
      expect(await waiting).toBe(true);
      expect(calls).toBe(2);
      expect(inv.findByMarker("u1")).toHaveLength(1);
    });
  });
});
