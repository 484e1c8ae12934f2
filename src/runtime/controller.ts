// The reconcile loop (controller-runtime's pkg/internal/controller, in small).
//
// Informers feed keys into a WorkQueue; `concurrency` workers take keys and call the
// Reconciler. The queue guarantees one key is never reconciled by two workers at once. The
// outcome decides what happens to the key, as in controller-runtime's reconcileHandler:
//   throw            -> addRateLimited (per-key exponential backoff), result="error"
//   {requeue: true}  -> addRateLimited (and addAfter(requeueNoLaterThanMs), the earlier wins), result="requeue"
//   {requeueAfterMs} -> forget + addAfter (priority lane if `priority`), result="requeue_after"
//   otherwise        -> forget, result="success"
// A throw of a non-Error (a "panic") is caught like any other error and counted in
// controller_runtime_reconcile_panics_total: nothing a reconciler does kills the process.
import type { Logger } from "pino";
import { randomUUID } from "node:crypto";
import { errorMessage, retryAfterOf } from "../lib/errors.js";
import type { Informer } from "./informer.js";
import type { KubeObject } from "./kube-client.js";
import type { Metrics } from "./metrics.js";
import { WorkQueue, type RateLimiter } from "./workqueue.js";

export interface Request {
  namespace: string;
  name: string;
}

export interface Result {
  /** Reconcile again after this delay (the key's failure count is reset). */
  requeueAfterMs?: number;
  /** With requeueAfterMs or requeueNoLaterThanMs: the requeue goes to the priority lane (TTL renewals). */
  priority?: boolean;
  /** Reconcile again with rate-limited backoff, without it counting as an error. */
  requeue?: boolean;
  /**
   * With requeue: however far the backoff has grown, come back no later than this (on the
   * priority lane if `priority`): a wait for a dependency must not outlast a TTL renewal.
   */
  requeueNoLaterThanMs?: number;
}

/** The longest wait a failure's Retry-After holds its key back (a bogus header must not hold it for hours). */
export const MAX_SERVER_ASKED_WAIT_MS = 10 * 60_000;

/**
 * The wait the server asked for with the failure (its Retry-After): a numeric `retryAfterMs` on
 * the error or on one it wraps (`cause`), as the service client's errors carry it; capped. The
 * key comes back no sooner (a failure the client retried itself, waiting that long, too).
 */
export function serverAskedWaitMs(err: unknown): number | undefined {
  const ms = retryAfterOf(err);
  return ms === undefined ? undefined : Math.min(ms, MAX_SERVER_ASKED_WAIT_MS);
}

/** The soonest a failure's RetryNoLaterThan brings its key back. */
export const MIN_FAILURE_RETRY_MS = 1_000;

/**
 * A failure whose retry must come no later than `ms` (the priority lane if `priority`) however
 * far the key's backoff has grown: the work it reports is done, and something is due by then (a
 * TTL renewal). The retry still counts as an error, and the backoff still grows.
 */
export class RetryNoLaterThan extends Error {
  constructor(
    cause: unknown,
    readonly ms: number,
    readonly priority: boolean,
  ) {
    super(cause instanceof Error ? cause.message : String(cause), { cause });
  }
}

export interface ReconcileContext {
  /** Child logger with controller, namespace, name, reconcileID. */
  log: Logger;
  reconcileId: string;
  /** Aborted when the controller's shutdown grace period runs out, or the reconcile timeout. */
  signal: AbortSignal;
  /** true when this key was handed out from the priority lane. */
  priority: boolean;
  /** How many times this key has failed in a row (0 on the first attempt). */
  retries: number;
}

export interface Reconciler {
  reconcile(req: Request, ctx: ReconcileContext): Promise<Result | void>;
}

/** Filter for informer events: return false to ignore the event. `oldObj` is set for updates. */
export type EventFilter<T> = (obj: T, oldObj?: T, event?: "add" | "update" | "delete") => boolean;

export interface WatchOptions<T> {
  /** Skip events the controller does not care about (controller-runtime's predicates). */
  filter?: EventFilter<T>;
  /** Enqueue on the priority lane: all of them, or those this says are urgent. */
  priority?: boolean | ((obj: T) => boolean);
}

export interface ControllerOptions {
  name: string;
  reconciler: Reconciler;
  concurrency: number;
  logger: Logger;
  metrics: Metrics;
  rateLimiter?: RateLimiter;
  /** Abort the reconcile's signal after this long (default: none). The worker still waits for it to return. */
  reconcileTimeoutMs?: number;
  /**
   * Keep one worker, besides `concurrency`, for the priority lane (default true): TTL renewals
   * then never wait for a worker. Off where most keys are priority keys anyway.
   */
  priorityWorker?: boolean;
}

