// `npm run bench`: the operator's performance scenarios against the real kube-apiserver
// (its own, on fresh data: bench/lib/cluster.ts) and the service emulator. Writes a JSON result,
// a Markdown table and an SVG chart (Ready resources over time against the ideal line the
// service's rate limit sets). Benchmarks report; they never fail on timing.
//
//   npm run bench -- [--resources 10000] [--rate-limit 200] [--latency 20] [--out file.json]
//                    [--scenario cold-start|steady|memory|renewals|latency|runs|shards]...
//                    [--steady-minutes 10] [--sync-period 5m] [--renew-sandboxes 2000]
//                    [--renew-ttl 60] [--renew-minutes 10] [--renew-error-rate 0.05]
//                    [--renew-jitter 40] [--latency-samples 100] [--runs 1000] [--run-sandboxes 50] [--concurrency N] [--cpu-prof] [--heap-snapshot]
//                    [--shard-resources 6000] [--shard-sandboxes 2000] [--shard-ttl 60] [--shard-replicas 3] [--shard-kill-at 50] [--shard-kill member|leader] [--shard-signal SIGKILL|SIGTERM] [--shard-baseline true|false] [--shard-kubelet-report true|false]
//                    [--node-options '...' (default: the Deployment's NODE_OPTIONS)]
//
// See docs/performance.md for what each scenario measures and the latest results.
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import { OPERATOR_IDENTITIES, connectCluster } from "../bench/lib/cluster.js";
import { CACHE } from "../bench/lib/operator.js";
import type { MarginSummary } from "../bench/lib/margins.js";
import { gitCommit, machine, markdownTable, textTable, type Row } from "../bench/lib/report.js";
import { log } from "../bench/lib/util.js";
import { coldStart, type ColdStartResult } from "../bench/scenarios/cold-start.js";
import { latency, type LatencyResult } from "../bench/scenarios/latency.js";
import { renewals, type RenewalResult } from "../bench/scenarios/renewals.js";
import { runs, type RunsResult } from "../bench/scenarios/runs.js";
import { SHARD_KILLS, SHARD_SIGNALS, shards, type ShardedRun, type ShardsResult } from "../bench/scenarios/shards.js";
import { MANAGED_WRITE_RESOURCES, steadyState, type SteadyResult } from "../bench/scenarios/steady.js";
import { waitNamespaceGone } from "../dev/namespaces.js";

const SCENARIOS = ["cold-start", "steady", "memory", "renewals", "latency", "runs", "shards"] as const;
type Scenario = (typeof SCENARIOS)[number];

