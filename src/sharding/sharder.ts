// The sharder: the elected leader's role in sharded mode. It watches every sharded object
// (all namespaces the operator watches, cached as metadata, the connectionRef and the id of a
// running VM), keeps the ring of live members, and labels each object with its owner, moving
// objects with the drain handshake of src/sharding/assignment.ts. One Controller per kind gives it a work
// queue with dedup, retries and backoff. It places the Sandboxes once their own list is in and
// the other kinds once every list is; a membership change enqueues everything being placed.
import type { Logger } from "pino";
import { DEFAULT_CONNECTION, GROUP, VERSION, kindNames } from "../api/names.js";
import type { SandboxRun } from "../api/index.js";
import { heldConnection } from "../runs/template-vm.js";
import { errorMessage } from "../lib/errors.js";
import { Controller, RetryNoLaterThan, type Request, type Result } from "../runtime/controller.js";
import { Informer } from "../runtime/informer.js";
import { isConflict, isNotFound, resourcePath, type KubeClient, type KubeObject } from "../runtime/kube-client.js";
import type { Metrics } from "../runtime/metrics.js";
import { decide, patchFor, placementOrder, unrenewed, type Placeable } from "./assignment.js";
import { OWNER_LABEL } from "./labels.js";
import { Ring, objectKey } from "./ring.js";
import { Succession, type SuccessionView } from "./succession.js";
import { UrgentMoves } from "./urgent.js";

/** How soon a failed placement of a Sandbox or template run whose running VM nobody renews is tried again, at the latest. */
const UNRENEWED_PLACEMENT_RETRY_MS = 2_000;

/** A sharded kind: its plural and cluster-wide collection path. */
export interface ShardedKind {
  kind: string;
  plural: string;
  path: string;
}

/** The path of one object of a sharded kind (every one is of the operator's group and version). */
export function objectPath(kind: ShardedKind, namespace: string, name: string): string {
  return resourcePath({ group: GROUP, version: VERSION, plural: kind.plural, namespace, name });
}

export function collectionPath(kind: ShardedKind, namespace: string): string {
  return resourcePath({ group: GROUP, version: VERSION, plural: kind.plural, namespace });
}

/** What the sharder keeps of an object. */
export interface ShardedObject extends KubeObject {
  metadata: KubeObject["metadata"] & { labels?: Record<string, string>; deletionTimestamp?: string };
  spec?: { connectionRef?: { name?: string } };
  /**
   * A VM only the object's owner renews (runningVM): a Sandbox's, a template run's not given
   * back. Renewals are due while it runs, so its moves go first.
   */
  status?: { vmId?: string };
}

export interface SharderOptions {
  client: KubeClient;
  logger: Logger;
  metrics: Metrics;
  namespaces: readonly string[];
  kinds: readonly ShardedKind[];
  /**
   * Workers per kind (default 16). Nothing is reconciled before it is placed, and a cold start
   * places thousands of objects while the API server is busiest: placing is one PATCH each, so
   * the workers in flight set the pace.
   */
  concurrency?: number;
  /**
   * A cache of `kind` the replica keeps anyway, with every object's metadata, labels,
   * `spec.connectionRef` and status (the lookups' reference view, src/controllers/reference-
   * view.ts): the sharder reads it instead of listing and watching the kind a second time. Not
   * for SandboxRuns, whose Connection the sharder reads as the run holds it. Default: none, the
   * sharder keeps its own slim cache of every kind.
   */
  sharedInformer?(kind: ShardedKind): Informer<ShardedObject> | undefined;
  /** How long the other moves wait for the urgent ones at most (default 10 s; tests set it long). */
  urgentMaxWaitMs?: number;
  /**
   * An object of `kind` no longer uses Connection `connection` of `namespace`: deleted, moved to
   * another Connection, or (a run) its VM given back. A deleting Connection waits for its users
   * (usersOf), and its controller runs on the leader, which sees every replica's objects here only.
   */
  onLetGo?(kind: ShardedKind, namespace: string, connection: string): void;
}

/**
 * Keep the metadata that matters, the connectionRef and the id of a VM only the owner renews
 * (runningVM): a few hundred bytes per object. A SandboxRun's connectionRef is the Connection
 * it holds, if any (heldConnection): none once its VM is given back, or with a sandboxRef.
 */
