// A kubeconfig that acts as a ServiceAccount, the way the operator runs in a cluster: a token
// from the TokenRequest API (`kubectl create token`) and the admin kubeconfig's server and CA,
// with no client certificate, so RBAC decides every request. The install suites and the
// benchmark use it.
import { writeFile } from "node:fs/promises";
import YAML from "yaml";
import { kubectlOk } from "./kubectl.js";

export interface ServiceAccountKubeconfigOptions {
  /** The admin kubeconfig (a path or a ':'-separated list; "" for kubectl's default). */
  adminKubeconfig?: string;
  namespace: string;
  name: string;
  /** Of the token, e.g. "10m" or "24h". */
  duration: string;
  /** Where to write the kubeconfig. */
  file: string;
  /** Of the file; default 0600, since it holds the token. */
  mode?: number;
}

interface FlatKubeconfig {
  clusters?: { name: string; cluster: { server: string; "certificate-authority-data"?: string; "insecure-skip-tls-verify"?: boolean; "tls-server-name"?: string } }[];
}

/** Writes the ServiceAccount's kubeconfig to opts.file; returns its token. */
export async function writeServiceAccountKubeconfig(opts: ServiceAccountKubeconfigOptions): Promise<{ token: string }> {
  const target = { kubeconfig: opts.adminKubeconfig };
  const token = (await kubectlOk(["create", "token", opts.name, "--duration", opts.duration], { ...target, namespace: opts.namespace })).trim();
  // --minify --flatten: the current context's cluster only, with its CA inlined (a caFile
  // path relative to the admin kubeconfig would not resolve next to ours).
  const admin = JSON.parse(await kubectlOk(["config", "view", "--raw", "--minify", "--flatten", "-o", "json"], target)) as FlatKubeconfig;
  const cluster = admin.clusters?.[0]?.cluster;
  if (cluster === undefined) throw new Error("the admin kubeconfig has no current cluster");
  const user = opts.name;
  const kubeconfig = {
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "cluster", cluster }],
    users: [{ name: user, user: { token } }],
    contexts: [{ name: user, context: { cluster: "cluster", user, namespace: opts.namespace } }],
    "current-context": user,
  };
  await writeFile(opts.file, YAML.stringify(kubeconfig), { mode: opts.mode ?? 0o600 });
  return { token };
}
