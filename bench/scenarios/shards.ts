// Scenario 7: sharded mode (`run --sharding`, docs/sharding.md). N replicas (each its own
// process and POD_NAME, one leader election id) share R resources: S Sandboxes with a short
// TTL and the rest in the cold-start mix. When a given share are Ready (half by default: in the
// middle of the cold start; 100 %: a quiet failover) the replica that is not the leader and
// owns the most is SIGKILLed (or, with SIGTERM, stopped as a rolling update stops it); the run goes on until everything is Ready and at
// least TTL + 30 s have passed since the kill, so that a VM whose renewals the dead replica
// missed would have expired. Reported: expirations and duplicate creates (both should be 0),
// each replica's share before the kill and at the end, how long the dead replica's objects
// were without a live owner, and what each replica costs (peak RSS, CPU, writes) against one
// unsharded operator over the same load (the baseline, run first in its own namespace).
// With the kubelet's report, each replica runs as if in a Pod (a Pod object of the API server
// and the downward API's variables), and the harness writes the killed container's end on its
// Pod a second after a SIGKILL, as the kubelet would (src/sharding/crash-report.ts).
import { availableParallelism } from "node:os";
import path from "node:path";
import { by, sum, type Sample } from "../../dev/prometheus.js";
import { killedContainer, podForReplica, reportContainer } from "../../dev/kubelet.js";
import { waitNamespaceGone } from "../../dev/namespaces.js";
import { resourcePath } from "../../src/runtime/kube-client.js";
import type { Lease } from "../../src/runtime/leader-election.js";
import { DRAIN_LABEL, MEMBER_LABEL, OWNER_LABEL, memberLeaseName } from "../../src/sharding/labels.js";
import { AT_WORK_ON_INHERITED, FENCED_BECAUSE_ANNOTATION } from "../../src/sharding/succession.js";
import { cpuWindow, processCpuSeconds, type CpuShare } from "../lib/cpu.js";
import { crPath, type Cluster, type Plural } from "../lib/cluster.js";
import { CACHE, OperatorProcess } from "../lib/operator.js";
import { renewalMargins, summarize, type MarginSummary } from "../lib/margins.js";
import { agent, deployment, sandbox, skill, type Manifest, type Mix } from "../lib/resources.js";
import { Stack } from "../lib/stack.js";
import { errorMessage, log, round, sleep, waitUntil } from "../lib/util.js";

export const SHARD_KILLS = ["member", "leader"] as const;
export type ShardKill = (typeof SHARD_KILLS)[number];
/** What a replica logs once it works on what it inherited from a fenced replica (src/sharding/replica.ts). */
const INHERITED_LOG = AT_WORK_ON_INHERITED;

/** SIGKILL: a crash (its Lease expires and is fenced); SIGTERM: a graceful stop (it deletes its Lease on the way out). */
export const SHARD_SIGNALS = ["SIGKILL", "SIGTERM"] as const;
export type ShardSignal = (typeof SHARD_SIGNALS)[number];

export interface ShardsParams {
  /** All resources, Sandboxes included. */
  resources: number;
  sandboxes: number;
  ttlSeconds: number;
  replicas: number;
  /** The percentage of resources Ready at which a replica is killed (100: once all are Ready). */
  killAtReadyPercent: number;
  /**
   * Which replica is killed: "member", the one that is not the leader and owns the most (its
   * share moves on the running sharder), or "leader" (a new leader's sharder starts and moves it).
   */
  kill: ShardKill;
  signal: ShardSignal;
  /** Run one unsharded operator over the same load first. */
  baseline: boolean;
  /** Replicas in Pods (objects only: no kubelet runs here), whose SIGKILL the harness reports on the Pod as the kubelet does. */
  kubeletReport: boolean;
  rateLimit: number;
  latencyMs: number;
  syncPeriod: string;
  concurrency?: number;
  nodeOptions?: string;
  /** Where each operator that runs to the end writes a heap snapshot once everything is Ready (what a replica's memory holds). */
  heapSnapshotDir?: string;
}

/** What one operator process cost: memory, CPU since its spawn, its writes to the API server. */
export interface ProcessCost {
  /** RSS once started and before any resource existed (Node's and the caches' fixed part). */
  idleRssMB: number | null;
  /** VmHWM: the highest RSS of the process's life. */
  peakRssMB: number | null;
  cpuSeconds: number | null;
  kubeWrites: number;
  kubeWritesByResource: Record<string, number>;
}

