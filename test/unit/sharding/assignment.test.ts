import { describe, expect, it } from "vitest";
import { decide, patchFor, releasePatch } from "../../../src/sharding/assignment.js";
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