/** Encode a request as a queue key (`namespace/name`, `name` when cluster-scoped). */
export function requestKey(req: Request): string {
  return req.namespace ? `${req.namespace}/${req.name}` : req.name;
}

export function parseKey(key: string): Request {
  const i = key.indexOf("/");
  return i < 0 ? { namespace: "", name: key } : { namespace: key.slice(0, i), name: key.slice(i + 1) };
}

/** Ignore updates that do not change metadata.generation (spec changes): status-only writes. */
export function generationChanged<T extends KubeObject>(obj: T, oldObj?: T): boolean {
  return oldObj === undefined || obj.metadata.generation !== oldObj.metadata.generation;
}

export class Controller {
  readonly name: string;
  readonly queue: WorkQueue;
  private readonly reconciler: Reconciler;
  private readonly concurrency: number;
  private readonly log: Logger;
  private readonly metrics: Metrics;
  private readonly reconcileTimeoutMs: number | undefined;
  private readonly stopController = new AbortController();
  private workers: Promise<void>[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  private readonly unsubscribers: (() => void)[] = [];
  private started = false;
  private readonly priorityWorker: boolean;

  constructor(opts: ControllerOptions) {
    if (!(opts.concurrency >= 1)) throw new Error(`controller ${opts.name}: concurrency must be >= 1`);
    this.name = opts.name;
    this.reconciler = opts.reconciler;
    this.concurrency = Math.floor(opts.concurrency);
    this.log = opts.logger.child({ controller: opts.name });
    this.metrics = opts.metrics;
    this.reconcileTimeoutMs = opts.reconcileTimeoutMs;
    this.priorityWorker = opts.priorityWorker ?? true;
    this.queue = new WorkQueue({ name: opts.name, metrics: opts.metrics, rateLimiter: opts.rateLimiter });
    this.metrics.maxConcurrentReconciles.set({ controller: this.name }, this.concurrency);
    this.metrics.activeWorkers.set({ controller: this.name }, 0);
    // Initialise the result series so dashboards see zeroes rather than gaps.
    for (const result of ["success", "error", "requeue", "requeue_after"] as const) {
      this.metrics.reconcileTotal.inc({ controller: this.name, result }, 0);
    }
    this.metrics.reconcileErrors.inc({ controller: this.name }, 0);
  }

  /**
   * Enqueue from an informer: the object itself (default), or the requests `map` returns
   * (Secrets/ConfigMaps/other kinds -> the resources that reference them). Events are queued
   * even before start(): the queue fills while the cache syncs, workers drain it once leading.
   */
  watch<T extends KubeObject>(informer: Informer<T>, map?: (obj: T) => Request[], opts: WatchOptions<T> = {}): void {
    const toRequests = map ?? ((obj: T): Request[] => [{ namespace: obj.metadata.namespace ?? "", name: obj.metadata.name ?? "" }]);
    const enqueueAll = (obj: T): void => {
      let reqs: Request[];
      try {
        reqs = toRequests(obj);
      } catch (err) {
        this.log.error({ err: errorMessage(err, { labelNonError: true }), informer: informer.path }, "map function threw; event dropped");
        return;
      }
      const priority = typeof opts.priority === "function" ? opts.priority(obj) : opts.priority;
      for (const r of reqs) this.enqueue(r, { priority });
    };
    const filter = opts.filter;
    this.unsubscribers.push(
      informer.on("add", (obj) => {
        if (!filter || filter(obj, undefined, "add")) enqueueAll(obj);
      }),
      informer.on("update", (obj, old) => {
        if (filter && !filter(obj, old, "update")) return;
        enqueueAll(obj);
        // A mapped reference may have moved (e.g. a Secret's label changed): requeue the old targets too.
        if (map) enqueueAll(old);
      }),
      informer.on("delete", (obj) => {
        if (!filter || filter(obj, undefined, "delete")) enqueueAll(obj);
      }),
    );
  }

  enqueue(req: Request, opts: { afterMs?: number; priority?: boolean } = {}): void {
    const key = requestKey(req);
    if (opts.afterMs !== undefined && opts.afterMs > 0) this.queue.addAfter(key, opts.afterMs, { priority: opts.priority });
    else this.queue.add(key, { priority: opts.priority });
  }

  /** Start the workers. Resolves once they are running (not when they end). */
  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    this.log.info({ workers: this.concurrency, priorityWorkers: this.priorityWorker ? 1 : 0 }, "starting workers");
    for (let i = 0; i < this.concurrency; i++) this.workers.push(this.worker());
    // And one for the priority lane alone (TTL renewals): with every worker busy in slow
    // ordinary reconciles (allocations at a cold start), a renewal due now still runs now.
    if (this.priorityWorker) this.workers.push(this.worker({ priorityOnly: true }));
  }