export interface ShardsRun {
  /** Seconds from the first create request to every resource Ready. */
  readySeconds: number | null;
  notReady?: Record<string, number>;
  expirations: number;
  /** Successful creates per operation minus resources of that kind (an expired VM's replacement counts too). */
  duplicates: Record<string, number>;
  creates: Record<string, number>;
  service: { calls: number; tokenRequests: number; throttled429: number; byOperation: Record<string, number> };
  kube: { writes: number; writesByResource: Record<string, number> };
}

export interface ShardedRun extends ShardsRun {
  lease: string;
  leader: string | null;
  /** The SIGKILLed (or SIGTERMed) replica (none with a single replica). */
  victim: string | null;
  /** With SIGTERM: its exit code, and whether it deleted its member Lease on the way out. */
  stopped: { exitCode: number | null; leftTheRing: boolean } | null;
  /** Resources Ready, and service creates done, when it was killed; seconds since the first create. */
  kill: { ready: number; creates: number; atSeconds: number } | null;
  sharesBeforeKill: Record<string, number>;
  sharesAtEnd: Record<string, number>;
  /** Objects still marked for draining at the end (should be 0). */
  drainsPendingAtEnd: number;
  /** Seconds from the signal until no object was labelled for the killed (or stopped) replica any more. */
  takeoverSeconds: number | null;
  /** The same, per kind (Sandboxes are the ones with renewals due). */
  takeoverSecondsByKind: Record<string, number>;
  /**
   * Per surviving replica: seconds from the kill until it worked on what it inherited (the
   * fence seen, its caches holding the dead replica's objects: src/sharding/succession.ts),
   * before any of them was relabelled. Empty when no fence named heirs (a graceful stop).
   */
  heirsAtWorkSeconds: Record<string, number>;
  /** Seconds from the kill until the dead replica's member Lease was seen fenced, and why (lease-expired, crash-reported). */
  fence: { seconds: number; because: string } | null;
  /** With the kubelet's report: seconds from the kill until the harness wrote it on the Pod. */
  kubeletReportSeconds: number | null;
  /**
   * CPU from the kill to the last move, per process (the API server, the live replicas, the
   * benchmark), and the dead replica's objects it moved: whether the takeover waits for the
   * lease or for the cores, and what a move costs.
   */
  takeoverCpu: (CpuShare & { moved: number }) | null;
  /** Seconds from the first create until every object carried an owner label (the sharder's placement of new objects). */
  allLabelledSeconds: number | null;
  /** Seconds of the run after the kill (at least TTL + 30). */
  afterKillSeconds: number | null;
  /** Service calls after the kill, by operation (the new owners' inventory reads of moved objects show as lists). */
  serviceAfterKill: Record<string, number>;
  /**
   * Seconds a VM had left when it was renewed: over the run, and for the renewals in the TTL
   * after the kill (every VM's first renewal after it, the dead replica's by their new owners).
   * The expiration count says whether a takeover was in time; this says by how much.
   */
  renewalMarginSeconds: { all: MarginSummary; afterKill: MarginSummary };
  replicas: Record<string, ProcessCost & { killed: boolean }>;
}

export interface ShardsResult {
  resources: number;
  mix: Mix;
  ttlSeconds: number;
  replicas: number;
  killAtReadyPercent: number;
  kill: ShardKill;
  signal: ShardSignal;
  kubeletReport: boolean;
  baseline?: ShardsRun & { process: ProcessCost };
  baselineError?: string;
  sharded: ShardedRun;
}

const PLURALS: Plural[] = ["skills", "agents", "agentdeployments", "sandboxes"];
const CREATES: Record<string, { status: number; kind: keyof Mix }> = {
  "skills.create": { status: 201, kind: "skills" },
  "agents.create": { status: 201, kind: "agents" },
  "deployments.deploy": { status: 200, kind: "deployments" },
  "vms.allocate": { status: 201, kind: "sandboxes" },
};

