import { describe, expect, it } from "vitest";
import { conditionsEqual, deepEqual, formatTime, getCondition, isConditionTrue, setCondition } from "../../../src/runtime/status.js";

const t0 = new Date("2025-01-01T00:00:00.123Z");
const t1 = new Date("2025-01-01T01:00:00.456Z");

describe("setCondition", () => {
  it("adds a condition with lastTransitionTime at second precision", () => {
    const out = setCondition([], { type: "Ready", status: "False", reason: "Creating", observedGeneration: 1 }, t0);
    expect(out).toEqual([
      { type: "Ready", status: "False", reason: "Creating", observedGeneration: 1, lastTransitionTime: "2025-01-01T00:00:00Z" },
    ]);
  });

  it("keeps lastTransitionTime when the status does not change, updates reason/message", () => {
    const a = setCondition(undefined, { type: "Ready", status: "False", reason: "Creating" }, t0);
    const b = setCondition(a, { type: "Ready", status: "False", reason: "Waiting", message: "m", observedGeneration: 2 }, t1);
    expect(b[0]).toMatchObject({ reason: "Waiting", message: "m", observedGeneration: 2, lastTransitionTime: formatTime(t0) });
  });

  it("moves lastTransitionTime when the status changes", () => {
    const a = setCondition(undefined, { type: "Ready", status: "False" }, t0);
    const b = setCondition(a, { type: "Ready", status: "True", reason: "Available" }, t1);
    expect(b[0]?.lastTransitionTime).toBe(formatTime(t1));
  });

  it("returns the same array when nothing changes, and never mutates its input", () => {
    const a = setCondition(undefined, { type: "Ready", status: "True", reason: "Available" }, t0);
    const frozen = Object.freeze(a.map((c) => Object.freeze({ ...c })));
    const b = setCondition(frozen, { type: "Ready", status: "True", reason: "Available" }, t1);
    expect(b).toBe(frozen);
    const c = setCondition(frozen, { type: "Stalled", status: "False" }, t1);
    expect(c).toHaveLength(2);
    expect(frozen).toHaveLength(1);
  });

  it("keeps other conditions and their order", () => {
    let cs = setCondition(undefined, { type: "Ready", status: "False" }, t0);
    cs = setCondition(cs, { type: "Reconciling", status: "True" }, t0);
    cs = setCondition(cs, { type: "Ready", status: "True" }, t1);
    expect(cs.map((c) => c.type)).toEqual(["Ready", "Reconciling"]);
    expect(isConditionTrue(cs, "Ready")).toBe(true);
    expect(getCondition(cs, "Reconciling")?.status).toBe("True");
  });
});

describe("conditionsEqual", () => {
  it("ignores order, compares all fields", () => {
    const a = setCondition(setCondition(undefined, { type: "A", status: "True" }, t0), { type: "B", status: "False" }, t0);
    const b = [a[1]!, a[0]!];
    expect(conditionsEqual(a, b)).toBe(true);
    const c = setCondition(a, { type: "B", status: "False", message: "x" }, t0);
    expect(conditionsEqual(a, c)).toBe(false);
    const d = a.map((x) => ({ ...x, lastTransitionTime: "2000-01-01T00:00:00Z" }));
    expect(conditionsEqual(a, d)).toBe(false);
    expect(conditionsEqual(a, d, { ignoreLastTransitionTime: true })).toBe(true);
    expect(conditionsEqual(undefined, [])).toBe(true);
  });
});

describe("deepEqual", () => {
  it("has JSON semantics", () => {
    expect(deepEqual({ a: 1, b: undefined }, { a: 1 })).toBe(true);
    expect(deepEqual({ a: [1, { b: "x" }] }, { a: [1, { b: "x" }] })).toBe(true);
    expect(deepEqual({ a: [1, 2] }, { a: [2, 1] })).toBe(false);
    expect(deepEqual({ a: null }, { a: undefined })).toBe(false);
    expect(deepEqual({ a: 1 }, { a: 1, b: 2 })).toBe(false);
    expect(deepEqual([], {})).toBe(false);
    expect(deepEqual("1", 1)).toBe(false);
    expect(deepEqual(NaN, NaN)).toBe(true);
  });
});
