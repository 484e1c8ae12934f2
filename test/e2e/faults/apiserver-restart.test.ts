// The Kubernetes API server restarts while the operator is in the middle of creating
// resources. The suite runs its OWN kube-apiserver (dev/kube-apiserver.ts, a private state dir):
// restarting the shared one would cut every other suite (and anyone's `npm run kube:up`
// server on this machine) off mid-test. It is the same binary and the same kubeUp/kubeDown
// the global setup uses; the restart keeps etcd's data, certificates and port, as a real
// control-plane restart does.
//
// While the server is down the operator cannot read or write Kubernetes: its status writes
// fail, its watches break and reconnect with backoff. Meanwhile the service drifts (a skill
// edited, a deployment deleted, a VM expired). After the restart: the watches recover without
// a reconnect storm (agentcompute_informer_watch_restarts_total), the work in flight finishes
// without duplicates, the drift is put back, and changes made right after the restart (a spec
// change, a delete, new resources) are all reconciled.
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startEmulator, type Emulator } from "../../../src/emulator/index.js";
import { createTestNamespace, kubectlOk, usingExistingCluster, waitFor } from "../support/kube.js";
import { API_KEY, connectionManifest } from "../support/operator.js";
import { startOperatorProcess, type OperatorProcess } from "../support/process.js";
import { deleteAllManaged,
  createAll,
  expectExactlyOnce,
  mixedManifests,
  startPrivateApiserver,
  waitAllReady,
  type ListedResource,
  type PrivateApiserver,
} from "./support.js";

let api: PrivateApiserver;
let ns: string;
let emulator: Emulator;
let op: OperatorProcess;
const logs: string[] = [];
const OUTAGE_MS = 6_000;
const SYNC = "10s";

const before = { prefix: "pre", skills: 3, agents: 3, deployments: 3, sandboxes: 3, withSkills: true };
const during = { prefix: "mid", skills: 6, agents: 6, deployments: 6, sandboxes: 6, withSkills: true };
const after = { prefix: "post", skills: 2, agents: 2, deployments: 2, sandboxes: 2, withSkills: true };
const count = (m: typeof before) => m.skills + m.agents + m.deployments + m.sandboxes;

const kube = (args: string[], input?: string) => kubectlOk(args, { kubeconfig: api.kubeconfig, namespace: ns, input });
const get = async (kind: string, name: string) => JSON.parse(await kube(["get", kind, name, "-o", "json"])) as ListedResource;

