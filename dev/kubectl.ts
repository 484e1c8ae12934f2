// The one kubectl runner of the developer tooling: tests, the benchmark and `npm start` run
// kubectl through it. `$KUBECTL` names another binary.
import { parseAllDocuments } from "yaml";
import { okOrThrow, runTool, type ToolResult } from "./process.js";

export interface KubectlOptions {
  /** Written to kubectl's stdin (e.g. a manifest for `apply -f -`). */
  input?: string;
  /** Adds `--namespace`. */
  namespace?: string;
  /**
   * Sets `$KUBECONFIG`: a path, or a ':'-separated list. Undefined or "": kubectl's default
   * (this process's `$KUBECONFIG`, else ~/.kube/config).
   */
  kubeconfig?: string;
  /** Kill kubectl after this long (default 60 s); the result then has exitCode -1. */
  timeoutMs?: number;
  /** Extra environment variables. */
  env?: NodeJS.ProcessEnv;
}

export type KubectlResult = ToolResult;

/** Runs kubectl. Never throws for a non-zero exit: check exitCode. */
export async function kubectl(args: readonly string[], opts: KubectlOptions = {}): Promise<KubectlResult> {
  const fullArgs = [...(opts.namespace !== undefined ? ["--namespace", opts.namespace] : []), ...args];
  const env: NodeJS.ProcessEnv = { ...process.env, ...opts.env };
  if (opts.kubeconfig !== undefined && opts.kubeconfig !== "") env.KUBECONFIG = opts.kubeconfig;
  const bin = process.env.KUBECTL ?? "kubectl";
  return runTool(bin, fullArgs, { env, input: opts.input, timeoutMs: opts.timeoutMs ?? 60_000 });
}

/** Like kubectl() but throws (with stderr) unless the exit code is 0; returns stdout. */
export async function kubectlOk(args: readonly string[], opts: KubectlOptions = {}): Promise<string> {
  return okOrThrow("kubectl", args, await kubectl(args, opts));
}

/** `kubectl apply -f -` of a manifest (YAML or JSON, one or more documents); returns stdout. */
export async function apply(manifest: string, opts: Omit<KubectlOptions, "input"> = {}): Promise<string> {
  return kubectlOk(["apply", "-f", "-"], { ...opts, input: manifest });
}

/** The objects of a multi-document YAML stream (kubectl's or helm's output), empty documents dropped. */
export function parseObjects<T = unknown>(yamlText: string): T[] {
  return parseAllDocuments(yamlText)
    .map((d) => d.toJS() as T | null)
    .filter((o): o is T => o !== null);
}

/** `kubectl kustomize <dir>` parsed into objects (what `kubectl apply -k <dir>` would send). */
export async function kustomize<T = unknown>(dir: string, opts: Omit<KubectlOptions, "input"> = {}): Promise<T[]> {
  return parseObjects<T>(await kubectlOk(["kustomize", dir], opts));
}
