// Membership of the ring: each replica holds a Lease of its own (MemberLease), the way each
// node holds one in kube-node-lease, and the sharder counts as members the Leases that have
// not expired (MemberSet).
//
// Timings are leader election's (15 s lease, 10 s renew deadline, 2 s retry): a replica that
// could not renew for the renew deadline stops working (its manager stops), which is before
// the sharder, counting a lease duration from the last renewal it saw, hands its share to
// others. So a share never has two workers, and a SIGKILLed replica's share moves one lease
// duration after its last renewal.
//
// Timing alone is not trusted with that promise: a sharder that stalled (or whose watch fell
// behind) may see a live member's Lease as expired, and a replica that was stopped (SIGSTOP, a
// frozen VM) may wake up still believing it is a member. So the sharder *fences* a Lease
// before it counts its member gone: it writes the Lease's holder empty, on the version it saw.
// If the member renewed meanwhile, that write fails and the member stays. A member renews on
// the version it wrote last, so once fenced its next renewal fails and it stops; it does no
// work unless a renewal sent less than the renew deadline ago succeeded (`mayWork`); and a
// process of the same identity joins (a fenced Lease taken back, or a new one) only once
// nothing carries its owner label any more (the sharder has moved the share of the process
// before). The leader deletes a fenced Lease once nothing carries its member's label either.
//
// A crash need not wait for the lease: where the replicas run in Pods, the kubelet reports a
// container's end within seconds, and a Lease whose process that report proves ended counts as
// expired once it has also gone unrenewed for a little longer than a renewal period
// (crash-report.ts). It is fenced the same way: a new process of the identity that took the
// Lease since makes the fence fail.
import type { Logger } from "pino";
import { setTimeout as sleep } from "node:timers/promises";
import { errorMessage } from "../lib/errors.js";
import { Informer } from "../runtime/informer.js";
import { isConflict, isNotFound, leasesPath, type KubeClient } from "../runtime/kube-client.js";
import { microTime, type Lease } from "../runtime/leader-election.js";
import type { Metrics } from "../runtime/metrics.js";
import { PROCESS_ANNOTATION, SILENCE_MS, acquiringProcess, type CrashReports, type ProcessRecord } from "./crash-report.js";
import { MEMBER_LABEL } from "./labels.js";
import {
  FENCED_BECAUSE_ANNOTATION,
  FENCED_MEMBER_ANNOTATION,
  FENCED_RENEWAL_ANNOTATION,
  HEIRS_ANNOTATION,
  INHERITS_ANNOTATION,
  STOPPING_ANNOTATION,
  STOPPING_LEFT,
  fenceAnnotations,
  type FenceReason,
  fenceOf,
  inheritsOf,
  type SuccessionView,
} from "./succession.js";
import { LeaseValidity, instant, type Instant } from "../runtime/lease-validity.js";

export interface MembershipTimings {
  leaseDurationMs: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
}

export const DEFAULT_TIMINGS: MembershipTimings = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 };

export interface MemberLeaseOptions extends Partial<MembershipTimings> {
  client: KubeClient;
  namespace: string;
  name: string;
  identity: string;
  /** The ring's name (MEMBER_LABEL's value): one ring per operator Deployment. */
  ring: string;
  logger: Logger;
  /** Membership is lost (not renewed within the deadline, the Lease deleted or fenced): stop working. */
  onLost(reason: string): void;
  /**
   * Whether any object still carries this replica's owner label. The Lease is taken only once
   * this says no, unless it is held by this identity already (a process before that died
   * moments ago): an earlier process's share may still be moving. Default: no.
   */
  ownsObjects?(signal: AbortSignal): Promise<boolean>;
  /** The Lease is taken, or renewed after its deadline had passed: this replica may work (again). */
  onJoined?(): void;
  /**
   * The Pod and container this process runs in (crash-report.ts thisProcess): written on the
   * Lease, so that the kubelet's report of its crash moves its share without waiting for the Lease.
   */
  process?: ProcessRecord;
}

/** The share of an earlier process of this identity is still being moved. */
class ShareStillMoving extends Error {}

/** A write for a sharded object refused unsent: this replica may not work now (MemberLease.mayWork). */
export class MembershipLapsed extends Error {
  constructor() {
    super("not sent: this replica's shard membership is not current (not joined yet, or its member Lease not renewed within the renew deadline); another replica may own the object by now");
    this.name = "MembershipLapsed";
  }
}

