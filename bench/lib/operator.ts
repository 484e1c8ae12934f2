// The operator under test, as it runs in production: its own Node process (`agent-operator
// run`, built from src/ into .cache/bench/dist), restricted to the scenario's namespace. The
// benchmark reads its /metrics and its memory from /proc/<pid>/status.
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { createWriteStream, existsSync, mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import path from "node:path";
import { promisify } from "node:util";
import YAML from "yaml";
import { REPO_ROOT } from "../../dev/paths.js";
import { parseMetrics, type Sample } from "../../dev/prometheus.js";
import { log, sleep, waitUntil } from "./util.js";

const execFileAsync = promisify(execFile);
// BENCH_CACHE: another directory for the API server's data, the compiled operator and the logs,
// so that two benchmarks on one machine do not stop each other's API server.
export const CACHE = process.env.BENCH_CACHE ?? path.join(REPO_ROOT, ".cache", "bench");
const DIST = path.join(CACHE, "dist");

function newestMtime(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestMtime(p) : statSync(p).mtimeMs);
  }
  return newest;
}

/** Compiles src/ to .cache/bench/dist (not dist/, which belongs to the build) when src changed. */
export async function buildOperator(): Promise<string> {
  const cli = path.join(DIST, "cli.js");
  const stamp = path.join(DIST, ".stamp");
  const srcTime = newestMtime(path.join(REPO_ROOT, "src"));
  if (existsSync(stamp) && Number(readFileSync(stamp, "utf8")) === srcTime && existsSync(cli)) return cli;
  log(`compiling the operator (src/ -> ${path.relative(REPO_ROOT, DIST)})`);
  const tsc = path.join(REPO_ROOT, "node_modules", "typescript", "bin", "tsc");
  await execFileAsync(process.execPath, [tsc, "-p", path.join(REPO_ROOT, "tsconfig.build.json"), "--outDir", DIST, "--sourceMap", "false"], { cwd: REPO_ROOT });
  writeFileSync(stamp, String(srcTime));
  return cli;
}

/**
 * The literal environment of the operator's container in manifests/base/deployment.yaml
 * (NODE_OPTIONS: the heap cap; MALLOC_ARENA_MAX: glibc's arenas), so the benchmark measures
 * the operator as deployed. Variables taken from the downward API are left out.
 */
export function deployedEnv(): Record<string, string> {
  deployed ??= readDeployedEnv();
  return { ...deployed };
}

/** Read once per benchmark: the manifest does not change while it runs. */
let deployed: Record<string, string> | undefined;

function readDeployedEnv(): Record<string, string> {
  try {
    const docs = YAML.parseAllDocuments(readFileSync(path.join(REPO_ROOT, "manifests", "base", "deployment.yaml"), "utf8"));
    for (const doc of docs) {
      const d = doc.toJS() as { kind?: string; spec?: { template?: { spec?: { containers?: Array<{ env?: Array<{ name: string; value?: string }> }> } } } };
      if (d?.kind !== "Deployment") continue;
      const env: Record<string, string> = {};
      for (const c of d.spec?.template?.spec?.containers ?? []) {
        for (const e of c.env ?? []) if (e.value !== undefined) env[e.name] = e.value;
      }
      return env;
    }
  } catch {
    // no manifest: plain node
  }
  return {};
}