function parse() {
  const { values } = parseArgs({
    options: {
      resources: { type: "string", default: "10000" },
      "rate-limit": { type: "string", default: "200" },
      latency: { type: "string", default: "20" },
      out: { type: "string" },
      scenario: { type: "string", multiple: true },
      "steady-minutes": { type: "string", default: "10" },
      "sync-period": { type: "string", default: "5m" },
      "token-ttl": { type: "string", default: "300" },
      "renew-sandboxes": { type: "string", default: "2000" },
      "renew-ttl": { type: "string", default: "60" },
      "renew-minutes": { type: "string", default: "10" },
      "renew-error-rate": { type: "string", default: "0.05" },
      "renew-jitter": { type: "string", default: "40" },
      "latency-samples": { type: "string", default: "100" },
      runs: { type: "string", default: "1000" },
      "run-sandboxes": { type: "string", default: "50" },
      "shard-resources": { type: "string", default: "6000" },
      "shard-sandboxes": { type: "string", default: "2000" },
      "shard-ttl": { type: "string", default: "60" },
      "shard-replicas": { type: "string", default: "3" },
      "shard-kill-at": { type: "string", default: "50" },
      "shard-kill": { type: "string", default: "member" },
      "shard-signal": { type: "string", default: "SIGKILL" },
      "shard-baseline": { type: "string", default: "true" },
      "shard-kubelet-report": { type: "string", default: "false" },
      concurrency: { type: "string" },
      "cpu-prof": { type: "boolean", default: false },
      "heap-snapshot": { type: "boolean", default: false },
      "node-options": { type: "string" },
      "operator-identity": { type: "string", default: "serviceaccount" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    console.log("usage: npm run bench -- [--resources n] [--rate-limit rps] [--latency ms] [--out file.json] [--scenario name]... (see scripts/bench.ts)");
    process.exit(0);
  }
  const num = (name: string, v: string, min = 0): number => {
    const n = Number(v);
    if (!Number.isFinite(n) || n < min) throw new Error(`--${name}: "${v}" is not a number >= ${min}`);
    return n;
  };
  const percent = (name: string, v: string): number => {
    const n = num(name, v);
    if (n <= 0 || n > 100) throw new Error(`--${name}: "${v}" must be a percentage above 0 and at most 100`);
    return n;
  };
  const scenarios = (values.scenario ?? [...SCENARIOS]).map((s) => {
    if (!(SCENARIOS as readonly string[]).includes(s)) throw new Error(`--scenario: "${s}" is not one of ${SCENARIOS.join(", ")}`);
    return s as Scenario;
  });
  const syncPeriod = values["sync-period"];
  const m = /^(\d+(?:\.\d+)?)(s|m)$/.exec(syncPeriod);
  if (!m) throw new Error(`--sync-period: "${syncPeriod}" must look like 5m or 90s`);
  const identity = values["operator-identity"];
  const operatorIdentity = OPERATOR_IDENTITIES.find((i) => i === identity);
  if (operatorIdentity === undefined) throw new Error(`--operator-identity: "${identity}" must be one of ${OPERATOR_IDENTITIES.join(", ")}`);
  const shardKill = SHARD_KILLS.find((k) => k === values["shard-kill"]);
  if (shardKill === undefined) throw new Error(`--shard-kill: "${values["shard-kill"]}" must be one of ${SHARD_KILLS.join(", ")}`);
  const shardSignal = SHARD_SIGNALS.find((k) => k === values["shard-signal"]);
  if (shardSignal === undefined) throw new Error(`--shard-signal: "${values["shard-signal"]}" must be one of ${SHARD_SIGNALS.join(", ")}`);
  const shardBaseline = values["shard-baseline"];
  if (shardBaseline !== "true" && shardBaseline !== "false") throw new Error(`--shard-baseline: "${shardBaseline}" must be true or false`);
  const shardKubeletReport = values["shard-kubelet-report"];
  if (shardKubeletReport !== "true" && shardKubeletReport !== "false") throw new Error(`--shard-kubelet-report: "${shardKubeletReport}" must be true or false`);
  return {
    resources: num("resources", values.resources, 1),
    rateLimit: num("rate-limit", values["rate-limit"], 0.01),
    latencyMs: num("latency", values.latency),
    out: values.out,
    scenarios: new Set(scenarios),
    steadyMinutes: num("steady-minutes", values["steady-minutes"]),
    syncPeriod,
    syncPeriodMinutes: Number(m[1]) / (m[2] === "s" ? 60 : 1),
    tokenTTLSeconds: num("token-ttl", values["token-ttl"], 60),
    renewSandboxes: num("renew-sandboxes", values["renew-sandboxes"], 1),
    renewTTL: num("renew-ttl", values["renew-ttl"], 2),
    renewMinutes: num("renew-minutes", values["renew-minutes"]),
    renewErrorRate: num("renew-error-rate", values["renew-error-rate"]),
    renewJitterMs: num("renew-jitter", values["renew-jitter"]),
    latencySamples: num("latency-samples", values["latency-samples"], 1),
    runs: num("runs", values.runs, 1),
    runSandboxes: num("run-sandboxes", values["run-sandboxes"], 1),
    shardResources: num("shard-resources", values["shard-resources"], 1),
    shardSandboxes: num("shard-sandboxes", values["shard-sandboxes"]),
    shardTTL: num("shard-ttl", values["shard-ttl"], 2),
    shardReplicas: num("shard-replicas", values["shard-replicas"], 1),
    shardKillAt: percent("shard-kill-at", values["shard-kill-at"]),
    shardKill,
    shardSignal,
    shardBaseline: shardBaseline === "true",
    shardKubeletReport: shardKubeletReport === "true",
    concurrency: values.concurrency === undefined ? undefined : num("concurrency", values.concurrency, 1),
    cpuProf: values["cpu-prof"],
    heapSnapshot: values["heap-snapshot"],
    nodeOptions: values["node-options"],
    operatorIdentity,
  };
}

async function main(): Promise<void> {
  const a = parse();
  const startedAt = new Date();
  const stamp = startedAt.toISOString().replace(/[:]/g, "").replace(/\..*/, "");
  const out = path.resolve(a.out ?? path.join(CACHE, "results", `${stamp}-${a.resources}.json`));
  const cpuProfDir = a.cpuProf ? path.join(CACHE, "prof", stamp) : undefined;
  const heapSnapshotDir = a.heapSnapshot ? path.join(CACHE, "heap", stamp) : undefined;
  const result: {
    startedAt: string;
    finishedAt?: string;
    machine: ReturnType<typeof machine>;
    git: ReturnType<typeof gitCommit>;
    params: Omit<ReturnType<typeof parse>, "scenarios"> & { scenarios: string[] };
    summary: Row[];
    coldStart?: Omit<ColdStartResult, "chartSvg">;
    steady?: SteadyResult;
    renewals?: RenewalResult;
    latency?: LatencyResult;
    runs?: RunsResult;
    shards?: ShardsResult;
    errors: Record<string, string>;
  } = {
    startedAt: startedAt.toISOString(),
    machine: machine(),
    git: gitCommit(),
    params: { ...a, scenarios: [...a.scenarios] },
    summary: [],
    errors: {},
  };
  const cluster = await connectCluster({ identity: a.operatorIdentity });
  let chartSvg: string | undefined;
  const wants = (s: Scenario) => a.scenarios.has(s);
  mkdirSync(path.dirname(out), { recursive: true });
  const base = out.replace(/\.json$/, "");
  // Written after every scenario, so that a long teardown or a later failure loses nothing.
  const save = (): void => {
    result.summary = summary({ ...result, cores: result.machine.nproc, tokenTTLSeconds: a.tokenTTLSeconds });
    writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
    const md = [
      `# Benchmark ${result.startedAt}`,
      "",
      `${result.machine.nproc} CPUs (${result.machine.cpuModel}), ${result.machine.memoryGB} GB, Node ${result.machine.node}, ${result.machine.os}; ` +
        `load average at start ${result.machine.loadAverageAtStart.join(" ")}; calibration ${result.machine.calibrationMs} ms (lower is faster); commit ${result.git.commit.slice(0, 12)}${result.git.dirty ? " (tree modified)" : ""}`,
      "",
      `Parameters: ${a.resources} resources, rate limit ${a.rateLimit}/s, latency ${a.latencyMs} ms, sync period ${a.syncPeriod}.`,
      "",
      markdownTable(result.summary),
      "",
      chartSvg ? `![Ready over time](${path.basename(base)}.svg)` : "",
      "",
    ].join("\n");
    writeFileSync(`${base}.md`, md);
    if (chartSvg) writeFileSync(`${base}.svg`, chartSvg);
  };

  if (wants("cold-start") || wants("steady") || wants("memory")) {
    const { result: cold, stack } = await coldStart(cluster, {
      resources: a.resources,
      rateLimit: a.rateLimit,
      latencyMs: a.latencyMs,
      syncPeriod: a.syncPeriod,
      concurrency: a.concurrency,
      cpuProfDir,
      heapSnapshotDir,
      nodeOptions: a.nodeOptions,
      tokenTTLSeconds: a.tokenTTLSeconds,
    });
    const { chartSvg: svg, ...rest } = cold;
    chartSvg = svg;
    result.coldStart = rest;
    save();
    try {
      if (wants("steady") && cold.allReady && a.steadyMinutes > 0) {
        result.steady = await steadyState(stack, cold.mix, { minutes: a.steadyMinutes, syncPeriodMinutes: a.syncPeriodMinutes });
        save();
      }
    } catch (err) {
      result.errors.steady = String(err);
    } finally {
      await stack.teardown();
      // Bounded, so the next scenario does not share the API server with this one's teardown.
      await waitNamespaceGone(cluster.kube, stack.namespace, { timeoutMs: 180_000, intervalMs: 1000 });
    }
  }
  /** The service and operator settings every later scenario takes from the flags. */
  const service = { rateLimit: a.rateLimit, latencyMs: a.latencyMs, syncPeriod: a.syncPeriod, concurrency: a.concurrency };
  /** Runs a scenario if asked for; its failure is recorded and the others still run. */
  const scenario = async (name: Scenario, run: () => Promise<void>): Promise<void> => {
    if (!wants(name)) return;
    try {
      await run();
      save();
    } catch (err) {
      result.errors[name] = String(err);
      log(`${name} failed: ${String(err)}`);
    }
  };
  await scenario("renewals", async () => {
    result.renewals = await renewals(cluster, {
      ...service,
      sandboxes: a.renewSandboxes,
      ttlSeconds: a.renewTTL,
      minutes: a.renewMinutes,
      jitterMs: a.renewJitterMs,
      errorRate: a.renewErrorRate,
    });
  });
  await scenario("latency", async () => {
    result.latency = await latency(cluster, { samples: a.latencySamples, rateLimit: a.rateLimit, latencyMs: a.latencyMs, syncPeriod: a.syncPeriod });
  });
  await scenario("runs", async () => {
    result.runs = await runs(cluster, { ...service, runs: a.runs, sandboxes: a.runSandboxes });
  });
  await scenario("shards", async () => {
    result.shards = await shards(cluster, {
      resources: a.shardResources,
      sandboxes: a.shardSandboxes,
      ttlSeconds: a.shardTTL,
      replicas: a.shardReplicas,
      killAtReadyPercent: a.shardKillAt,
      kill: a.shardKill,
      signal: a.shardSignal,
      baseline: a.shardBaseline,
      kubeletReport: a.shardKubeletReport,
      ...service,
      nodeOptions: a.nodeOptions,
      heapSnapshotDir,
    });
  });
  await cluster.close();
  result.finishedAt = new Date().toISOString();
  save();
  console.log(`\n${textTable(result.summary)}\n`);
  log(`wrote ${path.relative(process.cwd(), out)}, ${path.relative(process.cwd(), base)}.md${chartSvg ? ` and ${path.relative(process.cwd(), base)}.svg` : ""}`);
  if (cpuProfDir) log(`CPU profiles in ${path.relative(process.cwd(), cpuProfDir)} (summarise with: npx tsx scripts/bench-profile.ts ${path.relative(process.cwd(), cpuProfDir)})`);
}

function summary(r: {
  cores: number;
  tokenTTLSeconds: number;
  coldStart?: Omit<ColdStartResult, "chartSvg">;
  steady?: SteadyResult;
  renewals?: RenewalResult;
  latency?: LatencyResult;
  runs?: RunsResult;
  shards?: ShardsResult;
}): Row[] {
  const rows: Row[] = [];
  const c = r.coldStart;
  if (c) {
    rows.push({
      scenario: `1. cold start, ${c.resources} resources`,
      target: "<= 1.15 x bound",
      measured: c.allReady ? `${c.readySeconds} s, bound ${c.boundSeconds} s: ${c.ratio} x` : `not all Ready (${JSON.stringify(c.notReady)})`,
      met: c.ratio === null ? false : c.ratio <= 1.15,
    });
    const cpu = c.cpu.seconds;
    rows.push({
      scenario: "1. cold start: CPU seconds until all Ready",
      target: "report",
      measured:
        `API server ${cpu.apiserver}, operator ${cpu.operator}, benchmark ${cpu.benchmark} ` +
        `(${Math.round(c.cpu.machineUtilisation * 100)} % of ${c.cpu.wallSeconds} s x ${r.cores} cores); ${c.kube.writes} Kubernetes writes`,
      met: null,
    });
  }
  if (c) {
    // Issue 17: a resource's creation costs one call whatever the sync period (no GET of an
    // object the operator just created), and at most 2 Kubernetes writes per resource beside
    // connection Secrets (finalizer and status; Created Events folded).
    const ops = c.service.byOperation;
    const creates = ["agents.create", "skills.create", "deployments.deploy", "vms.allocate"].reduce((a, k) => a + (ops[k] ?? 0), 0);
    const gets = Object.entries(ops).filter(([k]) => k.endsWith(".get")).reduce((a, [, v]) => a + v, 0);
    rows.push({
      scenario: "1. cold start: service calls to create a resource",
      target: "1 each, no GET",
      measured: `${creates} creates for ${c.resources} resources, ${gets} GETs of single objects`,
      met: creates === c.resources && gets === 0,
    });
    const secrets = c.kube.writesByResource["secrets"] ?? 0;
    const perResource = (c.kube.writes - secrets) / c.resources;
    rows.push({
      scenario: "1. cold start: Kubernetes writes per resource (connection Secrets aside)",
      target: "<= 2.0",
      measured: `${perResource.toFixed(2)} (${Object.entries(c.kube.writesByResource).map(([k, v]) => `${k}: ${v}`).join(", ")})`,
      met: perResource <= 2.0,
    });
  }
  const s = r.steady;
  if (s) {
    const maxPasses = Math.max(...Object.values(s.service.lists).map((l) => l.passesPerSync));
    rows.push({ scenario: `2. steady ${s.minutes} min: service writes`, target: "0", measured: String(s.service.writes), met: s.service.writes === 0 });
    const others = s.kube.writes - s.kube.managedWrites;
    rows.push({
      scenario: `2. steady ${s.minutes} min: Kubernetes writes for the managed resources`,
      target: "0",
      measured: String(s.kube.managedWrites),
      met: s.kube.managedWrites === 0,
    });
    // API.md asks for the token's expiry and a usage summary refreshed on an interval in the
    // Connection's status: those writes are O(Connections), and reported apart.
    rows.push({
      scenario: `2. steady ${s.minutes} min: other Kubernetes writes`,
      target: "0",
      measured: `${others}${others > 0 ? ` (${Object.entries(s.kube.writesByResource).filter(([k]) => !MANAGED_WRITE_RESOURCES.has(k.split("/")[0] ?? "")).map(([k, v]) => `${k}: ${v}`).join(", ")})` : ""}`,
      met: others === 0,
    });
    rows.push({
      scenario: `2. steady: service reads per sync per kind`,
      target: "<= list pages, no per-object GET",
      measured: `${maxPasses} list passes per sync (max over kinds), ${s.service.singleGets} GETs`,
      met: maxPasses <= 1.0001 && s.service.singleGets === 0,
    });
  }
  const n = r.renewals;
  if (n) {
    rows.push({
      scenario: `3. renewals: ${n.sandboxes} Sandboxes, TTL ${n.ttlSeconds} s, ${n.minutes} min, ${n.errorRate * 100} % errors`,
      target: "0 expirations",
      measured: `${n.expirations} expirations`,
      met: n.expirations === 0,
    });
    rows.push({
      scenario: "3. renewals per VM per window",
      target: "about 1",
      measured: `${n.renewals.perVmPerWindow} (window ${n.windowSeconds} s; ${n.renewals.failed} failed attempts retried)`,
      met: n.renewals.perVmPerWindow >= 0.9 && n.renewals.perVmPerWindow <= 1.2,
    });
    const byResource = Object.entries(n.kube.writesByResource).map(([k, v]) => `${k}: ${v}`).join(", ");
    rows.push({
      scenario: "3. renewals: Kubernetes writes per renewal",
      target: "<= 0.1",
      measured: `${n.kube.writesPerRenewal} (${n.kube.writes} writes: ${byResource}; Sandbox status alone ${n.kube.statusWritesPerRenewal})`,
      met: n.kube.writesPerRenewal <= 0.1,
    });
  }
  if (c) {
    rows.push({
      scenario: `4. peak RSS during cold start, ${c.resources} resources`,
      target: "<= 200 MB",
      measured: `${c.memory.peakRssMB} MB`,
      met: c.memory.peakRssMB !== null && c.memory.peakRssMB <= 200,
    });
    const minutes = (c.readySeconds ?? 0) / 60 + (s ? s.minutes + s.settleSeconds / 60 : 0);
    const tokens = c.service.tokenRequests + (s?.service.tokenRequests ?? 0);
    // The client refreshes 30 s before expiry, so a lifetime of L seconds is used for L - 30.
    const lifetimes = Math.max(1, Math.ceil((minutes * 60) / Math.max(1, r.tokenTTLSeconds - 30)));
    rows.push({
      scenario: "4. token requests",
      target: "1 per token lifetime",
      measured: `${tokens} in ${minutes.toFixed(1)} min (token lifetime ${r.tokenTTLSeconds} s: ${lifetimes} lifetime${lifetimes === 1 ? "" : "s"})`,
      met: tokens <= lifetimes,
    });
  }
  const l = r.latency;
  if (l) {
    rows.push({
      scenario: `5. apply -> Ready, idle operator (${l.kind}, ${l.samples} samples)`,
      target: "report",
      measured: `p50 ${l.totalMs.p50} ms, p99 ${l.totalMs.p99} ms; operator overhead p50 ${l.overheadMs.p50} ms, p99 ${l.overheadMs.p99} ms`,
      met: null,
    });
  }
  const u = r.runs;
  if (u) {
    rows.push({
      scenario: `6. SandboxRuns: ${u.runs} runs of one step over ${u.sandboxes} Sandboxes`,
      target: "report",
      measured: `${u.succeeded} Succeeded in ${u.seconds} s (${u.runsPerSecond}/s); apply -> Complete p50 ${u.applyToCompleteSeconds.p50} s, p99 ${u.applyToCompleteSeconds.p99} s`,
      met: null,
    });
    rows.push({
      scenario: "6. SandboxRuns: Kubernetes writes per run",
      target: "<= 3",
      measured: `${u.kube.perRun} (${Object.entries(u.kube.writesByResource).map(([k, v]) => `${k}: ${v}`).join(", ")}); ${u.service.perRun} service calls per run`,
      met: u.kube.perRun <= 3,
    });
  }
  if (r.shards) rows.push(...shardRows(r.shards));
  return rows;
}

/** Scenario 7's rows: correctness of a failover (expirations, duplicates, shares) and each replica's cost against one unsharded operator. */
function shardRows(h: ShardsResult): Row[] {
  const s = h.sharded;
  const b = h.baseline;
  const rows: Row[] = [];
  const names = Object.keys(s.replicas);
  const shares = (m: Record<string, number>): string =>
    [...names, ...Object.keys(m).filter((k) => !names.includes(k))].map((n) => `${n || "not labelled yet"} ${m[n] ?? 0}`).join(", ");
  const total = (m: Record<string, number>): number => Object.values(m).reduce((a, v) => a + v, 0);
  const dup = (d: Record<string, number>): string => Object.entries(d).map(([k, v]) => `${k} ${v >= 0 ? "+" : ""}${v}`).join(", ");
  const mb = (v: number | null | undefined): string => (v === null || v === undefined ? "-" : `${Math.round(v)} MB`);
  const pct = (v: number): string => `${Math.round(v * 100)} %`;
  const graceful = h.signal === "SIGTERM";
  const title = `7. shards: ${h.replicas} replicas, ${h.resources} resources (${h.mix.sandboxes} Sandboxes, TTL ${h.ttlSeconds} s)`;
  rows.push({
    scenario: `${title}, ${h.kill === "leader" ? "the leader" : "one"} ${graceful ? "stopped (SIGTERM)" : "SIGKILLed"} ${h.killAtReadyPercent >= 100 ? "once all are Ready" : `at ${h.killAtReadyPercent} % Ready`}`,
    target: "0 expirations",
    measured:
      `${s.expirations} expirations; all Ready ${s.readySeconds === null ? `NOT reached (${JSON.stringify(s.notReady)})` : `after ${s.readySeconds} s`}` +
      `${b ? ` (one unsharded operator: ${b.readySeconds ?? "-"} s, ${b.expirations} expirations)` : ""}; ran ${s.afterKillSeconds ?? "-"} s after the kill`,
    met: s.expirations === 0 && s.readySeconds !== null,
  });
  rows.push({
    scenario: "7. shards: duplicate creates (successful creates minus resources)",
    target: "0",
    measured: `${total(s.duplicates)} (${dup(s.duplicates)})`,
    met: Object.values(s.duplicates).every((v) => v === 0),
  });
  const before = s.sharesBeforeKill;
  rows.push({
    scenario: "7. shards: objects per replica (owner label)",
    target: "every replica a share",
    measured:
      `before the kill: ${shares(before)}; ${graceful ? "stopped" : "killed"} ${s.victim ?? "none"} (leader ${s.leader ?? "?"}) at ${s.kill?.ready ?? "-"} Ready; ` +
      `at the end: ${shares(s.sharesAtEnd)}${s.drainsPendingAtEnd > 0 ? `; ${s.drainsPendingAtEnd} drains pending` : ""}; ` +
      `every object labelled ${s.allLabelledSeconds === null ? "never" : `${s.allLabelledSeconds} s`} after the first create`,
    // At the end every object is owned by a live replica (the killed one owns nothing), none is left draining.
    met:
      names.every((n) => (before[n] ?? 0) > 0) &&
      Object.keys(s.sharesAtEnd).every((o) => o !== "" && o !== s.victim) &&
      s.drainsPendingAtEnd === 0,
  });
  rows.push({
    scenario: `7. shards: ${h.signal} -> no object labelled for the ${graceful ? "stopped" : "dead"} replica`,
    target: graceful ? "report (its reconciles finish, its Lease deleted: no lease wait)" : "report (lease 15 s + reaction)",
    measured:
      `${s.takeoverSeconds === null ? "never" : `${s.takeoverSeconds} s`}` +
      (s.stopped === null ? "" : ` (it exited ${s.stopped.exitCode ?? "on a signal"}, ${s.stopped.leftTheRing ? "its member Lease deleted on the way out" : "its member Lease NOT deleted: left to expire"})`) +
      ` (by kind: ${Object.entries(s.takeoverSecondsByKind).map(([k, v]) => `${k} ${v} s`).join(", ") || "-"}); service list calls after the kill (the new owners' inventory reads): ` +
      `${Object.entries(s.serviceAfterKill).filter(([k]) => k.endsWith(".list")).map(([k, v]) => `${k} ${v}`).join(", ") || "none"}` +
      (b ? ` (one unsharded operator, whole run: ${Object.entries(b.service.byOperation).filter(([k]) => k.endsWith(".list")).reduce((a, [, v]) => a + v, 0)})` : ""),
    met: null,
  });
  if (!graceful) {
    const heirs = Object.entries(s.heirsAtWorkSeconds);
    const last = heirs.length === 0 ? null : Math.max(...heirs.map(([, v]) => v));
    rows.push({
      scenario: `7. shards: ${h.signal} -> its heirs at work on its share (the fence seen, their caches holding it; nothing relabelled yet)`,
      target: "within one lease duration (15 s)",
      measured: heirs.length === 0 ? "no heir logged it (no fence named heirs)" : `${last} s (${heirs.map(([k, v]) => `${k} ${v} s`).join(", ")})`,
      met: last !== null && last <= 15,
    });
    // Older results carry neither field.
    const fence = s.fence as ShardedRun["fence"] | undefined;
    const reported = s.kubeletReportSeconds as number | null | undefined;
    rows.push({
      scenario: `7. shards: ${h.signal} -> its member Lease fenced, and why`,
      target: "report (crash-reported: the kubelet's report on its Pod; lease-expired: its Lease ran out)",
      measured:
        (fence === null || fence === undefined ? "not seen" : `${fence.seconds} s, ${fence.because || "no reason written"}`) +
        (reported === null || reported === undefined ? "; no kubelet report (replicas not in Pods)" : `; the container's end written on its Pod ${reported} s after the kill (by the harness, standing in for the kubelet)`),
      met: null,
    });
  }
  const tc = s.takeoverCpu;
  if (tc !== null) {
    const api = tc.seconds["kube-apiserver"] ?? Number.NaN;
    rows.push({
      scenario: "7. shards: CPU seconds from the kill to the last move",
      target: "report",
      measured:
        `${Object.entries(tc.seconds).map(([k, v]) => `${k} ${v}`).join(", ")} in ${tc.wallSeconds} s: the cores ${pct(tc.machineUtilisation)} busy ` +
        `${graceful ? "(its graceful stop included)" : "(the lease's wait included)"}; the API server ${Math.round((api / Math.max(1, tc.moved)) * 10_000) / 10} ms per moved object (${tc.moved})`,
      met: null,
    });
  }
  const margin = (m: MarginSummary): string => (m.renewals === 0 ? "no renewal" : `min ${m.min} s, p1 ${m.p1} s, median ${m.p50} s over ${m.renewals} renewals`);
  rows.push({
    scenario: "7. shards: time a VM had left when renewed",
    target: "report (> 0: none expired)",
    measured: `in the TTL after the kill: ${margin(s.renewalMarginSeconds.afterKill)}; the whole run: ${margin(s.renewalMarginSeconds.all)}`,
    met: null,
  });
  const base = b?.process;
  rows.push({
    scenario: "7. shards: peak RSS per replica",
    target: b ? "<= 40 % of one operator's" : "report",
    measured:
      names.map((n) => `${n} ${mb(s.replicas[n]?.peakRssMB)}${base?.peakRssMB ? ` (${pct((s.replicas[n]?.peakRssMB ?? 0) / base.peakRssMB)})` : ""}`).join(", ") +
      (base ? `; one unsharded operator ${mb(base.peakRssMB)}` : ""),
    met: base?.peakRssMB ? names.every((n) => (s.replicas[n]?.peakRssMB ?? Infinity) <= 0.4 * (base.peakRssMB ?? 0)) : null,
  });
  // Node's own RSS (~120 MB: the runtime, the code, the caches' fixed part) is there in every
  // replica whatever its share; what sharding divides is what the objects add on top.
  const above = (c: { peakRssMB: number | null; idleRssMB: number | null } | undefined): number | null =>
    c?.peakRssMB === null || c?.peakRssMB === undefined || c.idleRssMB === null ? null : c.peakRssMB - c.idleRssMB;
  const baseAbove = above(base);
  rows.push({
    scenario: "7. shards: peak RSS above idle (RSS once started, before any object) per replica",
    target: b ? "<= 40 % of one operator's" : "report",
    measured:
      names.map((n) => `${n} ${mb(above(s.replicas[n]))} (idle ${mb(s.replicas[n]?.idleRssMB)})${baseAbove ? `: ${pct((above(s.replicas[n]) ?? 0) / baseAbove)}` : ""}`).join(", ") +
      (base ? `; one unsharded operator ${mb(baseAbove)} (idle ${mb(base.idleRssMB)})` : ""),
    met: baseAbove ? names.every((n) => (above(s.replicas[n]) ?? Infinity) <= 0.4 * baseAbove) : null,
  });
  const cpu = names.map((n) => s.replicas[n]?.cpuSeconds ?? 0);
  rows.push({
    scenario: "7. shards: CPU seconds per replica (spawn to end; the killed one to its kill)",
    target: "report",
    measured: `${names.map((n) => `${n} ${s.replicas[n]?.cpuSeconds ?? "-"}`).join(", ")}; total ${Math.round(cpu.reduce((a, v) => a + v, 0) * 10) / 10}${base ? `; one unsharded operator ${base.cpuSeconds ?? "-"}` : ""}`,
    met: null,
  });
  rows.push({
    scenario: "7. shards: Kubernetes writes and service calls, all replicas",
    target: "report",
    measured:
      `${s.kube.writes} Kubernetes writes (${Object.entries(s.kube.writesByResource).map(([k, v]) => `${k}: ${v}`).join(", ")}); ` +
      `${s.service.calls} service calls (429: ${s.service.throttled429}), ${s.service.tokenRequests} token requests` +
      (b ? `; one unsharded operator: ${b.kube.writes} writes, ${b.service.calls} service calls (429: ${b.service.throttled429})` : ""),
    met: null,
  });
  return rows;
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
