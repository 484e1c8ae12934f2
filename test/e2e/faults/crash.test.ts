// The operator is SIGKILLed at random points while it creates 200 resources of every kind,
// under 20 % service errors (random 500s and dropped connections) plus creates whose answer
// is lost after the service did the work. It runs as a child process (`agent-operator run`);
// the emulator lives in the test process, so the service's state survives every kill.
// After the last restart every resource is Ready and every service object exists exactly
// once: agents and skills by name, deployments and live VMs by the crash-safety marker, and
// VMs a crash left behind were released.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MARKER_KEY } from "../../../src/api/index.js";
import { startEmulator, type Emulator } from "../../../src/emulator/index.js";
import { testKubeconfig, useTestNamespace, waitFor } from "../support/kube.js";
import { API_KEY, apply, connectionManifest, installCRDs } from "../support/operator.js";
import { startOperatorProcess, type OperatorProcess } from "../support/process.js";
import { deleteAllManaged, createAll, expectExactlyOnce, listManaged, mixedManifests, waitAllReady, type ListedResource } from "./support.js";

const ns = useTestNamespace("fault-crash");
let emulator: Emulator;
let op: OperatorProcess | undefined;
const logs: string[] = [];

const MIX = { prefix: "c", skills: 40, agents: 50, deployments: 50, sandboxes: 60, withSkills: true };
const TOTAL = MIX.skills + MIX.agents + MIX.deployments + MIX.sandboxes;
const KILLS = 4;

const start = () => startOperatorProcess({ kubeconfig: testKubeconfig(), namespaces: [ns.name], logs, logLevel: "info" });
const CREATES = new Set(["agents.create", "skills.create", "deployments.deploy", "vms.allocate"]);
/** Creates the service performed (answered 2xx or dropped after the work). */
const created = () => emulator.requests.filter((r) => CREATES.has(r.operation) && (r.status === 200 || r.status === 201)).length;

beforeAll(async () => {
  await installCRDs();
  // Latency and a request budget stretch the creates over several operator lifetimes.
  emulator = await startEmulator({ apiKey: API_KEY, strictBodies: true, orgId: "org-e2e", errorRate: 0.2, latencyMs: 20, jitterMs: 80, rateLimit: 25 });
  await apply(connectionManifest(ns.name, emulator), ns.name);
});

afterAll(async () => {
  if (op?.alive()) {
    // Normally a no-op: the test deletes everything itself.
    emulator?.setOptions({ errorRate: 0, rateLimit: undefined, latencyMs: 0, jitterMs: 0 });
    await deleteAllManaged(ns.name);
    await op.stop();
  }
  await emulator?.close();
});

/**
 * What a crashed process can leave behind: extra VMs carrying a Sandbox's marker, allocated
 * behind the operator's back (directly in the service). Returns their ids.
 */
async function leaveOrphanVMs(count: number, resources?: ListedResource[]): Promise<string[]> {
  const sandboxes = (resources ?? (await listManaged(ns.name))).filter((r) => r.kind === "Sandbox").slice(0, count);
  return sandboxes.map(
    (sb) => emulator.state.allocateVM({ tier: "standard", ttl_seconds: 3600, metadata: { [MARKER_KEY]: sb.metadata.uid } }).vm_id,
  );
}

function leaveOrphanDeployments(count: number, resources: ListedResource[]): string[] {
  return resources
    .filter((r) => r.kind === "AgentDeployment")
    .slice(0, count)
    .map((d) => emulator.state.deploy(d.status?.agentId as string, { metadata: { [MARKER_KEY]: d.metadata.uid } }).id);
}

