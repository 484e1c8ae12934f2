// agentcompute_managed_resource_*: what a Prometheus scrape of the operator shows about the
// managed resources, read back from the text exposition as Prometheus would.
import { Registry } from "prom-client";
import { beforeEach, describe, expect, it } from "vitest";
import { sum, parseMetrics, type Sample } from "../../../dev/prometheus.js";
import type { ManagedResource } from "../../../src/managed/external.js";
import { ResourceMetrics, isSynced, type ResourceCache } from "../../../src/managed/resource-metrics.js";
import type { AddHandler, DeleteHandler, InformerEventName, UpdateHandler } from "../../../src/runtime/informer.js";
import type { Condition } from "../../../src/runtime/status.js";

/** An informer's cache and events, driven by the test as a watch would drive them. */
class Cache implements ResourceCache<ManagedResource> {
  readonly objects = new Map<string, ManagedResource>();
  synced = true;
  lists = 0;
  private readonly handlers = { add: [] as AddHandler<ManagedResource>[], update: [] as UpdateHandler<ManagedResource>[], delete: [] as DeleteHandler<ManagedResource>[] };

  on(event: "add", handler: AddHandler<ManagedResource>): () => void;
  on(event: "update", handler: UpdateHandler<ManagedResource>): () => void;
  on(event: "delete", handler: DeleteHandler<ManagedResource>): () => void;
  on(event: InformerEventName, handler: AddHandler<ManagedResource> | UpdateHandler<ManagedResource> | DeleteHandler<ManagedResource>): () => void {
    (this.handlers[event] as unknown[]).push(handler);
    return () => undefined;
  }

  list(): ManagedResource[] {
    this.lists++;
    return [...this.objects.values()];
  }

  hasSynced(): boolean {
    return this.synced;
  }

  put(cr: ManagedResource): void {
    const old = this.objects.get(cr.metadata.uid);
    this.objects.set(cr.metadata.uid, cr);
    if (old === undefined) for (const h of this.handlers.add) h(cr);
    else for (const h of this.handlers.update) h(cr, old);
  }

  remove(cr: ManagedResource): void {
    this.objects.delete(cr.metadata.uid);
    for (const h of this.handlers.delete) h(cr);
  }
}

const CREATED = "2030-01-01T00:00:00Z";
const at = (seconds: number) => new Date(Date.parse(CREATED) + seconds * 1000);

type State = "ready" | "reconciling" | "stalled" | "unavailable" | "paused" | "paused-ready" | "drifted";

function resource(uid: string, opts: { generation?: number; state?: State; observedGeneration?: number } = {}): ManagedResource {
  const generation = opts.generation ?? 1;
  const cr: ManagedResource = {
    apiVersion: "agentcompute.dev/v1alpha1",
    kind: "Agent",
    metadata: { name: uid, namespace: "team-a", uid, generation, creationTimestamp: CREATED },
    spec: {},
  } as ManagedResource;
  if (opts.state === undefined) return cr;
  const og = opts.observedGeneration ?? generation;
  const c = (type: string, status: "True" | "False", reason: string): Condition => ({ type, status, reason, observedGeneration: og, lastTransitionTime: CREATED });
  const s = opts.state;
  const paused = s === "paused" || s === "paused-ready";
  const reason = paused ? "ReconcilePaused" : "Whatever";
  cr.status = {
    conditions: [
      c("Ready", s === "ready" || s === "paused-ready" || s === "drifted" ? "True" : "False", reason),
      c("Reconciling", s === "reconciling" ? "True" : "False", reason),
      c("Stalled", s === "stalled" ? "True" : "False", reason),
    ],
  };
  if (s === "drifted") cr.status.conditions?.push(c("Drifted", "True", "UpdateNotAllowed"));
  return cr;
}

let registry: Registry;
let clock: Date;
let metrics: ResourceMetrics;

beforeEach(() => {
  registry = new Registry();
  clock = at(0);
  metrics = new ResourceMetrics(registry, () => clock);
});

async function scrape(): Promise<Sample[]> {
  return parseMetrics(await registry.metrics());
}

const gauge = (samples: Sample[], name: string, kind: string) => {
  const s = samples.find((x) => x.name === `agentcompute_managed_resource_${name}` && x.labels.kind === kind);
  return s?.value;
};