/** This replica's own Lease: created on start, renewed every retry period, deleted on stop. */
export class MemberLease {
  private readonly t: MembershipTimings;
  private readonly log: Logger;
  private readonly abort = new AbortController();
  private loop: Promise<void> | undefined;
  private lost = false;
  /** Stopping (stopRenewing): when the last renewal's window ends, unless stop() came first. */
  private stopDeadline: NodeJS.Timeout | undefined;
  /** The resourceVersion of this replica's last write of the Lease: renewals are made on it. */
  private version: string | undefined;
  /** Until when this replica may work: a successful write's sending + the renew deadline. */
  private readonly validity = new LeaseValidity();
  /** mayWork() said no since it joined: onJoined is called again once a renewal lets it work. */
  private refused = false;
  /** The fenced members this replica works for (succession.ts), as its Lease says or will say. */
  private inherits: readonly string[] = [];
  /** publishInherits callers waiting for a write of the Lease that carries their list. */
  private publishing: Array<() => void> = [];
  /** Cuts the wait before the next renewal short (renewSoon). */
  private wakeUp: (() => void) | undefined;
  /** The next renewal is wanted at once (renewSoon), even if one is in flight as it is asked for. */
  private soon = false;
  /** stopRenewing's mark on the Lease, awaited before the Lease is deleted. */
  private marking: Promise<unknown> = Promise.resolve();

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
    let waitingForShare = false;
    while (!this.abort.signal.aborted) {
      try {
        await this.take();
        this.log.info({ identity: this.o.identity }, "joined the shard ring");
        this.o.onJoined?.();
        break;
      } catch (err) {
        if (err instanceof ShareStillMoving) {
          if (!waitingForShare) this.log.info({ identity: this.o.identity }, "objects still carry this identity's owner label (an earlier process of it left or was counted gone): joining once the sharder has moved them");
          waitingForShare = true;
        } else {
          this.log.warn({ err: errorMessage(err) }, "could not write the member Lease; retrying");
        }
        if (!(await this.wait(this.t.retryPeriodMs))) return;
      }
    }
    this.loop = this.renewLoop();
  }

  /**
   * Whether this replica may work on its share now: a write of its Lease sent less than the
   * renew deadline ago succeeded. False before it joined, once it lost, and after a stall (a
   * process stopped for longer than that wakes up with its work queue's timers due before its
   * renewal has been tried). A no after it joined is remembered: the next renewal that lets it
   * work calls onJoined, so that what was set aside is looked at again.
   */
  mayWork(): boolean {
    const may = !this.lost && this.validity.mayWork();
    // Once joined (the Lease written): before, start() calls onJoined anyway.
    if (!may && this.version !== undefined) this.refused = true;
    return may;
  }

  /**
   * The replica is stopping: the Lease is renewed no more, so that it runs out one lease
   * duration after its last renewal, however long the reconciles in flight take. Work already
   * allowed stays allowed until the renew deadline of that renewal (the reconciles in flight
   * finish their writes). If stop() has not come by then (a reconcile still runs), the
   * membership is lost there, as when a renewal fails for as long (onLost): every write is
   * refused, and nothing of this process may outlive the membership, whose share the sharder
   * moves a lease duration after that renewal. Without this, a reconcile hung on the service
   * would keep the Lease renewed for the whole grace period, and the rest of the share (VMs
   * due for renewal among it) would wait for the grace period and then the lease.
   * stop() decides, once they have ended, whether the Lease is deleted (the share moves at once).
   */
  stopRenewing(): void {
    if (this.abort.signal.aborted) return;
    this.log.info("stopping: the member Lease is no longer renewed");
    this.abort.abort(new Error("member lease stopping"));
    // Not joined: nothing of the share was this process's to work on.
    if (this.version === undefined || this.lost) return;
    this.stopDeadline = setTimeout(
      () => this.lose(`stopping, with reconciles still in flight at the member Lease's renew deadline (${this.t.renewDeadlineMs} ms after its last renewal)`),
      Math.max(0, this.validity.renewalMs()),
    );
    this.stopDeadline.unref();
    this.marking = this.markStopping("true", AbortSignal.timeout(this.t.retryPeriodMs)).catch(() => undefined);
  }

  /**
   * Says on the Lease that this replica is stopping (`value` "true"; STOPPING_LEFT once its work
   * has ended), without renewing it (its spec, and so its expiry, unchanged): a member fenced
   * meanwhile does not get it among its heirs, and a Lease deleted with STOPPING_LEFT moves its
   * share at once. On the version written last; if that is refused, on the version the Lease
   * has now, if it still names this replica (a renewal whose answer the stop cut short landed):
   * "fenced" if it does not.
   */
  private async markStopping(value: string, signal: AbortSignal): Promise<"marked" | "fenced"> {
    const path = leasesPath(this.o.namespace, this.o.name);
    const patch = (version: string | undefined) =>
      this.o.client.patch<Lease>(path, { metadata: { resourceVersion: version, annotations: { [STOPPING_ANNOTATION]: value } } }, "merge", { signal });
    let marked: Lease;
    try {
      marked = await patch(this.version);
    } catch (err) {
      if (!isConflict(err)) throw err;
      const current = await this.o.client.get<Lease>(path, { signal });
      if (current.spec?.holderIdentity !== this.o.identity) return "fenced";
      marked = await patch(current.metadata.resourceVersion);
    }
    this.version = marked.metadata.resourceVersion;
    return "marked";
  }

  /**
   * Says on the Lease which fenced members' objects this replica works on (succession.ts), so
   * that a restarted process of such a member joins only once nobody does (its take() asks
   * every live member's Lease, not its own view of the fences, which may lag). Resolves once a
   * write of the Lease carries the list (a renewal, sent at once), or at once where no Lease
   * is held (it is written with the Lease, and nothing is worked on before).
   */
  publishInherits(list: readonly string[]): Promise<void> {
    this.inherits = [...list].sort();
    if (this.version === undefined || this.lost || this.abort.signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      this.publishing.push(resolve);
      this.renewSoon();
    });
  }

  /**
   * The watch of the member Leases shows this one fenced or deleted (MemberSet's ownLease):
   * renews now, not at the next retry period. A renewal on a fenced Lease fails, and the
   * membership is lost at once. If the watch showed an old version (a fence of the process
   * before, listed late), the renewal only lands early. Once stopping (no more renewals) it
   * does nothing: the work ends at the renew deadline anyway.
   */
  checkHeld(): void {
    if (this.version === undefined || this.lost) return;
    this.renewSoon();
  }

  private renewSoon(): void {
    this.soon = true;
    this.wakeUp?.();
  }

  /**
   * Leaves the ring. `leave`: the Lease is deleted, so the sharder moves the share at once;
   * only when no reconcile is in flight any more. Otherwise it is left to expire (and be
   * fenced): a reconcile that outlived the grace period may still be writing.
   */
  async stop(opts: { leave?: boolean } = {}): Promise<void> {
    clearTimeout(this.stopDeadline);
    this.abort.abort(new Error("member lease stopping"));
    this.validity.end();
    await this.loop;
    await this.marking;
    for (const resolve of this.publishing.splice(0)) resolve(); // nothing is worked on from now on
    if (this.lost) return;
    // Never taken (a fenced identity still waiting): not this process's to delete.
    if (this.version === undefined) return;
    if (opts.leave === false) {
      this.log.warn("reconciles still in flight: the member Lease is left to expire rather than deleted");
      return;
    }
    const path = leasesPath(this.o.namespace, this.o.name);
    const signal = AbortSignal.timeout(this.t.renewDeadlineMs);
    try {
      // The sharder moves a share at once only for a Lease deleted with this mark (anything
      // else may be a `kubectl delete` under a replica still at work: MemberSet waits for the
      // lease then). A Lease fenced meanwhile stays: deleting it would let the next process of
      // this identity join before its share has moved.
      if ((await this.markStopping(STOPPING_LEFT, signal)) === "fenced") return this.log.info("the member Lease was fenced; left in place");
      // On the version just written: nothing else writes this Lease now but a fence.
      await this.o.client.delete(path, { signal, preconditions: { resourceVersion: this.version } });
      this.log.info("left the shard ring");
    } catch (err) {
      if (isNotFound(err)) return;
      if (isConflict(err)) return this.log.info("the member Lease was fenced; left in place");
      this.log.warn({ err: errorMessage(err) }, "could not mark or delete the member Lease; it expires instead");
    }
  }

  private lease(now: number, base?: Lease): Lease {
    const acquireTime = microTime(now);
    return {
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: {
        ...base?.metadata,
        name: this.o.name,
        namespace: this.o.namespace,
        labels: { ...base?.metadata.labels, [MEMBER_LABEL]: this.o.ring },
        // A fence of a process before names heirs that no longer work on its share once it is
        // taken back (which waits until nothing carries this identity's label: see take()).
        annotations: withInherits(withProcess(withoutFence(base?.metadata.annotations), this.o.process, acquireTime), this.inherits),
      },
      spec: {
        holderIdentity: this.o.identity,
        leaseDurationSeconds: Math.ceil(this.t.leaseDurationMs / 1000),
        acquireTime,
        renewTime: acquireTime,
        leaseTransitions: 0,
      },
    };
  }

  private async take(): Promise<void> {
    const signal = AbortSignal.any([this.abort.signal, AbortSignal.timeout(this.t.renewDeadlineMs)]);
    const path = leasesPath(this.o.namespace, this.o.name);
    const current = await this.o.client.get<Lease>(path, { signal }).catch((err: unknown) => {
      if (isNotFound(err)) return undefined;
      throw err;
    });
    // An earlier process of this identity left (its Lease deleted on the way out, or by the
    // sharder once fenced) or was counted gone (fenced): the sharder is handing its share to
    // others, who may be working on it already. Joining now would make this process a second
    // worker on every object still carrying the label. An unfenced Lease of this identity (the
    // process before died moments ago) is taken over on the version read: if the sharder fences
    // it meanwhile, one of the two writes fails.
    if ((current?.spec?.holderIdentity ?? "") !== this.o.identity && (await this.o.ownsObjects?.(signal))) throw new ShareStillMoving();
    const sent = instant();
    const written =
      current === undefined
        ? await this.o.client.create<Lease>(leasesPath(this.o.namespace), this.lease(Date.now()), { signal })
        : await this.o.client.replace<Lease>(path, this.lease(Date.now(), current), { signal });
    this.version = written.metadata.resourceVersion;
    this.validity.renewed(sent, this.t.renewDeadlineMs);
  }

  private async renewLoop(): Promise<void> {
    // Renewals sent since the last one known to have landed whose answer never came (a
    // timeout, a cut connection): the API server may have applied any of them all the same.
    let unanswered: Renewal[] = [];
    // The Lease was just read after a 409 and still names this replica: renew on the version
    // read at once, not a retry period later, which may be past the renew deadline.
    let atOnce = false;
    while (await this.wait(this.t.retryPeriodMs)) {
      const again = atOnce;
      atOnce = false;
      const sent = instant();
      // Its renewTime says which attempt a Lease read later carries: sent.wall itself.
      const renewTime = microTime(sent.wall);
      // Whole milliseconds (AbortSignal.timeout throws on a fraction), rounded down: never past the deadline.
      const budgetMs = Math.max(1, Math.floor(Math.min(this.t.retryPeriodMs * 2, this.validity.renewalMs(sent.mono))));
      const signal = AbortSignal.any([this.abort.signal, AbortSignal.timeout(budgetMs)]);
      const publishing = this.publishing.splice(0);
      try {
        // On the version this replica wrote last: a fenced Lease is not renewed, it is lost.
        const renewed = await this.o.client.patch<Lease>(
          leasesPath(this.o.namespace, this.o.name),
          {
            metadata: { resourceVersion: this.version, annotations: { [INHERITS_ANNOTATION]: this.inherits.length > 0 ? this.inherits.join(",") : null } },
            spec: { holderIdentity: this.o.identity, renewTime },
          },
          "merge",
          { signal },
        );
        for (const resolve of publishing.splice(0)) resolve();
        // Stopping: the membership is over, whatever the answer.
        if (this.abort.signal.aborted) return;
        unanswered = [];
        this.renewedBy(sent, renewed.metadata.resourceVersion);
        continue;
      } catch (err) {
        this.publishing.unshift(...publishing.splice(0)); // with the next attempt
        if (this.abort.signal.aborted) return;
        if (isNotFound(err)) {
          // Deleted by someone: the sharder may already have moved the share away.
          return this.lose("the member Lease was deleted");
        }
        if (isConflict(err)) {
          const held = await this.readBack(signal, unanswered);
          if (held === "fenced") return this.lose("the member Lease was fenced: the sharder counted this replica gone and is moving its share");
          if (held === "held") {
            unanswered = [];
            // Once: a second 409 in a row (something else keeps writing the Lease) waits as any failure.
            if (!again) {
              atOnce = true;
              this.soon = true;
            }
          }
        } else {
          unanswered.push({ renewTime, sent });
          this.log.warn({ err: errorMessage(err) }, "error renewing the member Lease");
        }
      }
      // Stopping (the read after a 409 cut short): stop() decides what becomes of the Lease.
      if (this.abort.signal.aborted) return;
      if (this.validity.renewalMs() <= 0) return this.lose(`the member Lease was not renewed for ${this.t.renewDeadlineMs} ms`);
    }
  }

  /** A write of the Lease sent at `sent` landed, leaving it at `version`: this replica may work until its renew deadline. */
  private renewedBy(sent: Instant, version: string | undefined): void {
    this.version = version;
    this.validity.renewed(sent, this.t.renewDeadlineMs);
    // Work was refused since the last renewal (answered just past the deadline, the abort
    // timer late on a busy event loop; a suspended machine; a wall clock step): what was
    // set aside meanwhile is looked at again once work is allowed, or it would wait for a
    // resync.
    if (this.refused && this.validity.mayWork()) {
      this.refused = false;
      this.log.info("the member Lease was renewed after this replica had stopped working (past the renew deadline): working again");
      this.o.onJoined?.();
    }
  }

  /**
   * After a renewal refused for its version: whether someone else wrote the Lease ("fenced"),
   * or it still names this replica ("held": a renewal whose answer was lost landed), its
   * version then taken; "unknown" if it could not be read. A Lease that carries the renewTime
   * of one of the `unanswered` renewals is that renewal's write: it counts as a renewal sent
   * when that one was, not when it was read (the sharder's lease counts from a moment after
   * the sending; from the read, this replica could work past the time others count it gone).
   */
  private async readBack(signal: AbortSignal, unanswered: readonly Renewal[]): Promise<"fenced" | "held" | "unknown"> {
    let current: Lease;
    try {
      current = await this.o.client.get<Lease>(leasesPath(this.o.namespace, this.o.name), { signal });
    } catch (err) {
      if (!this.abort.signal.aborted) this.log.warn({ err: errorMessage(err) }, "could not read the member Lease after a refused renewal");
      return "unknown";
    }
    if ((current.spec?.holderIdentity ?? "") !== this.o.identity) return "fenced";
    // Stopping: nothing is renewed now (stopRenewing's deadline stands), only the version taken for stop().
    const landed = this.abort.signal.aborted ? undefined : unanswered.find((r) => r.renewTime === current.spec?.renewTime);
    if (landed === undefined) {
      this.version = current.metadata.resourceVersion;
      return "held";
    }
    this.log.info({ sentMsAgo: Math.round(performance.now() - landed.sent.mono) }, "a renewal of the member Lease whose answer was lost had landed: it counts from when it was sent");
    this.renewedBy(landed.sent, current.metadata.resourceVersion);
    return "held";
  }

  private lose(reason: string): void {
    this.lost = true;
    for (const resolve of this.publishing.splice(0)) resolve(); // no work from now on: nothing to wait for
    this.log.error({ reason }, "shard membership lost; stopping work");
    try {
      this.o.onLost(reason);
    } catch (err) {
      this.log.error({ err: errorMessage(err) }, "onLost failed");
    }
  }

  /** Waits `ms`, or not at all if a renewal is wanted at once (renewSoon); false once stopping. */
  private async wait(ms: number): Promise<boolean> {
    if (this.soon) {
      this.soon = false;
      return !this.abort.signal.aborted;
    }
    const woken = new AbortController();
    this.wakeUp = () => woken.abort();
    try {
      await sleep(ms, undefined, { signal: AbortSignal.any([this.abort.signal, woken.signal]) });
      return true;
    } catch {
      return !this.abort.signal.aborted;
    } finally {
      this.wakeUp = undefined;
      this.soon = false;
    }
  }
}

