// ONE reconcile algorithm for every managed kind (crossplane-runtime's managed reconciler):
// finalizer, deletion policy, adoption, kstatus conditions, events, connection Secret, and
// a status write only when something changed, and the give-back of leftovers that observe
// reports (observe only reads). Each kind supplies an ExternalClient (observe / create /
// update / cleanup / delete), reached through the one connector of src/controllers/kind.ts.
import { Annotations, ConditionType, FINALIZER, GROUP, VERSION, type KindNames } from "../api/names.js";
import type { Condition } from "../api/index.js";
import type { Events } from "../runtime/events.js";
import type { Informer } from "../runtime/informer.js";
import type { KubeClient } from "../runtime/kube-client.js";
import { resourcePath } from "../runtime/kube-client.js";
import { errorMessage } from "../lib/errors.js";
import { RetryNoLaterThan, type ReconcileContext, type Reconciler, type Request, type Result } from "../runtime/controller.js";
import { boundedMessage } from "../runtime/status.js";
import { PAUSED_REASON, kstatusConditions, pausedConditions, type StatedCondition } from "./conditions.js";
import { patchFinalizers, removeFinalizer } from "./finalizers.js";
import type { StatusWriter } from "./status-writer.js";
import type { ConnectionSecretWriter } from "./connection-secret.js";
import { ClaimTaken, FailedAfterChange, StalledError, classify, type Failure } from "./errors.js";
import { isOutcomeUnknown } from "../service/index.js";
import type { ActionResult, Connector, ExternalClient, ManagedResource, Observation, StatusOf } from "./external.js";
import { managementOf, type Management } from "./management-policies.js";
import type { ResourceMetricsRecorder } from "./resource-metrics.js";
import { pollIntervalOf } from "./poll-interval.js";
import { afterBackoff, jittered } from "./requeue.js";

export interface ManagedReconcilerOptions<R extends ManagedResource, Plan = unknown> {
  kind: KindNames;
  informer: Informer<R>;
  kube: KubeClient;
  events: Events;
  connector: Connector<R, Plan>;
  status: StatusWriter;
  /** Resync period; every resource is observed again this often (jittered by ±10 %). */
  syncPeriodMs: number;
  /**
   * A wait for a dependency (Connection, Agent, Skill, Secret, ConfigMap) is reported in
   * status and as an Event only once it has lasted this long (default 5 s). Applied all at
   * once, most dependants find their dependency still in the queue and are brought back by its
   * watch moments later: reporting each such wait cost two writes (status + Warning Event) per
   * dependant at cold start, for a condition nobody had time to read.
   */
  dependencyGraceMs?: number;
  /**
   * The grace, for a resource with no Ready condition yet, of a wait for a dependency that
   * exists and has not been reported on yet (`notReportedYet`: an Agent still queued behind
   * thousands of others at cold start, or on a replica that is taking over a dead one's
   * share). Default 2 minutes: about what a 10,000-resource cold start at 200 calls/s takes
   * on a busy 2-core machine, short enough that a dependency whose controller never gets to
   * it is still reported.
   */
  progressingGraceMs?: number;
  /**
   * Annotations that must be on the resource before its object is created, for kinds whose
   * service objects carry no crash-safety marker (a Skill claims its name): written in the same
   * patch as the finalizer, so a claim costs no write of its own.
   */
  claim?(cr: R): Record<string, string>;
  /**
   * What the objects the spec refers to hold now (a ConfigMap's content, a Secret's values), as
   * an opaque fingerprint; undefined when they cannot be read. A spec the service refused is
   * not sent again until its generation changes, or this does: the user's fix may be in the
   * ConfigMap. Never stored: it may be derived from Secret values.
   */
  inputs?(cr: R): string | undefined;
  /** The resource's id in the service, if it has one (status field or adoption annotation). */
  externalId(cr: R): string | undefined;
  /** Writes connection details; absent for kinds that have none. */
  secrets?: ConnectionSecretWriter;
  /**
   * The kind's service objects die unless written to (a Sandbox's VM and its TTL): when nothing
   * else may be done (paused, no Update, the Connection not Ready, a refused spec, a change that
   * failed), the resource is still observed and its client's `upkeep` keeps it alive (renewals
   * only).
   */
  needsUpkeep?: boolean;
  /**
   * With `needsUpkeep`: whether the resource names a service object its upkeep keeps alive (a
   * Sandbox's VM with keepAlive, not reported expired), for when it cannot be observed.
   * Default: it has an external id.
   */
  keepsAlive?(cr: R): boolean;
  /**
   * The kind's update may create a service object (a Sandbox's replacement VM, allocated
   * before the old one is released): an update that fails with its outcome unknown counts as
   * a create that did (uncertainCreates), so that a deletion soon after looks again for what
   * lands late. Without it, only the failure an update wraps (FailedAfterChange) counts.
   */
  updateCreates?: boolean;
  /** Per-resource metrics (drift_seconds): told of each drift put back and each success. */
  resourceMetrics?: ResourceMetricsRecorder;
  now?: () => Date;
}

export class ManagedReconciler<R extends ManagedResource, Plan = unknown> implements Reconciler {
  private readonly now: () => Date;
  /**
   * namespace/name -> when the resource (of that uid) was first found waiting for a dependency;
   * cleared on any other outcome, and when the resource goes (deleted, or moved to another
   * shard), finalizer or not.
   */
  private readonly waitingSince = new Map<string, { uid: string; since: number }>();
  /**
   * namespace/name -> the metadata this process last wrote (the finalizer, a claim) and the
   * cached resourceVersion it was written over. The cache lags behind our own writes, and a
   * retry comes 5 ms later: a pass that started from the cache would not see the finalizer
   * (taking itself for the first, whose create cannot have made anything) nor a Skill's claim
   * (taking the skill its own lost create made for someone else's: NameTaken). Until the cache
   * shows another version, a pass starts from what was written (as StatusWriter.fresh does for
   * status).
   */
  private readonly metadataWritten = new Map<string, { uid: string; basedOn: string | undefined; metadata: R["metadata"] }>();
  /** namespace/name -> the bad poll-interval an InvalidPollInterval Warning was recorded for. */
  private readonly warnedPoll = new Map<string, { uid: string; message: string }>();
  /**
   * namespace/name -> the uid and inputs (ManagedReconcilerOptions.inputs) of the spec the
   * service refused; dropped when the resource goes (deleted, or moved to another shard). Kept
   * in memory only: a process that did not see the refusal takes it as made with the inputs it
   * first sees, so a fix made while no operator ran waits for the spec or the inputs to change.
   */
  private readonly refusedWith = new Map<string, { uid: string; inputs: string }>();
  /**
   * namespace/name -> when a create of the resource (of that uid) failed with its outcome
   * unknown (a timeout, a cut connection, a 5xx), or an update that creates (updateCreates: a
   * Sandbox's replacement VM): it may still land in the service. A deletion
   * meanwhile deletes what it finds and keeps the finalizer to look again LANDING_MS from
   * then, or an object that lands after its look would be left behind for good (agents and
   * deployments do not run out). Kept whatever a later pass finds or creates: what it finds may
   * be what its retry made (a deployment deployed again while the first deploy was still on its
   * way), not what the lost create makes. A deletion that cannot reach the service (its
   * Connection gone) keeps the finalizer while it is there, LANDING_MS past or not: status
   * names nothing, yet the create may have made an object no look has found. Dropped when the
   * resource goes or its finalizer is removed. In memory only: a restart takes longer than the
   * wait, and after one only an id in status holds a deletion that cannot connect.
   */
  private readonly uncertainCreates = new Map<string, { uid: string; at: number }>();

