// The local kube-apiserver: a real kube-apiserver + etcd (+ optional garbage-collector and
// namespace controllers), built from the Kubernetes Go modules in tools/kube-apiserver, and
// run in the background from a state directory (pid file, log, kubeconfig, data).
//
// The one implementation: `npm run kube:up` / `kube:down` (scripts/kube.ts, a thin CLI), the
// e2e global setup, `npm start` (scripts/start.ts), the benchmark (bench/lib/cluster.ts) and
// the fault suites that need a private instance all call these functions.
import { spawn } from "node:child_process";
import { existsSync, openSync, closeSync, readFileSync, readdirSync } from "node:fs";
import { mkdir, rm, writeFile, mkdtemp } from "node:fs/promises";
import https from "node:https";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import YAML from "yaml";
import { buildGoProgram, formatDuration } from "./go-build.js";
import { REPO_ROOT } from "./paths.js";
import { isAlive, readText, tail, withLock } from "./process.js";

export { formatDuration };

export interface KubePathOptions {
  /** Repository root; default: the one this file belongs to. */
  root?: string;
  /**
   * Directory holding one instance's pid file, log, kubeconfig and data dir.
   * Default <root>/.cache/kube. Use another directory to run a second, independent
   * instance (e.g. one with a short --min-request-timeout for fault tests).
   */
  stateDir?: string;
}

export interface KubePaths {
  root: string;
  /** Go sources of the control-plane program. */
  toolDir: string;
  /** GOMODCACHE and GOCACHE live under here. */
  goDir: string;
  binDir: string;
  binary: string;
  buildStamp: string;
  buildLog: string;
  stateDir: string;
  pidFile: string;
  log: string;
  kubeconfig: string;
  dataDir: string;
  /** Options the running instance was started with (JSON). */
  instanceFile: string;
}

export function kubePaths(opts: KubePathOptions = {}): KubePaths {
  const root = path.resolve(opts.root ?? REPO_ROOT);
  const kubeCache = path.join(root, ".cache", "kube");
  const stateDir = path.resolve(opts.stateDir ?? kubeCache);
  const binDir = path.join(kubeCache, "bin");
  return {
    root,
    toolDir: path.join(root, "tools", "kube-apiserver"),
    goDir: path.join(root, ".cache", "go"),
    binDir,
    binary: path.join(binDir, "kube-apiserver"),
    buildStamp: path.join(binDir, "kube-apiserver.stamp"),
    buildLog: path.join(kubeCache, "build.log"),
    stateDir,
    pidFile: path.join(stateDir, "apiserver.pid"),
    log: path.join(stateDir, "apiserver.log"),
    kubeconfig: path.join(stateDir, "kubeconfig"),
    dataDir: path.join(stateDir, "data"),
    instanceFile: path.join(stateDir, "instance.json"),
  };
}

export interface KubeBuildOptions extends KubePathOptions {
  /** Progress lines for a person; default console.log. */
  log?: (line: string) => void;
  /** Rebuild even if the stamp matches. */
  force?: boolean;
}

export interface KubeUpOptions extends KubeBuildOptions {
  /** Secure port on 127.0.0.1; default: the one recorded in the data dir, else a free one. */
  port?: number;
  /** kube-apiserver --min-request-timeout in seconds (watch length is between this and 2x). */
  minRequestTimeout?: number;
  /** kube-apiserver --etcd-compaction-interval, a Go duration such as "30s" or "5m". */
  etcdCompactionInterval?: string;
  /** Run the garbage-collector and namespace controllers in-process (default true). */
  controllers?: boolean;
  /** Extra kube-apiserver flags, e.g. ["--audit-log-path=/tmp/audit.log"]. */
  apiserverArgs?: string[];
  /** Remove any data left by an earlier `down --keep-data` before starting. */
  fresh?: boolean;
  /** How long to wait for /readyz after starting (default 180 s). */
  readyTimeoutMs?: number;
}

