// AgentDeployments and Sandboxes against an emulator that answers as the published service
// does: the deployment record echoes no deploy options, the VM record names its id `id`,
// secure_runtime is a string. Through several sync periods nothing is deployed, replaced or
// allocated twice, and nothing but the bulk lists is read; a spec change and an out-of-band
// reconfiguration each replace a deployment exactly once. The call counts are the emulator's.
import { describe, expect, it } from "vitest";
import { kubectlOk, waitFor } from "../support/kube.js";
import { apply, getResource, useStack, waitForReady, type Resource } from "../support/operator.js";

const SYNC_MS = 3_000;
const t = useStack("contract", { syncPeriodMs: SYNC_MS });

const DEPLOYMENTS = ["d-1", "d-2", "d-3"];
const SANDBOXES = ["s-1", "s-2", "s-3"];
/** What the operator may call while nothing changes: one bulk list per kind per sync period. */
const QUIET_READS = new Set(["agents.list", "deployments.list", "vms.list", "skills.list", "token", "usage.list", "usage.summary", "access.clients"]);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function calls(operation: string): number {
  return t.stack.emulator.stats().byOperation[operation] ?? 0;
}

/** Operation -> count of the requests logged from `since` (an index into the log) on. */
function callsSince(since: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of t.stack.emulator.requests.slice(since)) out[r.operation] = (out[r.operation] ?? 0) + 1;
  return out;
}

async function allReady(): Promise<Resource[]> {
  return Promise.all([
    ...DEPLOYMENTS.map((n) => waitForReady(t.stack, "agentdeployments", n)),
    ...SANDBOXES.map((n) => waitForReady(t.stack, "sandboxes", n)),
  ]);
}

const deploymentOf = async (name: string) => (await getResource(t.stack.kube, "agentdeployments", t.namespace, name)).status?.deploymentId as string;

