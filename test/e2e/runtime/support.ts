// Helpers for the runtime's e2e suites: a throwaway CRD group, KubeClients for the test API
// server (directly or through a fault-injecting TCP proxy), and small polling utilities.
import { createServer, connect, type Server, type Socket } from "node:net";
import { crdPath, isAlreadyExists, isNotFound, KubeClient, type KubeObject } from "../../../src/runtime/kube-client.js";
import { loadKubeconfig, type ClusterConnection, type KubeConfigLike } from "../../../src/runtime/kubeconfig.js";
import { createLogger, type Logger } from "../../../src/runtime/logging.js";
import { createTestNamespace, testKubeconfig, waitFor } from "../support/kube.js";

export const GROUP = "rt.test.agentcompute.dev";
export const VERSION = "v1";

export interface Widget extends KubeObject {
  metadata: { name?: string; namespace?: string; resourceVersion?: string; uid?: string; generation?: number };
  spec?: { size?: number; color?: string };
  status?: { phase?: string };
}

/** Logs of the code under test: silent unless E2E_LOG=debug|info... */
export function testLogger(): Logger {
  return createLogger({ level: process.env.E2E_LOG ?? "silent" });
}

/** The test API server, loaded by the runtime's own kubeconfig loader. */
export function clusterFor(kubeconfig: string = testKubeconfig()): ClusterConnection {
  return loadKubeconfig({ path: kubeconfig || undefined });
}

/** A KubeClient from a ClusterConnection (default: the test API server) or a client-node KubeConfig. */
export function clientFor(source: ClusterConnection | KubeConfigLike = clusterFor(), requestTimeoutMs = 15_000): KubeClient {
  return "credentials" in source
    ? new KubeClient({ cluster: source, requestTimeoutMs })
    : new KubeClient({ kubeConfig: source, requestTimeoutMs });
}

/**
 * The same cluster reached at another address (the fault proxy). The proxy listens on
 * 127.0.0.1 like the test API server, so its certificate still verifies.
 */
export function withServer(cluster: ClusterConnection, server: string): ClusterConnection {
  return { server, namespace: cluster.namespace, credentials: (force) => cluster.credentials(force) };
}

/**
 * Create (or reuse) a namespaced CRD `<plural>.rt.test.agentcompute.dev` with a status
 * subresource and wait until it is Established and served.
 */
export async function ensureCrd(client: KubeClient, plural: string, kind: string): Promise<string> {
  const name = `${plural}.${GROUP}`;
  const body = {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: { name },
    spec: {
      group: GROUP,
      scope: "Namespaced",
      names: { plural, singular: plural.replace(/s$/, ""), kind, listKind: `${kind}List` },
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          subresources: { status: {} },
          schema: {
            openAPIV3Schema: {
              type: "object",
              properties: {
                spec: { type: "object", properties: { size: { type: "integer" }, color: { type: "string" } } },
                status: { type: "object", properties: { phase: { type: "string" } } },
              },
            },
          },
        },
      ],
    },
  };
  try {
    await client.create(crdPath(), body);
  } catch (err) {
    if (!isAlreadyExists(err)) throw err;
  }
  await poll(async () => {
    const crd = await client.get<{ status?: { conditions?: { type: string; status: string }[] } }>(crdPath(name));
    return crd.status?.conditions?.some((c) => c.type === "Established" && c.status === "True") ?? false;
  }, 60_000, `CRD ${name} established`);
  // Established can precede the resource being served by discovery for a moment.
  await poll(async () => {
    try {
      await client.list(`/apis/${GROUP}/${VERSION}/${plural}`, { limit: 1 });
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw err;
    }
  }, 60_000, `${plural} served`);
  return name;
}

/** A uniquely named e2e namespace on `client`'s cluster; deleteNamespace(client, name) removes it. */
export const createNamespace = (client: KubeClient, prefix: string): Promise<string> => createTestNamespace(prefix, client);
export { deleteNamespace } from "../../../dev/namespaces.js";

/** Poll until `probe` is truthy; generous timeouts, no timing assertions. */
export async function poll(probe: () => boolean | Promise<boolean>, timeoutMs = 60_000, what = "condition"): Promise<void> {
  await waitFor(probe, { timeoutMs, intervalMs: 100, description: what });
}

interface Pair {
  client: Socket;
  upstream: Socket;
  frozen: boolean;
}

/**
 * A TCP proxy in front of the API server that can cut or freeze the connections passing
 * through it (TLS is end to end; the proxy only moves bytes).
 *  - killAll(): destroy every connection (like an ECONNRESET from a load balancer);
 *  - freezeAll(): keep existing connections open but stop moving bytes either way (a silent
 *    stall / half-open connection); new connections work normally.
 */
/** A client of the test API server that talks through a FaultProxy, to cut or stall its connections. */
export async function proxiedClient(
  cluster: ClusterConnection = clusterFor(),
  requestTimeoutMs?: number,
): Promise<{ proxy: FaultProxy; client: KubeClient; close(): Promise<void> }> {
  const proxy = FaultProxy.forServer(cluster.server);
  const client = clientFor(withServer(cluster, await proxy.start()), requestTimeoutMs);
  return {
    proxy,
    client,
    async close() {
      await client.close();
      await proxy.close();
    },
  };
}

export class FaultProxy {
  private server: Server | undefined;
  private readonly pairs = new Set<Pair>();
  connections = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  static forServer(serverUrl: string): FaultProxy {
    const u = new URL(serverUrl);
    return new FaultProxy(u.hostname, Number(u.port || 443));
  }

  async start(): Promise<string> {
    this.server = createServer((client) => {
      this.connections++;
      const upstream = connect(this.targetPort, this.targetHost);
      const pair: Pair = { client, upstream, frozen: false };
      this.pairs.add(pair);
      client.pipe(upstream);
      upstream.pipe(client);
      const drop = (): void => {
        this.pairs.delete(pair);
        client.destroy();
        upstream.destroy();
      };
      client.on("error", drop);
      upstream.on("error", drop);
      client.on("close", () => {
        if (!pair.frozen) drop();
      });
      upstream.on("close", () => {
        // A frozen connection hides the server's close from the client: that is the stall.
        if (!pair.frozen) drop();
      });
    });
    await new Promise<void>((r) => this.server!.listen(0, "127.0.0.1", r));
    const addr = this.server.address();
    if (!addr || typeof addr === "string") throw new Error("proxy has no address");
    return `https://127.0.0.1:${addr.port}`;
  }

  killAll(): number {
    const n = this.pairs.size;
    for (const p of [...this.pairs]) {
      p.frozen = false;
      p.client.destroy();
      p.upstream.destroy();
      this.pairs.delete(p);
    }
    return n;
  }

  freezeAll(): number {
    let n = 0;
    for (const p of this.pairs) {
      if (p.frozen) continue;
      p.frozen = true;
      p.upstream.unpipe(p.client);
      p.client.unpipe(p.upstream);
      p.upstream.pause();
      p.client.pause();
      n++;
    }
    return n;
  }

  openConnections(): number {
    return this.pairs.size;
  }

  async close(): Promise<void> {
    this.killAll();
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }
}