export interface KubeUpResult {
  /** Absolute path of the admin kubeconfig. */
  kubeconfig: string;
  /** https://127.0.0.1:PORT */
  server: string;
  pid: number;
  /** false when an instance was already running and healthy (nothing was started). */
  started: boolean;
  paths: KubePaths;
}

export interface KubeDownOptions extends KubePathOptions {
  log?: (line: string) => void;
  /** Keep the data dir (etcd data, certificates, port) so the next `up` restarts on it. */
  keepData?: boolean;
  /** Grace period after SIGTERM before SIGKILL (default 30 s). */
  timeoutMs?: number;
}

export interface KubeStatus {
  running: boolean;
  healthy: boolean;
  pid?: number;
  server?: string;
  kubeconfig?: string;
  paths: KubePaths;
}

const defaultLog = (line: string): void => console.log(line);

// ---------------------------------------------------------------------------------------
// build

/** The Kubernetes release pinned in tools/kube-apiserver/go.mod, e.g. "v1.32.2". */
export function kubernetesVersion(opts: KubePathOptions = {}): string {
  const gomod = readText(path.join(kubePaths(opts).toolDir, "go.mod")) ?? "";
  const m = /^\s*k8s\.io\/kubernetes\s+(v\d+\.\d+\.\d+\S*)/m.exec(gomod);
  if (m?.[1] === undefined) throw new Error("k8s.io/kubernetes is not required in tools/kube-apiserver/go.mod");
  return m[1];
}

/**
 * go build arguments. Building from modules leaves the version variables that the
 * Kubernetes release scripts normally stamp empty ("v0.0.0-master"), which kubectl cannot
 * parse: set them from go.mod.
 */
function buildArgs(version: string, output: string, parallel: number): string[] {
  const [major = "", minor = ""] = version.replace(/^v/, "").split(".");
  const x: string[] = [];
  for (const pkg of ["k8s.io/component-base/version", "k8s.io/client-go/pkg/version"]) {
    x.push(`-X ${pkg}.gitVersion=${version}`, `-X ${pkg}.gitMajor=${major}`, `-X ${pkg}.gitMinor=${minor}`);
    x.push(`-X ${pkg}.gitTreeState=clean`);
  }
  return ["build", "-v", "-p", String(parallel), "-trimpath", `-ldflags=-s -w ${x.join(" ")}`, "-o", output, "."];
}

/** Builds the control-plane binary if its sources changed; returns its path. */
export async function buildKubeApiserver(opts: KubeBuildOptions = {}): Promise<string> {
  const p = kubePaths(opts);
  const version = kubernetesVersion({ root: p.root });
  return buildGoProgram(
    {
      name: "kube-apiserver",
      root: p.root,
      toolDir: p.toolDir,
      goDir: p.goDir,
      binary: p.binary,
      buildStamp: p.buildStamp,
      buildLog: p.buildLog,
      buildArgs: (output, parallel) => buildArgs(version, output, parallel),
      sources: () => readdirSync(p.toolDir).filter((f) => f === "go.mod" || f === "go.sum" || f.endsWith(".go")),
      cold: () => !existsSync(path.join(p.goDir, "build")),
      expect: { cold: "first time takes 10-20 minutes", cached: "usually under a minute when cached" },
    },
    { force: opts.force, log: opts.log ?? defaultLog },
  );
}

// ---------------------------------------------------------------------------------------
// up / down / status

