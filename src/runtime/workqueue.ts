// A work queue with client-go's semantics (k8s.io/client-go/util/workqueue), plus a priority
// lane in the spirit of controller-runtime's priorityqueue.
//
// Guarantees, as in client-go's Type queue:
//  - keys are strings (`namespace/name`); a key waiting in the queue is stored once (the
//    "dirty" set de-duplicates);
//  - a key is never handed to two workers at once (the "processing" set): an add while the
//    key is being processed marks it dirty and it is re-queued when `done(key)` is called;
//  - the delaying part keeps ONE timer for all delayed keys (a min-heap on ready time), and
//    an earlier addAfter for the same key wins (client-go's waitingForQueue/knownEntries);
//  - addRateLimited = addAfter(rateLimiter.when(key)), the default limiter being client-go's
//    DefaultControllerRateLimiter: max(per-item exponential 5 ms..1000 s, token bucket
//    10 qps / burst 100).
//
// Deliberate differences:
//  - Priority lane: keys added with `priority: true` are handed out before ordinary ones; a
//    key already waiting in the ordinary lane is promoted (it is still processed once).
//  - An immediate add drops a pending delayed add of the same key, and a delayed add of a
//    key that is already waiting to run is ignored: the run that is about to happen
//    recomputes the next requeue anyway. This is controller-runtime's priorityqueue rule
//    ("min of possible durations") and saves one redundant reconcile per key per event.
//    Exception: a delayed PRIORITY add survives an ordinary pending run, so a TTL renewal
//    due in 30 s still jumps the queue if the ordinary run is stuck behind a backlog.
//  - get() resolves `undefined` as soon as the queue is shut down (client-go keeps handing
//    out what is left). The operator stops taking work on SIGTERM and leaves the rest to the
//    next leader; in-flight items are still finished (shutDownWithDrain waits for them).
//
// Its parts are the code base's shared ones (src/lib): the lanes are Fifos, the delayed keys
// an IndexedHeap, the overall bucket a TokenBucket. Not p-queue: its items are anonymous tasks
// with a priority fixed when added, so it can neither de-duplicate keys, nor keep a key from
// two workers, nor promote a waiting key; the controller's workers pull from this queue.
import { Fifo } from "../lib/fifo.js";
import { IndexedHeap, type HeapEntry } from "../lib/heap.js";
import { TokenBucket } from "../lib/token-bucket.js";
import { MAX_TIMER_MS } from "../lib/long-timer.js";
import type { Metrics } from "./metrics.js";

export interface AddOptions {
  /** Hand out before ordinary items (TTL renewals must not wait behind a cold-start backlog). */
  priority?: boolean;
}

export interface QueueItem {
  key: string;
  priority: boolean;
}

// ---------------------------------------------------------------------------------------
// Rate limiters (client-go's ItemExponentialFailureRateLimiter, BucketRateLimiter, MaxOf)

export interface RateLimiter {
  /** Delay in ms before the key should be retried; records one more failure. */
  when(key: string): number;
  forget(key: string): void;
  numRequeues(key: string): number;
}

/** baseDelay * 2^failures, capped at maxDelay; per key. */
export class ItemExponentialFailureRateLimiter implements RateLimiter {
  private readonly failures = new Map<string, number>();
  constructor(
    private readonly baseDelayMs = 5,
    private readonly maxDelayMs = 1_000_000,
  ) {}

  when(key: string): number {
    const exp = this.failures.get(key) ?? 0;
    this.failures.set(key, exp + 1);
    const backoff = this.baseDelayMs * 2 ** exp;
    return Number.isFinite(backoff) ? Math.min(backoff, this.maxDelayMs) : this.maxDelayMs;
  }
  forget(key: string): void {
    this.failures.delete(key);
  }
  numRequeues(key: string): number {
    return this.failures.get(key) ?? 0;
  }
}

/**
 * An overall token bucket (golang.org/x/time/rate Reserve semantics: tokens may go negative
 * and each reservation waits its turn). Bounds the retry rate of the whole queue when many
 * keys fail at once.
 */