/** S Sandboxes with the short TTL, each loading a Skill; the rest split like the cold-start mix (Skills 1 : Agents 2 : AgentDeployments 1). */
export function shardMix(total: number, sandboxes: number): Mix {
  const rest = Math.max(0, total - sandboxes);
  const skills = Math.floor(rest / 4);
  const deployments = Math.floor(rest / 4);
  return { skills, agents: rest - skills - deployments, deployments, sandboxes: Math.min(sandboxes, total) };
}

function manifests(namespace: string, mix: Mix, ttlSeconds: number): Manifest[] {
  const out: Manifest[] = [];
  for (let i = 0; i < mix.skills; i++) out.push(skill(namespace, i));
  for (let i = 0; i < mix.agents; i++) out.push(agent(namespace, i));
  for (let i = 0; i < mix.deployments; i++) out.push(deployment(namespace, i, i % Math.max(1, mix.agents)));
  for (let i = 0; i < mix.sandboxes; i++) out.push(sandbox(namespace, i, { ttlSeconds, ...(mix.skills > 0 ? { skillIndex: i % mix.skills } : {}) }));
  return out;
}

interface Labelled {
  metadata: { labels?: Record<string, string> };
}

/** The managed kinds' objects, by owner label ("" for none) and by kind. */
async function owners(cluster: Cluster, namespace: string): Promise<{ byOwner: Record<string, number>; byPlural: Record<string, number>; drains: number }> {
  const byOwner: Record<string, number> = {};
  const byPlural: Record<string, number> = {};
  let drains = 0;
  const lists = await Promise.all(PLURALS.map((p) => cluster.kube.list<Labelled>(crPath(p, namespace))));
  for (const [i, list] of lists.entries()) {
    byPlural[PLURALS[i] as string] = list.items.length;
    for (const o of list.items) {
      const owner = o.metadata.labels?.[OWNER_LABEL] ?? "";
      byOwner[owner] = (byOwner[owner] ?? 0) + 1;
      if (o.metadata.labels?.[DRAIN_LABEL] !== undefined) drains++;
    }
  }
  return { byOwner, byPlural, drains };
}

/**
 * Which kinds still have an object matching `labelSelector`: one item per kind is enough to
 * say. The probes that ask every tick (anything unplaced? anything the dead replica still
 * owns?) use it; listing the dead replica's whole share instead (thousands of objects a
 * second) took API server CPU from the moves it measures.
 */
async function anyLeft(cluster: Cluster, namespace: string, labelSelector: string): Promise<Record<string, boolean>> {
  const lists = await Promise.all(PLURALS.map((p) => cluster.kube.list<Labelled>(crPath(p, namespace), { labelSelector, limit: 1 })));
  return Object.fromEntries(lists.map((l, i) => [PLURALS[i] as string, l.items.length > 0]));
}

function successfulCreates(stack: Stack): Record<string, number> {
  const out: Record<string, number> = Object.fromEntries(Object.keys(CREATES).map((k) => [k, 0]));
  for (const r of stack.emulator.requests) if (CREATES[r.operation]?.status === r.status) out[r.operation]! += 1;
  return out;
}

function duplicatesOf(creates: Record<string, number>, mix: Mix): Record<string, number> {
  return Object.fromEntries(Object.entries(CREATES).map(([op, { kind }]) => [op, (creates[op] ?? 0) - mix[kind]]));
}

function cost(op: OperatorProcess, metrics: Sample[], idleRssMB: number | null): ProcessCost {
  const proc = op.procStatus();
  const writesByResource = by(metrics, "rest_client_requests_total", "resource", { method: (m) => m !== "GET" });
  for (const k of Object.keys(writesByResource)) if (writesByResource[k] === 0) delete writesByResource[k];
  const cpu = processCpuSeconds(op.pid);
  return {
    idleRssMB,
    peakRssMB: proc ? round(proc.peakMB, 1) : null,
    cpuSeconds: cpu === undefined ? null : round(cpu, 1),
    kubeWrites: sum(metrics, "rest_client_requests_total", { method: (m) => m !== "GET" }),
    kubeWritesByResource: writesByResource,
  };
}

