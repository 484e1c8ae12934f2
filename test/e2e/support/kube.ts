// Helpers for e2e suites that run against the test API server started by
// test/e2e/global-setup.ts (or an existing cluster with USE_EXISTING_CLUSTER=true).
// The work is done by the developer tooling in dev/; these add the test API server's
// kubeconfig as the default and the e2e label on namespaces.
import { ApiException, KubeConfig } from "@kubernetes/client-node";
import { afterAll, beforeAll, inject } from "vitest";
import type { Cluster } from "../../../dev/kube-client.js";
import { kubectl as runKubectl, kubectlOk as runKubectlOk, type KubectlOptions, type KubectlResult } from "../../../dev/kubectl.js";
import { createNamespace, deleteNamespace, type DeleteNamespaceOptions } from "../../../dev/namespaces.js";
import "./context.js";

export type { KubectlOptions, KubectlResult } from "../../../dev/kubectl.js";
export { uniqueName } from "../../../dev/namespaces.js";
export { waitFor, type WaitOptions } from "../../../dev/wait.js";

/** Label put on every namespace these helpers create, to find leftovers. */
export const E2E_NAMESPACE_LABEL = "agentcompute.dev/e2e";

/**
 * The kubeconfig the tests use: what the global setup provided, else $KUBECONFIG.
 * A path, a ':'-separated list (existing clusters only), or "" for kubectl's default.
 */
export function testKubeconfig(): string {
  let provided: string | undefined;
  try {
    provided = inject("kubeconfig");
  } catch {
    provided = undefined; // not inside a vitest worker
  }
  return provided ?? process.env.KUBECONFIG ?? "";
}

/** true when the tests run against a cluster they did not start (USE_EXISTING_CLUSTER=true). */
export function usingExistingCluster(): boolean {
  try {
    return inject("useExistingCluster");
  } catch {
    return process.env.USE_EXISTING_CLUSTER === "true";
  }
}

/** A fresh KubeConfig for the test API server (each call reads the file again). */
export function loadKubeConfig(kubeconfig: string = testKubeconfig()): KubeConfig {
  const kc = new KubeConfig();
  if (kubeconfig !== "" && !kubeconfig.includes(":")) {
    kc.loadFromFile(kubeconfig);
  } else {
    // loadFromDefault reads $KUBECONFIG (merging a list) or ~/.kube/config.
    const saved = process.env.KUBECONFIG;
    try {
      if (kubeconfig !== "") process.env.KUBECONFIG = kubeconfig;
      kc.loadFromDefault();
    } finally {
      if (saved === undefined) delete process.env.KUBECONFIG;
      else process.env.KUBECONFIG = saved;
    }
  }
  return kc;
}

/**
 * Runs kubectl (dev/kubectl.ts) against the test API server unless `opts.kubeconfig` names
 * another. Never throws for a non-zero exit: check exitCode.
 */
export async function kubectl(args: readonly string[], opts: KubectlOptions = {}): Promise<KubectlResult> {
  return runKubectl(args, { ...opts, kubeconfig: opts.kubeconfig ?? testKubeconfig() });
}

/** Like kubectl() but throws (with stderr) unless the exit code is 0; returns stdout. */
export async function kubectlOk(args: readonly string[], opts: KubectlOptions = {}): Promise<string> {
  return runKubectlOk(args, { ...opts, kubeconfig: opts.kubeconfig ?? testKubeconfig() });
}

/** The HTTP status of a client-node API error, or undefined for other errors. */
export function apiErrorCode(err: unknown): number | undefined {
  return err instanceof ApiException ? err.code : undefined;
}

/**
 * Creates a uniquely named namespace (labelled E2E_NAMESPACE_LABEL=true) on the test API
 * server, or on `cluster`; returns its name.
 */
export async function createTestNamespace(prefix = "e2e", cluster: Cluster = loadKubeConfig()): Promise<string> {
  return createNamespace(cluster, prefix, { label: E2E_NAMESPACE_LABEL });
}

/**
 * Deletes a namespace (404 is fine). With wait, polls until it is gone: that needs the
 * namespace controller (on by default in the test API server).
 */
export async function deleteTestNamespace(
  name: string,
  opts: Pick<DeleteNamespaceOptions, "wait" | "timeoutMs"> = {},
  cluster: Cluster = loadKubeConfig(),
): Promise<void> {
  await deleteNamespace(cluster, name, opts);
}

export interface TestNamespace {
  /** The namespace's name; only valid inside tests/hooks (after beforeAll ran). */
  readonly name: string;
}

/**
 * Call at the top of a test file (or describe block): creates a unique namespace in
 * beforeAll and deletes it in afterAll (without waiting for the namespace controller).
 */
export function useTestNamespace(prefix = "e2e"): TestNamespace {
  let name: string | undefined;
  beforeAll(async () => {
    name = await createTestNamespace(prefix);
  });
  afterAll(async () => {
    if (name !== undefined) await deleteTestNamespace(name);
  });
  return {
    get name(): string {
      if (name === undefined) throw new Error("useTestNamespace: the namespace exists only once beforeAll has run");
      return name;
    },
  };
}
