// Helm, for testing the chart in charts/agent-operator: built from the Go modules pinned in
// tools/helm (helm.sh/helm/v3, a `tool` of that module) the way dev/kube-apiserver.ts builds
// the API server, into .cache/helm/bin/helm, and rebuilt only when tools/helm/go.mod or
// go.sum, the Go toolchain or the build flags change. Only Go is needed: the modules come from
// the Go module proxy into the same GOMODCACHE/GOCACHE (.cache/go) as the API server's.
//
// `helm()` runs it with its own config, cache and data folders under .cache/helm/home, so it
// never reads or writes the user's ~/.config/helm (repositories, plugins, registry logins).
import { existsSync } from "node:fs";
import path from "node:path";
import { buildGoProgram } from "./go-build.js";
import { REPO_ROOT } from "./paths.js";
import { okOrThrow, readText, runTool, type ToolResult } from "./process.js";

/** The chart the repository ships. */
export const CHART_DIR = path.join(REPO_ROOT, "charts", "agent-operator");

export interface HelmPaths {
  root: string;
  /** The Go module whose `tool` is helm. */
  toolDir: string;
  /** GOMODCACHE and GOCACHE live under here (shared with the kube-apiserver build). */
  goDir: string;
  binDir: string;
  binary: string;
  buildStamp: string;
  buildLog: string;
  /** HELM_CONFIG_HOME, HELM_CACHE_HOME and HELM_DATA_HOME live under here. */
  home: string;
}

export function helmPaths(opts: { root?: string } = {}): HelmPaths {
  const root = path.resolve(opts.root ?? REPO_ROOT);
  const cache = path.join(root, ".cache", "helm");
  const binDir = path.join(cache, "bin");
  return {
    root,
    toolDir: path.join(root, "tools", "helm"),
    goDir: path.join(root, ".cache", "go"),
    binDir,
    binary: path.join(binDir, "helm"),
    buildStamp: path.join(binDir, "helm.stamp"),
    buildLog: path.join(cache, "build.log"),
    home: path.join(cache, "home"),
  };
}

export interface HelmBuildOptions {
  root?: string;
  log?: (line: string) => void;
  /** Build even if the stamp says the binary is up to date. */
  force?: boolean;
}

const defaultLog = (line: string): void => console.log(line);

/** A module's version as required in tools/helm/go.mod, e.g. "v3.22.0". */
function requiredVersion(gomod: string, module: string): string {
  const escaped = module.replaceAll(".", "\\.").replaceAll("/", "\\/");
  const m = new RegExp(`^\\s*(?:require\\s+)?${escaped}\\s+(v\\d+\\.\\d+\\.\\d+\\S*)`, "m").exec(gomod);
  if (m?.[1] === undefined) throw new Error(`${module} is not required in tools/helm/go.mod`);
  return m[1];
}

/** The Helm release pinned in tools/helm/go.mod, e.g. "v3.22.0". */
export function helmVersion(opts: { root?: string } = {}): string {
  return requiredVersion(readText(path.join(helmPaths(opts).toolDir, "go.mod")) ?? "", "helm.sh/helm/v3");
}

/**
 * go build arguments, with the -X flags of Helm's own Makefile: its version (else `helm
 * version` says "v3.22" with no patch), and the Kubernetes version that `helm template` and
 * `helm lint` assume without a cluster (.Capabilities.KubeVersion), which the Makefile derives
 * from client-go: v0.37.x gives 1.37.
 */
function buildArgs(p: HelmPaths, output: string, parallel: number): string[] {
  const gomod = readText(path.join(p.toolDir, "go.mod")) ?? "";
  const version = requiredVersion(gomod, "helm.sh/helm/v3");
  const [clientMajor = "0", clientMinor = ""] = requiredVersion(gomod, "k8s.io/client-go").replace(/^v/, "").split(".");
  const kubeMajor = String(Number(clientMajor) + 1);
  const x = [
    `-X helm.sh/helm/v3/internal/version.version=${version}`,
    `-X helm.sh/helm/v3/internal/version.gitTreeState=clean`,
  ];
  for (const pkg of ["helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"]) {
    x.push(`-X ${pkg}.k8sVersionMajor=${kubeMajor}`, `-X ${pkg}.k8sVersionMinor=${clientMinor}`);
  }
  return ["build", "-v", "-p", String(parallel), "-trimpath", `-ldflags=-s -w ${x.join(" ")}`, "-o", output, "helm.sh/helm/v3/cmd/helm"];
}

/** Builds helm if go.mod, go.sum, the toolchain or the flags changed; returns its path. */
export async function buildHelm(opts: HelmBuildOptions = {}): Promise<string> {
  const p = helmPaths(opts);
  return buildGoProgram(
    {
      name: "helm",
      root: p.root,
      toolDir: p.toolDir,
      goDir: p.goDir,
      binary: p.binary,
      buildStamp: p.buildStamp,
      buildLog: p.buildLog,
      buildArgs: (output, parallel) => buildArgs(p, output, parallel),
      sources: () => ["go.mod", "go.sum"],
      cold: () => !existsSync(path.join(p.goDir, "mod", "helm.sh")),
      expect: { cold: "first time takes a few minutes", cached: "usually seconds when cached" },
    },
    { force: opts.force, log: opts.log ?? defaultLog },
  );
}

export interface HelmOptions {
  /** Sets `$KUBECONFIG` (a path or a ':'-separated list); undefined or "": helm's default. */
  kubeconfig?: string;
  /** Written to helm's stdin (e.g. values for `-f -`). */
  input?: string;
  /** Kill helm after this long (default 120 s); the result then has exitCode -1. */
  timeoutMs?: number;
  root?: string;
}

export type HelmResult = ToolResult;

/** Runs helm (building it first if needed). Never throws for a non-zero exit: check exitCode. */
export async function helm(args: readonly string[], opts: HelmOptions = {}): Promise<HelmResult> {
  const p = helmPaths(opts);
  const bin = await buildHelm({ ...(opts.root !== undefined ? { root: opts.root } : {}) });
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HELM_CONFIG_HOME: path.join(p.home, "config"),
    HELM_CACHE_HOME: path.join(p.home, "cache"),
    HELM_DATA_HOME: path.join(p.home, "data"),
  };
  if (opts.kubeconfig !== undefined && opts.kubeconfig !== "") env.KUBECONFIG = opts.kubeconfig;
  return runTool(bin, args, { env, cwd: p.root, input: opts.input, timeoutMs: opts.timeoutMs ?? 120_000 });
}

/** Like helm() but throws (with stderr) unless the exit code is 0; returns stdout. */
export async function helmOk(args: readonly string[], opts: HelmOptions = {}): Promise<string> {
  return okOrThrow("helm", args, await helm(args, opts));
}