function slim(o: ShardedObject, kind: ShardedKind): ShardedObject {
  const m = o.metadata;
  const vmId = runningVM(kind, o);
  const connectionRef = isRuns(kind) ? runConnectionRef(o as unknown as SandboxRun) : o.spec?.connectionRef;
  return {
    apiVersion: o.apiVersion,
    kind: o.kind,
    metadata: {
      name: m.name,
      namespace: m.namespace,
      uid: m.uid,
      resourceVersion: m.resourceVersion,
      ...(m.labels !== undefined && { labels: m.labels }),
      ...(m.deletionTimestamp !== undefined && { deletionTimestamp: m.deletionTimestamp }),
    },
    ...(connectionRef !== undefined && { spec: { connectionRef } }),
    ...(vmId !== undefined && { status: { vmId } }),
  };
}

/** One sharded kind in the sharder: its cache (slim, or the replica's shared one) and the work queue that places its objects. */
interface Part {
  kind: ShardedKind;
  informer: Informer<ShardedObject>;
  /** The replica's cache: started and stopped by the manager, not by the sharder. */
  shared: boolean;
  controller: Controller;
}

const isRuns = (kind: ShardedKind): boolean => kind.plural === kindNames.sandboxRun.plural;

function runConnectionRef(run: SandboxRun): { name: string } | undefined {
  const name = heldConnection(run);
  return name === undefined ? undefined : { name };
}

/** The Connection a slim object uses; a SandboxRun's only while slim() kept one (a template's, VM not given back). */
function usedConnection(kind: ShardedKind, o: ShardedObject): string | undefined {
  if (isRuns(kind)) return o.spec?.connectionRef?.name;
  return o.spec?.connectionRef?.name ?? DEFAULT_CONNECTION;
}

const isSandboxes = (kind: ShardedKind): boolean => kind.plural === kindNames.sandbox.plural;

/**
 * The VM an object keeps running that only its owner renews: a Sandbox's, and a template
 * run's until the run gives it back (keepRunVM renews it as a Sandbox's, for as long as the run
 * runs). A sandboxRef run's vmId is its Sandbox's VM, renewed with that.
 * Of a full object (slim's input); a slim copy keeps just this as its vmId.
 */
function runningVM(kind: ShardedKind, o: ShardedObject): string | undefined {
  if (isSandboxes(kind)) return o.status?.vmId;
  if (isRuns(kind) && heldConnection(o as unknown as SandboxRun) !== undefined) return o.status?.vmId;
  return undefined;
}

/** What placement order needs of a slim copy (a run's is always one: it is never read from a shared cache). */
const placeable = (kind: ShardedKind, o: ShardedObject): Placeable => ({ labels: o.metadata.labels, running: (isSandboxes(kind) || isRuns(kind)) && o.status?.vmId !== undefined });

export class Sharder {
  private readonly log: Logger;
  private readonly parts: Part[] = [];
  /**
   * The parts whose caches are in and whose workers have started: a membership change looks
   * at their objects again, and once it holds every part the Connections' users are known.
   */
  private readonly placing = new Set<Part>();
  private ring: Ring = new Ring([]);
  private live: ReadonlySet<string> = new Set();
  /** The live members the ring places objects on (setMembers). */
  private takingOn: ReadonlySet<string> = new Set();
  /** Who works on a gone owner's objects until they move (its heirs, named by its fence). */
  private readonly succession = new Succession();
  /** Sandboxes and template runs with a running VM nobody renews (a gone replica's, or let go): placed before anything of any other kind. */
  private readonly urgent: UrgentMoves;
  private stopped = false;
  private urgentSince: { at: number; sandboxes: number; runs: number } | undefined;
  /** The sharder's own handlers on the caches, removed on stop (a shared cache outlives it). */
  private readonly unsubscribers: Array<() => void> = [];

