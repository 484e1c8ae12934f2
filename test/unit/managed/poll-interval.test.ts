// agentcompute.dev/poll-interval is read the way --sync-period is; a bad value says which
// annotation and what format it wants.
import { describe, expect, it } from "vitest";
import { Annotations } from "../../../src/api/names.js";
import { pollIntervalMs, pollIntervalOf } from "../../../src/managed/poll-interval.js";

const cr = (value?: string) => {
  const annotations: Record<string, string> = value === undefined ? {} : { [Annotations.pollInterval]: value };
  return { metadata: { name: "x", namespace: "ns", uid: "u", annotations } };
};

describe("pollIntervalOf", () => {
  it("takes the durations --sync-period takes", () => {
    expect(pollIntervalOf(cr("30s"))).toEqual({ kind: "set", ms: 30_000 });
    expect(pollIntervalOf(cr("5m"))).toEqual({ kind: "set", ms: 300_000 });
    expect(pollIntervalOf(cr("1h"))).toEqual({ kind: "set", ms: 3_600_000 });
    expect(pollIntervalOf(cr("1h30m"))).toEqual({ kind: "set", ms: 5_400_000 });
    expect(pollIntervalMs(cr("90s"))).toBe(90_000);
  });

  it("is the default without the annotation", () => {
    expect(pollIntervalOf(cr())).toEqual({ kind: "default" });
    expect(pollIntervalMs(cr())).toBeUndefined();
  });

  it("refuses what is not a duration, or shorter than 1s, naming the annotation and the format", () => {
    for (const bad of ["soon", "30", "", "10 minutes", "500ms", "0s"]) {
      const p = pollIntervalOf(cr(bad));
      expect(p.kind, bad).toBe("invalid");
      const message = p.kind === "invalid" ? p.message : "";
      expect(message).toContain(Annotations.pollInterval);
      expect(message).toContain("examples: 30s, 10m, 1h30m");
      expect(pollIntervalMs(cr(bad))).toBeUndefined();
    }
  });
});
