// Scenario 1 (and 4): N resources exist before the operator starts; time until all are Ready,
// against the bound the service's rate limit sets (service calls needed / rate limit). The
// operator runs as its own process, so its peak RSS (VmHWM) over the cold start is scenario 4.
import { availableParallelism } from "node:os";
import { lineChart, cumulative } from "../lib/chart.js";
import { cpuWindow, type CpuShare } from "../lib/cpu.js";
import type { Cluster, Plural } from "../lib/cluster.js";
import { by, histogramQuantile, sum, type Sample } from "../../dev/prometheus.js";
import { mixedResources, type Mix } from "../lib/resources.js";
import { deployedEnv, deployedNodeOptions, type OperatorProcess } from "../lib/operator.js";
import { Stack } from "../lib/stack.js";
import { log, round, sleep } from "../lib/util.js";

export interface Params {
  resources: number;
  rateLimit: number;
  latencyMs: number;
  syncPeriod: string;
  concurrency?: number;
  cpuProfDir?: string;
  heapSnapshotDir?: string;
  nodeOptions?: string;
  tokenTTLSeconds: number;
}

export interface ColdStartResult {
  resources: number;
  mix: Mix;
  createSeconds: number;
  /** The API server's throughput creating these very resources (64 in flight): a measure of its write capacity on this machine. */
  createPerSecond: number;
  /**
   * The operator's writes to the API server during the cold start at that throughput: the
   * bound the API server sets (when it is above boundSeconds, the service's rate limit is not
   * what limits the cold start on this machine).
   */
  apiServerBoundSeconds: number;
  /** Service calls a perfect operator needs: one create per resource, one (empty) list page per kind, the Connection's two reads. */
  callsNeeded: number;
  boundSeconds: number;
  allReady: boolean;
  readySeconds: number | null;
  ratio: number | null;
  /** Time until the first resource was Ready (informer sync, connection, first calls). */
  firstReadySeconds: number | null;
  /** Seconds from the operator's spawn: caches synced (workers start), first token request, first create in the service. */
  startup: { workersStarted: number | null; firstTokenRequest: number | null; firstCreate: number | null; connectionReady: number | null };
  readySecondsByKind: Record<string, number | null>;
  notReady?: Record<string, number>;
  service: {
    calls: number;
    byOperation: Record<string, number>;
    byStatus: Record<string, number>;
    throttled429: number;
    tokenRequests: number;
  };
  kube: {
    requests: number;
    writes: number;
    writesByResource: Record<string, number>;
    byMethod: Record<string, number>;
    events: Record<string, number>;
  };
  reconciles: Record<string, number>;
  /** p50/p99 seconds: reconcile time per controller, API server latency of status patches and of all writes, service call latency. */
  latencies: Record<string, { p50: number; p99: number }>;
  memory: {
    peakRssMB: number | null;
    rssAtReadyMB: number | null;
    heapUsedAtReadyMB: number | null;
    /** Memory outside the V8 heap (buffers, sockets) at all-Ready. */
    externalMB: number | null;
    /** V8 heap spaces at all-Ready: size (committed) and used, MB. */
    heapSpaces: Record<string, { sizeMB: number; usedMB: number }>;
    nodeOptions: string;
    /** glibc's MALLOC_ARENA_MAX the operator ran with (the Deployment's), null if unset. */
    mallocArenaMax: string | null;
    samples: Array<{ t: number; rssMB: number }>;
  };
  eventLoop: { maxP99Ms: number; maxMs: number };
  /** CPU seconds of the API server (with etcd), the operator and the benchmark (emulator, tracker) from the operator's start to all Ready. */
  cpu: CpuShare;
  timeline: Array<[number, number]>;
  chartSvg: string;
}

const PLURALS: Plural[] = ["skills", "agents", "agentdeployments", "sandboxes"];
const WATCHED: Plural[] = [...PLURALS, "connections"];

