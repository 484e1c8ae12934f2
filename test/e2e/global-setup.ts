// Global setup of the e2e project: one real kube-apiserver (+ etcd, GC and namespace
// controllers) for all e2e files, like controller-runtime's envtest.
//
//   USE_EXISTING_CLUSTER=true  use the cluster from $KUBECONFIG (or ~/.kube/config); start nothing
//   KUBE_KEEP=true             leave a server this setup started running afterwards
//                              (stop it with `npm run kube:down`)
//   KUBE_STATE_DIR=DIR         use the instance in DIR instead of .cache/kube
//
// If a server from `npm run kube:up` is already running it is reused and left running.
import type { TestProject } from "vitest/node";
import { kubeDown, kubeUp } from "../../dev/kube-apiserver.js";
import "./support/context.js";

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const log = (line: string): void => console.log(`[e2e kube] ${line}`);

  if (process.env.USE_EXISTING_CLUSTER === "true") {
    const kubeconfig = process.env.KUBECONFIG ?? "";
    log(`USE_EXISTING_CLUSTER=true: using ${kubeconfig === "" ? "~/.kube/config" : kubeconfig}`);
    project.provide("kubeconfig", kubeconfig);
    project.provide("useExistingCluster", true);
    return async () => undefined;
  }

  const stateDir = process.env.KUBE_STATE_DIR;
  const where = stateDir !== undefined && stateDir !== "" ? { stateDir } : {};
  const up = await kubeUp({ ...where, log });
  process.env.KUBECONFIG = up.kubeconfig;
  project.provide("kubeconfig", up.kubeconfig);
  project.provide("useExistingCluster", false);

  return async () => {
    if (!up.started) return; // someone else's server: leave it alone
    if (process.env.KUBE_KEEP === "true") {
      log(`KUBE_KEEP=true: leaving kube-apiserver running (pid ${up.pid}); stop it with 'npm run kube:down'`);
      return;
    }
    await kubeDown({ ...where, log });
  };
}
