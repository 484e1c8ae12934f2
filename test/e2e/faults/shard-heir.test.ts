// A fenced replica's share is worked on by its heirs from the fence on, before any of its
// objects is relabelled (src/sharding/succession.ts). No sharder runs here: the leader Lease is
// held by a replica that does not exist, so nothing is ever relabelled, and the test writes
// the member Leases and the fence by hand, as a replica and the sharder write them. What
// reaches the service shows who worked on each object (the User-Agent names the replica).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startEmulator, type Emulator } from "../../../src/emulator/index.js";
import { leasesPath, type KubeClient } from "../../../src/runtime/kube-client.js";
import type { Lease } from "../../../src/runtime/leader-election.js";
import { MEMBER_LABEL, OWNER_LABEL, memberLeaseName } from "../../../src/sharding/labels.js";
import { AT_WORK_ON_INHERITED, INHERITS_ANNOTATION } from "../../../src/sharding/succession.js";
import { clientFor } from "../runtime/support.js";
import { fenceMemberLease } from "../sharding/support.js";
import { kubectlOk, testKubeconfig, uniqueName, useTestNamespace, waitFor } from "../support/kube.js";
import { API_KEY, apply, connectionManifest, installCRDs } from "../support/operator.js";
import { startOperatorProcess, type OperatorProcess } from "../support/process.js";
import { deleteAllManaged, listManaged, type ListedResource } from "./support.js";

const ns = useTestNamespace("fault-shard-heir");
const HEIR = "heir-x";
const GONE = "gone-replica";
const STRANGER = "gone-elsewhere";
const EACH = 6;
let emulator: Emulator;
let admin: KubeClient;
let heir: OperatorProcess | undefined;

const microNow = (): string => new Date().toISOString().replace(/Z$/, "000Z");
const ownerOf = (r: ListedResource): string => (r.metadata as { labels?: Record<string, string> }).labels?.[OWNER_LABEL] ?? "";
const readyOf = (r: ListedResource): boolean =>
  ((r as { status?: { conditions?: Array<{ type: string; status: string }> } }).status?.conditions ?? []).some((c) => c.type === "Ready" && c.status === "True");

beforeAll(async () => {
  await installCRDs();
  admin = clientFor();
  emulator = await startEmulator({ apiKey: API_KEY, strictBodies: true, orgId: "org-e2e" });
  await apply(connectionManifest(ns.name, emulator), ns.name);
  // Reported Ready by the leader, as the absent one would have (its controller runs on the leader only).
  const connection = `/apis/agentcompute.dev/v1alpha1/namespaces/${ns.name}/connections/default`;
  const { metadata } = await admin.get<{ metadata: { generation?: number } }>(connection);
  const condition = { type: "Ready", status: "True", reason: "Connected", message: "reported by the test", lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, "Z") };
  await admin.patch(`${connection}/status`, { status: { observedGeneration: metadata.generation, conditions: [condition] } }, "merge");
});

afterAll(async () => {
  if (heir?.alive()) await deleteAllManaged(ns.name);
  await heir?.kill();
  await emulator?.close();
  await admin?.close();
});