  /**
   * Aborts the reconciles in flight now, whatever grace period a stop() under way gave them
   * (leadership lost while stopping: another replica may lead by now). stop() still ends the
   * workers.
   */
  abortInFlight(why: string): void {
    if (this.stopController.signal.aborted) return;
    this.log.warn({ inFlight: this.inFlight.size }, `${why}; aborting in-flight reconciles`);
    this.stopController.abort(new Error(why));
  }

  /**
   * Stop taking work and wait for in-flight reconciles, at most `graceMs`; then abort their
   * signal and return (they are abandoned, not awaited further). "drained" if every reconcile
   * in flight ended within `graceMs`.
   */
  async stop(graceMs = 30_000): Promise<"drained" | "timeout"> {
    for (const u of this.unsubscribers.splice(0)) u();
    const drained = this.queue.shutDownWithDrain();
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<"timeout">((resolve) => {
      timer = setTimeout(() => resolve("timeout"), graceMs);
    });
    const outcome = await Promise.race([drained.then(() => "drained" as const), timedOut]);
    clearTimeout(timer);
    if (outcome === "timeout") {
      this.log.warn({ inFlight: this.inFlight.size, graceMs }, "grace period over; aborting in-flight reconciles");
      this.stopController.abort(new Error("controller stopped"));
    } else {
      await Promise.all(this.workers);
    }
    this.metrics.activeWorkers.set({ controller: this.name }, 0);
    this.log.info("workers stopped");
    return outcome;
  }

  private async worker(opts: { priorityOnly?: boolean } = {}): Promise<void> {
    for (;;) {
      const item = await (opts.priorityOnly === true ? this.queue.getPriority() : this.queue.get());
      if (!item) return;
      const p = this.process(item.key, item.priority);
      this.inFlight.add(p);
      try {
        await p;
      } finally {
        this.inFlight.delete(p);
      }
    }
  }

  private async process(key: string, priority: boolean): Promise<void> {
    const req = parseKey(key);
    const reconcileId = randomUUID();
    const log = this.log.child({ namespace: req.namespace, name: req.name, reconcileID: reconcileId });
    const retries = this.queue.numRequeues(key);
    const signals = [this.stopController.signal];
    if (this.reconcileTimeoutMs !== undefined) signals.push(AbortSignal.timeout(this.reconcileTimeoutMs));
    const signal = signals.length === 1 ? (signals[0] as AbortSignal) : AbortSignal.any(signals);
    this.metrics.activeWorkers.inc({ controller: this.name });
    const started = performance.now();
    try {
      let result: Result | void;
      try {
        // Promise.resolve().then: a reconciler that throws synchronously is caught the same way.
        result = await Promise.resolve().then(() => this.reconciler.reconcile(req, { log, reconcileId, signal, priority, retries }));
      } finally {
        this.metrics.reconcileTime.observe({ controller: this.name }, (performance.now() - started) / 1000);
      }
      if (result && result.requeueAfterMs !== undefined && result.requeueAfterMs > 0) {
        this.queue.forget(key);
        this.queue.addAfter(key, result.requeueAfterMs, { priority: result.priority });
        this.metrics.reconcileTotal.inc({ controller: this.name, result: "requeue_after" });
      } else if (result && result.requeue) {
        this.queue.addRateLimited(key, { priority: result.priority });
        // The earlier of the two wins (the queue keeps the earliest time asked for a key).
        if (result.requeueNoLaterThanMs !== undefined) this.queue.addAfter(key, result.requeueNoLaterThanMs, { priority: result.priority });
        this.metrics.reconcileTotal.inc({ controller: this.name, result: "requeue" });
      } else {
        this.queue.forget(key);
        this.metrics.reconcileTotal.inc({ controller: this.name, result: "success" });
      }
    } catch (err) {
      this.metrics.reconcileErrors.inc({ controller: this.name });
      this.metrics.reconcileTotal.inc({ controller: this.name, result: "error" });
      if (!(err instanceof Error)) this.metrics.reconcilePanics.inc({ controller: this.name });
      // Not sooner than the server asked (a Retry-After longer than the client would wait for
      // itself: an empty pool, a rate limit), however young the key's backoff.
      this.queue.addRateLimited(key, { priority, atLeastMs: serverAskedWaitMs(err) });
      // The earlier of the two wins (the queue keeps the earliest time asked for a key); never
      // sooner than a second: a cap computed from a time already past must not retry a failing
      // reconcile in a loop, past every backoff.
      if (err instanceof RetryNoLaterThan) this.queue.addAfter(key, Math.max(err.ms, MIN_FAILURE_RETRY_MS), { priority: err.priority });
      // The message only: never the object, whose spec may hold what it should not.
      log.error({ err: errorMessage(err, { labelNonError: true }), retries: retries + 1 }, "reconciler error");
    } finally {
      this.metrics.activeWorkers.dec({ controller: this.name });
      this.queue.done(key);
    }
  }
}