function withInherits(annotations: Record<string, string> | undefined, inherits: readonly string[]): Record<string, string> | undefined {
  const { [INHERITS_ANNOTATION]: _old, ...rest } = annotations ?? {};
  const out = inherits.length > 0 ? { ...rest, [INHERITS_ANNOTATION]: inherits.join(",") } : rest;
  return Object.keys(out).length > 0 ? out : undefined;
}

/** What a process before wrote that is not this one's to say: its fence, its stop, which process it was. */
function withoutFence(annotations: Record<string, string> | undefined): Record<string, string> | undefined {
  if (annotations === undefined) return undefined;
  const {
    [FENCED_MEMBER_ANNOTATION]: _member,
    [HEIRS_ANNOTATION]: _heirs,
    [FENCED_RENEWAL_ANNOTATION]: _renewal,
    [FENCED_BECAUSE_ANNOTATION]: _because,
    [STOPPING_ANNOTATION]: _stopping,
    [PROCESS_ANNOTATION]: _process,
    ...rest
  } = annotations;
  return Object.keys(rest).length > 0 ? rest : undefined;
}

/** This process on the Lease it acquires at `acquireTime` (crash-report.ts). */
function withProcess(annotations: Record<string, string> | undefined, proc: ProcessRecord | undefined, acquireTime: string): Record<string, string> | undefined {
  return proc === undefined ? annotations : { ...annotations, [PROCESS_ANNOTATION]: acquiringProcess(proc, acquireTime) };
}

