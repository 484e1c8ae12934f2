// `agent-operator plan`: what the operator would do in the service if the manifests were
// applied now (terraform plan for the agentcompute.dev kinds). Reads the cluster and the
// service; writes nothing to either. Flags follow kubectl's. Exit codes follow
// `terraform plan -detailed-exitcode`: 0 no changes, 1 error, 2 changes; 141 (128 + SIGPIPE)
// when its output is closed early (`| head`), as a program killed by the closed pipe.
import { readdirSync, statSync } from "node:fs";
import { parseArgs } from "node:util";
import { errorMessage } from "../lib/errors.js";
import type { KubeClient } from "../runtime/kube-client.js";
import { ManifestError, isPlanned, parseSources, readSources, renderKustomization, type Source } from "../plan/manifests.js";
import { exitCodeOf } from "../plan/model.js";
import { kubeReader, plan } from "../plan/planner.js";
import { render } from "../plan/render.js";
import { parseSelector, type LabelMatcher } from "../plan/selector.js";
import { goBooleans } from "./booleans.js";
import { explainKubeError, kubeClientOf, kubeFlagOptions, kubeFlagsHelp, kubeFlagsOf, namespaceOf, type KubeFlags } from "./kube-flags.js";
import { exitOnClosedOutput } from "./output.js";
import { usageError } from "./usage.js";

const help = (prog: string) => `usage: ${prog} (-f FILENAME | -k DIRECTORY) [flags]

Shows what the operator would do in the service if the manifests were applied now: each
Skill, Agent, AgentDeployment and Sandbox created, updated (fields old -> new), replaced (and
why), deleted (--prune) or left alone; each Connection and SandboxRun created or changed.
Reads the cluster and the service; writes nothing.

flags:
  -f, --filename <path>      a manifest file, a directory of them, or - for stdin; repeatable
  -R, --recursive            with -f DIRECTORY, read its sub-directories too
  -k, --kustomize <dir>      a kustomization, rendered with \`kubectl kustomize\`
${kubeFlagsHelp("namespace of manifests that name none", 29)}
      --prune                also plan the deletion of resources of our kinds the manifests drop
                             (in the namespaces they touch, applied with kubectl apply), as
                             \`kubectl apply --prune\`
  -l, --selector <sel>       only manifests (and, with --prune, live resources) whose labels match
  -o, --output <format>      text (default), json or markdown

exit codes: 0 no changes, 2 changes (in the service, or a resource's spec alone; or something
that cannot be planned), 1 error;
141 output closed early (e.g. | head)
`;

export interface PlanFlags extends KubeFlags {
  filenames: string[];
  recursive: boolean;
  kustomize?: string;
  prune: boolean;
  selector?: LabelMatcher;
  output: "text" | "json" | "markdown";
}

/** Parses and validates the flags; throws an Error whose message names the flag. */
export function parsePlanFlags(argv: string[]): PlanFlags | "help" {
  const options = {
    help: { type: "boolean", short: "h" },
    filename: { type: "string", short: "f", multiple: true },
    recursive: { type: "boolean", short: "R", default: false },
    kustomize: { type: "string", short: "k" },
    ...kubeFlagOptions,
    prune: { type: "boolean", default: false },
    selector: { type: "string", short: "l" },
    output: { type: "string", short: "o", default: "text" },
  } as const;
  const { values, positionals } = parseArgs({ args: goBooleans(argv, options), strict: true, allowPositionals: true, options });
  if (values.help) return "help";
  if (positionals.length > 0) throw new Error(`unexpected argument "${positionals[0] ?? ""}" (manifests are given with -f or -k)`);
  const filenames = values.filename ?? [];
  if (filenames.length === 0 && values.kustomize === undefined) throw new Error("give the manifests with -f FILENAME or -k DIRECTORY");
  if (filenames.length > 0 && values.kustomize !== undefined) throw new Error("-f and -k cannot be used together");
  const output = values.output;
  if (output !== "text" && output !== "json" && output !== "markdown") throw new Error(`--output: "${output}" is not one of text, json, markdown`);
  return {
    filenames,
    recursive: values.recursive,
    kustomize: values.kustomize,
    ...kubeFlagsOf(values),
    prune: values.prune,
    selector: values.selector !== undefined ? parseSelector(values.selector) : undefined,
    output,
  };
}

export async function main(argv: string[], prog = "agent-operator plan"): Promise<number> {
  exitOnClosedOutput();
  let flags: PlanFlags | "help";
  try {
    flags = parsePlanFlags(argv);
  } catch (err) {
    console.error(usageError(prog, err));
    return 1;
  }
  if (flags === "help") {
    console.log(help(prog));
    return 0;
  }
  let kube: KubeClient | undefined;
  try {
    const sources: Source[] = flags.kustomize !== undefined ? [await renderKustomization(flags.kustomize)] : readSources(flags.filenames, { recursive: flags.recursive });
    // Bad manifests are reported even when the cluster cannot be reached.
    let kubeError: unknown;
    try {
      kube = kubeClientOf(flags);
    } catch (err) {
      kubeError = err;
    }
    // -n given: a manifest naming another namespace is refused, as kubectl apply -n refuses it.
    const manifests = parseSources(sources, namespaceOf(flags, kube), { enforceNamespace: flags.namespace !== undefined });
    // As kubectl apply ("no objects passed to apply"): a plan of nothing is most likely a
    // wrong path, and "no changes" would pass a CI check.
    if (manifests.length === 0) throw new Error(noObjects(flags));
    // The same for a selector that leaves nothing: most likely a mistyped label.
    const { selector } = flags;
    if (selector !== undefined && !manifests.some((m) => selector(m.metadata.labels))) {
      throw new Error(`-l matches none of the ${manifests.length} object(s) in the manifests`);
    }
    if (kube === undefined) throw kubeError;
    const result = await plan(kubeReader(kube), manifests, { prune: flags.prune, selector: flags.selector });
    const ours = manifests.filter(isPlanned).length;
    if (flags.selector !== undefined && result.resources.length === 0 && ours > 0) {
      console.error(`${prog}: -l matches none of the ${ours} resource(s) of agentcompute.dev in the manifests`);
    }
    process.stdout.write(render(result, flags.output));
    return exitCodeOf(result);
  } catch (err) {
    const prefix = err instanceof ManifestError ? "bad manifest: " : "";
    console.error(`${prog}: ${prefix}${errorMessage(explainKubeError(err, kube))}`);
    return 1;
  } finally {
    await kube?.close();
  }
}

/** What to say when the manifests hold no object at all; a directory read without -R that has sub-directories is named. */
function noObjects(flags: PlanFlags): string {
  if (flags.kustomize !== undefined) return `no objects in -k ${flags.kustomize}`;
  const nested = flags.recursive ? undefined : flags.filenames.find((f) => f !== "-" && hasSubdirectory(f));
  return `no objects in -f ${flags.filenames.join(" -f ")}${nested !== undefined ? ` (${nested} has sub-directories: add -R to read them)` : ""}`;
}

function hasSubdirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory() && readdirSync(path, { withFileTypes: true }).some((e) => e.isDirectory());
  } catch {
    return false;
  }
}
