// A crashed replica's share moves on the kubelet's report of the crash (src/sharding/crash-
// report.ts), not a lease duration later. Two replicas of `agent-operator run --sharding` run as
// child processes with the downward API's variables of a Pod each; the Pods are objects of the
// API server, and the test writes their container status as the kubelet does (no kubelet runs
// here). The follower is SIGKILLed and its container's end reported: the leader fences its
// member Lease for that reason and takes its share on, with nothing made twice.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startEmulator, type Emulator } from "../../../src/emulator/index.js";
import { leasesPath, type KubeClient } from "../../../src/runtime/kube-client.js";
import type { Lease } from "../../../src/runtime/leader-election.js";
import type { PodReport } from "../../../src/sharding/crash-report.js";
import { OWNER_LABEL, memberLeaseName } from "../../../src/sharding/labels.js";
import { FENCED_BECAUSE_ANNOTATION, FENCED_MEMBER_ANNOTATION, fenceOf } from "../../../src/sharding/succession.js";
import { clientFor } from "../runtime/support.js";
import { kubectlOk, testKubeconfig, uniqueName, useTestNamespace, waitFor } from "../support/kube.js";
import { API_KEY, apply, connectionManifest, installCRDs } from "../support/operator.js";
import { startOperatorProcess, type OperatorProcess } from "../support/process.js";
import { deleteAllManaged, listManaged, type ListedResource } from "./support.js";

const ns = useTestNamespace("fault-crash-report");
const SANDBOXES = 16;
const LEADER = "cr-leader";
const FOLLOWER = "cr-follower";
let emulator: Emulator;
let admin: KubeClient;
const replicas: OperatorProcess[] = [];

const second = (ms: number): string => new Date(ms).toISOString().replace(/\.\d+Z$/, "Z");
const ownerOf = (r: ListedResource): string => (r.metadata as { labels?: Record<string, string> }).labels?.[OWNER_LABEL] ?? "";
const readyOf = (r: ListedResource): boolean =>
  ((r as { status?: { conditions?: Array<{ type: string; status: string }> } }).status?.conditions ?? []).some((c) => c.type === "Ready" && c.status === "True");
const sandboxes = async (): Promise<ListedResource[]> => (await listManaged(ns.name)).filter((r) => r.kind === "Sandbox");

/** What the kubelet writes on a replica's Pod: its container's state (the only container, "operator"). */
async function report(pod: string, status: Record<string, unknown>): Promise<void> {
  await admin.patch(
    `/api/v1/namespaces/${ns.name}/pods/${pod}/status`,
    { status: { containerStatuses: [{ name: "operator", image: "agent-operator", imageID: "", ready: true, restartCount: 0, ...status }] } },
    "merge",
  );
}

/** A replica in a Pod: the Pod created and reported running, then the process with the Pod's downward API variables. */
async function startReplica(name: string, lease: string): Promise<OperatorProcess> {
  const pod = await admin.create<PodReport>(`/api/v1/namespaces/${ns.name}/pods`, {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name },
    spec: { containers: [{ name: "operator", image: "agent-operator" }] },
  });
  await report(name, { state: { running: { startedAt: second(Date.now()) } } });
  const replica = await startOperatorProcess({
    kubeconfig: testKubeconfig(),
    namespaces: [ns.name],
    leaderElection: { namespace: ns.name, id: lease },
    sharding: true,
    logLevel: "info",
    env: { POD_NAME: name, POD_NAMESPACE: ns.name, POD_UID: pod.metadata.uid ?? "", CONTAINER_NAME: "operator" },
  });
  replicas.push(replica);
  return replica;
}

beforeAll(async () => {
  await installCRDs();
  admin = clientFor();
  emulator = await startEmulator({ apiKey: API_KEY, strictBodies: true, orgId: "org-e2e" });
  await apply(connectionManifest(ns.name, emulator), ns.name);
});

afterAll(async () => {
  if (replicas.some((r) => r.alive())) await deleteAllManaged(ns.name);
  for (const r of replicas) await r.kill();
  await emulator?.close();
  await admin?.close();
});

describe("a replica whose crash the kubelet reports", () => {
  it("is fenced on the report, and its share is taken on with nothing made twice", async () => {
    const lease = uniqueName("crash-report");
    const leader = await startReplica(LEADER, lease);
    await waitFor(async () => (await leader.metric("leader_election_master_status", { name: lease })) === 1, { timeoutMs: 60_000, description: "the first replica to lead" });
    const follower = await startReplica(FOLLOWER, lease);
    for (const r of [leader, follower]) {
      await waitFor(async () => (await r.metric("agentcompute_shard_members")) === 2, { timeoutMs: 60_000, description: "two members" });
    }
    const manifests = Array.from({ length: SANDBOXES }, (_, i) => `apiVersion: agentcompute.dev/v1alpha1\nkind: Sandbox\nmetadata: {name: sb-${i}}\nspec: {tier: standard, ttlSeconds: 600}`);
    await apply(manifests.join("\n---\n"), ns.name);
    const before = await waitFor(
      async () => {
        const all = await sandboxes();
        return all.length === SANDBOXES && all.every(readyOf) ? all : undefined;
      },
      { timeoutMs: 120_000, intervalMs: 500, description: "every Sandbox Ready" },
    );
    const share = before.filter((r) => ownerOf(r) === FOLLOWER).map((r) => r.metadata.name);
    expect(share.length, "the follower's share").toBeGreaterThan(0);

    // SIGKILL, and the kubelet's report of the container's end.
    await follower.kill();
    await report(FOLLOWER, { ready: false, state: { terminated: { exitCode: 137, reason: "Error", startedAt: second(Date.now() - 60_000), finishedAt: second(Date.now()) } } });

    // Fenced for the report (a Lease run out would say lease-expired), naming the leader its heir.
    const memberLease = leasesPath(ns.name, memberLeaseName(`${lease}-shard`, FOLLOWER));
    const fenced = await waitFor(
      async () => {
        const l = await admin.get<Lease>(memberLease);
        return (l.spec?.holderIdentity ?? "x") === "" ? l : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200, description: "the follower's member Lease fenced" },
    );
    expect(fenced.metadata.annotations).toMatchObject({ [FENCED_MEMBER_ANNOTATION]: FOLLOWER, [FENCED_BECAUSE_ANNOTATION]: "crash-reported" });
    expect(fenceOf(fenced)).toEqual({ member: FOLLOWER, heirs: [LEADER] });

    // The leader works on the dead follower's share: one of its Sandboxes deleted has its VM released by the leader.
    const gone = share[0]!;
    await kubectlOk(["delete", "sandbox", gone, "--wait=false"], { namespace: ns.name });
    await waitFor(async () => !(await sandboxes()).some((r) => r.metadata.name === gone), { timeoutMs: 60_000, description: "the Sandbox deleted" });
    const releases = emulator.requests.filter((r) => r.operation === "vms.release" && r.status === 200);
    expect(releases).toHaveLength(1);
    expect(releases[0]!.userAgent).toContain(`(replica ${LEADER})`);

    // Everything moves to the leader, Ready, and no VM was allocated twice.
    await waitFor(
      async () => {
        const all = await sandboxes();
        return all.length === SANDBOXES - 1 && all.every((r) => ownerOf(r) === LEADER && readyOf(r));
      },
      { timeoutMs: 60_000, intervalMs: 500, description: "the share relabelled to the leader" },
    );
    expect(emulator.requests.filter((r) => r.operation === "vms.allocate" && r.status === 201)).toHaveLength(SANDBOXES);
  });
});
