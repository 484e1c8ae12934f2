// Per-kind metrics of the managed resources themselves, in the spirit of crossplane-runtime's
// crossplane_managed_resource_* (its MRStateMetrics gauges and MRMetricRecorder histograms),
// with the label `kind` (Agent, Skill, AgentDeployment, Sandbox):
//
//   agentcompute_managed_resource_exists                      gauge: resources in the cache
//   agentcompute_managed_resource_ready                       gauge: of which Ready=True
//   agentcompute_managed_resource_synced                      gauge: of which synced (isSynced)
//   agentcompute_managed_resource_first_time_to_readiness_seconds  histogram
//   agentcompute_managed_resource_drift_seconds               histogram
//
// The gauges are computed at scrape time from the informers' caches, never counted from
// events: a missed or doubled event cannot make them drift, and both replicas (whose caches are
// warm) report the same numbers. A scrape walks each cache once; per event the work is O(1).
import { Gauge, Histogram, type Registry } from "prom-client";
import { Annotations, ConditionType } from "../api/names.js";
import type { Informer } from "../runtime/informer.js";
import { PAUSED_REASON } from "./conditions.js";
import type { ManagedResource } from "./external.js";

/** Creation to first Ready: a resource of ours is Ready in well under a second to an hour. */
const READINESS_BUCKETS = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600];

/**
 * Time since the previous successful reconcile: bounded by the poll interval (1 s and up) or
 * --sync-period (10 min by default), longer when reconciles failed meanwhile.
 */
const DRIFT_BUCKETS = [1, 5, 10, 30, 60, 120, 300, 600, 900, 1200, 1800, 3600, 7200, 21600, 86400];

/** What the managed reconciler tells the metrics about a kind's reconciles (on the leader). */
export interface ResourceMetricsRecorder {
  /**
   * A reconcile ended with the service object as the spec says (found so, created or updated;
   * or found unusable with nothing to fix, like an expired VM). Not for paused resources.
   */
  reconciled(cr: ManagedResource, at: Date): void;
  /**
   * A reconcile found the service object out of sync (gone, or differing from the spec) and its
   * create or update went through. Records the time since the resource's previous successful
   * reconcile in this process, when there was one for the same input (inputOf): the first
   * reconcile after a start or a failover records nothing, and neither does applying a changed
   * spec or a redeploy request (that is the user's change, not drift).
   */
  drifted(cr: ManagedResource, at: Date): void;
}

/** What the metrics read of a kind's informer: its cache, whether it has synced, its events. */
export type ResourceCache<R extends ManagedResource> = Pick<Informer<R>, "on" | "list" | "hasSynced">;

interface Tracked {
  kind: string;
  informer: ResourceCache<ManagedResource>;
  counts(cr: ManagedResource): boolean;
}

export interface Counts {
  exists: number;
  ready: number;
  synced: number;
}

export class ResourceMetrics {
  private readonly exists: Gauge<"kind">;
  private readonly ready: Gauge<"kind">;
  private readonly synced: Gauge<"kind">;
  private readonly firstReady: Histogram<"kind">;
  private readonly drift: Histogram<"kind">;
  private readonly kinds: Tracked[] = [];
  /** The counts of the current scrape: the three gauges' collect() share one walk of the caches. */
  private scrape: Map<string, Counts> | undefined;

  constructor(
    registry: Registry,
    private readonly now: () => Date = () => new Date(),
  ) {
    const registers = [registry];
    const collect = (gauge: Gauge<"kind">, field: keyof Counts) => {
      for (const [kind, counts] of this.counts()) gauge.set({ kind }, counts[field]);
    };
    this.exists = new Gauge({
      name: "agentcompute_managed_resource_exists",
      help: "Managed resources of a kind in this replica's cache",
      labelNames: ["kind"],
      registers,
      collect() {
        collect(this, "exists");
      },
    });
    this.ready = new Gauge({
      name: "agentcompute_managed_resource_ready",
      help: "Managed resources of a kind with Ready=True",
      labelNames: ["kind"],
      registers,
      collect() {
        collect(this, "ready");
      },
    });
    this.synced = new Gauge({
      name: "agentcompute_managed_resource_synced",
      help: "Managed resources of a kind whose last reconcile applied the current spec (see docs/metrics.md)",
      labelNames: ["kind"],
      registers,
      collect() {
        collect(this, "synced");
      },
    });
    this.firstReady = new Histogram({
      name: "agentcompute_managed_resource_first_time_to_readiness_seconds",
      help: "Time from a managed resource's creation until this process first saw it Ready=True (resources first seen never reconciled)",
      labelNames: ["kind"],
      buckets: READINESS_BUCKETS,
      registers,
    });
    this.drift = new Histogram({
      name: "agentcompute_managed_resource_drift_seconds",
      help: "Time since the previous successful reconcile when a managed resource was found out of sync with the service and put right; excludes restarts",
      labelNames: ["kind"],
      buckets: DRIFT_BUCKETS,
      registers,
    });
  }

