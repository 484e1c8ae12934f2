// Helm, for testing the chart in charts/agent-operator: built from the Go modules pinned in
// tools/helm (helm.sh/helm/v3, a `tool` of that module) the way dev/kube-apiserver.ts builds
// the API server, into .cache/helm/bin/helm, and rebuilt only when tools/helm/go.mod or
// go.sum, the Go toolchain or the build flags change. Only Go is needed: the modules come from
// the Go module proxy into the same GOMODCACHE/GOCACHE (.cache/go) as the API server's.
//
// `helm()` runs it with its own config, cache and data folders under .cache/helm/home, so it
// never reads or writes the user's ~/.config/helm (repositories, plugins, registry logins).
import { spawn, execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { closeSync, existsSync, openSync, readFileSync } from "node:fs";
import { mkdir, rename, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { formatDuration } from "./kube-apiserver.js";
import { REPO_ROOT } from "./paths.js";
import { countPackages, okOrThrow, readText, runTool, tail, withLock, type ToolResult } from "./process.js";

const execFileAsync = promisify(execFile);

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

/** The same Go environment as dev/kube-apiserver.ts: shared caches, committed go.sum, no cgo. */
function goEnv(p: HelmPaths): NodeJS.ProcessEnv {
  return {
    ...process.env,
    GOMODCACHE: path.join(p.goDir, "mod"),
    GOCACHE: path.join(p.goDir, "build"),
    GOTOOLCHAIN: "local",
    // go.sum is committed: the build must not rewrite tools/helm/go.{mod,sum}.
    GOFLAGS: "-mod=readonly -buildvcs=false",
    CGO_ENABLED: "0",
  };
}

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

async function goVersion(p: HelmPaths): Promise<string> {
  try {
    const { stdout } = await execFileAsync("go", ["version"], { env: goEnv(p) });
    return stdout.trim();
  } catch (err) {
    throw new Error(
      `the Go toolchain is needed to build helm for the chart tests, and 'go version' failed: ${err instanceof Error ? err.message : String(err)}`,
      { cause: err },
    );
  }
}

/** Hash of everything that determines the binary: go.mod/go.sum, toolchain and flags. */
async function sourceHash(p: HelmPaths): Promise<string> {
  const h = createHash("sha256");
  h.update(await goVersion(p));
  h.update(buildArgs(p, "OUT", 0).join("\0"));
  for (const f of ["go.mod", "go.sum"]) {
    h.update(`\0${f}\0`);
    h.update(readFileSync(path.join(p.toolDir, f)));
  }
  return h.digest("hex");
}

/** Builds helm if go.mod, go.sum, the toolchain or the flags changed; returns its path. */
export async function buildHelm(opts: HelmBuildOptions = {}): Promise<string> {
  const p = helmPaths(opts);
  const log = opts.log ?? defaultLog;
  const hash = await sourceHash(p);
  const upToDate = () => existsSync(p.binary) && readText(p.buildStamp)?.trim() === hash;
  if (!opts.force && upToDate()) return p.binary;
  await mkdir(p.binDir, { recursive: true });
  return withLock(path.join(p.binDir, "build.lock"), async () => {
    // Another process may have built it while we waited for the lock.
    if (!opts.force && upToDate()) return p.binary;
    const cold = !existsSync(path.join(p.goDir, "mod", "helm.sh"));
    log(
      `building helm ${helmVersion(opts)} from tools/helm (${cold ? "first time takes a few minutes" : "usually seconds when cached"}; log: ${path.relative(process.cwd(), p.buildLog) || p.buildLog})`,
    );
    const started = Date.now();
    const tmpOut = `${p.binary}.tmp-${process.pid}`;
    const logFd = openSync(p.buildLog, "w");
    let exit: number | null;
    try {
      const child = spawn("go", buildArgs(p, tmpOut, Math.max(1, os.availableParallelism())), {
        cwd: p.toolDir,
        env: goEnv(p),
        stdio: ["ignore", logFd, logFd],
      });
      const ticker = setInterval(() => {
        log(`  still building helm: ${formatDuration(Date.now() - started)} elapsed, ${countPackages(p.buildLog)} packages compiled`);
      }, 60_000);
      try {
        exit = await new Promise<number | null>((resolve, reject) => {
          child.once("error", reject);
          child.once("exit", (code) => resolve(code));
        });
      } finally {
        clearInterval(ticker);
      }
    } finally {
      closeSync(logFd);
    }
    if (exit !== 0) {
      await rm(tmpOut, { force: true });
      throw new Error(`go build of helm failed (exit ${exit}); last lines of ${p.buildLog}:\n${tail(p.buildLog, 30)}`);
    }
    await rename(tmpOut, p.binary);
    await writeFile(p.buildStamp, `${hash}\n`);
    log(`built ${path.relative(p.root, p.binary)} in ${formatDuration(Date.now() - started)}`);
    return p.binary;
  });
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
