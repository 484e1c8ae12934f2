import { describe, expect, it } from "vitest";
import { Ring } from "../../../src/sharding/ring.js";
import { FENCED_BECAUSE_ANNOTATION, FENCED_MEMBER_ANNOTATION, FENCED_RENEWAL_ANNOTATION, HEIRS_ANNOTATION, Succession, fenceAnnotations, fenceOf, type SuccessionView } from "../../../src/sharding/succession.js";

const keys = Array.from({ length: 200 }, (_, i) => `sandboxes/ns/sb-${i}`);
const view = (holders: string[], heirs: Record<string, string[]> = {}): SuccessionView => ({ holders: new Set(holders), heirs: new Map(Object.entries(heirs)) });
const succession = (v: SuccessionView): Succession => {
  const s = new Succession();
  s.set(v);
  return s;
};

describe("fence annotations", () => {
  it("round-trip through a fenced Lease; a held Lease, or a fence without heirs, names none", () => {
    const renewTime = "2026-11-28T06:00:00.000000Z";
    const annotations = fenceAnnotations("b", ["c", "a"], renewTime);
    expect(annotations).toEqual({ [FENCED_MEMBER_ANNOTATION]: "b", [HEIRS_ANNOTATION]: "a,c", [FENCED_RENEWAL_ANNOTATION]: renewTime, [FENCED_BECAUSE_ANNOTATION]: "lease-expired" });
    expect(fenceAnnotations("b", ["a"], renewTime, "crash-reported")[FENCED_BECAUSE_ANNOTATION]).toBe("crash-reported");
    expect(fenceOf({ metadata: { annotations }, spec: { holderIdentity: "", renewTime } })).toEqual({ member: "b", heirs: ["a", "c"] });
    // Taken back (held again): its old fence names nobody.
    expect(fenceOf({ metadata: { annotations }, spec: { holderIdentity: "b", renewTime } })).toBeUndefined();
    // Taken back by a process that kept the annotations (an older version), renewed, and fenced
    // again by a sharder that writes no heirs: the old fence is not this one.
    expect(fenceOf({ metadata: { annotations }, spec: { holderIdentity: "", renewTime: "2026-11-28T06:05:00.000000Z" } })).toBeUndefined();
    // Fenced by a sharder that wrote no heirs (an older version), or with none live.
    expect(fenceOf({ metadata: {}, spec: { holderIdentity: "" } })).toBeUndefined();
    expect(fenceOf({ metadata: { annotations: fenceAnnotations("b", [], undefined) }, spec: {} })).toBeUndefined();
    // The member itself is never its own heir.
    expect(fenceOf({ metadata: { annotations: fenceAnnotations("b", ["b", "a"], renewTime) }, spec: { renewTime } })).toEqual({ member: "b", heirs: ["a"] });
  });
});

describe("Succession.worker", () => {
  it("is the owner while it holds its Lease, expired or not (only a fence ends it)", () => {
    const s = succession(view(["a", "b"]));
    for (const key of keys) expect(s.worker("b", key)).toBe("b");
  });

  it("is the heir the ring of the fence's heirs names, the same for every replica that reads the fence", () => {
    const s = succession(view(["a", "c"], { b: ["a", "c"] }));
    const ring = new Ring(["a", "c"]);
    const workers = keys.map((key) => s.worker("b", key));
    expect(workers).toEqual(keys.map((key) => ring.owner(key)));
    // Both heirs get a part.
    expect(new Set(workers)).toEqual(new Set(["a", "c"]));
  });

  it("follows the chain when an heir was fenced too, and ends at nobody where a Lease is gone or names no heirs", () => {
    // b died with heirs a and c; then c died with heir a alone.
    const chained = succession(view(["a"], { b: ["a", "c"], c: ["a"] }));
    for (const key of keys) expect(chained.worker("b", key)).toBe("a");
    expect(chained.chain("b", keys.find((k) => new Ring(["a", "c"]).owner(k) === "c")!)).toEqual(["b", "c", "a"]);
    // c left (its Lease deleted, having stopped all its work): what the chain gives c has no worker.
    const left = succession(view(["a"], { b: ["a", "c"] }));
    for (const key of keys) expect(left.worker("b", key)).toBe(new Ring(["a", "c"]).owner(key) === "a" ? "a" : undefined);
    // No fence (gone, or fenced without heirs), no owner, or a loop: nobody.
    expect(left.worker("x", keys[0]!)).toBeUndefined();
    expect(left.worker(undefined, keys[0]!)).toBeUndefined();
    const loop = succession(view([], { b: ["c"], c: ["b"] }));
    expect(loop.worker("b", keys[0]!)).toBeUndefined();
  });
});

describe("Succession.inheritedBy", () => {
  it("is every fenced member whose objects may reach the replica, through heirs of heirs", () => {
    const s = succession(view(["a", "d"], { b: ["a", "c"], c: ["d"], e: ["d"] }));
    expect(s.inheritedBy("a")).toEqual(["b"]);
    // d inherits c, and so b's objects that the chain gives c.
    expect(s.inheritedBy("d")).toEqual(["b", "c", "e"]);
    expect(s.inheritedBy("z")).toEqual([]);
  });

  it("drops a member that holds its Lease again (a restarted process took it back)", () => {
    const s = succession(view(["a", "b"], { b: ["a"] }));
    expect(s.inheritedBy("a")).toEqual([]);
    for (const key of keys) expect(s.worker("b", key)).toBe("b");
  });
});
