// The real API server the benchmark runs against, with the CRDs (namespaces, bulk creation and
// teardown are dev/namespaces.ts and dev/objects.ts).
//
// The benchmark starts its own API server on fresh data (.cache/bench/kube) and stops it at the
// end. Reusing the developers' shared instance made results depend on what earlier test runs
// had left there: namespaces stuck Terminating with thousands of objects in them, which the
// API server's namespace controller keeps working on, on the same two cores.
import path from "node:path";
import YAML from "yaml";
import { installCrds } from "../../dev/crds.js";
import { kubeDown, kubeUp } from "../../dev/kube-apiserver.js";
import { apply, kustomize } from "../../dev/kubectl.js";
import { REPO_ROOT } from "../../dev/paths.js";
import { writeServiceAccountKubeconfig } from "../../dev/service-account.js";
import { GROUP, VERSION } from "../../src/api/index.js";
import { KubeClient, resourcePath } from "../../src/runtime/kube-client.js";
import { CACHE } from "./operator.js";
import { log } from "./util.js";

export const KINDS = [
  { kind: "Skill", plural: "skills" },
  { kind: "Agent", plural: "agents" },
  { kind: "AgentDeployment", plural: "agentdeployments" },
  { kind: "Sandbox", plural: "sandboxes" },
  { kind: "SandboxRun", plural: "sandboxruns" },
] as const;
export type Plural = (typeof KINDS)[number]["plural"] | "connections";

export interface Cluster {
  /** The admin's: the benchmark's own client and kubectl. */
  kubeconfig: string;
  /**
   * The operator's, as in a cluster: its ServiceAccount's token and the manifests' RBAC (sharded
   * mode's included), so authentication and authorization cost what they cost in production
   * (a client certificate is verified on every request; a token's check is cached).
   */
  operator: { kubeconfig: string; namespace: string };
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

export const OPERATOR_IDENTITIES = ["serviceaccount", "admin"] as const;

/**
 * identity "admin": the operator uses the admin kubeconfig instead of its ServiceAccount (to
 * measure what token authentication and RBAC cost against a client certificate).
 */
export async function connectCluster(opts: { identity?: (typeof OPERATOR_IDENTITIES)[number] } = {}): Promise<Cluster> {
  const kubeLog = (l: string): void => log(`kube: ${l}`);
  // An instance left running by an interrupted run is stopped: every run starts on empty data.
  await kubeDown({ stateDir: BENCH_KUBE_STATE_DIR, log: kubeLog });
  // --profiling costs nothing until asked: `kubectl get --raw "/debug/pprof/profile?seconds=30"`
  // shows where the API server's CPU goes during a scenario.
  const up = await kubeUp({ stateDir: BENCH_KUBE_STATE_DIR, fresh: true, log: kubeLog, apiserverArgs: ["--profiling=true"] });
  const kube = KubeClient.fromKubeconfig(up.kubeconfig, { userAgent: "agent-operator-bench" });
  await installCrds({ kubeconfig: up.kubeconfig });
  const operator = await installOperatorIdentity(up.kubeconfig, up.paths.dataDir);
  return {
    kubeconfig: up.kubeconfig,
    // The Roles stay installed either way: sharded mode's Leases live in their namespace.
    operator: opts.identity === "admin" ? { ...operator, kubeconfig: up.kubeconfig } : operator,
    server: up.server,
    pid: up.pid,
    kube,
    close: async () => {
      await kube.close();
      await kubeDown({ stateDir: BENCH_KUBE_STATE_DIR, log: kubeLog });
    },
  };
}

/** The RBAC kinds of the manifests: what the operator may do, without its Deployment. */
const IDENTITY_KINDS = new Set(["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]);

/** Applies the sharded overlay's identity and RBAC, and writes the ServiceAccount's kubeconfig. */
async function installOperatorIdentity(adminKubeconfig: string, dataDir: string): Promise<Cluster["operator"]> {
  type Obj = { kind: string; metadata: { name: string; namespace?: string } };
  const rendered = await kustomize<Obj>(path.join(REPO_ROOT, "manifests", "overlays", "sharded"));
  const objects = rendered.filter((o) => IDENTITY_KINDS.has(o.kind));
  const account = objects.find((o) => o.kind === "ServiceAccount");
  if (account?.metadata.namespace === undefined) throw new Error("manifests/overlays/sharded renders no namespaced ServiceAccount");
  await apply(objects.map((o) => YAML.stringify(o)).join("---\n"), { kubeconfig: adminKubeconfig });
  // With the API server's data, removed with it. The token lasts longer than a full `npm run bench`.
  const kubeconfig = path.join(dataDir, "operator.kubeconfig");
  await writeServiceAccountKubeconfig({ adminKubeconfig, namespace: account.metadata.namespace, name: account.metadata.name, duration: "48h", file: kubeconfig });
  return { kubeconfig, namespace: account.metadata.namespace };
}

/** Label of the benchmark's namespaces. */
export const BENCH_LABEL = "agentcompute.dev/bench";

export function crPath(plural: Plural, namespace: string, name?: string): string {
  return resourcePath({ group: GROUP, version: VERSION, plural, namespace, name });
}