  constructor(private readonly opts: ManagedReconcilerOptions<R, Plan>) {
    this.now = opts.now ?? (() => new Date());
  }

  async reconcile(req: Request, ctx: ReconcileContext): Promise<Result | void> {
    const cached = this.opts.informer.get(req.namespace, req.name);
    if (cached === undefined) {
      const key = `${req.namespace ?? ""}/${req.name}`;
      this.refusedWith.delete(key);
      this.waitingSince.delete(key);
      this.warnedPoll.delete(key);
      this.metadataWritten.delete(key);
      this.uncertainCreates.delete(key);
      return; // gone; the finalizer already did its work
    }
    const cachedVersion = cached.metadata.resourceVersion;
    let cr = this.opts.status.fresh(this.aheadOfCache(cached));
    if (isPaused(cr)) return this.paused(cr, ctx);
    if (cr.metadata.deletionTimestamp !== undefined) return this.finalize(cr, ctx);
    this.warnOfBadPollInterval(cr);
    // Nothing is created before the finalizer is there: a resource without it at the start of
    // this pass made nothing in the service yet, so what a create runs into is not its own.
    const first = !hasFinalizer(cr);
    // A kind that claims (a Skill its name) adds the finalizer after observing, with the claim
    // in the same write: the claim must be made only for a name observe found free.
    if (!hasFinalizer(cr) && this.opts.claim === undefined) {
      // Carry on with the object the API server answered (crossplane-runtime does the same):
      // waiting for it to come back through the informer would send it to the back of the
      // queue, and at cold start every resource would make one pass for the finalizer alone
      // before the first call to the service. The watch event of this write is filtered out.
      const updated = await this.setFinalizers(cr, [...(cr.metadata.finalizers ?? []), FINALIZER], undefined, { cachedVersion });
      if (updated === undefined) return; // deleted meanwhile
      cr = updated;
    }

    const management = managementOf(cr.spec);
    let observed: Observation<StatusOf<R>, Plan> | undefined;
    let action: ActionResult<StatusOf<R>> | undefined;
    /** Fields that differ from the spec and stay so: managementPolicies leaves out Update. */
    let drift: string[] | undefined;
    let connected = false;
    /** Upkeep done although the reconcile fails (a VM renewed while its spec cannot be applied). */
    let kept: Upkeep<StatusOf<R>> | undefined;
    try {
      const external = await this.opts.connector.connect(cr, ctx);
      connected = true;
      const seen = (observed = await external.observe(cr));
      /**
       * Runs a change; if it fails, what runs is still kept alive before the failure is
       * reported: a replacement that cannot be allocated (a pool exhausted, refused) must not
       * cost the VM it was to replace.
       */
      const changing = async <T>(change: () => Promise<T>): Promise<T> => {
        try {
          return await change();
        } catch (err) {
          if (this.upkeepAllowed(cr) && seen.exists) kept = await this.keepAlive(cr, external, seen);
          throw err;
        }
      };
      if (!hasFinalizer(cr)) {
        const claim = !observed.exists && management.create ? this.missingClaim(cr) : undefined;
        const updated = await this.setFinalizers(cr, [...(cr.metadata.finalizers ?? []), FINALIZER], claim, { cachedVersion });
        if (updated === undefined) return; // deleted meanwhile
        cr = updated;
      }
      // Only what this resource may have created is its to give back.
      const leftovers = management.create ? (observed.leftovers ?? []) : [];
      if (leftovers.length > 0) {
        // Before anything else, and whether or not the rest is up to date (or stalled): what a
        // lost create left behind costs the user until it is given back.
        if (external.cleanup === undefined) throw new Error(`${this.opts.kind.kind}: leftovers found but the client cannot give them back`);
        await changing(async () => external.cleanup?.(cr, leftovers));
        ctx.log.info({ leftovers }, "gave back service objects that carried this resource's marker next to the one it uses");
      }
      const needsWrite = !observed.exists || (!observed.upToDate && observed.notReady === undefined);
      const stalled = stalledAtThisGeneration(cr);
      if (needsWrite && stalled && !this.inputsChangedSinceRefusal(cr) && (external.refusalStands?.(cr, stalled.reason ?? "") ?? true)) {
        // The service refused this spec; asking again with the same spec would only be refused
        // again (and write to the service on every resync). Wait for the user's change, and
        // keep what runs alive meanwhile: a refused tier must not cost the VM of the old one.
        if (this.upkeepAllowed(cr)) kept = await this.keepAlive(cr, external, observed);
        throw new StalledError(stalled.reason ?? "Stalled", stalled.message === undefined ? "waiting for a change of the spec" : withoutNotes(cr, stalled.message));
      }
      if (!observed.exists) {
        if (cr.metadata.annotations?.[Annotations.externalId]) {
          // Adoption asked for an object that is not there: creating one would ignore the user.
          throw new AdoptionTargetMissing(cr.metadata.annotations[Annotations.externalId] ?? "");
        }
        if (!management.create) {
          throw new StalledError(
            "ExternalNotFound",
            `there is no service object to observe, and spec.managementPolicies ${management.stated} leaves out Create: set the annotation ${Annotations.externalId} to the id of the object to import, or add Create`,
          );
        }
        const claim = this.missingClaim(cr);
        const had = cr.metadata.annotations ?? {};
        const claimedNow = claim === undefined ? [] : Object.keys(claim).filter((k) => had[k] !== claim[k]);
        if (claim !== undefined) {
          // The finalizer was added without it (by an older version, or the claim changed).
          const claimed = await this.setFinalizers(cr, undefined, claim, { cachedVersion });
          if (claimed === undefined) return; // deleted meanwhile
          cr = { ...claimed, status: cr.status };
        }
        try {
          action = await external.create(cr, { first, claimedNow });
        } catch (err) {
          if (err instanceof ClaimTaken) await this.withdrawClaim(cr, cachedVersion);
          this.noteUncertainCreate(cr, err, { wrappedOnly: false });
          throw err;
        }
        // A create of an object that existed (gone out of band) is drift put back; the first is not (no success before it).
        this.opts.resourceMetrics?.drifted(cr, this.now());
        this.record(cr, action, "Created", `created the ${this.opts.kind.kind.toLowerCase()} in the service`);
      } else if (!observed.upToDate && !management.update) {
        drift = observed.differences ?? [];
        // Keeping the object alive (a due renewal) is not an update; the spec's changes wait.
        if (observed.notReady === undefined && management.upkeep && this.opts.needsUpkeep && external.upkeep !== undefined) {
          action = await external.upkeep(cr, observed);
        }
      } else if (!observed.upToDate && observed.notReady === undefined) {
        const plan = observed.plan;
        if (plan === undefined) throw new Error(`${this.opts.kind.kind}: observe found a difference but made no plan`);
        // Renewals differ in nothing: only a difference put back is drift (and a change).
        const differs = (observed.differences?.length ?? 0) > 0;
        const update = () => external.update(cr, { ...seen, plan });
        try {
          action = differs ? await changing(update) : await update();
        } catch (err) {
          this.noteUncertainCreate(cr, err, { wrappedOnly: this.opts.updateCreates !== true });
          throw err;
        }
        if (differs) this.opts.resourceMetrics?.drifted(cr, this.now());
        const drift = observed.differences?.length ? `: ${observed.differences.join(", ")}` : "";
        this.record(cr, action, "Updated", `updated the service object${drift}`);
      }
      const details = { ...observed.connectionDetails, ...action?.connectionDetails };
      if (this.opts.secrets && Object.keys(details).length > 0) {
        try {
          await this.opts.secrets.ensure(cr, this.opts.kind.kind, details);
        } catch (err) {
          // The service side is done (a renewal, an allocation): status still says so, and what
          // it needs next (the renewal) does not wait out the Secret's backoff.
          kept = outcome(seen, action, this.keeping(seen));
          throw err;
        }
      }
    } catch (err) {
      if (err instanceof AdoptionTargetMissing) {
        return this.fail(cr, { kind: "stalled", reason: "ExternalNotFound", message: err.message }, ctx);
      }
      const failure = classify(err);
      // No client for changes (the Connection is not Ready): what exists is still kept alive.
      const forUpkeep = this.opts.connector.connectForUpkeep?.bind(this.opts.connector);
      if (!connected && failure.kind === "notReady" && forUpkeep !== undefined) kept = await this.upkeepOnly(cr, async () => forUpkeep(cr));
      if (err instanceof FailedAfterChange) {
        kept = { keeping: false, ...kept, status: { ...kept?.status, ...(err.status as Partial<StatusOf<R>>) }, ...(err.next !== undefined && { next: err.next }) };
        if (err.connectionGone) await this.removeConnectionSecret(cr, ctx);
      }
      return this.fail(cr, failure, ctx, err, kept);
    }

    this.waitingSince.delete(keyOf(cr));
    const { notReady, unconfirmed } = observed;
    const conditions = kstatusConditions(
      notReady
        ? { state: notReady.stalled === true ? "stalled" : "unavailable", reason: notReady.reason, message: withPollNote(cr, notReady.message) }
        : unconfirmed
          ? { state: "reconciling", reason: unconfirmed.reason, message: withPollNote(cr, unconfirmed.message) }
          : { state: "ready", reason: "Available", message: withPollNote(cr, availableMessage(management, drift)) },
    );
    if (!management.update) conditions.push(this.driftCondition(cr, management, drift ?? []));
    // Update allowed (again): what was reported drifted has been put back by this pass, and the
    // condition must say so rather than stay True (the synced metric reads it).
    else if (notReady === undefined && unconfirmed === undefined && findCondition(cr, ConditionType.Drifted) !== undefined) conditions.push(this.driftCondition(cr, management, []));
    // What the action did supersedes what was observed before it (a renewal moves the next one).
    const scheduled = action !== undefined ? action.requeueAfterMs : observed.requeueAfterMs;
    // What could not be compared with the spec is looked at again soon, not at the next
    // renewal. On the ordinary lane, unless a renewal is scheduled: the recheck then takes the
    // renewal's place in the queue (one timer per key), and an ordinary pass stuck behind a
    // backlog (a cold start) could come after the VM ran out.
    const recheck = unconfirmed !== undefined ? UNCONFIRMED_RECHECK_MS : Infinity;
    const requeueAfterMs = Math.max(1, Math.min(this.jitteredSyncPeriod(cr), scheduled ?? Infinity, recheck));
    const priority = (action !== undefined ? action.priority : observed.priority) ?? false;
    try {
      await this.writeStatus(cr, { ...observed.status, ...action?.status } as Partial<StatusOf<R>>, conditions);
    } catch (err) {
      // The service side is done; only the report failed (API server down). The retry backs
      // off as any error does, but never past what the service needs next: a growing backoff
      // outliving a VM's renewal time would let it expire over a status write.
      if (scheduled === undefined) throw err;
      throw new RetryNoLaterThan(err, requeueAfterMs, priority);
    }
    // Unusable though nothing failed (an expired VM, a failed deployment): one Warning, as for
    // every other change of the Ready reason, once the status says it.
    if (notReady !== undefined && findCondition(cr, ConditionType.Ready)?.reason !== notReady.reason) {
      this.opts.events.warning(cr, notReady.reason, notReady.message);
    }
    this.opts.resourceMetrics?.reconciled(cr, this.now());
    this.refusedWith.delete(keyOf(cr));
    return { requeueAfterMs, priority };
  }

