// The replica's side of sharding: its informers of the sharded kinds select its own share
// (OWNER_LABEL=<identity>), and each sharded controller's reconciler is wrapped so that an
// object marked for draining is let go instead of reconciled.
//
// Why in the reconciler: the work queue never hands one key to two workers, so when the
// wrapper runs for a key, no reconcile of that object is in flight on this replica. The
// acknowledgement (both labels removed, on the resourceVersion seen) is thus the promise that
// this replica has stopped working on the object; from then on its cached copy carries the
// drain label until the watch drops it, and every reconcile of it ends in the wrapper.
import type { Logger } from "pino";
import { errorMessage } from "../lib/errors.js";
import { RetryNoLaterThan, type Controller, type ReconcileContext, type Reconciler, type Request, type Result } from "../runtime/controller.js";
import type { Informer } from "../runtime/informer.js";
import { isConflict, isNotFound, type KubeClient, type KubeObject } from "../runtime/kube-client.js";
import { releasePatch } from "./assignment.js";
import { DRAIN_LABEL, OWNER_LABEL, ownerSelector, ownersSelector } from "./labels.js";
import { MembershipLapsed } from "./membership.js";
import { objectKey } from "./ring.js";
import { collectionPath, objectPath, type ShardedKind } from "./sharder.js";
import { AT_WORK_ON_INHERITED, Succession, type SuccessionView } from "./succession.js";

type Labelled = KubeObject & { metadata: { labels?: Record<string, string>; finalizers?: string[] } };

/** What the replica needs of an inventory (src/managed/inventory.ts): to be told of an arrival. */
export interface ArrivalSink {
  arrived(uid: string, at: number): void;
}

/**
 * The inventory in which an object's service objects are found by its crash-safety marker:
 * null when it has none (a run on a Sandbox allocates nothing), undefined when it cannot be
 * reached yet (its Connection is not usable).
 */
export type InventoryLookup = (kind: ShardedKind, obj: Labelled) => ArrivalSink | null | undefined;

export interface ReplicaShardOptions {
  identity: string;
  logger: Logger;
  /** The sharded kinds, by the name of the controller that reconciles them. */
  controllers: ReadonlyMap<string, ShardedKind>;
  /**
   * Collection paths whose informers select the share even when asked for without a selector
   * (kinds nothing else looks up: SandboxRuns). The other kinds' lookups (a Sandbox's Skills,
   * a deployment's Agent, a run's Sandbox) must see every object, so their controllers ask for
   * the share explicitly (src/controllers/kind.ts).
   */
  selectedByDefault: ReadonlySet<string>;
  /** Whether this replica's membership is current (its Lease renewed within the deadline); default yes. */
  mayWork?(): boolean;
  /**
   * Says (on its member Lease) which fenced members' objects it works on; resolves once said.
   * Work on a newly inherited member's objects starts only then. Default: nothing to say.
   */
  publishInherits?(inherited: readonly string[]): Promise<void>;
}

/** What the replica side needs of the manager (bound after the manager exists). */
export interface ReplicaManager {
  readonly client: KubeClient;
  informerFor<T extends KubeObject>(path: string, opts?: { labelSelector?: string }): Informer<T>;
}

export class ReplicaShard {
  readonly selector: string;
  private manager: ReplicaManager | undefined;
  private inventoryOf: InventoryLookup | undefined;
  /** Objects that arrived from another owner (`kind/ns/name` -> when), not yet reconciled here. */
  private readonly arrived = new Map<string, number>();
  /** The sharded controllers, by name, and the objects each set aside while this replica could not work. */
  private readonly controllers = new Map<string, Controller>();
  private readonly setAside = new Map<string, Map<string, Request>>();
  /** Who works on what the owner labels name (src/sharding/succession.ts). */
  private readonly succession = new Succession();
  /** Fenced members whose objects it works on (their heirs' ring permitting). */
  private inherited: readonly string[] = [];
  /** Fenced members whose owner labels its caches select besides its own (those, or about to be). */
  private selected: readonly string[] = [];
  /** The caches' last change of selector, listed once it resolves. */
  private selecting: Promise<void> = Promise.resolve();
  /** The member Leases as last seen (a view waits here while what it adds is being said). */
  private latest: SuccessionView | undefined;
  /** Fenced members this replica has said it works for (or is saying: see setSuccession). */
  private said: ReadonlySet<string> = new Set();
  /** Lists being said: views wait until they are. */
  private saying = 0;
  /** Caches listing again under a new selector: what they hold is not yet all there is. */
  private reselecting = 0;