export async function coldStart(cluster: Cluster, p: Params): Promise<{ result: ColdStartResult; stack: Stack }> {
  const stack = await Stack.create({
    cluster,
    name: "bench-cold",
    emulator: { latencyMs: p.latencyMs, tokenTTLSeconds: p.tokenTTLSeconds },
    rateLimit: p.rateLimit,
    syncPeriod: p.syncPeriod,
    concurrency: p.concurrency,
    cpuProfDir: p.cpuProfDir,
    heapSnapshotDir: p.heapSnapshotDir,
    nodeOptions: p.nodeOptions,
    plurals: WATCHED,
  });
  const { mix, objects } = mixedResources(stack.namespace, p.resources);
  const createMs = await stack.create(objects);
  log(`cold start: created ${objects.length} resources in ${(createMs / 1000).toFixed(1)} s (${Math.round(objects.length / (createMs / 1000))}/s)`);
  await stack.tracker.start();

  const callsNeeded = p.resources + 4 + 2;
  const boundSeconds = callsNeeded / p.rateLimit;
  const op = await stack.startOperator();
  const t0 = op.startedAt;
  const cpu = cpuWindow({ apiserver: cluster.pid, operator: op.pid }, availableParallelism());
  const timeoutMs = Math.max(600_000, boundSeconds * 10_000);
  let maxP99 = 0;
  let maxLag = 0;
  let lastReport = 0;
  let allReady = false;
  let lastScrape: Sample[] = [];
  let lastScrapeAt = -Infinity;
  for (;;) {
    await sleep(500);
    const elapsed = performance.now() - t0;
    // Every 5 s, as a Prometheus would (more often, and rendering /metrics shows in the
    // operator's profile); prom-client's event-loop lag covers the time since the last scrape.
    if (elapsed - lastScrapeAt >= 5000) {
      lastScrapeAt = elapsed;
      try {
        lastScrape = await op.scrape();
        maxP99 = Math.max(maxP99, sum(lastScrape, "nodejs_eventloop_lag_p99_seconds") * 1000);
        maxLag = Math.max(maxLag, sum(lastScrape, "nodejs_eventloop_lag_max_seconds") * 1000);
      } catch {
        // the operator may be busy; the next scrape will do
      }
    }
    if (stack.tracker.ready - stack.tracker.readyOf("connections") >= p.resources) {
      allReady = true;
      break;
    }
    if (elapsed - lastReport >= 10_000) {
      lastReport = elapsed;
      const depth = by(lastScrape, "workqueue_depth", "name");
      log(
        `cold start: ${(elapsed / 1000).toFixed(0)} s: ${stack.tracker.ready - stack.tracker.readyOf("connections")}/${p.resources} Ready, service calls ${stack.emulator.stats().total}, ` +
          `queues ${JSON.stringify(depth)}, rss ${op.procStatus()?.rssMB.toFixed(0)} MB`,
      );
    }
    if (elapsed > timeoutMs) break;
  }
  const readyAt = performance.now();
  const cpuShare = cpu.finish();
  const proc = op.procStatus();
  const metrics = await op.scrape().catch(() => lastScrape);
  if (p.heapSnapshotDir) {
    const file = await op.heapSnapshot(p.heapSnapshotDir);
    log(`cold start: heap snapshot ${file ?? "not written"}`);
  }
  const times = stack.tracker.times();
  times.delete("connections");
  const all = [...times.values()].flat().map((t) => (t - t0) / 1000);
  const readySeconds = allReady ? Math.max(...all) : null;
  const stats = stack.emulator.stats();
  const kubeByResource = by(metrics, "rest_client_requests_total", "resource", { method: (m) => m !== "GET" });
  const result: ColdStartResult = {
    resources: p.resources,
    mix,
    createSeconds: round(createMs / 1000),
    createPerSecond: Math.round(objects.length / (createMs / 1000)),
    apiServerBoundSeconds: round(sum(metrics, "rest_client_requests_total", { method: (m) => m !== "GET" }) / (objects.length / (createMs / 1000))),
    callsNeeded,
    boundSeconds: round(boundSeconds),
    allReady,
    readySeconds: readySeconds === null ? null : round(readySeconds),
    ratio: readySeconds === null ? null : round(readySeconds / boundSeconds, 3),
    firstReadySeconds: all.length > 0 ? round(Math.min(...all)) : null,
    startup: startupPhases(stack, op),
    readySecondsByKind: Object.fromEntries(PLURALS.map((k) => [k, times.has(k) ? round((Math.max(...(times.get(k) ?? [])) - t0) / 1000) : null])),
    ...(allReady ? {} : { notReady: stack.tracker.notReadyReasons() }),
    service: {
      calls: stats.total - (stats.byOperation.token ?? 0),
      byOperation: stats.byOperation,
      byStatus: stats.byStatus,
      throttled429: stats.byStatus["429"] ?? 0,
      tokenRequests: stats.byOperation.token ?? 0,
    },
    kube: {
      requests: sum(metrics, "rest_client_requests_total"),
      writes: sum(metrics, "rest_client_requests_total", { method: (m) => m !== "GET" }),
      writesByResource: kubeByResource,
      byMethod: by(metrics, "rest_client_requests_total", "method"),
      events: by(metrics, "agentcompute_events_total", "result"),
    },
    reconciles: by(metrics, "controller_runtime_reconcile_total", "result"),
    latencies: latencies(metrics),
    memory: {
      peakRssMB: proc ? round(proc.peakMB, 1) : null,
      rssAtReadyMB: proc ? round(proc.rssMB, 1) : null,
      heapUsedAtReadyMB: round(sum(metrics, "nodejs_heap_size_used_bytes") / 1024 / 1024, 1),
      externalMB: round(sum(metrics, "nodejs_external_memory_bytes") / 1024 / 1024, 1),
      heapSpaces: Object.fromEntries(
        Object.entries(by(metrics, "nodejs_heap_space_size_total_bytes", "space")).map(([space, total]) => [
          space,
          { sizeMB: round(total / 1048576, 1), usedMB: round(sum(metrics, "nodejs_heap_space_size_used_bytes", { space }) / 1048576, 1) },
        ]),
      ),
      nodeOptions: p.nodeOptions ?? deployedNodeOptions(),
      mallocArenaMax: deployedEnv().MALLOC_ARENA_MAX ?? null,
      samples: op.memory.map((s) => ({ t: round(s.t / 1000, 1), rssMB: round(s.rssMB, 1) })),
    },
    eventLoop: { maxP99Ms: round(maxP99, 1), maxMs: round(maxLag, 1) },
    cpu: cpuShare,
    timeline: cumulative(all),
    chartSvg: "",
  };
  result.chartSvg = chart(result, p, times, t0, (readyAt - t0) / 1000);
  log(
    `cold start: ${allReady ? "all Ready" : "NOT all Ready"} after ${result.readySeconds ?? "-"} s; bound ${result.boundSeconds} s; ratio ${result.ratio ?? "-"}; ` +
      `API server bound ${result.apiServerBoundSeconds} s; CPU s ${JSON.stringify(cpuShare.seconds)} (machine ${Math.round(cpuShare.machineUtilisation * 100)} % busy); peak RSS ${result.memory.peakRssMB} MB; service calls ${result.service.calls} (429: ${result.service.throttled429}); kube writes ${result.kube.writes}`,
  );
  return { result, stack };
}