  /**
   * Whether the objects the spec refers to changed since the service refused it. A refusal
   * this process did not see (it started since) is taken as made with the inputs of now: a
   * restart sends nothing, and a later change of them is a change.
   */
  private inputsChangedSinceRefusal(cr: R): boolean {
    if (this.opts.inputs === undefined && this.opts.connector.inputs === undefined) return false;
    const key = keyOf(cr);
    const refused = this.refusedWith.get(key);
    const now = this.inputsOf(cr);
    if (refused === undefined || refused.uid !== cr.metadata.uid) {
      this.refusedWith.set(key, { uid: cr.metadata.uid, inputs: now });
      return false;
    }
    return refused.inputs !== now;
  }

  /** The resource's inputs and its Connection's, as one opaque string. */
  private inputsOf(cr: R): string {
    const read = (inputs: ((cr: R) => string | undefined) | undefined): string => {
      try {
        return inputs?.(cr) ?? "";
      } catch {
        return "";
      }
    };
    return `${read(this.opts.inputs)}/${read(this.opts.connector.inputs?.bind(this.opts.connector))}`;
  }

  /**
   * Consumers must not go on reading credentials for what no longer exists. Best effort: the
   * failure being reported matters more, and the next success overwrites the Secret anyway.
   */
  private async removeConnectionSecret(cr: R, ctx: ReconcileContext): Promise<void> {
    try {
      await this.opts.secrets?.remove(cr);
    } catch (err) {
      ctx.log.warn({ err: errorMessage(err) }, "could not delete the connection Secret of the service object just deleted");
    }
  }

