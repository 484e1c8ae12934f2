// The informer's reconnect loop against a local HTTP server that answers as an API server in
// trouble would: what a user notices is load on the API server (lists in a loop) or a cache
// that stops following.
import { KubeConfig } from "@kubernetes/client-node";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { Informer } from "../../../src/runtime/informer.js";
import { KubeClient, type KubeObject } from "../../../src/runtime/kube-client.js";
import { silentLogger } from "../../../src/runtime/logging.js";
import { Metrics } from "../../../src/runtime/metrics.js";

let server: Server | undefined;
let client: KubeClient | undefined;
let informer: Informer<KubeObject> | undefined;

afterEach(async () => {
  await informer?.stop();
  await client?.close();
  server?.closeAllConnections();
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  [server, client, informer] = [undefined, undefined, undefined];
});

/** A client of the local server `server` (listening). */
function clientOf(s: Server): KubeClient {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "c", server: `http://127.0.0.1:${(s.address() as AddressInfo).port}`, skipTLSVerify: true }],
    users: [{ name: "u", token: "t" }],
    contexts: [{ name: "ctx", cluster: "c", user: "u" }],
    currentContext: "ctx",
  });
  return new KubeClient({ kubeConfig: kc });
}

describe("Informer", () => {
  it("counts a refused list (RBAC) as a list_error restart, not as a relist nor a watch error, which point at expiring watches", async () => {
    let lists = 0;
    server = createServer((req, res) => {
      const watch = new URL(req.url ?? "/", "http://x").searchParams.get("watch") === "true";
      if (!watch && ++lists <= 3) {
        res.writeHead(403, { "content-type": "application/json" }).end(JSON.stringify({ kind: "Status", status: "Failure", reason: "Forbidden", code: 403, message: "configmaps is forbidden" }));
        return;
      }
      if (!watch) {
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ kind: "ConfigMapList", metadata: { resourceVersion: "5" }, items: [] }));
        return;
      }
      res.writeHead(200, { "content-type": "application/json" }); // a watch that stays up, quiet
    });
    await new Promise<void>((r) => server!.listen(0, "127.0.0.1", r));
    client = clientOf(server);
    const metrics = new Metrics();
    informer = new Informer(client, { path: "/api/v1/configmaps", logger: silentLogger(), metrics, backoffInitialMs: 10, backoffMaxMs: 20 });
    await informer.start();
    const text = await metrics.registry.metrics();
    expect(text).toMatch(/agentcompute_informer_relists_total\{resource="[^"]+"\} 1\n/);
    expect(text).toMatch(/agentcompute_informer_watch_restarts_total\{resource="[^"]+",reason="list_error"\} 3\n/);
    expect(text).not.toMatch(/reason="error"/);
  });

  it("backs off after a slow list whose watch is answered 410 at once, rather than list again in a loop", async () => {
    let lists = 0;
    server = createServer((req, res) => {
      const watch = new URL(req.url ?? "/", "http://x").searchParams.get("watch") === "true";
      if (!watch) {
        lists++;
        // A list from etcd that takes a while (longer than a watch must stay up to count as healthy).
        setTimeout(() => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ kind: "ConfigMapList", metadata: { resourceVersion: "5" }, items: [] })), 150);
        return;
      }
      res.writeHead(410, { "content-type": "application/json" }).end(JSON.stringify({ kind: "Status", status: "Failure", reason: "Expired", code: 410, message: "too old resource version" }));
    });
    await new Promise<void>((r) => server!.listen(0, "127.0.0.1", r));
    client = clientOf(server);
    informer = new Informer(client, { path: "/api/v1/configmaps", logger: silentLogger(), healthyWatchMs: 100, backoffInitialMs: 1_000 });
    void informer.start().catch(() => undefined);
    await new Promise((r) => setTimeout(r, 1_500));
    // The first list, one more at once after the first 410, then a backoff of 1-2 s.
    expect(lists).toBeLessThanOrEqual(3);
  });
});