export class BucketRateLimiter implements RateLimiter {
  private readonly bucket: TokenBucket;
  constructor(qps = 10, burst = 100, now: () => number = () => performance.now()) {
    this.bucket = new TokenBucket({ rate: qps, burst, now });
  }
  when(_key: string): number {
    return Math.ceil(this.bucket.reserve());
  }
  forget(_key: string): void {}
  numRequeues(_key: string): number {
    return 0;
  }
}

export class MaxOfRateLimiter implements RateLimiter {
  private readonly limiters: RateLimiter[];
  constructor(...limiters: RateLimiter[]) {
    this.limiters = limiters;
  }
  when(key: string): number {
    let max = 0;
    for (const l of this.limiters) max = Math.max(max, l.when(key));
    return max;
  }
  forget(key: string): void {
    for (const l of this.limiters) l.forget(key);
  }
  numRequeues(key: string): number {
    let max = 0;
    for (const l of this.limiters) max = Math.max(max, l.numRequeues(key));
    return max;
  }
}

/** client-go's DefaultControllerRateLimiter: max(exponential 5 ms..1000 s, bucket 10 qps/100). */
export function defaultControllerRateLimiter(): RateLimiter {
  return new MaxOfRateLimiter(new ItemExponentialFailureRateLimiter(5, 1_000_000), new BucketRateLimiter(10, 100));
}

// ---------------------------------------------------------------------------------------
// Internal structures

interface LaneEntry {
  key: string;
  seq: number;
}

interface DirtyEntry {
  priority: boolean;
  /** seq of the lane entry that currently represents this key (older entries are stale) */
  seq: number;
  addedAt: number;
}

interface Waiting extends HeapEntry {
  key: string;
  readyAt: number;
  priority: boolean;
}


// ---------------------------------------------------------------------------------------
// The queue

export interface WorkQueueOptions {
  /** Metric label `name` (the controller name). */
  name: string;
  metrics?: Metrics;
  rateLimiter?: RateLimiter;
}

export class WorkQueue {
  readonly name: string;
  private readonly metrics: Metrics | undefined;
  private readonly rateLimiter: RateLimiter;
  private readonly normal = new Fifo<LaneEntry>();
  private readonly prio = new Fifo<LaneEntry>();
  private readonly dirty = new Map<string, DirtyEntry>();
  /** key -> start time (performance.now) */
  private readonly processing = new Map<string, number>();
  private readonly waiting = new Map<string, Waiting>();
  private readonly heap = new IndexedHeap<Waiting>((w) => w.readyAt);
  private timer: NodeJS.Timeout | undefined;
  private timerAt = Infinity;
  private readonly getters: ((item: QueueItem | undefined) => void)[] = [];
  /** Workers kept for the priority lane (getPriority), waiting. */
  private readonly prioGetters: ((item: QueueItem | undefined) => void)[] = [];
  private drainWaiters: (() => void)[] = [];
  private seq = 0;
  /** number of valid lane entries (dirty keys that are not being processed) */
  private ready = 0;
  private shuttingDown = false;
  private readonly unregisterMetrics: (() => void) | undefined;

  constructor(opts: WorkQueueOptions) {
    this.name = opts.name;
    this.metrics = opts.metrics;
    this.rateLimiter = opts.rateLimiter ?? defaultControllerRateLimiter();
    this.unregisterMetrics = this.metrics?.registerQueue(this.name, () => this.unfinishedWork());
    this.metrics?.workqueueDepth.set({ name: this.name }, 0);
  }

  /** Queue `key` for processing now. */
  add(key: string, opts: AddOptions = {}): void {
    if (this.shuttingDown) return;
    const priority = opts.priority === true;
    // An immediate run supersedes a pending delayed one (see header), unless the delayed one
    // is a priority requeue and this add is not: the ordinary run may wait behind a long
    // backlog, and the priority timer must still be able to promote it.
    const w = this.waiting.get(key);
    if (w && (priority || !w.priority)) {
      this.heap.remove(w);
      this.waiting.delete(key);
    }
    const existing = this.dirty.get(key);
    if (existing) {
      if (priority && !existing.priority) {
        existing.priority = true;
        if (!this.processing.has(key)) {
          // Promote: a fresh entry in the priority lane; the ordinary one becomes stale.
          existing.seq = ++this.seq;
          this.prio.push({ key, seq: existing.seq });
          // The worker kept for the priority lane may be waiting while the others are busy.
          this.dispatch();
        }
      }
      return;
    }
    const entry: DirtyEntry = { priority, seq: ++this.seq, addedAt: performance.now() };
    this.dirty.set(key, entry);
    this.metrics?.workqueueAdds.inc({ name: this.name });
    if (this.processing.has(key)) return; // re-queued by done()
    this.enqueue(key, entry);
  }

