// A per-connection, per-kind snapshot of the service's objects, read with the bulk list
// endpoints. Observing 10,000 resources one GET at a time would cost 10,000 calls per sync
// period; the inventory costs one list page per hundred objects, and it is also how objects
// created by an earlier (crashed) process are found again: by the crash-safety marker.
import { setTimeout as sleep } from "node:timers/promises";

export interface InventoryOptions<T> {
  /** Reads every object of the kind (all pages). */
  list(): Promise<T[]>;
  /** The object's key in the service (id, or name for skills). */
  keyOf(obj: T): string;
  /** The CR uid in the object's crash-safety marker, if it carries one. */
  markerOf(obj: T): string | undefined;
  /** A snapshot older than this is read again before it is used. */
  maxAgeMs: number;
  /** Called after a refresh with the keys whose object changed or vanished since the last one. */
  onChange?(changed: string[]): void;
  /** Compares two versions of an object; the default compares their JSON. */
  equal?(a: T, b: T): boolean;
  now?: () => number;
  /** How long a read for arrivals waits for more of them (a takeover's objects trickle in): 250 ms. */
  arrivalGatherMs?: number;
  /** At most one read for arrivals per this interval: 1 s. */
  arrivalReadIntervalMs?: number;
  /**
   * A snapshot taken once (a plan), not kept up: the first failed read is given to every later
   * caller instead of being tried again, with the client's full retries, for each of them.
   */
  keepFailure?: boolean;
}

/** Defaults of the arrival pacing (see InventoryOptions). */
const ARRIVAL_GATHER_MS = 250;
const ARRIVAL_READ_INTERVAL_MS = 1_000;

export class Inventory<T> {
  private byKey = new Map<string, T>();
  /** Marker uid -> keys; more than one when a crash left a duplicate behind. */
  private byMarker = new Map<string, Set<string>>();
  private refreshedAt = -Infinity;
  /**
   * Times the snapshot was marked stale. A read that was in flight then may have listed the
   * page before the object an uncertain create made: it leaves the snapshot stale.
   */
  private invalidations = 0;
  /** When a key was last seen after the snapshot: a write's answer, a GET, a confirmed 404. */
  private seenAt = new Map<string, number>();
  /** The read in flight, and the invalidations counted when it was asked for. */
  private inFlight: { done: Promise<void>; invalidations: number } | undefined;
  /** Writes recorded while a read is in flight: the read may have started before them. */
  private writesDuringLoad: Array<{ key: string; obj: T | undefined }> | undefined;
  /**
   * Resources that came from another owner (sharding), by CR uid: when. Until a read started
   * after then, the snapshot may lack what the previous owner created just before it let go.
   */
  private arrivals = new Map<string, number>();
  /** When the last read for arrivals started. */
  private lastArrivalRead = -Infinity;
  /** The failed read given again (InventoryOptions.keepFailure). */
  private failure: { err: unknown } | undefined;
  private readonly now: () => number;

  constructor(private readonly opts: InventoryOptions<T>) {
    this.now = opts.now ?? Date.now;
  }

  /** Reads the service again if the snapshot is stale; concurrent callers share one read. */
  async ensureFresh(): Promise<void> {
    if (this.now() - this.refreshedAt < this.opts.maxAgeMs) return;
    await this.refresh();
  }

  /**
   * Reads the service now; concurrent callers share one read. Not one in flight since before
   * the snapshot was last marked stale (invalidate): it may have listed the page before what an
   * uncertain create made, so another read follows it.
   */
  refresh(): Promise<void> {
    if (this.inFlight !== undefined && this.inFlight.invalidations === this.invalidations) return this.inFlight.done;
    const before = this.inFlight?.done.catch(() => undefined);
    const done: Promise<void> = (before === undefined ? this.load() : before.then(() => this.load())).finally(() => {
      if (this.inFlight?.done === done) this.inFlight = undefined;
    });
    this.inFlight = { done, invalidations: this.invalidations };
    return done;
  }

  /**
   * How long ago the service was last seen to hold what the snapshot says for `key` (the list,
   * or a later write, GET or 404 of that key). For a resource polled more often than the
   * snapshot is read: an age past its interval is read again with one GET.
   */
  ageOf(key: string): number {
    return this.now() - Math.max(this.refreshedAt, this.seenAt.get(key) ?? -Infinity);
  }

  /** Marks the snapshot stale: the next ensureFresh reads the service (after an uncertain create). */
  invalidate(): void {
    this.refreshedAt = -Infinity;
    this.invalidations++;
  }

  get(key: string): T | undefined {
    return this.byKey.get(key);
  }

  /**
   * The resource `uid` came to this process from another owner at `at` (a shard moved). Its
   * previous owner may have created a service object for it after this snapshot was read, and
   * died before its status said so: until the snapshot is read again, a lookup of it by marker
   * must wait (readSinceArrival). Lookups by id need not: an id in status names an object that
   * existed, and a stale snapshot only lags.
   */
  arrived(uid: string, at: number = this.now()): void {
    if (at < this.refreshedAt) return;
    this.arrivals.set(uid, Math.max(at, this.arrivals.get(uid) ?? -Infinity));
  }

