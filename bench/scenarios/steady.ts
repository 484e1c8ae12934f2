// Scenario 2: after the cold start, nothing changes for M minutes. Target: zero writes to the
// service and to the Kubernetes API; the only reads are the inventories' bulk lists on the
// sync period (at most one pass over the list pages per kind per sync), no GET per object.
import { availableParallelism } from "node:os";
import { PAGE_SIZE } from "../../src/service/client.js";
import { cpuWindow, type CpuShare } from "../lib/cpu.js";
import { by, delta, sum } from "../../dev/prometheus.js";
import type { Mix } from "../lib/resources.js";
import type { Stack } from "../lib/stack.js";
import { log, round, sleep } from "../lib/util.js";

export interface SteadyResult {
  minutes: number;
  syncPeriodMinutes: number;
  settleSeconds: number;
  settled: boolean;
  service: {
    writes: number;
    writesByOperation: Record<string, number>;
    reads: number;
    readsByOperation: Record<string, number>;
    /** Per inventory kind: list calls made, pages per full list, and list passes (calls / pages). */
    lists: Record<string, { calls: number; pagesPerList: number; passes: number; syncs: number; passesPerSync: number }>;
    /** GETs of single objects (should be 0: observation comes from the bulk lists). */
    singleGets: number;
    tokenRequests: number;
  };
  kube: {
    writes: number;
    writesByResource: Record<string, number>;
    /** Writes to the managed kinds (Skill, Agent, AgentDeployment, Sandbox), their Secrets and Events. */
    managedWrites: number;
    reads: number;
  };
  reconciles: Record<string, number>;
  rssMB: number | null;
  peakRssMB: number | null;
  /** CPU seconds over the quiet minutes: what holding the resources costs (the sizing guide's steady CPU). */
  cpu: CpuShare;
}

const READ = new Set(["GET"]);

/** Kubernetes resources written on behalf of the managed kinds (as opposed to the Connection's status). */
export const MANAGED_WRITE_RESOURCES: ReadonlySet<string> = new Set(["skills", "agents", "agentdeployments", "sandboxes", "secrets", "events"]);

export async function steadyState(stack: Stack, mix: Mix, o: { minutes: number; syncPeriodMinutes: number }): Promise<SteadyResult> {
  const settle = await stack.settle({ quietMs: 15_000, timeoutMs: 240_000 });
  log(`steady: operator ${settle.settled ? "settled" : "did NOT settle"} after ${(settle.ms / 1000).toFixed(0)} s; measuring ${o.minutes} min`);
  const before = await stack.snapshot();
  const logEntriesBefore = stack.emulator.requests.length;
  const cpu = cpuWindow({ apiserver: stack.o.cluster.pid, ...(stack.operator && { operator: stack.operator.pid }) }, availableParallelism());
  const end = performance.now() + o.minutes * 60_000;
  while (performance.now() < end) {
    await sleep(Math.min(60_000, end - performance.now()));
    const s = stack.emulator.stats();
    log(`steady: ${((o.minutes * 60_000 - (end - performance.now())) / 60_000).toFixed(1)} min: service calls ${s.total - before.service.total}`);
  }
  const after = await stack.snapshot();
  const cpuShare = cpu.finish();
  const d = delta(before.metrics, after.metrics);
  const ops: Record<string, number> = {};
  for (const [k, v] of Object.entries(after.service.byOperation)) {
    const n = v - (before.service.byOperation[k] ?? 0);
    if (n > 0) ops[k] = n;
  }
  const entries = stack.emulator.requests.slice(logEntriesBefore);
  const writesByOperation: Record<string, number> = {};
  const readsByOperation: Record<string, number> = {};
  for (const e of entries) {
    if (e.operation === "token") continue;
    const target = READ.has(e.method) ? readsByOperation : writesByOperation;
    target[e.operation] = (target[e.operation] ?? 0) + 1;
  }
  const syncs = o.minutes / o.syncPeriodMinutes;
  const counts: Record<string, number> = { agents: mix.agents, deployments: mix.deployments, vms: mix.sandboxes, skills: mix.skills };
  const lists: SteadyResult["service"]["lists"] = {};
  for (const [kind, n] of Object.entries(counts)) {
    // skills.list is not paginated (one call); the others page by PAGE_SIZE and stop at a short page.
    const pagesPerList = kind === "skills" ? 1 : kind === "agents" ? Math.max(1, Math.ceil(n / PAGE_SIZE)) : Math.floor(n / PAGE_SIZE) + 1;
    const calls = readsByOperation[`${kind}.list`] ?? 0;
    const passes = calls / pagesPerList;
    lists[kind] = { calls, pagesPerList, passes: round(passes, 2), syncs: round(syncs, 2), passesPerSync: round(passes / syncs, 2) };
  }
  const singleGets = Object.entries(readsByOperation)
    .filter(([op]) => op.endsWith(".get"))
    .reduce((a, [, n]) => a + n, 0);
  const kubeWritesByResource = by(d, "rest_client_requests_total", "resource", { method: (m) => m !== "GET" });
  for (const k of Object.keys(kubeWritesByResource)) if (kubeWritesByResource[k] === 0) delete kubeWritesByResource[k];
  const proc = stack.operator?.procStatus();
  const result: SteadyResult = {
    minutes: o.minutes,
    syncPeriodMinutes: o.syncPeriodMinutes,
    settleSeconds: round(settle.ms / 1000, 1),
    settled: settle.settled,
    service: {
      writes: Object.values(writesByOperation).reduce((a, b) => a + b, 0),
      writesByOperation,
      reads: Object.values(readsByOperation).reduce((a, b) => a + b, 0),
      readsByOperation,
      lists,
      singleGets,
      tokenRequests: ops.token ?? 0,
    },
    kube: {
      writes: sum(d, "rest_client_requests_total", { method: (m) => m !== "GET" }),
      writesByResource: kubeWritesByResource,
      managedWrites: Object.entries(kubeWritesByResource)
        .filter(([r]) => MANAGED_WRITE_RESOURCES.has(r.split("/")[0] ?? ""))
        .reduce((a, [, n]) => a + n, 0),
      reads: sum(d, "rest_client_requests_total", { method: "GET" }),
    },
    reconciles: Object.fromEntries(Object.entries(by(d, "controller_runtime_reconcile_total", "result")).filter(([, n]) => n > 0)),
    rssMB: proc ? round(proc.rssMB, 1) : null,
    peakRssMB: proc ? round(proc.peakMB, 1) : null,
    cpu: cpuShare,
  };
  log(
    `steady: service writes ${result.service.writes}, reads ${result.service.reads} (single GETs ${singleGets}); kube writes ${result.kube.writes} ` +
      `(${JSON.stringify(kubeWritesByResource)}); lists ${JSON.stringify(lists)}; CPU s ${JSON.stringify(cpuShare.seconds)}`,
  );
  return result;
}