  /** Queue `key` after `delayMs`. One timer serves all delayed keys; the earliest request wins. */
  addAfter(key: string, delayMs: number, opts: AddOptions = {}): void {
    if (this.shuttingDown) return;
    if (!(delayMs > 0)) {
      this.add(key, opts);
      return;
    }
    this.metrics?.workqueueRetries.inc({ name: this.name });
    const priority = opts.priority === true;
    // A run is already pending; it will compute its own next requeue. Unless this is a
    // priority requeue and the pending run is an ordinary one (possibly far back in a
    // backlog): keep the timer so it can promote the key when due.
    const pending = this.dirty.get(key);
    if (pending && (pending.priority || !priority)) return;
    const readyAt = performance.now() + delayMs;
    const existing = this.waiting.get(key);
    if (existing) {
      existing.priority ||= priority;
      if (readyAt < existing.readyAt) {
        existing.readyAt = readyAt;
        this.heap.decreased(existing);
      }
    } else {
      const w: Waiting = { key, readyAt, priority, heapIndex: -1 };
      this.waiting.set(key, w);
      this.heap.push(w);
    }
    this.armTimer();
  }

  /**
   * addAfter with the rate limiter's delay for this key (per-item backoff + overall bucket), or
   * `atLeastMs` if that is longer (a wait the server asked for: Retry-After).
   */
  addRateLimited(key: string, opts: AddOptions & { atLeastMs?: number } = {}): void {
    if (this.shuttingDown) return;
    this.addAfter(key, Math.max(this.rateLimiter.when(key), opts.atLeastMs ?? 0), opts);
  }

  /** Reset the key's failure count (call after a successful reconcile). */
  forget(key: string): void {
    this.rateLimiter.forget(key);
  }

  numRequeues(key: string): number {
    return this.rateLimiter.numRequeues(key);
  }

  /**
   * Next key to process; waits if none is ready. Resolves `undefined` once shut down.
   * The caller MUST call done(key) when finished.
   */
  get(): Promise<QueueItem | undefined> {
    if (this.shuttingDown) return Promise.resolve(undefined);
    const item = this.take();
    if (item) return Promise.resolve(item);
    return new Promise((resolve) => this.getters.push(resolve));
  }

  /**
   * As get(), for a worker kept for the priority lane: only a priority key, waiting if none
   * is ready, so that one is never stuck behind workers all busy with slow ordinary keys.
   */
  getPriority(): Promise<QueueItem | undefined> {
    if (this.shuttingDown) return Promise.resolve(undefined);
    const item = this.take([this.prio]);
    if (item) return Promise.resolve(item);
    return new Promise((resolve) => this.prioGetters.push(resolve));
  }

  /** Mark `key` finished; if it was added meanwhile it goes back in the queue. */
  done(key: string): void {
    const started = this.processing.get(key);
    if (started === undefined) return;
    this.processing.delete(key);
    this.metrics?.workqueueWorkDuration.observe({ name: this.name }, (performance.now() - started) / 1000);
    const entry = this.dirty.get(key);
    if (entry && !this.shuttingDown) {
      entry.seq = ++this.seq;
      this.enqueue(key, entry);
    }
    if (this.processing.size === 0 && this.shuttingDown) this.unregisterMetrics?.();
    if (this.processing.size === 0 && this.drainWaiters.length > 0) {
      const waiters = this.drainWaiters;
      this.drainWaiters = [];
      for (const w of waiters) w();
    }
  }

  /** Number of keys ready to be handed out (not delayed, not in process). */
  len(): number {
    return this.ready;
  }

  /** Keys waiting on a delay. */
  delayedLen(): number {
    return this.waiting.size;
  }

  /** Keys currently handed out and not yet done. */
  processingLen(): number {
    return this.processing.size;
  }

  isShuttingDown(): boolean {
    return this.shuttingDown;
  }

