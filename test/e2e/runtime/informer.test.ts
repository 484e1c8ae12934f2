// The informer against the real API server: list (paginated) + watch, add/update/delete,
// recovery from a cut connection and from a silently stalled watch.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Informer } from "../../../src/runtime/informer.js";
import type { KubeClient } from "../../../src/runtime/kube-client.js";
import { Metrics } from "../../../src/runtime/metrics.js";
import {
  GROUP,
  VERSION,
  clientFor,
  createNamespace,
  deleteNamespace,
  ensureCrd,
  poll,
  proxiedClient,
  testLogger,
  type Widget,
} from "./support.js";

const PLURAL = "widgets";
const path = (ns?: string): string => (ns ? `/apis/${GROUP}/${VERSION}/namespaces/${ns}/${PLURAL}` : `/apis/${GROUP}/${VERSION}/${PLURAL}`);

function widget(ns: string, name: string, size = 1): Widget {
  return { apiVersion: `${GROUP}/${VERSION}`, kind: "Widget", metadata: { name, namespace: ns }, spec: { size } };
}

interface Recorded {
  adds: string[];
  updates: { name: string; newRv?: string; oldRv?: string }[];
  deletes: string[];
}

function record(inf: Informer<Widget>): Recorded {
  const r: Recorded = { adds: [], updates: [], deletes: [] };
  inf.on("add", (o) => r.adds.push(o.metadata.name ?? ""));
  inf.on("update", (n, o) => r.updates.push({ name: n.metadata.name ?? "", newRv: n.metadata.resourceVersion, oldRv: o.metadata.resourceVersion }));
  inf.on("delete", (o) => r.deletes.push(o.metadata.name ?? ""));
  return r;
}

