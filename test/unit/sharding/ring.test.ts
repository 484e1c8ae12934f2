import { describe, expect, it } from "vitest";
import { Ring, objectKey } from "../../../src/sharding/ring.js";

const keys = Array.from({ length: 6000 }, (_, i) => objectKey(["skills", "agents", "sandboxes"][i % 3]!, `team-${i % 7}`, `obj-${i}`));

function shares(ring: Ring): Map<string, number> {
  const out = new Map<string, number>();
  for (const k of keys) {
    const o = ring.owner(k)!;
    out.set(o, (out.get(o) ?? 0) + 1);
  }
  return out;
}

describe("Ring", () => {
  it("has no owner when empty, and one owner for everything with one member", () => {
    expect(new Ring([]).owner("x")).toBeUndefined();
    const one = new Ring(["a"]);
    expect(keys.every((k) => one.owner(k) === "a")).toBe(true);
  });

  it("is the same ring whatever the order of the members (every process agrees)", () => {
    const a = new Ring(["r-1", "r-2", "r-3"]);
    const b = new Ring(["r-3", "r-1", "r-2", "r-1"]);
    expect(keys.every((k) => a.owner(k) === b.owner(k))).toBe(true);
  });

  it("spreads objects evenly over the members", () => {
    for (const members of [["pod-a", "pod-b", "pod-c"], ["h-1", "h-2", "h-3", "h-4", "h-5"]]) {
      const s = shares(new Ring(members));
      expect([...s.keys()].sort()).toEqual([...members].sort());
      const even = keys.length / members.length;
      for (const n of s.values()) {
        expect(n).toBeGreaterThan(even * 0.75);
        expect(n).toBeLessThan(even * 1.25);
      }
    }
  });

  it("moves only the leaver's objects when a member leaves", () => {
    const before = new Ring(["a", "b", "c"]);
    const after = new Ring(["a", "c"]);
    for (const k of keys) {
      if (before.owner(k) !== "b") expect(after.owner(k)).toBe(before.owner(k));
      else expect(["a", "c"]).toContain(after.owner(k));
    }
  });

  it("moves objects only to a joiner, about 1/n of them, when a member joins", () => {
    const before = new Ring(["a", "b", "c"]);
    const after = new Ring(["a", "b", "c", "d"]);
    let moved = 0;
    for (const k of keys) {
      if (after.owner(k) !== before.owner(k)) {
        moved++;
        expect(after.owner(k)).toBe("d");
      }
    }
    expect(moved).toBeGreaterThan(keys.length * 0.15);
    expect(moved).toBeLessThan(keys.length * 0.35);
  });
});
