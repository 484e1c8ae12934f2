// core/v1 Events with client-go's EventCorrelator ideas, in small
// (k8s.io/client-go/tools/record/events_cache.go):
//
//  - de-duplication: an event identical to one recorded for the same object within the
//    correlation window (10 min) is not created again; the existing Event's `count` and
//    `lastTimestamp` are patched instead (client-go's eventLogger);
//  - spam filter: a token bucket per involved object (burst 25, one token per 5 min, as
//    client-go's EventSourceObjectSpamFilter), so an object failing in a loop cannot flood
//    the API server; applies to repeats too (every patch is a write);
//  - writes are asynchronous and never throw into the caller; repeats that arrive while a
//    write for the same event is in flight are coalesced into one patch;
//  - writes are rate limited (10/s, burst 100, as client-go's event sink is by its client's
//    QPS): a cold start of 10,000 resources records 10,000 "Created" events, and writing them
//    all would compete with the status writes for the API server. Beyond `maxPending` waiting
//    writes, new events are dropped (counted in agentcompute_events_total{result="dropped"});
//  - similar Normal events of many objects (client-go's EventAggregator, across objects): of
//    the reasons in `aggregateReasons` ("Created"), the first `aggregateAfter` (10) per
//    namespace, kind and reason in a window of `correlationWindowMs` (10 min, from the first of
//    them) are written for their objects; the rest of the window are counted into one Event on
//    the namespace, "(combined from similar events)", written at most once per
//    `aggregateFlushMs` (10 s). The next window starts a new combined Event, so its `count` and
//    its message ("for N more ... in 10 min") are of one window and say the same. (client-go's
//    aggregate record lasts as long as similar events keep coming within 10 min of each other,
//    and its message carries no count.) A cold start of 10,000 resources made one Created Event
//    each: a third of its Kubernetes writes, for a fact each resource's status already tells.
//    Warnings are never aggregated;
//  - agentcompute_events_total counts every event recorded once, by what became of it:
//    `created` (it made a new Event, a combined one included), `aggregated` (it was counted on
//    an existing Event: a repeat, or a fold into a combined Event after its first), `dropped`
//    (the spam filter, `maxPending`, the shutdown, or EventOptions.while), `failed` (the API
//    server refused the write). It is counted when that is known: at the write;
//  - messages are scrubbed of anything that looks like a credential, and truncated to the
//    API's 1 KiB note limit.
// Both rate limits are the code base's one token bucket (src/lib/token-bucket.ts). The caches of
// recent events and per-object buckets are LRUs on a Map (its iteration order is insertion
// order, so delete + set is the whole LRU: lruSet/lruTouch below); lru-cache would be a
// dependency for those ten lines.
import type { Logger } from "pino";
import { setTimeout as sleep } from "node:timers/promises";
import { errorMessage } from "../lib/errors.js";
import { TokenBucket } from "../lib/token-bucket.js";
import { eventsPath, isAlreadyExists, isNotFound, type KubeClient, type KubeObject } from "./kube-client.js";
import type { Metrics } from "./metrics.js";
import { formatTime } from "./status.js";

export type EventType = "Normal" | "Warning";

export const REPORTING_CONTROLLER = "agentcompute.dev/agent-operator";

export interface EventRecorderOptions {
  client: KubeClient;
  logger: Logger;
  metrics?: Metrics;
  /** reportingInstance: the manager's identity (hostname + suffix). */
  reportingInstance: string;
  /** Default "agentcompute.dev/agent-operator". */
  reportingController?: string;
  /** source.component of legacy Events (default "agent-operator"). */
  component?: string;
  /** Identical events inside this window are aggregated (default 10 min). */
  correlationWindowMs?: number;
  /** Per-object spam filter: burst and refill interval (defaults 25 and 5 min). */
  spamBurst?: number;
  spamRefillMs?: number;
  /** Bound on remembered events and objects (LRU; default 4096). */
  cacheSize?: number;
  /** Writes to the API server at once (default 4); beyond `maxPending` events are dropped (default 1000). */
  maxConcurrentWrites?: number;
  maxPending?: number;
  /** Normal reasons aggregated across objects (default none; the manager passes ["Created"]). */
  aggregateReasons?: readonly string[];
  /** Similar events written for their own objects before aggregation starts (default 10). */
  aggregateAfter?: number;
  /** The aggregate Event is written at most this often (default 10 s). */
  aggregateFlushMs?: number;
  /** Event writes (creates and patches) per second, and burst (defaults 10 and 100). */
  qps?: number;
  burst?: number;
  /** One clock for all (tests); default: Date.now for timestamps, performance.now for rate limits and windows. */
  now?: () => number;
}

