// The real API server the benchmark runs against (scripts/kube.ts: reuse a running one, else
// start it), the CRDs, one namespace per scenario, fast bulk creation and teardown.
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { kubeUp } from "../../scripts/kube.js";
import { GROUP, VERSION } from "../../src/api/index.js";
import { KubeClient, isAlreadyExists, isNotFound, namespacesPath, resourcePath } from "../../src/runtime/kube-client.js";
import { forEachLimit, log, waitUntil } from "./util.js";

const execFileAsync = promisify(execFile);
const CRD_DIR = fileURLToPath(new URL("../../crds/", import.meta.url));

export const KINDS = [
  { kind: "Skill", plural: "skills" },
  { kind: "Agent", plural: "agents" },
  { kind: "AgentDeployment", plural: "agentdeployments" },
  { kind: "Sandbox", plural: "sandboxes" },
] as const;
export type Plural = (typeof KINDS)[number]["plural"] | "connections";

export interface Cluster {
  kubeconfig: string;
  server: string;
  /** The benchmark's own client (the operator has its own, in its own process). */
  kube: KubeClient;
  /** Whether this run started the API server (then it is left running; `npm run kube:down` stops it). */
  started: boolean;
}

export async function connectCluster(): Promise<Cluster> {
  const up = await kubeUp({ log: (l) => log(`kube: ${l}`) });
  const kube = KubeClient.fromKubeconfig(up.kubeconfig, { userAgent: "agent-operator-bench" });
  await installCRDs(up.kubeconfig);
  return { kubeconfig: up.kubeconfig, server: up.server, kube, started: up.started };
}

async function kubectl(kubeconfig: string, args: string[]): Promise<string> {
  const { stdout } = await execFileAsync(process.env.KUBECTL ?? "kubectl", args, {
    env: { ...process.env, KUBECONFIG: kubeconfig },
    maxBuffer: 64 * 1024 * 1024,
  });
  return stdout;
}

async function installCRDs(kubeconfig: string): Promise<void> {
  await kubectl(kubeconfig, ["apply", "--server-side", "--force-conflicts", "-k", CRD_DIR]);
  await kubectl(kubeconfig, ["wait", "--for=condition=Established", "--timeout=60s", "crd", "-l", "app.kubernetes.io/part-of=agent-operator"]);
}

export const BENCH_LABEL = "agentcompute.dev/bench";

export async function createNamespace(kube: KubeClient, prefix: string): Promise<string> {
  const name = `${prefix}-${randomBytes(3).toString("hex")}`;
  await kube.create(namespacesPath(), { apiVersion: "v1", kind: "Namespace", metadata: { name, labels: { [BENCH_LABEL]: "true" } } });
  return name;
}

export function crPath(plural: Plural, namespace: string, name?: string): string {
  return resourcePath({ group: GROUP, version: VERSION, plural, namespace, name });
}

interface Creatable {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace: string };
}

/** Creates the objects with `concurrency` requests in flight; an object that exists already is skipped. */
export async function createAll(kube: KubeClient, objects: readonly Creatable[], concurrency = 64): Promise<void> {
  await forEachLimit(objects, concurrency, async (o) => {
    const path = collectionPath(o);
    try {
      await kube.create(path, o);
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
    }
  });
}

function collectionPath(o: Creatable): string {
  const [group, version] = o.apiVersion.includes("/") ? (o.apiVersion.split("/") as [string, string]) : ["", o.apiVersion];
  const plural = o.kind === "Sandbox" ? "sandboxes" : `${o.kind.toLowerCase()}s`;
  return resourcePath({ group: group || undefined, version, plural, namespace: o.metadata.namespace });
}

/**
 * Removes a scenario's namespace with everything in it. The operator must be stopped first:
 * the finalizers it put on the resources are stripped here (the service objects belong to an
 * emulator that goes away with the scenario), then the namespace controller deletes the rest.
 */
export async function deleteNamespace(kube: KubeClient, namespace: string): Promise<void> {
  for (const { plural } of KINDS) {
    const list = await kube.list<{ metadata: { name: string; finalizers?: string[] } }>(crPath(plural, namespace));
    const held = list.items.filter((o) => (o.metadata.finalizers ?? []).length > 0);
    await forEachLimit(held, 64, async (o) => {
      try {
        await kube.patch(crPath(plural, namespace, o.metadata.name), { metadata: { finalizers: null } }, "merge");
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    });
  }
  try {
    await kube.delete(namespacesPath(namespace), { propagationPolicy: "Background" });
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
}

/** Waits (bounded) until a deleted namespace is gone, so the next scenario does not share the API server with its teardown. */
export async function waitNamespaceGone(kube: KubeClient, namespace: string, timeoutMs = 180_000): Promise<boolean> {
  try {
    await waitUntil(
      async () => {
        try {
          await kube.get(namespacesPath(namespace));
          return false;
        } catch (err) {
          if (isNotFound(err)) return true;
          throw err;
        }
      },
      { timeoutMs, intervalMs: 1000, what: `namespace ${namespace} to be deleted` },
    );
    return true;
  } catch {
    return false;
  }
}

/** Namespaces left behind by interrupted benchmark runs. */
export async function leftoverNamespaces(kube: KubeClient): Promise<string[]> {
  const list = await kube.list<{ metadata: { name: string; deletionTimestamp?: string } }>(namespacesPath(), {
    labelSelector: `${BENCH_LABEL}=true`,
  });
  return list.items.filter((n) => n.metadata.deletionTimestamp === undefined).map((n) => n.metadata.name);
}
