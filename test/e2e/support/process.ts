// The operator as a CHILD PROCESS (`agent-operator run`, exactly as a Deployment runs it), for
// the suites that kill it (SIGKILL), run two replicas, or run it with another identity. The
// service emulator stays in the test process, so its state survives the operator's deaths.
//
//   const op = await startOperatorProcess({ kubeconfig, namespaces: [ns] });
//   await op.metric("controller_runtime_reconcile_total");   // scraped from its /metrics
//   await op.kill();                                        // SIGKILL, waits for the exit
//
// Every line the process writes (stdout and stderr) is kept in `logs`, across restarts if the
// same array is passed again, so tests can scan them (for secrets, for errors).
import { spawn, type ChildProcess } from "node:child_process";
import { appendFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { REPO_ROOT } from "../../../dev/paths.js";
import { sumMetric } from "../../../dev/prometheus.js";
import { waitFor } from "../../../dev/wait.js";

const CLI = fileURLToPath(new URL("../../../src/cli.ts", import.meta.url));

export interface OperatorProcessOptions {
  /** kubeconfig the operator uses (admin, or a ServiceAccount's). */
  kubeconfig: string;
  /** --namespace flags (the operator only watches these). */
  namespaces: string[];
  /** --leader-elect with this Lease (namespace, name). */
  leaderElection?: { namespace: string; id: string };
  /** --sharding (with leaderElection: its Lease names the ring); the replica's identity is env.POD_NAME. */
  sharding?: boolean;
  /** --sync-period, e.g. "10m" (default) or "20s". */
  syncPeriod?: string;
  concurrency?: number;
  /** --log-level (default debug: the scans for secrets then see everything that could leak). */
  logLevel?: string;
  /** --graceful-shutdown-timeout (default "5s"). */
  gracefulShutdownTimeout?: string;
  /** Lines are appended here (shared across restarts when the same array is passed). */
  logs?: string[];
  /** Extra environment for the child. */
  env?: NodeJS.ProcessEnv;
  /** How long to wait for "operator started" (default 60 s: tsx compiles on a busy machine). */
  startTimeoutMs?: number;
}

export interface ExitStatus {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface OperatorProcess {
  readonly pid: number;
  readonly logs: string[];
  /** http://127.0.0.1:PORT/metrics */
  readonly metricsURL: string;
  /** http://127.0.0.1:PORT (healthz/readyz) */
  readonly healthURL: string;
  /** Resolves when the process has exited. */
  readonly exited: Promise<ExitStatus>;
  alive(): boolean;
  /** The Prometheus text of its /metrics. */
  scrape(): Promise<string>;
  /** Sum of a metric's samples whose labels include `labels` (0 when absent). */
  metric(name: string, labels?: Record<string, string>): Promise<number>;
  /** Sends `signal` (default SIGKILL) and waits for the exit. */
  kill(signal?: NodeJS.Signals): Promise<ExitStatus>;
  /** SIGTERM (graceful: releases the Lease), SIGKILL after `timeoutMs`. */
  stop(timeoutMs?: number): Promise<ExitStatus>;
}

/** Children still running, killed if the test process exits without stopping them. */
const running = new Set<ChildProcess>();
process.once("exit", () => {
  for (const c of running) c.kill("SIGKILL");
});

/** The argv of `agent-operator run` for these options (node --import tsx src/cli.ts run ...). */
export function operatorArgs(opts: OperatorProcessOptions): string[] {
  const args = [
    "--import",
    "tsx",
    CLI,
    "run",
    "--kubeconfig",
    opts.kubeconfig,
    "--metrics-bind-address",
    "127.0.0.1:0",
    "--health-probe-bind-address",
    "127.0.0.1:0",
    "--log-level",
    opts.logLevel ?? "debug",
    "--graceful-shutdown-timeout",
    opts.gracefulShutdownTimeout ?? "5s",
    "--sync-period",
    opts.syncPeriod ?? "10m",
    "--concurrency",
    String(opts.concurrency ?? 8),
  ];
  for (const ns of opts.namespaces) args.push("--namespace", ns);
  if (opts.leaderElection) {
    args.push("--leader-elect", "--leader-election-namespace", opts.leaderElection.namespace, "--leader-election-id", opts.leaderElection.id);
  }
  if (opts.sharding) args.push("--sharding");
  return args;
}

/** Starts `agent-operator run` and resolves once it logged "operator started" (with its addresses). */
export async function startOperatorProcess(opts: OperatorProcessOptions): Promise<OperatorProcess> {
  const logs = opts.logs ?? [];
  // process.execPath: the Node 24 of the `node` devDependency that runs vitest.
  const child = spawn(process.execPath, operatorArgs(opts), {
    cwd: REPO_ROOT,
    env: { ...process.env, ...opts.env, KUBECONFIG: opts.kubeconfig },
    stdio: ["ignore", "pipe", "pipe"],
  });
  running.add(child);
  let status: ExitStatus | undefined;
  const exited = new Promise<ExitStatus>((resolve) => {
    child.once("exit", (code, signal) => {
      running.delete(child);
      status = { code, signal };
      resolve(status);
    });
  });
  let metrics: string | undefined;
  let health: string | undefined;
  const onLine = (line: string): void => {
    if (line === "") return;
    logs.push(line);
    if (process.env.E2E_LOG_FILE) appendFileSync(process.env.E2E_LOG_FILE, `[pid ${child.pid}] ${line}\n`);
    if (metrics === undefined && line.includes('"operator started"')) {
      try {
        const rec = JSON.parse(line) as { metrics?: string; health?: string };
        metrics = rec.metrics;
        health = rec.health;
      } catch {
        // not JSON: ignore
      }
    }
  };
  createInterface({ input: child.stdout! }).on("line", onLine);
  createInterface({ input: child.stderr! }).on("line", onLine);

  try {
    await waitFor(
      () => {
        if (status !== undefined) throw new Error(`operator exited during start (${JSON.stringify(status)}): ${logs.slice(-5).join("\n")}`);
        return metrics !== undefined;
      },
      { timeoutMs: opts.startTimeoutMs ?? 60_000, intervalMs: 100, description: "the operator process to start" },
    );
  } catch (err) {
    child.kill("SIGKILL");
    throw new Error(`${err instanceof Error ? err.message : String(err)}\n${logs.slice(-10).join("\n")}`, { cause: err });
  }
  const metricsURL = `http://${metrics}/metrics`;
  const healthURL = `http://${health}`;

  const kill = async (signal: NodeJS.Signals = "SIGKILL"): Promise<ExitStatus> => {
    if (status === undefined) child.kill(signal);
    return exited;
  };
  const scrape = async (): Promise<string> => {
    const res = await fetch(metricsURL, { signal: AbortSignal.timeout(10_000) });
    if (!res.ok) throw new Error(`GET ${metricsURL}: HTTP ${res.status}`);
    return res.text();
  };
  return {
    pid: child.pid ?? -1,
    logs,
    metricsURL,
    healthURL,
    exited,
    alive: () => status === undefined,
    scrape,
    async metric(name, labels = {}) {
      return sumMetric(await scrape(), name, labels);
    },
    kill,
    async stop(timeoutMs = 20_000) {
      if (status !== undefined) return status;
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
      try {
        return await exited;
      } finally {
        clearTimeout(timer);
      }
    },
  };
}
