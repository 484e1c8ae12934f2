// The membership's write gate, wired through the real operator: a replica whose shard
// membership is not current (not joined, or a renewal overdue after a stall) writes nothing for
// its share, neither to the service nor to the API server, even from a reconcile that is
// already running; the Connection controller, which the leader runs whether or not it has
// joined, goes on. The replica's side of sharding (src/sharding/) is stood in for by a gate
// the test opens and closes; the membership that drives it in `run --sharding` is
// test/e2e/sharding/membership.test.ts's.
import { describe, expect, it } from "vitest";
import { MARKER_KEY } from "../../../src/api/names.js";
import { OWNER_LABEL } from "../../../src/sharding/labels.js";
import { MembershipLapsed } from "../../../src/sharding/membership.js";
import { kubectlOk, waitFor } from "../support/kube.js";
import { apply, condition, eventReasons, getResource, useStack, waitForReady } from "../support/operator.js";

const OWNER = "gate-test";
let open = false;
const t = useStack("write-gate", {
  sharding: {
    ownSelector: `${OWNER_LABEL}=${OWNER}`,
    usersOf: () => [],
    worksOn: () => true,
    writeGate: () => {
      if (!open) throw new MembershipLapsed();
    },
  },
});

/** A Sandbox of the replica's share. */
const applySandbox = (name: string): Promise<string> =>
  apply(`apiVersion: agentcompute.dev/v1alpha1\nkind: Sandbox\nmetadata: {name: ${name}, labels: {${OWNER_LABEL}: ${OWNER}}}\nspec: {tier: standard, ttlSeconds: 600}`, t.namespace);
const sandbox = (name: string) => getResource(t.stack.kube, "sandboxes", t.namespace, name);
const serviceWrites = () => t.stack.emulator.requests.filter((r) => r.method !== "GET" && r.operation !== "token").map((r) => r.operation);

describe("sharded mode: the membership's write gate", () => {
  it("while closed, nothing is written for the replica's share (its service objects, finalizers, status); the Connection is still reported on", async () => {
    open = false;
    t.stack.emulator.clearRequests();
    await applySandbox("gated");
    // The Connection controller's own writes are not gated.
    await waitForReady(t.stack, "connections", "default");
    // The Sandbox was reconciled, and each attempt stopped at its first write.
    await waitFor(() => t.stack.logs.some((l) => l.includes("shard membership is not current") && l.includes("gated")), {
      timeoutMs: 30_000,
      description: "a reconcile of the Sandbox refused by the gate",
    });
    const refused = await sandbox("gated");
    expect(refused.metadata.finalizers ?? []).toEqual([]);
    expect(refused.status ?? {}).toEqual({});
    expect(serviceWrites()).toEqual([]);

    open = true;
    const ready = await waitForReady(t.stack, "sandboxes", "gated", { timeoutMs: 60_000 });
    expect(condition(ready, "Ready")?.status).toBe("True");
    expect(serviceWrites()).toContain("vms.allocate");
  });

  it("a reconcile already running when the gate closes sends none of its remaining writes", async () => {
    open = true;
    // The service makes the VM and then holds its answer 6 s; the gate closes meanwhile (a
    // replica stopped mid-reconcile, its share handed over while it slept).
    t.stack.emulator.injectFault({ method: "POST", path: "/compute/v1/vms/allocate", action: { delayMs: 6_000 } });
    t.stack.emulator.clearRequests();
    await applySandbox("midway");
    const uid = (await sandbox("midway")).metadata.uid;
    // Its VM, by its marker (another test's Sandbox may get one meanwhile).
    const made = () => [...t.stack.emulator.state.vms.values()].some((vm) => vm.metadata?.[MARKER_KEY] === uid);
    await waitFor(made, { timeoutMs: 30_000, intervalMs: 20, description: "the allocation made, its answer held" });
    const closedAt = Date.now();
    open = false;
    await waitFor(() => t.stack.logs.some((l) => l.includes("shard membership is not current") && l.includes("midway")), {
      timeoutMs: 30_000,
      description: "the rest of the reconcile refused by the gate",
    });
    // The allocation had been sent (it arrived before the gate closed) and was answered; what
    // came after it in the reconcile, the status naming the VM, was not written.
    const allocations = t.stack.emulator.requests.filter((r) => r.operation === "vms.allocate");
    expect(allocations.map((r) => [r.status, r.time < closedAt])).toEqual([[201, true]]);
    const s = await sandbox("midway");
    expect(s.status?.vmId).toBeUndefined();
    // Nor the Event the allocation records: a replica whose membership lapsed does not report
    // on objects another replica may own by now.
    expect(await eventReasons(t.stack, "midway")).toEqual([]);
    open = true;
    const ready = await waitForReady(t.stack, "sandboxes", "midway", { timeoutMs: 60_000 });
    // The next reconcile (the next owner's, in `run --sharding`) finds that VM by its marker.
    expect(t.stack.emulator.requests.filter((r) => r.operation === "vms.allocate")).toHaveLength(1);
    expect(ready.status?.vmId).toBeDefined();
  });

  it("a deleted run waits, its finalizer kept, while the gate is closed; once the replica may work, its step is stopped and it goes", async () => {
    open = true;
    await applySandbox("runner");
    await waitForReady(t.stack, "sandboxes", "runner", { timeoutMs: 60_000 });
    await apply(
      `apiVersion: agentcompute.dev/v1alpha1\nkind: SandboxRun\nmetadata: {name: deleted-run, labels: {${OWNER_LABEL}: ${OWNER}}}\nspec:\n  sandboxRef: {name: runner}\n  steps:\n    - {name: forever, command: 'sleep 300'}`,
      t.namespace,
    );
    const commandId = await waitFor(
      async () => {
        const r = await getResource(t.stack.kube, "sandboxruns", t.namespace, "deleted-run");
        return (r.status?.steps as Array<{ commandId?: string }> | undefined)?.[0]?.commandId;
      },
      { timeoutMs: 60_000, description: "the step running" },
    );
    const runtime = t.stack.emulator.runtimes.get(String((await sandbox("runner")).status?.vmId));
    expect(runtime?.command(commandId)?.running).toBe(true);
    open = false;
    try {
      const logged = t.stack.logs.length;
      await kubectlOk(["delete", "sandboxrun", "deleted-run", "--wait=false"], { namespace: t.namespace });
      // A replica that may not work stops nothing: the replica the run moves to (here, this one
      // once its membership is current again) does, through the run's finalizer.
      await waitFor(() => t.stack.logs.slice(logged).some((l) => l.includes("shard membership is not current") && l.includes('"name":"deleted-run"')), {
        timeoutMs: 30_000,
        description: "the deleted run's finalize refused by the gate",
      });
      expect(runtime?.command(commandId)?.running).toBe(true);
      expect((await getResource(t.stack.kube, "sandboxruns", t.namespace, "deleted-run")).metadata.finalizers).toContain("agentcompute.dev/finalizer");
    } finally {
      open = true; // the clean-up after the tests lets go of the finalizers
    }
    await waitFor(() => runtime?.command(commandId)?.running === false, { timeoutMs: 30_000, description: "the deleted run's step stopped" });
    await kubectlOk(["wait", "--for=delete", "sandboxrun/deleted-run", "--timeout=30s"], { namespace: t.namespace });
  });
});
