// A crashed replica's share moves on the kubelet's report of the crash (src/sharding/crash-
// report.ts), not a lease duration later. Two replicas of `agent-operator run --sharding` run as
// child processes with the downward API's variables of a Pod each; the Pods are objects of the
// API server, and the test writes their container status as the kubelet does (no kubelet runs
// here). A replica is SIGKILLed and its container's end reported: its member Lease is fenced for
// that reason and its share taken on, with nothing made twice. Killed, the leader is also
// succeeded on the report (its leader Lease says which process holds it), not a lease later:
// the new leader fences the member Lease for the report too, where a lease run out would say so.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startEmulator, type Emulator } from "../../../src/emulator/index.js";
import { leasesPath, type KubeClient } from "../../../src/runtime/kube-client.js";
import type { Lease } from "../../../src/runtime/leader-election.js";
import { killedContainer, podForReplica, reportContainer } from "../../../dev/kubelet.js";
import { CLOCK_MARGIN_MS } from "../../../src/sharding/crash-report.js";
import { OWNER_LABEL, memberLeaseName } from "../../../src/sharding/labels.js";
import { FENCED_BECAUSE_ANNOTATION, FENCED_MEMBER_ANNOTATION, fenceOf } from "../../../src/sharding/succession.js";
import { clientFor } from "../runtime/support.js";
import { kubectlOk, testKubeconfig, uniqueName, useTestNamespace, waitFor } from "../support/kube.js";
import { API_KEY, apply, connectionManifest, installCRDs } from "../support/operator.js";
import { startOperatorProcess, type OperatorProcess } from "../support/process.js";
import { deleteAllManaged, listManaged, type ListedResource } from "./support.js";

const ns = useTestNamespace("fault-crash-report");
const SANDBOXES = 16;
let emulator: Emulator;
let admin: KubeClient;
const replicas: OperatorProcess[] = [];

const ownerOf = (r: ListedResource): string => (r.metadata as { labels?: Record<string, string> }).labels?.[OWNER_LABEL] ?? "";
const readyOf = (r: ListedResource): boolean =>
  ((r as { status?: { conditions?: Array<{ type: string; status: string }> } }).status?.conditions ?? []).some((c) => c.type === "Ready" && c.status === "True");
const sandboxes = async (): Promise<ListedResource[]> => (await listManaged(ns.name)).filter((r) => r.kind === "Sandbox");

/** A replica in a Pod: the Pod created and reported running, then the process with the Pod's downward API variables. */
async function startReplica(name: string, lease: string): Promise<OperatorProcess> {
  const env = await podForReplica(admin, ns.name, name);
  const replica = await startOperatorProcess({
    kubeconfig: testKubeconfig(),
    namespaces: [ns.name],
    leaderElection: { namespace: ns.name, id: lease },
    sharding: true,
    logLevel: "info",
    env,
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

describe.each([
  { role: "follower", killed: (r: { leader: OperatorProcess; follower: OperatorProcess }) => r.follower },
  { role: "leader", killed: (r: { leader: OperatorProcess; follower: OperatorProcess }) => r.leader },
])("a replica whose crash the kubelet reports: the $role", ({ role, killed }) => {
  it("is fenced on the report, and its share is taken on with nothing made twice", async () => {
    const LEADER = `${role}-case-leader`;
    const FOLLOWER = `${role}-case-follower`;
    const [VICTIM, SURVIVOR] = role === "leader" ? [LEADER, FOLLOWER] : [FOLLOWER, LEADER];
    const allocatedBefore = emulator.requests.filter((r) => r.operation === "vms.allocate" && r.status === 201).length;
    const releasedBefore = emulator.requests.filter((r) => r.operation === "vms.release" && r.status === 200).length;
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
    const share = before.filter((r) => ownerOf(r) === VICTIM).map((r) => r.metadata.name);
    expect(share.length, "the killed replica's share").toBeGreaterThan(0);

    // Running for longer than the clock margin: a crash sooner after the start is left to the Lease.
    await new Promise((resolve) => setTimeout(resolve, CLOCK_MARGIN_MS + 1_000));
    // SIGKILL, and the kubelet's report of the container's end.
    const survivor = killed({ leader, follower }) === leader ? follower : leader;
    await killed({ leader, follower }).kill();
    await reportContainer(admin, ns.name, VICTIM, killedContainer());

    // Fenced for the report (a Lease run out would say lease-expired), naming the survivor its heir.
    const memberLease = leasesPath(ns.name, memberLeaseName(`${lease}-shard`, VICTIM));
    const fenced = await waitFor(
      async () => {
        const l = await admin.get<Lease>(memberLease);
        return (l.spec?.holderIdentity ?? "x") === "" ? l : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200, description: "the killed replica's member Lease fenced" },
    );
    expect(fenced.metadata.annotations).toMatchObject({ [FENCED_MEMBER_ANNOTATION]: VICTIM, [FENCED_BECAUSE_ANNOTATION]: "crash-reported" });
    expect(fenceOf(fenced)).toEqual({ member: VICTIM, heirs: [SURVIVOR] });
    // The survivor leads (the leader Lease taken on the report, when the leader was killed).
    expect(await survivor.metric("leader_election_master_status", { name: lease })).toBe(1);
    expect((await admin.get<Lease>(leasesPath(ns.name, lease))).spec?.holderIdentity).toBe(SURVIVOR);

    // The survivor works on the dead replica's share: one of its Sandboxes deleted has its VM released by the survivor.
    const gone = share[0]!;
    await kubectlOk(["delete", "sandbox", gone, "--wait=false"], { namespace: ns.name });
    await waitFor(async () => !(await sandboxes()).some((r) => r.metadata.name === gone), { timeoutMs: 60_000, description: "the Sandbox deleted" });
    const releases = emulator.requests.filter((r) => r.operation === "vms.release" && r.status === 200).slice(releasedBefore);
    expect(releases).toHaveLength(1);
    expect(releases[0]!.userAgent).toContain(`(replica ${SURVIVOR})`);

    // Everything moves to the survivor, Ready, and no VM was allocated twice.
    await waitFor(
      async () => {
        const all = await sandboxes();
        return all.length === SANDBOXES - 1 && all.every((r) => ownerOf(r) === SURVIVOR && readyOf(r));
      },
      { timeoutMs: 60_000, intervalMs: 500, description: "the share relabelled to the survivor" },
    );
    expect(emulator.requests.filter((r) => r.operation === "vms.allocate" && r.status === 201)).toHaveLength(allocatedBefore + SANDBOXES);
    // Gone while the survivor runs (it releases their VMs), for the next case.
    await kubectlOk(["delete", "sandboxes", "--all", "--wait=true", "--timeout=60s"], { namespace: ns.name, timeoutMs: 90_000 });
    await survivor.kill();
  });
});