interface Entry {
  name: string;
  namespace: string;
  body: EventBody;
  count: number;
  writtenCount: number;
  lastSeen: number;
  created: boolean;
  writing: boolean;
  again: boolean;
  /**
   * An Event combining similar events of many objects: its message for a count (it says the
   * count, and changes with every fold; patched too).
   */
  combined?: (count: number) => string;
  /** A combined Event's write is waiting for the flush timer. */
  flushing?: boolean;
  /** EventOptions.while of the latest event recorded into this entry. */
  allowed?: () => boolean;
}

/** Similar events of one namespace, kind and reason in one correlation window, from `since`. */
interface Similar {
  since: number;
  count: number;
  /** The window's combined Event: every event of the window past `aggregateAfter`, and no other. */
  combined?: Entry;
}

interface EventBody {
  apiVersion: "v1";
  kind: "Event";
  metadata: { name: string; namespace: string };
  involvedObject: {
    apiVersion?: string;
    kind?: string;
    name?: string;
    namespace?: string;
    uid?: string;
    resourceVersion?: string;
  };
  reason: string;
  message: string;
  type: EventType;
  count: number;
  firstTimestamp: string;
  lastTimestamp: string;
  source: { component: string };
  reportingComponent: string;
  reportingInstance: string;
  action?: string;
}

const MAX_MESSAGE = 1024;
/** What of a message is scrubbed (and kept): well over MAX_MESSAGE, which is what is written. */
const SCRUB_LIMIT = 4 * MAX_MESSAGE;
const MAX_REASON = 128;

/**
 * Redact what looks like a credential: an Authorization value (scheme and credential), bearer
 * and basic credentials, JWTs, PEM private keys, a URL's user:password@, and `key=value` /
 * `"key": "value"` pairs whose key names a secret, camelCase too (apiToken, sessionToken,
 * private_key). Callers must not put secrets in messages; this is the net.
 */
export function scrubSecrets(message: string): string {
  // Bounded first: the patterns backtrack, and a message (a webhook's Status text) has no bound.
  return message
    .slice(0, SCRUB_LIMIT)
    .replace(/-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)/g, "[REDACTED]")
    .replace(/\b(authorization)(["']?\s*[:=]\s*["']?)(?!\[REDACTED\])(?:(?:Bearer|Basic|Token|Digest|Negotiate)\s+)?[^\s"',;&}]+/gi, "$1$2[REDACTED]")
    .replace(/\b(Bearer|Basic)\s+(?!\[REDACTED\])[A-Za-z0-9\-._~+/]+=*/g, "$1 [REDACTED]")
    .replace(/\b(Token)\s+(?!\[REDACTED\])[A-Za-z0-9\-._~+/]{16,}=*/g, "$1 [REDACTED]")
    .replace(/\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*/g, "[REDACTED]")
    .replace(/\b([a-z][a-z0-9+.-]*:\/\/)[^/\s:@]+:[^/\s@]+@/gi, "$1[REDACTED]@")
    .replace(
      /\b([\w-]{0,32}?(?:api[_-]?key|apikey|token|client[_-]?secret|secret|password|passwd|private[_-]?key))(["']?\s*[:=]\s*["']?)(?!\[REDACTED\])[^\s"',;&}]+/gi,
      "$1$2[REDACTED]",
    );
}