describe("SIGKILL at random points while creating 200 resources, 20 % service errors", () => {
  it("ends with every resource Ready and every service object exactly once", async () => {
    op = await start();
    // Creates that the service performs but whose answer never arrives (outcome unknown).
    for (const path of ["/registry/v1/agents", "/compute/v1/skills", /\/deploy$/, "/compute/v1/vms/allocate"]) {
      emulator.injectFault({ method: "POST", path, times: 5, action: { drop: "after" } });
    }
    const applied = createAll(mixedManifests(MIX), ns.name);

    const killedAt: number[] = [];
    for (let i = 0; i < KILLS; i++) {
      // Once this life has created something, at a random moment: mid-create, mid-list,
      // between a create and its status write...
      const before = created();
      await waitFor(() => created() >= before + 10, { timeoutMs: 120_000, description: "creates under way" });
      await new Promise((r) => setTimeout(r, Math.random() * 1_500));
      const exit = await op.kill("SIGKILL");
      expect(exit.signal).toBe("SIGKILL");
      killedAt.push(created());
      if (i === 1) await leaveOrphanVMs(5);
      op = await start();
    }
    await applied;

    const resources = await waitAllReady(ns.name, TOTAL, { timeoutMs: 300_000 });
    const final = created();
    // The kills did land while creates were still to come.
    expect(killedAt.every((n) => n > 0 && n < final)).toBe(true);
    emulator.setOptions({ errorRate: 0 });
    const report = expectExactlyOnce(emulator, resources);
    expect(report).toMatchObject({ agents: MIX.agents, deployments: MIX.deployments, skills: MIX.skills, liveVMs: MIX.sandboxes });
    expect([...emulator.state.agents.values()].filter((a) => a.name.startsWith("c-"))).toHaveLength(MIX.agents);
    const byStatus = emulator.stats().byStatus;
    expect(byStatus["500"] ?? 0).toBeGreaterThan(0);
    expect(byStatus["dropped"] ?? 0).toBeGreaterThan(0);
    expect(op.alive()).toBe(true);
    console.log(`crash suite: killed at ${killedAt.join(", ")} of ${final} creates; ${JSON.stringify(report)}; answers ${JSON.stringify(byStatus)}`);

    // A final restart with everything in place creates nothing, and gives back leftovers that
    // carry a resource's marker next to the object its status names (as a create whose answer
    // was lost, landing after its retry, would leave).
    await op.kill("SIGKILL");
    const leftovers = await leaveOrphanVMs(5, resources);
    const leftDeployments = leaveOrphanDeployments(5, resources);
    op = await start();
    await waitFor(
      async () =>
        (await op!.metric("controller_runtime_reconcile_total", { controller: "sandbox" })) >= MIX.sandboxes &&
        (await op!.metric("controller_runtime_reconcile_total", { controller: "agentdeployment" })) >= MIX.deployments,
      { timeoutMs: 120_000, description: "the restarted operator to look at every Sandbox and AgentDeployment" },
    );
    await waitFor(() => [...leftovers, ...leftDeployments].every((id) => !emulator.state.vms.has(id) && !emulator.state.deployments.has(id)), {
      timeoutMs: 60_000,
      description: "the leftovers to be given back",
    });
    expect(created()).toBe(final);
    const after = expectExactlyOnce(emulator, await listManaged(ns.name));
    expect(after.releasedOrphans).toBeGreaterThanOrEqual(report.releasedOrphans + leftovers.length);

    // Deleting everything at once (Connection included), with the errors back on and one more
    // kill half-way, leaves nothing behind in the service.
    emulator.setOptions({ errorRate: 0.2 });
    const deleted = deleteAllManaged(ns.name, { timeoutMs: 240_000 });
    await waitFor(() => emulator.state.agents.size < MIX.agents, { timeoutMs: 60_000, description: "deletes under way" });
    await op.kill("SIGKILL");
    op = await start();
    expect(await deleted).toBe(true);
    expect(await listManaged(ns.name)).toEqual([]);
    const ours = (m: Record<string, string> | undefined) => m?.[MARKER_KEY] !== undefined;
    expect([...emulator.state.agents.values()].filter((a) => ours(a.metadata))).toEqual([]);
    expect([...emulator.state.deployments.values()].filter((d) => ours(d.metadata as Record<string, string>))).toEqual([]);
    expect([...emulator.state.vms.values()].filter((v) => ours(v.metadata))).toEqual([]);
    expect([...emulator.state.skills.keys()].filter((n) => n.startsWith("c-"))).toEqual([]);
  }, 600_000);
});