describe("against the published contract", () => {
  it("deploys and allocates once each, then only lists, through three sync periods", async () => {
    await apply(
      [
        `apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: runner}
spec: {image: "example/runner:1", manifest: {name: runner, skills: [{id: run, inputModes: [text]}]}}`,
        ...DEPLOYMENTS.map(
          (n) => `apiVersion: agentcompute.dev/v1alpha1
kind: AgentDeployment
metadata: {name: ${n}}
spec:
  agentRef: {name: runner}
  tier: standard
  env: {LOG: info, NAME: ${n}}
  metadata: {team: qa}
  options: {endpoint_name: ${n}-ep, replicas: 2}`,
        ),
        ...SANDBOXES.map(
          (n) => `apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: ${n}}
spec: {tier: standard, env: {MODE: test}, metadata: {team: qa}, secureRuntime: gvisor, ttlSeconds: 3600}`,
        ),
      ].join("\n---\n"),
      t.namespace,
    );
    const ready = await allReady();
    expect(calls("deployments.deploy")).toBe(DEPLOYMENTS.length);
    expect(calls("vms.allocate")).toBe(SANDBOXES.length);

    // What the service was sent, as the emulator stored it (the record never shows it).
    for (const d of ready.filter((r) => r.status?.deploymentId !== undefined)) {
      const stored = t.stack.emulator.state.deployments.get(d.status?.deploymentId as string);
      expect(stored?.options["env"]).toEqual({ LOG: "info", NAME: d.metadata.name });
      expect(stored?.endpoint_name).toBe(`${d.metadata.name}-ep`);
      expect(d.status?.configHash).toBe(stored?.config_hash);
      expect(d.status?.optionsHash).toEqual(expect.any(String));
      expect(d.status?.agentId).toBe(stored?.registry_id);
    }
    for (const s of ready.filter((r) => r.status?.vmId !== undefined)) {
      const vm = t.stack.emulator.state.vms.get(s.status?.vmId as string);
      expect(vm?.secure_runtime).toBe("gvisor");
      // From the allocation: the VM record has neither.
      expect(s.status?.endpoint).toEqual(expect.any(String));
      expect(s.status?.wsURL).toEqual(expect.any(String));
    }

    const from = t.stack.emulator.requests.length;
    await sleep(SYNC_MS * 3 + 1_500);
    const quiet = callsSince(from);
    const unexpected = Object.keys(quiet).filter((op) => !QUIET_READS.has(op));
    expect(unexpected, JSON.stringify(quiet)).toEqual([]);
    // The resyncs really happened (lists were read again), and cost a list per kind each time.
    expect(quiet["deployments.list"] ?? 0).toBeGreaterThanOrEqual(2);
    expect(quiet["deployments.list"] ?? 0).toBeLessThanOrEqual(5);
    expect(calls("deployments.deploy")).toBe(DEPLOYMENTS.length);
    expect(calls("deployments.delete")).toBe(0);
    expect(calls("vms.allocate")).toBe(SANDBOXES.length);
    expect(calls("vms.release")).toBe(0);
    expect(t.stack.emulator.state.deployments.size).toBe(DEPLOYMENTS.length);
  }, 90_000);

  it("replaces a deployment once when a deploy option changes in the spec", async () => {
    const before = await deploymentOf("d-1");
    const deploys = calls("deployments.deploy");
    await kubectlOk(["patch", "agentdeployment", "d-1", "--type=merge", "-p", '{"spec":{"env":{"LOG":"debug","NAME":"d-1"}}}'], {
      namespace: t.namespace,
    });
    const after = await waitFor(async () => {
      const r = await waitForReady(t.stack, "agentdeployments", "d-1");
      return r.status?.deploymentId !== before ? r : undefined;
    });
    const id = after.status?.deploymentId as string;
    expect(t.stack.emulator.state.deployments.get(before)).toBeUndefined();
    expect(t.stack.emulator.state.deployments.get(id)?.options["env"]).toEqual({ LOG: "debug", NAME: "d-1" });

    await sleep(SYNC_MS * 2 + 1_000);
    expect(calls("deployments.deploy")).toBe(deploys + 1);
    expect(calls("deployments.delete")).toBe(1);
    expect(await deploymentOf("d-1")).toBe(id);
  }, 60_000);

  it("puts back a deployment reconfigured outside the operator, once", async () => {
    const before = await deploymentOf("d-2");
    const stored = structuredClone(t.stack.emulator.state.deployments.get(before));
    const deploys = calls("deployments.deploy");
    const deletes = calls("deployments.delete");
    // Someone changed its configuration with another client: the service's config_hash moves.
    t.stack.emulator.state.reconfigureDeployment(before, { ...stored?.options, env: { LOG: "trace" } });
    expect(t.stack.emulator.state.deployments.get(before)?.config_hash).not.toBe(stored?.config_hash);

    const after = await waitFor(
      async () => {
        const r = await waitForReady(t.stack, "agentdeployments", "d-2");
        return r.status?.deploymentId !== before ? r : undefined;
      },
      { timeoutMs: SYNC_MS * 4, description: "the reconfigured deployment replaced" },
    );
    const id = after.status?.deploymentId as string;
    expect(t.stack.emulator.state.deployments.get(id)?.options["env"]).toEqual({ LOG: "info", NAME: "d-2" });
    const events = await kubectlOk(["get", "events", "--field-selector", "involvedObject.name=d-2,reason=Replaced", "-o", "json"], {
      namespace: t.namespace,
    });
    expect(events).toContain("changed outside the operator");

    await sleep(SYNC_MS * 2 + 1_000);
    expect(calls("deployments.deploy")).toBe(deploys + 1);
    expect(calls("deployments.delete")).toBe(deletes + 1);
    expect(await deploymentOf("d-2")).toBe(id);
    // The other deployments and the sandboxes were left alone throughout.
    expect(await deploymentOf("d-3")).toBe((await waitForReady(t.stack, "agentdeployments", "d-3")).status?.deploymentId);
    expect(calls("vms.allocate")).toBe(SANDBOXES.length);
  }, 60_000);
});