  constructor(private readonly o: SharderOptions) {
    this.log = o.logger.child({ role: "sharder" });
    this.urgent = new UrgentMoves(o.urgentMaxWaitMs);
    for (const kind of o.kinds) {
      const shared = isRuns(kind) ? undefined : o.sharedInformer?.(kind);
      const informer =
        shared ??
        new Informer<ShardedObject>(o.client, {
          path: kind.path,
          namespaces: o.namespaces.length > 0 ? [...o.namespaces] : undefined,
          logger: o.logger,
          metrics: o.metrics,
          view: { name: "sharder", transform: (o) => slim(o, kind) },
        });
      const controller = new Controller({
        name: `sharder-${kind.plural}`,
        concurrency: o.concurrency ?? 16,
        // Its priority lane holds most placements (a gone owner's objects, new ones): a kept
        // worker would be a 17th one; the running VMs go first by their own rule.
        priorityWorker: false,
        logger: o.logger,
        metrics: o.metrics,
        reconciler: { reconcile: (req, ctx) => this.place(kind, informer, req, ctx.priority) },
      });
      // New objects, and label changes (an owner's acknowledgement); status writes are not news.
      // A Sandbox or template run its owner let go with a running VM goes on the priority lane:
      // its renewals wait for the next owner, while a cold start may queue thousands of placements.
      const news = (obj: ShardedObject, old: ShardedObject | undefined, event: string | undefined): boolean =>
        event === "add" || (event === "update" && JSON.stringify(obj.metadata.labels ?? {}) !== JSON.stringify(old?.metadata.labels ?? {}));
      const urgent = (obj: ShardedObject): boolean => this.unrenewed(kind, obj);
      controller.watch(informer, undefined, { filter: (obj, old, event) => news(obj, old, event) && !urgent(obj) });
      controller.watch(informer, undefined, { filter: (obj, old, event) => news(obj, old, event) && urgent(obj), priority: true });
      // Its move may be waiting behind the urgent set already (queued by a membership change
      // while its owner was still live): it goes now.
      this.unsubscribers.push(
        informer.on("update", (obj, old) => {
          if (urgent(obj)) this.urgent.wake();
          this.letGo(kind, old, obj);
        }),
        informer.on("delete", (obj) => this.letGo(kind, obj, undefined)),
      );
      this.parts.push({ kind, informer, shared: shared !== undefined, controller });
    }
  }

  /**
   * Caches synced, then workers; resolves once placing has begun. The Sandboxes are placed as
   * soon as their own cache is in, while the other kinds are still being listed: a new
   * leader's sharder starts with the share of the old leader when that was killed, and those
   * running VMs' renewals wait for their moves, which need nothing but the Sandboxes and the
   * ring (set before start). Where the other kinds hold more objects than the Sandboxes,
   * their lists would otherwise hold those moves up.
   */
  async start(): Promise<void> {
    const lists = new Map(this.parts.map((p) => [p, p.informer.start()]));
    // Not the runs, whose VMs are as urgent: a run per job, their list may be the longest.
    const first = this.parts.filter((p) => isSandboxes(p.kind));
    const rest = this.parts.filter((p) => !first.includes(p));
    await Promise.all(first.map((p) => lists.get(p)));
    await this.startPlacing(first);
    await Promise.all(lists.values());
    await this.startPlacing(rest);
    this.log.info({ kinds: this.parts.map((p) => p.kind.plural) }, "sharder started");
  }

  /**
   * The caches' first adds queued every object as it came. The order of placement (a gone
   * replica's running VMs first, and the other moves held until they are done) is settled
   * before a worker takes any key: a new leader's sharder, when the old leader was killed
   * with its share, would otherwise place that share in any order.
   */
  private async startPlacing(parts: readonly Part[]): Promise<void> {
    if (parts.length === 0) return;
    this.log.info({ kinds: parts.map((p) => p.kind.plural) }, "cache synced; placing");
    for (const p of parts) this.placing.add(p);
    this.enqueue(parts);
    await Promise.all(parts.map((p) => p.controller.start()));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.placing.clear();
    this.urgentSince = undefined;
    this.urgent.set([]); // nothing waits on moves that will not be made here
    // A placement still in flight after the grace is let go, and need not hold the leader Lease
    // as an abandoned reconcile does: each is one PATCH at the resourceVersion it was decided
    // on, so landing late it is a 409, or the decision this leader would have made just before
    // stopping, which the next leader reads from its watch like any other.
    // Its handlers first: a shared cache goes on after the sharder, and would otherwise report
    // users letting go to a Connection controller that stops with it.
    for (const unsubscribe of this.unsubscribers.splice(0)) unsubscribe();
    await Promise.all(this.parts.map((p) => p.controller.stop(5_000).catch(() => undefined)));
    await Promise.all(this.parts.filter((p) => !p.shared).map((p) => p.informer.stop().catch(() => undefined)));
  }