/** What a reconciler records Events with. */
export type Events = Pick<EventRecorder, "normal" | "warning">;

export interface EventOptions {
  /** The Event's `action`. */
  action?: string;
  /**
   * Asked again just before each write: false drops the write. An Event can wait seconds for
   * the rate limit, or for a combined Event's flush, after it was recorded.
   */
  while?: () => boolean;
}

/**
 * `events` recording nothing while `allowed()` says no, and writing nothing it recorded once
 * `allowed()` says no (sharded mode: a replica whose membership lapsed does not report on
 * objects another replica may own by now).
 */
export function eventsWhile(events: Events, allowed: () => boolean): Events {
  return {
    normal: (obj, reason, message, opts) => {
      if (allowed()) events.normal(obj, reason, message, { ...opts, while: allowed });
    },
    warning: (obj, reason, message, opts) => {
      if (allowed()) events.warning(obj, reason, message, { ...opts, while: allowed });
    },
  };
}

export class EventRecorder {
  private readonly o: Required<Omit<EventRecorderOptions, "metrics" | "now">> & Pick<EventRecorderOptions, "metrics">;
  /** The wall clock: Events' timestamps and names. */
  private readonly now: () => number;
  /** The monotonic clock: rate limits and correlation windows, which a wall clock stepped back would stall. */
  private readonly tick: () => number;
  private readonly log: Logger;
  private readonly entries = new Map<string, Entry>();
  private readonly buckets = new Map<string, TokenBucket>();
  private readonly similar = new Map<string, Similar>();
  /** Combined Events waiting for their flush timer; flush() and close() end the wait. */
  private readonly combinedWaits = new Set<() => void>();
  private readonly aggregated: ReadonlySet<string>;
  private readonly pending = new Set<Promise<void>>();
  private active = 0;
  private readonly slots: (() => void)[] = [];
  private seq = 0;
  /** Event writes (creates and patches): qps, burst. */
  private readonly writes: TokenBucket;
  private closed = false;
  private readonly closing = new AbortController();

  constructor(opts: EventRecorderOptions) {
    this.aggregated = new Set(opts.aggregateReasons ?? []);
    this.o = {
      reportingController: REPORTING_CONTROLLER,
      component: "agent-operator",
      correlationWindowMs: 10 * 60_000,
      spamBurst: 25,
      spamRefillMs: 5 * 60_000,
      cacheSize: 4096,
      maxConcurrentWrites: 4,
      maxPending: 1000,
      qps: 10,
      burst: 100,
      aggregateReasons: [],
      aggregateAfter: 10,
      aggregateFlushMs: 10_000,
      ...opts,
    };
    this.now = opts.now ?? Date.now;
    this.tick = opts.now ?? (() => performance.now());
    this.log = opts.logger.child({ component: "events" });
    if (!(this.o.qps > 0) || !(this.o.burst >= 1)) throw new RangeError("EventRecorder: qps must be > 0 and burst >= 1");
    this.writes = new TokenBucket({ rate: this.o.qps, burst: this.o.burst, now: this.tick });
  }

  normal(obj: KubeObject, reason: string, message: string, opts: EventOptions = {}): void {
    this.event(obj, "Normal", reason, message, opts);
  }

  warning(obj: KubeObject, reason: string, message: string, opts: EventOptions = {}): void {
    this.event(obj, "Warning", reason, message, opts);
  }

  /** Record an event. Never throws, never blocks: the write happens in the background. */
  event(obj: KubeObject, type: EventType, reason: string, message: string, opts: EventOptions = {}): void {
    try {
      this.record(obj, type, reason, message, opts);
    } catch (err) {
      this.log.warn({ err: errorMessage(err) }, "could not record event");
    }
  }

  /**
   * Stop: new events are ignored, and writes not started yet are dropped (a rate-limited
   * backlog would otherwise keep the process alive, writing through a closed client). Call
   * after a bounded flush(), before closing the client.
   */
  close(): void {
    this.closed = true;
    this.closing.abort();
    for (const now of [...this.combinedWaits]) now();
  }