  /**
   * One Warning per bad agentcompute.dev/poll-interval value: the conditions' messages carry it
   * from then on. Remembered here as well as read from the Ready message, since some passes
   * write no message (a wait within its grace) and a restart must not say it again.
   */
  private warnOfBadPollInterval(cr: R): void {
    const poll = pollIntervalOf(cr);
    const key = keyOf(cr);
    if (poll.kind !== "invalid") {
      this.warnedPoll.delete(key);
      return;
    }
    const warned = this.warnedPoll.get(key);
    if (warned?.uid === cr.metadata.uid && warned.message === poll.message) return;
    this.warnedPoll.set(key, { uid: cr.metadata.uid, message: poll.message });
    if ((findCondition(cr, ConditionType.Ready)?.message ?? "").includes(poll.message)) return;
    this.opts.events.warning(cr, "InvalidPollInterval", `${poll.message}; using --sync-period instead`);
  }

  /** `kept`: the upkeep done although the spec could not be applied (a VM renewed meanwhile). */
  private async fail(cr: R, failure: Failure, ctx: ReconcileContext, err?: unknown, kept?: Upkeep<StatusOf<R>>): Promise<Result> {
    const stalled = failure.kind === "stalled";
    // When to come back at the latest: the upkeep's next renewal, or what the failure itself
    // asks (a renewal that failed, by a quarter of the time its VM has left), whatever the
    // failure's kind: a renewal refused with 400 stalls the resource, and its VM must not run
    // out over the sync period; nor over a backoff when the status write fails too.
    const due = earliest(kept?.next, err instanceof RetryNoLaterThan ? { ms: err.ms, priority: err.priority } : undefined);
    if (stalled && REFUSED_WRITE_REASONS.has(failure.reason)) this.refusedWith.set(keyOf(cr), { uid: cr.metadata.uid, inputs: this.inputsOf(cr) });
    else this.refusedWith.delete(keyOf(cr));
    const previousReady = findCondition(cr, ConditionType.Ready);
    if (kept?.trouble !== undefined) logTrouble(ctx, kept.trouble);
    if (failure.kind === "notReady") {
      const now = this.now().getTime();
      const waiting = this.waitingSince.get(keyOf(cr));
      const since = waiting?.uid === cr.metadata.uid ? waiting.since : now;
      this.waitingSince.set(keyOf(cr), { uid: cr.metadata.uid, since });
      // The longer grace is for a resource never reported on (a cold start): one that shows a
      // Ready condition must not keep showing it for minutes while it cannot be reconciled.
      const firstWait = previousReady === undefined;
      const graceMs =
        failure.dependencyProgressing && firstWait ? (this.opts.progressingGraceMs ?? 120_000) : (this.opts.dependencyGraceMs ?? 5_000);
      // Just resumed: the Ready condition still says paused, which would be wrong to leave.
      const reported = (previousReady?.status === "False" && previousReady.reason === failure.reason) || previousReady?.reason === PAUSED_REASON;
      // A failure after a change status must show (a deployment deleted) is reported at once.
      if (!reported && now - since < graceMs && !(err instanceof FailedAfterChange)) {
        // Not reported yet: come back when the grace is over (or for the next renewal, if
        // sooner), or sooner still when the dependency's watch brings the resource back.
        ctx.log.debug({ reason: failure.reason }, `${failure.message} (not reported yet)`);
        return soonest(Math.max(1, since + graceMs - now), due);
      }
    } else {
      this.waitingSince.delete(keyOf(cr));
    }
    const message = withPollNote(cr, failure.message) + upkeepNote(kept, failure);
    await this.writeStatusBeforeUpkeep(cr, due, kept?.status ?? {}, [...kstatusConditions({ state: stalled ? "stalled" : "reconciling", reason: failure.reason, message }), ...this.driftNoLongerReported(cr)]);
    if (previousReady?.reason !== failure.reason) {
      this.opts.events.warning(cr, failure.reason, failure.message);
    }
    if (stalled) {
      // Nothing changes until the user edits the spec (which triggers a reconcile); still look
      // again on the sync period in case the service's answer changes.
      ctx.log.info({ reason: failure.reason }, failure.message);
      return soonest(this.jitteredSyncPeriod(cr), due);
    }
    if (failure.kind === "notReady") {
      // Waiting is not an error: back off per object without an error log on every retry.
      ctx.log.debug({ reason: failure.reason }, failure.message);
      return afterBackoff(due);
    }
    // Transient: rethrow so the queue backs off per object and the error is counted and logged,
    // but comes back no later than the upkeep due meanwhile (the next renewal).
    throw noLaterThanUpkeep(err instanceof Error ? err : new Error(failure.message), due);
  }