  /**
   * The live members changed, or which of them take objects on: a new ring of those that do
   * (a stopping member, or one gone awaiting its fence, is given nothing: its objects wait for
   * it to leave, and move then), and every object looked at again.
   */
  setMembers(members: readonly string[], eligible: readonly string[] = members): void {
    const placing = eligible.length > 0 ? eligible : members;
    this.ring = new Ring(placing);
    this.live = new Set(members);
    this.takingOn = new Set(placing);
    this.enqueue([...this.placing]);
  }

  /** The member Leases changed: a fenced member's heirs are known (set before setMembers, from the same view). */
  setSuccession(view: SuccessionView): void {
    this.succession.set(view);
  }

  /**
   * Resources (kind/name) of the namespace that use a Connection, over all replicas (the
   * Connection controller runs on the leader only). Throws until the caches are synced, so
   * that a Connection is never released for lack of knowing its users.
   */
  usersOf(namespace: string, connection: string): string[] {
    if (this.placing.size < this.parts.length) {
      throw new Error("the sharder's caches are not synced yet; the Connection's users are not known");
    }
    const out: string[] = [];
    for (const { kind, informer } of this.parts) {
      for (const obj of informer.list(namespace)) {
        if (usedConnection(kind, obj) === connection) out.push(`${kind.kind}/${obj.metadata.name ?? ""}`);
      }
    }
    return out;
  }

  /** `before` used a Connection that `after` (undefined: deleted) does not: onLetGo. */
  private letGo(kind: ShardedKind, before: ShardedObject, after: ShardedObject | undefined): void {
    const used = usedConnection(kind, before);
    if (used === undefined || (after !== undefined && usedConnection(kind, after) === used)) return;
    this.o.onLetGo?.(kind, before.metadata.namespace ?? "", used);
  }

  /**
   * The replicas named by some object's owner label, and the fenced ones its worker is found
   * through (their fences name the heirs); undefined until every cache is synced (an owner not
   * listed yet must not look like none).
   */
  owners(): ReadonlySet<string> | undefined {
    if (this.placing.size < this.parts.length) return undefined;
    const out = new Set<string>();
    for (const { kind, informer } of this.parts) {
      for (const obj of informer.list()) {
        const owner = obj.metadata.labels?.[OWNER_LABEL];
        if (owner === undefined) continue;
        out.add(owner);
        if (this.live.has(owner)) continue;
        for (const m of this.succession.chain(owner, objectKey(kind.plural, obj.metadata.namespace ?? "", obj.metadata.name ?? ""))) out.add(m);
      }
    }
    return out;
  }

  /** Every object's owner as the sharder's cache knows it (for metrics and tests). */
  shares(): Map<string, number> {
    const out = new Map<string, number>();
    for (const { informer } of this.parts) {
      for (const obj of informer.list()) {
        const owner = obj.metadata.labels?.[OWNER_LABEL] ?? "";
        out.set(owner, (out.get(owner) ?? 0) + 1);
      }
    }
    return out;
  }

  /**
   * Every object of `parts` is looked at again, those of a replica that is gone first
   * (placementOrder), and of those the ones with a running VM before anything of any kind
   * (UrgentMoves: set anew only when the Sandboxes are among the parts, as their placing
   * starts and at a membership change, which looks at every part placing: a template run's
   * VMs are among them then. The runs' own start only puts theirs on the runs' priority lane.)
   */
  private enqueue(parts: readonly Part[]): void {
    const urgent: string[] = [];
    let runs = 0;
    const queues = parts.map(({ kind, informer, controller }) => {
      const objects = informer.list().map((o) => ({ request: { namespace: o.metadata.namespace ?? "", name: o.metadata.name ?? "" }, ...placeable(kind, o) }));
      const order = placementOrder(objects, this.live);
      for (const { obj, priority } of order) {
        if (!priority || !obj.running) continue;
        urgent.push(objectKey(kind.plural, obj.request.namespace, obj.request.name));
        if (isRuns(kind)) runs++;
      }
      return { controller, order };
    });
    if (parts.some((p) => isSandboxes(p.kind))) {
      this.urgent.set(urgent);
      // A failover's critical path, in the log: how many VMs wait for a move, and (place) how long they waited.
      // Its text as before the template runs were counted (docs/performance.md quotes it): they are a field of their own.
      this.urgentSince = urgent.length > 0 ? { at: Date.now(), sandboxes: urgent.length - runs, runs } : undefined;
      if (urgent.length > 0) this.log.info({ sandboxes: urgent.length - runs, runs }, "moving the Sandboxes with a running VM that nobody renews first (of gone replicas, or let go)");
    }
    for (const { controller, order } of queues) for (const { obj, priority } of order) controller.enqueue(obj.request, { priority });
  }

