// What the StatusWriter remembers of its writes, and when it lets go.
import { describe, expect, it } from "vitest";
import { StatusWriter } from "../../../src/managed/status-writer.js";
import type { KubeClient } from "../../../src/runtime/kube-client.js";

const kube = { patch: async () => ({}) } as unknown as KubeClient;
const obj = (rv: string, status?: Record<string, unknown>) => ({
  metadata: { name: "s", namespace: "ns", uid: "u1", resourceVersion: rv, generation: 1 },
  ...(status ? { status } : {}),
});

describe("StatusWriter", () => {
  it("serves its last write over a stale cached copy, and forgets it once a newer version is seen", async () => {
    const w = new StatusWriter(kube, () => new Date(0));
    await w.write("/p", obj("1"), { state: "running" }, []);
    expect(w.size).toBe(1);
    expect(w.fresh(obj("1")).status).toMatchObject({ state: "running" });
    w.seen(obj("1")); // the version the write was computed from: not caught up yet
    expect(w.size).toBe(1);
    w.seen(obj("2", { state: "running" })); // our write came back through the watch
    expect(w.size).toBe(0);
    expect(w.fresh(obj("2", { state: "x" })).status).toEqual({ state: "x" });
  });

  it("replaces a field it is given whole, nested objects too, and removes one given as null: as a merge patch must say it", async () => {
    const patches: unknown[] = [];
    const recording = { patch: async (_path: string, body: unknown) => void patches.push(body) } as unknown as KubeClient;
    const w = new StatusWriter(recording, () => new Date(0));
    const before = { last: { attempt: 1, step: { name: "build", exitCode: 2, output: "old" } }, usage: { total: 5 }, keep: "x" };
    await w.write("/p", obj("1", before), { last: { attempt: 2 }, usage: null } as Record<string, unknown>, []);
    // The API server merges nested objects key by key: what the new value lacks is sent as null.
    expect(patches).toEqual([{ status: { last: { attempt: 2, step: null }, usage: null, keep: "x", observedGeneration: 1, conditions: [] } }]);
    expect(w.fresh(obj("1", before)).status).toEqual({ last: { attempt: 2 }, keep: "x", observedGeneration: 1, conditions: [] });
  });
});