  /**
   * Before anything that would create a service object for `uid` on what the snapshot lacks (a
   * lookup by marker, a miss, a replacement): waits for a read started after its arrival, if
   * it arrived since the last one. Objects arrive in batches that trickle in (a takeover, a
   * join): a read waits a moment for the rest of its batch, and reads for arrivals start at
   * most once a second, so one read serves them all. Resolves true when the snapshot was read
   * meanwhile (what the caller looked at before may be outdated), false when it was current.
   */
  async readSinceArrival(uid: string): Promise<boolean> {
    if (!this.arrivals.has(uid)) return false;
    const gather = this.opts.arrivalGatherMs ?? ARRIVAL_GATHER_MS;
    const interval = this.opts.arrivalReadIntervalMs ?? ARRIVAL_READ_INTERVAL_MS;
    // A read in flight may have started before the arrival: then once more.
    for (let i = 0; i < 3; i++) {
      const at = this.arrivals.get(uid);
      if (at === undefined || this.refreshedAt > at) break;
      const when = Math.max(at + gather, this.lastArrivalRead + interval);
      if (when > this.now()) await sleep(when - this.now());
      if (this.refreshedAt > at) break; // read meanwhile, after the arrival
      this.lastArrivalRead = this.now();
      await this.refresh();
    }
    // Each read dropped the arrivals before it; one left is newer (it moved away and back).
    return true;
  }

  /** Every object carrying this resource's marker, oldest snapshot order first. */
  findByMarker(uid: string): T[] {
    const keys = this.byMarker.get(uid);
    if (keys === undefined) return [];
    const found: T[] = [];
    for (const key of keys) {
      const obj = this.byKey.get(key);
      if (obj !== undefined) found.push(obj);
    }
    return found;
  }

  /** Everything in the snapshot (for orphan detection). */
  values(): IterableIterator<T> {
    return this.byKey.values();
  }

  get size(): number {
    return this.byKey.size;
  }

  /** Records what a create, update or renew answered, so the snapshot stays current between reads. */
  put(obj: T): void {
    const key = this.opts.keyOf(obj);
    this.writesDuringLoad?.push({ key, obj });
    this.index(key, obj);
    this.seenAt.set(key, this.now());
  }

  remove(key: string): void {
    this.writesDuringLoad?.push({ key, obj: undefined });
    this.unindex(key);
    this.seenAt.set(key, this.now());
  }

  private index(key: string, obj: T): void {
    const previous = this.byKey.get(key);
    if (previous !== undefined) this.unindexMarker(previous, key);
    this.byKey.set(key, obj);
    const marker = this.opts.markerOf(obj);
    if (marker === undefined) return;
    let keys = this.byMarker.get(marker);
    if (keys === undefined) this.byMarker.set(marker, (keys = new Set()));
    keys.add(key);
  }

  private unindex(key: string): void {
    const previous = this.byKey.get(key);
    if (previous === undefined) return;
    this.unindexMarker(previous, key);
    this.byKey.delete(key);
  }

  private unindexMarker(obj: T, key: string): void {
    const marker = this.opts.markerOf(obj);
    if (marker === undefined) return;
    const keys = this.byMarker.get(marker);
    keys?.delete(key);
    if (keys?.size === 0) this.byMarker.delete(marker);
  }

  private async load(): Promise<void> {
    const startedAt = this.now();
    const invalidations = this.invalidations;
    const writes: Array<{ key: string; obj: T | undefined }> = [];
    this.writesDuringLoad = writes;
    if (this.failure !== undefined) throw this.failure.err;
    let items: T[];
    try {
      items = await this.opts.list();
    } catch (err) {
      if (this.opts.keepFailure === true) this.failure = { err };
      throw err;
    } finally {
      this.writesDuringLoad = undefined;
    }
    const previous = this.byKey;
    this.byKey = new Map();
    this.byMarker = new Map();
    for (const obj of items) this.index(this.opts.keyOf(obj), obj);
    // What we created or deleted ourselves while the list was being read is newer than the list.
    for (const { key, obj } of writes) {
      if (obj === undefined) this.unindex(key);
      else this.index(key, obj);
    }
    // Stale still if it was marked so meanwhile: what it lists may predate an uncertain create.
    this.refreshedAt = this.invalidations === invalidations ? startedAt : -Infinity;
    // Sightings older than the list say nothing more than it does; arrivals before it are read.
    for (const [key, at] of this.seenAt) if (at <= startedAt) this.seenAt.delete(key);
    for (const [uid, at] of this.arrivals) if (at < startedAt) this.arrivals.delete(uid);
    if (!this.opts.onChange) return;
    const equal = this.opts.equal ?? ((a: T, b: T) => JSON.stringify(a) === JSON.stringify(b));
    const changed: string[] = [];
    for (const [key, before] of previous) {
      const after = this.byKey.get(key);
      if (after === undefined || !equal(before, after)) changed.push(key);
    }
    if (changed.length > 0) this.opts.onChange(changed);
  }
}
