// The kubectl flags of the client commands (exec, logs, plan): -n/--namespace, --kubeconfig and
// --context, with kubectl's meaning. One place for their parseArgs options, their help lines
// and what they resolve to, so that the commands cannot drift apart. (`run` is not one of
// them: its --namespace is repeatable and names the namespaces to watch.)
import { KubeClient } from "../runtime/kube-client.js";

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

/** The kube flags out of a command's parsed values. */
export function kubeFlagsOf(values: KubeFlags): KubeFlags {
  return { namespace: values.namespace, kubeconfig: values.kubeconfig, context: values.context };
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