/** A renewal of a member Lease: the renewTime it wrote, and when it was sent. */
interface Renewal {
  renewTime: string;
  sent: Instant;
}

/** How soon a fence that could not be written (the API server down) is tried again. */
const FENCE_RETRY_MS = 1_000;
/** How often the leader looks for fenced Leases to delete. */
const COLLECT_EVERY_MS = 10_000;

/** What the sharder knows of one member Lease. */
export interface MemberRecord {
  holder: string;
  /** On the sharder's clock: when the record stops counting unless it changes. */
  expiresAt: number;
  /** On the same clock: when it was last renewed, as far as this process can tell. */
  renewedAt: number;
  /** The spec as last seen, to tell a renewal from a repeat. */
  raw: string;
}

/**
 * The record after seeing `lease` at `now`. As leader election does, expiry counts from when
 * this process saw the record change (clocks of different machines are not compared), except
 * for a Lease in the watch's initial list (`listed`, with the wall clock then): its renewTime
 * is believed if it is older, so that a sharder that just started does not give a replica that
 * died long ago another full lease. Not for a Lease first seen later (created, or taken back
 * after a fence, while this process watches): it was written just now, and its renewTime, on a
 * clock a lease duration behind this one's, would have it fenced as it joins.
 */
export function observeLease(prev: MemberRecord | undefined, lease: Lease, now: number, defaultDurationMs: number, listed?: { wallNow: number }): MemberRecord | undefined {
  const holder = lease.spec?.holderIdentity ?? "";
  if (holder === "") return undefined;
  const raw = JSON.stringify(lease.spec ?? {});
  if (prev !== undefined && prev.raw === raw && prev.holder === holder) return prev;
  const durationMs = (lease.spec?.leaseDurationSeconds ?? defaultDurationMs / 1000) * 1000;
  let seenAt = now;
  if (prev === undefined && listed !== undefined) {
    // renewTime is on the wall clock: how long ago it was, counted back from `now`.
    const renewed = Date.parse(lease.spec?.renewTime ?? "");
    if (Number.isFinite(renewed) && renewed < listed.wallNow) seenAt = now - (listed.wallNow - renewed);
  }
  return { holder, raw, expiresAt: seenAt + durationMs, renewedAt: seenAt };
}