describe("exists / ready / synced gauges", () => {
  it("count each kind's cache at scrape time, and follow the cache whatever events were seen", async () => {
    const agents = new Cache();
    const skills = new Cache();
    metrics.track("Agent", agents);
    metrics.track("Skill", skills);
    agents.put(resource("a1", { state: "ready" }));
    agents.put(resource("a2", { state: "reconciling" }));
    agents.put(resource("a3"));
    skills.put(resource("s1", { state: "ready" }));

    let s = await scrape();
    expect([gauge(s, "exists", "Agent"), gauge(s, "ready", "Agent"), gauge(s, "synced", "Agent")]).toEqual([3, 1, 1]);
    expect([gauge(s, "exists", "Skill"), gauge(s, "ready", "Skill"), gauge(s, "synced", "Skill")]).toEqual([1, 1, 1]);

    // The cache changes behind the events' back (as after a relist): the gauges still say what is there.
    agents.objects.delete("a1");
    agents.objects.set("a2", resource("a2", { state: "ready" }));
    skills.objects.clear();
    s = await scrape();
    expect([gauge(s, "exists", "Agent"), gauge(s, "ready", "Agent"), gauge(s, "synced", "Agent")]).toEqual([2, 1, 1]);
    expect([gauge(s, "exists", "Skill"), gauge(s, "ready", "Skill"), gauge(s, "synced", "Skill")]).toEqual([0, 0, 0]);
  });

  it("say nothing for a kind whose cache is still listing, rather than a false 0", async () => {
    const agents = new Cache();
    agents.synced = false;
    metrics.track("Agent", agents);
    agents.put(resource("a1", { state: "ready" }));
    expect(gauge(await scrape(), "exists", "Agent")).toBeUndefined();
    agents.synced = true;
    expect(gauge(await scrape(), "exists", "Agent")).toBe(1);
  });

  it("count only what this process works on: summed over sharded replicas whose caches overlap (two heirs of a fenced member), each resource once", async () => {
    // Two replicas, each caching the whole of a fenced member's share, each working on half of it.
    const registries = [new Registry(), new Registry()];
    const replicas = registries.map((r) => new ResourceMetrics(r, () => clock));
    const caches = [new Cache(), new Cache()];
    const worker = (cr: ManagedResource) => Number(cr.metadata.name.slice(1)) % 2;
    replicas.forEach((m, i) => m.track("Agent", caches[i]!, (cr) => worker(cr) === i));
    clock = at(1);
    for (let n = 0; n < 10; n++) for (const c of caches) c.put(resource(`a${n}`));
    clock = at(5);
    for (let n = 0; n < 10; n++) for (const c of caches) c.put(resource(`a${n}`, { state: n < 4 ? "ready" : "reconciling" }));
    const samples = await Promise.all(registries.map(async (r) => parseMetrics(await r.metrics())));
    const summed = (name: string) => samples.reduce((total, s) => total + (gauge(s, name, "Agent") ?? 0), 0);
    expect([summed("exists"), summed("ready")]).toEqual([10, 4]);
    expect(samples.reduce((total, s) => total + sum(s, "agentcompute_managed_resource_first_time_to_readiness_seconds_count", { kind: "Agent" }), 0)).toBe(4);
  });

  it("walk each cache once per scrape, not once per gauge", async () => {
    const agents = new Cache();
    metrics.track("Agent", agents);
    for (let i = 0; i < 100; i++) agents.put(resource(`a${i}`, { state: "ready" }));
    await scrape();
    expect(agents.lists).toBe(1);
    await scrape();
    expect(agents.lists).toBe(2);
  });
});

describe("synced: the last reconcile applied the current spec", () => {
  it.each<[string, Parameters<typeof resource>[1], boolean]>([
    ["Ready for the current generation", { state: "ready" }, true],
    ["unusable with nothing to fix (an expired VM): synced, not ready", { state: "unavailable" }, true],
    ["never reconciled", {}, false],
    ["conditions of an older generation (a spec change not applied yet)", { generation: 2, observedGeneration: 1, state: "ready" }, false],
    ["Reconciling=True (transient failure, waiting for a dependency)", { state: "reconciling" }, false],
    ["Stalled=True (the spec was refused)", { state: "stalled" }, false],
    ["Drifted=True: managementPolicies leave out Update and the service differs (Ready nonetheless)", { state: "drifted" }, false],
    ["paused, even while Ready", { state: "paused-ready" }, false],
    ["paused", { state: "paused" }, false],
  ])("%s", (_what, opts, want) => {
    expect(isSynced(resource("x", opts))).toBe(want);
  });
});

