// A list-then-watch cache of one collection (client-go's Reflector + Indexer + shared
// informer, reduced to what the operator needs).
//
//  - List (in one piece by default; paginated with pageSize), then watch from the list's
//    resourceVersion with allowWatchBookmarks=true; every event and bookmark advances the
//    resourceVersion the next watch resumes from, so a reconnect costs no relist.
//  - 410 Gone / Expired (HTTP answer or a watch ERROR event) -> relist, and diff the new list
//    against the cache: synthetic deletes for objects that vanished, updates for objects whose
//    resourceVersion changed, adds for new ones (what client-go's DeltaFIFO Replace does).
//  - Any other failure -> reconnect with jittered exponential backoff (800 ms .. 30 s, as the
//    reflector's backoff manager), reset only after a watch that stayed up for a while or ran
//    to the timeout it asked for: a watch that is cut at once, again and again, backs off
//    instead of storming the server.
//  - Server-side timeoutSeconds randomised in [min, 2*min] (client-go: 5..10 min) so informers
//    do not reconnect in lockstep; a watchdog aborts a watch that has delivered nothing, not
//    even a bookmark, for timeoutSeconds + grace (a silently stalled connection).
//  - The cache holds each object as parsed from the wire, once; handlers receive those same
//    references and must treat them as read-only.
//
// No resync timer: controllers re-observe via the work queue (requeueAfter).
import type { Logger } from "pino";
import { setTimeout as sleep } from "node:timers/promises";
import { errorMessage } from "../lib/errors.js";
import { KubeApiError, isGone, type KubeClient, type KubeObject, type ObjectList } from "./kube-client.js";
import type { Metrics } from "./metrics.js";

export type InformerEventName = "add" | "update" | "delete";

export type AddHandler<T> = (obj: T) => void;
export type UpdateHandler<T> = (newObj: T, oldObj: T) => void;
export type DeleteHandler<T> = (obj: T) => void;
/** Index values of an object (e.g. `namespace/name` of referenced Secrets). */
export type IndexFunc<T> = (obj: T) => string[];

export interface InformerOptions<T = KubeObject> {
  /** Collection path, e.g. /apis/agentcompute.dev/v1alpha1/namespaces/x/skills or cluster-wide /api/v1/secrets. */
  path: string;
  /**
   * Watch only these namespaces: `path` must then be the cluster-wide collection path, and
   * one list/watch runs per namespace into this one cache (controller-runtime's
   * multi-namespace cache). Empty/undefined: `path` as given.
   */
  namespaces?: string[];
  labelSelector?: string;
  fieldSelector?: string;
  logger: Logger;
  /**
   * List page size; default none: one list. The API server (1.31+, ConsistentListFromCache)
   * serves a consistent list without a limit from its watch cache, but sends a list with a
   * limit, and every continuation, to etcd: 2,000 Sandboxes in pages of 500 cost it 4 times
   * the CPU of one list (705 ms against 173 ms, 1.32), and a new leader's sharder lists
   * every sharded object before a failover's moves. client-go's reflector gets the same from
   * the cache (its first list asks for resourceVersion "0", where the limit is ignored). Set
   * it for collections of unbounded size (Secrets), where one list's text would be too big.
   */
  pageSize?: number;
  metrics?: Metrics;
  /** Minimum server-side watch timeout in seconds; the actual one is random in [min, 2*min] (default 300). */
  minWatchTimeoutSeconds?: number;
  /** Extra silence tolerated beyond timeoutSeconds before the watchdog restarts the watch (default 30 s). */
  watchdogGraceMs?: number;
  /** Reconnect backoff (default 800 ms doubling to 30 s, with jitter). */
  backoffInitialMs?: number;
  backoffMaxMs?: number;
  /** A watch that stayed up this long resets the backoff (default 30 s). */
  healthyWatchMs?: number;
  /**
   * Drop metadata.managedFields before caching (default true): the operator never reads
   * them and they are often a third of an object's size (controller-runtime's
   * TransformStripManagedFields).
   */
  stripManagedFields?: boolean;
  /** A projection of each object, cached instead of the object. */
  view?: CacheView<T>;
}