function latencies(metrics: Sample[]): ColdStartResult["latencies"] {
  const q = (name: string, where: Record<string, string | ((v: string) => boolean)>) => ({
    p50: round(histogramQuantile(metrics, name, 0.5, where), 3),
    p99: round(histogramQuantile(metrics, name, 0.99, where), 3),
  });
  const out: ColdStartResult["latencies"] = {};
  for (const c of ["skill", "agent", "agentdeployment", "sandbox"]) out[`reconcile:${c}`] = q("controller_runtime_reconcile_time_seconds", { controller: c });
  out["kube:PATCH */status"] = q("rest_client_request_duration_seconds", { method: "PATCH", resource: (r) => r.endsWith("/status") });
  out["kube:writes"] = q("rest_client_request_duration_seconds", { method: (m) => m !== "GET" });
  out["service:calls"] = q("agentcompute_service_request_duration_seconds", {});
  return out;
}

function startupPhases(stack: Stack, op: OperatorProcess): ColdStartResult["startup"] {
  const at = (pred: (e: { operation: string; status: number | "dropped" }) => boolean): number | null => {
    const e = stack.emulator.requests.find(pred);
    return e === undefined ? null : round((e.time - op.startedAtWall) / 1000);
  };
  const connection = stack.tracker.times().get("connections")?.[0];
  const workers = op.logLineAt(stack.logFile, "starting workers");
  return {
    workersStarted: workers === undefined ? null : round(workers),
    firstTokenRequest: at((e) => e.operation === "token"),
    firstCreate: at((e) => /\.(create|deploy|allocate)$/.test(e.operation)),
    connectionReady: connection === undefined ? null : round((connection - op.startedAt) / 1000),
  };
}

function chart(r: ColdStartResult, p: Params, times: Map<Plural, number[]>, t0: number, endSeconds: number): string {
  const colors: Record<string, string> = { skills: "#8e44ad", agents: "#2980b9", agentdeployments: "#16a085", sandboxes: "#d35400" };
  const perResource = r.callsNeeded / r.resources;
  const idealEnd = r.boundSeconds;
  const series = [
    {
      name: `ideal: ${p.rateLimit} calls/s`,
      color: "#888",
      dashed: true,
      points: [
        [0, 0],
        [idealEnd, r.resources],
        [Math.max(endSeconds, idealEnd), r.resources],
      ] as Array<[number, number]>,
    },
    { name: "all Ready", color: "#c0392b", width: 3, points: r.timeline },
    ...[...times.entries()].map(([k, ts]) => ({
      name: k,
      color: colors[k] ?? "#333",
      width: 1.5,
      points: cumulative(ts.map((t) => (t - t0) / 1000)),
    })),
  ];
  return lineChart({
    title: `Cold start: ${r.resources} resources, ${p.rateLimit} calls/s, ${p.latencyMs} ms latency`,
    subtitle: `all Ready in ${r.readySeconds ?? "-"} s; bound ${r.boundSeconds} s (${r.callsNeeded} calls / ${p.rateLimit}/s, ${perResource.toFixed(3)} per resource); ratio ${r.ratio ?? "-"}`,
    xLabel: "seconds since the operator process started",
    yLabel: "Ready resources",
    series,
    markers: [
      { x: r.boundSeconds, label: "bound", color: "#555" },
      { x: r.boundSeconds * 1.15, label: "1.15 x bound", color: "#c0392b" },
    ],
  });
}