  /**
   * `agentcompute.dev/paused: "true"`: no create, update, replace or delete in the service,
   * and deletion waits with the finalizer kept (crossplane-runtime's pause). Reads may go on,
   * and a kind with `needsUpkeep` (Sandbox) keeps its object alive: a paused Sandbox's
   * VM is renewed, since letting it run out would lose it. The conditions say paused (reason
   * ReconcilePaused), with one `Paused` Event when it starts; `Resumed` when it ends.
   */
  private async paused(cr: R, ctx: ReconcileContext): Promise<Result | void> {
    this.waitingSince.delete(keyOf(cr));
    const previousReady = findCondition(cr, ConditionType.Ready);
    const deleting = cr.metadata.deletionTimestamp !== undefined;
    // Upkeep needs a client, not a Ready Connection.
    const { connector } = this.opts;
    const kept = await this.upkeepOnly(cr, async () => (connector.connectForUpkeep ? connector.connectForUpkeep(cr) : connector.connect(cr, ctx)));
    // Trouble matters only for an object there to keep: without one, nothing waits on it.
    const trouble = kept?.trouble?.exists ? kept.trouble : undefined;
    // Ready=True only while nothing waits to be applied: it was Ready for this very generation
    // (or upkeep's observation found it as the spec would have it: a change held back, since
    // undone), what it names is still there, and nothing its spec draws on changed since (a
    // Secret rotated: a SandboxRun must not start in a VM holding values it cannot mask).
    const gone = kept?.gone === true;
    const unusable = kept?.unusable;
    const held = kept?.held;
    const wasReady = previousReady?.status === "True" && previousReady.observedGeneration === cr.metadata.generation;
    const found = kept?.matches === true && trouble === undefined && stalledAtThisGeneration(cr) === undefined;
    const inSync = !deleting && !gone && unusable === undefined && held === undefined && (wasReady || found);
    const upkeep = kept?.keeping && trouble === undefined ? " (its VM is still renewed)" : "";
    const waiting = deleting ? "; deletion waits, with the finalizer kept, until" : "; changes made meanwhile are applied when";
    const problem = trouble ? `; cannot keep its VM alive: ${trouble.failure.reason}: ${trouble.failure.message}` : "";
    const replaced = !deleting && managementOf(cr.spec).create;
    const lost = gone ? `; its VM is gone (expired or deleted)${replaced ? ": a new one is allocated once the annotation is removed" : ""}` : "";
    const state = unusable !== undefined ? `; ${unusable.message}` : "";
    const pending = held !== undefined && !deleting ? `; not applied yet: ${held.join(", ")}` : "";
    const message = `paused by the annotation ${Annotations.paused}: "true": the operator makes no change in the service${upkeep}${waiting} the annotation is removed${problem}${lost}${state}${pending}`;
    await this.writeStatusBeforeUpkeep(cr, kept?.next, kept?.status ?? {}, [...pausedConditions({ inSync, message, keepStalled: stalledAtThisGeneration(cr) !== undefined }), ...this.driftNoLongerReported(cr)]);
    // Said once the conditions remember the pause: a status write that fails says nothing, and
    // its retry says it once.
    if (previousReady?.reason !== PAUSED_REASON) {
      this.opts.events.normal(cr, "Paused", `annotation ${Annotations.paused}: "true": no change is made in the service until it is removed`);
    }
    if (trouble !== undefined) {
      logTrouble(ctx, trouble);
      if (trouble.failure.kind === "transient") throw noLaterThanUpkeep(trouble.err instanceof Error ? trouble.err : new Error(trouble.failure.message), kept?.next);
      return afterBackoff(kept?.next);
    }
    return kept?.next !== undefined ? { requeueAfterMs: kept.next.ms, priority: kept.next.priority } : undefined;
  }

  /**
   * Upkeep and nothing else, for a kind whose service objects die unless written to
   * (`needsUpkeep`): observe, and keep the object alive if that is due (`upkeep`: a
   * VM's renewal) and the policies allow it. For when nothing else may be done: paused, or no
   * client for changes (the Connection is not Ready). Observed without upkeep too (reads are
   * allowed): an imported VM ([Observe]) that ran out while paused must not stay Ready. Undefined
   * if there is nothing to look at: another kind, a resource that made nothing yet (no
   * finalizer), no client.
   */
  private async upkeepOnly(cr: R, connect: () => Promise<ExternalClient<R, Plan>>): Promise<Upkeep<StatusOf<R>> | undefined> {
    if (this.opts.needsUpkeep !== true || !hasFinalizer(cr)) return undefined;
    try {
      const external = await connect();
      const observed = await external.observe(cr);
      const kept = this.upkeepAllowed(cr) ? await this.keepAlive(cr, external, observed) : outcome(observed, undefined, false);
      // Named in status, but not found: nothing left to keep alive, and not to be called in sync.
      if (!observed.exists && this.namesKept(cr)) return { ...kept, gone: true };
      if (!observed.exists) return kept;
      const differs = observed.differences !== undefined && observed.differences.length > 0;
      const compared = !differs && observed.notReady === undefined && observed.unconfirmed === undefined;
      return {
        ...kept,
        ...(differs && { held: observed.differences }),
        ...(compared && { matches: true }),
        ...(observed.notReady !== undefined && { unusable: observed.notReady }),
      };
    } catch (err) {
      // The kind's client says when to try again (a VM's read: before it runs out); else the backoff.
      const exists = this.namesKept(cr);
      const next = err instanceof RetryNoLaterThan ? { next: { ms: err.ms, priority: err.priority } } : {};
      return { keeping: false, status: {}, trouble: { exists, failure: classify(err), err }, ...(exists && next) };
    }
  }

  /**
   * A create whose outcome is unknown may still land (uncertainCreates). From create: its
   * failure, or the one it wraps (FailedAfterChange: a deployment deployed again in place of one
   * deleted outside the operator). From update (`wrappedOnly`): only one a replacement wraps,
   * whose old object is gone already; an update's own unknown outcome creates nothing, unless
   * the kind's update creates (`updateCreates`: a Sandbox's replacement VM).
   */
  private noteUncertainCreate(cr: R, err: unknown, { wrappedOnly }: { wrappedOnly: boolean }): void {
    const unknown = err instanceof FailedAfterChange ? isOutcomeUnknown(err.cause) : !wrappedOnly && isOutcomeUnknown(err);
    if (unknown) this.uncertainCreates.set(keyOf(cr), { uid: cr.metadata.uid, at: this.now().getTime() });
  }

  /** The create of unknown outcome of this very resource (uncertainCreates), not of an earlier one of its name. */
  private uncertainCreate(cr: R): { at: number } | undefined {
    const entry = this.uncertainCreates.get(keyOf(cr));
    return entry?.uid === cr.metadata.uid ? entry : undefined;
  }