/**
 * What a cache keeps of each object: `transform` is applied to every object before it is
 * cached (in place or returning a replacement); `name` tells the cache apart from others of
 * the same path and selector (the `view` label of its metrics, empty for whole objects).
 */
export interface CacheView<T = KubeObject> {
  name: string;
  transform: (obj: T) => T;
}

/** The watchdog's abort reason. */
export class WatchStalledError extends Error {
  override readonly name = "WatchStalledError";
}

class StoppedError extends Error {
  override readonly name = "StoppedError";
}

/** setLabelSelector: the watch ends, and the next list is under the new selector. */
class SelectorChanged extends Error {
  override readonly name = "SelectorChanged";
}

type Outcome = "closed" | "error" | "list_error" | "gone" | "stalled";

/** Insert `/namespaces/{ns}` before the plural of a cluster-wide collection path. */
export function namespacedCollectionPath(clusterPath: string, namespace: string): string {
  const i = clusterPath.lastIndexOf("/");
  if (i <= 0) throw new Error(`not a collection path: ${clusterPath}`);
  return `${clusterPath.slice(0, i)}/namespaces/${encodeURIComponent(namespace)}${clusterPath.slice(i)}`;
}

/** One list/watch loop (client-go's Reflector) feeding the informer's store. */
interface Reflector {
  path: string;
  /** Objects of this namespace are this reflector's; undefined = all objects (cluster-wide). */
  namespace: string | undefined;
  resourceVersion: string;
  synced: boolean;
  abort: AbortController | undefined;
  loop: Promise<void> | undefined;
  /** setLabelSelector's callers, told once a list under the new selector is in. */
  reselected: Array<() => void>;
  /** The selector of its last list: a watch resumed from that list must be under it too. */
  listedSelector: string | undefined;
}

export class Informer<T extends KubeObject> {
  readonly path: string;
  private readonly client: KubeClient;
  private readonly log: Logger;
  private readonly opts: InformerOptions<T>;
  private readonly metrics: Metrics | undefined;
  private readonly reflectors: Reflector[];
  /** namespace ("" for cluster-scoped) -> name -> object */
  private readonly store = new Map<string, Map<string, T>>();
  private count = 0;
  /** index name -> function; index name -> value -> object keys ("ns/name") */
  private readonly indexers = new Map<string, IndexFunc<T>>();
  private readonly indices = new Map<string, Map<string, Set<string>>>();
  private readonly addHandlers: AddHandler<T>[] = [];
  private readonly updateHandlers: UpdateHandler<T>[] = [];
  private readonly deleteHandlers: DeleteHandler<T>[] = [];
  private synced = false;
  private stopped = false;
  private started: Promise<void> | undefined;
  /** The selector lists and watches use now (setLabelSelector); opts.labelSelector is the one it was made with. */
  private labelSelector: string | undefined;
  private syncWaiters: { resolve: () => void; reject: (e: Error) => void }[] = [];

  /** The list page size it was made with (undefined: one list). */
  get pageSize(): number | undefined {
    return this.opts.pageSize;
  }

  constructor(client: KubeClient, opts: InformerOptions<T>) {
    this.client = client;
    this.opts = opts;
    this.path = opts.path;
    this.metrics = opts.metrics;
    this.log = opts.logger.child({ informer: opts.path });
    this.labelSelector = opts.labelSelector;
    const namespaces = [...new Set(opts.namespaces ?? [])];
    this.reflectors =
      namespaces.length === 0
        ? [newReflector(opts.path, undefined)]
        : namespaces.map((ns) => newReflector(namespacedCollectionPath(opts.path, ns), ns));
  }

  /** resourceVersion of the last list, event or bookmark processed (the first namespace's when several). */
  get lastSyncResourceVersion(): string {
    return this.reflectors[0]?.resourceVersion ?? "";
  }

  /** Per watched path, the resourceVersion it resumes from. */
  resourceVersions(): Record<string, string> {
    return Object.fromEntries(this.reflectors.map((r) => [r.path, r.resourceVersion]));
  }

