// The generic reconciler's handling of a resource that waits for a dependency: reported (status
// and a Warning Event) only once the wait has lasted the grace period.
import { describe, expect, it } from "vitest";
import { FINALIZER, skillKind } from "../../../src/api/index.js";
import { NotReadyError } from "../../../src/managed/errors.js";
import type { Connector, ManagedResource } from "../../../src/managed/external.js";
import { ManagedReconciler } from "../../../src/managed/reconciler.js";
import { StatusWriter } from "../../../src/managed/status-writer.js";
import type { ReconcileContext } from "../../../src/runtime/controller.js";
import type { EventRecorder } from "../../../src/runtime/events.js";
import type { Informer } from "../../../src/runtime/informer.js";
import type { KubeClient } from "../../../src/runtime/kube-client.js";
import { silentLogger } from "../../../src/runtime/logging.js";

function setup(opts: { graceMs: number }) {
  let clock = 1_000_000;
  const cr: ManagedResource = {
    apiVersion: "agentcompute.dev/v1alpha1",
    kind: "Skill",
    metadata: { name: "s", namespace: "ns", uid: "u1", resourceVersion: "1", generation: 1, finalizers: [FINALIZER] },
    spec: {},
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
  const connector: Connector<ManagedResource> = {
    async connect() {
      if (!dependencyReady) throw new NotReadyError("WaitingForAgent", 'Agent "a" has no id in the registry yet');
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
    now: () => new Date(clock),
  });
  const ctx = { log: silentLogger(), reconcileId: "r", signal: new AbortController().signal, priority: false, retries: 0 } as ReconcileContext;
  return {
    run: () => reconciler.reconcile({ namespace: "ns", name: "s" }, ctx),
    advance: (ms: number) => (clock += ms),
    ready: () => (dependencyReady = true),
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

  it("reports at once with a zero grace period", async () => {
    const t = setup({ graceMs: 0 });
    expect(await t.run()).toEqual({ requeue: true });
    expect(t.warnings).toEqual(["WaitingForAgent"]);
  });
});
