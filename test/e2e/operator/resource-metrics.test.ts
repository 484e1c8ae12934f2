// agentcompute_managed_resource_* end to end: what the operator's /metrics says about the
// resources of its namespace as they are created, become Ready, drift and go away.
import { describe, expect, it } from "vitest";
import { parseMetrics, sum, type Sample } from "../../../dev/prometheus.js";
import { kubectlOk, waitFor } from "../support/kube.js";
import { apply, useStack, waitForReady } from "../support/operator.js";

const t = useStack("resmetrics", { syncPeriodMs: 600_000 });

async function scrape(): Promise<Sample[]> {
  const addr = t.stack.operator.manager.metricsAddress();
  if (addr === undefined) throw new Error("the operator serves no metrics");
  const res = await fetch(`http://${addr.address}/metrics`);
  expect(res.status).toBe(200);
  return parseMetrics(await res.text());
}

const agents = (s: Sample[], name: string) => sum(s, `agentcompute_managed_resource_${name}`, { kind: "Agent" });

describe("agentcompute_managed_resource_*", () => {
  it("counts the resources of each kind, those Ready and those synced, and times their first readiness", async () => {
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: works}
spec: {image: "example/works:1"}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: no-connection}
spec: {image: "example/other:1", connectionRef: {name: missing}}`, t.namespace);
    await waitForReady(t.stack, "agents", "works");
    // The other waits for a Connection that does not exist: there, but neither ready nor synced.
    await waitForReady(t.stack, "agents", "no-connection", { status: "False", reason: "ConnectionNotFound" });
    const s = await waitFor(async () => {
      const got = await scrape();
      return agents(got, "exists") === 2 && agents(got, "ready") === 1 && agents(got, "synced") === 1 ? got : undefined;
    }, { timeoutMs: 15_000, description: "exists 2, ready 1, synced 1 for Agent" });
    expect(sum(s, "agentcompute_managed_resource_exists", { kind: "Skill" })).toBe(0);
    // Created and Ready while the operator ran: one first-time-to-readiness of an Agent.
    expect(agents(s, "first_time_to_readiness_seconds_count")).toBe(1);

    await kubectlOk(["delete", "agent/no-connection", "--wait=true"], { namespace: t.namespace });
    await waitFor(async () => agents(await scrape(), "exists") === 1, { timeoutMs: 15_000, description: "exists 1 for Agent after the delete" });
  }, 60_000);

  it("records drift put right: the time since the previous successful reconcile", async () => {
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: drifty, annotations: {agentcompute.dev/poll-interval: 2s}}
spec: {image: "example/drifty:1"}`, t.namespace);
    const id = (await waitForReady(t.stack, "agents", "drifty")).status?.agentId as string;
    const before = agents(await scrape(), "drift_seconds_count");
    t.stack.emulator.state.updateAgent(id, { image: "out-of-band" });
    await waitFor(() => t.stack.emulator.state.agents.get(id)?.image === "example/drifty:1", {
      timeoutMs: 15_000,
      description: "the drift put back",
    });
    const s = await waitFor(async () => {
      const got = await scrape();
      return agents(got, "drift_seconds_count") > before ? got : undefined;
    }, { timeoutMs: 10_000, description: "a drift_seconds sample for Agent" });
    expect(agents(s, "drift_seconds_count")).toBe(before + 1);
    // Found within a poll interval or so of the previous look (2 s, jittered), never more than the sync period.
    expect(agents(s, "drift_seconds_sum")).toBeGreaterThan(0);
    expect(agents(s, "drift_seconds_sum")).toBeLessThan(600);
  }, 60_000);
});