/** NODE_OPTIONS of the operator's container (see deployedEnv). */
export function deployedNodeOptions(): string {
  return deployedEnv().NODE_OPTIONS ?? "";
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr !== null ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

export interface OperatorOptions {
  kubeconfig: string;
  namespace: string;
  syncPeriod: string;
  concurrency?: number;
  /** Write a V8 CPU profile to this directory (node --cpu-prof). */
  cpuProfDir?: string;
  /** Allow heap snapshots on SIGUSR2 (node --heapsnapshot-signal), written to this directory. */
  heapSnapshotDir?: string;
  /** NODE_OPTIONS for the operator (default: the Deployment's, see deployedEnv). */
  nodeOptions?: string;
  logLevel?: string;
  /** Where the operator's log goes. */
  logFile: string;
  /** More `run` flags (e.g. the shards scenario's --sharding and its Lease). */
  extraArgs?: string[];
  /** More environment for the process (e.g. POD_NAME, a sharded replica's identity). */
  env?: Record<string, string>;
}

export interface MemorySample {
  /** ms since start */
  t: number;
  rssMB: number;
}

export class OperatorProcess {
  readonly startedAt: number;
  /** Wall clock (Date.now()) at spawn, to place the operator's log lines. */
  readonly startedAtWall: number;
  readonly memory: MemorySample[] = [];
  private sampler: NodeJS.Timeout | undefined;
  private exited: Promise<number | null>;

  private constructor(
    private readonly child: ChildProcess,
    readonly metricsPort: number,
  ) {
    this.startedAt = performance.now();
    this.startedAtWall = Date.now();
    this.exited = new Promise((resolve) => child.once("exit", (code) => resolve(code)));
    this.sampler = setInterval(() => {
      const s = this.procStatus();
      if (s) this.memory.push({ t: performance.now() - this.startedAt, rssMB: s.rssMB });
    }, 1000);
    this.sampler.unref();
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  static async start(o: OperatorOptions): Promise<OperatorProcess> {
    const cli = await buildOperator();
    const port = await freePort();
    const nodeArgs: string[] = [];
    if (o.cpuProfDir) {
      mkdirSync(o.cpuProfDir, { recursive: true });
      nodeArgs.push("--cpu-prof", `--cpu-prof-dir=${o.cpuProfDir}`);
    }
    if (o.heapSnapshotDir) {
      mkdirSync(o.heapSnapshotDir, { recursive: true });
      nodeArgs.push("--heapsnapshot-signal=SIGUSR2", `--diagnostic-dir=${o.heapSnapshotDir}`);
    }
    const args = [
      ...nodeArgs,
      cli,
      "run",
      "--kubeconfig",
      o.kubeconfig,
      "--namespace",
      o.namespace,
      "--sync-period",
      o.syncPeriod,
      "--metrics-bind-address",
      `127.0.0.1:${port}`,
      "--health-probe-bind-address",
      "0",
      "--log-level",
      o.logLevel ?? "info",
      "--graceful-shutdown-timeout",
      "5s",
    ];
    if (o.concurrency !== undefined) args.push("--concurrency", String(o.concurrency));
    args.push(...(o.extraArgs ?? []));
    mkdirSync(path.dirname(o.logFile), { recursive: true });
    const out = createWriteStream(o.logFile, { flags: "a" });
    const child = spawn(process.execPath, args, {
      cwd: REPO_ROOT,
      stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NODE_ENV: "production", ...deployedEnv(), ...(o.nodeOptions !== undefined && { NODE_OPTIONS: o.nodeOptions }), ...o.env },
    });
    child.stdout?.pipe(out);
    child.stderr?.pipe(out);
    const op = new OperatorProcess(child, port);
    await waitUntil(async () => (await op.scrape().catch(() => undefined)) !== undefined, { timeoutMs: 60_000, what: "the operator's /metrics" });
    log(`operator started (pid ${op.pid}, metrics 127.0.0.1:${port}, log ${path.relative(REPO_ROOT, o.logFile)})`);
    return op;
  }

  async scrape(): Promise<Sample[]> {
    const res = await fetch(`http://127.0.0.1:${this.metricsPort}/metrics`);
    if (!res.ok) throw new Error(`/metrics: HTTP ${res.status}`);
    return parseMetrics(await res.text());
  }

  /** VmRSS and VmHWM (peak RSS since start) of the operator process. */
  procStatus(): { rssMB: number; peakMB: number } | undefined {
    try {
      const text = readFileSync(`/proc/${this.pid}/status`, "utf8");
      const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? NaN);
      return { rssMB: kb("VmRSS") / 1024, peakMB: kb("VmHWM") / 1024 };
    } catch {
      return undefined;
    }
  }

  /** Writes a heap snapshot (needs heapSnapshotDir at start); resolves once the file is complete. */
  async heapSnapshot(dir: string): Promise<string | undefined> {
    const before = new Set(existsSync(dir) ? readdirSync(dir) : []);
    this.child.kill("SIGUSR2");
    let file: string | undefined;
    let lastSize = -1;
    for (let i = 0; i < 600; i++) {
      await sleep(500);
      file ??= readdirSync(dir).find((f) => f.endsWith(".heapsnapshot") && !before.has(f));
      if (file === undefined) continue;
      const size = statSync(path.join(dir, file)).size;
      if (size > 0 && size === lastSize) return path.join(dir, file);
      lastSize = size;
    }
    return undefined;
  }

  /** Seconds from spawn to the first log line with this message (the log is pino JSON). */
  logLineAt(logFile: string, msg: string): number | undefined {
    try {
      for (const line of readFileSync(logFile, "utf8").split("\n")) {
        if (!line.includes(msg)) continue;
        const rec = JSON.parse(line) as { msg?: string; time?: string | number };
        if (rec.msg !== msg || rec.time === undefined) continue;
        const t = typeof rec.time === "number" ? rec.time : Date.parse(rec.time);
        return (t - this.startedAtWall) / 1000;
      }
    } catch {
      // no log yet
    }
    return undefined;
  }

  /** Whether the process is still running. */
  alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** SIGKILL (a crash, for the failover scenarios); resolves once the process is gone. */
  async kill(): Promise<void> {
    if (this.sampler) clearInterval(this.sampler);
    this.sampler = undefined;
    if (!this.alive()) return;
    this.child.kill("SIGKILL");
    await this.exited;
  }

  /** SIGTERM, then SIGKILL after `graceMs`. Resolves with the exit code. */
  async stop(graceMs = 20_000): Promise<number | null> {
    if (this.sampler) clearInterval(this.sampler);
    this.sampler = undefined;
    if (this.child.exitCode !== null) return this.child.exitCode;
    this.child.kill("SIGTERM");
    const code = await Promise.race([this.exited, sleep(graceMs).then(() => "timeout" as const)]);
    if (code === "timeout") {
      log("operator did not exit after SIGTERM; killing it");
      this.child.kill("SIGKILL");
      return this.exited;
    }
    return code;
  }
}
