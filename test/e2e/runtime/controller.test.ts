// Controller, EventRecorder and Manager against the real API server.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Controller, type Request } from "../../../src/runtime/controller.js";
import { EventRecorder } from "../../../src/runtime/events.js";
import { Informer } from "../../../src/runtime/informer.js";
import { eventsPath, leasesPath, type KubeClient } from "../../../src/runtime/kube-client.js";
import type { Lease } from "../../../src/runtime/leader-election.js";
import { Manager } from "../../../src/runtime/manager.js";
import { Metrics } from "../../../src/runtime/metrics.js";
import { loadKubeConfig } from "../support/kube.js";
import { GROUP, VERSION, clientFor, createNamespace, deleteNamespace, ensureCrd, poll, testLogger, type Widget } from "./support.js";

const PLURAL = "widgets";
const path = (ns?: string): string => (ns ? `/apis/${GROUP}/${VERSION}/namespaces/${ns}/${PLURAL}` : `/apis/${GROUP}/${VERSION}/${PLURAL}`);
const widget = (ns: string, name: string, size = 0): Widget => ({
  apiVersion: `${GROUP}/${VERSION}`,
  kind: "Widget",
  metadata: { name, namespace: ns },
  spec: { size },
});

interface CoreEvent {
  metadata: { name: string };
  reason: string;
  message: string;
  count?: number;
  type: string;
  involvedObject: { name?: string; uid?: string; kind?: string };
  reportingComponent?: string;
  reportingInstance?: string;
}