  /** Stop handing out work; pending getters resolve `undefined`; adds are ignored. */
  shutDown(): void {
    if (this.shuttingDown) return;
    this.shuttingDown = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = Infinity;
    this.heap.clear();
    this.waiting.clear();
    this.normal.clear();
    this.prio.clear();
    this.ready = 0;
    // Forget queued (not in-process) keys; in-process keys stay until done().
    for (const key of this.dirty.keys()) if (!this.processing.has(key)) this.dirty.delete(key);
    this.metrics?.workqueueDepth.set({ name: this.name }, 0);
    const getters = [...this.getters.splice(0), ...this.prioGetters.splice(0)];
    for (const g of getters) g(undefined);
    if (this.processing.size === 0) this.unregisterMetrics?.();
  }

  /** shutDown, then wait until every handed-out key is done(). */
  async shutDownWithDrain(): Promise<void> {
    this.shutDown();
    if (this.processing.size === 0) return;
    await new Promise<void>((resolve) => this.drainWaiters.push(resolve));
  }

  // --- internals -----------------------------------------------------------------------

  private enqueue(key: string, entry: DirtyEntry): void {
    (entry.priority ? this.prio : this.normal).push({ key, seq: entry.seq });
    this.ready++;
    this.metrics?.workqueueDepth.set({ name: this.name }, this.ready);
    this.dispatch();
  }

  private dispatch(): void {
    // Priority keys go to the workers kept for them first: the others stay free for the rest.
    while (this.prioGetters.length > 0 && this.prio.size > 0) {
      const item = this.take([this.prio]);
      if (!item) break;
      (this.prioGetters.shift() as (item: QueueItem | undefined) => void)(item);
    }
    while (this.getters.length > 0 && this.ready > 0) {
      const item = this.take();
      if (!item) break;
      (this.getters.shift() as (item: QueueItem | undefined) => void)(item);
    }
  }

  /** Pop the next valid entry of `lanes` (priority lane first), and mark it in process. */
  private take(lanes: readonly Fifo<LaneEntry>[] = [this.prio, this.normal]): QueueItem | undefined {
    if (this.ready === 0) return undefined;
    for (const lane of lanes) {
      for (let e = lane.shift(); e !== undefined; e = lane.shift()) {
        const entry = this.dirty.get(e.key);
        if (!entry || entry.seq !== e.seq || this.processing.has(e.key)) continue; // stale
        this.dirty.delete(e.key);
        this.ready--;
        const now = performance.now();
        this.processing.set(e.key, now);
        this.metrics?.workqueueDepth.set({ name: this.name }, this.ready);
        this.metrics?.workqueueQueueDuration.observe({ name: this.name }, (now - entry.addedAt) / 1000);
        return { key: e.key, priority: entry.priority };
      }
    }
    return undefined;
  }

  private armTimer(): void {
    const next = this.heap.peek();
    if (!next) {
      if (this.timer) clearTimeout(this.timer);
      this.timer = undefined;
      this.timerAt = Infinity;
      return;
    }
    if (this.timer && this.timerAt <= next.readyAt) return;
    if (this.timer) clearTimeout(this.timer);
    const delay = Math.min(Math.max(0, Math.ceil(next.readyAt - performance.now())), MAX_TIMER_MS);
    this.timerAt = next.readyAt;
    this.timer = setTimeout(() => this.fire(), delay);
    // The queue alone must not keep the process alive (tests, CLI exit).
    this.timer.unref();
  }

  private fire(): void {
    this.timer = undefined;
    this.timerAt = Infinity;
    const now = performance.now();
    for (let w = this.heap.peek(); w && w.readyAt <= now; w = this.heap.peek()) {
      this.heap.pop();
      this.waiting.delete(w.key);
      this.add(w.key, { priority: w.priority });
    }
    this.armTimer();
  }

  private unfinishedWork(): { unfinishedSeconds: number; longestRunningSeconds: number } {
    const now = performance.now();
    let total = 0;
    let longest = 0;
    for (const started of this.processing.values()) {
      const d = (now - started) / 1000;
      total += d;
      if (d > longest) longest = d;
    }
    return { unfinishedSeconds: total, longestRunningSeconds: longest };
  }
}