/** The renewTime of the spec a record was made from (the fence leaves it as it was). */
function renewTimeOf(record: MemberRecord): string | undefined {
  return (JSON.parse(record.raw) as { renewTime?: string }).renewTime;
}

/** The holders of the records that have not expired at `now`, sorted. */
function sameMembers(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((m, i) => m === b[i]);
}

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
  /**
   * Whether this replica confirms a departure before counting it (the sharder's, on the
   * leader): an expired Lease counts as gone only once it is fenced (its holder written empty
   * on the version seen). Elsewhere (a replica's share of the rate) expiry is enough.
   */
  fencing?(): boolean;
  /** This replica's identity: its own Lease is never fenced here (its MemberLease governs it). */
  self?: string;
  /**
   * This replica's own member Lease, and what to do when the watch shows it held by no one or
   * by another, or deleted: a fence that its renewals have not met yet, if it is not an old
   * version seen late. A cue to look (MemberLease.checkHeld), not a verdict.
   */
  ownLease?: { name: string; taken(): void };
  /**
   * With fencing: the names of the member Leases whose identity still owns objects (undefined
   * while not known). A fenced Lease not among them is deleted after four lease durations: its
   * replica crashed and its share has moved, so it would otherwise stay for good, one per
   * crashed pod name.
   */
  leasesInUse?(): ReadonlySet<string> | undefined;
  /**
   * The live members changed (sorted identities), or which of them may take objects on
   * (`eligible`: not stopping, not deleted while held, not gone awaiting a fence; a subset).
   */
  onChange(members: string[], eligible: string[]): void;
  /** The held and the fenced member Leases changed (src/sharding/succession.ts). */
  onSuccession?(view: SuccessionView): void;
  /**
   * The kubelet's reports of the replicas' Pods: a member whose process they prove ended counts
   * as gone once its Lease has been silent for SILENCE_MS, as if it had run out (and, with
   * fencing, is fenced then).
   */
  crashReports?: CrashReports;
}

