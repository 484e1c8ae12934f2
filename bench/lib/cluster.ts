// The real API server the benchmark runs against, with the CRDs (namespaces, bulk creation and
// teardown are dev/namespaces.ts and dev/objects.ts).
//
// The benchmark starts its own API server on fresh data (.cache/bench/kube) and stops it at the
// end. Reusing the developers' shared instance made results depend on what earlier test runs
// had left there: namespaces stuck Terminating with thousands of objects in them, which the
// API server's namespace controller keeps working on, on the same two cores.
import path from "node:path";
import { installCrds } from "../../dev/crds.js";
import { kubeDown, kubeUp } from "../../dev/kube-apiserver.js";
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
  await installCrds({ kubeconfig: up.kubeconfig });
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

/** Label of the benchmark's namespaces. */
export const BENCH_LABEL = "agentcompute.dev/bench";

export function crPath(plural: Plural, namespace: string, name?: string): string {
  return resourcePath({ group: GROUP, version: VERSION, plural, namespace, name });
}
