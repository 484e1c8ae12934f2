// Three replicas of `agent-operator run --sharding` (child processes, each its own POD_NAME)
// over ~150 resources of every managed kind, 40 of them Sandboxes with a 45 s TTL (renewed
// every ~15 s). The service is reached through a recording proxy in the test, which keeps
// every request with the replica named in its User-Agent, so the test can tell who wrote what.
//
//  - every object carries exactly one owner label, of a live replica, and each replica owns some;
//  - a replica is SIGKILLed mid-work: its share moves to the others (its Lease expires), and
//    nothing is created twice, no short-TTL VM expires;
//  - 20 SandboxRuns start in ten of the Sandboxes and a fourth replica joins while their steps
//    run: objects move to it through the drain handshake, every run ends as planned, every
//    planned step ran exactly once;
//  - the first killed replica's member Lease, fenced, is deleted once its share has moved;
//  - then the leader (the sharder itself) is SIGKILLed: another replica leads, and the dead
//    leader's share moves, again with no VM running out;
//  - then the new leader is stopped gracefully (SIGTERM, as in a rolling update): it deletes its
//    member Lease on the way out, and the last replica leads and takes the whole share without
//    waiting for a Lease to expire, again with no VM running out;
//  - no service object is written by two replicas in overlapping periods: its writes, in time
//    order, come from one replica, or from a killed or stopped one and then one other, never
//    interleaved.
import { spawn, type ChildProcess } from "node:child_process";
import { createServer, request as httpRequest, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sumMetric } from "../../../dev/prometheus.js";
import { REPO_ROOT } from "../../../dev/paths.js";
import { startEmulator, type Emulator } from "../../../src/emulator/index.js";
import { DRAIN_LABEL, OWNER_LABEL, memberLeaseName } from "../../../src/sharding/labels.js";
import { kubectl, kubectlOk, testKubeconfig, uniqueName, useTestNamespace, waitFor } from "../support/kube.js";
import { API_KEY, apply, connectionManifest, installCRDs } from "../support/operator.js";
import { operatorArgs } from "../support/process.js";
import { executionRecords, planRuns, ranTheStep, runManifests } from "./run-support.js";
import { createAll, deleteAllManaged, expectExactlyOnce, listManaged, mixedManifests, waitAllReady, type ListedResource } from "./support.js";

const ns = useTestNamespace("fault-shards");
const MIX = { prefix: "s", skills: 30, agents: 40, deployments: 40, sandboxes: 40, withSkills: true };
const TOTAL = MIX.skills + MIX.agents + MIX.deployments + MIX.sandboxes;
const TTL_S = 45;
const NAMES = ["shard-r0", "shard-r1", "shard-r2"];
const RUNS = 20;

interface RunResource {
  metadata: { name: string; uid: string; labels?: Record<string, string> };
  status?: { phase?: string; conditions?: Array<{ type: string; reason?: string; message?: string }> };
}

/** A run's phase, and for an unplanned end why (so that a failure says what went wrong). */
function outcome(run: RunResource | undefined, expected: string): string | undefined {
  const phase = run?.status?.phase;
  if (phase === expected) return phase;
  const ready = run?.status?.conditions?.find((c) => c.type === "Ready");
  return `${phase}: ${ready?.reason ?? ""} ${ready?.message ?? ""}`;
}

// ---------------------------------------------------------------------------------------
// A recording proxy in front of the emulator

interface Recorded {
  replica: string;
  method: string;
  path: string;
  start: number;
  end: number;
  status: number;
  /** The service object the request wrote: `<collection>/<id>` (from the path, or a create's answer). */
  object: string | undefined;
}

const COLLECTIONS = ["agents", "skills", "deployments", "vms"];

/** Creates name their object in the answer: POST .../agents, .../skills, .../vms/allocate, .../agents/:id/deploy. */
function objectOf(method: string, path: string, body: string): string | undefined {
  const parts = path.split("?")[0]!.split("/").filter(Boolean);
  const created = (collection: string): string | undefined => {
    try {
      const parsed = JSON.parse(body) as { id?: string; name?: string; agent?: { id?: string } };
      const answer: { id?: string; name?: string } = parsed.agent ?? parsed; // the registry wraps a created agent: {"agent": {...}}
      const id = collection === "skills" ? (answer.name ?? answer.id) : answer.id;
      return id === undefined ? undefined : `${collection}/${id}`;
    } catch {
      return undefined;
    }
  };
  if (method === "POST" && parts.at(-1) === "deploy") return created("deployments");
  if (method === "POST" && parts.at(-1) === "allocate") return created("vms");
  const i = parts.findIndex((p) => COLLECTIONS.includes(p));
  if (i < 0) return undefined;
  // A SandboxRun's commands in a VM are the run's work (its own owner), not the Sandbox's.
  if (parts[i] === "vms" && parts[i + 2] !== undefined && !["renew", "release"].includes(parts[i + 2]!)) return undefined;
  if (parts[i + 1] !== undefined) return `${parts[i]}/${decodeURIComponent(parts[i + 1]!)}`;
  return method === "POST" ? created(parts[i]!) : undefined;
}