/**
 * The ring's live members: a watch of the member Leases and a clock. Every replica keeps one
 * (its share of a Connection's rate); the leader's is also the sharder's ring.
 */
export class MemberSet {
  private readonly informer: Informer<Lease & { metadata: { name: string; namespace: string } }>;
  private readonly records = new Map<string, MemberRecord>();
  /** Each member Lease as last seen: a fence is written on its resourceVersion; which process wrote it (crash-report.ts). */
  private readonly leases = new Map<string, Lease>();
  /** Member Leases with a fence being written or tried last (when), to try again at most once a second. */
  private readonly fencing = new Set<string>();
  private readonly fenceTried = new Map<string, number>();
  /** Fenced member Leases (holder empty), by name: when this replica first saw each so. */
  private readonly fencedSince = new Map<string, number>();
  /** Fenced member Leases with heirs, by name. */
  private readonly fences = new Map<string, { member: string; heirs: string[] }>();
  /** Held member Leases: the fenced members each says its replica works for, by name. */
  private readonly published = new Map<string, string[]>();
  /** Held member Leases whose replica says it is stopping, by name. */
  private readonly stopping = new Set<string>();
  /**
   * Member Leases deleted while held and not by their replica leaving (`kubectl delete lease`, a
   * clean-up script): their members count as live until the Lease would have run out. Their
   * replica may be at work until it notices (a renewal fails on a deleted Lease as on a fenced
   * one, within the renew deadline), and moving its share at once would give it two workers.
   * A replica leaving marks its Lease STOPPING_LEFT, once its work has ended, before it deletes
   * it (MemberLease.stop). The record is this process's memory: a replica that starts after the
   * deletion (and comes to lead within the lease) never saw the Lease, and moves the share at once.
   */
  private readonly deletedWhileHeld = new Set<string>();
  private lastSuccession = "";
  private lastCollected = -Infinity;
  /** Other members' Leases as othersMayBeLive's lists saw them: their version, and when it last changed (monotonic). */
  private readonly polled = new Map<string, { version: string; changedAt: number }>();
  private current: string[] = [];
  private currentEligible: string[] = [];
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
      const name = l.metadata.name ?? "";
      if (name === o.ownLease?.name) o.ownLease.taken();
      const record = this.records.get(name);
      if (record !== undefined && l.metadata.annotations?.[STOPPING_ANNOTATION] !== STOPPING_LEFT && this.gone(name, record, performance.now()) === undefined) {
        this.deletedWhileHeld.add(name);
        o.logger.warn(
          { member: record.holder, lease: name },
          "a member Lease was deleted while held, not by its replica leaving (it did not say its work had ended): that replica may still be at work until it notices, so its share moves once the Lease would have run out",
        );
      } else this.forget(name);
      this.evaluate();
    });
    // A crash reported is news at once, not at the next look.
    o.crashReports?.onChange(() => this.evaluate());
  }

  /**
   * Whether a member other than `identity`, its Lease not run out, says it works on objects of
   * `identity` (a fenced member it inherited from): a restarted process of `identity` must not
   * join before it stops. A member whose Lease ran out has stopped working (its renew deadline
   * is earlier).
   */
  inheritsFrom(identity: string): boolean {
    const now = performance.now();
    for (const [name, r] of this.records) {
      if (r.holder !== identity && r.expiresAt > now && (this.published.get(name) ?? []).includes(identity)) return true;
    }
    return false;
  }

  /**
   * Whether a process of `identity` whose Lease is not its own (fenced, or deleted on the way
   * out) must wait before it joins: objects still carry its label (`owns`, its own caches), or
   * another member says it works on them (inherited from a fence of the process before; this
   * view may lag), and another member may be live to take them. With none, nobody can take the
   * share it waits for (and the process before has stopped): it joins at once. "None" by this
   * view, and then by a list of the Leases (othersMayBeLive): a view whose watch delivered
   * nothing for a lease duration shows none, while heirs may still be at work.
   */
  async shareStillMoving(identity: string, owns: () => boolean, signal?: AbortSignal): Promise<boolean> {
    if (!owns() && !this.inheritsFrom(identity)) return false;
    return this.current.some((m) => m !== identity) || (await this.othersMayBeLive(signal));
  }

  /**
   * Whether a member other than this replica may be live, by a list of the member Leases, not
   * by the watch: one whose Lease these lists have seen change (a renewal) within its lease
   * duration, or first seen less than that ago. Never by a clock of another machine. For a
   * decision that a view gone stale must not make alone: a watch that delivers nothing for a
   * lease duration (stalled, or failing while the API server is overloaded) shows every other
   * member expired, and a restarted process of a fenced identity would join beside heirs still
   * at work on its objects.
   */
  async othersMayBeLive(signal?: AbortSignal): Promise<boolean> {
    const { items } = await this.o.client.list<Lease>(leasesPath(this.o.namespace), { labelSelector: `${MEMBER_LABEL}=${this.o.ring}`, signal });
    const now = performance.now();
    const held = new Set<string>();
    let live = false;
    for (const lease of items) {
      const name = lease.metadata.name ?? "";
      const holder = lease.spec?.holderIdentity ?? "";
      if (holder === "" || holder === this.o.self) continue; // fenced, or this replica's own
      held.add(name);
      const version = lease.metadata.resourceVersion ?? "";
      const before = this.polled.get(name);
      const changedAt = before?.version === version ? before.changedAt : now;
      this.polled.set(name, { version, changedAt });
      const durationMs = (lease.spec?.leaseDurationSeconds ?? (this.o.leaseDurationMs ?? DEFAULT_TIMINGS.leaseDurationMs) / 1000) * 1000;
      if (now - changedAt < durationMs) live = true;
    }
    for (const name of this.polled.keys()) if (!held.has(name)) this.polled.delete(name);
    return live;
  }

  /** Who holds a member Lease, and the fenced ones' heirs. */
  succession(): SuccessionView {
    return {
      holders: new Set([...this.records.values()].map((r) => r.holder)),
      heirs: new Map([...this.fences.values()].map((f) => [f.member, f.heirs])),
    };
  }

  /** Everything known of a member Lease, dropped: it is gone from the API server and from the ring. */
  private forget(name: string): void {
    this.records.delete(name);
    this.leases.delete(name);
    this.fenceTried.delete(name);
    this.fencedSince.delete(name);
    this.fences.delete(name);
    this.published.delete(name);
    this.stopping.delete(name);
    this.deletedWhileHeld.delete(name);
  }

  async start(): Promise<void> {
    await Promise.all([this.informer.start(), this.o.crashReports?.start()]);
    // Expiry is a matter of time, not of events: look every half second.
    this.timer = setInterval(() => this.evaluate(), 500);
    this.timer.unref();
    this.evaluate();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await Promise.all([this.informer.stop(), this.o.crashReports?.stop()]);
  }

  members(): string[] {
    return this.current;
  }

  /** The live members that may take objects on (onChange's `eligible`). */
  eligible(): string[] {
    return this.currentEligible;
  }

  /** Counts the members again now (fencing may have been switched on: this replica leads). */
  refresh(): void {
    this.evaluate();
  }

  private seen(lease: Lease): void {
    const name = lease.metadata.name ?? "";
    // Expiry on the monotonic clock: a step of the wall clock must not age every Lease at once.
    // The initial list's adds come before the informer counts as synced.
    const listed = this.informer.hasSynced() ? undefined : { wallNow: Date.now() };
    const next = observeLease(this.records.get(name), lease, performance.now(), this.o.leaseDurationMs ?? DEFAULT_TIMINGS.leaseDurationMs, listed);
    if (next === undefined) this.records.delete(name);
    else this.records.set(name, next);
    this.leases.set(name, lease);
    this.deletedWhileHeld.delete(name); // written again: a process of its identity took it
    if (name === this.o.ownLease?.name && (lease.spec?.holderIdentity ?? "") !== this.o.self) this.o.ownLease.taken();
    const fence = fenceOf(lease);
    if (fence === undefined) this.fences.delete(name);
    else this.fences.set(name, fence);
    this.published.set(name, inheritsOf(lease));
    if ((lease.spec?.holderIdentity ?? "") !== "" && lease.metadata.annotations?.[STOPPING_ANNOTATION] !== undefined) this.stopping.add(name);
    else this.stopping.delete(name);
    if ((lease.spec?.holderIdentity ?? "") !== "") this.fencedSince.delete(name);
    else if (!this.fencedSince.has(name)) {
      this.fencedSince.set(name, performance.now());
      this.o.logger.debug({ lease: name }, "a fenced member Lease: the leader deletes it four lease durations from now at the earliest, once nothing carries its owner label");
    }
    this.evaluate();
  }

  private evaluate(): void {
    if (!this.informer.hasSynced()) return;
    this.reportSuccession();
    const now = performance.now();
    // A Lease deleted while held, run out now: its replica has stopped (its renewals failed on
    // the deleted Lease for longer than the renew deadline). Nothing is left to fence.
    for (const name of this.deletedWhileHeld) {
      const r = this.records.get(name);
      const why = r === undefined ? "forgotten" : this.gone(name, r, now);
      if (why === undefined) continue;
      this.forget(name);
      this.o.logger.info({ member: r?.holder, lease: name, why }, "a member Lease deleted while held counts as gone now (it would have run out, or its crash is reported): its objects move");
    }
    // Where departures are confirmed, an expired record still counts until its fence is written.
    const fencing = this.o.fencing?.() ?? false;
    const counted = [...this.records.entries()].map(([name, r]) => {
      const gone = this.gone(name, r, now);
      if (gone === undefined) return r;
      if (!fencing) return { ...r, expiresAt: -Infinity };
      if (r.holder !== this.o.self) this.fence(name, r, gone);
      return { ...r, expiresAt: Infinity };
    });
    if (fencing) this.collectFenced(now);
    const live = liveMembers(counted, now);
    const eligible = liveMembers(this.takingOn(now), now);
    if (sameMembers(live, this.current) && sameMembers(eligible, this.currentEligible)) return;
    const joined = live.filter((m) => !this.current.includes(m));
    const left = this.current.filter((m) => !live.includes(m));
    const changed = !sameMembers(live, this.current);
    this.current = live;
    this.currentEligible = eligible;
    if (changed) this.o.logger.info({ members: live, joined, left }, "shard ring members changed");
    else this.o.logger.info({ members: live, eligible }, "shard members that take objects on changed");
    this.o.onChange(live, eligible);
  }

  /**
   * The records of members that may take objects on: not gone themselves (their Leases not run
   * out, no crash reported: not those waiting for a fence), and not stopping or deleted. A
   * fenced member's heirs, and the sharder's ring for placing objects.
   */
  private takingOn(now: number): MemberRecord[] {
    return [...this.records].filter(([lease, r]) => !this.stopping.has(lease) && !this.deletedWhileHeld.has(lease) && this.gone(lease, r, now) === undefined).map(([, r]) => r);
  }

  /**
   * Why a member counts as gone at `now`, if it does: its Lease ran out, or the kubelet reports
   * its process ended (while its Lease, too, has gone unrenewed for longer than a renewal period).
   */
  private gone(name: string, r: MemberRecord, now: number): FenceReason | undefined {
    if (r.expiresAt <= now) return "lease-expired";
    if (now - r.renewedAt < SILENCE_MS) return undefined;
    const lease = this.leases.get(name);
    return lease !== undefined && this.o.crashReports?.ended(lease) ? "crash-reported" : undefined;
  }

  private reportSuccession(): void {
    if (this.o.onSuccession === undefined) return;
    const view = this.succession();
    const id = JSON.stringify([[...view.holders].sort(), [...view.heirs].sort()]);
    if (id === this.lastSuccession) return;
    this.lastSuccession = id;
    this.o.onSuccession(view);
  }

  /**
   * Deletes the fenced Leases kept four lease durations whose identity owns nothing any more
   * (looked at every 10 s, or every lease duration if shorter). On the version last seen: a
   * Lease taken back meanwhile by a restarted process of its identity stays.
   */
  private collectFenced(now: number): void {
    const leaseMs = this.o.leaseDurationMs ?? DEFAULT_TIMINGS.leaseDurationMs;
    if (this.fencedSince.size === 0 || now - this.lastCollected < Math.min(COLLECT_EVERY_MS, leaseMs)) return;
    this.lastCollected = now;
    const keptMs = 4 * leaseMs;
    const due = [...this.fencedSince].filter(([, since]) => now - since >= keptMs).map(([name]) => name);
    if (due.length === 0) return;
    const inUse = this.o.leasesInUse?.();
    if (inUse === undefined) return;
    for (const name of due) if (!inUse.has(name)) void this.deleteFenced(name);
  }

  private async deleteFenced(name: string): Promise<void> {
    const version = this.leases.get(name)?.metadata.resourceVersion;
    if (version === undefined) return;
    try {
      await this.o.client.delete(leasesPath(this.o.namespace, name), { preconditions: { resourceVersion: version } });
      this.o.logger.info({ lease: name }, "deleted a fenced member Lease: its replica is gone and nothing carries its owner label");
    } catch (err) {
      // Gone already, or taken back (a 409): nothing to do. Otherwise tried at the next look.
      if (!isNotFound(err) && !isConflict(err)) this.o.logger.warn({ err: errorMessage(err), lease: name }, "could not delete a fenced member Lease");
    }
  }

  /**
   * Writes the holder of an expired member Lease empty, on the version last seen. Written: its
   * member is gone (its renewals now fail, and it stops). Refused (409): it renewed since, and
   * what the API server holds now is taken in. A Lease deleted meanwhile is gone as well.
   */
  private fence(name: string, record: MemberRecord, because: FenceReason): void {
    const version = this.leases.get(name)?.metadata.resourceVersion;
    if (version === undefined || this.fencing.has(name) || performance.now() - (this.fenceTried.get(name) ?? -Infinity) < FENCE_RETRY_MS) return;
    this.fencing.add(name);
    this.fenceTried.set(name, performance.now());
    void this.writeFence(name, record, version, because).finally(() => {
      this.fencing.delete(name);
      this.evaluate();
    });
  }

  private async writeFence(name: string, record: MemberRecord, version: string, because: FenceReason): Promise<void> {
    const path = leasesPath(this.o.namespace, name);
    const log = this.o.logger;
    const gone = (how: string): void => {
      if (this.records.get(name) === record) this.records.delete(name);
      log.info({ member: record.holder }, how);
    };
    // Its heirs: the members that may take objects on, who take on its objects from this write on (succession.ts).
    const now = performance.now();
    const heirs = liveMembers(this.takingOn(now), now).filter((m) => m !== record.holder);
    try {
      await this.o.client.patch(
        path,
        { metadata: { resourceVersion: version, annotations: fenceAnnotations(record.holder, heirs, renewTimeOf(record), because) }, spec: { holderIdentity: "" } },
        "merge",
        { discardResult: true },
      );
      // Known before the watch tells: the sharder must name these heirs for its objects, as they do.
      if (heirs.length > 0) this.fences.set(name, { member: record.holder, heirs: [...heirs].sort() });
      return gone(
        because === "crash-reported"
          ? "the kubelet reports that the process holding a member Lease ended: fenced the Lease; its heirs work on its share from now on, and its objects move to them"
          : "member Lease expired: fenced it; its heirs work on its share from now on, and its objects move to them (its replica, if it still runs, stops at its next renewal)",
      );
    } catch (err) {
      if (isNotFound(err)) return gone("member Lease deleted");
      if (!isConflict(err)) return log.warn({ err: errorMessage(err), member: record.holder }, "could not fence an expired member Lease; its share waits");
    }
    log.info({ member: record.holder }, "a member Lease counted gone changed since it was seen: renewed (or taken by a new process of its identity), not gone");
    try {
      this.seen(await this.o.client.get<Lease>(path));
    } catch (err) {
      if (isNotFound(err)) gone("member Lease deleted");
      else log.warn({ err: errorMessage(err), member: record.holder }, "could not read a member Lease after a refused fence");
    }
  }
}
