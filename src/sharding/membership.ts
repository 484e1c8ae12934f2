// Membership of the ring: each replica holds a Lease of its own (MemberLease), the way each
// node holds one in kube-node-lease, and the sharder counts as members the Leases that have
// not expired (MemberSet).
//
// Timings are leader election's (15 s lease, 10 s renew deadline, 2 s retry): a replica that
// could not renew for the renew deadline stops working (its manager stops), which is before
// the sharder, counting a lease duration from the last renewal it saw, hands its share to
// others. So a share never has two workers, and a SIGKILLed replica's share moves one lease
// duration after its last renewal.
import type { Logger } from "pino";
import { setTimeout as sleep } from "node:timers/promises";
import { errorMessage } from "../lib/errors.js";
import { Informer } from "../runtime/informer.js";
import { isAlreadyExists, isNotFound, leasesPath, type KubeClient } from "../runtime/kube-client.js";
import type { Lease } from "../runtime/leader-election.js";
import type { Metrics } from "../runtime/metrics.js";
import { MEMBER_LABEL } from "./labels.js";

export interface MembershipTimings {
  leaseDurationMs: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
}

export const DEFAULT_TIMINGS: MembershipTimings = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 };

/** client-go's MicroTime wire format. */
function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}

export interface MemberLeaseOptions extends Partial<MembershipTimings> {
  client: KubeClient;
  namespace: string;
  name: string;
  identity: string;
  /** The ring's name (MEMBER_LABEL's value): one ring per operator Deployment. */
  ring: string;
  logger: Logger;
  /** Membership is lost (not renewed within the deadline, or the Lease was deleted): stop working. */
  onLost(reason: string): void;
}

/** This replica's own Lease: created on start, renewed every retry period, deleted on stop. */
export class MemberLease {
  private readonly t: MembershipTimings;
  private readonly log: Logger;
  private readonly abort = new AbortController();
  private loop: Promise<void> | undefined;
  private lost = false;

  constructor(private readonly o: MemberLeaseOptions) {
    this.t = {
      leaseDurationMs: o.leaseDurationMs ?? DEFAULT_TIMINGS.leaseDurationMs,
      renewDeadlineMs: o.renewDeadlineMs ?? DEFAULT_TIMINGS.renewDeadlineMs,
      retryPeriodMs: o.retryPeriodMs ?? DEFAULT_TIMINGS.retryPeriodMs,
    };
    if (this.t.leaseDurationMs <= this.t.renewDeadlineMs) throw new Error("leaseDuration must be greater than renewDeadline");
    this.log = o.logger.child({ memberLease: `${o.namespace}/${o.name}` });
  }

  /** Takes the Lease (retrying until it is written or stop() is called). */
  async start(): Promise<void> {
    while (!this.abort.signal.aborted) {
      try {
        await this.take();
        this.log.info({ identity: this.o.identity }, "joined the shard ring");
        break;
      } catch (err) {
        this.log.warn({ err: errorMessage(err) }, "could not write the member Lease; retrying");
        if (!(await this.wait(this.t.retryPeriodMs))) return;
      }
    }
    this.loop = this.renewLoop();
  }

  /** Leaves the ring: the Lease is deleted, so the sharder moves the share at once. */
  async stop(): Promise<void> {
    this.abort.abort(new Error("member lease stopping"));
    await this.loop;
    if (this.lost) return;
    try {
      await this.o.client.delete(leasesPath(this.o.namespace, this.o.name), { signal: AbortSignal.timeout(this.t.renewDeadlineMs) });
      this.log.info("left the shard ring");
    } catch (err) {
      if (!isNotFound(err)) this.log.warn({ err: errorMessage(err) }, "could not delete the member Lease; it expires instead");
    }
  }

  private lease(now: number, base?: Lease): Lease {
    return {
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: {
        ...base?.metadata,
        name: this.o.name,
        namespace: this.o.namespace,
        labels: { ...base?.metadata.labels, [MEMBER_LABEL]: this.o.ring },
      },
      spec: {
        holderIdentity: this.o.identity,
        leaseDurationSeconds: Math.ceil(this.t.leaseDurationMs / 1000),
        acquireTime: microTime(now),
        renewTime: microTime(now),
        leaseTransitions: 0,
      },
    };
  }

  private async take(): Promise<void> {
    const signal = AbortSignal.any([this.abort.signal, AbortSignal.timeout(this.t.renewDeadlineMs)]);
    try {
      await this.o.client.create(leasesPath(this.o.namespace), this.lease(Date.now()), { signal, discardResult: true });
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
      // Left behind by an earlier process of the same identity (a restarted container).
      const current = await this.o.client.get<Lease>(leasesPath(this.o.namespace, this.o.name), { signal });
      await this.o.client.replace(leasesPath(this.o.namespace, this.o.name), this.lease(Date.now(), current), { signal, discardResult: true });
    }
  }