function runSummary(stack: Stack, mix: Mix, readySeconds: number | null, kubeMetrics: Sample[][]): ShardsRun {
  const stats = stack.emulator.stats();
  const creates = successfulCreates(stack);
  const writesByResource: Record<string, number> = {};
  for (const m of kubeMetrics) {
    for (const [k, v] of Object.entries(by(m, "rest_client_requests_total", "resource", { method: (x) => x !== "GET" }))) {
      if (v > 0) writesByResource[k] = (writesByResource[k] ?? 0) + v;
    }
  }
  return {
    readySeconds: readySeconds === null ? null : round(readySeconds, 1),
    ...(readySeconds === null ? { notReady: stack.tracker.notReadyReasons() } : {}),
    expirations: stack.emulator.state.usage.filter((u) => u.reason === "expired").length,
    duplicates: duplicatesOf(creates, mix),
    creates,
    service: {
      calls: stats.total - (stats.byOperation.token ?? 0),
      tokenRequests: stats.byOperation.token ?? 0,
      throttled429: stats.byStatus["429"] ?? 0,
      byOperation: stats.byOperation,
    },
    kube: { writes: Object.values(writesByResource).reduce((a, v) => a + v, 0), writesByResource },
  };
}

function stackOf(cluster: Cluster, name: string, p: ShardsParams): Promise<Stack> {
  return Stack.create({
    cluster,
    name,
    emulator: { latencyMs: p.latencyMs },
    rateLimit: p.rateLimit,
    syncPeriod: p.syncPeriod,
    concurrency: p.concurrency,
    nodeOptions: p.nodeOptions,
    plurals: PLURALS,
    ...snapshotDir(p, name),
  });
}

/** Resolves with the seconds from `t0` until every resource is Ready, or null at the deadline; logs progress. */
async function waitAllReady(stack: Stack, total: number, t0: number, what: string, onTick?: () => Promise<void>): Promise<number | null> {
  const deadline = performance.now() + Math.max(600_000, (total / 10) * 1000);
  let lastReport = performance.now();
  while (performance.now() < deadline) {
    await onTick?.();
    if (stack.tracker.ready >= total) return (performance.now() - t0) / 1000;
    if (performance.now() - lastReport >= 10_000) {
      lastReport = performance.now();
      log(`${what}: ${((performance.now() - t0) / 1000).toFixed(0)} s: ${stack.tracker.ready}/${total} Ready, service calls ${stack.emulator.stats().total}`);
    }
    await sleep(500);
  }
  return null;
}

async function runBaseline(cluster: Cluster, p: ShardsParams, mix: Mix): Promise<ShardsRun & { process: ProcessCost }> {
  const stack = await stackOf(cluster, "bench-shard-base", p);
  try {
    const op = await stack.startOperator();
    await stack.tracker.start();
    await sleep(5_000);
    const idle = op.procStatus();
    const idleRssMB = idle ? round(idle.rssMB, 1) : null;
    const t0 = performance.now();
    const created = stack.create(manifests(stack.namespace, mix, p.ttlSeconds));
    const readySeconds = await waitAllReady(stack, p.resources, t0, "shards baseline");
    await created;
    await snapshot(op, p, "bench-shard-base");
    log(`shards baseline: ${readySeconds === null ? "NOT all Ready" : `all Ready after ${readySeconds.toFixed(1)} s`}; running one TTL (${p.ttlSeconds} s) more`);
    await sleep(p.ttlSeconds * 1000);
    const metrics = await op.scrape();
    const process = cost(op, metrics, idleRssMB);
    const run = runSummary(stack, mix, readySeconds, [metrics]);
    log(`shards baseline: peak RSS ${process.peakRssMB} MB (idle ${idleRssMB} MB), CPU ${process.cpuSeconds} s, ${run.kube.writes} Kubernetes writes, ${run.service.calls} service calls, ${run.expirations} expirations`);
    return { ...run, process };
  } finally {
    await stack.teardown();
    await waitNamespaceGone(cluster.kube, stack.namespace, { timeoutMs: 180_000, intervalMs: 1000 });
  }
}

/** Where the operator `name` writes its heap snapshots, when asked for (ShardsParams.heapSnapshotDir): its start options. */
function snapshotDir(p: ShardsParams, name: string): { heapSnapshotDir?: string } {
  return p.heapSnapshotDir === undefined ? {} : { heapSnapshotDir: path.join(p.heapSnapshotDir, name) };
}