describe("first_time_to_readiness_seconds", () => {
  const count = (s: Sample[]) => sum(s, "agentcompute_managed_resource_first_time_to_readiness_seconds_count", { kind: "Agent" });
  const total = (s: Sample[]) => sum(s, "agentcompute_managed_resource_first_time_to_readiness_seconds_sum", { kind: "Agent" });

  it("records creation to the first Ready=True seen, once per resource", async () => {
    const agents = new Cache();
    metrics.track("Agent", agents);
    clock = at(1);
    agents.put(resource("a1"));
    clock = at(2);
    agents.put(resource("a1", { state: "reconciling" }));
    clock = at(7);
    agents.put(resource("a1", { state: "ready" }));
    let s = await scrape();
    expect(count(s)).toBe(1);
    expect(total(s)).toBe(7);

    // Ready again after a failure is not a first time.
    clock = at(20);
    agents.put(resource("a1", { state: "reconciling" }));
    clock = at(30);
    agents.put(resource("a1", { state: "ready" }));
    s = await scrape();
    expect(count(s)).toBe(1);
  });

  it("leaves out what a restarted process finds already reconciled: Ready, or not Ready after an outage", async () => {
    const agents = new Cache();
    metrics.track("Agent", agents);
    clock = at(3600);
    agents.put(resource("was-ready", { state: "ready" }));
    agents.put(resource("was-ready-then-broke", { state: "reconciling" }));
    clock = at(3700);
    agents.put(resource("was-ready-then-broke", { state: "ready" }));
    expect(count(await scrape())).toBe(0);
  });

  it("forgets a resource deleted before it became Ready", async () => {
    const agents = new Cache();
    metrics.track("Agent", agents);
    const cr = resource("a1");
    agents.put(cr);
    agents.remove(cr);
    // Re-created with the same name: a new uid, a new creation; the old one records nothing.
    agents.put(resource("a1", { state: "ready" }));
    expect(count(await scrape())).toBe(0);
  });
});

describe("drift_seconds", () => {
  const count = (s: Sample[]) => sum(s, "agentcompute_managed_resource_drift_seconds_count", { kind: "Agent" });
  const total = (s: Sample[]) => sum(s, "agentcompute_managed_resource_drift_seconds_sum", { kind: "Agent" });

  it("records the time since the previous successful reconcile when drift is put right", async () => {
    const agents = new Cache();
    const recorder = metrics.track("Agent", agents);
    const cr = resource("a1", { state: "ready" });
    agents.put(cr);
    recorder.reconciled(cr, at(0));
    recorder.reconciled(cr, at(600)); // up to date on the sync period
    recorder.drifted(cr, at(1200)); // changed in the service meanwhile, and put back
    recorder.reconciled(cr, at(1200));
    recorder.drifted(cr, at(1230));
    const s = await scrape();
    expect(count(s)).toBe(2);
    expect(total(s)).toBe(600 + 30);
  });

  it("records nothing on the first reconcile after a start (or failover), nor for a spec change", async () => {
    const agents = new Cache();
    const recorder = metrics.track("Agent", agents);
    const v1 = resource("a1", { state: "ready" });
    agents.put(v1);
    recorder.drifted(v1, at(100)); // nothing known before it in this process
    recorder.reconciled(v1, at(200));
    const v2 = resource("a1", { generation: 2, state: "ready", observedGeneration: 1 });
    agents.put(v2);
    recorder.drifted(v2, at(300)); // the user's new spec applied: not drift
    expect(count(await scrape())).toBe(0);
    recorder.drifted(v2, at(330)); // the same spec, changed in the service since: drift
    expect(total(await scrape())).toBe(30);
  });

  it("records nothing for a redeploy the user asked for with agentcompute.dev/redeploy-at", async () => {
    const deployments = new Cache();
    const recorder = metrics.track("AgentDeployment", deployments);
    const before = resource("d1", { state: "ready" });
    recorder.reconciled(before, at(0));
    const asked = { ...before, metadata: { ...before.metadata, annotations: { "agentcompute.dev/redeploy-at": "2030-01-01T00:01:00Z" } } };
    recorder.drifted(asked, at(60));
    expect(sum(await scrape(), "agentcompute_managed_resource_drift_seconds_count")).toBe(0);
  });

  it("forgets a deleted resource", async () => {
    const agents = new Cache();
    const recorder = metrics.track("Agent", agents);
    const cr = resource("a1", { state: "ready" });
    agents.put(cr);
    recorder.reconciled(cr, at(0));
    agents.remove(cr);
    recorder.drifted(cr, at(60));
    expect(count(await scrape())).toBe(0);
  });
});