  /** Subscribe; returns an unsubscribe function. Handlers must be quick (enqueue) and must not mutate objects. */
  on(event: "add", handler: AddHandler<T>): () => void;
  on(event: "update", handler: UpdateHandler<T>): () => void;
  on(event: "delete", handler: DeleteHandler<T>): () => void;
  on(event: InformerEventName, handler: AddHandler<T> | UpdateHandler<T> | DeleteHandler<T>): () => void {
    const list: unknown[] =
      event === "add" ? this.addHandlers : event === "update" ? this.updateHandlers : this.deleteHandlers;
    list.push(handler);
    return () => {
      const i = list.indexOf(handler);
      if (i >= 0) list.splice(i, 1);
    };
  }

  /** Start list+watch. Resolves once the first list is in the cache (rejects if stopped before). */
  start(): Promise<void> {
    if (this.started) return this.started;
    // Stopped before it was started (a SIGTERM while the manager's servers bind): it stays
    // stopped, rather than list and watch through a client being closed, for ever.
    if (this.stopped) {
      const refused = Promise.reject(new Error(`informer ${this.path} stopped before it started`));
      refused.catch(() => undefined); // a caller that does not await it gets no unhandled rejection
      return refused;
    }
    this.started = new Promise<void>((resolve, reject) => this.syncWaiters.push({ resolve, reject }));
    // A caller that never awaits start() must not get an unhandled rejection from stop().
    this.started.catch(() => undefined);
    for (const r of this.reflectors) {
      r.loop = this.run(r).catch((err: unknown) => {
        // run() handles its own errors; this is a last line of defence, never an unhandled rejection.
        this.log.error({ err: errorMessage(err), path: r.path }, "informer loop crashed");
      });
    }
    return this.started;
  }