/** A heap snapshot of the operator `name`, when asked for. */
async function snapshot(op: OperatorProcess, p: ShardsParams, name: string): Promise<void> {
  const { heapSnapshotDir } = snapshotDir(p, name);
  if (heapSnapshotDir === undefined) return;
  const file = await op.heapSnapshot(heapSnapshotDir);
  log(`shards: ${name}: heap snapshot ${file ?? "not written"}`);
}

interface Replica {
  name: string;
  op: OperatorProcess;
  logFile: string;
  idleRssMB: number | null;
  /** Cost and metrics taken just before a SIGKILL (the process is gone after it). */
  final?: { cost: ProcessCost; metrics: Sample[] };
}

async function leaderOf(replicas: Replica[], lease: string): Promise<Replica | undefined> {
  for (const r of replicas) {
    if (!r.op.alive()) continue;
    const metrics = await r.op.scrape().catch(() => [] as Sample[]);
    if (sum(metrics, "leader_election_master_status", { name: lease }) === 1) return r;
  }
  return undefined;
}

/** The kubelet notices a container's exit within its PLEG relist period (1 s), then writes the Pod's status. */
const KUBELET_REPORT_DELAY_MS = 1_000;

/** A replica's Pod in the operator's namespace (a leftover of an earlier run replaced), as if the process ran in it. */
async function podFor(cluster: Cluster, name: string): Promise<Record<string, string>> {
  const pods = `/api/v1/namespaces/${cluster.operator.namespace}/pods`;
  await cluster.kube.delete(`${pods}/${name}`, { gracePeriodSeconds: 0 }).catch(() => undefined);
  await waitUntil(async () => (await cluster.kube.list(pods, { fieldSelector: `metadata.name=${name}` })).items.length === 0, { timeoutMs: 30_000, intervalMs: 200, what: `an old Pod ${name} gone` });
  return podForReplica(cluster.kube, cluster.operator.namespace, name);
}