describe.skipIf(usingExistingCluster())("the API server restarts mid-work", () => {
  beforeAll(async () => {
    api = await startPrivateApiserver("restart");
    ns = await createTestNamespace("restart", api.kubeconfig);
    emulator = await startEmulator({ apiKey: API_KEY, strictBodies: true, orgId: "org-e2e", latencyMs: 20, jitterMs: 40, rateLimit: 20 });
    await kube(["apply", "-f", "-"], connectionManifest(ns, emulator));
    op = await startOperatorProcess({ kubeconfig: api.kubeconfig, namespaces: [ns], logs, logLevel: "info", syncPeriod: SYNC });
  });

  afterAll(async () => {
    if (op?.alive()) {
      emulator.setOptions({ rateLimit: undefined, latencyMs: 0, jitterMs: 0 });
      await deleteAllManaged(ns, { kubeconfig: api.kubeconfig });
      await op.stop();
    }
    await emulator?.close();
    await api?.destroy();
  });

  it("recovers its watches without a storm and loses and duplicates nothing", async () => {
    await createAll(mixedManifests(before), ns, { kubeconfig: api.kubeconfig });
    const pre = await waitAllReady(ns, count(before), { kubeconfig: api.kubeconfig, prefix: "pre" });
    const preSandbox = pre.find((r) => r.kind === "Sandbox")!;
    const preDeployment = pre.find((r) => r.kind === "AgentDeployment")!;

    // Work in flight when the server goes away.
    await createAll(mixedManifests(during), ns, { kubeconfig: api.kubeconfig });
    const creates = () => emulator.requests.filter((r) => r.status === 200 || r.status === 201).length;
    const c0 = creates();
    await waitFor(() => creates() >= c0 + 5, { timeoutMs: 60_000, description: "creates under way" });
    const restartsBefore = await op.metric("agentcompute_informer_watch_restarts_total");

    await api.restart(async () => {
      // The service drifts while Kubernetes is unreachable.
      emulator.state.updateSkill("pre-skill-0", { content: "tampered during the outage" });
      emulator.state.deleteDeployment(preDeployment.status?.deploymentId as string);
      emulator.state.expireVM(preSandbox.status?.vmId as string);
      await sleep(OUTAGE_MS);
      expect(op.alive()).toBe(true);
    });
    const downAt = logs.length;

    // Changes right after the restart, while the watches are still reconnecting.
    await kube(["patch", "agent", "pre-agent-1", "--type=merge", "-p", JSON.stringify({ spec: { image: "example/agent-1:2" } })]);
    await kube(["delete", "skill", "pre-skill-2", "--wait=false"]);
    await createAll(mixedManifests(after), ns, { kubeconfig: api.kubeconfig });

    const total = count(before) - 1 + count(during) + count(after);
    const all = await waitAllReady(ns, total, { kubeconfig: api.kubeconfig, timeoutMs: 180_000 });
    expect(op.alive()).toBe(true);

    // Nothing lost: the spec change, the delete, the new resources, the drift put back.
    const agent = all.find((r) => r.metadata.name === "pre-agent-1")!;
    expect(emulator.state.agents.get(agent.status?.agentId as string)?.image).toBe("example/agent-1:2");
    await waitFor(() => !emulator.state.skills.has("pre-skill-2"), { timeoutMs: 60_000, description: "the deleted Skill to leave the service" });
    await waitFor(() => emulator.state.skills.get("pre-skill-0")?.content === "instructions 0", {
      timeoutMs: 60_000,
      description: "the edited skill to be put back",
    });
    const sandbox = await waitFor(
      async () => {
        const s = await get("sandbox", preSandbox.metadata.name);
        return s.status?.vmId !== preSandbox.status?.vmId && emulator.state.vms.has(s.status?.vmId as string) ? s : undefined;
      },
      { timeoutMs: 60_000, description: "the expired VM to be replaced" },
    );
    expect(sandbox.status?.vmId).toBeDefined();
    const deployment = await waitFor(
      async () => {
        const d = await get("agentdeployment", preDeployment.metadata.name);
        return emulator.state.deployments.has(d.status?.deploymentId as string) ? d : undefined;
      },
      { timeoutMs: 60_000, description: "the deleted deployment to be recreated" },
    );
    expect(deployment.status?.deploymentId).not.toBe(preDeployment.status?.deploymentId);

    // Nothing duplicated.
    expectExactlyOnce(emulator, await waitAllReady(ns, total, { kubeconfig: api.kubeconfig }));

    // No reconnect storm: each informer (8: six kinds, Secrets, ConfigMaps) backed off while
    // the server was away, a handful of reconnects each, not one per few milliseconds.
    const restarts = (await op.metric("agentcompute_informer_watch_restarts_total")) - restartsBefore;
    console.log(`apiserver restart: ${restarts} watch restarts; ${logs.length - downAt} log lines since`);
    expect(restarts).toBeGreaterThanOrEqual(8);
    expect(restarts).toBeLessThanOrEqual(8 * 12);
    // And they watch again: a change now is seen at once.
    await kube(["patch", "agent", "pre-agent-2", "--type=merge", "-p", JSON.stringify({ spec: { image: "example/agent-2:3" } })]);
    const id = all.find((r) => r.metadata.name === "pre-agent-2")!.status?.agentId as string;
    await waitFor(() => emulator.state.agents.get(id)?.image === "example/agent-2:3", { timeoutMs: 30_000, description: "a change after recovery" });
  }, 400_000);
});