async function startProxy(target: string, log: Recorded[]): Promise<{ server: Server; url: string }> {
  const t = new URL(target);
  const server = createServer((req, res) => {
    const start = Date.now();
    const replica = /\(replica ([^)]+)\)/.exec(req.headers["user-agent"] ?? "")?.[1] ?? "?";
    const up = httpRequest(
      { host: t.hostname, port: t.port, method: req.method, path: req.url, headers: req.headers },
      (upRes) => {
        res.writeHead(upRes.statusCode ?? 502, upRes.headers);
        const chunks: Buffer[] = [];
        upRes.on("data", (c: Buffer) => {
          if (req.method === "POST") chunks.push(c);
          res.write(c);
        });
        upRes.on("end", () => {
          res.end();
          if (req.method !== "GET") {
            const path = req.url ?? "";
            log.push({
              replica,
              method: req.method ?? "",
              path,
              start,
              end: Date.now(),
              status: upRes.statusCode ?? 0,
              object: objectOf(req.method ?? "", path, Buffer.concat(chunks).toString("utf8")),
            });
          }
        });
      },
    );
    up.on("error", () => res.destroy());
    req.pipe(up);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

// ---------------------------------------------------------------------------------------
// Replicas: `agent-operator run --sharding` with their own POD_NAME

interface Replica {
  name: string;
  child: ChildProcess;
  logs: string[];
  metricsURL: string;
  exited: Promise<void>;
  alive(): boolean;
  metric(name: string, labels?: Record<string, string>): Promise<number>;
}

const replicas: Replica[] = [];

async function startReplica(name: string, lease: string): Promise<Replica> {
  const args = operatorArgs({
    kubeconfig: testKubeconfig(),
    namespaces: [ns.name],
    leaderElection: { namespace: ns.name, id: lease },
    sharding: true,
    logLevel: "info",
    concurrency: 8,
  });
  const child = spawn(process.execPath, args, {
    cwd: REPO_ROOT,
    env: { ...process.env, KUBECONFIG: testKubeconfig(), POD_NAME: name },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let done = false;
  const exited = new Promise<void>((resolve) => child.once("exit", () => ((done = true), resolve())));
  const logs: string[] = [];
  let metrics: string | undefined;
  const onLine = (line: string): void => {
    logs.push(line);
    if (metrics === undefined && line.includes('"operator started"')) metrics = (JSON.parse(line) as { metrics: string }).metrics;
  };
  createInterface({ input: child.stdout! }).on("line", onLine);
  createInterface({ input: child.stderr! }).on("line", onLine);
  await waitFor(
    () => {
      if (done) throw new Error(`replica ${name} exited during start: ${logs.slice(-5).join("\n")}`);
      return metrics !== undefined;
    },
    { timeoutMs: 90_000, intervalMs: 100, description: `replica ${name} to start` },
  );
  const metricsURL = `http://${metrics}/metrics`;
  return {
    name,
    child,
    logs,
    metricsURL,
    exited,
    alive: () => !done,
    async metric(m, labels = {}) {
      const res = await fetch(metricsURL, { signal: AbortSignal.timeout(10_000) });
      return sumMetric(await res.text(), m, labels);
    },
  };
}

async function stopReplica(r: Replica): Promise<void> {
  if (!r.alive()) return;
  r.child.kill("SIGTERM");
  const timer = setTimeout(() => r.child.kill("SIGKILL"), 20_000);
  await r.exited;
  clearTimeout(timer);
}

// ---------------------------------------------------------------------------------------

let emulator: Emulator;
let proxy: Server | undefined;
const requests: Recorded[] = [];

const CREATES: Record<string, number> = { "agents.create": 201, "skills.create": 201, "deployments.deploy": 200, "vms.allocate": 201 };
function successfulCreates(): Record<string, number> {
  const out: Record<string, number> = Object.fromEntries(Object.keys(CREATES).map((k) => [k, 0]));
  for (const r of emulator.requests) if (CREATES[r.operation] === r.status) out[r.operation]! += 1;
  return out;
}

/** The replica a resource's owner label names ("" for none). */
function ownerOf(r: ListedResource): string {
  return (r.metadata as { labels?: Record<string, string> }).labels?.[OWNER_LABEL] ?? "";
}

function owners(resources: ListedResource[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const r of resources) {
    const owner = ownerOf(r);
    out.set(owner, (out.get(owner) ?? 0) + 1);
  }
  return out;
}

beforeAll(async () => {
  await installCRDs();
  emulator = await startEmulator({ apiKey: API_KEY, strictBodies: true, orgId: "org-e2e", latencyMs: 20, jitterMs: 40, rateLimit: 40 });
  const p = await startProxy(emulator.baseURL, requests);
  proxy = p.server;
  await apply(connectionManifest(ns.name, { ...emulator, baseURL: p.url, authURL: `${p.url}/auth` } as Emulator), ns.name);
});

afterAll(async () => {
  if (replicas.some((r) => r.alive())) {
    emulator.setOptions({ rateLimit: undefined, latencyMs: 0, jitterMs: 0 });
    await deleteAllManaged(ns.name);
  }
  await Promise.all(replicas.map(stopReplica));
  await new Promise<void>((resolve) => (proxy ? proxy.close(() => resolve()) : resolve()));
  await emulator?.close();
});

describe("three sharded replicas", () => {
  it("split the work, never share an object, and take over the share of a SIGKILLed or a stopped replica with no expiry and no duplicate", async () => {
    const lease = uniqueName("shards");
    replicas.push(...(await Promise.all(NAMES.map((n) => startReplica(n, lease)))));
    // Every replica holds its member Lease before the objects come, so the ring is settled.
    await waitFor(
      async () => {
        const out = await kubectlOk(["get", "leases", "-l", `shard.agentcompute.dev/member=${lease}`, "-o", "jsonpath={.items[*].spec.holderIdentity}"], {
          namespace: ns.name,
        });
        return NAMES.every((n) => out.split(" ").includes(n));
      },
      { timeoutMs: 60_000, description: "three member Leases" },
    );
    // Each replica sees the three, and so takes a third of the Connection's rateLimit.
    await waitFor(async () => (await Promise.all(replicas.map((r) => r.metric("agentcompute_shard_members")))).every((n) => n === 3), {
      timeoutMs: 30_000,
      description: "every replica to count three members",
    });

    const manifests = mixedManifests(MIX).replaceAll("ttlSeconds: 3600", `ttlSeconds: ${TTL_S}`);
    const applied = createAll(manifests, ns.name);
    await waitFor(() => Object.values(successfulCreates()).reduce((a, b) => a + b, 0) >= 40, {
      timeoutMs: 180_000,
      description: "the replicas to be creating",
    });

    // Every replica has a share (the sharder may first have seen fewer members, and moved
    // objects to the late one since: on a loaded machine that can take a few seconds).
    const listed = await waitFor(
      async () => {
        const resources = await listManaged(ns.name);
        const current = owners(resources);
        return NAMES.every((n) => (current.get(n) ?? 0) > 0) ? resources : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 500, description: "every replica to own a share" },
    );
    const shares = owners(listed);
    // Kill the replica that is not the leader and owns the most (the sharder stays up).
    const leaders = await Promise.all(replicas.map((r) => r.metric("leader_election_master_status", { name: lease })));
    const victim = replicas
      .filter((_, i) => leaders[i] !== 1)
      .sort((a, b) => (shares.get(b.name) ?? 0) - (shares.get(a.name) ?? 0))[0]!;
    const victimShare = shares.get(victim.name) ?? 0;
    for (const n of NAMES) expect(shares.get(n) ?? 0, `share of ${n}`).toBeGreaterThan(0);
    victim.child.kill("SIGKILL");
    await victim.exited;
    const killedAt = Date.now();
    const createsAtKill = Object.values(successfulCreates()).reduce((a, b) => a + b, 0);
    // Killed mid-work: creates still to make, or (on a machine slow to settle the shares, every
    // create made by then) Sandboxes whose VMs it was renewing every 15 s.
    const victimSandboxes = listed.filter((r) => r.kind === "Sandbox" && ownerOf(r) === victim.name).length;
    expect(createsAtKill < TOTAL || victimSandboxes > 0, `${createsAtKill}/${TOTAL} creates, ${victimSandboxes} Sandboxes of ${victim.name}`).toBe(true);
    const survivors = replicas.filter((r) => r !== victim).map((r) => r.name);

    await applied;
    const resources = await waitAllReady(ns.name, TOTAL, { timeoutMs: 300_000 });
    // Past a whole TTL after the kill, so that a VM the dead replica stopped renewing would have run out.
    await waitFor(() => Date.now() - killedAt > (TTL_S + 10) * 1000, { timeoutMs: 120_000, intervalMs: 1_000, description: "a TTL to pass" });
    const final = await waitAllReady(ns.name, TOTAL, { timeoutMs: 120_000 });

    // Every object has exactly one owner, a live replica; no drain is left pending.
    const byOwner = owners(final);
    for (const r of final) {
      const labels = (r.metadata as { labels?: Record<string, string> }).labels ?? {};
      expect(survivors, `${r.kind}/${r.metadata.name}`).toContain(labels[OWNER_LABEL]);
      expect(labels[DRAIN_LABEL], `${r.kind}/${r.metadata.name}`).toBeUndefined();
    }
    for (const s of survivors) expect(byOwner.get(s) ?? 0).toBeGreaterThan(0);

    // Every replica wrote to the service (its share), and each identified itself.
    const writers = new Set(requests.filter((r) => r.object !== undefined).map((r) => r.replica));
    for (const n of NAMES) expect(writers).toContain(n);
    expect(writers).not.toContain("?");
    // The emulator's own request log names the caller too.
    const creators = new Set(emulator.requests.filter((r) => r.operation === "agents.create").map((r) => /\(replica ([^)]+)\)/.exec(r.userAgent ?? "")?.[1]));
    expect([...creators].every((c) => c !== undefined && NAMES.includes(c))).toBe(true);

    // SandboxRuns in ten of the Sandboxes; while their steps run, a fourth replica joins:
    // objects (runs in flight among them) move to it through the drain handshake.
    const plans = planRuns(
      RUNS,
      final.filter((r) => r.kind === "Sandbox").slice(0, 10).map((r) => r.metadata.name),
    );
    const expectedSteps = plans.reduce((n, p) => n + p.expected.steps.size, 0);
    await createAll(runManifests(plans), ns.name);
    await waitFor(() => emulator.runtimes.executions >= 5, { timeoutMs: 120_000, intervalMs: 100, description: "the runs' first steps" });
    const joiner = await startReplica("shard-r3", lease);
    replicas.push(joiner);
    const live = [...survivors, joiner.name];
    await waitFor(
      async () => {
        const now = owners(await listManaged(ns.name));
        return (now.get(joiner.name) ?? 0) > 0 && [...now.keys()].every((o) => live.includes(o)) ? now : undefined;
      },
      { timeoutMs: 120_000, intervalMs: 1_000, description: "the fourth replica to get a share" },
    );
    // A few renewals later everything is still Ready, each object with one live owner, no drain pending.
    await new Promise((resolve) => setTimeout(resolve, 20_000));
    const joined = await waitAllReady(ns.name, TOTAL, { timeoutMs: 120_000 });
    for (const r of joined) {
      const labels = (r.metadata as { labels?: Record<string, string> }).labels ?? {};
      expect(live, `${r.kind}/${r.metadata.name}`).toContain(labels[OWNER_LABEL]);
      expect(labels[DRAIN_LABEL], `${r.kind}/${r.metadata.name}`).toBeUndefined();
    }
    const afterJoin = owners(joined);
    const runs = await waitFor(
      async () => {
        const all = (JSON.parse(await kubectlOk(["get", "sandboxruns", "-o", "json"], { namespace: ns.name, timeoutMs: 60_000 })) as { items: RunResource[] }).items;
        return all.length === RUNS && all.every((r) => r.status?.phase === "Succeeded" || r.status?.phase === "Failed") ? all : undefined;
      },
      { timeoutMs: 240_000, intervalMs: 1_000, description: `${RUNS} SandboxRuns to finish` },
    );
    // Each run ended as planned, with one live owner, every planned step run exactly once.
    const runByName = new Map(runs.map((r) => [r.metadata.name, r]));
    for (const p of plans.filter((p) => runByName.get(p.name)?.status?.phase !== p.expected.phase)) {
      // What the replicas said about an unplanned end, for whoever reads the failure.
      const said = replicas.flatMap((r) => r.logs.filter((l) => l.includes(`"${p.name}"`)).map((l) => `${r.name}: ${l}`));
      console.log(`${p.name} ended ${outcome(runByName.get(p.name), p.expected.phase)}; the replicas said:\n${said.slice(-40).join("\n")}`);
    }
    expect(plans.map((p) => ({ name: p.name, phase: outcome(runByName.get(p.name), p.expected.phase) }))).toEqual(plans.map((p) => ({ name: p.name, phase: p.expected.phase })));
    for (const r of runs) expect(live, `SandboxRun/${r.metadata.name}`).toContain(r.metadata.labels?.[OWNER_LABEL]);
    const records = executionRecords(emulator);
    const stepProblems: string[] = [];
    for (const p of plans) {
      const seen = records.byRun.get(runByName.get(p.name)!.metadata.uid);
      for (const key of p.expected.steps.keys()) {
        const ran = ranTheStep(seen?.get(key) ?? []);
        if (ran.length !== 1) stepProblems.push(`${p.name} ${key}: ran ${ran.length} times`);
      }
    }
    expect(stepProblems).toEqual([]);

    // The first victim's member Lease, fenced when it died, was deleted by the sharder once
    // nothing carried its owner label any more (kept four lease durations).
    const victimLease = memberLeaseName(`${lease}-shard`, victim.name);
    await waitFor(async () => (await kubectl(["get", "lease", victimLease], { namespace: ns.name })).exitCode !== 0, {
      timeoutMs: 90_000,
      intervalMs: 1_000,
      description: `the fenced member Lease ${victimLease} to be deleted`,
    });

    // The leader (the sharder) is SIGKILLed too: another replica is elected, its sharder sees the
    // dead replica's member Lease as expired, and the share moves; no VM runs out meanwhile.
    const leaderStates = await Promise.all(replicas.map((r) => (r.alive() ? r.metric("leader_election_master_status", { name: lease }) : 0)));
    const leader = replicas[leaderStates.indexOf(1)]!;
    leader.child.kill("SIGKILL");
    await leader.exited;
    const leaderKilledAt = Date.now();
    const remaining = live.filter((n) => n !== leader.name);
    await waitFor(() => Date.now() - leaderKilledAt > (TTL_S + 10) * 1000, { timeoutMs: 120_000, intervalMs: 1_000, description: "a TTL to pass" });
    const afterLeader = await waitFor(
      async () => {
        const all = await waitAllReady(ns.name, TOTAL, { timeoutMs: 120_000 });
        return [...owners(all).keys()].every((o) => remaining.includes(o)) ? all : undefined;
      },
      { timeoutMs: 120_000, intervalMs: 1_000, description: "the dead leader's share to move" },
    );
    for (const r of afterLeader) expect((r.metadata as { labels?: Record<string, string> }).labels?.[DRAIN_LABEL]).toBeUndefined();
    const newLeaders = await Promise.all(replicas.filter((r) => r.alive()).map((r) => r.metric("leader_election_master_status", { name: lease })));
    expect(newLeaders.filter((v) => v === 1)).toHaveLength(1);
    const afterLeaderKill = owners(afterLeader);

    // A rolling update: the new leader is stopped gracefully (SIGTERM). It finishes its
    // reconciles, deletes its member Lease and releases the leader Lease, so the last replica
    // leads and takes the whole share without waiting for a Lease to expire; no VM runs out.
    const alive = replicas.filter((r) => r.alive());
    const leading = await Promise.all(alive.map((r) => r.metric("leader_election_master_status", { name: lease })));
    const leaver = alive[leading.indexOf(1)]!;
    const last = alive.find((r) => r !== leaver)!;
    leaver.child.kill("SIGTERM");
    const leftAt = Date.now();
    await waitFor(() => !leaver.alive(), { timeoutMs: 60_000, intervalMs: 200, description: `${leaver.name} to exit after SIGTERM` });
    expect(leaver.child.exitCode, `${leaver.name}'s exit code`).toBe(0);
    expect(leaver.logs.filter((l) => l.includes('"left the shard ring"'))).toHaveLength(1);
    const movedAll = await waitFor(
      async () => {
        const all = await listManaged(ns.name);
        return all.every((r) => ownerOf(r) === last.name) ? Date.now() : undefined;
      },
      { timeoutMs: 120_000, intervalMs: 500, description: `${last.name} to own everything` },
    );
    await waitFor(() => Date.now() - leftAt > (TTL_S + 10) * 1000, { timeoutMs: 120_000, intervalMs: 1_000, description: "a TTL to pass" });
    const afterLeave = await waitAllReady(ns.name, TOTAL, { timeoutMs: 120_000 });
    for (const r of afterLeave) {
      const labels = (r.metadata as { labels?: Record<string, string> }).labels ?? {};
      expect(labels[OWNER_LABEL], `${r.kind}/${r.metadata.name}`).toBe(last.name);
      expect(labels[DRAIN_LABEL], `${r.kind}/${r.metadata.name}`).toBeUndefined();
    }
    // Its Lease was deleted, not left to expire and fenced: the share did not wait for a lease duration.
    expect(last.logs.filter((l) => l.includes("fenced it") && l.includes(`"${leaver.name}"`))).toEqual([]);
    expect(await last.metric("leader_election_master_status", { name: lease })).toBe(1);
    // The moves to the joiner went through the handshake: the live owners released them.
    const released = replicas.filter((r) => r !== victim).reduce((n, r) => n + r.logs.filter((l) => l.includes('"released to another shard"')).length, 0);
    expect(released).toBeGreaterThanOrEqual(afterJoin.get(joiner.name) ?? 0);

    // No service object written by two replicas in overlapping periods: its writers, in time
    // order, change only from a killed replica or to the joiner, each after the previous
    // writer's last request ended.
    const byObject = new Map<string, Recorded[]>();
    for (const r of requests) if (r.object !== undefined && r.status < 500) byObject.set(r.object, [...(byObject.get(r.object) ?? []), r]);
    const violations: string[] = [];
    let moved = 0;
    for (const [object, reqs] of byObject) {
      reqs.sort((a, b) => a.start - b.start);
      const runs: Recorded[][] = [];
      for (const r of reqs) {
        const last = runs[runs.length - 1];
        if (last !== undefined && last[0]!.replica === r.replica) last.push(r);
        else runs.push([r]);
      }
      if (runs.length === 1) continue;
      moved++;
      for (let k = 1; k < runs.length; k++) {
        const prev = runs[k - 1]!;
        const next = runs[k]!;
        const allowed = [victim.name, leader.name, leaver.name].includes(prev[0]!.replica) || next[0]!.replica === joiner.name;
        const overlap = Math.max(...prev.map((r) => r.end)) > next[0]!.start;
        if (!allowed || overlap) {
          violations.push(`${object}: ${runs.map((run) => `${run[0]!.replica} x${run.length}`).join(" -> ")}`);
          break;
        }
      }
    }
    expect(violations).toEqual([]);
    // Every service object was attributed (its create included), so the check above saw them all.
    const byCollection: Record<string, number> = {};
    for (const o of byObject.keys()) byCollection[o.split("/")[0]!] = (byCollection[o.split("/")[0]!] ?? 0) + 1;
    expect(byCollection).toEqual({ skills: MIX.skills, agents: MIX.agents, deployments: MIX.deployments, vms: MIX.sandboxes });

    // Nothing created twice, ever; no short-TTL VM ran out.
    expect(successfulCreates()).toEqual({
      "agents.create": MIX.agents,
      "skills.create": MIX.skills,
      "deployments.deploy": MIX.deployments,
      "vms.allocate": MIX.sandboxes,
    });
    expectExactlyOnce(emulator, resources);
    expect(emulator.state.usage.filter((u) => u.reason === "expired")).toEqual([]);
    console.log(
      `shards: before the kill ${JSON.stringify(Object.fromEntries(shares))}; ${victim.name} (${victimShare}) killed after ${createsAtKill}/${TOTAL} creates; ` +
        `after ${JSON.stringify(Object.fromEntries(byOwner))}; ${RUNS} runs (${expectedSteps} steps); after a join ${JSON.stringify(Object.fromEntries(afterJoin))}; ` +
        `leader ${leader.name} killed, after ${JSON.stringify(Object.fromEntries(afterLeaderKill))}; ` +
        `leader ${leaver.name} stopped (SIGTERM), all moved ${((movedAll - leftAt) / 1000).toFixed(1)} s later; ${moved} service objects changed writer; ${byObject.size} written`,
    );
  }, 600_000);
});