  /** The resource names a service object its upkeep keeps alive (a Sandbox's VM with keepAlive). */
  private namesKept(cr: R): boolean {
    return this.opts.keepsAlive?.(cr) ?? this.opts.externalId(cr) !== undefined;
  }

  /** The observed object is one this kind keeps alive (a VM renewed), as the messages may say. */
  private keeping(observed: Observation<StatusOf<R>, Plan>): boolean {
    return this.opts.needsUpkeep === true && (observed.keptAlive ?? observed.exists);
  }

  /** The kind keeps its objects alive, the resource made one, and its policies allow upkeep. */
  private upkeepAllowed(cr: R): boolean {
    return this.opts.needsUpkeep === true && hasFinalizer(cr) && managementOf(cr.spec).upkeep;
  }

  /** The client's upkeep after an observation; its failure is reported, not thrown. */
  private async keepAlive(cr: R, external: ExternalClient<R, Plan>, observed: Observation<StatusOf<R>, Plan>): Promise<Upkeep<StatusOf<R>>> {
    try {
      if (external.upkeep === undefined) throw new Error(`${this.opts.kind.kind}: needsUpkeep is set but the client has no upkeep`);
      return outcome(observed, await external.upkeep(cr, observed), this.keeping(observed));
    } catch (err) {
      // The client says when to try again (a renewal: well before the VM runs out), or soon.
      const next = err instanceof RetryNoLaterThan ? { ms: err.ms, priority: err.priority } : { ms: UPKEEP_RETRY_MS, priority: true };
      return { keeping: false, status: {}, trouble: { exists: observed.exists, failure: classify(err), err }, ...(observed.exists && { next }) };
    }
  }

  private async finalize(cr: R, ctx: ReconcileContext): Promise<Result | void> {
    this.refusedWith.delete(keyOf(cr));
    this.waitingSince.delete(keyOf(cr));
    if (!(cr.metadata.finalizers ?? []).includes(FINALIZER)) return;
    const management = managementOf(cr.spec);
    let event: { reason: string; message: string } | undefined;
    if (management.delete) {
      const uncertain = this.uncertainCreate(cr);
      try {
        const external = await this.opts.connector.connect(cr, ctx);
        await external.delete(cr, { uncertainCreate: uncertain !== undefined });
        event = { reason: "Deleted", message: "deleted the service object" };
        // What a create whose outcome is unknown makes may land after this look: the finalizer
        // stays, and the look is made again, until LANDING_MS after that create.
        const waitMs = uncertain !== undefined ? landingWaitMs(uncertain.at, this.now().getTime()) : 0;
        if (waitMs > 0) {
          ctx.log.info({ waitMs }, "deleted what there is; a create whose outcome is unknown may still land: looking again before the finalizer goes");
          return { requeueAfterMs: waitMs };
        }
      } catch (err) {
        const failure = classify(err);
        if (failure.kind !== "notReady") return this.fail(cr, failure, ctx, err);
        // Its Connection or credentials gone (a namespace deleted at once, then a restart): a
        // service object is there (status names it), or may be (a create whose answer never
        // came: no id in status does not mean nothing was made), and only the user can choose
        // between deleting and leaving it.
        const id = this.opts.externalId(cr);
        const waitsFor =
          id !== undefined
            ? { what: `its service object ${id}`, left: "the object" }
            : uncertain !== undefined
              ? { what: `what a create sent at ${new Date(uncertain.at).toISOString()} may have made (its answer never came, so status names nothing)`, left: "anything it made" }
              : undefined;
        if (waitsFor !== undefined) {
          const how = `the deletion waits to delete ${waitsFor.what}: restore what is missing, or remove the finalizer ${FINALIZER} to leave ${waitsFor.left} there`;
          return this.fail(cr, { ...failure, message: `${failure.message}; ${how}` }, ctx, err);
        }
        // No id and no create of unknown outcome: nothing was made, so a namespace deleted at
        // once (its Connection first) is not held up.
      }
    } else {
      const why = cr.spec.deletionPolicy === "Orphan" ? "deletionPolicy: Orphan" : `spec.managementPolicies ${management.stated} leaves out Delete`;
      event = { reason: "Orphaned", message: `left the service object in place (${why})` };
    }
    await this.opts.secrets?.remove(cr);
    this.opts.status.forget(cr.metadata.uid);
    this.uncertainCreates.delete(keyOf(cr));
    // By a JSON patch that tests the entry, not the cached resourceVersion: a pass after a
    // failed delete starts from a cache that lacks the failure's status write, and a stale
    // version would be a 409 here, and the service's delete made again.
    await removeFinalizer(this.opts.kube, this.path(cr), cr, FINALIZER);
    // Said once the finalizer is off: a removal that fails is retried, from the delete (a 404
    // then), and would say it all again.
    if (event !== undefined) this.opts.events.normal(cr, event.reason, event.message);
    // Deleted after a pause: no status write said the pause ended (a failure's would have).
    if (findCondition(cr, ConditionType.Ready)?.reason === PAUSED_REASON) this.resumed(cr);
  }

  /**
   * The Drifted condition of a resource whose policies leave out Update: True with the fields
   * that differ (and one Warning Event each time the set changes), False once they agree.
   */
  /**
   * Drifted=True of policies that left out Update, once they allow it, on a pass that cannot
   * put the drift back (it fails, or the resource is paused): Unknown, not the old verdict,
   * which would still say the policies leave Update out until a pass gets through.
   */
  private driftNoLongerReported(cr: R): StatedCondition[] {
    const drifted = findCondition(cr, ConditionType.Drifted);
    if (drifted?.status !== "True" || !managementOf(cr.spec).update) return [];
    return [{ type: ConditionType.Drifted, status: "Unknown", reason: "UpdateAllowed", message: "spec.managementPolicies allows Update now: what drifted is put back by the next pass that gets through" }];
  }

  private driftCondition(cr: R, management: Management, drift: string[]): StatedCondition {
    if (drift.length === 0) {
      return { type: ConditionType.Drifted, status: "False", reason: "InSync", message: "the service object matches the spec" };
    }
    // As the condition holds it (cut if very long), so that it compares equal next time.
    const message = boundedMessage(`the service object differs from the spec in ${drift.join(", ")}; spec.managementPolicies ${management.stated} leaves out Update, so it is reported and not put back`);
    const before = findCondition(cr, ConditionType.Drifted);
    if (before?.status !== "True" || before.message !== message) this.opts.events.warning(cr, "DriftNotCorrected", message);
    return { type: ConditionType.Drifted, status: "True", reason: "UpdateNotAllowed", message };
  }