  constructor(private readonly o: ReplicaShardOptions) {
    this.selector = ownerSelector(o.identity);
  }

  bind(manager: ReplicaManager): void {
    this.manager = manager;
  }

  /** Where a moved-in object's service objects are looked up (the Connection pool's inventories). */
  setInventories(lookup: InventoryLookup): void {
    this.inventoryOf = lookup;
  }

  /** The manager's defaultLabelSelector. */
  defaultLabelSelector(path: string): string | undefined {
    return this.o.selectedByDefault.has(path) ? this.selector : undefined;
  }

  /** The manager's wrapReconciler. */
  wrap(controller: string, inner: Reconciler): Reconciler {
    const kind = this.o.controllers.get(controller);
    if (kind === undefined) return inner;
    return {
      reconcile: (req, ctx) => this.reconcile(controller, kind, inner, req, ctx),
    };
  }

  /** The membership is current (joined): the objects set aside meanwhile are looked at, first. */
  resume(): void {
    for (const [name, requests] of this.setAside) {
      const controller = this.controllers.get(name);
      for (const req of requests.values()) controller?.enqueue(req, { priority: true });
    }
    this.setAside.clear();
  }

  /**
   * The member Leases changed. A member fenced with this replica among its heirs (directly, or
   * through an heir that died too): its caches select that member's owner label as well, and
   * the objects the heirs' ring gives this replica are worked on at once, ahead of the backlog,
   * as objects that arrived from another owner (they did), without waiting for the sharder to
   * relabel them.
   */
  setSuccession(view: SuccessionView): void {
    this.latest = view;
    const publish = this.o.publishInherits;
    if (publish !== undefined) {
      const probe = new Succession();
      probe.set(view);
      const inherited = probe.inheritedBy(this.o.identity);
      if (inherited.some((m) => !this.said.has(m))) {
        // Said first, worked on then: a restarted process of a member it inherits from must see
        // it. Its caches list the new labels meanwhile (caching is not working on them).
        this.said = new Set([...this.said, ...inherited]);
        this.saying++;
        const cached = this.select([...new Set([...this.selected, ...inherited])].sort());
        const said = publish([...this.said]).then(() => {
          this.saying--;
          if (this.saying === 0 && this.latest !== undefined) this.settle(this.latest);
        });
        void Promise.all([cached, said]).then(() => {
          if (this.inherited.length > 0) this.o.logger.info({ inherited: this.inherited }, AT_WORK_ON_INHERITED);
        });
        return;
      }
      if (this.saying > 0) return; // the latest view is applied once that is said
    }
    this.settle(view);
  }

  /** Applies a view, and says so if it inherits less than it has said (said no longer only once it stopped). */
  private settle(view: SuccessionView): void {
    this.apply(view);
    const publish = this.o.publishInherits;
    if (publish !== undefined && this.inherited.length !== this.said.size) {
      this.said = new Set(this.inherited);
      void publish(this.inherited);
    }
  }

  private apply(view: SuccessionView): void {
    const before = new Map<string, string | undefined>();
    for (const kind of this.kinds()) for (const obj of this.foreign(kind)) before.set(arrivalKey(kind, obj), this.workerOf(kind, obj));
    this.succession.set(view);
    this.inherited = this.succession.inheritedBy(this.o.identity);
    const cached = this.select(this.inherited);
    // Without a Lease to say it on (tests), at work once cached.
    if (this.o.publishInherits === undefined && this.inherited.length > 0) void cached.then(() => this.o.logger.info({ inherited: this.inherited }, AT_WORK_ON_INHERITED));
    // Objects cached already that became this replica's now (an heir of an heir died): they
    // arrive now, whenever the watch brought them (their worker until now may have written since).
    for (const kind of this.kinds()) {
      const controller = this.controllers.get(kind.controller);
      for (const obj of this.foreign(kind)) {
        if (this.workerOf(kind, obj) !== this.o.identity || before.get(arrivalKey(kind, obj)) === this.o.identity) continue;
        if (controller !== undefined) this.arrive(kind, obj, controller);
      }
    }
  }

