// The kubectl flags of the client commands (exec, logs, plan): -n/--namespace, --kubeconfig and
// --context, with kubectl's meaning. One place for their parseArgs options, their help lines,
// what they resolve to and how an API server they name that cannot be reached is told, so that
// the commands cannot drift apart. (`run` is not one of them: its --namespace is repeatable and
// names the namespaces to watch.)
import { errorMessage } from "../lib/errors.js";
import { KubeApiError, KubeClient, KubeTimeoutError } from "../runtime/kube-client.js";
import { ServiceError } from "../service/errors.js";

/** The flags' parseArgs options, to spread into a command's own. */
export const kubeFlagOptions = {
  namespace: { type: "string", short: "n" },
  kubeconfig: { type: "string" },
  context: { type: "string" },
} as const;

export interface KubeFlags {
  namespace?: string;
  kubeconfig?: string;
  context?: string;
}

/**
 * The kube flags out of a command's parsed values. An empty value is a flag not given, as
 * kubectl takes it: `-n "$NS"` with $NS unset is the context's namespace (`kubectl get pods -n ""`
 * lists the context's), and so for --kubeconfig and --context.
 */
export function kubeFlagsOf(values: KubeFlags): KubeFlags {
  const given = (v: string | undefined) => (v === "" ? undefined : v);
  return { namespace: given(values.namespace), kubeconfig: given(values.kubeconfig), context: given(values.context) };
}

/**
 * The flags' help lines. `namespaceHelp` says what the namespace is of; `width` is the column
 * where the descriptions of the command's help start.
 */
export function kubeFlagsHelp(namespaceHelp: string, width: number): string {
  const line = (flag: string, text: string): string => `  ${flag.padEnd(width - 2)}${text}`;
  return [
    line("-n, --namespace <ns>", `${namespaceHelp} (default: the context's, else default)`),
    line("    --kubeconfig <path>", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)"),
    line("    --context <name>", "kubeconfig context (default: the current one)"),
  ].join("\n");
}

/** A client of the cluster the flags name (kubectl's resolution: --kubeconfig, $KUBECONFIG, ~/.kube/config, in-cluster). */
export function kubeClientOf(flags: KubeFlags): KubeClient {
  return KubeClient.fromKubeconfig(flags.kubeconfig, { context: flags.context });
}

/** The namespace the flags name: -n, else the context's, else "default". */
export function namespaceOf(flags: KubeFlags, kube: KubeClient | undefined): string {
  return flags.namespace ?? kube?.currentNamespace() ?? "default";
}

/** Error codes of a request that got no answer from the server: the network, DNS or TLS failing. */
const NO_ANSWER = /^(ECONNREFUSED|ECONNRESET|ECONNABORTED|ETIMEDOUT|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH|ENETDOWN|EPIPE|UND_ERR.*|ERR_TLS.*|ERR_SSL.*|CERT_.*|DEPTH_ZERO_SELF_SIGNED_CERT|SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_.*)$/;

/**
 * A failure to reach the API server, told with the server's URL and the kubeconfig and context
 * it came from (a bare "connect ECONNREFUSED 127.0.0.1:1" says neither); any other error (an
 * answer of the API server's, one of ours) as it is. No credentials: the URL's user and password,
 * if it has any, are left out.
 */
export function explainKubeError(err: unknown, kube: KubeClient | undefined): unknown {
  // The service's failures (plan and exec talk to it too) are not the API server's.
  if (kube === undefined || err instanceof KubeApiError || err instanceof ServiceError) return err;
  const code = (err as { code?: unknown } | undefined)?.code ?? ((err as { cause?: { code?: unknown } } | undefined)?.cause?.code);
  if (!(err instanceof KubeTimeoutError) && !(typeof code === "string" && NO_ANSWER.test(code))) return err;
  const source = kube.cluster.source === undefined ? "" : ` (${kube.cluster.source})`;
  return new Error(`cannot reach the API server ${withoutUserinfo(kube.server)}${source}: ${errorMessage(err)}`, { cause: err });
}

function withoutUserinfo(server: string): string {
  try {
    const url = new URL(server);
    url.username = "";
    url.password = "";
    return url.toString().replace(/\/$/, "");
  } catch {
    return server;
  }
}
