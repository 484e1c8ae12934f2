// Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics
// (k8s.io/client-go/tools/leaderelection):
//
//  - defaults leaseDuration 15 s, renewDeadline 10 s, retryPeriod 2 s (jittered x1.2);
//  - a candidate acquires when the Lease has no holder, or when the record it OBSERVED has
//    not changed for leaseDuration measured on its OWN clock (never the holder's renewTime:
//    clocks skew), exactly as client-go's observedTime;
//  - writes carry the resourceVersion read (optimistic concurrency): 409 -> lost this round,
//    try again next retryPeriod;
//  - the leader renews every retryPeriod; if it cannot renew for renewDeadline it stops
//    leading (onStoppedLeading) - better two seconds of nobody than two leaders;
//  - leaseTransitions increments whenever the holder changes;
//  - on shutdown (ReleaseOnCancel) the leader clears holderIdentity, so a successor takes
//    over at its next retry instead of waiting for the lease to expire.
//
// One deliberate difference: a candidate whose observed lease runs out before its next retry
// looks again at that moment, not up to a retry period (2.4 s) later. Once a leader dies,
// nobody leads until a candidate looks; client-go's spread of 0-2.4 s after expiry was most of
// the spread of a sharded failover (docs/performance.md, "A new leader's start").
//
// And one addition (HolderRecord, sharded mode only): the holder may say on the Lease which
// process it is, and a candidate holding proof that this process ended (the kubelet's report
// of its crash) takes the Lease then, on the version it read, instead of a lease duration later.
// So a leader that finds the Lease held by another stops at once rather than at its renew deadline.
import type { Logger } from "pino";
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { setTimeout as sleep } from "node:timers/promises";
import { errorMessage } from "../lib/errors.js";
import { isConflict, isAlreadyExists, isNotFound, leasesPath, type KubeClient } from "./kube-client.js";
import type { Metrics } from "./metrics.js";
import { LeaseValidity, instant } from "./lease-validity.js";

export interface Lease {
  apiVersion?: string;
  kind?: string;
  metadata: { name?: string; namespace?: string; resourceVersion?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  spec?: {
    holderIdentity?: string | null;
    leaseDurationSeconds?: number | null;
    acquireTime?: string | null;
    renewTime?: string | null;
    leaseTransitions?: number | null;
  };
}

export interface LeaderElectorOptions {
  client: KubeClient;
  namespace: string;
  /** Lease name (also the metric label). */
  name: string;
  /** Default: hostname + "_" + random suffix. */
  identity?: string;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  /** Clear holderIdentity on stop (default true). */
  releaseOnCancel?: boolean;
  logger: Logger;
  metrics?: Metrics;
  /** Called once leadership is acquired; `signal` aborts when it is lost or on stop. */
  onStartedLeading(signal: AbortSignal): void | Promise<void>;
  /** Called once when leadership ends (lost, or released on stop). */
  onStoppedLeading?(): void;
  /** Called when the observed leader changes (including to ourselves). */
  onNewLeader?(identity: string): void;
  /** What a holder says of itself on the Lease, and how a candidate tells it has ended (HolderRecord). */
  holder?: HolderRecord;
}

/**
 * A holder's word about itself on the Lease, and a candidate's proof that a holder whose Lease
 * has not run out has ended (sharded mode: the kubelet's report of its crash,
 * src/sharding/crash-report.ts): the Lease is taken then, on the version the proof was read
 * from, rather than a lease duration after the holder's last renewal.
 */
export interface HolderRecord {
  /**
   * Written with every write of the Lease (null: removed), so that they describe the process
   * that wrote it last, in the acquisition whose `spec.acquireTime` is given.
   */
  annotations(acquireTime: string): Readonly<Record<string, string | null>>;
  /** Whether the holder of `lease` (not this replica) is known to have ended. */
  ended(lease: Lease): boolean;
  /** How long the Lease must also have gone unchanged, as this candidate saw it, before `ended` is asked. */
  silenceMs: number;
}

const JITTER_FACTOR = 1.2;

/** client-go's MicroTime wire format, RFC 3339 with microseconds: a Lease's acquireTime and renewTime. */
export function microTime(at: Date | number): string {
  return new Date(at).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}

export function defaultIdentity(): string {
  return `${hostname()}_${randomBytes(4).toString("hex")}`;
}

/** A write refused unsent: this leader's Lease was not renewed within the renew deadline (LeaderElector.mayLead). */
export class LeadershipLapsed extends Error {
  constructor() {
    super("not sent: this replica's leadership is not current (its leader Lease not renewed within the renew deadline); another replica may lead by now");
    this.name = "LeadershipLapsed";
  }
}

export class LeaderElector {
  readonly identity: string;
  private readonly o: Required<Pick<LeaderElectorOptions, "leaseDurationMs" | "renewDeadlineMs" | "retryPeriodMs" | "releaseOnCancel">> &
    LeaderElectorOptions;
  private readonly log: Logger;
  private observed: Lease | undefined;
  /** When `observed` last changed, on the monotonic clock: a step of the wall clock must not make a held lease look expired (client-go uses the monotonic clock too). */
  private observedTime = 0;
  private observedRaw = "";
  /** When the lease another holds runs out on our clock, unless it changes before (0: not held). */
  private heldUntil = 0;
  private leading = false;
  private reportedLeader = "";
  private leadingAbort: AbortController | undefined;
  /** How long the last acquire or renewal lets this leader write (mayLead). */
  private readonly validity = new LeaseValidity();
  /** Leave the lease to expire on stop, releaseOnCancel or not (see keepLeaseOnStop). */
  private keepLease = false;

