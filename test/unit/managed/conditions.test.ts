// The kstatus triple from one statement of where a resource stands: the message goes on the
// condition that says what is going on, and every one carries the reason.
import { describe, expect, it } from "vitest";
import { kstatusConditions, notReportedYet } from "../../../src/managed/conditions.js";

const triple = (state: "ready" | "reconciling" | "stalled" | "unavailable") =>
  Object.fromEntries(kstatusConditions({ state, reason: "Why", message: "what" }).map((c) => [c.type, [c.status, c.reason, c.message]]));

describe("kstatusConditions", () => {
  it.each([
    ["ready", { Ready: ["True", "Why", "what"], Reconciling: ["False", "Why", undefined], Stalled: ["False", "Why", undefined] }],
    ["reconciling", { Ready: ["False", "Why", "what"], Reconciling: ["True", "Why", "what"], Stalled: ["False", "Why", undefined] }],
    ["stalled", { Ready: ["False", "Why", "what"], Reconciling: ["False", "Why", undefined], Stalled: ["True", "Why", "what"] }],
    ["unavailable", { Ready: ["False", "Why", "what"], Reconciling: ["False", "Why", undefined], Stalled: ["False", "Why", undefined] }],
  ] as const)("%s", (state, expected) => {
    expect(triple(state)).toEqual(expected);
  });
});

describe("notReportedYet", () => {
  const ready = (status: string) => [{ type: "Ready", status }];
  it.each([
    ["no status at all: being created", {}, true],
    ["no Ready condition yet", { observedGeneration: 1, conditions: [] }, true],
    ["Ready for an older generation: being updated", { observedGeneration: 1, conditions: ready("True") }, true],
    ["Ready for this generation", { observedGeneration: 2, conditions: ready("True") }, false],
    ["Ready=False: its trouble is reported", { observedGeneration: 1, conditions: ready("False") }, false],
  ])("%s", (_what, status, expected) => {
    expect(notReportedYet({ metadata: { generation: 2 }, status })).toBe(expected);
  });
});
