// The real API server the benchmark runs against, the CRDs, one namespace per scenario, fast
// bulk creation and teardown.
//
// The benchmark starts its own API server on fresh data (.cache/bench/kube) and stops it at the
// end. Reusing the developers' shared instance made results depend on what earlier test runs
// had left there: namespaces stuck Terminating with thousands of objects in them, which the
// API server's namespace controller keeps working on, on the same two cores.
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import path from "node:path";
import { kubeDown, kubeUp } from "../../scripts/kube.js";
import { GROUP, VERSION } from "../../src/api/index.js";
import { KubeClient, isAlreadyExists, isNotFound, namespacesPath, resourcePath } from "../../src/runtime/kube-client.js";
import { CACHE } from "./operator.js";
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
  /** The kube-apiserver's process id (its CPU time is read from /proc). */
  pid: number;
  /** Stops the API server and removes its data. */
  close(): Promise<void>;
}

/** The benchmark's own API server state, apart from the developers' (.cache/kube). */
export const BENCH_KUBE_STATE_DIR = path.join(CACHE, "kube");

export async function connectCluster(): Promise<Cluster> {
  const kubeLog = (l: string): void => log(`kube: ${l}`);
  // An instance left running by an interrupted run is stopped: every run starts on empty data.
  await kubeDown({ stateDir: BENCH_KUBE_STATE_DIR, log: kubeLog });
  // --profiling costs nothing until asked: `kubectl get --raw "/debug/pprof/profile?seconds=30"`
  // shows where the API server's CPU goes during a scenario.
  const up = await kubeUp({ stateDir: BENCH_KUBE_STATE_DIR, fresh: true, log: kubeLog, apiserverArgs: ["--profiling=true"] });
  const kube = KubeClient.fromKubeconfig(up.kubeconfig, { userAgent: "agent-operator-bench" });
  await installCRDs(up.kubeconfig);
  return {
    kubeconfig: up.kubeconfig,
    server: up.server,
    pid: up.pid,
    kube,
    close: async () => {
      await kube.close();
      await kubeDown({ stateDir: BENCH_KUBE_STATE_DIR, log: kubeLog });
    },
  };
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
  // Connections too: theirs waits for the resources that use them, and held every namespace
  // Terminating for good once the operator was gone.
  const plurals: Plural[] = [...KINDS.map((k) => k.plural), "connections"];
  for (const plural of plurals) {
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