/** Starts the control plane in the background (or finds it running) and waits for /readyz. */
export async function kubeUp(opts: KubeUpOptions = {}): Promise<KubeUpResult> {
  const p = kubePaths(opts);
  const log = opts.log ?? defaultLog;
  await mkdir(p.stateDir, { recursive: true });
  return withLock(path.join(p.stateDir, "up.lock"), async () => {
    const current = await kubeStatus(opts);
    if (current.running && current.pid !== undefined) {
      if (current.healthy && current.server !== undefined) {
        log(`kube-apiserver already running and healthy (pid ${current.pid}, ${current.server})`);
        return { kubeconfig: p.kubeconfig, server: current.server, pid: current.pid, started: false, paths: p };
      }
      throw new Error(
        `kube-apiserver (pid ${current.pid}) is running but not healthy; see ${p.log}, or run 'npm run kube:down' and try again`,
      );
    }

    const binary = await buildKubeApiserver(opts);
    if (opts.fresh) {
      await rm(p.dataDir, { recursive: true, force: true });
    }
    const restart = existsSync(path.join(p.dataDir, "etcd"));
    await rm(p.kubeconfig, { force: true });
    await rm(p.pidFile, { force: true });

    const args = [`--data-dir=${p.dataDir}`, `--kubeconfig-out=${p.kubeconfig}`];
    if (opts.port !== undefined) args.push(`--port=${opts.port}`);
    if (opts.minRequestTimeout !== undefined) args.push(`--min-request-timeout=${opts.minRequestTimeout}`);
    if (opts.etcdCompactionInterval !== undefined) args.push(`--etcd-compaction-interval=${opts.etcdCompactionInterval}`);
    if (opts.controllers === false) args.push("--controllers=false");
    for (const a of opts.apiserverArgs ?? []) args.push(`--apiserver-arg=${a}`);

    log(`starting kube-apiserver${restart ? " on existing data" : ""} (log: ${path.relative(process.cwd(), p.log) || p.log})`);
    const started = Date.now();
    // A restart on kept data appends, so the log shows both runs; a fresh start truncates.
    const logFd = openSync(p.log, restart ? "a" : "w");
    let pid: number;
    try {
      const child = spawn(binary, args, { detached: true, stdio: ["ignore", logFd, logFd], cwd: p.stateDir });
      const spawned = await new Promise<number>((resolve, reject) => {
        child.once("error", reject);
        child.once("spawn", () => resolve(child.pid ?? -1));
      });
      child.unref();
      pid = spawned;
    } finally {
      closeSync(logFd);
    }
    await writeFile(p.pidFile, `${pid}\n`);
    await writeFile(p.instanceFile, `${JSON.stringify({ pid, args, startedAt: new Date().toISOString() }, null, 2)}\n`);

    const deadline = started + (opts.readyTimeoutMs ?? 180_000);
    for (;;) {
      if (!isAlive(pid)) {
        await rm(p.pidFile, { force: true });
        throw new Error(`kube-apiserver exited during startup; last lines of ${p.log}:\n${tail(p.log, 30)}`);
      }
      if (existsSync(p.kubeconfig)) {
        const server = await readyz(p.kubeconfig);
        if (server !== undefined) {
          log(`kube-apiserver ready at ${server} in ${formatDuration(Date.now() - started)} (kubeconfig: ${p.kubeconfig})`);
          return { kubeconfig: p.kubeconfig, server, pid, started: true, paths: p };
        }
      }
      if (Date.now() > deadline) {
        await stopPid(pid, 10_000, log);
        await rm(p.pidFile, { force: true });
        throw new Error(`kube-apiserver not ready after ${formatDuration(Date.now() - started)}; last lines of ${p.log}:\n${tail(p.log, 30)}`);
      }
      await sleep(250);
    }
  });
}

/** Stops the control plane (SIGTERM, then SIGKILL) and removes its data unless keepData. Idempotent. */
export async function kubeDown(opts: KubeDownOptions = {}): Promise<{ stopped: boolean }> {
  const p = kubePaths(opts);
  const log = opts.log ?? defaultLog;
  const pid = readPid(p);
  let stopped = false;
  if (pid !== undefined && isAlive(pid) && isOurProcess(pid, p)) {
    log(`stopping kube-apiserver (pid ${pid})`);
    await stopPid(pid, opts.timeoutMs ?? 30_000, log);
    stopped = true;
  } else {
    log("kube-apiserver is not running");
  }
  await rm(p.pidFile, { force: true });
  await rm(p.kubeconfig, { force: true });
  await rm(p.instanceFile, { force: true });
  if (opts.keepData) {
    if (existsSync(p.dataDir)) log(`kept data in ${p.dataDir}`);
  } else {
    await rm(p.dataDir, { recursive: true, force: true });
  }
  return { stopped };
}

