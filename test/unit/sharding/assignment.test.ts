import { describe, expect, it } from "vitest";
import { decide, patchFor, placementOrder, releasePatch } from "../../../src/sharding/assignment.js";
import { DRAIN_LABEL, OWNER_LABEL } from "../../../src/sharding/labels.js";

const live = new Set(["a", "b", "c"]);
const owned = (owner: string, drain = false) => ({ [OWNER_LABEL]: owner, ...(drain && { [DRAIN_LABEL]: "true" }), app: "x" });

describe("decide", () => {
  it("assigns an object without an owner to the ring's choice", () => {
    expect(decide(undefined, "b", live)).toEqual({ action: "assign", to: "b" });
    expect(decide({ app: "x" }, "b", live)).toEqual({ action: "assign", to: "b" });
  });

  it("leaves an object with its owner when the ring agrees", () => {
    expect(decide(owned("b"), "b", live)).toEqual({ action: "none" });
  });

  it("asks a live owner to let go (drain) rather than moving the object under it", () => {
    expect(decide(owned("a"), "b", live)).toEqual({ action: "drain", owner: "a", to: "b" });
  });

  it("waits for a live owner's acknowledgement while a drain is pending, even if the ring changed back", () => {
    expect(decide(owned("a", true), "b", live)).toEqual({ action: "wait", owner: "a" });
    expect(decide(owned("a", true), "a", live)).toEqual({ action: "wait", owner: "a" });
  });

  it("asks nothing of an owner that is stopping (or gone awaiting its fence): its objects wait for it to leave, and move to its heirs then", () => {
    const takingOn = new Set(["b", "c"]); // a is live, but stopping
    expect(decide(owned("a"), "b", live, takingOn)).toEqual({ action: "wait", owner: "a" });
    expect(decide(owned("a"), "a", live, takingOn)).toEqual({ action: "none" });
    expect(decide(owned("b"), "c", live, takingOn)).toEqual({ action: "drain", owner: "b", to: "c" });
  });

  it("takes an object from an owner that is no longer a member at once, drain pending or not", () => {
    expect(decide(owned("gone"), "c", live)).toEqual({ action: "assign", to: "c", from: "gone" });
    expect(decide(owned("gone", true), "c", live)).toEqual({ action: "assign", to: "c", from: "gone" });
  });

  it("does nothing without members", () => {
    expect(decide(owned("gone"), undefined, new Set())).toEqual({ action: "none" });
  });
});

describe("patches", () => {
  it("carry the resourceVersion the decision was made on, so a changed object is decided again", () => {
    expect(patchFor({ action: "assign", to: "b" }, "42")).toEqual({ metadata: { resourceVersion: "42", labels: { [OWNER_LABEL]: "b", [DRAIN_LABEL]: null } } });
    expect(patchFor({ action: "drain", owner: "a", to: "b" }, "42")).toEqual({ metadata: { resourceVersion: "42", labels: { [DRAIN_LABEL]: "true" } } });
    expect(patchFor({ action: "none" }, "42")).toBeUndefined();
    expect(patchFor({ action: "wait", owner: "a" }, "42")).toBeUndefined();
  });

  it("the owner's acknowledgement removes both labels", () => {
    expect(releasePatch("7")).toEqual({ metadata: { resourceVersion: "7", labels: { [OWNER_LABEL]: null, [DRAIN_LABEL]: null } } });
  });
});

describe("placementOrder", () => {
  const obj = (name: string, owner: string | undefined, running = false) => ({ name, labels: owner === undefined ? undefined : owned(owner), running });

  it("puts a gone owner's objects on the priority lane, those with a running VM first, and keeps the given order otherwise", () => {
    const order = placementOrder(
      [obj("new", undefined), obj("orphan", "gone"), obj("kept", "a", true), obj("vm-1", "gone", true), obj("vm-2", "left", true), obj("new-2", undefined)],
      live,
    );
    expect(order.map((o) => [o.obj.name, o.priority])).toEqual([
      ["vm-1", true],
      ["vm-2", true],
      ["orphan", true],
      ["new", false],
      ["kept", false],
      ["new-2", false],
    ]);
  });

  it("puts a running VM with no owner (let go by its owner for a move, or made before sharding was on) with the gone owners' running ones", () => {
    const order = placementOrder([obj("new", undefined), obj("orphan", "gone"), obj("released", undefined, true), obj("vm-1", "gone", true)], live);
    expect(order.map((o) => [o.obj.name, o.priority])).toEqual([
      ["released", true],
      ["vm-1", true],
      ["orphan", true],
      ["new", false],
    ]);
  });

  it("has no priority lane while every owner is live", () => {
    expect(placementOrder([obj("x", "a", true), obj("y", "b")], live).every((o) => !o.priority)).toBe(true);
  });
});
