// The product's KubeClient (src/runtime/kube-client.ts) for the developer tooling, from
// whatever a caller holds: a client, a @kubernetes/client-node KubeConfig or a kubeconfig path.
import { KubeClient } from "../src/runtime/kube-client.js";
import type { KubeConfigLike } from "../src/runtime/kubeconfig.js";

/**
 * The cluster to act on: a KubeClient (used as is), a @kubernetes/client-node KubeConfig, or a
 * kubeconfig path ("" = default resolution). For the last two a client is opened and closed.
 */
export type Cluster = KubeClient | KubeConfigLike | string;

/** Runs `fn` with a client for `cluster`, closing it afterwards unless the caller passed it. */
export async function withClient<T>(cluster: Cluster, fn: (kube: KubeClient) => Promise<T>): Promise<T> {
  if (cluster instanceof KubeClient) return fn(cluster);
  const kube = typeof cluster === "string" ? KubeClient.fromKubeconfig(cluster) : new KubeClient({ kubeConfig: cluster });
  try {
    return await fn(kube);
  } finally {
    await kube.close();
  }
}