async function runSharded(cluster: Cluster, p: ShardsParams, mix: Mix): Promise<ShardedRun> {
  const stack = await stackOf(cluster, "bench-shards", p);
  const ns = stack.namespace;
  const lease = "bench-shards";
  const replicas: Replica[] = [];
  try {
    const names = Array.from({ length: p.replicas }, (_, i) => `bench-shard-${i}`);
    for (const name of names) {
      // In a Pod, the downward API's variables of it (POD_NAME among them).
      const env = p.kubeletReport ? await podFor(cluster, name) : { POD_NAME: name };
      // One at a time: on two cores, N compiling and syncing processes at once only slow each other.
      const logFile = path.join(CACHE, "logs", `${ns}-${name}.log`);
      const op = await OperatorProcess.start({
        kubeconfig: cluster.operator.kubeconfig,
        namespace: ns,
        syncPeriod: p.syncPeriod,
        concurrency: p.concurrency,
        nodeOptions: p.nodeOptions,
        logFile,
        ...snapshotDir(p, name),
        // The Leases live where the manifests' Roles allow them: the operator's own namespace.
        extraArgs: ["--sharding", "--leader-election-namespace", cluster.operator.namespace, "--leader-election-id", lease],
        env,
      });
      replicas.push({ name, op, logFile, idleRssMB: null });
    }
    await waitUntil(
      async () => {
        const leases = await cluster.kube.list<{ spec?: { holderIdentity?: string } }>(
          resourcePath({ group: "coordination.k8s.io", version: "v1", plural: "leases", namespace: cluster.operator.namespace }),
          { labelSelector: `${MEMBER_LABEL}=${lease}` },
        );
        const holders = new Set(leases.items.map((l) => l.spec?.holderIdentity));
        return names.every((n) => holders.has(n));
      },
      { timeoutMs: 120_000, intervalMs: 500, what: `${p.replicas} member Leases` },
    );
    await stack.tracker.start();
    await sleep(5_000);
    for (const r of replicas) {
      const s = r.op.procStatus();
      r.idleRssMB = s ? round(s.rssMB, 1) : null;
    }
    log(`shards: ${p.replicas} replicas hold their member Leases; idle RSS ${replicas.map((r) => `${r.name} ${r.idleRssMB} MB`).join(", ")}`);

    const t0 = performance.now();
    const created = stack.create(manifests(ns, mix, p.ttlSeconds));
    // Set by the progress loop's ticks (an object: TypeScript does not see a closure's assignments to locals).
    const k: {
      sharesBeforeKill: Record<string, number>;
      leader?: Replica;
      victim?: Replica;
      kill: ShardedRun["kill"];
      killedAt?: number;
      /** The kill on the wall clock, which is the emulator's. */
      killedAtMs?: number;
      statsAtKill?: Record<string, number>;
      cpu?: { finish(): CpuShare };
      /** With SIGTERM: the graceful stop under way (its exit code). */
      stopping?: Promise<number | null>;
      takeoverCpu: ShardedRun["takeoverCpu"];
      takeoverSeconds: number | null;
      takeoverByKind: Record<string, number>;
      allLabelledSeconds: number | null;
      labelCheckAt: number;
      killTried: boolean;
      fence: ShardedRun["fence"];
      kubeletReportSeconds: number | null;
    } = {
      sharesBeforeKill: {},
      kill: null,
      takeoverCpu: null,
      takeoverSeconds: null,
      takeoverByKind: {},
      allLabelledSeconds: null,
      labelCheckAt: 0,
      killTried: false,
      fence: null,
      kubeletReportSeconds: null,
    };
    const killAt = Math.ceil((p.resources * p.killAtReadyPercent) / 100);
    const onTick = async (): Promise<void> => {
      // Every 2 s until none is left: is any object still without an owner label? (one item per kind is enough to say)
      if (k.allLabelledSeconds === null && performance.now() - k.labelCheckAt >= 2000 && stack.tracker.total >= p.resources) {
        k.labelCheckAt = performance.now();
        if (Object.values(await anyLeft(cluster, ns, `!${OWNER_LABEL}`)).every((any) => !any)) {
          k.allLabelledSeconds = round((performance.now() - t0) / 1000, 1);
          log(`shards: every object has an owner label ${k.allLabelledSeconds} s after the first create`);
        }
      }
      if (!k.killTried && p.replicas >= 2 && stack.tracker.ready >= killAt) {
        k.killTried = true;
        k.sharesBeforeKill = (await owners(cluster, ns)).byOwner;
        k.leader = await leaderOf(replicas, lease);
        k.victim =
          p.kill === "leader"
            ? k.leader
            : replicas.filter((r) => r !== k.leader && r.op.alive()).sort((a, b) => (k.sharesBeforeKill[b.name] ?? 0) - (k.sharesBeforeKill[a.name] ?? 0))[0];
        if (k.victim === undefined) return log(`shards: no live replica to kill (${p.kill === "leader" ? "no leader found" : "none besides the leader"}); nothing killed`);
        const metrics = await k.victim.op.scrape().catch(() => [] as Sample[]);
        k.victim.final = { cost: cost(k.victim.op, metrics, k.victim.idleRssMB), metrics };
        const survivors = replicas.filter((r) => r !== k.victim && r.op.alive());
        k.cpu = cpuWindow({ "kube-apiserver": cluster.pid, ...Object.fromEntries(survivors.map((r) => [r.name, r.op.pid])) }, availableParallelism());
        // A graceful stop is not awaited: the moves are timed from the signal, while it stops.
        if (p.signal === "SIGTERM") k.stopping = k.victim.op.stop(60_000);
        else await k.victim.op.kill();
        k.killedAt = performance.now();
        k.killedAtMs = Date.now();
        k.statsAtKill = stack.emulator.stats().byOperation;
        const creates = Object.values(successfulCreates(stack)).reduce((a, v) => a + v, 0);
        k.kill = { ready: stack.tracker.ready, creates, atSeconds: round((k.killedAt - t0) / 1000, 1) };
        log(`shards: ${p.signal === "SIGTERM" ? "SIGTERMed" : "SIGKILLed"} ${k.victim.name} (owned ${k.sharesBeforeKill[k.victim.name] ?? 0}; leader ${k.leader?.name ?? "?"}) at ${k.kill.ready}/${p.resources} Ready; shares ${JSON.stringify(k.sharesBeforeKill)}`);
        if (p.kubeletReport && p.signal === "SIGKILL") {
          const { name } = k.victim;
          const killedAt = k.killedAt;
          setTimeout(() => {
            void reportContainer(cluster.kube, cluster.operator.namespace, name, killedContainer())
              .then(() => {
                k.kubeletReportSeconds = round((performance.now() - killedAt) / 1000, 1);
                log(`shards: the container's end reported on Pod ${name} ${k.kubeletReportSeconds} s after the kill`);
              })
              .catch((err: unknown) => log(`shards: reporting the end of ${name}'s container: ${errorMessage(err)}`));
          }, KUBELET_REPORT_DELAY_MS);
        }
        return;
      }
      if (k.killedAt !== undefined && k.victim !== undefined && k.fence === null) {
        const memberLease = resourcePath({ group: "coordination.k8s.io", version: "v1", plural: "leases", namespace: cluster.operator.namespace, name: memberLeaseName(`${lease}-shard`, k.victim.name) });
        const l = await cluster.kube.get<Lease>(memberLease).catch(() => undefined);
        // Deleted (a graceful stop) is no fence.
        if (l !== undefined && (l.spec?.holderIdentity ?? "") === "") {
          k.fence = { seconds: round((performance.now() - k.killedAt) / 1000, 1), because: l.metadata.annotations?.[FENCED_BECAUSE_ANNOTATION] ?? "" };
          log(`shards: ${k.victim.name}'s member Lease seen fenced (${k.fence.because}) ${k.fence.seconds} s after the kill`);
        }
      }
      if (k.killedAt !== undefined && k.victim !== undefined && k.takeoverSeconds === null) {
        // A dead owner's objects are relabelled at once (no drain, no unlabelled step in between).
        const left = await anyLeft(cluster, ns, `${OWNER_LABEL}=${k.victim.name}`);
        const since = round((performance.now() - k.killedAt) / 1000, 1);
        for (const [plural, any] of Object.entries(left)) if (!any) k.takeoverByKind[plural] ??= since;
        if (Object.values(left).every((any) => !any)) {
          k.takeoverSeconds = since;
          if (k.cpu !== undefined) k.takeoverCpu = { ...k.cpu.finish(), moved: k.sharesBeforeKill[k.victim.name] ?? 0 };
          log(`shards: every object of ${k.victim.name} has a live owner ${k.takeoverSeconds} s after the kill`);
        }
      }
    };
    const readySeconds = await waitAllReady(stack, p.resources, t0, "shards", onTick);
    await created;
    for (const r of replicas) if (r !== k.victim) await snapshot(r.op, p, r.name);
    // Past TTL + 30 s after the kill: a VM whose renewal the dead replica missed has run out by then.
    const minAfterKillMs = (p.ttlSeconds + 30) * 1000;
    while (k.killedAt !== undefined && (performance.now() - k.killedAt < minAfterKillMs || k.takeoverSeconds === null || k.allLabelledSeconds === null)) {
      await onTick();
      await sleep(1000);
      if (performance.now() - k.killedAt > minAfterKillMs + 120_000) break;
    }
    if (k.allLabelledSeconds === null && readySeconds !== null) {
      k.labelCheckAt = 0; // a last look (everything Ready implies everything placed, but the 2 s polls may have missed it)
      await onTick();
    }
    const exitCode = k.stopping === undefined ? undefined : await k.stopping;
    const heirsAtWorkSeconds: Record<string, number> = {};
    for (const r of replicas) {
      if (r === k.victim || k.killedAtMs === undefined) continue;
      const at = r.op.logLineAt(r.logFile, INHERITED_LOG);
      if (at !== undefined) heirsAtWorkSeconds[r.name] = round((r.op.startedAtWall + at * 1000 - k.killedAtMs) / 1000, 1);
    }
    const afterKillSeconds = k.killedAt === undefined ? null : round((performance.now() - k.killedAt) / 1000, 1);
    const end = await owners(cluster, ns);
    const replicaCosts: ShardedRun["replicas"] = {};
    const kubeMetrics: Sample[][] = [];
    for (const r of replicas) {
      if (r.final) {
        replicaCosts[r.name] = { ...r.final.cost, killed: true };
        kubeMetrics.push(r.final.metrics);
      } else {
        const metrics = await r.op.scrape().catch(() => [] as Sample[]);
        replicaCosts[r.name] = { ...cost(r.op, metrics, r.idleRssMB), killed: !r.op.alive() };
        kubeMetrics.push(metrics);
      }
    }
    const run = runSummary(stack, mix, readySeconds, kubeMetrics);
    const serviceAfterKill: Record<string, number> = {};
    if (k.statsAtKill !== undefined) {
      for (const [op, n] of Object.entries(run.service.byOperation)) if (n > (k.statsAtKill[op] ?? 0)) serviceAfterKill[op] = n - (k.statsAtKill[op] ?? 0);
    }
    const allocatedAt = new Map([...stack.emulator.state.vms.values()].map((vm) => [vm.id, vm.allocatedAt]));
    const margins = renewalMargins(stack.emulator.requests, p.ttlSeconds, allocatedAt);
    const killedAtMs = k.killedAtMs;
    const afterKill = killedAtMs === undefined ? [] : margins.filter((m) => m.at >= killedAtMs && m.at < killedAtMs + p.ttlSeconds * 1000);
    const result: ShardedRun = {
      ...run,
      lease,
      leader: k.leader?.name ?? null,
      victim: k.victim?.name ?? null,
      stopped:
        exitCode === undefined || k.victim === undefined
          ? null
          : { exitCode, leftTheRing: k.victim.op.logLineAt(k.victim.logFile, "left the shard ring") !== undefined },
      kill: k.kill,
      sharesBeforeKill: k.sharesBeforeKill,
      sharesAtEnd: end.byOwner,
      drainsPendingAtEnd: end.drains,
      takeoverSeconds: k.takeoverSeconds,
      takeoverSecondsByKind: k.takeoverByKind,
      heirsAtWorkSeconds,
      fence: k.fence,
      kubeletReportSeconds: k.kubeletReportSeconds,
      takeoverCpu: k.takeoverCpu,
      allLabelledSeconds: k.allLabelledSeconds,
      afterKillSeconds,
      serviceAfterKill,
      renewalMarginSeconds: { all: summarize(margins), afterKill: summarize(afterKill) },
      replicas: replicaCosts,
    };
    log(
      `shards: ${readySeconds === null ? "NOT all Ready" : `all Ready after ${readySeconds.toFixed(1)} s`}; expirations ${run.expirations}; duplicates ${JSON.stringify(run.duplicates)}; ` +
        `shares at end ${JSON.stringify(end.byOwner)}; takeover ${k.takeoverSeconds ?? "-"} s; ` +
        `renewal margin after the kill: min ${result.renewalMarginSeconds.afterKill.min ?? "-"} s, p1 ${result.renewalMarginSeconds.afterKill.p1 ?? "-"} s; ` +
        `peak RSS ${replicas.map((r) => `${r.name} ${replicaCosts[r.name]?.peakRssMB} MB`).join(", ")}; ${run.kube.writes} Kubernetes writes, ${run.service.calls} service calls (429: ${run.service.throttled429})`,
    );
    return result;
  } finally {
    await Promise.all(replicas.map((r) => r.op.stop().catch((err: unknown) => log(`stopping ${r.name}: ${errorMessage(err)}`))));
    if (p.kubeletReport) {
      for (const r of replicas) await cluster.kube.delete(`/api/v1/namespaces/${cluster.operator.namespace}/pods/${r.name}`, { gracePeriodSeconds: 0 }).catch(() => undefined);
    }
    await stack.teardown();
    await waitNamespaceGone(cluster.kube, ns, { timeoutMs: 180_000, intervalMs: 1000 });
  }
}

export async function shards(cluster: Cluster, p: ShardsParams): Promise<ShardsResult> {
  const mix = shardMix(p.resources, p.sandboxes);
  log(`shards: ${p.resources} resources (${JSON.stringify(mix)}), Sandbox TTL ${p.ttlSeconds} s, ${p.replicas} replicas, ${availableParallelism()} cores`);
  const result: Omit<ShardsResult, "sharded"> = {
    resources: p.resources,
    mix,
    ttlSeconds: p.ttlSeconds,
    replicas: p.replicas,
    killAtReadyPercent: p.killAtReadyPercent,
    kill: p.kill,
    signal: p.signal,
    kubeletReport: p.kubeletReport,
  };
  if (p.baseline) {
    try {
      result.baseline = await runBaseline(cluster, p, mix);
    } catch (err) {
      result.baselineError = errorMessage(err);
      log(`shards baseline failed: ${result.baselineError}`);
    }
  }
  return { ...result, sharded: await runSharded(cluster, p, mix) };
}
