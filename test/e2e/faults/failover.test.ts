// Two replicas of `agent-operator run --leader-elect` (child processes) over one namespace.
// The leader is SIGKILLed in the middle of creating 100 resources: it cannot release the
// Lease, so the standby takes over once the Lease expires (15 s after the last renewal), and
// finishes the work. Nothing is created twice at any point: with the service's errors off,
// the service saw exactly one successful create per resource, in total, across both replicas.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startEmulator, type Emulator } from "../../../src/emulator/index.js";
import { kubectlOk, testKubeconfig, uniqueName, useTestNamespace, waitFor } from "../support/kube.js";
import { API_KEY, apply, connectionManifest, installCRDs } from "../support/operator.js";
import { startOperatorProcess, type OperatorProcess } from "../support/process.js";
import { deleteAllManaged, createAll, expectExactlyOnce, mixedManifests, waitAllReady } from "./support.js";

const ns = useTestNamespace("fault-failover");
let emulator: Emulator;
const replicas: OperatorProcess[] = [];
const MIX = { prefix: "f", skills: 20, agents: 30, deployments: 25, sandboxes: 25, withSkills: true };
const TOTAL = MIX.skills + MIX.agents + MIX.deployments + MIX.sandboxes;
const LEASE_DURATION_S = 15;

interface Lease {
  spec: { holderIdentity?: string; acquireTime?: string; renewTime?: string; leaseDurationSeconds?: number; leaseTransitions?: number };
}

const CREATES: Record<string, number> = { "agents.create": 201, "skills.create": 201, "deployments.deploy": 200, "vms.allocate": 201 };
/** Successful creates per operation, over the whole run (both replicas). */
function successfulCreates(): Record<string, number> {
  const out: Record<string, number> = Object.fromEntries(Object.keys(CREATES).map((k) => [k, 0]));
  for (const r of emulator.requests) if (CREATES[r.operation] === r.status) out[r.operation]! += 1;
  return out;
}

const isLeader = async (p: OperatorProcess, lease: string) => (await p.metric("leader_election_master_status", { name: lease })) === 1;

beforeAll(async () => {
  await installCRDs();
  // A little latency and a request budget, so that the work outlives the first leader.
  emulator = await startEmulator({ apiKey: API_KEY, strictBodies: true, orgId: "org-e2e", latencyMs: 20, jitterMs: 60, rateLimit: 25 });
  await apply(connectionManifest(ns.name, emulator), ns.name);
});

afterAll(async () => {
  const alive = replicas.filter((p) => p.alive());
  if (alive.length > 0) {
    emulator.setOptions({ rateLimit: undefined, latencyMs: 0, jitterMs: 0 });
    await deleteAllManaged(ns.name);
  }
  await Promise.all(replicas.map((p) => p.stop()));
  await emulator?.close();
});

describe("two replicas with leader election", () => {
  it("the standby takes over from a SIGKILLed leader within the lease, and nothing is created twice", async () => {
    const lease = uniqueName("failover");
    const start = () =>
      startOperatorProcess({
        kubeconfig: testKubeconfig(),
        namespaces: [ns.name],
        leaderElection: { namespace: ns.name, id: lease },
        logLevel: "info",
      });
    replicas.push(...(await Promise.all([start(), start()])));
    const leader = await waitFor(
      async () => {
        const states = await Promise.all(replicas.map((p) => isLeader(p, lease)));
        return states.filter(Boolean).length === 1 ? replicas[states.indexOf(true)] : undefined;
      },
      { timeoutMs: 60_000, description: "exactly one leader" },
    );
    const standby = replicas.find((p) => p !== leader)!;

    const applied = createAll(mixedManifests(MIX), ns.name);
    await waitFor(() => Object.values(successfulCreates()).reduce((a, b) => a + b, 0) >= 20, {
      timeoutMs: 120_000,
      description: "the leader to be creating",
    });
    // The standby has a warm cache but has not reconciled anything.
    expect(await standby.metric("controller_runtime_reconcile_total")).toBe(0);
    expect(await standby.metric("agentcompute_service_requests_total")).toBe(0);

    await leader.kill("SIGKILL");
    const killedAt = Date.now();
    const before = JSON.parse(await kubectlOk(["get", "lease", lease, "-o", "json"], { namespace: ns.name })) as Lease;
    const creates = Object.values(successfulCreates()).reduce((a, b) => a + b, 0);
    expect(creates).toBeLessThan(TOTAL);

    await waitFor(() => isLeader(standby, lease), { timeoutMs: 90_000, intervalMs: 250, description: "the standby to take over" });
    const tookOverMs = Date.now() - killedAt;
    const after = JSON.parse(await kubectlOk(["get", "lease", lease, "-o", "json"], { namespace: ns.name })) as Lease;
    expect(after.spec.holderIdentity).not.toBe(before.spec.holderIdentity);
    expect(after.spec.leaseTransitions).toBe((before.spec.leaseTransitions ?? 0) + 1);
    expect(after.spec.leaseDurationSeconds).toBe(LEASE_DURATION_S);
    // It took the Lease over once it had expired: measured on the API server's records, from the
    // dead leader's last renewal to the new acquisition, that is a lease duration plus at most a
    // few retry periods (generous, for a busy machine).
    const gapMs = Date.parse(after.spec.acquireTime!) - Date.parse(before.spec.renewTime!);
    expect(gapMs).toBeGreaterThanOrEqual(LEASE_DURATION_S * 1000 - 1000);
    expect(gapMs).toBeLessThan(LEASE_DURATION_S * 2 * 1000);

    await applied;
    const resources = await waitAllReady(ns.name, TOTAL, { timeoutMs: 180_000 });
    expectExactlyOnce(emulator, resources);
    // Never twice, at any point: one successful create per resource over both lives.
    expect(successfulCreates()).toEqual({
      "agents.create": MIX.agents,
      "skills.create": MIX.skills,
      "deployments.deploy": MIX.deployments,
      "vms.allocate": MIX.sandboxes,
    });
    console.log(`failover: leader killed after ${creates}/${TOTAL} creates; standby leading after ${tookOverMs} ms (lease gap ${gapMs} ms)`);

    // A graceful stop releases the Lease at once (holderIdentity cleared).
    await standby.stop();
    const released = JSON.parse(await kubectlOk(["get", "lease", lease, "-o", "json"], { namespace: ns.name })) as Lease;
    expect(released.spec.holderIdentity ?? "").toBe("");
    // ...so a new replica leads without waiting for the lease to run out (and cleans up after the test).
    const next = await start();
    replicas.push(next);
    await waitFor(() => isLeader(next, lease), { timeoutMs: 30_000, description: "a new replica to take the released Lease" });
  }, 400_000);
});