  /**
   * Starts the metrics of one kind: its informer (subscribed here, before it starts, so the
   * initial list is seen) and the recorder its reconciler reports to. `counts`: which cached
   * resources are this process's to count (default all). A sharded replica's cache also holds a
   * fenced member's resources that another heir works on: counted by each heir, a failover
   * would count them twice in the sum over replicas.
   */
  track<R extends ManagedResource>(kind: string, informer: ResourceCache<R>, counts: (cr: R) => boolean = () => true): ResourceMetricsRecorder {
    this.kinds.push({ kind, informer: informer as unknown as ResourceCache<ManagedResource>, counts: counts as (cr: ManagedResource) => boolean });
    const labels = { kind };

    // uid -> creation time (ms), of resources first seen never reconciled and not Ready yet.
    const awaitingReady = new Map<string, number>();
    const firstSeen = (cr: ManagedResource) => {
      // No Ready condition at all: no reconcile has ended for it yet, so it has never been
      // Ready (crossplane's Synced=Unknown). A resource that already carries one may have been
      // Ready before a restart, a Connection outage and the restart after it: its "first" time
      // would be its age. Those are left out.
      if (condition(cr, ConditionType.Ready) === undefined) awaitingReady.set(cr.metadata.uid, creationMs(cr));
    };
    const maybeReady = (cr: ManagedResource) => {
      const created = awaitingReady.get(cr.metadata.uid);
      if (created === undefined || condition(cr, ConditionType.Ready)?.status !== "True") return;
      awaitingReady.delete(cr.metadata.uid);
      // Made Ready by another replica (the heir whose part of a fenced member's share it is).
      if (!counts(cr as R)) return;
      if (Number.isFinite(created)) this.firstReady.observe(labels, Math.max(0, (this.now().getTime() - created) / 1000));
    };
    informer.on("add", (cr) => {
      firstSeen(cr);
      maybeReady(cr);
    });
    informer.on("update", (cr) => maybeReady(cr));

    // uid -> the previous successful reconcile in this process, and the input it applied.
    const lastReconciled = new Map<string, { at: number; input: string }>();
    informer.on("delete", (cr) => {
      awaitingReady.delete(cr.metadata.uid);
      lastReconciled.delete(cr.metadata.uid);
    });

    return {
      reconciled: (cr, at) => {
        lastReconciled.set(cr.metadata.uid, { at: at.getTime(), input: inputOf(cr) });
      },
      drifted: (cr, at) => {
        const last = lastReconciled.get(cr.metadata.uid);
        const input = inputOf(cr);
        if (last !== undefined && last.input === input) this.drift.observe(labels, Math.max(0, (at.getTime() - last.at) / 1000));
        lastReconciled.set(cr.metadata.uid, { at: at.getTime(), input });
      },
    };
  }

  /**
   * exists / ready / synced per kind whose cache has synced (a cache still listing would
   * report a false 0: its kind is left out until then). One walk per scrape: prom-client calls
   * every collect() of a scrape in one synchronous pass, and the counts are dropped after it.
   */
  counts(): Map<string, Counts> {
    if (this.scrape !== undefined) return this.scrape;
    const out = new Map<string, Counts>();
    for (const { kind, informer, counts } of this.kinds) {
      if (!informer.hasSynced()) continue;
      const c: Counts = { exists: 0, ready: 0, synced: 0 };
      for (const cr of informer.list()) {
        if (!counts(cr)) continue;
        c.exists++;
        if (condition(cr, ConditionType.Ready)?.status === "True") c.ready++;
        if (isSynced(cr)) c.synced++;
      }
      out.set(kind, c);
    }
    this.scrape = out;
    queueMicrotask(() => {
      this.scrape = undefined;
    });
    return out;
  }
}

/**
 * Synced (crossplane's Synced=True: the last reconcile applied the current spec): the Ready
 * condition was written for the current generation; none of Reconciling=True (a transient
 * failure, or a wait for a dependency), Stalled=True (the spec was refused) and Drifted=True
 * (spec.managementPolicies leave out Update and the service differs) is set; and the resource
 * is not paused (`ReconcilePaused`: nothing is applied, as crossplane's
 * Synced=False/ReconcilePaused). A resource found unusable with nothing to fix (an expired VM
 * with keepAlive false: Ready=False, Reconciling=False, Stalled=False) is synced but not ready.
 */
export function isSynced(cr: ManagedResource): boolean {
  const ready = condition(cr, ConditionType.Ready);
  if (ready === undefined || ready.observedGeneration !== cr.metadata.generation) return false;
  if (ready.reason === PAUSED_REASON) return false;
  const set = (type: string) => condition(cr, type)?.status === "True";
  return !set(ConditionType.Reconciling) && !set(ConditionType.Stalled) && !set(ConditionType.Drifted);
}

/**
 * What the user asked of the service object: the spec (its generation) and the annotations
 * that ask for a write without changing it (a redeploy, an adoption). A write after any of
 * them changed applies the user's change; only a write for the same input puts drift right.
 */
function inputOf(cr: ManagedResource): string {
  const a = cr.metadata.annotations;
  return `${cr.metadata.generation ?? ""}\n${a?.[Annotations.redeployAt] ?? ""}\n${a?.[Annotations.externalId] ?? ""}`;
}

function condition(cr: ManagedResource, type: string) {
  return cr.status?.conditions?.find((c) => c.type === type);
}

function creationMs(cr: ManagedResource): number {
  return Date.parse(cr.metadata.creationTimestamp ?? "");
}