  /** Worked on by this replica from now on, ahead of its backlog; told to its inventory if reconciled before (a finalizer). */
  private arrive(kind: ShardedKind, obj: Labelled, controller: Controller): void {
    if ((obj.metadata.finalizers ?? []).length > 0) this.arrived.set(arrivalKey(kind, obj), Date.now());
    controller.enqueue({ namespace: obj.metadata.namespace ?? "", name: obj.metadata.name ?? "" }, { priority: true });
  }

  /** Its caches select these fenced members' labels besides its own; resolves once they list under that. */
  private select(members: readonly string[]): Promise<void> {
    if (members.join(",") === this.selected.join(",")) return this.selecting;
    this.o.logger.info({ inherited: members, before: this.selected }, "shard succession: selecting the owner labels of fenced members whose heir this replica is");
    this.selected = members;
    const selector = ownersSelector([this.o.identity, ...members]);
    this.selecting = Promise.all(this.kinds().map((kind) => this.reselect(this.own(kind), selector))).then(() => undefined);
    return this.selecting;
  }

  private reselect(informer: Informer<Labelled>, selector: string): Promise<void> {
    this.reselecting++;
    return informer.setLabelSelector(selector).finally(() => this.reselecting--);
  }

  /** The sharded kinds whose controllers are wired, with their controller's name. */
  private kinds(): Array<ShardedKind & { controller: string }> {
    const out: Array<ShardedKind & { controller: string }> = [];
    for (const name of this.controllers.keys()) {
      const kind = this.o.controllers.get(name);
      if (kind !== undefined) out.push({ ...kind, controller: name });
    }
    return out;
  }

  /** Cached objects of `kind` labelled for another owner (inherited, or on their way out of the cache). */
  private foreign(kind: ShardedKind): Labelled[] {
    return this.own(kind)
      .list()
      .filter((o) => o.metadata.labels?.[OWNER_LABEL] !== this.o.identity);
  }

  /**
   * Whether this replica works on `obj` of the collection `path` now (see workerOf): its cache
   * also holds a fenced member's objects that other heirs work on. True for a kind that is not
   * sharded.
   */
  worksOn(path: string, obj: Labelled): boolean {
    for (const kind of this.o.controllers.values()) if (kind.path === path) return this.workerOf(kind, obj) === this.o.identity;
    return true;
  }

  /** The replica that works on `obj` now: its owner, or the owner's heir once the owner is fenced. */
  private workerOf(kind: ShardedKind, obj: Labelled): string | undefined {
    const labels = obj.metadata.labels;
    const owner = labels?.[OWNER_LABEL];
    if (owner === this.o.identity) return owner;
    return this.succession.worker(owner, objectKey(kind.plural, obj.metadata.namespace ?? "", obj.metadata.name ?? ""));
  }

  /**
   * Whether any object carries this replica's owner label (or one it inherits), as its own
   * informers (synced before it joins) hold them: no API call, and a lag only makes the answer
   * yes for longer. Yes while one of them has not synced, or is listing under a new selector.
   */
  ownsAny(): boolean {
    if (this.reselecting > 0) return true;
    for (const name of this.controllers.keys()) {
      const kind = this.o.controllers.get(name);
      if (kind === undefined) continue;
      const own = this.own(kind);
      if (!own.hasSynced() || own.list().length > 0) return true;
    }
    return false;
  }