  private record(cr: R, action: ActionResult<StatusOf<R>>, reason: string, message: string): void {
    if (action.event === null) return;
    if (action.event) {
      if (action.event.warning) this.opts.events.warning(cr, action.event.reason, action.event.message);
      else this.opts.events.normal(cr, action.event.reason, action.event.message);
    } else {
      this.opts.events.normal(cr, reason, message);
    }
  }

  private async writeStatus(cr: R, observed: Partial<StatusOf<R>>, conditions: StatedCondition[]): Promise<void> {
    await this.opts.status.write(this.path(cr, "status"), cr, observed, conditions);
    // The conditions remember a pause: the write that drops it says so, once (a write that
    // fails says nothing, and its retry says it).
    const wasPaused = findCondition(cr, ConditionType.Ready)?.reason === PAUSED_REASON;
    if (wasPaused && conditions.find((c) => c.type === ConditionType.Ready)?.reason !== PAUSED_REASON) this.resumed(cr);
  }

  private resumed(cr: R): void {
    this.opts.events.normal(cr, "Resumed", `annotation ${Annotations.paused} removed: reconciling again`);
  }

  /**
   * A status write after upkeep (paused, or the spec not applied): if it fails (the API server
   * down), the retry backs off as any error does, but no later than the upkeep due meanwhile.
   */
  private async writeStatusBeforeUpkeep(cr: R, due: Due | undefined, observed: Partial<StatusOf<R>>, conditions: StatedCondition[]): Promise<void> {
    try {
      await this.writeStatus(cr, observed, conditions);
    } catch (err) {
      throw noLaterThanUpkeep(err instanceof Error ? err : new Error(errorMessage(err)), due);
    }
  }

  /**
   * Returns the object as the API server answered, or undefined if it is gone. `pass`: the
   * cached resourceVersion the pass started from, given when the object lives on (the next
   * passes start from this write until the cache has it: metadataWritten).
   */
  private async setFinalizers(cr: R, finalizers: string[] | undefined, annotations?: Record<string, string | null>, pass?: { cachedVersion: string | undefined }): Promise<R | undefined> {
    const updated = await patchFinalizers(this.opts.kube, this.path(cr), cr, finalizers, annotations);
    if (updated !== undefined && pass !== undefined) {
      this.metadataWritten.set(keyOf(cr), { uid: cr.metadata.uid, basedOn: pass.cachedVersion, metadata: updated.metadata });
    }
    return updated;
  }

  /**
   * For the informer's update handler (as StatusWriter.seen): a version other than the one our
   * last metadata write was made over has reached the cache, so the memory of that write goes
   * now, not at the resource's next pass a sync period later (after a cold start, one copy of
   * metadata per resource).
   */
  seen(cr: R): void {
    const key = keyOf(cr);
    const written = this.metadataWritten.get(key);
    if (written !== undefined && written.basedOn !== cr.metadata.resourceVersion) this.metadataWritten.delete(key);
  }

  /** The cached object, or, while the cache has not caught up with our last metadata write, with that write's metadata. */
  private aheadOfCache(cached: R): R {
    const key = keyOf(cached);
    const written = this.metadataWritten.get(key);
    if (written === undefined) return cached;
    if (written.uid === cached.metadata.uid && written.basedOn === cached.metadata.resourceVersion) return { ...cached, metadata: written.metadata };
    this.metadataWritten.delete(key);
    return cached;
  }

  /** The claim's annotations removed (ClaimTaken); made again only for a name observe finds free. */
  private async withdrawClaim(cr: R, cachedVersion: string | undefined): Promise<void> {
    const claim = this.opts.claim?.(cr);
    if (claim === undefined) return;
    await this.setFinalizers(cr, undefined, Object.fromEntries(Object.keys(claim).map((k) => [k, null])), { cachedVersion });
  }

  /** The claim annotations the resource does not carry yet, if its kind claims anything. */
  private missingClaim(cr: R): Record<string, string> | undefined {
    const claim = this.opts.claim?.(cr);
    if (claim === undefined) return undefined;
    const have = cr.metadata.annotations ?? {};
    return Object.entries(claim).every(([k, v]) => have[k] === v) ? undefined : claim;
  }

  private path(cr: R, subresource?: string): string {
    return resourcePath({
      group: GROUP,
      version: VERSION,
      plural: this.opts.kind.plural,
      namespace: cr.metadata.namespace,
      name: cr.metadata.name,
      subresource,
    });
  }

  /** The resource's agentcompute.dev/poll-interval if it sets a valid one, else --sync-period; jittered. */
  private jitteredSyncPeriod(cr: R): number {
    const poll = pollIntervalOf(cr);
    return jittered(poll.kind === "set" ? poll.ms : this.opts.syncPeriodMs);
  }
}

/** What upkeep alone did: the status to report, when it is due next, or why it could not. */
interface Upkeep<S> {
  /** There is a service object the client keeps alive (a VM renewed before it runs out). */
  keeping: boolean;
  status: Partial<S>;
  /** When to come back at the latest: the next renewal, or a retry of a failed one. */
  next?: { ms: number; priority: boolean };
  /** The upkeep failed; `exists`: on a service object that is there to keep. */
  trouble?: { exists: boolean; failure: Failure; err: unknown };
  /** The service object the resource names is gone (a VM that ran out or was deleted). */
  gone?: boolean;
  /** It is there but cannot be used, and the operator will not fix it (Observation.notReady: a VM run out with keepAlive false). */
  unusable?: { reason: string; message: string };
  /**
   * What differs from what would be applied now and is held back (Observation.differences): a
   * change the spec or its Secrets made while paused (a VM whose envFrom Secret was rotated
   * still holds the old values).
   */
  held?: string[];
  /**
   * It was compared with the spec and found as the spec (and its Secrets) would have it: a
   * change held back while paused and then undone (a Secret put back) no longer keeps it from
   * being Ready.
   */
  matches?: boolean;
}

/**
 * How soon upkeep that failed is tried again when its client says nothing about when: inside
 * the shortest default renewal window (30 s) twice over, whatever the work queue's backoff.
 */
const UPKEEP_RETRY_MS = 10_000;

/** How soon an object that could not be compared with its spec (`unconfirmed`) is observed again. */
const UNCONFIRMED_RECHECK_MS = 30_000;