export async function kubeStatus(opts: KubePathOptions = {}): Promise<KubeStatus> {
  const p = kubePaths(opts);
  const pid = readPid(p);
  if (pid === undefined || !isAlive(pid) || !isOurProcess(pid, p)) {
    return { running: false, healthy: false, paths: p };
  }
  const server = existsSync(p.kubeconfig) ? await readyz(p.kubeconfig) : undefined;
  return {
    running: true,
    healthy: server !== undefined,
    pid,
    ...(server !== undefined ? { server } : {}),
    ...(existsSync(p.kubeconfig) ? { kubeconfig: p.kubeconfig } : {}),
    paths: p,
  };
}

// ---------------------------------------------------------------------------------------
// helpers

export interface AdminCredentials {
  server: string;
  ca: Buffer;
  cert: Buffer;
  key: Buffer;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function firstNamed(list: unknown, field: string): Record<string, unknown> | undefined {
  if (!Array.isArray(list)) return undefined;
  const first: unknown = list[0];
  if (!isRecord(first)) return undefined;
  const inner = first[field];
  return isRecord(inner) ? inner : undefined;
}

/** Reads the server address and client certificate from a kubeconfig this tool wrote. */
export function readAdminCredentials(kubeconfig: string): AdminCredentials | undefined {
  let doc: unknown;
  try {
    doc = YAML.parse(readFileSync(kubeconfig, "utf8"));
  } catch {
    return undefined;
  }
  if (!isRecord(doc)) return undefined;
  const cluster = firstNamed(doc["clusters"], "cluster");
  const user = firstNamed(doc["users"], "user");
  const server = cluster?.["server"];
  const ca = cluster?.["certificate-authority-data"];
  const cert = user?.["client-certificate-data"];
  const key = user?.["client-key-data"];
  if (typeof server !== "string" || typeof ca !== "string" || typeof cert !== "string" || typeof key !== "string") {
    return undefined;
  }
  return {
    server,
    ca: Buffer.from(ca, "base64"),
    cert: Buffer.from(cert, "base64"),
    key: Buffer.from(key, "base64"),
  };
}

/** Returns the server URL if GET /readyz answers 200 with the kubeconfig's credentials. */
async function readyz(kubeconfig: string): Promise<string | undefined> {
  const creds = readAdminCredentials(kubeconfig);
  if (creds === undefined) return undefined;
  const url = new URL("/readyz", creds.server);
  const status = await new Promise<number>((resolve) => {
    const req = https.get(url, { ca: creds.ca, cert: creds.cert, key: creds.key, timeout: 5_000 }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", () => resolve(0));
  });
  return status === 200 ? creds.server : undefined;
}

function readPid(p: KubePaths): number | undefined {
  const text = readText(p.pidFile);
  const pid = text === undefined ? NaN : Number.parseInt(text.trim(), 10);
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

/** Guards against a recycled pid: the process must be our binary (checked where /proc exists). */
function isOurProcess(pid: number, p: KubePaths): boolean {
  const cmdline = readText(`/proc/${pid}/cmdline`);
  if (cmdline === undefined) return true;
  return cmdline.split("\0").some((a) => a === `--data-dir=${p.dataDir}`);
}

async function stopPid(pid: number, timeoutMs: number, log: (line: string) => void): Promise<void> {
  try {
    process.kill(pid, "SIGTERM");
  } catch {
    return;
  }
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!isAlive(pid)) return;
    await sleep(100);
  }
  log(`kube-apiserver (pid ${pid}) did not stop within ${formatDuration(timeoutMs)}; sending SIGKILL`);
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    return;
  }
  for (let i = 0; i < 50 && isAlive(pid); i++) await sleep(100);
}

/** A throwaway state dir under the repo's .cache, for tests that need a private instance. */
export async function makeTempStateDir(prefix = "kube-"): Promise<string> {
  const base = path.join(REPO_ROOT, ".cache", "tmp");
  await mkdir(base, { recursive: true });
  return mkdtemp(path.join(base, prefix));
}