describe("a fenced replica's heirs", () => {
  it("work on its objects from the fence on, with nothing relabelled; the others' heirs' objects are not theirs", async () => {
    const lease = uniqueName("shard-heir");
    const member = (identity: string) => ({
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: { name: memberLeaseName(`${lease}-shard`, identity), namespace: ns.name, labels: { [MEMBER_LABEL]: lease } },
      spec: { holderIdentity: identity, leaseDurationSeconds: 3600, renewTime: microNow(), acquireTime: microNow() },
    });
    // The leader (and so the sharder) is a replica that is not here; two members are not either.
    await admin.create(leasesPath(ns.name), {
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: { name: lease, namespace: ns.name },
      spec: { holderIdentity: "absent-leader", leaseDurationSeconds: 3600, renewTime: microNow() },
    });
    for (const m of [GONE, STRANGER]) await admin.create(leasesPath(ns.name), member(m));
    heir = await startOperatorProcess({
      kubeconfig: testKubeconfig(),
      namespaces: [ns.name],
      leaderElection: { namespace: ns.name, id: lease },
      sharding: true,
      logLevel: "info",
      env: { POD_NAME: HEIR },
    });
    await waitFor(async () => (await heir!.metric("agentcompute_shard_members")) === 3, { timeoutMs: 60_000, description: "the heir to count three members" });

    const sandboxes = (owner: string) =>
      Array.from(
        { length: EACH },
        (_, i) => `apiVersion: agentcompute.dev/v1alpha1\nkind: Sandbox\nmetadata: {name: ${owner}-sb-${i}, labels: {${OWNER_LABEL}: ${owner}}}\nspec: {tier: standard, ttlSeconds: 600}`,
      );
    await apply([...sandboxes(GONE), ...sandboxes(STRANGER)].join("\n---\n"), ns.name);

    // Both owners hold their Leases: nothing of theirs is the heir's.
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    expect(emulator.requests.filter((r) => r.operation === "vms.allocate")).toEqual([]);

    // The sharder's fence of GONE, naming the heir; STRANGER's names another replica.
    const fence = (identity: string, heirs: string[]): Promise<void> => fenceMemberLease(admin, ns.name, memberLeaseName(`${lease}-shard`, identity), heirs);
    await fence(GONE, [HEIR]);
    await fence(STRANGER, ["another-replica"]);

    const gone = await waitFor(
      async () => {
        const all = (await listManaged(ns.name)).filter((r) => r.kind === "Sandbox" && r.metadata.name.startsWith(`${GONE}-`));
        return all.length === EACH && all.every(readyOf) ? all : undefined;
      },
      { timeoutMs: 90_000, intervalMs: 500, description: "the heir to make the fenced replica's Sandboxes Ready" },
    );
    // Still labelled for the fenced replica: worked on where they were, not moved.
    expect(gone.map(ownerOf)).toEqual(Array.from({ length: EACH }, () => GONE));
    const allocations = emulator.requests.filter((r) => r.operation === "vms.allocate" && r.status === 201);
    expect(allocations).toHaveLength(EACH);
    for (const a of allocations) expect(a.userAgent).toContain(`(replica ${HEIR})`);
    // Its own Lease says what it took on (a restarted process of GONE waits while it does), and so does its log.
    const own = await admin.get<Lease>(leasesPath(ns.name, memberLeaseName(`${lease}-shard`, HEIR)));
    expect(own.metadata.annotations?.[INHERITS_ANNOTATION]).toBe(GONE);
    expect(heir.logs.some((l) => l.includes(AT_WORK_ON_INHERITED) && l.includes(GONE))).toBe(true);

    // The other fenced replica's objects have another heir: this replica never works on them.
    const stranger = (await listManaged(ns.name)).filter((r) => r.kind === "Sandbox" && r.metadata.name.startsWith(`${STRANGER}-`));
    expect(stranger).toHaveLength(EACH);
    for (const r of stranger) {
      expect(readyOf(r)).toBe(false);
      expect(r.metadata.finalizers ?? []).toEqual([]);
    }

    // The sharder's relabelling, when it comes, names the heir: the heir goes on, nothing is made twice.
    for (const r of gone) await admin.patch(`/apis/agentcompute.dev/v1alpha1/namespaces/${ns.name}/sandboxes/${r.metadata.name}`, { metadata: { labels: { [OWNER_LABEL]: HEIR } } }, "merge");
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    const after = (await listManaged(ns.name)).filter((r) => r.kind === "Sandbox" && r.metadata.name.startsWith(`${GONE}-`));
    expect(after.every((r) => ownerOf(r) === HEIR && readyOf(r))).toBe(true);
    expect(emulator.requests.filter((r) => r.operation === "vms.allocate")).toHaveLength(EACH);

    // Deleted (before their Connection, which no leader guards here): the heir releases their VMs.
    await kubectlOk(["delete", "sandboxes", ...gone.map((r) => r.metadata.name), "--wait=false"], { namespace: ns.name });
    await waitFor(async () => !(await listManaged(ns.name)).some((r) => r.metadata.name.startsWith(`${GONE}-`)), { timeoutMs: 60_000, description: "the Sandboxes deleted" });
    expect(emulator.requests.filter((r) => r.operation === "vms.release" && r.status === 200)).toHaveLength(EACH);
  });
});
