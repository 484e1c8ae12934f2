// The generic reconciler: a resource that waits for a dependency is reported (status and a
// Warning Event) only once the wait has lasted the grace period (a longer one while the
// dependency is still being created); update gets the plan observe made; leftovers observe
// reports are given back on every reconcile that finds them.
import { describe, expect, it } from "vitest";
import { FINALIZER, sandboxKind, skillKind, type ManagedStatusBase } from "../../../src/api/index.js";
import { NotReadyError } from "../../../src/managed/errors.js";
import type { Connector, ManagedResource, Observation } from "../../../src/managed/external.js";
import { ManagedReconciler } from "../../../src/managed/reconciler.js";
import { StatusWriter } from "../../../src/managed/status-writer.js";
import type { ReconcileContext } from "../../../src/runtime/controller.js";
import type { EventRecorder } from "../../../src/runtime/events.js";
import type { Informer } from "../../../src/runtime/informer.js";
import type { KubeClient } from "../../../src/runtime/kube-client.js";
import { silentLogger } from "../../../src/runtime/logging.js";

function setup(opts: { graceMs: number; progressingGraceMs?: number; status?: ManagedStatusBase }) {
  let clock = 1_000_000;
  const cr: ManagedResource = {
    apiVersion: "agentcompute.dev/v1alpha1",
    kind: "Skill",
    metadata: { name: "s", namespace: "ns", uid: "u1", resourceVersion: "1", generation: 1, finalizers: [FINALIZER] },
    spec: {},
    ...(opts.status !== undefined && { status: opts.status }),
  } as ManagedResource;
  const patches: unknown[] = [];
  const kube = {
    patch: async (_path: string, body: unknown) => {
      patches.push(body);
      return { ...cr, metadata: { ...cr.metadata, resourceVersion: String(patches.length + 1) } };
    },
  } as unknown as KubeClient;
  const warnings: string[] = [];
  const events = { warning: (_o: unknown, reason: string) => warnings.push(reason), normal: () => undefined } as unknown as EventRecorder;
  let dependencyReady = false;
  // The Agent exists and its controller has not reported on it yet (notReportedYet).
  let dependencyProgressing = false;
  const connector: Connector<ManagedResource> = {
    async connect() {
      if (!dependencyReady) throw new NotReadyError("WaitingForAgent", 'Agent "a" has no id in the registry yet', dependencyProgressing);
      return {
        observe: async () => ({ exists: true, upToDate: true }),
        create: async () => ({}),
        update: async () => ({}),
        delete: async () => undefined,
      };
    },
  };
  const reconciler = new ManagedReconciler<ManagedResource>({
    kind: skillKind,
    informer: { get: () => cr } as unknown as Informer<ManagedResource>,
    kube,
    events,
    connector,
    status: new StatusWriter(kube),
    syncPeriodMs: 600_000,
    externalId: () => undefined,
    dependencyGraceMs: opts.graceMs,
    progressingGraceMs: opts.progressingGraceMs,
    now: () => new Date(clock),
  });
  const ctx = { log: silentLogger(), reconcileId: "r", signal: new AbortController().signal, priority: false, retries: 0 } as ReconcileContext;
  return {
    run: () => reconciler.reconcile({ namespace: "ns", name: "s" }, ctx),
    advance: (ms: number) => (clock += ms),
    ready: () => (dependencyReady = true),
    progressing: (yes: boolean) => (dependencyProgressing = yes),
    patches,
    warnings,
  };
}

