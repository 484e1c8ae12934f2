// Namespaces of the tests and the benchmark: a unique name, a label to find leftovers by, and
// a teardown that can first strip the finalizers the operator left (when it no longer runs).
import { randomBytes } from "node:crypto";
import { GROUP, VERSION, allKinds } from "../src/api/index.js";
import { isNotFound, namespacesPath, resourcePath, type KubeClient } from "../src/runtime/kube-client.js";
import { withClient, type Cluster } from "./kube-client.js";
import { forEachLimit } from "./parallel.js";
import { waitFor } from "./wait.js";

/** A DNS-1123 name: `${prefix}-` plus 6 random hex characters (prefix trimmed to fit 63). */
export function uniqueName(prefix: string): string {
  const clean = prefix.toLowerCase().replace(/[^a-z0-9-]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 55) || "e2e";
  return `${clean}-${randomBytes(3).toString("hex")}`;
}

/** Creates a uniquely named namespace (uniqueName(prefix)), labelled `<label>=true`; returns its name. */
export async function createNamespace(cluster: Cluster, prefix: string, opts: { label?: string } = {}): Promise<string> {
  const name = uniqueName(prefix);
  const metadata = { name, ...(opts.label !== undefined ? { labels: { [opts.label]: "true" } } : {}) };
  await withClient(cluster, (kube) => kube.create(namespacesPath(), { apiVersion: "v1", kind: "Namespace", metadata }));
  return name;
}

export interface DeleteNamespaceOptions {
  /**
   * First remove the finalizers on our resources in it (the managed kinds, then Connections,
   * whose finalizer waits for the resources that use them): for when the operator that would
   * remove them is gone, and the service objects went away with an emulator.
   */
  stripFinalizers?: boolean;
  /** Wait until the namespace is gone (needs the namespace controller); throws after timeoutMs. */
  wait?: boolean;
  /** For wait; default 60 s. */
  timeoutMs?: number;
}

/** Deletes a namespace with everything in it (not found is fine). */
export async function deleteNamespace(cluster: Cluster, name: string, opts: DeleteNamespaceOptions = {}): Promise<void> {
  await withClient(cluster, async (kube) => {
    if (opts.stripFinalizers) await stripFinalizers(kube, name);
    try {
      await kube.delete(namespacesPath(name), { propagationPolicy: "Background" });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    if (opts.wait) {
      const timeoutMs = opts.timeoutMs ?? 60_000;
      if (!(await waitNamespaceGone(kube, name, { timeoutMs }))) {
        throw new Error(`timed out after ${timeoutMs} ms waiting for namespace ${name} to be deleted`);
      }
    }
  });
}

/** Waits until a deleted namespace is gone; false on timeout (default 60 s; polled every 200 ms). */
export async function waitNamespaceGone(
  cluster: Cluster,
  name: string,
  opts: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<boolean> {
  return withClient(cluster, async (kube) => {
    try {
      await waitFor(
        async () => {
          try {
            await kube.get(namespacesPath(name));
            return false;
          } catch (err) {
            if (isNotFound(err)) return true;
            throw err;
          }
        },
        { timeoutMs: opts.timeoutMs ?? 60_000, intervalMs: opts.intervalMs ?? 200, description: `namespace ${name} to be deleted` },
      );
      return true;
    } catch {
      return false;
    }
  });
}

/** Our kinds, Connections last. */
const PLURALS = [...allKinds.filter((k) => k.kind !== "Connection"), ...allKinds.filter((k) => k.kind === "Connection")].map((k) => k.plural);

async function stripFinalizers(kube: KubeClient, namespace: string): Promise<void> {
  for (const plural of PLURALS) {
    const path = (name?: string): string => resourcePath({ group: GROUP, version: VERSION, plural, namespace, name });
    const list = await kube.list<{ metadata: { name: string; finalizers?: string[] } }>(path());
    const held = list.items.filter((o) => (o.metadata.finalizers ?? []).length > 0);
    await forEachLimit(held, 64, async (o) => {
      try {
        await kube.patch(path(o.metadata.name), { metadata: { finalizers: null } }, "merge");
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    });
  }
}