  constructor(opts: LeaderElectorOptions) {
    // `??`, not a spread of defaults: an option passed as undefined must not wipe its default
    // (the manager forwards unset timings as undefined; NaN timings crashed the renew loop).
    this.o = {
      ...opts,
      leaseDurationMs: opts.leaseDurationMs ?? 15_000,
      renewDeadlineMs: opts.renewDeadlineMs ?? 10_000,
      retryPeriodMs: opts.retryPeriodMs ?? 2_000,
      releaseOnCancel: opts.releaseOnCancel ?? true,
    };
    const { leaseDurationMs, renewDeadlineMs, retryPeriodMs } = this.o;
    // The same sanity checks as client-go's NewLeaderElector.
    if (leaseDurationMs <= renewDeadlineMs) throw new Error("leaseDuration must be greater than renewDeadline");
    if (renewDeadlineMs <= JITTER_FACTOR * retryPeriodMs) throw new Error("renewDeadline must be greater than retryPeriod*1.2");
    if (retryPeriodMs < 1) throw new Error("retryPeriod must be positive");
    this.identity = opts.identity ?? defaultIdentity();
    this.log = opts.logger.child({ lease: `${opts.namespace}/${opts.name}`, identity: this.identity });
    this.o.metrics?.leaderElectionMasterStatus.set({ name: opts.name }, 0);
  }

  isLeader(): boolean {
    return this.leading;
  }

  /**
   * Whether this leader may write now: leading, and an acquire or renewal sent less than the
   * renew deadline ago succeeded. isLeader() alone stays true until the renew loop looks again:
   * a process stopped for longer (a VM frozen, a CPU starved) wakes up with its work queue's
   * timers due before that look, while another may have taken the Lease a lease duration after
   * its last renewal. (client-go leaves this gap open; the sharded replicas' member Leases close
   * it the same way.)
   */
  mayLead(): boolean {
    return this.leading && this.validity.mayWork();
  }

  /**
   * On stop, do not release the lease: leave it to expire, so that a successor waits one lease
   * duration. For a stop whose work may still be writing (a reconcile that outlived the grace
   * period), which a successor taking over at once would act beside.
   */
  keepLeaseOnStop(): void {
    this.keepLease = true;
  }

  /** Holder identity as last observed ("" when none). */
  getLeader(): string {
    return this.observed?.spec?.holderIdentity ?? "";
  }