  private async place(kind: ShardedKind, informer: Informer<ShardedObject>, req: Request, priority: boolean): Promise<Result | void> {
    const key = objectKey(kind.plural, req.namespace, req.name);
    // A running VM nobody renews (let go for a move, its owner gone) does not wait for the
    // urgent moves: it is one of them, whether or not it was counted when they were set.
    const epoch = await this.urgent.before(key, () => {
      const obj = informer.get(req.namespace, req.name);
      return obj !== undefined && this.unrenewed(kind, obj);
    });
    try {
      const result = await this.placeNow(kind, informer, req).catch((err: unknown) => {
        // A running VM nobody renews: its placement is tried again within seconds, on the
        // priority lane, not after a backoff grown through an API server outage (the VM runs
        // out meanwhile; unsharded, the outage would not have stopped its renewals).
        const obj = informer.get(req.namespace, req.name);
        if (obj !== undefined && this.unrenewed(kind, obj)) throw new RetryNoLaterThan(err, UNRENEWED_PLACEMENT_RETRY_MS, true);
        throw err;
      });
      // Changed meanwhile: decided again on the newer object, in the lane it came in.
      return result === "changed" ? { requeue: true, priority } : undefined;
    } finally {
      this.urgent.done(key, epoch);
      if (this.urgentSince !== undefined && this.urgent.size === 0) {
        const { at, ...counts } = this.urgentSince;
        this.log.info({ ...counts, ms: Date.now() - at }, "the Sandboxes with a running VM have moved (or their 10 s head start is over)");
        this.urgentSince = undefined;
      }
    }
  }

  /** A Sandbox or template run with a running VM nobody renews: no owner, or a gone one (on the members now). */
  private unrenewed(kind: ShardedKind, obj: ShardedObject): boolean {
    return unrenewed(placeable(kind, obj), this.live);
  }

  private async placeNow(kind: ShardedKind, informer: Informer<ShardedObject>, req: Request): Promise<"changed" | void> {
    // Leadership lost (stop released the moves waiting behind the urgent ones): a move decided
    // on this replica's view now would be a non-leader's.
    if (this.stopped) return;
    const obj = informer.get(req.namespace, req.name);
    if (obj === undefined) return;
    const key = objectKey(kind.plural, req.namespace, req.name);
    // A gone owner's object goes to the replica working on it already (its heir, named by the
    // fence: succession.ts), not to whomever the ring names now: moving it elsewhere would start
    // a second worker beside the heir. A later pass drains it to the ring's choice if that differs.
    const owner = obj.metadata.labels?.[OWNER_LABEL];
    const heir = owner !== undefined && !this.live.has(owner) ? this.succession.worker(owner, key) : undefined;
    const desired = heir !== undefined && this.live.has(heir) ? heir : this.ring.owner(key);
    const decision = decide(obj.metadata.labels, desired, this.live, this.takingOn);
    const patch = patchFor(decision, obj.metadata.resourceVersion);
    if (patch === undefined) return;
    const path = objectPath(kind, req.namespace, req.name);
    try {
      await this.o.client.patch(path, patch, "merge", { discardResult: true });
      this.log.debug({ kind: kind.kind, namespace: req.namespace, name: req.name, ...decision }, "shard placement");
    } catch (err) {
      if (isNotFound(err)) return;
      // Changed meanwhile (acknowledged, or written by its owner).
      if (isConflict(err)) return "changed";
      this.log.warn({ err: errorMessage(err), kind: kind.kind, namespace: req.namespace, name: req.name }, "shard placement failed");
      throw err;
    }
  }
}