  private async renewLoop(): Promise<void> {
    let renewedAt = Date.now();
    while (await this.wait(this.t.retryPeriodMs)) {
      const deadline = renewedAt + this.t.renewDeadlineMs;
      try {
        const signal = AbortSignal.any([this.abort.signal, AbortSignal.timeout(Math.max(1, Math.min(this.t.retryPeriodMs * 2, deadline - Date.now())))]);
        await this.o.client.patch(
          leasesPath(this.o.namespace, this.o.name),
          { spec: { holderIdentity: this.o.identity, renewTime: microTime(Date.now()) } },
          "merge",
          { signal, discardResult: true },
        );
        renewedAt = Date.now();
        continue;
      } catch (err) {
        if (this.abort.signal.aborted) return;
        if (isNotFound(err)) {
          // Deleted by someone: the sharder may already have moved the share away.
          return this.lose("the member Lease was deleted");
        }
        this.log.warn({ err: errorMessage(err) }, "error renewing the member Lease");
      }
      if (Date.now() >= deadline) return this.lose(`the member Lease was not renewed for ${this.t.renewDeadlineMs} ms`);
    }
  }

  private lose(reason: string): void {
    this.lost = true;
    this.log.error({ reason }, "shard membership lost; stopping work");
    try {
      this.o.onLost(reason);
    } catch (err) {
      this.log.error({ err: errorMessage(err) }, "onLost failed");
    }
  }

  private async wait(ms: number): Promise<boolean> {
    try {
      await sleep(ms, undefined, { signal: this.abort.signal });
      return true;
    } catch {
      return false;
    }
  }
}

/** What the sharder knows of one member Lease. */
export interface MemberRecord {
  holder: string;
  /** On the sharder's clock: when the record stops counting unless it changes. */
  expiresAt: number;
  /** The spec as last seen, to tell a renewal from a repeat. */
  raw: string;
}

/**
 * The record after seeing `lease` at `now`. As leader election does, expiry counts from when
 * this process saw the record change (clocks of different machines are not compared), except
 * for a Lease seen for the first time: its renewTime is believed if it is older, so that a
 * sharder that just took over does not give a replica that died long ago another full lease.
 */
export function observeLease(prev: MemberRecord | undefined, lease: Lease, now: number, defaultDurationMs: number): MemberRecord | undefined {
  const holder = lease.spec?.holderIdentity ?? "";
  if (holder === "") return undefined;
  const raw = JSON.stringify(lease.spec ?? {});
  if (prev !== undefined && prev.raw === raw && prev.holder === holder) return prev;
  const durationMs = (lease.spec?.leaseDurationSeconds ?? defaultDurationMs / 1000) * 1000;
  let seenAt = now;
  if (prev === undefined) {
    const renewed = Date.parse(lease.spec?.renewTime ?? "");
    if (Number.isFinite(renewed) && renewed < now) seenAt = renewed;
  }
  return { holder, raw, expiresAt: seenAt + durationMs };
}

/** The holders of the records that have not expired at `now`, sorted. */
export function liveMembers(records: Iterable<MemberRecord>, now: number): string[] {
  const out = new Set<string>();
  for (const r of records) if (r.expiresAt > now) out.add(r.holder);
  return [...out].sort();
}

export interface MemberSetOptions {
  client: KubeClient;
  namespace: string;
  /** The ring's name (MEMBER_LABEL's value). */
  ring: string;
  logger: Logger;
  metrics?: Metrics;
  leaseDurationMs?: number;
  /** The live members changed (sorted identities). */
  onChange(members: string[]): void;
}

/**
 * The ring's live members: a watch of the member Leases and a clock. Every replica keeps one
 * (its share of a Connection's rate); the leader's is also the sharder's ring.
 */
export class MemberSet {
  private readonly informer: Informer<Lease & { metadata: { name: string; namespace: string } }>;
  private readonly records = new Map<string, MemberRecord>();
  private current: string[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly o: MemberSetOptions) {
    this.informer = new Informer(o.client, {
      path: leasesPath(o.namespace),
      labelSelector: `${MEMBER_LABEL}=${o.ring}`,
      logger: o.logger,
      metrics: o.metrics,
    });
    const seen = (l: Lease): void => this.seen(l);
    this.informer.on("add", seen);
    this.informer.on("update", seen);
    this.informer.on("delete", (l) => {
      this.records.delete(l.metadata.name ?? "");
      this.evaluate();
    });
  }

  async start(): Promise<void> {
    await this.informer.start();
    // Expiry is a matter of time, not of events: look every half second.
    this.timer = setInterval(() => this.evaluate(), 500);
    this.timer.unref();
    this.evaluate();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.informer.stop();
  }

  members(): string[] {
    return this.current;
  }

  private seen(lease: Lease): void {
    const name = lease.metadata.name ?? "";
    const next = observeLease(this.records.get(name), lease, Date.now(), this.o.leaseDurationMs ?? DEFAULT_TIMINGS.leaseDurationMs);
    if (next === undefined) this.records.delete(name);
    else this.records.set(name, next);
    this.evaluate();
  }

  private evaluate(): void {
    if (!this.informer.hasSynced()) return;
    const live = liveMembers(this.records.values(), Date.now());
    if (live.length === this.current.length && live.every((m, i) => m === this.current[i])) return;
    const joined = live.filter((m) => !this.current.includes(m));
    const left = this.current.filter((m) => !live.includes(m));
    this.current = live;
    this.o.logger.info({ members: live, joined, left }, "shard ring members changed");
    this.o.onChange(live);
  }
}