  /** Stop watching. The cache keeps its content (read-only from now on). */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    for (const r of this.reflectors) r.abort?.abort(new StoppedError("informer stopped"));
    const waiters = this.syncWaiters.splice(0);
    for (const w of waiters) w.reject(new Error(`informer ${this.path} stopped before its cache synced`));
    await Promise.all(this.reflectors.map((r) => r.loop));
    for (const r of this.reflectors) for (const resolve of r.reselected.splice(0)) resolve();
  }

  hasSynced(): boolean {
    return this.synced;
  }

  /**
   * Select by another label selector from now on (a sharded replica taking on a fenced
   * member's share without a write to any of its objects). Lists again under it, emitting
   * the differences as a relist after a 410 does, and resolves once that list is in (or the
   * informer stopped). The informer keeps the key (and metric labels) it was made with.
   */
  setLabelSelector(selector: string | undefined): Promise<void> {
    if (selector === this.labelSelector && !this.reflectors.some((r) => r.reselected.length > 0)) return Promise.resolve();
    this.labelSelector = selector;
    if (this.started === undefined || this.stopped) return Promise.resolve();
    return Promise.all(
      this.reflectors.map(
        (r) =>
          new Promise<void>((resolve) => {
            r.reselected.push(resolve);
            r.abort?.abort(new SelectorChanged("label selector changed"));
          }),
      ),
    ).then(() => undefined);
  }

  get(namespace: string | undefined, name: string): T | undefined {
    return this.store.get(namespace ?? "")?.get(name);
  }

  /** Objects of one namespace, or all. A new array of the cached references. */
  list(namespace?: string): T[] {
    if (namespace !== undefined) return Array.from(this.store.get(namespace)?.values() ?? []);
    const out: T[] = [];
    for (const m of this.store.values()) for (const o of m.values()) out.push(o);
    return out;
  }

  size(): number {
    return this.count;
  }

  /** Whether addIndex(name) was called. */
  hasIndex(name: string): boolean {
    return this.indexers.has(name);
  }

  /**
   * Add a secondary index (client-go's Indexer): `fn` returns the index values of an object,
   * e.g. the `namespace/name` of every Secret a Sandbox references. byIndex() then answers
   * "which objects reference X" in O(1) instead of scanning the cache on every event (at
   * 10,000 objects and 10,000 Secret events a scan per event is 10^8 steps).
   */
  addIndex(name: string, fn: IndexFunc<T>): void {
    if (this.indexers.has(name)) throw new Error(`index ${name} already exists`);
    this.indexers.set(name, fn);
    const index = new Map<string, Set<string>>();
    this.indices.set(name, index);
    for (const [ns, m] of this.store) {
      for (const [n, obj] of m) this.indexAdd(index, this.indexValues(name, fn, obj), storeKey(ns, n));
    }
  }

  /** Objects whose index `name` contains `value` (cached references). */
  byIndex(name: string, value: string): T[] {
    const index = this.indices.get(name);
    if (!index) throw new Error(`no index ${name}`);
    const keys = index.get(value);
    if (!keys) return [];
    const out: T[] = [];
    for (const k of keys) {
      const i = k.indexOf("/");
      const obj = this.store.get(k.slice(0, i))?.get(k.slice(i + 1));
      if (obj !== undefined) out.push(obj);
    }
    return out;
  }

  // --- the loop ------------------------------------------------------------------------

  private async run(r: Reflector): Promise<void> {
    const initialMs = this.opts.backoffInitialMs ?? 800;
    const maxMs = this.opts.backoffMaxMs ?? 30_000;
    const healthyMs = this.opts.healthyWatchMs ?? 30_000;
    const log = this.reflectors.length > 1 ? this.log.child({ namespace: r.namespace }) : this.log;
    let needList = true;
    let failures = 0;
    while (!this.stopped) {
      const abort = new AbortController();
      r.abort = abort;
      /** When the watch began (not the list before it): what "stayed up" is measured from. */
      let watchStartedAt: number | undefined;
      let outcome: Outcome;
      /** The server-side timeout the watch asked for (0 while listing). */
      let askedMs = 0;
      // The selector changed while nothing could be aborted (between a watch's end and the
      // next, or an abort for another reason already under way): list under it first.
      if (r.listedSelector !== this.labelSelector) needList = true;
      try {
        if (needList) {
          await this.relist(r, abort.signal);
          needList = false;
        }
        watchStartedAt = performance.now();
        askedMs = await this.watchOnce(r, abort);
        // It ran its course if it lasted about as long as it asked for (the server ends it then).
        if (performance.now() - watchStartedAt < askedMs * 0.9) askedMs = 0;
        outcome = "closed";
      } catch (err) {
        if (this.stopped) break;
        if (abort.signal.reason instanceof SelectorChanged) {
          // Not a failure: list again at once, under the new selector.
          needList = true;
          continue;
        }
        if (abort.signal.reason instanceof WatchStalledError) {
          outcome = "stalled";
          log.warn({ resourceVersion: r.resourceVersion }, abort.signal.reason.message);
        } else if (isGone(err)) {
          outcome = "gone";
          needList = true;
          log.info({ resourceVersion: r.resourceVersion }, "resourceVersion too old (410); relisting");
        } else if (watchStartedAt === undefined) {
          // No watch was started: the list failed (RBAC for a namespace, an API server down).
          outcome = "list_error";
          log.warn({ err: errorMessage(err) }, "list failed");
        } else {
          outcome = "error";
          log.warn({ err: errorMessage(err), resourceVersion: r.resourceVersion }, "watch failed");
        }
      }
      if (this.stopped) break;
      this.metrics?.informerWatchRestarts.inc({ resource: this.path, reason: outcome });
      // Backoff resets only after a watch that stayed up; a normal close of such a watch
      // reconnects at once. Anything else (errors, instant closes) backs off, so a cut that
      // repeats immediately never turns into a reconnect storm.
      // From the watch's start: a slow list before a watch answered 410 at once is no healthy
      // watch (counted so, each 410 would relist at once, for ever).
      const lived = watchStartedAt === undefined ? 0 : performance.now() - watchStartedAt;
      // A watch the server ended at the timeout we asked for was healthy too, however short
      // that timeout (an API server with a small --min-request-timeout, minWatchTimeoutSeconds
      // below healthyMs): backing off after it would leave the cache stale for up to backoffMaxMs.
      const ranItsCourse = outcome === "closed" && askedMs > 0;
      if (lived >= healthyMs || ranItsCourse) failures = 0;
      if ((outcome === "closed" || outcome === "stalled") && (lived >= healthyMs || ranItsCourse)) continue;
      if (outcome === "gone" && failures === 0) {
        failures = 1; // relist right away once; a second 410 in a row backs off
        continue;
      }
      failures++;
      const base = Math.min(maxMs, initialMs * 2 ** Math.min(failures - 1, 30));
      const delay = Math.round(base / 2 + (Math.random() * base) / 2);
      log.debug({ delayMs: delay, failures }, "reconnecting after backoff");
      try {
        await sleep(delay, undefined, { signal: abort.signal });
      } catch {
        if (this.stopped) break;
        needList = true; // the selector changed: list under it now
      }
    }
  }

  private async relist(r: Reflector, signal: AbortSignal): Promise<void> {
    const labelSelector = this.labelSelector;
    const items: T[] = [];
    let cont: string | undefined;
    let limit: number | undefined = this.opts.pageSize;
    let rv: string;
    let listKind: string | undefined;
    let listApiVersion: string | undefined;
    for (;;) {
      let page: ObjectList<T>;
      try {
        page = await this.client.list<T>(r.path, {
          labelSelector,
          fieldSelector: this.opts.fieldSelector,
          limit,
          continue: cont,
          signal,
        });
      } catch (err) {
        if (cont !== undefined && isGone(err)) {
          // The continue token expired mid-list: start over with one unpaginated list
          // (client-go's pager falls back to a full list the same way).
          this.log.info("list continue token expired; listing without pagination");
          items.length = 0;
          cont = undefined;
          limit = undefined;
          continue;
        }
        throw err;
      }
      for (const it of page.items) items.push(this.prepare(it));
      rv = page.metadata.resourceVersion;
      listKind ??= page.kind;
      listApiVersion ??= page.apiVersion;
      cont = page.metadata.continue || undefined;
      if (!cont) break;
    }
    // List items of built-in kinds come without apiVersion/kind; watch events carry them.
    // Fill them in (on the parsed objects themselves, no copy) so both paths look the same.
    const kind = listKind?.endsWith("List") ? listKind.slice(0, -4) : undefined;
    if (kind && listApiVersion) {
      for (const it of items) {
        it.kind ??= kind;
        it.apiVersion ??= listApiVersion;
      }
    }
    this.replace(r, items, rv);
    // Lists that were had, not attempts: a list refused every backoff (RBAC) is list_error.
    this.metrics?.informerRelists.inc({ resource: this.path });
    r.listedSelector = labelSelector;
    // Changed again meanwhile: that change aborted this list's watch-to-be too, and the next list tells.
    if (labelSelector === this.labelSelector) for (const resolve of r.reselected.splice(0)) resolve();
  }

  /** Swap in a full list for the reflector's scope, emitting the differences (DeltaFIFO.Replace). */
  private replace(r: Reflector, items: T[], rv: string): void {
    const adds: T[] = [];
    const updates: [T, T][] = [];
    const seen = new Map<string, Set<string>>();
    for (const obj of items) {
      const ns = obj.metadata.namespace ?? "";
      const name = obj.metadata.name ?? "";
      let names = seen.get(ns);
      if (!names) seen.set(ns, (names = new Set()));
      names.add(name);
      let m = this.store.get(ns);
      if (!m) this.store.set(ns, (m = new Map()));
      const old = m.get(name);
      if (old === undefined) {
        this.setObject(m, ns, name, obj, undefined);
        adds.push(obj);
      } else if (old.metadata.resourceVersion !== obj.metadata.resourceVersion) {
        this.setObject(m, ns, name, obj, old);
        updates.push([obj, old]);
      }
      // else unchanged: keep the object handlers may already hold; the new copy is dropped
    }
    const deletes: T[] = [];
    const scope = r.namespace === undefined ? [...this.store.keys()] : [r.namespace];
    for (const ns of scope) {
      const m = this.store.get(ns);
      if (!m) continue;
      const names = seen.get(ns);
      for (const [name, obj] of m) {
        if (!names?.has(name)) {
          this.deleteObject(m, ns, name, obj);
          deletes.push(obj);
        }
      }
      if (m.size === 0) this.store.delete(ns);
    }
    r.resourceVersion = rv;
    this.reportCount();
    if (r.synced && (deletes.length > 0 || updates.length > 0 || adds.length > 0)) {
      this.log.info(
        { added: adds.length, updated: updates.length, deleted: deletes.length, namespace: r.namespace },
        "relist reconciled the cache",
      );
    }
    for (const o of adds) this.emitAdd(o);
    for (const [n, o] of updates) this.emitUpdate(n, o);
    for (const o of deletes) this.emitDelete(o);
    if (!r.synced) {
      r.synced = true;
      if (!this.synced && this.reflectors.every((x) => x.synced)) {
        this.synced = true;
        this.log.debug({ objects: this.count }, "cache synced");
        const waiters = this.syncWaiters.splice(0);
        for (const w of waiters) w.resolve();
      }
    }
  }

  /** One watch until the server ends it (or it fails); returns the timeout it asked for, in ms. */
  private async watchOnce(r: Reflector, abort: AbortController): Promise<number> {
    const min = this.opts.minWatchTimeoutSeconds ?? 300;
    const timeoutSeconds = Math.floor(min * (1 + Math.random()));
    const silenceLimitMs = timeoutSeconds * 1000 + (this.opts.watchdogGraceMs ?? 30_000);
    let lastEventAt = Date.now();
    // One timer, re-armed lazily: per event we only record a timestamp (cheap at 10k events/s).
    let timer: NodeJS.Timeout | undefined;
    const arm = (ms: number): void => {
      timer = setTimeout(() => {
        const silent = Date.now() - lastEventAt;
        if (silent >= silenceLimitMs) {
          abort.abort(new WatchStalledError(`watch delivered nothing for ${Math.round(silent / 1000)} s; restarting it`));
        } else {
          arm(silenceLimitMs - silent);
        }
      }, ms);
      timer.unref();
    };
    arm(silenceLimitMs);
    try {
      const stream = this.client.watch<T>(
        r.path,
        {
          resourceVersion: r.resourceVersion,
          allowWatchBookmarks: true,
          timeoutSeconds,
          labelSelector: this.labelSelector,
          fieldSelector: this.opts.fieldSelector,
        },
        abort.signal,
      );
      for await (const ev of stream) {
        lastEventAt = Date.now();
        switch (ev.type) {
          case "ADDED":
          case "MODIFIED":
            this.upsert(this.prepare(ev.object));
            break;
          case "DELETED":
            this.remove(this.prepare(ev.object));
            break;
          case "BOOKMARK":
            break;
          case "ERROR": {
            const status = ev.object;
            throw KubeApiError.fromStatus(status, status.code ?? 500, "WATCH", r.path);
          }
          default:
            this.log.debug({ type: (ev as { type: unknown }).type }, "ignoring unknown watch event type");
            continue;
        }
        const rv = ev.object.metadata?.resourceVersion;
        if (rv) r.resourceVersion = rv;
      }
    } finally {
      if (timer) clearTimeout(timer);
    }
    return timeoutSeconds * 1000;
  }

  private prepare(obj: T): T {
    if (this.opts.stripManagedFields ?? true) {
      const meta = obj.metadata as { managedFields?: unknown } | undefined;
      if (meta && meta.managedFields !== undefined) delete meta.managedFields;
    }
    if (!this.opts.view) return obj;
    try {
      return this.opts.view.transform(obj);
    } catch (err) {
      // Kept as it came, as an index function that throws leaves the object unindexed: a throw
      // here would end the list or watch at this object, and every retry would meet it again.
      this.log.error({ err: errorMessage(err) }, "cache transform threw; object kept whole");
      return obj;
    }
  }

  private upsert(obj: T): void {
    const ns = obj.metadata.namespace ?? "";
    const name = obj.metadata.name ?? "";
    let m = this.store.get(ns);
    if (!m) this.store.set(ns, (m = new Map()));
    const old = m.get(name);
    if (old !== undefined && old.metadata.resourceVersion === obj.metadata.resourceVersion) return;
    this.setObject(m, ns, name, obj, old);
    if (old === undefined) {
      this.reportCount();
      this.emitAdd(obj);
    } else {
      this.emitUpdate(obj, old);
    }
  }

  private remove(obj: T): void {
    const ns = obj.metadata.namespace ?? "";
    const name = obj.metadata.name ?? "";
    const m = this.store.get(ns);
    const old = m?.get(name);
    if (m && old !== undefined) {
      this.deleteObject(m, ns, name, old);
      if (m.size === 0) this.store.delete(ns);
      this.reportCount();
    }
    // Emit even for an object we did not hold: a delete is always safe to pass on.
    this.emitDelete(obj);
  }

  private reportCount(): void {
    this.metrics?.informerObjects.set({ resource: this.path, selector: this.opts.labelSelector ?? "", view: this.opts.view?.name ?? "" }, this.count);
  }

  /** Every store write goes through here and deleteObject, keeping count and indices right. */
  private setObject(m: Map<string, T>, ns: string, name: string, obj: T, old: T | undefined): void {
    m.set(name, obj);
    if (old === undefined) this.count++;
    if (this.indexers.size === 0) return;
    const key = storeKey(ns, name);
    for (const [idx, fn] of this.indexers) {
      const index = this.indices.get(idx) as Map<string, Set<string>>;
      if (old !== undefined) this.indexRemove(index, this.indexValues(idx, fn, old), key);
      this.indexAdd(index, this.indexValues(idx, fn, obj), key);
    }
  }

  private deleteObject(m: Map<string, T>, ns: string, name: string, old: T): void {
    m.delete(name);
    this.count--;
    if (this.indexers.size === 0) return;
    const key = storeKey(ns, name);
    for (const [idx, fn] of this.indexers) {
      this.indexRemove(this.indices.get(idx) as Map<string, Set<string>>, this.indexValues(idx, fn, old), key);
    }
  }

  private indexValues(name: string, fn: IndexFunc<T>, obj: T): string[] {
    try {
      return fn(obj);
    } catch (err) {
      this.log.error({ err: errorMessage(err), index: name }, "index function threw; object not indexed");
      return [];
    }
  }

  private indexAdd(index: Map<string, Set<string>>, values: string[], key: string): void {
    for (const v of values) {
      let keys = index.get(v);
      if (!keys) index.set(v, (keys = new Set()));
      keys.add(key);
    }
  }

  private indexRemove(index: Map<string, Set<string>>, values: string[], key: string): void {
    for (const v of values) {
      const keys = index.get(v);
      if (!keys) continue;
      keys.delete(key);
      if (keys.size === 0) index.delete(v);
    }
  }

  // Handler failures are logged and never break the watch loop.
  private emitAdd(obj: T): void {
    for (const h of this.addHandlers) this.safe(() => h(obj), "add");
  }
  private emitUpdate(n: T, o: T): void {
    for (const h of this.updateHandlers) this.safe(() => h(n, o), "update");
  }
  private emitDelete(obj: T): void {
    for (const h of this.deleteHandlers) this.safe(() => h(obj), "delete");
  }
  private safe(fn: () => void, event: InformerEventName): void {
    try {
      fn();
    } catch (err) {
      this.log.error({ err: errorMessage(err), event }, "informer event handler threw");
    }
  }
}

function storeKey(ns: string, name: string): string {
  return `${ns}/${name}`;
}

function newReflector(path: string, namespace: string | undefined): Reflector {
  return { path, namespace, resourceVersion: "", synced: false, abort: undefined, loop: undefined, reselected: [], listedSelector: undefined };
}
