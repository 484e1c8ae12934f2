// Scenario 3: S Sandboxes with a short TTL kept alive for M minutes while the service answers
// with jittered latency and a share of errors (half 500, half dropped connections). Target:
// zero expirations, about one renewal per VM per renewal window (ttl - renewBefore), and at
// most 0.1 Kubernetes writes per renewal (status reports them every --sandbox-status-interval).
import type { Cluster } from "../lib/cluster.js";
import { availableParallelism } from "node:os";
import { by, delta, sum } from "../../dev/prometheus.js";
import { cpuWindow, type CpuShare } from "../lib/cpu.js";
import { sandbox } from "../lib/resources.js";
import { Stack } from "../lib/stack.js";
import { renewalMargins, renewedVm, summarize } from "../lib/margins.js";
import { log, round, sleep } from "../lib/util.js";

export interface RenewalParams {
  sandboxes: number;
  ttlSeconds: number;
  minutes: number;
  rateLimit: number;
  latencyMs: number;
  jitterMs: number;
  errorRate: number;
  syncPeriod: string;
  concurrency?: number;
}

export interface RenewalResult {
  sandboxes: number;
  ttlSeconds: number;
  renewBeforeSeconds: number;
  windowSeconds: number;
  minutes: number;
  errorRate: number;
  latencyMs: number;
  jitterMs: number;
  allocateSeconds: number | null;
  expirations: number;
  expirationsDuringWindow: number;
  replacements: number;
  renewals: { ok: number; failed: number; attempts: number; perVmPerWindow: number; perVmMin: number; perVmMax: number };
  /** Seconds between a VM's renewals: how early before expiry they land (p50/p99 of the margin left). */
  marginLeftSeconds: { p1: number; p50: number; min: number };
  service: { calls: number; byOperation: Record<string, number>; byStatus: Record<string, number> };
  /** Writes over the window; per renewal: all of them, and the Sandboxes' status alone. */
  kube: { writes: number; writesByResource: Record<string, number>; writesPerRenewal: number; statusWritesPerRenewal: number };
  rssMB: number | null;
  peakRssMB: number | null;
  /** CPU seconds over the renewal window (the operator's: the cost of keeping VMs alive, for sizing). */
  cpu: CpuShare;
  /** The operator's CPU milliseconds per renewal attempt over the window. */
  operatorCpuMsPerRenewal: number;
}