describe("ManagedReconciler: waiting for a dependency", () => {
  it("writes nothing while the wait is shorter than the grace period, and comes back when it ends", async () => {
    const t = setup({ graceMs: 5_000 });
    expect(await t.run()).toEqual({ requeueAfterMs: 5_000 });
    t.advance(2_000);
    expect(await t.run()).toEqual({ requeueAfterMs: 3_000 });
    expect(t.patches).toEqual([]);
    expect(t.warnings).toEqual([]);
    t.ready();
    await t.run();
    expect(t.patches).toHaveLength(1); // Ready=True, straight away
    expect(t.warnings).toEqual([]);
  });

  it("reports the wait once it outlasts the grace period", async () => {
    const t = setup({ graceMs: 5_000 });
    await t.run();
    t.advance(5_000);
    expect(await t.run()).toEqual({ requeue: true });
    expect(t.patches).toHaveLength(1);
    expect(JSON.stringify(t.patches[0])).toContain("WaitingForAgent");
    expect(t.warnings).toEqual(["WaitingForAgent"]);
  });

  it("waits longer, still without a word, while the dependency is being created; reported once that grace is over too", async () => {
    const t = setup({ graceMs: 5_000, progressingGraceMs: 60_000 });
    t.progressing(true);
    expect(await t.run()).toEqual({ requeueAfterMs: 60_000 });
    t.advance(30_000);
    expect(await t.run()).toEqual({ requeueAfterMs: 30_000 });
    expect(t.patches).toEqual([]);
    expect(t.warnings).toEqual([]);
    t.advance(30_000);
    expect(await t.run()).toEqual({ requeue: true });
    expect(t.warnings).toEqual(["WaitingForAgent"]);
  });

  it("reports as soon as a dependency being created reports trouble, once the usual grace is over", async () => {
    const t = setup({ graceMs: 5_000, progressingGraceMs: 60_000 });
    t.progressing(true);
    await t.run();
    t.advance(10_000);
    t.progressing(false); // the Agent now says Ready=False
    expect(await t.run()).toEqual({ requeue: true });
    expect(t.warnings).toEqual(["WaitingForAgent"]);
  });

  it("gives a resource that already shows a Ready condition the usual grace only: it must not show Ready=True for minutes", async () => {
    const ready = { type: "Ready", status: "True" as const, reason: "Available", observedGeneration: 1, lastTransitionTime: "2030-01-01T00:00:00Z" };
    const t = setup({ graceMs: 5_000, progressingGraceMs: 60_000, status: { conditions: [ready] } });
    t.progressing(true); // its Connection was edited and not looked at yet
    expect(await t.run()).toEqual({ requeueAfterMs: 5_000 });
    t.advance(5_000);
    expect(await t.run()).toEqual({ requeue: true });
    expect(t.warnings).toEqual(["WaitingForAgent"]);
  });

  it("reports at once with a zero grace period", async () => {
    const t = setup({ graceMs: 0 });
    expect(await t.run()).toEqual({ requeue: true });
    expect(t.warnings).toEqual(["WaitingForAgent"]);
  });
});

describe("ManagedReconciler: plan and leftovers", () => {
  function world(observation: Observation<ManagedStatusBase, string>, opts: { stalled?: boolean } = {}) {
    const conditions = opts.stalled
      ? [{ type: "Stalled", status: "True", reason: "ServiceRejected", observedGeneration: 1, lastTransitionTime: "2030-01-01T00:00:00Z" }]
      : [];
    const cr = {
      apiVersion: "agentcompute.dev/v1alpha1",
      kind: "Sandbox",
      metadata: { name: "s", namespace: "ns", uid: "u1", resourceVersion: "1", generation: 1, finalizers: [FINALIZER] },
      spec: {},
      status: { conditions },
    } as ManagedResource;
    const kube = { patch: async () => cr } as unknown as KubeClient;
    const calls: string[] = [];
    const connector: Connector<ManagedResource, string> = {
      async connect() {
        return {
          observe: async () => observation,
          create: async () => ({}),
          update: async (_cr, observed) => {
            calls.push(`update:${observed.plan}`);
            return {};
          },
          cleanup: async (_cr, leftovers) => {
            calls.push(`cleanup:${leftovers.join(",")}`);
          },
          delete: async () => undefined,
        };
      },
    };
    const reconciler = new ManagedReconciler<ManagedResource, string>({
      kind: sandboxKind,
      informer: { get: () => cr } as unknown as Informer<ManagedResource>,
      kube,
      events: { warning: () => undefined, normal: () => undefined } as unknown as EventRecorder,
      connector,
      status: new StatusWriter(kube),
      syncPeriodMs: 600_000,
      externalId: () => "vm-1",
    });
    const ctx = { log: silentLogger(), reconcileId: "r", signal: new AbortController().signal, priority: false, retries: 0 } as ReconcileContext;
    return { run: () => reconciler.reconcile({ namespace: "ns", name: "s" }, ctx), calls };
  }

  it("hands update the plan observe made", async () => {
    const t = world({ exists: true, upToDate: false, plan: "renew" });
    await t.run();
    expect(t.calls).toEqual(["update:renew"]);
  });

  it("gives leftovers back when the resource is otherwise up to date, and keeps its schedule", async () => {
    const t = world({ exists: true, upToDate: true, leftovers: ["vm-2", "vm-3"], requeueAfterMs: 1_234, priority: true });
    expect(await t.run()).toEqual({ requeueAfterMs: 1_234, priority: true });
    expect(t.calls).toEqual(["cleanup:vm-2,vm-3"]);
  });

  it("gives leftovers back even while the spec is stalled", async () => {
    const t = world({ exists: true, upToDate: false, plan: "replace", leftovers: ["vm-2"] }, { stalled: true });
    await t.run();
    expect(t.calls).toEqual(["cleanup:vm-2"]);
  });
});