  /** Wait for every write scheduled so far (tests, shutdown). */
  async flush(): Promise<void> {
    while (this.pending.size > 0) {
      for (const now of [...this.combinedWaits]) now();
      await Promise.allSettled([...this.pending]);
    }
  }

  private record(obj: KubeObject, type: EventType, reason: string, rawMessage: string, { action, while: allowed }: EventOptions): void {
    if (this.closed) return;
    const now = this.now();
    const at = this.tick();
    const meta = obj.metadata;
    if (type === "Normal" && this.aggregated.has(reason) && this.combine(obj, reason, rawMessage, { now, at }, allowed)) return;
    const objectKey = `${obj.kind ?? ""}/${meta.namespace ?? ""}/${meta.name ?? ""}/${meta.uid ?? ""}`;
    if (!this.allow(objectKey)) {
      this.tally(type, "dropped");
      this.log.debug({ reason, object: objectKey }, "event dropped by the per-object spam filter");
      return;
    }
    const message = truncate(scrubSecrets(rawMessage), MAX_MESSAGE);
    reason = truncate(reason, MAX_REASON);
    const key = `${objectKey}|${type}|${reason}|${action ?? ""}|${message}`;
    const ts = formatTime(new Date(now));
    let entry = this.entries.get(key);
    if (entry && at - entry.lastSeen <= this.o.correlationWindowMs) {
      entry.count++;
      entry.lastSeen = at;
      entry.body.lastTimestamp = ts;
      lruTouch(this.entries, key, entry);
    } else {
      if (this.pending.size >= this.o.maxPending) {
        this.tally(type, "dropped");
        return;
      }
      const namespace = meta.namespace || "default";
      const name = `${meta.name ?? "object"}.${this.uniqueSuffix(now)}`;
      const involved = { apiVersion: obj.apiVersion, kind: obj.kind, name: meta.name, namespace: meta.namespace, uid: meta.uid, resourceVersion: meta.resourceVersion };
      const body = this.newBody(namespace, name, involved, type, reason, message, ts);
      if (action) body.action = truncate(action, 128);
      entry = { name, namespace, body, count: 1, writtenCount: 0, lastSeen: at, created: false, writing: false, again: false };
      lruSet(this.entries, key, entry, this.o.cacheSize);
    }
    entry.allowed = allowed;
    this.schedule(entry);
  }

  /**
   * Counts a similar event; past `aggregateAfter` in the window, folds it into the window's
   * combined Event on the namespace (true: the caller writes nothing for the object itself).
   */
  private combine(obj: KubeObject, reason: string, rawMessage: string, { now, at }: { now: number; at: number }, allowed: EventOptions["while"]): boolean {
    const namespace = obj.metadata.namespace || "default";
    const kind = obj.kind ?? "object";
    const key = `${namespace}|${kind}|${reason}`;
    let similar = this.similar.get(key);
    if (similar === undefined || at - similar.since > this.o.correlationWindowMs) {
      similar = { since: at, count: 0 };
      lruSet(this.similar, key, similar, this.o.cacheSize);
    }
    similar.count++;
    if (similar.count <= this.o.aggregateAfter) return false;
    const ts = formatTime(new Date(now));
    const minutes = this.o.correlationWindowMs / 60_000;
    const last = obj.metadata.name ?? "";
    const message = (count: number): string =>
      truncate(scrubSecrets(`(combined from similar events): ${reason} for ${count} more ${kind} resources in ${minutes} min; the last, ${last}: ${rawMessage}`), MAX_MESSAGE);
    // One combined Event per window (a new window, a new Event): its count is the window's folds.
    let entry = similar.combined;
    if (entry === undefined) {
      const name = `${namespace}.${this.uniqueSuffix(now)}`;
      // The API server requires an Event's involvedObject.namespace to be its own namespace
      // (a cluster-scoped object's Events would have to live in "default", out of the users'
      // sight): the Namespace is named with its own name as namespace, so that
      // `kubectl get events -n <ns>` lists it next to the resources' own.
      const involved = { apiVersion: "v1", kind: "Namespace", name: namespace, namespace };
      const body = this.newBody(namespace, name, involved, "Normal", reason, message(1), ts);
      entry = { name, namespace, body, count: 0, writtenCount: 0, lastSeen: at, created: false, writing: false, again: false };
      similar.combined = entry;
    }
    entry.count++;
    entry.lastSeen = at;
    entry.combined = message; // the message is made for the count written, at the write
    entry.body.lastTimestamp = ts;
    entry.allowed = allowed;
    this.scheduleCombined(entry);
    return true;
  }