  /**
   * Campaign, lead, and return when leadership is lost or `signal` aborts (then release the
   * lease if we hold it). Never throws for API errors: they are retried.
   */
  async run(signal: AbortSignal): Promise<void> {
    try {
      if (!(await this.acquire(signal))) return;
      const leading = new AbortController();
      this.leadingAbort = leading;
      const onAbort = (): void => leading.abort(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
      this.setLeading(true);
      try {
        // Do not let a throwing callback take the elector down; run it alongside renewal.
        void Promise.resolve()
          .then(() => this.o.onStartedLeading(leading.signal))
          .catch((err: unknown) => this.log.error({ err: errorMessage(err) }, "onStartedLeading failed"));
        await this.renewLoop(signal);
      } finally {
        signal.removeEventListener("abort", onAbort);
        leading.abort(new Error("leadership ended"));
        this.validity.end();
        this.setLeading(false);
        if (signal.aborted && this.o.releaseOnCancel && !this.keepLease) await this.release();
        try {
          this.o.onStoppedLeading?.();
        } catch (err) {
          this.log.error({ err: errorMessage(err) }, "onStoppedLeading failed");
        }
      }
    } finally {
      this.leadingAbort = undefined;
    }
  }

  /** Retry every retryPeriod (jittered) until acquired; false if aborted first. */
  private async acquire(signal: AbortSignal): Promise<boolean> {
    this.log.info("attempting to acquire leader lease");
    while (!signal.aborted) {
      if (await this.tryAcquireOrRenew(signal, true)) {
        this.log.info("acquired leader lease");
        return true;
      }
      const untilExpiry = this.heldUntil - performance.now();
      const delay = jitter(this.o.retryPeriodMs);
      if (!(await this.wait(untilExpiry >= 0 && untilExpiry < delay ? untilExpiry + 1 : delay, signal))) return false;
    }
    return false;
  }

  /** Renew every retryPeriod; return when a round could not renew within renewDeadline, or on abort. */
  private async renewLoop(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      if (!(await this.wait(this.o.retryPeriodMs, signal))) return;
      // One round = retry every retryPeriod until renewed or renewDeadline has passed
      // (client-go: PollImmediateUntil(retryPeriod, tryAcquireOrRenew, renewDeadline ctx)).
      const deadline = performance.now() + this.o.renewDeadlineMs;
      let renewed = false;
      while (!signal.aborted) {
        const attemptSignal = AbortSignal.any([signal, AbortSignal.timeout(Math.max(1, Math.ceil(deadline - performance.now())))]);
        renewed = await this.tryAcquireOrRenew(attemptSignal, false);
        if (renewed || performance.now() >= deadline) break;
        // Taken by another (a candidate that knew this holder ended, HolderRecord): nothing to
        // retry for, and leading on until the deadline would make two leaders.
        const holder = this.getLeader();
        if (holder !== "" && holder !== this.identity) {
          this.log.error({ leader: holder }, "the leader Lease is held by another; leadership lost");
          return;
        }
        if (!(await this.wait(Math.min(this.o.retryPeriodMs, Math.max(1, Math.ceil(deadline - performance.now()))), signal))) return;
      }
      if (signal.aborted) return;
      if (!renewed) {
        this.log.error({ renewDeadlineMs: this.o.renewDeadlineMs }, "failed to renew lease in time; leadership lost");
        return;
      }
    }
  }

  /** `campaigning`: not leading (acquire), where a holder known to have ended is succeeded. */
  private async tryAcquireOrRenew(signal: AbortSignal, campaigning: boolean): Promise<boolean> {
    const path = leasesPath(this.o.namespace, this.o.name);
    const now = new Date();
    const leaseDurationSeconds = Math.ceil(this.o.leaseDurationMs / 1000);
    let current: Lease;
    try {
      current = await this.o.client.get<Lease>(path, { signal });
    } catch (err) {
      if (!isNotFound(err)) {
        this.log.warn({ err: errorMessage(err) }, "error retrieving lease");
        return false;
      }
      const lease: Lease = {
        apiVersion: "coordination.k8s.io/v1",
        kind: "Lease",
        metadata: { name: this.o.name, namespace: this.o.namespace, annotations: this.holderAnnotations(undefined, microTime(now)) },
        spec: {
          holderIdentity: this.identity,
          leaseDurationSeconds,
          acquireTime: microTime(now),
          renewTime: microTime(now),
          leaseTransitions: 0,
        },
      };
      try {
        const sent = instant();
        const created = await this.o.client.create<Lease>(leasesPath(this.o.namespace), lease, { signal });
        this.observe(created);
        this.validity.renewed(sent, this.o.renewDeadlineMs);
        return true;
      } catch (e) {
        if (!isAlreadyExists(e)) this.log.warn({ err: errorMessage(e) }, "error creating lease");
        return false;
      }
    }
    this.observe(current);
    const spec = current.spec ?? {};
    const holder = spec.holderIdentity ?? "";
    const observedDurationMs = (spec.leaseDurationSeconds ?? leaseDurationSeconds) * 1000;
    const unexpired = holder !== "" && holder !== this.identity && this.observedTime + observedDurationMs > performance.now();
    // Only while campaigning: a leader that finds another holder has lost (renewLoop).
    const h = this.o.holder;
    const ended = unexpired && campaigning && h !== undefined && performance.now() - this.observedTime >= h.silenceMs && h.ended(current);
    const held = unexpired && !ended;
    this.heldUntil = held ? this.observedTime + observedDurationMs : 0;
    if (held) return false;
    if (ended) this.log.info({ leader: holder }, "the leader Lease's holder has ended before its Lease ran out (its crash reported): taking the Lease over");
    const iAmHolder = holder === this.identity && this.leading;
    const acquireTime = iAmHolder ? (spec.acquireTime ?? microTime(now)) : microTime(now);
    const next: Lease = {
      ...current,
      metadata: { ...current.metadata, annotations: this.holderAnnotations(current.metadata.annotations, acquireTime) },
      spec: {
        ...spec,
        holderIdentity: this.identity,
        leaseDurationSeconds,
        renewTime: microTime(now),
        acquireTime,
        leaseTransitions: (spec.leaseTransitions ?? 0) + (holder === this.identity ? 0 : 1),
      },
    };
    try {
      const sent = instant();
      const updated = await this.o.client.replace<Lease>(path, next, { signal });
      this.observe(updated);
      this.validity.renewed(sent, this.o.renewDeadlineMs);
      return true;
    } catch (err) {
      // 409: someone else wrote first; we lost this round.
      if (!isConflict(err)) this.log.warn({ err: errorMessage(err) }, "error updating lease");
      return false;
    }
  }

