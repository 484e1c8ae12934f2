// Scenario 5: on an idle operator, apply one resource and time it to Ready; repeat. Reported:
// p50/p99 of the total, and of the operator's own overhead (the total minus the emulator's
// configured latency for each service call the apply needed).
import type { Cluster } from "../lib/cluster.js";
import { crPath } from "../lib/cluster.js";
import { agent } from "../lib/resources.js";
import { Stack } from "../lib/stack.js";
import { log, percentile, round, sleep, waitUntil } from "../lib/util.js";

export interface LatencyParams {
  samples: number;
  rateLimit: number;
  latencyMs: number;
  syncPeriod: string;
}

export interface LatencyResult {
  kind: string;
  samples: number;
  latencyMs: number;
  serviceCallsPerApply: number;
  totalMs: { p50: number; p99: number; max: number };
  overheadMs: { p50: number; p99: number; max: number };
}

export async function latency(cluster: Cluster, p: LatencyParams): Promise<LatencyResult> {
  const stack = await Stack.create({
    cluster,
    name: "bench-latency",
    emulator: { latencyMs: p.latencyMs },
    rateLimit: p.rateLimit,
    syncPeriod: p.syncPeriod,
    plurals: ["agents", "connections"],
  });
  try {
    await stack.tracker.start();
    await stack.startOperator();
    await waitUntil(() => stack.tracker.readyOf("connections") >= 1, { timeoutMs: 60_000, what: "the Connection to be Ready" });
    // Warm-up: the first apply loads the agents inventory (one list) and JIT-compiles the path.
    const kube = cluster.kube;
    const apply = async (i: number): Promise<{ ms: number; calls: number }> => {
      const calls0 = stack.emulator.stats().total - (stack.emulator.stats().byOperation.token ?? 0);
      const obj = agent(stack.namespace, i);
      const started = performance.now();
      await kube.create(crPath("agents", stack.namespace), obj);
      const readyAt = await stack.tracker.whenReady("agents", obj.metadata.name);
      const ms = readyAt - started;
      await sleep(250); // anything the apply still causes (nothing, for an Agent) is counted
      const s = stack.emulator.stats();
      return { ms, calls: s.total - (s.byOperation.token ?? 0) - calls0 };
    };
    for (let i = 0; i < 3; i++) await apply(100_000 + i);
    const totals: number[] = [];
    const overheads: number[] = [];
    let calls = 0;
    for (let i = 0; i < p.samples; i++) {
      const r = await apply(i);
      totals.push(r.ms);
      overheads.push(r.ms - r.calls * p.latencyMs);
      calls += r.calls;
      await sleep(50);
    }
    const stats = (v: number[]) => ({ p50: round(percentile(v, 50), 1), p99: round(percentile(v, 99), 1), max: round(Math.max(...v), 1) });
    const result: LatencyResult = {
      kind: "Agent",
      samples: p.samples,
      latencyMs: p.latencyMs,
      serviceCallsPerApply: round(calls / p.samples, 2),
      totalMs: stats(totals),
      overheadMs: stats(overheads),
    };
    log(`latency: apply -> Ready p50 ${result.totalMs.p50} ms, p99 ${result.totalMs.p99} ms; overhead p50 ${result.overheadMs.p50} ms, p99 ${result.overheadMs.p99} ms`);
    return result;
  } finally {
    await stack.teardown();
  }
}