  /** A combined Event is written once per `aggregateFlushMs`, with everything folded meanwhile. */
  private scheduleCombined(entry: Entry): void {
    if (entry.flushing) return;
    entry.flushing = true;
    const p = new Promise<void>((resolve) => {
      const now = (): void => {
        clearTimeout(timer);
        this.combinedWaits.delete(now);
        resolve();
      };
      const timer = setTimeout(now, this.o.aggregateFlushMs);
      timer.unref();
      this.combinedWaits.add(now);
    }).then(() => {
      entry.flushing = false;
      this.schedule(entry); // closed meanwhile: the write counts what it drops
    });
    this.pending.add(p);
    void p.finally(() => this.pending.delete(p));
  }

  /** A new core/v1 Event, counted once. */
  private newBody(namespace: string, name: string, involvedObject: EventBody["involvedObject"], type: EventType, reason: string, message: string, ts: string): EventBody {
    return {
      apiVersion: "v1",
      kind: "Event",
      metadata: { name, namespace },
      involvedObject,
      reason,
      message,
      type,
      count: 1,
      firstTimestamp: ts,
      lastTimestamp: ts,
      source: { component: this.o.component },
      reportingComponent: this.o.reportingController,
      reportingInstance: truncate(this.o.reportingInstance, 128),
    };
  }

  private schedule(entry: Entry): void {
    if (entry.writing) {
      entry.again = true; // coalesced into the write after the current one
      return;
    }
    entry.writing = true;
    const p = (async () => {
      try {
        do {
          entry.again = false;
          await this.withSlot(() => this.write(entry));
        } while (entry.again && entry.writtenCount < entry.count);
      } finally {
        entry.writing = false;
      }
    })();
    this.pending.add(p);
    void p.finally(() => this.pending.delete(p));
  }

  /**
   * Writes what was recorded into the entry and not written yet (`unwritten` events), and
   * counts each of them once in agentcompute_events_total by what became of it.
   */
  private async write(entry: Entry): Promise<void> {
    const count = entry.count;
    const unwritten = count - entry.writtenCount;
    if (unwritten <= 0) return;
    const type = entry.body.type;
    if (this.closed || entry.allowed?.() === false) {
      // Shutting down, or no longer allowed: what was recorded until now is not written; later events are.
      this.tally(type, "dropped", unwritten);
      entry.writtenCount = count;
      return;
    }
    try {
      if (!entry.created) {
        await this.create(entry, count);
        this.tally(type, "created");
        this.tally(type, "aggregated", unwritten - 1);
        return;
      }
      try {
        const patch = entry.combined
          ? { count, lastTimestamp: entry.body.lastTimestamp, message: entry.combined(count) }
          : { count, lastTimestamp: entry.body.lastTimestamp };
        await this.o.client.patch(eventsPath(entry.namespace, entry.name), patch, "merge", { discardResult: true });
        entry.writtenCount = Math.max(entry.writtenCount, count);
        this.tally(type, "aggregated", unwritten);
      } catch (err) {
        if (!isNotFound(err)) throw err;
        // The Event expired (the API server keeps them 1 h): a new one, counting the events not
        // written yet (those of the expired one went with it). Events recorded meanwhile stay
        // counted in the entry, for the next write.
        entry.name = `${entry.body.involvedObject.name ?? "object"}.${this.uniqueSuffix(this.now())}`;
        entry.body.metadata.name = entry.name;
        entry.body.firstTimestamp = entry.body.lastTimestamp;
        entry.created = false;
        entry.count -= entry.writtenCount;
        entry.writtenCount = 0;
        await this.create(entry, unwritten);
        this.tally(type, "created");
        this.tally(type, "aggregated", unwritten - 1);
      }
    } catch (err) {
      // Do not retry a failing write in a loop: the events it held, and those recorded while it
      // was tried, are not written.
      this.tally(type, "failed", entry.count - entry.writtenCount);
      this.log.warn({ err: errorMessage(err), reason: entry.body.reason }, "could not write event");
      entry.writtenCount = entry.count;
    }
  }