  /** `annotations` with this holder's record (HolderRecord) in place of whatever the holder before wrote. */
  private holderAnnotations(annotations: Record<string, string> | undefined, acquireTime: string): Record<string, string> | undefined {
    const own = this.o.holder?.annotations(acquireTime);
    if (own === undefined) return annotations;
    const out = { ...annotations };
    for (const [k, v] of Object.entries(own)) {
      if (v === null) delete out[k];
      else out[k] = v;
    }
    return Object.keys(out).length > 0 ? out : undefined;
  }

  /** Give the lease up: holderIdentity cleared, duration 1 s (client-go's release()). */
  private async release(): Promise<void> {
    const path = leasesPath(this.o.namespace, this.o.name);
    try {
      const current = await this.o.client.get<Lease>(path, { signal: AbortSignal.timeout(this.o.renewDeadlineMs) });
      if ((current.spec?.holderIdentity ?? "") !== this.identity) return;
      const now = microTime(new Date());
      await this.o.client.replace<Lease>(
        path,
        {
          ...current,
          spec: {
            ...current.spec,
            holderIdentity: null,
            leaseDurationSeconds: 1,
            acquireTime: now,
            renewTime: now,
          },
        },
        { signal: AbortSignal.timeout(this.o.renewDeadlineMs) },
      );
      this.log.info("released leader lease");
    } catch (err) {
      this.log.warn({ err: errorMessage(err) }, "failed to release lease; the successor waits for it to expire");
    }
  }

  private observe(lease: Lease): void {
    const raw = JSON.stringify(lease.spec ?? {});
    // Only a changed record resets the observed time (client-go compares the whole record).
    if (raw !== this.observedRaw) {
      this.observedRaw = raw;
      this.observedTime = performance.now();
    }
    this.observed = lease;
    const holder = lease.spec?.holderIdentity ?? "";
    if (holder && holder !== this.reportedLeader) {
      this.reportedLeader = holder;
      if (holder !== this.identity) this.log.info({ leader: holder }, "new leader observed");
      try {
        this.o.onNewLeader?.(holder);
      } catch (err) {
        this.log.error({ err: errorMessage(err) }, "onNewLeader failed");
      }
    }
  }

  private setLeading(v: boolean): void {
    this.leading = v;
    this.o.metrics?.leaderElectionMasterStatus.set({ name: this.o.name }, v ? 1 : 0);
  }

  private async wait(ms: number, signal: AbortSignal): Promise<boolean> {
    try {
      await sleep(ms, undefined, { signal });
      return true;
    } catch {
      return false;
    }
  }
}

function jitter(ms: number): number {
  return ms + Math.random() * (JITTER_FACTOR - 1) * ms;
}