  /** The manager's onController: a drain label brings the object to the wrapper at once. */
  watch(controller: Controller): void {
    const kind = this.o.controllers.get(controller.name);
    if (kind === undefined) return;
    this.controllers.set(controller.name, controller);
    const own = this.own(kind);
    // Wired after a succession was seen: its cache selects what the others do.
    if (this.selected.length > 0) void this.reselect(own, ownersSelector([this.o.identity, ...this.selected]));
    const request = (obj: Labelled): Request => ({ namespace: obj.metadata.namespace ?? "", name: obj.metadata.name ?? "" });
    const enqueue = (obj: Labelled): void => {
      if (obj.metadata.labels?.[DRAIN_LABEL] !== undefined) controller.enqueue(request(obj), { priority: true });
    };
    own.on("add", (obj) => {
      // Reconciled before (it has a finalizer): it comes from another owner, who may have
      // created its service object just before letting go or dying. It goes ahead of this
      // replica's backlog: nobody has worked on it since it left, and a Sandbox's renewal may
      // be due.
      if ((obj.metadata.finalizers ?? []).length > 0) {
        this.arrived.set(arrivalKey(kind, obj), Date.now());
        controller.enqueue(request(obj), { priority: true });
      }
      enqueue(obj);
    });
    own.on("update", (obj, old) => {
      // Relabelled to this replica while its cache held it already (inherited, or an heir's
      // chain ended): no add comes. It arrives now, whenever it was first cached: another
      // replica may have worked on it meanwhile.
      if (this.workerOf(kind, obj) === this.o.identity && this.workerOf(kind, old) !== this.o.identity) this.arrive(kind, obj, controller);
      enqueue(obj);
    });
    own.on("delete", (obj) => this.arrived.delete(arrivalKey(kind, obj)));
  }

  private own(kind: ShardedKind): Informer<Labelled> {
    if (this.manager === undefined) throw new Error("sharding: replica not bound to a manager");
    return this.manager.informerFor<Labelled>(kind.path, { labelSelector: this.selector });
  }

  private async reconcile(controller: string, kind: ShardedKind, inner: Reconciler, req: Request, ctx: ReconcileContext): Promise<Result | void> {
    const obj = this.own(kind).get(req.namespace, req.name);
    if (obj === undefined) return inner.reconcile(req, ctx); // gone: the reconciler forgets it
    // Its own, or inherited from a fenced owner with this replica as the heir; an object of
    // another worker (a fenced owner's other heirs') is never worked on.
    if (this.workerOf(kind, obj) !== this.o.identity) return;
    // Not joined yet, or its membership in doubt (a renewal overdue: after a stall, the queue's
    // timers fire before the renewal is tried): the share may be someone else's by now. Set
    // aside until it joins (resume), not polled: a fenced identity may wait a while.
    if (this.o.mayWork?.() === false) return this.putAside(controller, req);
    try {
      return await this.reconcileOwn(kind, inner, obj, req, ctx);
    } catch (err) {
      // A write refused by the membership's gate: it lapsed mid-reconcile. Not a failure of the
      // object's: set aside as above, rather than retried (and reported) with backoff.
      if (!lapsed(err)) throw err;
      // Current again already (a renewal answered late resumed the set-aside objects while this
      // reconcile waited): if it were set aside now, nothing would bring it back. Again at once.
      if (this.o.mayWork?.() !== false) return { requeue: true, priority: true };
      ctx.log.info("the shard membership lapsed mid-reconcile; set aside until it is current");
      return this.putAside(controller, req);
    }
  }

  private putAside(controller: string, req: Request): void {
    const aside = this.setAside.get(controller) ?? new Map<string, Request>();
    aside.set(`${req.namespace}/${req.name}`, req);
    this.setAside.set(controller, aside);
  }

  private async reconcileOwn(kind: ShardedKind, inner: Reconciler, obj: Labelled, req: Request, ctx: ReconcileContext): Promise<Result | void> {
    const labels = obj.metadata.labels ?? {};
    if (labels[DRAIN_LABEL] !== undefined) {
      const released = await this.release(kind, obj, req, ctx.log);
      if (released !== "failed") return released;
      // Still its owner (the sharder waits for the acknowledgement): its work, a Sandbox's
      // renewal, must not wait for the release. Tried again within a second either way.
      let result: Result | void;
      try {
        result = await this.work(kind, inner, obj, req, ctx);
      } catch (err) {
        throw err instanceof RetryNoLaterThan && err.ms <= RELEASE_RETRY_MS ? err : new RetryNoLaterThan(err, RELEASE_RETRY_MS, true);
      }
      const after = result?.requeueAfterMs;
      return { requeueAfterMs: after !== undefined && after > 0 ? Math.min(after, RELEASE_RETRY_MS) : RELEASE_RETRY_MS, priority: true };
    }
    return this.work(kind, inner, obj, req, ctx);
  }

  private work(kind: ShardedKind, inner: Reconciler, obj: Labelled, req: Request, ctx: ReconcileContext): Promise<Result | void> {
    this.tellArrival(kind, obj);
    return inner.reconcile(req, ctx);
  }

