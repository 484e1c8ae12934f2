// 410 Gone on the real API server: a private kube-apiserver with the watch cache off and
// etcd compacted every second, so a resourceVersion goes stale within seconds. The informer's
// watch is frozen (fault proxy) while objects change, until its resourceVersion is compacted
// away; when the connection drops, resuming answers 410 and the informer must relist and
// emit exactly the differences: a synthetic delete, an update and an add.
import { rm } from "node:fs/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { kubeDown, kubeUp, makeTempStateDir } from "../../../dev/kube-apiserver.js";
import { Informer } from "../../../src/runtime/informer.js";
import type { KubeClient, Status } from "../../../src/runtime/kube-client.js";
import { Metrics } from "../../../src/runtime/metrics.js";
import {
  GROUP,
  VERSION,
  clientFor,
  clusterFor,
  createNamespace,
  ensureCrd,
  poll,
  proxiedClient,
  testLogger,
  type Widget,
} from "./support.js";

const PLURAL = "gadgets";
const path = (ns: string): string => `/apis/${GROUP}/${VERSION}/namespaces/${ns}/${PLURAL}`;
const gadget = (ns: string, name: string, size = 1): Widget => ({
  apiVersion: `${GROUP}/${VERSION}`,
  kind: "Gadget",
  metadata: { name, namespace: ns },
  spec: { size },
});

/** true once a watch from `rv` is refused as too old (HTTP 410 or an ERROR event with 410). */
async function isExpired(client: KubeClient, p: string, rv: string): Promise<boolean> {
  try {
    for await (const ev of client.watch<Widget>(p, { resourceVersion: rv, timeoutSeconds: 1 })) {
      if (ev.type === "ERROR") return (ev.object as Status).code === 410;
      return false;
    }
    return false;
  } catch (err) {
    return (err as { status?: number }).status === 410;
  }
}

describe("Informer relists after 410 Gone (private kube-apiserver)", () => {
  let stateDir: string;
  let kubeconfig: string;
  let client: KubeClient;

  beforeAll(async () => {
    stateDir = await makeTempStateDir("rt-gone-");
    const up = await kubeUp({
      stateDir,
      controllers: false,
      etcdCompactionInterval: "1s",
      apiserverArgs: ["--watch-cache=false"],
      log: () => undefined,
    });
    kubeconfig = up.kubeconfig;
    client = clientFor(clusterFor(kubeconfig));
    await ensureCrd(client, PLURAL, "Gadget");
  });

  afterAll(async () => {
    await client?.close();
    if (stateDir) {
      await kubeDown({ stateDir, log: () => undefined });
      await rm(stateDir, { recursive: true, force: true });
    }
  });

  it("emits a synthetic delete, an update and an add for what changed while it was away", async () => {
    const ns = await createNamespace(client, "rt-gone");
    for (const n of ["a", "b", "c"]) await client.create(path(ns), gadget(ns, n));

    const { proxy, client: proxied } = await proxiedClient(clusterFor(kubeconfig));
    const metrics = new Metrics({ defaultMetrics: false });
    const inf = new Informer<Widget>(proxied, { path: path(ns), logger: testLogger(), metrics, backoffInitialMs: 200, pageSize: 2 });
    const deletes: string[] = [];
    const updates: string[] = [];
    const adds: string[] = [];
    inf.on("add", (o) => adds.push(o.metadata.name ?? ""));
    inf.on("update", (n) => updates.push(n.metadata.name ?? ""));
    inf.on("delete", (o) => deletes.push(o.metadata.name ?? ""));
    inf.addIndex("size", (o) => [String(o.spec?.size ?? 0)]);
    try {
      await inf.start();
      expect(inf.list(ns)).toHaveLength(3);
      await poll(() => proxy.openConnections() > 0, 30_000, "watch connection");
      const staleRv = inf.lastSyncResourceVersion;

      proxy.freezeAll();
      await client.delete(`${path(ns)}/a`);
      await client.patch(`${path(ns)}/b`, { spec: { size: 7 } }, "merge");
      await client.create(path(ns), gadget(ns, "d"));
      await poll(() => isExpired(client, path(ns), staleRv), 120_000, `resourceVersion ${staleRv} compacted`);
      adds.length = 0;

      proxy.killAll(); // the informer reconnects from staleRv and is told 410
      await poll(() => inf.get(ns, "d") !== undefined && inf.get(ns, "a") === undefined, 120_000, "relist after 410");

      expect(deletes).toEqual(["a"]);
      expect(updates).toEqual(["b"]);
      expect(adds).toEqual(["d"]);
      expect(inf.get(ns, "b")?.spec?.size).toBe(7);
      expect(inf.list(ns).map((o) => o.metadata.name).sort()).toEqual(["b", "c", "d"]);
      // Indices follow the relist's synthetic changes too.
      expect(inf.byIndex("size", "1").map((o) => o.metadata.name).sort()).toEqual(["c", "d"]);
      expect(inf.byIndex("size", "7").map((o) => o.metadata.name)).toEqual(["b"]);
      const text = await metrics.registry.metrics();
      expect(text).toMatch(/agentcompute_informer_watch_restarts_total\{resource="[^"]+",reason="gone"\} [1-9]/);
      expect(text).toMatch(/agentcompute_informer_relists_total\{resource="[^"]+"\} [2-9]/);

      // And it keeps watching afterwards.
      await client.create(path(ns), gadget(ns, "e"));
      await poll(() => inf.get(ns, "e") !== undefined, 60_000, "e after the relist");
    } finally {
      await inf.stop();
      await proxied.close();
      await proxy.close();
    }
  });
});