  /** Creates the entry's Event with `count` (a combined Event's message saying the same). */
  private async create(entry: Entry, count: number): Promise<void> {
    if (entry.combined) entry.body.message = entry.combined(count);
    try {
      await this.o.client.create(eventsPath(entry.namespace), { ...entry.body, count }, { discardResult: true });
      entry.created = true;
      entry.writtenCount = count;
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
      entry.created = true; // name collision with ourselves (retry after timeout): patch next time
      const patch = entry.combined
        ? { count, lastTimestamp: entry.body.lastTimestamp, message: entry.body.message }
        : { count, lastTimestamp: entry.body.lastTimestamp };
      await this.o.client.patch(eventsPath(entry.namespace, entry.name), patch, "merge", { discardResult: true });
      entry.writtenCount = count;
    }
  }

  /** Counts `n` events recorded in agentcompute_events_total. */
  private tally(type: EventType, result: "created" | "aggregated" | "dropped" | "failed", n = 1): void {
    if (n > 0) this.o.metrics?.eventsTotal.inc({ type, result }, n);
  }

  /** The per-object spam filter: `spamBurst` events, then one per `spamRefillMs`. */
  private allow(objectKey: string): boolean {
    let b = this.buckets.get(objectKey);
    if (!b) {
      b = new TokenBucket({ rate: 1, perMs: this.o.spamRefillMs, burst: this.o.spamBurst, now: this.tick });
      lruSet(this.buckets, objectKey, b, this.o.cacheSize);
    } else {
      lruTouch(this.buckets, objectKey, b);
    }
    return b.take() === 0;
  }

  private async withSlot(fn: () => Promise<void>): Promise<void> {
    // A finished write hands its slot straight to the next waiter, so the bound is exact.
    if (this.active >= this.o.maxConcurrentWrites) await new Promise<void>((resolve) => this.slots.push(resolve));
    else this.active++;
    try {
      // The rate limit, taken while holding a slot: waiters queue on the slots, in order.
      // Shutting down: no wait, and fn() drops (and counts) what has not been written by now.
      const waitMs = this.closed ? 0 : this.writes.reserve();
      if (waitMs > 0) await sleep(waitMs, undefined, { signal: this.closing.signal }).catch(() => undefined);
      await fn();
    } finally {
      const next = this.slots.shift();
      if (next) next();
      else this.active--;
    }
  }

  /** client-go names events `<object>.<unix nanos in hex>`; a counter keeps same-ms events apart. */
  private uniqueSuffix(now: number): string {
    this.seq = (this.seq + 1) % 1_000_000;
    return (BigInt(now) * 1_000_000n + BigInt(this.seq)).toString(16);
  }
}

function truncate(s: string, max: number): string {
  return s.length <= max ? s : `${s.slice(0, max - 3)}...`;
}

function lruSet<V>(m: Map<string, V>, k: string, v: V, max: number): void {
  m.delete(k);
  m.set(k, v);
  while (m.size > max) {
    const oldest = m.keys().next();
    if (oldest.done) break;
    m.delete(oldest.value);
  }
}

function lruTouch<V>(m: Map<string, V>, k: string, v: V): void {
  m.delete(k);
  m.set(k, v);
}