  /**
   * An object that came from another owner: its previous owner may have created a service
   * object for it just before it let go (or died), after this replica last read the service.
   * Its inventory is told, and makes every lookup of it that could lead to a second one (by
   * marker, a miss, a replacement) wait for a read since. Lookups by the id in its status do
   * not wait: after a takeover most objects need no read at all.
   */
  private tellArrival(kind: ShardedKind, obj: Labelled): void {
    const key = arrivalKey(kind, obj);
    const arrivedAt = this.arrived.get(key);
    if (arrivedAt === undefined) return;
    const inventory = this.inventoryOf?.(kind, obj);
    if (inventory === undefined) return; // not reachable yet: told on a later pass
    if (inventory !== null && obj.metadata.uid !== undefined) inventory.arrived(obj.metadata.uid, arrivedAt);
    this.arrived.delete(key);
  }

  /**
   * The drain acknowledged; "failed" if the API server could not be written and the object is
   * still this replica's as it was (read back: an answer lost is not a write failed).
   */
  private async release(kind: ShardedKind, obj: Labelled, req: Request, log: Logger): Promise<Result | void | "failed"> {
    const path = objectPath(kind, req.namespace, req.name);
    const send = (opts: { signal?: AbortSignal } = {}) => this.manager!.client.patch(path, releasePatch(obj.metadata.resourceVersion), "merge", { discardResult: true, ...opts });
    try {
      await send();
      log.info({ kind: kind.kind }, "released to another shard");
    } catch (err) {
      if (isNotFound(err)) return;
      // A newer version exists: already released (the watch has not caught up), or changed
      // meanwhile; either way this replica does nothing with it and looks again later.
      if (isConflict(err)) return { requeue: true };
      // The patch may have landed with its answer lost (a timeout, a reset): then the object is
      // no longer this replica's, and working on it would overlap with the next owner. Read back
      // with a list by name, not a GET: the operator's role reads these kinds with list and watch only.
      const still = await this.manager!.client.list<Labelled>(collectionPath(kind, req.namespace), { fieldSelector: `metadata.name=${req.name}` }).then(
        (now) =>
          // As it was when this replica took it to be its to work on: the same version (its
          // owner label too: its own, or a fenced member's it inherits).
          now.items.some((o) => o.metadata.uid === obj.metadata.uid && o.metadata.resourceVersion === obj.metadata.resourceVersion),
        (readErr: unknown) => {
          log.warn({ err: errorMessage(readErr), kind: kind.kind }, "could not read the object back after its release failed; neither releasing nor working on it until it can be");
          return false;
        },
      );
      if (!still) return { requeueAfterMs: RELEASE_RETRY_MS, priority: true };
      // Unchanged as read back: the PATCH has not landed, but one whose answer was lost (a
      // timeout while the API server held it) may still land, and it would while this replica
      // works on the object. Sent again on the same version, it settles that: landing, it is the
      // release; a 409 means the version moved on (the first one landed, or another write came,
      // after which the first can no longer land). Only a second failure leaves it open, and
      // the object's work then goes on meanwhile: a renewal must not wait for the API server.
      try {
        await send({ signal: AbortSignal.timeout(RESEND_TIMEOUT_MS) });
        log.info({ kind: kind.kind }, "released to another shard (sent twice: the first attempt failed)");
        return;
      } catch (again) {
        if (isNotFound(again)) return;
        if (isConflict(again)) return { requeue: true };
      }
      log.warn({ err: errorMessage(err), kind: kind.kind }, "could not release the object to another shard; working on it meanwhile");
      return "failed";
    }
  }
}

/** Whether `err` is, or was caused by, a write the membership's gate refused. */
function lapsed(err: unknown): boolean {
  for (let e = err; e instanceof Error; e = e.cause) if (e instanceof MembershipLapsed) return true;
  return false;
}

/** How soon a release that failed is tried again (the object's work goes on meanwhile). */
const RELEASE_RETRY_MS = 1_000;

/** How long the second attempt of a release waits for its answer: the object's work waits for it. */
const RESEND_TIMEOUT_MS = 5_000;

function arrivalKey(kind: ShardedKind, obj: Labelled): string {
  return `${kind.plural}/${obj.metadata.namespace ?? ""}/${obj.metadata.name ?? ""}`;
}
