// A sharded replica stopped (SIGTERM, as in a rolling update) while one of its reconciles
// hangs on the service. Its Connection lets a request take 2 minutes (`timeoutSeconds`, for a
// slow service), longer than the grace period (60 s here), and the hung call outlives both, so
// the replica cannot leave the ring cleanly (deleting its member Lease could let the next owner
// act beside the hung call). What must not happen is the rest of its share, VMs due for
// renewal among it, waiting for the grace period: the member Lease is renewed no more from the
// signal on, so it runs out a lease duration (15 s) later, and the other replica takes the
// share over. Nor may the hung call outlive the membership: at the renew deadline of the last
// renewal the membership is lost, and the process ends 3 s later, as when a renewal fails.
// The leader, stopped so, hands leadership (the sharder, which makes the moves) over at once,
// rather than holding it until its process ends and its leader Lease runs out.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startEmulator, type Emulator } from "../../../src/emulator/index.js";
import { OWNER_LABEL } from "../../../src/sharding/labels.js";
import { kubectlOk, testKubeconfig, uniqueName, useTestNamespace, waitFor } from "../support/kube.js";
import { API_KEY, apply, connectionManifest, installCRDs } from "../support/operator.js";
import { startOperatorProcess, type OperatorProcess } from "../support/process.js";
import { deleteAllManaged, listManaged, waitAllReady, type ListedResource } from "./support.js";

const SANDBOXES = 12;
const GRACE_S = 60;
const CALL_TIMEOUT_S = 120;
let emulator: Emulator;

const ownerOf = (r: ListedResource): string => (r.metadata as { labels?: Record<string, string> }).labels?.[OWNER_LABEL] ?? "";
const vmOf = (r: ListedResource): string | undefined => (r as { status?: { vmId?: string } }).status?.vmId;

beforeAll(async () => {
  await installCRDs();
  emulator = await startEmulator({ apiKey: API_KEY, strictBodies: true, orgId: "org-e2e" });
});

afterAll(async () => {
  await emulator?.close();
});