export async function renewals(cluster: Cluster, p: RenewalParams): Promise<RenewalResult> {
  const stack = await Stack.create({
    cluster,
    name: "bench-renew",
    emulator: { latencyMs: p.latencyMs, jitterMs: p.jitterMs },
    rateLimit: p.rateLimit,
    syncPeriod: p.syncPeriod,
    concurrency: p.concurrency,
    plurals: ["sandboxes"],
  });
  try {
    const objects = Array.from({ length: p.sandboxes }, (_, i) => sandbox(stack.namespace, i, { ttlSeconds: p.ttlSeconds }));
    await stack.create(objects);
    await stack.tracker.start();
    // Allocation happens without errors; the errors start with the renewals (the window).
    const op = await stack.startOperator();
    const t0 = op.startedAt;
    stack.emulator.setOptions({ errorRate: p.errorRate });
    let allocateSeconds: number | null = null;
    const allocDeadline = performance.now() + 600_000;
    while (performance.now() < allocDeadline) {
      await sleep(500);
      if (stack.tracker.ready >= p.sandboxes) {
        allocateSeconds = (performance.now() - t0) / 1000;
        break;
      }
    }
    log(`renewals: ${stack.tracker.ready}/${p.sandboxes} Sandboxes Ready after ${allocateSeconds?.toFixed(1) ?? "-"} s; running ${p.minutes} min with ${p.errorRate * 100} % errors`);
    const before = await stack.snapshot();
    const logStart = stack.emulator.requests.length;
    const expiredBefore = stack.emulator.state.usage.filter((u) => u.reason === "expired").length;
    const windowStart = Date.now();
    const cpu = cpuWindow({ apiserver: cluster.pid, operator: op.pid }, availableParallelism());
    const end = performance.now() + p.minutes * 60_000;
    while (performance.now() < end) {
      await sleep(Math.min(60_000, end - performance.now()));
      const expired = stack.emulator.state.usage.filter((u) => u.reason === "expired").length;
      const s = stack.emulator.stats();
      log(`renewals: ${((Date.now() - windowStart) / 60_000).toFixed(1)} min: renew calls ${s.byOperation["vms.renew"] ?? 0}, expirations ${expired}`);
    }
    const windowMs = Date.now() - windowStart;
    const cpuShare = cpu.finish();
    const after = await stack.snapshot();
    const usage = stack.emulator.state.usage;
    const expirations = usage.filter((u) => u.reason === "expired").length;
    const entries = stack.emulator.requests.slice(logStart);
    const okByVm = new Map<string, number>();
    let ok = 0;
    let failed = 0;
    for (const e of entries) {
      if (e.operation !== "vms.renew") continue;
      if (e.status === 200) {
        ok++;
        const id = renewedVm(e);
        okByVm.set(id, (okByVm.get(id) ?? 0) + 1);
      } else failed++;
    }
    const renewBefore = Math.min(Math.max(30, Math.floor(p.ttlSeconds / 5)), p.ttlSeconds - 1);
    const windowSeconds = p.ttlSeconds - renewBefore;
    const margins = summarize(renewalMargins(entries, p.ttlSeconds));
    const perVm = [...okByVm.values()];
    const expectedPerVm = windowMs / 1000 / windowSeconds;
    const d = delta(before.metrics, after.metrics);
    const writesByResource = by(d, "rest_client_requests_total", "resource", { method: (m) => m !== "GET" });
    for (const k of Object.keys(writesByResource)) if (writesByResource[k] === 0) delete writesByResource[k];
    const ops: Record<string, number> = {};
    for (const [k, v] of Object.entries(after.service.byOperation)) {
      const n = v - (before.service.byOperation[k] ?? 0);
      if (n > 0) ops[k] = n;
    }
    const statuses: Record<string, number> = {};
    for (const [k, v] of Object.entries(after.service.byStatus)) {
      const n = v - (before.service.byStatus[k] ?? 0);
      if (n > 0) statuses[k] = n;
    }
    const proc = stack.operator?.procStatus();
    const result: RenewalResult = {
      sandboxes: p.sandboxes,
      ttlSeconds: p.ttlSeconds,
      renewBeforeSeconds: renewBefore,
      windowSeconds,
      minutes: p.minutes,
      errorRate: p.errorRate,
      latencyMs: p.latencyMs,
      jitterMs: p.jitterMs,
      allocateSeconds: allocateSeconds === null ? null : round(allocateSeconds, 1),
      expirations,
      expirationsDuringWindow: expirations - expiredBefore,
      replacements: ops["vms.allocate"] ?? 0,
      renewals: {
        ok,
        failed,
        attempts: ok + failed,
        perVmPerWindow: round(ok / p.sandboxes / expectedPerVm, 3),
        perVmMin: perVm.length === p.sandboxes ? Math.min(...perVm) : 0,
        perVmMax: Math.max(0, ...perVm),
      },
      marginLeftSeconds: { p1: margins.p1 ?? Number.NaN, p50: margins.p50 ?? Number.NaN, min: margins.min ?? Number.NaN },
      service: { calls: after.service.total - before.service.total, byOperation: ops, byStatus: statuses },
      kube: {
        writes: sum(d, "rest_client_requests_total", { method: (m) => m !== "GET" }),
        writesByResource,
        writesPerRenewal: round(sum(d, "rest_client_requests_total", { method: (m) => m !== "GET" }) / Math.max(1, ok), 3),
        statusWritesPerRenewal: round((writesByResource["sandboxes/status"] ?? 0) / Math.max(1, ok), 3),
      },
      rssMB: proc ? round(proc.rssMB, 1) : null,
      peakRssMB: proc ? round(proc.peakMB, 1) : null,
      cpu: cpuShare,
      operatorCpuMsPerRenewal: round(((cpuShare.seconds["operator"] ?? 0) * 1000) / Math.max(1, ok + failed), 2),
    };
    log(
      `renewals: expirations ${expirations}; renewals ok ${ok}, failed ${failed}; per VM per window ${result.renewals.perVmPerWindow}; ` +
        `margin left p1 ${result.marginLeftSeconds.p1} s, min ${result.marginLeftSeconds.min} s; ` +
        `Kubernetes writes per renewal ${result.kube.writesPerRenewal} (${JSON.stringify(writesByResource)}); ` +
        `operator CPU ${cpuShare.seconds["operator"]} s over the window (${result.operatorCpuMsPerRenewal} ms per renewal)`,
    );
    return result;
  } finally {
    stack.emulator.setOptions({ errorRate: 0 });
    await stack.teardown();
  }
}