/**
 * How long after a create whose outcome is unknown a deletion waits before it looks for what
 * the create made: a request the client gave up on (its 30 s timeout) may still be worked on
 * by the service, or held by a proxy, a while longer.
 */
export const LANDING_MS = 60_000;

/** How long a deletion still waits, at `now`, for what a create of unknown outcome sent at `at` may make (0: no longer). */
export function landingWaitMs(at: number, now: number): number {
  return Math.max(0, at + LANDING_MS - now);
}

/** What an observation and the action after it leave to report, and when to come back. */
function outcome<S>(observed: Observation<S, unknown>, action: ActionResult<S> | undefined, keeping: boolean): Upkeep<S> {
  const scheduled = action !== undefined ? action.requeueAfterMs : observed.requeueAfterMs;
  const priority = (action !== undefined ? action.priority : observed.priority) ?? false;
  return {
    keeping,
    status: { ...observed.status, ...action?.status },
    ...(scheduled !== undefined && { next: { ms: Math.max(1, scheduled), priority } }),
  };
}

/** Come back after `ms`, or for the upkeep due sooner (a renewal, on its lane). */
function soonest(ms: number, next: Due | undefined): Result {
  return next !== undefined && next.ms < ms ? { requeueAfterMs: next.ms, priority: next.priority } : { requeueAfterMs: ms };
}

/** When to come back at the latest (and on which lane). */
type Due = { ms: number; priority: boolean };

function earliest(a: Due | undefined, b: Due | undefined): Due | undefined {
  if (a === undefined) return b;
  if (b === undefined) return a;
  return b.ms < a.ms ? b : a;
}

/** An error to rethrow: retried with backoff, but no later than the upkeep due meanwhile. */
function noLaterThanUpkeep(error: Error, next: Due | undefined): Error {
  if (next === undefined || (error instanceof RetryNoLaterThan && error.ms <= next.ms)) return error;
  return new RetryNoLaterThan(error, next.ms, next.priority);
}

/** Upkeep that failed on an object there to keep is news: the VM may run out over it. */
function logTrouble(ctx: ReconcileContext, trouble: NonNullable<Upkeep<unknown>["trouble"]>): void {
  if (trouble.exists) ctx.log.warn({ reason: trouble.failure.reason }, `cannot keep the service object alive: ${trouble.failure.message}`);
}

/**
 * What a resource that cannot be reconciled says of its upkeep (its VM still renewed, or why
 * not: said once when it is the very failure reported, e.g. no Connection at all).
 */
const UPKEEP_NOTES = {
  renewed: "; its VM is still renewed meanwhile",
  failing: "; its VM cannot be kept alive meanwhile",
  /** Followed by the failure: reason and message. */
  failingOther: "; cannot keep its VM alive meanwhile: ",
} as const;

function upkeepNote(kept: Upkeep<unknown> | undefined, failure: Failure): string {
  const trouble = kept?.trouble;
  if (trouble !== undefined) {
    if (!trouble.exists) return "";
    const same = trouble.failure.reason === failure.reason && trouble.failure.message === failure.message;
    return same ? UPKEEP_NOTES.failing : `${UPKEEP_NOTES.failingOther}${trouble.failure.reason}: ${trouble.failure.message}`;
  }
  return kept?.keeping ? UPKEEP_NOTES.renewed : "";
}

/**
 * A refusal's message as a condition says it, without what fail() added to it (the upkeep note,
 * then the poll-interval note): a pass that reports the refusal again adds them afresh, rather
 * than once more at each pass.
 */
function withoutNotes(cr: ManagedResource, message: string): string {
  let m = message;
  const other = m.indexOf(UPKEEP_NOTES.failingOther);
  if (other >= 0) m = m.slice(0, other);
  for (const note of [UPKEEP_NOTES.renewed, UPKEEP_NOTES.failing]) if (m.endsWith(note)) m = m.slice(0, -note.length);
  const poll = withPollNote(cr, "");
  return poll !== "" && m.endsWith(poll) ? m.slice(0, -poll.length) : m;
}

class AdoptionTargetMissing extends Error {
  constructor(id: string) {
    super(
      `annotation ${Annotations.externalId}: "${id}" names no object in the service; fix or remove the annotation`,
    );
  }
}

function availableMessage(management: Management, drift: string[] | undefined): string {
  if (management.observeOnly) {
    return `observing the service object: spec.managementPolicies ${management.stated}, so nothing is written to it`;
  }
  if (drift !== undefined && drift.length > 0) return "the service object is available; it differs from the spec (see the Drifted condition)";
  return "the service object matches the spec";
}

/** Stalls that came from the service refusing a write of this very spec. */
const REFUSED_WRITE_REASONS = new Set(["ServiceRejected", "NameTaken"]);

/**
 * The Stalled condition, if the service refused a write of the current generation. Adding the
 * adoption annotation is a way out too (it changes what the write would be).
 */
function stalledAtThisGeneration(cr: ManagedResource): Condition | undefined {
  const stalled = findCondition(cr, ConditionType.Stalled);
  const refused =
    stalled?.status === "True" &&
    stalled.observedGeneration === cr.metadata.generation &&
    REFUSED_WRITE_REASONS.has(stalled.reason ?? "") &&
    cr.metadata.annotations?.[Annotations.externalId] === undefined;
  return refused ? stalled : undefined;
}

/** A bad agentcompute.dev/poll-interval is said in the conditions' message, next to the rest. */
function withPollNote(cr: ManagedResource, message: string): string {
  const poll = pollIntervalOf(cr);
  return poll.kind === "invalid" ? `${message}; ${poll.message}; using --sync-period instead` : message;
}

function hasFinalizer(cr: ManagedResource): boolean {
  return (cr.metadata.finalizers ?? []).includes(FINALIZER);
}

/** `agentcompute.dev/paused: "true"` (exactly "true", as crossplane.io/paused). */
export function isPaused(cr: ManagedResource): boolean {
  return cr.metadata.annotations?.[Annotations.paused] === "true";
}

function findCondition(cr: ManagedResource, type: string): Condition | undefined {
  return cr.status?.conditions?.find((c) => c.type === type);
}

/** The key of the reconciler's memory of a resource: its namespace and name (what a queue key holds). */
function keyOf(cr: ManagedResource): string {
  return `${cr.metadata.namespace ?? ""}/${cr.metadata.name}`;
}