describe("Informer (real kube-apiserver)", () => {
  let client: KubeClient;
  let ns: string;
  const informers: Informer<Widget>[] = [];
  const closers: (() => Promise<void>)[] = [];

  beforeAll(async () => {
    client = clientFor();
    await ensureCrd(client, PLURAL, "Widget");
    ns = await createNamespace(client, "rt-informer");
  });

  afterAll(async () => {
    for (const inf of informers) await inf.stop();
    for (const c of closers) await c();
    await deleteNamespace(client, ns);
    await client.close();
  });

  it("lists with pagination, then sees add, update and delete", async () => {
    for (const n of ["a", "b", "c"]) await client.create(path(ns), widget(ns, n));
    const metrics = new Metrics({ defaultMetrics: false });
    const inf = new Informer<Widget>(client, { path: path(ns), logger: testLogger(), pageSize: 2, metrics });
    informers.push(inf);
    const rec = record(inf);
    expect(inf.hasSynced()).toBe(false);
    await inf.start();
    expect(inf.hasSynced()).toBe(true);
    expect(inf.list(ns).map((w) => w.metadata.name).sort()).toEqual(["a", "b", "c"]);
    expect(rec.adds.sort()).toEqual(["a", "b", "c"]);
    expect(inf.lastSyncResourceVersion).not.toBe("");
    // Objects from the list look like objects from the watch (apiVersion/kind present).
    expect(inf.get(ns, "a")?.kind).toBe("Widget");

    await client.create(path(ns), widget(ns, "d"));
    await poll(() => inf.get(ns, "d") !== undefined, 30_000, "add of d");
    expect(rec.adds).toContain("d");

    const before = inf.get(ns, "a");
    await client.patch(`${path(ns)}/a`, { spec: { size: 42 } }, "merge");
    await poll(() => inf.get(ns, "a")?.spec?.size === 42, 30_000, "update of a");
    const upd = rec.updates.find((u) => u.name === "a");
    expect(upd?.oldRv).toBe(before?.metadata.resourceVersion);
    expect(upd?.newRv).not.toBe(upd?.oldRv);

    await client.delete(`${path(ns)}/b`);
    await poll(() => inf.get(ns, "b") === undefined, 30_000, "delete of b");
    expect(rec.deletes).toContain("b");
    expect(inf.size()).toBe(3);
    expect(await metrics.registry.metrics()).toMatch(/agentcompute_informer_objects\{resource="[^"]+",selector="",view=""\} 3/);

    // A second cache of the same path and selector keeping a projection (as a sharded
    // leader's sharder and reference view do) reports its own series.
    const slim = new Informer<Widget>(client, { path: path(ns), logger: testLogger(), metrics, view: { name: "slim", transform: (w) => ({ ...w, spec: {} }) } });
    informers.push(slim);
    await slim.start();
    await client.delete(`${path(ns)}/c`);
    await poll(() => inf.get(ns, "c") === undefined && slim.get(ns, "c") === undefined, 30_000, "delete of c in both caches");
    const text = await metrics.registry.metrics();
    expect(text).toMatch(/agentcompute_informer_objects\{resource="[^"]+",selector="",view=""\} 2/);
    expect(text).toMatch(/agentcompute_informer_objects\{resource="[^"]+",selector="",view="slim"\} 2/);
  });

  it("survives a cut connection and still sees later changes", async () => {
    const { proxy, client: proxied, close } = await proxiedClient();
    closers.push(close);
    const metrics = new Metrics({ defaultMetrics: false });
    const inf = new Informer<Widget>(proxied, { path: path(ns), logger: testLogger(), metrics, backoffInitialMs: 200 });
    informers.push(inf);
    const rec = record(inf);
    await inf.start();
    await client.create(path(ns), widget(ns, "before-cut"));
    await poll(() => inf.get(ns, "before-cut") !== undefined, 30_000, "watch established");

    for (let i = 0; i < 3; i++) {
      expect(proxy.killAll()).toBeGreaterThan(0);
      const name = `after-cut-${i}`;
      await client.create(path(ns), widget(ns, name));
      await poll(() => inf.get(ns, name) !== undefined, 60_000, `${name} seen after the cut`);
      await poll(() => proxy.openConnections() > 0, 30_000, "watch re-established");
    }
    expect(rec.adds).toEqual(expect.arrayContaining(["after-cut-0", "after-cut-1", "after-cut-2"]));
    expect(await metrics.registry.metrics()).toMatch(/agentcompute_informer_watch_restarts_total\{resource="[^"]+",reason="error"\} [1-9]/);
    // Reconnecting resumed from the last resourceVersion: no relist was needed.
    expect(await metrics.registry.metrics()).toMatch(/agentcompute_informer_relists_total\{resource="[^"]+"\} 1\n/);
  });

  it("restarts a silently stalled watch (watchdog) and catches up", async () => {
    const { proxy, client: proxied, close } = await proxiedClient();
    closers.push(close);
    const metrics = new Metrics({ defaultMetrics: false });
    // Short server-side watch timeout (2..4 s) + 1 s grace, so the watchdog acts quickly.
    const inf = new Informer<Widget>(proxied, {
      path: path(ns),
      logger: testLogger(),
      metrics,
      minWatchTimeoutSeconds: 2,
      watchdogGraceMs: 1_000,
      healthyWatchMs: 1_000,
    });
    informers.push(inf);
    await inf.start();
    // An event proves the watch is established (and on which connections) before freezing.
    await client.create(path(ns), widget(ns, "before-stall"));
    await poll(() => inf.get(ns, "before-stall") !== undefined, 30_000, "watch established");

    // Freeze: the socket stays open, nothing moves, the server's own timeout close is hidden.
    expect(proxy.freezeAll()).toBeGreaterThan(0);
    await client.create(path(ns), widget(ns, "during-stall"));
    await poll(() => inf.get(ns, "during-stall") !== undefined, 60_000, "object created during the stall");
    expect(await metrics.registry.metrics()).toMatch(/agentcompute_informer_watch_restarts_total\{resource="[^"]+",reason="stalled"\} [1-9]/);
    proxy.killAll();
  });

  it("keeps an object its cache view cannot transform whole, and goes on listing and watching past it", async () => {
    const ns6 = await createNamespace(client, "rt-informer-view");
    closers.push(() => deleteNamespace(client, ns6));
    await client.create(path(ns6), widget(ns6, "odd", 13));
    await client.create(path(ns6), widget(ns6, "even", 2));
    const view = {
      name: "sizes",
      transform: (w: Widget): Widget => {
        if (w.spec?.size === 13) throw new Error("unlucky");
        return { ...w, spec: { size: w.spec?.size ?? 0 } };
      },
    };
    const inf = new Informer<Widget>(client, { path: path(ns6), logger: testLogger(), view });
    informers.push(inf);
    await inf.start();
    expect(inf.list().map((w) => w.metadata.name).sort()).toEqual(["even", "odd"]);
    // A watch event it cannot transform either, then one after it.
    await client.create(path(ns6), widget(ns6, "odd-2", 13));
    await client.create(path(ns6), widget(ns6, "after", 3));
    await poll(() => inf.get(ns6, "after") !== undefined, 30_000, "the object created after the one the view cannot transform");
    expect(inf.get(ns6, "odd-2")?.spec?.size).toBe(13);
  });

  it("stays stopped when stopped before it was started (a SIGTERM while the operator starts)", async () => {
    const inf = new Informer<Widget>(client, { path: path(ns), logger: testLogger() });
    await inf.stop();
    await expect(inf.start()).rejects.toThrow(/stopped before it started/);
    expect(inf.hasSynced()).toBe(false);
  });

  it("keeps secondary indices in step with adds, updates and deletes", async () => {
    const ns4 = await createNamespace(client, "rt-informer-idx");
    closers.push(() => deleteNamespace(client, ns4));
    const colored = (name: string, color: string): Widget => ({ ...widget(ns4, name), spec: { size: 1, color } });
    await client.create(path(ns4), colored("r1", "red"));
    const inf = new Informer<Widget>(client, { path: path(ns4), logger: testLogger() });
    informers.push(inf);
    await inf.start();
    // Added after the sync: built over the existing cache.
    inf.addIndex("color", (w) => (w.spec?.color ? [`${w.metadata.namespace}/${w.spec.color}`] : []));
    const names = (color: string) => inf.byIndex("color", `${ns4}/${color}`).map((w) => w.metadata.name).sort();
    expect(names("red")).toEqual(["r1"]);
    await client.create(path(ns4), colored("r2", "red"));
    await client.create(path(ns4), colored("b1", "blue"));
    await poll(() => names("red").length === 2 && names("blue").length === 1, 30_000, "index of new objects");
    await client.patch(`${path(ns4)}/r2`, { spec: { color: "blue" } }, "merge");
    await poll(() => names("blue").length === 2, 30_000, "index follows an update");
    expect(names("red")).toEqual(["r1"]);
    await client.delete(`${path(ns4)}/b1`);
    await poll(() => names("blue").length === 1, 30_000, "index follows a delete");
    expect(names("blue")).toEqual(["r2"]);
    expect(inf.byIndex("color", `${ns4}/green`)).toEqual([]);
  });

  it("takes another label selector while running: lists again, passing on only the differences, and watches under it", async () => {
    const ns5 = await createNamespace(client, "rt-informer-sel");
    closers.push(() => deleteNamespace(client, ns5));
    const owned = (name: string, owner: string): Widget => ({ ...widget(ns5, name), metadata: { name, namespace: ns5, labels: { owner } } }) as Widget;
    await client.create(path(ns5), owned("a1", "a"));
    await client.create(path(ns5), owned("b1", "b"));
    const inf = new Informer<Widget>(client, { path: path(ns5), labelSelector: "owner=a", logger: testLogger() });
    informers.push(inf);
    const seen = record(inf);
    await inf.start();
    expect(seen.adds).toEqual(["a1"]);

    await inf.setLabelSelector("owner in (a,b)");
    // Resolved once the list under it is in: b1 came as an add, a1 (unchanged) as nothing.
    expect(inf.get(ns5, "b1")).toBeDefined();
    expect(seen.adds).toEqual(["a1", "b1"]);
    expect(seen.updates).toEqual([]);
    expect(seen.deletes).toEqual([]);
    // And the watch is under it too.
    await client.create(path(ns5), owned("b2", "b"));
    await client.create(path(ns5), owned("c1", "c"));
    await poll(() => inf.get(ns5, "b2") !== undefined, 30_000, "b2 through the new watch");

    await inf.setLabelSelector("owner=a");
    expect(seen.deletes.sort()).toEqual(["b1", "b2"]);
    expect(inf.list().map((w) => w.metadata.name)).toEqual(["a1"]);
    expect(inf.get(ns5, "c1")).toBeUndefined();
    expect(inf.hasSynced()).toBe(true);
  });

  it("watches several namespaces into one cache from a cluster-wide path", async () => {
    const ns2 = await createNamespace(client, "rt-informer-b");
    const ns3 = await createNamespace(client, "rt-informer-c");
    closers.push(async () => {
      await deleteNamespace(client, ns2);
      await deleteNamespace(client, ns3);
    });
    await client.create(path(ns2), widget(ns2, "x"));
    await client.create(path(ns3), widget(ns3, "not-watched"));
    const inf = new Informer<Widget>(client, { path: path(), namespaces: [ns, ns2], logger: testLogger() });
    informers.push(inf);
    await inf.start();
    expect(inf.get(ns2, "x")).toBeDefined();
    expect(inf.get(ns3, "not-watched")).toBeUndefined();
    expect(inf.list(ns).length).toBeGreaterThan(0);
    await client.create(path(ns2), widget(ns2, "y"));
    await client.create(path(ns3), widget(ns3, "z"));
    await poll(() => inf.get(ns2, "y") !== undefined, 30_000, "y in second namespace");
    expect(inf.list(ns3)).toEqual([]);
    expect(Object.keys(inf.resourceVersions())).toHaveLength(2);
  });
});
