// Scenario 6: R SandboxRuns of one short step spread over S Sandboxes (issue 15's bench:
// 1,000 over 50). The Sandboxes are made Ready first; then every run is applied, each timed
// from its own create request to its Ready=True (a run is Ready once Succeeded). Reported:
// runs per second, p50/p99 apply-to-Complete, Kubernetes writes per run (aim: at most 3) and
// service calls per run.
import type { Cluster } from "../lib/cluster.js";
import { by, delta, sum } from "../../dev/prometheus.js";
import { API_VERSION } from "../../src/api/index.js";
import { sandbox, type Manifest } from "../lib/resources.js";
import { Stack } from "../lib/stack.js";
import { log, percentile, round, sleep } from "../lib/util.js";

export interface RunsParams {
  runs: number;
  sandboxes: number;
  rateLimit: number;
  latencyMs: number;
  syncPeriod: string;
  concurrency?: number;
}

export interface RunsResult {
  runs: number;
  sandboxes: number;
  /** Runs that reached Ready (Succeeded) before the deadline. */
  succeeded: number;
  /** From the first create request to the last run Succeeded. */
  seconds: number;
  runsPerSecond: number;
  applyToCompleteSeconds: { p50: number; p99: number; max: number };
  service: { calls: number; perRun: number; byOperation: Record<string, number> };
  kube: { writes: number; perRun: number; writesByResource: Record<string, number> };
  peakRssMB: number | null;
}

/** One run of one short shell step, on the i-th Sandbox of the pool (round robin). */
function run(namespace: string, i: number, sandboxes: number): Manifest {
  const sbx = sandbox(namespace, i % sandboxes).metadata.name;
  return {
    apiVersion: API_VERSION,
    kind: "SandboxRun",
    metadata: { name: `run-${String(i).padStart(5, "0")}`, namespace },
    spec: { sandboxRef: { name: sbx }, steps: [{ name: "hello", command: `echo run ${i}` }] },
  };
}

export async function runs(cluster: Cluster, p: RunsParams): Promise<RunsResult> {
  const stack = await Stack.create({
    cluster,
    name: "bench-runs",
    emulator: { latencyMs: p.latencyMs },
    rateLimit: p.rateLimit,
    syncPeriod: p.syncPeriod,
    concurrency: p.concurrency,
    plurals: ["sandboxes", "sandboxruns"],
  });
  try {
    await stack.create(Array.from({ length: p.sandboxes }, (_, i) => sandbox(stack.namespace, i)));
    await stack.tracker.start();
    await stack.startOperator();
    const poolDeadline = performance.now() + 300_000;
    while (stack.tracker.readyOf("sandboxes") < p.sandboxes && performance.now() < poolDeadline) await sleep(500);
    log(`runs: ${stack.tracker.readyOf("sandboxes")}/${p.sandboxes} Sandboxes Ready; applying ${p.runs} SandboxRuns`);

    const before = await stack.snapshot();
    const started = performance.now();
    const durations: number[] = [];
    const manifests = Array.from({ length: p.runs }, (_, i) => run(stack.namespace, i, p.sandboxes));
    // Each run timed from its own create request (as `kubectl apply` would send it).
    const done = manifests.map(async (m, i) => {
      await sleep(Math.floor(i / 64) * 5); // 64 at a time, as the other scenarios' creates
      const appliedAt = performance.now();
      await stack.create([m], 1);
      const readyAt = await Promise.race([stack.tracker.whenReady("sandboxruns", m.metadata.name), sleep(900_000).then(() => NaN)]);
      if (!Number.isNaN(readyAt)) durations.push((Math.max(readyAt, appliedAt) - appliedAt) / 1000);
    });
    await Promise.all(done);
    const seconds = (performance.now() - started) / 1000;
    // Let the last status writes and the output ConfigMaps land before counting writes.
    await stack.settle({ quietMs: 5_000, timeoutMs: 60_000 });
    const after = await stack.snapshot();
    const d = delta(before.metrics, after.metrics);
    const writesByResource = by(d, "rest_client_requests_total", "resource", { method: (m) => m !== "GET" });
    for (const k of Object.keys(writesByResource)) if (writesByResource[k] === 0) delete writesByResource[k];
    const writes = sum(d, "rest_client_requests_total", { method: (m) => m !== "GET" });
    const ops: Record<string, number> = {};
    for (const [k, v] of Object.entries(after.service.byOperation)) {
      const n = v - (before.service.byOperation[k] ?? 0);
      if (n > 0) ops[k] = n;
    }
    const calls = after.service.total - before.service.total - (ops.token ?? 0);
    const proc = stack.operator?.procStatus();
    const result: RunsResult = {
      runs: p.runs,
      sandboxes: p.sandboxes,
      succeeded: durations.length,
      seconds: round(seconds, 1),
      runsPerSecond: round(durations.length / seconds, 2),
      applyToCompleteSeconds: {
        p50: round(percentile(durations, 50), 2),
        p99: round(percentile(durations, 99), 2),
        max: round(Math.max(0, ...durations), 2),
      },
      service: { calls, perRun: round(calls / p.runs, 2), byOperation: ops },
      kube: { writes, perRun: round(writes / p.runs, 2), writesByResource },
      peakRssMB: proc ? round(proc.peakMB, 1) : null,
    };
    log(
      `runs: ${result.succeeded}/${p.runs} Succeeded in ${result.seconds} s (${result.runsPerSecond}/s); apply-to-Complete p50 ${result.applyToCompleteSeconds.p50} s, ` +
        `p99 ${result.applyToCompleteSeconds.p99} s; ${result.kube.perRun} Kubernetes writes and ${result.service.perRun} service calls per run`,
    );
    return result;
  } finally {
    await stack.teardown();
  }
}