describe.each([
  { role: "follower", leads: false },
  { role: "leader", leads: true },
])("a sharded replica stopped while a reconcile hangs: the $role", ({ role, leads }) => {
  const ns = useTestNamespace(`fault-shard-stop-${role}`);
  const names = [`stop-${role}-r0`, `stop-${role}-r1`];
  const replicas: OperatorProcess[] = [];

  beforeAll(async () => {
    await apply(connectionManifest(ns.name, emulator).replace("  credentials:", `  timeoutSeconds: ${CALL_TIMEOUT_S}\n  credentials:`), ns.name);
  });

  afterAll(async () => {
    emulator?.clearFaults();
    if (replicas.some((p) => p.alive())) await deleteAllManaged(ns.name);
    await Promise.all(replicas.map((p) => p.kill()));
  });

  it("hands its share over a lease duration after the signal, not after its grace period", async () => {
    const lease = uniqueName("shard-stop");
    const requestsBefore = emulator.requests.length; // the emulator serves both cases
    replicas.push(
      ...(await Promise.all(
        names.map((name) =>
          startOperatorProcess({
            kubeconfig: testKubeconfig(),
            namespaces: [ns.name],
            leaderElection: { namespace: ns.name, id: lease },
            sharding: true,
            gracefulShutdownTimeout: `${GRACE_S}s`,
            logLevel: "info",
            env: { POD_NAME: name },
          }),
        ),
      )),
    );
    await waitFor(async () => (await Promise.all(replicas.map((r) => r.metric("agentcompute_shard_members")))).every((n) => n === 2), {
      timeoutMs: 60_000,
      description: "both replicas to count two members",
    });

    const manifests = Array.from(
      { length: SANDBOXES },
      (_, i) => `apiVersion: agentcompute.dev/v1alpha1\nkind: Sandbox\nmetadata: {name: stop-sb-${i}}\nspec: {tier: standard, ttlSeconds: 600}`,
    ).join("\n---\n");
    await apply(manifests, ns.name);
    await waitAllReady(ns.name, SANDBOXES, { timeoutMs: 120_000 });

    // The replica that does not lead (the sharder stays up), or the leader, stops once it owns a few Sandboxes.
    const leaders = await Promise.all(replicas.map((r) => r.metric("leader_election_master_status", { name: lease })));
    expect(leaders.filter((l) => l === 1)).toHaveLength(1);
    const victimIndex = leaders.findIndex((l) => (l === 1) === leads);
    const victim = replicas[victimIndex]!;
    const survivor = replicas[1 - victimIndex]!;
    const victimName = names[victimIndex]!;
    const survivorName = names[1 - victimIndex]!;
    const share = await waitFor(
      async () => {
        const own = (await listManaged(ns.name)).filter((r) => r.kind === "Sandbox" && ownerOf(r) === victimName);
        return own.length >= 2 ? own : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 500, description: `${victimName} to own at least two Sandboxes` },
    );

    // One of its Sandboxes is deleted, and the service holds the answer to its VM's release
    // for longer than the grace period: the reconcile hangs through it.
    const hung = share[0]!;
    const hungVM = vmOf(hung)!;
    expect(hungVM).toBeDefined();
    emulator.injectFault({ method: "POST", path: `/compute/v1/vms/${hungVM}/release`, action: { delayMs: CALL_TIMEOUT_S * 1000 } });
    await kubectlOk(["delete", "sandbox", hung.metadata.name, "--wait=false"], { namespace: ns.name });
    // The release reached the service: the VM is gone there (the emulator ends it, then holds
    // the answer). Not a state: its VMs are never "running", so that wait passed at once, and
    // a signal sent before the deletion was dequeued let the replica drain cleanly (exit 0).
    await waitFor(() => !emulator.state.vms.has(hungVM), { timeoutMs: 30_000, intervalMs: 100, description: "the hung release to reach the service" });

    const signalledAt = Date.now();
    victim.kill("SIGTERM").catch(() => undefined);
    if (leads) {
      // The survivor leads (its sharder will make the moves) while the stopping leader still
      // finishes: that one's Connection controller had nothing in flight, so it gave leadership
      // up at once. Held until its process ended, the Lease would run out only a lease duration
      // after that, and the moves wait for it.
      await waitFor(async () => (await survivor.metric("leader_election_master_status", { name: lease })) === 1, {
        timeoutMs: 30_000,
        intervalMs: 100,
        description: `${survivorName} to lead`,
      });
      expect(victim.alive(), "the stopping leader had ended before the survivor led").toBe(true);
    }
    const rest = share.slice(1).map((r) => r.metadata.name);
    await waitFor(
      async () => {
        const now = (await listManaged(ns.name)).filter((r) => r.kind === "Sandbox" && rest.includes(r.metadata.name));
        return now.length === rest.length && now.every((r) => ownerOf(r) === survivorName);
      },
      // The lease (15 s) and the moves; far less than the grace period.
      { timeoutMs: (GRACE_S - 15) * 1000, intervalMs: 250, description: `${victimName}'s other Sandboxes to move to ${survivorName}` },
    );
    const movedAfterMs = Date.now() - signalledAt;
    if (leads) expect(victim.logs.some((l) => l.includes("leadership handed over while the replica's share drains"))).toBe(true);
    expect(movedAfterMs).toBeLessThan(GRACE_S * 1000);
    expect(victim.logs.some((l) => l.includes("the member Lease is no longer renewed"))).toBe(true);
    // The stopping process did not wait out its grace period with the hung call open: it lost
    // its membership at the renew deadline and ended (code 1, as on a failed renewal).
    const ended = await Promise.race([victim.exited, new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), (GRACE_S - 15) * 1000 - movedAfterMs))]);
    expect(ended, `still running ${GRACE_S - 15} s after SIGTERM`).toEqual({ code: 1, signal: null });
    expect(victim.logs.some((l) => l.includes("shard membership lost") && l.includes("stopping, with reconciles still in flight"))).toBe(true);

    // The survivor finishes the deletion the hung reconcile began (the VM is already released),
    // and the moved Sandboxes stay Ready.
    await waitFor(async () => !(await listManaged(ns.name)).some((r) => r.metadata.name === hung.metadata.name), {
      timeoutMs: 60_000,
      description: "the hung Sandbox to be deleted by the survivor",
    });
    await waitAllReady(ns.name, SANDBOXES - 1, { timeoutMs: 60_000 });
    // Nothing was allocated twice: one VM per Sandbox, ever.
    expect(emulator.requests.slice(requestsBefore).filter((r) => r.operation === "vms.allocate" && r.status === 201)).toHaveLength(SANDBOXES);
  });
});
