// agentcompute.dev/poll-interval end to end, with a long --sync-period: the annotated resource's
// object is read at its own period (counted in the emulator's request log) and drift is put back
// at that period; a resource without it is left to the sync period; a bad value is reported.
import { describe, expect, it } from "vitest";
import { kubectlOk, waitFor } from "../support/kube.js";
import { apply, condition, getResource, useStack, waitForReady } from "../support/operator.js";

const t = useStack("poll", { syncPeriodMs: 600_000 });

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const readsOf = (id: string, from: number) =>
  t.stack.emulator.requests.slice(from).filter((r) => r.method === "GET" && r.path.endsWith(`/${id}`)).length;

describe("agentcompute.dev/poll-interval", () => {
  it("reads the annotated resource's object at its own period, and only that one", async () => {
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: fast, annotations: {agentcompute.dev/poll-interval: 2s}}
spec: {image: "example/fast:1"}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: slow}
spec: {image: "example/slow:1"}`, t.namespace);
    const fast = (await waitForReady(t.stack, "agents", "fast")).status?.agentId as string;
    const slow = (await waitForReady(t.stack, "agents", "slow")).status?.agentId as string;
    const from = t.stack.emulator.requests.length;
    await sleep(9_000);
    // About one read per 2 s (jittered ±10 %); the other: none in 10 min of sync period.
    expect(readsOf(fast, from)).toBeGreaterThanOrEqual(3);
    expect(readsOf(fast, from)).toBeLessThanOrEqual(6);
    expect(readsOf(slow, from)).toBe(0);
    // No list either: one GET per period, not the whole inventory.
    expect(t.stack.emulator.requests.slice(from).filter((r) => r.operation === "agents.list").length).toBe(0);

    // Drift is put back at the resource's period, not the sync period's.
    t.stack.emulator.state.updateAgent(fast, { image: "out-of-band" });
    t.stack.emulator.state.updateAgent(slow, { image: "out-of-band" });
    await waitFor(() => t.stack.emulator.state.agents.get(fast)?.image === "example/fast:1", {
      timeoutMs: 10_000,
      description: "the fast agent's drift put back",
    });
    expect(t.stack.emulator.state.agents.get(slow)?.image).toBe("out-of-band");
  }, 60_000);

  it("a bad value: a Warning Event and the Ready message name the annotation and the format", async () => {
    await kubectlOk(["annotate", "agent/slow", "agentcompute.dev/poll-interval=often"], { namespace: t.namespace });
    const r = await waitFor(async () => {
      const got = await getResource(t.stack.kube, "agents", t.namespace, "slow");
      return condition(got, "Ready")?.message?.includes("poll-interval") ? got : undefined;
    }, { timeoutMs: 20_000, description: "the bad value in the Ready message" });
    expect(condition(r, "Ready")?.message).toContain('agentcompute.dev/poll-interval: "often" is not a duration (examples: 30s, 10m, 1h30m)');
    const events = await kubectlOk(["get", "events", "--field-selector", "reason=InvalidPollInterval", "-o", "json"], { namespace: t.namespace });
    expect(events).toContain("agentcompute.dev/poll-interval");
    expect((JSON.parse(events) as { items: Array<{ type: string }> }).items.map((e) => e.type)).toEqual(["Warning"]);
  });
});