describe("Controller, EventRecorder, Manager (real kube-apiserver)", () => {
  let client: KubeClient;
  let ns: string;

  beforeAll(async () => {
    client = clientFor();
    await ensureCrd(client, PLURAL, "Widget");
    ns = await createNamespace(client, "rt-ctrl");
  });
  afterAll(async () => {
    await deleteNamespace(client, ns);
    await client.close();
  });

  it("reconciles each key one at a time under concurrency and converges on the latest spec", async () => {
    const names = ["w0", "w1", "w2", "w3", "w4"];
    for (const n of names) await client.create(path(ns), widget(ns, n));
    const inf = new Informer<Widget>(client, { path: path(ns), logger: testLogger() });
    const active = new Set<string>();
    let overlaps = 0;
    let maxParallel = 0;
    const lastSeenSize = new Map<string, number>();
    const metrics = new Metrics({ defaultMetrics: false });
    const controller = new Controller({
      name: "widgets",
      concurrency: 4,
      logger: testLogger(),
      metrics,
      reconciler: {
        async reconcile(req: Request) {
          const key = `${req.namespace}/${req.name}`;
          if (active.has(key)) overlaps++;
          active.add(key);
          maxParallel = Math.max(maxParallel, active.size);
          try {
            await new Promise((r) => setTimeout(r, 15));
            const w = inf.get(req.namespace, req.name);
            if (w) lastSeenSize.set(req.name, w.spec?.size ?? -1);
          } finally {
            active.delete(key);
          }
        },
      },
    });
    controller.watch(inf);
    await inf.start();
    await controller.start();
    try {
      // Many concurrent updates to few objects: events for one key arrive while it is in process.
      const rounds = 8;
      for (let i = 1; i <= rounds; i++) {
        await Promise.all(names.map((n) => client.patch(`${path(ns)}/${n}`, { spec: { size: i } }, "merge")));
      }
      await poll(() => names.every((n) => lastSeenSize.get(n) === rounds), 60_000, "every widget reconciled at its final size");
      expect(overlaps).toBe(0);
      expect(maxParallel).toBeGreaterThan(1);
      expect(maxParallel).toBeLessThanOrEqual(4);
      const text = await metrics.registry.metrics();
      expect(text).toMatch(/controller_runtime_reconcile_total\{controller="widgets",result="success"\} [1-9]/);
      expect(text).toMatch(/workqueue_adds_total\{name="widgets"\} [1-9]/);
    } finally {
      await controller.stop(5_000);
      await inf.stop();
    }
  });

  it("aggregates repeated events into one Event with a count", async () => {
    const w = await client.create<Widget>(path(ns), widget(ns, "evented"));
    const rec = new EventRecorder({ client, logger: testLogger(), reportingInstance: "e2e-host_1234" });
    for (let i = 0; i < 5; i++) {
      rec.warning(w, "ServiceUnavailable", "the service answered 503; retrying");
      await rec.flush();
    }
    rec.normal(w, "Synced", "in sync with the service");
    await rec.flush();
    const list = await client.list<CoreEvent>(eventsPath(ns), { fieldSelector: `involvedObject.name=evented` });
    const warnings = list.items.filter((e) => e.reason === "ServiceUnavailable");
    expect(warnings).toHaveLength(1);
    expect(warnings[0]?.count).toBe(5);
    expect(warnings[0]?.type).toBe("Warning");
    expect(warnings[0]?.involvedObject.uid).toBe(w.metadata.uid);
    expect(warnings[0]?.reportingComponent).toBe("agentcompute.dev/agent-operator");
    expect(warnings[0]?.reportingInstance).toBe("e2e-host_1234");
    expect(list.items.filter((e) => e.reason === "Synced")).toHaveLength(1);
  });

  it("manager: probes, metrics, leader election, workers only while leading, lease released on stop", async () => {
    await client.create(path(ns), widget(ns, "managed"));
    const reconciled = new Set<string>();
    const mgr = new Manager({
      // Through a @kubernetes/client-node KubeConfig, as a caller that already has one would.
      client: clientFor(loadKubeConfig()),
      logger: testLogger(),
      namespaces: [ns],
      metricsBindAddress: "127.0.0.1:0",
      healthProbeBindAddress: "127.0.0.1:0",
      leaderElection: { namespace: ns, name: "rt-manager", leaseDurationMs: 3_000, renewDeadlineMs: 2_000, retryPeriodMs: 500 },
      handleSignals: false,
      gracefulShutdownTimeoutMs: 5_000,
    });
    const inf = mgr.informerFor<Widget>(path());
    expect(mgr.informerFor<Widget>(path())).toBe(inf); // shared
    // ... and made once: a second caller cannot list it in pages of its own.
    expect(() => mgr.informerFor<Widget>(path(), { pageSize: 500 })).toThrow(/already lists with page size none; asked for 500/);
    const c = mgr.newController({
      name: "managed-widgets",
      concurrency: 2,
      reconciler: {
        async reconcile(req) {
          reconciled.add(req.name);
        },
      },
    });
    c.watch(inf);
    try {
      await mgr.start();
      const health = mgr.healthAddress()!;
      const metricsAddr = mgr.metricsAddress()!;
      expect(health.port).toBeGreaterThan(0);
      const get = async (addr: string, p: string) => {
        const res = await fetch(`http://${addr}${p}`);
        return { status: res.status, body: await res.text() };
      };
      expect(await get(health.address, "/healthz")).toEqual({ status: 200, body: "ok\n" });
      expect((await get(health.address, "/readyz")).status).toBe(200);
      await poll(() => mgr.isLeader(), 60_000, "manager to lead");
      await poll(() => reconciled.has("managed"), 60_000, "reconcile while leading");
      const m = await get(metricsAddr.address, "/metrics");
      expect(m.status).toBe(200);
      for (const name of [
        "workqueue_depth",
        "controller_runtime_reconcile_total",
        "controller_runtime_active_workers",
        "leader_election_master_status",
        "process_resident_memory_bytes",
      ]) {
        expect(m.body).toContain(name);
      }
      const lease = await client.get<Lease>(leasesPath(ns, "rt-manager"));
      expect(lease.spec?.holderIdentity).toBe(mgr.identity);
    } finally {
      await mgr.stop();
    }
    expect(await mgr.done()).toBe("stopped");
    expect(mgr.abandonedWork()).toBe(false);
    const released = await client.get<Lease>(leasesPath(ns, "rt-manager"));
    expect(released.spec?.holderIdentity ?? "").toBe("");
  });

  /**
   * A leader-elected manager over `ns` whose reconcile of the widget `name` hangs, ignoring its
   * abort signal, until `finish()`; `signal` is that reconcile's once it has started.
   */
  function hangingManager(lease: string, name: string, gracefulShutdownTimeoutMs: number) {
    const hang: { signal?: AbortSignal; finish: () => void } = { finish: () => undefined };
    const hung = new Promise<void>((resolve) => (hang.finish = resolve));
    const mgr = new Manager({
      client: clientFor(),
      logger: testLogger(),
      namespaces: [ns],
      metricsBindAddress: "0",
      healthProbeBindAddress: "0",
      leaderElection: { namespace: ns, name: lease, leaseDurationMs: 3_000, renewDeadlineMs: 2_000, retryPeriodMs: 500 },
      handleSignals: false,
      gracefulShutdownTimeoutMs,
    });
    const c = mgr.newController({
      name: `${name}-widgets`,
      concurrency: 1,
      reconciler: {
        async reconcile(req, ctx) {
          if (req.name !== name) return;
          hang.signal = ctx.signal;
          await hung;
        },
      },
    });
    c.watch(mgr.informerFor<Widget>(path()));
    return { mgr, hang };
  }

  it("manager: a reconcile that outlives the grace period keeps the lease from being released (a successor would act beside it)", async () => {
    await client.create(path(ns), widget(ns, "stuck"));
    const { mgr, hang } = hangingManager("rt-abandoned", "stuck", 300);
    try {
      await mgr.start();
      await poll(() => hang.signal !== undefined, 60_000, "the reconcile to start");
      await mgr.stop();
      expect(mgr.abandonedWork()).toBe(true);
      const lease = await client.get<Lease>(leasesPath(ns, "rt-abandoned"));
      expect(lease.spec?.holderIdentity).toBe(mgr.identity);
    } finally {
      hang.finish();
      await mgr.stop();
    }
  });

  it("manager: leadership lost stops the reconciles in flight at once, not after the grace period beside the new leader", async () => {
    await client.create(path(ns), widget(ns, "long"));
    const { mgr, hang } = hangingManager("rt-lost", "long", 120_000);
    try {
      await mgr.start();
      await poll(() => hang.signal !== undefined, 60_000, "the reconcile to start");
      // Another replica takes the Lease (as after this one's renewals failed).
      const lease = await client.get<Lease>(leasesPath(ns, "rt-lost"));
      const now = new Date().toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
      await client.replace(leasesPath(ns, "rt-lost"), { ...lease, spec: { ...lease.spec, holderIdentity: "the-new-leader", leaseDurationSeconds: 3600, renewTime: now, acquireTime: now } });
      // Well inside the 120 s grace a signal or a plain stop would give.
      await poll(() => hang.signal?.aborted === true, 30_000, "the reconcile's signal aborted");
      await mgr.stop(); // the stop leadership loss began
      expect(mgr.abandonedWork()).toBe(true);
    } finally {
      hang.finish();
      await mgr.stop();
    }
  });

  it("manager: leadership lost while a stop (SIGTERM) drains stops the reconciles in flight at once, and ends as lost leadership", async () => {
    await client.create(path(ns), widget(ns, "draining"));
    const { mgr, hang } = hangingManager("rt-lost-draining", "draining", 120_000);
    try {
      await mgr.start();
      await poll(() => hang.signal !== undefined, 60_000, "the reconcile to start");
      const stopping = mgr.stop("signal"); // 120 s of grace for the reconcile in flight
      const lease = await client.get<Lease>(leasesPath(ns, "rt-lost-draining"));
      const now = new Date().toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
      await client.replace(leasesPath(ns, "rt-lost-draining"), { ...lease, spec: { ...lease.spec, holderIdentity: "the-new-leader", leaseDurationSeconds: 3600, renewTime: now, acquireTime: now } });
      await poll(() => hang.signal?.aborted === true, 30_000, "the reconcile's signal aborted");
      hang.finish(); // the aborted reconcile returns
      await stopping;
      expect(await mgr.done()).toBe("leadership-lost");
    } finally {
      hang.finish();
      await mgr.stop();
    }
  });
});
