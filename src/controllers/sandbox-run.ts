// SandboxRun: steps run to completion in a Sandbox's VM, as a Job runs Pods. Its own reconciler
// (not the managed one: nothing of a run is a service object to keep in line), on the shared
// runtime: its informer, the status writer, Events, the Connection pool. What to do next is the
// state machine's (src/runs/machine.ts); this file does it: starts and follows steps in the VM,
// writes the output ConfigMap and status, deletes finished runs after their TTL.
import { createHash } from "node:crypto";
import type { Logger } from "pino";
import { API_VERSION, Annotations, DEFAULT_CONNECTION, FINALIZER, GROUP, RUN_LABEL, RunPhase, VERSION, kindNames, type RunPhaseName } from "../api/names.js";
import type { RunStepStatus, Sandbox, SandboxRun, SandboxRunStatus, Skill } from "../api/index.js";
import { errorMessage, retold } from "../lib/errors.js";
import { NotReadyError, classify } from "../managed/errors.js";
import { patchFinalizers, removeFinalizer } from "../managed/finalizers.js";
import { landingWaitMs } from "../managed/reconciler.js";
import { afterBackoff } from "../managed/requeue.js";
import type { StatusWriter } from "../managed/status-writer.js";
import { RetryNoLaterThan, type Controller, type ReconcileContext, type Reconciler, type Request, type Result } from "../runtime/controller.js";
import type { Events } from "../runtime/events.js";
import type { Informer } from "../runtime/informer.js";
import { configMapsPath, isAlreadyExists, isForbidden, isInvalid, isKubeApiError, isNotFound, resourcePath, type KubeClient } from "../runtime/kube-client.js";
import { formatTime } from "../runtime/status.js";
import { attemptFailed, attemptStarted, compareProgress, currentStep, deadlineAt, expiresAt, isFinished, next, pollDelayMs, RunReason, runConditions, runningMessage, type Next, type SandboxState, type StepToStop } from "../runs/machine.js";
import { boundedOutput, lastLine, mask, maskingSecretNames, outputWindow, perStepBudget, tail } from "../runs/output.js";
import { outputFile, startedFile, stepPath, vmPath } from "../runs/script.js";
import { Heartbeats, cancelStep, observeStep, removeRunDir, startStep, stopStep, type StepRef } from "../runs/steps.js";
import { ensureRunVM, heldConnection, keepRunVM, knownVM, releaseRunVMs, runVMHoldsRotatedSecrets, type AllocationDeps } from "../runs/template-vm.js";
import { ForwardedVM, VMGoneError, type RunVM } from "../runs/vm.js";
import { isOutcomeUnknown, isServiceError } from "../service/errors.js";
import type { ConnectionPool, ServiceHandle } from "./connection-pool.js";
import { readinessChanged, referrers, requestOf, specOrMetaChanged, type OperatorContext } from "./kind.js";
import { holdsRotatedSecrets, sandboxesUsingSecret } from "./sandbox.js";
import { skillName, skillsByName } from "./skill.js";
import type { ObjectStore } from "./object-store.js";

/** Index of runs by the Sandbox they name. */
const SANDBOX_INDEX = "sandboxRef";

export function setupSandboxRun(ctx: OperatorContext, connection: Controller): Controller {
  const runs = ctx.manager.informerFor<SandboxRun>(collection(kindNames.sandboxRun.plural));
  const sandboxes = ctx.informer<Sandbox>(kindNames.sandbox);
  const reconciler = new SandboxRunReconciler({
    runs,
    sandboxes,
    kube: ctx.kube,
    status: ctx.status,
    events: ctx.events,
    pool: ctx.pool,
    store: ctx.store,
    sandboxDeps: { store: ctx.store, skills: skillsByName(ctx), now: () => ctx.now() },
    log: ctx.manager.logger.child({ controller: "sandboxrun" }),
  });
  const controller = ctx.manager.newController({ name: "sandboxrun", concurrency: ctx.options.concurrency, reconciler });
  controller.watch(runs, undefined, { filter: specOrMetaChanged });
  runs.on("update", (r) => ctx.status.seen(r));
  runs.on("delete", (r) => {
    ctx.status.forget(r.metadata.uid);
    reconciler.stopDeleted(r);
  });
  // A Sandbox that becomes Ready, changes VM or goes brings back the runs that name it.
  const using = referrers(runs, SANDBOX_INDEX, (r) => [r.spec.sandboxRef?.name]);
  controller.watch(sandboxes, (sb) => using(sb).map(requestOf), { filter: sandboxChanged });
  // What an unfinished run waits for brings it back when it comes (or changes): its inputs, and
  // for a run with a template what a Sandbox waits for, its Connection, Skills and envFrom Secrets.
  const unfinished = (waiting: SandboxRun[]) => waiting.filter((r) => !isFinished(r.status)).map(requestOf);
  // And a run waiting for its Sandbox's VM to hold its envFrom Secrets' values of now (they may come back).
  const sandboxesUsing = sandboxesUsingSecret(sandboxes);
  const usingSecret = referrers(runs, "runSecret", (r) => [
    ...(r.spec.envFrom ?? []).map((e) => e.secretRef.name),
    ...(r.spec.files ?? []).map((f) => f.secretKeyRef?.name),
    ...(r.spec.sandboxTemplate?.envFrom ?? []).map((e) => e.secretRef.name),
  ]);
  const usingConfigMap = referrers(runs, "runConfigMap", (r) => (r.spec.files ?? []).map((f) => f.configMapKeyRef?.name));
  const notStarted = (rs: SandboxRun[]) => rs.filter((r) => !attemptStarted(r.status ?? {}));
  controller.watch(ctx.secrets, (s) => unfinished([...usingSecret(s), ...notStarted(sandboxesUsing(s).flatMap(using))]));
  controller.watch(ctx.configMaps, (c) => unfinished(usingConfigMap(c)));
  const usingConnection = referrers(runs, "runConnection", (r) => [
    r.spec.sandboxTemplate === undefined ? undefined : (r.spec.sandboxTemplate.connectionRef?.name ?? DEFAULT_CONNECTION),
  ]);
  // Finished ones too while they hold it: their VM is given back once it can be.
  controller.watch(ctx.connections, (c) => usingConnection(c).filter((r) => heldConnection(r) !== undefined).map(requestOf), { filter: readinessChanged });
  // A template run holds its Connection until its VM is given back: `kubectl delete -k` of
  // the runs with their Connection must not take the Connection first.
  ctx.addConnectionUsers(kindNames.sandboxRun.kind, runs, heldConnection);
  // A deleting Connection waits for them: one letting go (its VM given back, or deleted) brings it back.
  const templateConnection = (r: SandboxRun) => (r.spec.sandboxTemplate === undefined ? [] : [{ namespace: r.metadata.namespace ?? "", name: r.spec.sandboxTemplate.connectionRef?.name ?? DEFAULT_CONNECTION }]);
  connection.watch(runs, templateConnection, {
    filter: (r, old, event) => {
      const before = heldConnection(event === "delete" ? r : (old ?? r));
      const lettingGo = before !== undefined && (event === "delete" || heldConnection(r) === undefined);
      return lettingGo && ctx.connections.get(r.metadata.namespace, before)?.metadata.deletionTimestamp !== undefined;
    },
  });
  const skills = ctx.informer<Skill>(kindNames.skill);
  const loading = referrers(runs, "runSkill", (r) => r.spec.sandboxTemplate?.skills ?? []);
  controller.watch(skills, (sk) => unfinished(loading({ metadata: { namespace: sk.metadata.namespace, name: skillName(sk) } })));
  return controller;
}

export interface SandboxRunReconcilerOptions {
  runs: Informer<SandboxRun>;
  sandboxes: Informer<Sandbox>;
  kube: KubeClient;
  status: StatusWriter;
  events: Events;
  pool: ConnectionPool;
  store: ObjectStore;
  /** What allocating a VM from a sandboxTemplate needs (as a Sandbox's allocation). */
  sandboxDeps: AllocationDeps;
  log: Logger;
  now?: () => Date;
  /** How a VM is reached (tests may point it elsewhere). */
  vm?: (handle: ServiceHandle, vmId: string, opts?: { gated?: boolean }) => RunVM;
}

/**
 * What a run sends to its VM: env and files (at absolute paths; a Secret's as its bytes), and
 * the Secret values to mask in its output (as text).
 */
interface Inputs {
  envs: Record<string, string>;
  /** The values of `envs` read from Secrets (envFrom; spec.env may set a key over one). */
  secretValues: string[];
  /** `secret`: a secretKeyRef's content. */
  files: Array<{ path: string; content: Buffer | string; secret: boolean }>;
}

export class SandboxRunReconciler implements Reconciler {
  private readonly now: () => Date;
  /**
   * The status last written per run (by uid), until the cache shows one as far along. A run
   * writes status several times within the cache's lag (step started, ended, run finished), and
   * the status writer's own memory lasts only until the cache shows any newer version; a pass
   * computed from an older status would follow a step that has ended, in a VM given back.
   */
  private readonly written = new Map<string, SandboxRunStatus>();
  /**
   * Per run (uid): the VM an attempt found gone, and when. Its Sandbox names it until it learns
   * of the loss (vmLost reads the VMs again, which tells it); the next attempt waits for another
   * VM rather than start in that one and fail at once, which spent every retry in one pass. Not
   * for ever: a 404 that passes (the service's list lagging) would leave it waiting for nothing.
   */
  private readonly lostVMs = new Map<string, { vmId: string; at: number }>();
  /**
   * Per run (uid): the command this process started for the step being run, kept until the run
   * ends or leaves the cache. Status may not hold its id (the write after the start failed; the
   * step's next start then exits at the marker and status records that one), and a deletion
   * must still stop it.
   */
  private readonly startedHere = new Map<string, StepToStop>();
  /**
   * Runs (uid) whose finalizer this process removed, until their delete event: the finalizer
   * did what could be done. (A finalizer removed by hand shows in the delete event just the
   * same: the deleted object is the last state stored, which still lists it.)
   */
  private readonly finalized = new Set<string>();
  /** What the running steps' heartbeats said, for those followed by their files (no command id). */
  readonly heartbeats = new Heartbeats();
  /**
   * Per run (uid): every Secret value this process has masked its output with, dropped when the
   * run ends or leaves (a message masked after that starts it again, harmlessly). A Secret
   * rotated while a step runs: the step's env holds the old value, which the step may print,
   * and the cache only the new.
   */
  private readonly seenSecretValues = new Map<string, Set<string>>();
  /**
   * Per run (uid): when an allocation of its own VM (sandboxTemplate) last failed with its
   * outcome unknown (a timeout, a cut connection): the VM may still land. Its deletion, or its
   * end, gives back what it finds and keeps the finalizer (and vmReleased unwritten) to look
   * again LANDING_MS from then, as a managed resource's deletion does after such a create: a VM
   * that landed after the last look would run, renewed by no one, until its TTL. Kept whatever
   * a later pass found or allocated (what it found may be what a retry made); dropped once that
   * look is made, or when the run leaves the cache. In memory only, as the managed reconciler's.
   */
  private readonly uncertainAllocations = new Map<string, number>();
  private readonly vmOf: (handle: ServiceHandle, vmId: string, opts?: { gated?: boolean }) => RunVM;

  constructor(private readonly o: SandboxRunReconcilerOptions) {
    this.now = o.now ?? (() => new Date());
    this.vmOf =
      o.vm ??
      ((handle, vmId, opts) =>
        new ForwardedVM({
          baseURL: handle.connection.spec.baseURL,
          vmId,
          client: handle.client,
          insecureSkipTLSVerify: handle.connection.spec.insecureSkipTLSVerify ?? false,
          ...opts,
        }));
  }

  async reconcile(req: Request, ctx: ReconcileContext): Promise<Result | void> {
    const cached = this.o.runs.get(req.namespace, req.name);
    if (cached === undefined) return;
    if (cached.metadata.deletionTimestamp !== undefined) return this.finalize(cached, ctx);
    let run = this.latest(this.o.status.fresh(cached));
    const finalizers = run.metadata.finalizers ?? [];
    // Until it ends, a run's deletion waits for its step to be stopped (and its own VM, if it
    // has one, to be given back), even if the operator was not running when it was deleted.
    if (!isFinished(run.status) && !finalizers.includes(FINALIZER)) {
      const updated = await patchFinalizers(this.o.kube, this.path(run), run, [...finalizers, FINALIZER]);
      if (updated === undefined) return;
      run = this.latest(this.o.status.fresh(updated));
    }
    const st: SandboxRunStatus = structuredClone(run.status ?? {});
    if (isFinished(st)) return this.afterFinish(run, st, ctx.log);
    const pass = new Pass(this, run, st, ctx.log);
    try {
      return await pass.execute();
    } finally {
      await pass.close();
    }
  }

  /** The run with the status this operator last wrote, if the cache is behind it. */
  private latest(run: SandboxRun): SandboxRun {
    const mine = this.written.get(run.metadata.uid);
    if (mine === undefined) return run;
    if (compareProgress(run.status ?? {}, mine) >= 0) {
      this.written.delete(run.metadata.uid);
      return run;
    }
    return { ...run, status: mine };
  }

  private remember(run: SandboxRun): void {
    const status = this.o.status.fresh(run).status;
    if (status !== undefined) this.written.set(run.metadata.uid, status);
  }

  /**
   * A run that left the cache while a step ran, without its finalizer having stopped the step
   * here (one deleted before this version gave sandboxRef runs a finalizer, one whose finalizer
   * was removed by hand, or one another replica finalized): if it was deleted, the step is
   * killed (best effort: the run is gone; a second kill of a stopped command is a no-op).
   * Leaving the cache is not always a deletion: in sharded mode a run moved to another replica
   * leaves this one's label-selected watch the same way, and its step must go on. So a run not
   * being deleted is left alone, and the API server is asked first; only a run that is not
   * there (or is being deleted) has its step stopped.
   */
  stopDeleted(run: SandboxRun): void {
    const uid = run.metadata.uid;
    this.written.delete(uid);
    this.uncertainAllocations.delete(uid);
    const steps = this.stepsToStop(run);
    this.forget(uid);
    if (this.finalized.delete(uid) || run.spec.sandboxTemplate !== undefined) return;
    // Holding the finalizer and not being deleted: it moved to another replica's share.
    if ((run.metadata.finalizers ?? []).includes(FINALIZER) && run.metadata.deletionTimestamp === undefined) return;
    if (steps.length === 0) return;
    const log = { namespace: run.metadata.namespace, name: run.metadata.name };
    void this.deleted(run)
      .then(async (gone) => {
        if (!gone) return;
        // Not through the membership's write gate (sharded mode): this runs outside any
        // reconcile, before this replica joins as well as after, and nothing would try this kill
        // again. The run is gone or going: a replica it moved to meanwhile stops the same step.
        const handle = this.handleOf(run, true);
        for (const step of steps) await this.kill(run, handle, step, { gated: false });
        await this.removeDeletedRunDirs(run, handle, steps, steps, this.o.log.child(log), { gated: false });
      })
      .catch((err: unknown) => this.o.log.info({ ...log, err: errorMessage(err) }, "could not stop the step of a deleted run"));
  }

  /** Stops a run's step; a VM that is gone took the step with it. */
  private async kill(run: SandboxRun, handle: ServiceHandle, step: StepToStop, opts?: { gated?: boolean }): Promise<void> {
    const vm = this.vmOf(handle, step.vmId, opts);
    try {
      await stopStep(vm, refOf(run, step), step.commandId);
    } catch (err) {
      if (err instanceof VMGoneError) return;
      // Without an id the cancel file is the only stop, and a VM that answers but refuses it (a
      // full disk) would hold the deletion for ever: it goes on, and says so. One that does not
      // answer (a gateway's 502, 503, 504 too: agentd restarting) is tried again.
      if (step.commandId === undefined && isServiceError(err) && err.status !== undefined && ![502, 503, 504].includes(err.status)) {
        this.o.events.warning(run, "StepNotStopped", `step ${step.index + 1} of attempt ${step.attempt} may still run in VM ${step.vmId}: the VM refused its cancel file (${err.message})`);
        return;
      }
      throw err;
    } finally {
      await vm.close();
    }
  }

  /**
   * Whether the run is really gone (or going), not only out of this replica's cache. A list
   * by name, not a GET: the operator's role reads runs with list and watch only.
   */
  private async deleted(run: SandboxRun): Promise<boolean> {
    const ns = run.metadata.namespace;
    const path = resourcePath({ group: GROUP, version: VERSION, plural: kindNames.sandboxRun.plural, namespace: ns });
    const found = await this.o.kube.list<SandboxRun>(path, { fieldSelector: `metadata.name=${run.metadata.name}` });
    const now = found.items.find((r) => r.metadata.uid === run.metadata.uid);
    return now === undefined || now.metadata.deletionTimestamp !== undefined;
  }


  // ---------------------------------------------------------------------------------------
  // What a pass uses

  /** Where the run's Sandbox stands (for a sandboxTemplate, the run's own VM). */
  sandboxState(run: SandboxRun, st: SandboxRunStatus): SandboxState {
    if (run.spec.sandboxTemplate !== undefined) {
      if (st.vmId) return { state: "ready", vmId: st.vmId };
      return { state: "waiting", reason: RunReason.WaitingForSandbox, message: "a VM is being allocated for the run (spec.sandboxTemplate)" };
    }
    const name = run.spec.sandboxRef?.name;
    if (name === undefined) return { state: "gone", message: "neither spec.sandboxRef nor spec.sandboxTemplate is set" };
    const sb = this.o.sandboxes.get(run.metadata.namespace, name);
    if (sb === undefined) return { state: "gone", message: `Sandbox "${name}" (spec.sandboxRef) not found` };
    if (sb.metadata.deletionTimestamp !== undefined) return { state: "gone", message: `Sandbox "${name}" was deleted` };
    const ready = sb.status?.conditions?.find((c) => c.type === "Ready");
    const vmId = sb.status?.vmId;
    if (ready?.status !== "True" || vmId === undefined || sb.status?.observedGeneration !== sb.metadata.generation) {
      const why = ready?.message ? `: ${ready.message}` : "";
      return { state: "waiting", reason: RunReason.WaitingForSandbox, message: `Sandbox "${name}" is not Ready yet${why}` };
    }
    const lost = this.lostVMs.get(run.metadata.uid);
    if (lost?.vmId === vmId && this.now().getTime() - lost.at < LOST_VM_WAIT_MS) {
      return { state: "waiting", reason: RunReason.WaitingForSandbox, message: `the VM ${vmId} of Sandbox "${name}" is gone: waiting for the Sandbox to allocate another` };
    }
    return { state: "ready", vmId };
  }

  /**
   * Whether `vmId`, where an attempt's first step is about to start, holds values of its envFrom
   * Secrets (its Sandbox's, or the run's template's) rotated since it was allocated, which a
   * step could print and the run could not mask. The VM as the Connection's snapshot lists it,
   * else as the service answers for it (kept in the snapshot): a replica may list no VMs of
   * that Connection, or not since another allocated it.
   */
  async vmHoldsRotatedSecrets(run: SandboxRun, vmId: string): Promise<boolean> {
    const sb = this.sandboxOf(run);
    const envFrom = sb ? sb.spec.envFrom : run.spec.sandboxTemplate?.envFrom;
    if ((envFrom ?? []).length === 0) return false;
    const vm = await knownVM(this.handleOf(run), vmId);
    if (vm === undefined) return false; // gone: the start finds it so
    return sb ? holdsRotatedSecrets(sb, vm, this.o.store) : runVMHoldsRotatedSecrets(run, vm, this.o.store);
  }

  /**
   * The run's own VM (spec.sandboxTemplate) held values of rotated Secrets before its first
   * step: given back, and kept out of the allocation of the next (a list lagging behind the
   * release still shows it).
   */
  async giveBackOutdatedOwnVM(run: SandboxRun, vmId: string): Promise<void> {
    await releaseRunVMs(run, this.handleOf(run), vmId);
    this.lostVMs.set(run.metadata.uid, { vmId, at: this.now().getTime() });
    this.o.events.normal(run, "Replaced", `VM ${vmId} held values of the template's envFrom Secrets from before they changed: given back before the first step, another is allocated`);
  }

  /**
   * An attempt found `vmId` gone: the next waits for another. The Connection's snapshot of VMs
   * still holds it, so it is read again: the list tells the Sandbox whose VM it was (its
   * inventory's changes bring it back, and it allocates another), and a run's own VM is not
   * found again by its marker.
   */
  vmLost(run: SandboxRun, vmId: string): void {
    this.lostVMs.set(run.metadata.uid, { vmId, at: this.now().getTime() });
    try {
      const vms = this.handleOf(run).vms;
      vms.invalidate();
      void vms.ensureFresh().catch((err: unknown) => this.o.log.info({ err: errorMessage(err) }, "could not read the VMs again after one was found gone"));
    } catch {
      // No handle (the Connection not usable): the Sandbox finds out at its next look.
    }
  }

  /** When the wait for another VM than the one an attempt found gone ends, if the run waits. */
  lostVMWaitEnds(run: SandboxRun): number | undefined {
    const lost = this.lostVMs.get(run.metadata.uid);
    const ends = lost === undefined ? undefined : lost.at + LOST_VM_WAIT_MS;
    return ends !== undefined && ends > this.now().getTime() ? ends : undefined;
  }

  /**
   * For renewing a run's own VM: a client even while its Connection is not Ready (an edit not
   * checked yet, a failed usage read), as a Sandbox's renewals get (ConnectionPool.forUpkeep).
   */
  upkeepHandleOf(run: SandboxRun): ServiceHandle {
    return this.o.pool.forUpkeep(run.metadata.namespace, run.spec.sandboxTemplate?.connectionRef);
  }

  /** The Sandbox of spec.sandboxRef, if the cache has it. */
  sandboxOf(run: SandboxRun): Sandbox | undefined {
    return run.spec.sandboxRef ? this.o.sandboxes.get(run.metadata.namespace, run.spec.sandboxRef.name) : undefined;
  }

  /** The service handle of the run's Connection (the Sandbox's). */
  handleOf(run: SandboxRun, deleting = false): ServiceHandle {
    const sb = this.sandboxOf(run);
    const ref = sb?.spec.connectionRef ?? run.spec.sandboxTemplate?.connectionRef;
    return this.o.pool.forResource(run.metadata.namespace, ref, { deleting: deleting || sb?.metadata.deletionTimestamp !== undefined });
  }

  vm(handle: ServiceHandle, vmId: string): RunVM {
    return this.vmOf(handle, vmId);
  }

  /**
   * env and envFrom, and (`files`: for the first step, which uploads them) the files, read from
   * the caches: a missing Secret or ConfigMap is waited for. Only what the step about to start
   * needs: a files ConfigMap deleted once the first step started (a generator's prune) holds
   * nothing up.
   */
  inputs(run: SandboxRun, opts: { files: boolean }): Inputs {
    const ns = run.metadata.namespace;
    const envs: Record<string, string> = {};
    const secretValues: string[] = [];
    for (const [i, from] of (run.spec.envFrom ?? []).entries()) {
      const data = this.o.store.secretData(ns, from.secretRef.name, `spec.envFrom[${i}].secretRef.name`);
      for (const [k, v] of Object.entries(data)) envs[`${from.prefix ?? ""}${k}`] = v;
      secretValues.push(...Object.values(data));
    }
    Object.assign(envs, run.spec.env);
    if (!opts.files) return { envs, secretValues, files: [] };
    // A relative path is relative to /workspace: sent absolute, as the published agentd API
    // does not say what a relative one is relative to.
    const files = (run.spec.files ?? []).map((f, i) => {
      const path = vmPath(f.path);
      if (f.secretKeyRef !== undefined) {
        const content = this.o.store.secretKeyBytes(ns, f.secretKeyRef.name, `spec.files[${i}].secretKeyRef`, f.secretKeyRef.key);
        return { path, content, secret: true };
      }
      const ref = f.configMapKeyRef!;
      return { path, content: this.o.store.configMapKeyContent(ns, ref.name, `spec.files[${i}].configMapKeyRef`, ref.key), secret: false };
    });
    return { envs, secretValues, files };
  }

  /**
   * What the steps' output and the run's messages are masked with: every value of the Secrets
   * the run reads (maskingSecretNames) that can be read now, and every one read for the run
   * before (since this process has followed it: a step started before a Secret was rotated
   * holds its old value). `gone`: a Secret of the run's own that cannot be read any more
   * (deleted since a step started): the values it held are not known, so output cannot be
   * kept. One of the VM's that is gone (deleted since the VM was allocated) has nothing to mask
   * with, as before.
   */
  maskingSecrets(run: SandboxRun): { values: string[]; gone: string | undefined } {
    const sandbox = run.spec.sandboxRef && this.o.sandboxes.get(run.metadata.namespace, run.spec.sandboxRef.name);
    const { own, all } = maskingSecretNames(run.spec, sandbox || undefined);
    let gone: string | undefined;
    const values = all.flatMap((name) => {
      try {
        return Object.values(this.o.store.secretData(run.metadata.namespace, name, "masking"));
      } catch {
        if (own.includes(name)) gone ??= name;
        return [];
      }
    });
    let seen = this.seenSecretValues.get(run.metadata.uid);
    if (seen === undefined) this.seenSecretValues.set(run.metadata.uid, (seen = new Set()));
    for (const v of values) seen.add(v);
    return { values: [...seen], gone };
  }

  get clock(): Date {
    return this.now();
  }

  get events(): Events {
    return this.o.events;
  }

  async writeStatus(run: SandboxRun, st: SandboxRunStatus, phase: RunPhaseName, reason: string, message: string): Promise<void> {
    st.phase = phase;
    // The conditions are the writer's to merge (st holds the ones it started from).
    const { conditions: _c, observedGeneration: _g, ...observed } = st;
    await this.o.status.write(this.path(run, "status"), run, observed, runConditions(phase, reason, message));
    this.remember(run);
  }

  /**
   * Writes the steps' output to the run's ConfigMap (created owned by the run) and returns its
   * name: a merge of the given keys; `clear` names keys to remove (a new attempt's steps not run
   * yet). `recorded`: the one status names, so a patch is tried first; otherwise the create is (a
   * 404 first would be a wasted write for every run: a one-step run writes its output once).
   * A ConfigMap of the name that is not the run's is left alone: a run of the same name deleted
   * moments ago (its output waiting for garbage collection, which would take this run's with
   * it), or the user's own. The run's output then gets a name of its own.
   */
  async writeOutput(run: SandboxRun, outputs: Map<string, string>, clear: string[], recorded: string | undefined): Promise<string> {
    const data: Record<string, string | null> = {};
    for (const k of clear) data[k] = null;
    for (const [k, v] of outputs) data[k] = v;
    if (recorded !== undefined) {
      try {
        await this.o.kube.patch(configMapsPath(run.metadata.namespace, recorded), { data }, "merge", { discardResult: true });
        return recorded;
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    }
    const name = recorded ?? outputConfigMapName(run.metadata.name);
    if (await this.createOutput(run, name, outputs, data)) return name;
    const own = outputConfigMapName(run.metadata.name, run.metadata.uid);
    if (!(await this.createOutput(run, own, outputs, data))) throw new OutputNameTaken(`ConfigMaps "${name}" and "${own}" exist and are not this run's output`);
    return own;
  }

  /** Creates the output ConfigMap, or updates it if it is this run's already; false if another's. */
  private async createOutput(run: SandboxRun, name: string, outputs: Map<string, string>, data: Record<string, string | null>): Promise<boolean> {
    const ns = run.metadata.namespace;
    try {
      await this.o.kube.create(configMapsPath(ns), {
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: {
          name,
          namespace: ns,
          labels: { [RUN_LABEL]: labelValue(run.metadata.name) },
          ownerReferences: [{ apiVersion: API_VERSION, kind: kindNames.sandboxRun.kind, name: run.metadata.name, uid: run.metadata.uid, controller: true, blockOwnerDeletion: true }],
        },
        data: Object.fromEntries(outputs),
      }, { discardResult: true });
      return true;
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
    }
    // A list by name, not a GET: the operator's role reads ConfigMaps with list and watch only.
    const found = await this.o.kube.list<{ metadata: { ownerReferences?: Array<{ uid?: string }> } }>(configMapsPath(ns), { fieldSelector: `metadata.name=${name}` });
    if (!found.items.some((c) => (c.metadata.ownerReferences ?? []).some((o) => o.uid === run.metadata.uid))) return false;
    await this.o.kube.patch(configMapsPath(ns, name), { data }, "merge", { discardResult: true });
    return true;
  }

  private path(run: SandboxRun, subresource?: string): string {
    return resourcePath({ group: GROUP, version: VERSION, plural: kindNames.sandboxRun.plural, namespace: run.metadata.namespace, name: run.metadata.name, subresource });
  }

  /** A VM allocated for the run from its template: allocated (or found by marker; not one an attempt found gone). */
  async allocate(run: SandboxRun): Promise<string> {
    try {
      return await ensureRunVM(run, this.handleOf(run), this.o.sandboxDeps, this.lostVMs.get(run.metadata.uid)?.vmId);
    } catch (err) {
      if (isOutcomeUnknown(err)) this.uncertainAllocations.set(run.metadata.uid, this.now().getTime());
      throw err;
    }
  }

  /**
   * How long the give-back of the run's own VM still waits for what an allocation of unknown
   * outcome may make (uncertainAllocations); 0 when none may land any more.
   */
  private landingWait(run: SandboxRun): number {
    const at = this.uncertainAllocations.get(run.metadata.uid);
    return at === undefined ? 0 : landingWaitMs(at, this.now().getTime());
  }

  /** A deleted run: its own VM given back, or the step it runs in its Sandbox's VM stopped; then its finalizer removed. */
  private async finalize(run: SandboxRun, ctx: ReconcileContext): Promise<Result | void> {
    const finalizers = run.metadata.finalizers ?? [];
    if (!finalizers.includes(FINALIZER)) return;
    if (run.spec.sandboxTemplate !== undefined) {
      const released = await this.giveBackOwnVM(run, run.status?.vmId, ctx.log);
      // What an allocation of unknown outcome makes may land after this look: the finalizer
      // stays, and the look is made again, until LANDING_MS after that allocation.
      const waitMs = released ? this.landingWait(run) : 0;
      if (waitMs > 0) {
        ctx.log.info({ waitMs }, "gave back the run's VMs there are; an allocation whose outcome is unknown may still land: looking again before the finalizer goes");
        return { requeueAfterMs: waitMs };
      }
      this.uncertainAllocations.delete(run.metadata.uid);
    } else {
      await this.stopDeletedRunStep(this.latest(this.o.status.fresh(run)), ctx);
    }
    this.finalized.add(run.metadata.uid);
    await removeFinalizer(this.o.kube, this.path(run), run, FINALIZER);
    this.o.status.forget(run.metadata.uid);
  }

  /**
   * A template run's VM given back (the run ended, or was deleted); whether it was. Not without
   * a client to reach the service with (its Connection deleted, or never made; or its Secret
   * gone with no client built before): said in the log and a Warning Event, and the run's end or deletion goes on
   * rather than wait for ever, as a sandboxRef run's does. A VM left behind is renewed by no
   * one and runs out at its TTL; an ended run tries again at its next pass. Other failures are
   * thrown: retried, and the deletion waits.
   */
  private async giveBackOwnVM(run: SandboxRun, vmId: string | undefined, log: Logger): Promise<boolean> {
    const uncertainSince = this.uncertainAllocations.get(run.metadata.uid);
    let handle: ServiceHandle;
    try {
      handle = this.handleOf(run, true);
    } catch (err) {
      if (!(err instanceof NotReadyError)) throw err;
      log.warn({ reason: err.reason, vmId }, `cannot give back the run's VM (if it has one; it runs out at its TTL): ${err.message}`);
      // An Event too: a VM left running costs the user until its TTL, and the log is not where
      // its owner looks. Repeats (a finished run tries at every pass) fold into one Event.
      if (vmId !== undefined) {
        this.o.events.warning(run, "VMNotReleased", `VM ${vmId} was not given back and runs until its TTL: ${err.message}`);
      } else if (uncertainSince !== undefined) {
        // Status names none, yet an allocation whose answer never came may have made one.
        const sent = new Date(uncertainSince).toISOString();
        this.o.events.warning(run, "VMNotReleased", `a VM the allocation sent at ${sent} may have made (its answer never came) was not given back, and if it was made runs until its TTL: ${err.message}`);
      }
      return false;
    }
    // After an allocation of unknown outcome, on a list read now: what it made may have landed
    // since the snapshot was read.
    await releaseRunVMs(run, handle, vmId, { fresh: uncertainSince !== undefined });
    return true;
  }

  /**
   * The step a deleted sandboxRef run runs, killed. Nothing to stop when no step runs, or when
   * the Sandbox is gone: its VM went with it (or, with deletionPolicy Orphan, runs on with the
   * step, as the user asked). Nor without a Connection to reach the VM through (deleted by
   * force): said in the log, and the deletion goes on rather than wait for ever. Any other
   * failure is retried, and the deletion waits, as a Sandbox's waits for its VM's.
   */
  private async stopDeletedRunStep(run: SandboxRun, ctx: ReconcileContext): Promise<void> {
    const steps = this.stepsToStop(run);
    const unrecorded = steps.length === 0 ? this.unrecordedStart(run) : undefined;
    const name = run.spec.sandboxRef?.name;
    if ((steps.length === 0 && unrecorded === undefined) || name === undefined || this.o.sandboxes.get(run.metadata.namespace, name) === undefined) return;
    let handle: ServiceHandle;
    try {
      handle = this.handleOf(run, true);
    } catch (err) {
      if (!(err instanceof NotReadyError)) throw err;
      const named = [...steps, ...(unrecorded ? [unrecorded] : [])].map((c) => ({ attempt: c.attempt, index: c.index, commandId: c.commandId }));
      ctx.log.warn({ reason: err.reason, steps: named }, `cannot stop the deleted run's step: ${err.message}`);
      return;
    }
    for (const step of steps) await this.kill(run, handle, step);
    const stopped = [...steps];
    if (unrecorded !== undefined && (await this.cancelIfStarted(run, handle, unrecorded, ctx.log))) stopped.push(unrecorded);
    // Where the next step never started, the steps before it still left their output there.
    await this.removeDeletedRunDirs(run, handle, unrecorded === undefined ? steps : [...steps, unrecorded], stopped, ctx.log);
  }

  /**
   * The deleted run's directory removed from each VM of `steps` (removeRunDir), the cancel files
   * of those `stopped` written again. Best effort: the deletion does not wait on a VM that cannot
   * be written (the files stay; a VM gone took them with it), and says so in the log.
   */
  private async removeDeletedRunDirs(run: SandboxRun, handle: ServiceHandle, steps: readonly StepToStop[], stopped: readonly StepToStop[], log: Logger, opts?: { gated?: boolean }): Promise<void> {
    for (const vmId of new Set(steps.map((s) => s.vmId))) {
      const vm = this.vmOf(handle, vmId, opts);
      try {
        await removeRunDir(vm, run.metadata.uid, stopped.filter((s) => s.vmId === vmId).map((s) => refOf(run, s)));
      } catch (err) {
        if (!(err instanceof VMGoneError)) log.info({ err: errorMessage(err), vmId }, "could not remove the deleted run's directory from the VM: its steps' output files stay there");
      } finally {
        await vm.close();
      }
    }
  }

  /**
   * The step a pass would start next, where status names none running: one may have been
   * started with its record lost (a crash, or a status write that failed, between its start and
   * the write; a shard moved meanwhile), which nothing else here remembers.
   */
  private unrecordedStart(run: SandboxRun): StepToStop | undefined {
    const st = run.status ?? {};
    if (isFinished(st) || run.spec.sandboxRef === undefined) return undefined;
    const sandbox = this.sandboxState(run, st);
    const n = next({ spec: run.spec, status: st, sandbox, now: this.now() });
    if (n.kind === "start") return { vmId: n.vmId, attempt: n.attempt, index: n.index };
    // A retry is written with the next attempt's first start.
    if (n.kind === "retry" && sandbox.state === "ready") return { vmId: sandbox.vmId, attempt: Math.max(1, st.attempts ?? 1) + 1, index: 0 };
    return undefined;
  }

  /**
   * Stops `step` by its cancel file if its marker shows it started. Best effort: a step that
   * most likely never started (a run deleted while it waited) must not hold the deletion on a
   * VM that cannot be read; one that did runs on, and that is said in the log.
   */
  private async cancelIfStarted(run: SandboxRun, handle: ServiceHandle, step: StepToStop, log: Logger): Promise<boolean> {
    const vm = this.vmOf(handle, step.vmId);
    try {
      if ((await vm.read(startedFile(stepPath(run.metadata.uid, step.attempt, step.index)))) === undefined) return false;
      await cancelStep(vm, refOf(run, step));
      return true;
    } catch (err) {
      if (!(err instanceof VMGoneError)) log.warn({ err: errorMessage(err), attempt: step.attempt, index: step.index, vmId: step.vmId }, "could not tell whether the deleted run's next step was started (its start unrecorded); if it was, it may still run");
      return false;
    } finally {
      await vm.close();
    }
  }

  /**
   * A step this process started: remembered until the run ends (see startedHere). The first
   * start of a step in a VM wins: a second one exits at the marker (a start in another VM, the
   * attempt's VM replaced, is a real one). Not for a run no longer in the cache (deleted, or
   * moved to another replica while the pass ran): nothing would forget it.
   */
  stepStarted(run: SandboxRun, step: StepToStop): void {
    const uid = run.metadata.uid;
    if (this.o.runs.get(run.metadata.namespace, run.metadata.name)?.metadata.uid !== uid) return;
    const known = this.startedHere.get(uid);
    if (known?.attempt === step.attempt && known.index === step.index && known.vmId === step.vmId) return;
    this.startedHere.set(uid, step);
  }

  /** What this process keeps of a run while it runs here: dropped when it ends or leaves. */
  private forget(uid: string): void {
    this.lostVMs.delete(uid);
    this.startedHere.delete(uid);
    this.heartbeats.forget(uid);
    this.seenSecretValues.delete(uid);
  }

  /** The steps a deleted run may be running: the one status names, and the one this process started (if another). */
  private stepsToStop(run: SandboxRun): StepToStop[] {
    const recorded = runningStep(run.status);
    const startedHere = this.startedStep(run);
    const same = startedHere !== undefined && recorded !== undefined && sameStep(startedHere, recorded) && startedHere.commandId === recorded.commandId;
    return [recorded, same ? undefined : startedHere].filter((c) => c !== undefined);
  }

  /**
   * The step this process started, while status does not say it ended: its attempt is the one
   * status names (or a later one the status write did not record), and that step not finished.
   */
  private startedStep(run: SandboxRun): StepToStop | undefined {
    const started = this.startedHere.get(run.metadata.uid);
    const st = run.status ?? {};
    if (started === undefined || isFinished(st)) return undefined;
    const attempt = Math.max(1, st.attempts ?? 1);
    if (started.attempt < attempt) return undefined;
    if (started.attempt === attempt && st.steps?.[started.index]?.finishedAt !== undefined) return undefined;
    return started;
  }

  /**
   * A finished run: its own VM given back (then its finalizer removed; after an allocation of
   * unknown outcome, once it has been looked for again LANDING_MS after it), and the run deleted
   * once its ttlSecondsAfterFinished has passed.
   */
  async afterFinish(written: SandboxRun, st: SandboxRunStatus, log: Logger): Promise<Result | void> {
    this.forget(written.metadata.uid);
    const run = this.latest(this.o.status.fresh(written)); // with the status this pass wrote, if it did
    // Its own VM not given back for want of a client (its Connection or the Connection's Secret
    // gone): the finalizer stays, the give-back is tried again (the Connection's coming back
    // brings the run back too), and ttlSecondsAfterFinished still applies.
    let holding = false;
    // Given back, but an allocation of unknown outcome may still make a VM (uncertainAllocations):
    // vmReleased waits, with the finalizer, for the look again LANDING_MS after it.
    let landingMs = 0;
    if (run.spec.sandboxTemplate !== undefined && run.status?.vmReleased !== true) {
      holding = !(await this.giveBackOwnVM(run, st.vmId, log));
      landingMs = holding ? 0 : this.landingWait(run);
      if (!holding && landingMs === 0) {
        await this.o.status.write(this.path(run, "status"), run, { vmReleased: true }, []);
        this.remember(run);
        this.uncertainAllocations.delete(run.metadata.uid);
      }
    }
    // After the status this pass may have written: a JSON patch, which needs no resourceVersion.
    if (!holding && landingMs === 0) await removeFinalizer(this.o.kube, this.path(run), run, FINALIZER);
    const at = expiresAt(run.spec.ttlSecondsAfterFinished, st);
    const left = at === undefined ? undefined : at - this.now().getTime();
    if (left === undefined || left > 0) {
      const deleteIn = left === undefined ? undefined : { ms: left + 50, priority: false };
      if (holding) return afterBackoff(deleteIn);
      if (landingMs > 0) return { requeueAfterMs: Math.min(landingMs, deleteIn?.ms ?? Infinity) };
      return deleteIn && { requeueAfterMs: deleteIn.ms };
    }
    try {
      await this.o.kube.delete(this.path(run), { preconditions: { uid: run.metadata.uid }, propagationPolicy: "Background" });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }
}

/** One reconcile of a run that is not finished: decide, act, until it has to wait; then write. */
class Pass {
  private readonly outputs = new Map<string, string>();
  private clearOutputs: string[] = [];
  private readonly vms = new Map<string, RunVM>();
  /** This pass found the attempt's VM gone before a step started (see execute). */
  private lostBeforeStart = false;
  /** This pass looked at the running step before stopping it for the deadline or the Sandbox's deletion (see execute). */
  private lookedBeforeStop = false;
  /** The step this pass stopped: its cancel file is written again after the run's directory is removed (see finish). */
  private stopped: StepToStop | undefined;
  private handle: ServiceHandle | undefined;
  private readonly now: Date;

  constructor(
    private readonly r: SandboxRunReconciler,
    private readonly run: SandboxRun,
    private readonly st: SandboxRunStatus,
    private readonly log: Logger,
  ) {
    this.now = r.clock;
  }

  async execute(): Promise<Result | void> {
    const { run, st } = this;
    // The deadline counts from when the operator took the run up, waiting included (a Job's startTime).
    st.startTime ??= formatTime(this.now);
    let forced: Next | undefined;
    for (let guard = 0; guard < 4 * run.spec.steps.length + 8; guard++) {
      try {
        await this.ensureOwnVM();
        const sandbox = this.r.sandboxState(run, st);
        let n = forced ?? next({ spec: run.spec, status: st, sandbox, now: this.now });
        forced = undefined;
        if (n.kind === "start" && n.index === 0 && n.again !== true && (await this.heldRotatedSecrets(n.attempt, n.vmId))) {
          if (run.spec.sandboxTemplate !== undefined) {
            await this.r.giveBackOutdatedOwnVM(run, n.vmId);
            st.vmId = "";
            continue;
          }
          n = { kind: "wait", reason: RunReason.WaitingForSandbox, message: rotatedSecretsMessage(run, n.vmId, this.r.sandboxOf(run)) };
        }
        switch (n.kind) {
          case "finished":
            return this.r.afterFinish(run, st, this.log);
          case "wait":
            await this.flush(RunPhase.Pending, n.reason, n.message);
            return this.waitResult();
          case "retry": {
            this.r.events.warning(run, RunReason.Retrying, n.message);
            // What failed stays in status for the next attempt's time (logs prints it): the
            // steps and the ConfigMap start over.
            const failing = failingStep(st);
            st.lastFailedAttempt = { attempt: Math.max(1, st.attempts ?? 1), reason: n.reason, message: n.message, ...(failing && { step: failing }) };
            st.attempts = Math.max(1, st.attempts ?? 1) + 1;
            st.steps = [];
            // A run's own VM that is gone is replaced for the next attempt.
            if (run.spec.sandboxTemplate !== undefined && n.reason === RunReason.VMLost) st.vmId = "";
            // What this pass read of the failed attempt (the failing step's output, its last
            // line) is not the next one's: the ConfigMap is cleared of every step.
            this.outputs.clear();
            this.failureDetail = undefined;
            this.clearOutputs = run.spec.steps.map((s) => s.name);
            continue;
          }
          case "fail":
            // The deadline, or the Sandbox deleted, with a step running as far as status
            // knows: it may have ended since the last look, before either (a command cannot
            // outlive the deadline). Looked at once, first: a step that ended is recorded as it
            // ended, not as stopped, and a run whose last step succeeded succeeds. Only a look:
            // a VM that cannot answer (gone, agentd down) must not keep the run past its
            // deadline, which is there for a wedged VM too, nor past its Sandbox.
            if (n.kill !== undefined && !this.lookedBeforeStop) {
              this.lookedBeforeStop = true;
              const running = currentStep(st);
              const seen = running && (await this.follow(Math.max(1, st.attempts ?? 1), running.index, n.kill.commandId, n.kill.vmId).catch(() => undefined));
              if (seen === "ended") continue;
            }
            if (n.kill !== undefined) {
              await this.kill(n.kill);
              await this.keepKilledOutput(n.kill.vmId);
            }
            return await this.finish(RunPhase.Failed, n.reason, n.message);
          case "succeed": {
            const count = run.spec.steps.length;
            const attempts = st.attempts ?? 1;
            return await this.finish(RunPhase.Succeeded, RunReason.Succeeded, `${count} step${count === 1 ? "" : "s"} succeeded${attempts > 1 ? ` in attempt ${attempts}` : ""}`);
          }
          case "start":
            await this.start(n.attempt, n.index, n.vmId, n.again === true);
            await this.flush(RunPhase.Running, RunReason.Running, runningMessage(run.spec, st));
            return this.pollResult(await this.keepOwnVM());
          case "follow": {
            const ended = await this.follow(n.attempt, n.index, n.commandId, n.vmId);
            if (ended === "running") {
              const renewAt = await this.keepOwnVM();
              await this.flush(RunPhase.Running, RunReason.Running, runningMessage(run.spec, st));
              return this.pollResult(renewAt);
            }
            if (ended !== "ended") forced = ended;
            continue;
          }
        }
      } catch (err) {
        if (err instanceof VMGoneError) {
          this.r.vmLost(run, err.vmId);
          // Gone before the attempt started anything (its Sandbox still named it): nothing
          // failed. It waits for the Sandbox's next VM, or allocates its own again.
          // Once a pass: a VM of its own found gone again (one dying at boot) is a failed attempt,
          // or each turn of this loop would allocate another.
          if (!this.lostBeforeStart && (st.steps ?? []).every((s) => s.startedAt === undefined)) {
            this.lostBeforeStart = true;
            if (run.spec.sandboxTemplate !== undefined) st.vmId = "";
            continue;
          }
          forced = attemptFailed(run.spec, st, RunReason.VMLost, `the VM ${err.vmId} the attempt ran in is gone`);
          const cur = (st.steps ?? []).find((s) => s.finishedAt === undefined);
          if (cur !== undefined) cur.finishedAt = formatTime(this.now);
          continue;
        }
        // Finished already (the failure is in the clean-up after it: the VM's release): status
        // stands as written, and the next pass retries the clean-up.
        if (isFinished(st)) throw err;
        if (err instanceof NotReadyError) {
          await this.flush(st.phase === RunPhase.Running ? RunPhase.Running : RunPhase.Pending, err.reason, err.message);
          return this.waitResult();
        }
        return this.failedPass(err);
      }
    }
    throw new Error("the run's state machine did not settle (a bug): retrying");
  }

  /**
   * The service failed this pass. Refused for good (a tier it does not know, a file path outside
   * /workspace) while no step runs: the spec is immutable, so the run fails with the service's
   * answer. Otherwise it is said in status, with startTime (the deadline counts from it and must
   * outlive this pass), and retried with backoff.
   */
  private async failedPass(err: unknown): Promise<Result | void> {
    const failure = classify(err);
    const message = this.masked(failure.message);
    const stepRunning = (this.st.steps ?? []).some((s) => s.finishedAt === undefined);
    if (failure.kind === "stalled" && !stepRunning) return this.finish(RunPhase.Failed, failure.reason, message);
    await this.flush(this.st.phase === RunPhase.Running ? RunPhase.Running : RunPhase.Pending, failure.reason, message).catch((writeErr: unknown) =>
      this.log.warn({ err: errorMessage(writeErr) }, "could not report the service's failure in status"),
    );
    // What is thrown is logged ("reconciler error"): with the run's secrets masked, as in status.
    const raw = errorMessage(err);
    const maskedRaw = this.masked(raw);
    const retry = maskedRaw === raw ? err : retold(err, maskedRaw);
    // The retry backs off, but comes back no later than the run's VM's next renewal (a failing
    // agentd or API server must not cost the run its VM), nor than its deadline (the failures
    // would otherwise hold the run up to the backoff's 1,000 s past it). A deadline passed
    // already is this pass's to act on: its failure backs off as any other.
    const renewAt = await this.keepOwnVM().catch(() => undefined);
    const now = this.r.clock.getTime();
    const deadline = deadlineAt(this.run.spec, this.st);
    const due = [renewAt, deadline !== undefined && deadline > now ? deadline : undefined].filter((t): t is number => t !== undefined);
    if (due.length === 0) throw retry;
    const at = Math.min(...due);
    throw new RetryNoLaterThan(retry, Math.max(1, at - now), at === renewAt);
  }

  /** A message with the run's secret values masked, as far as they can be read now. */
  private masked(message: string): string {
    return mask(message, this.r.maskingSecrets(this.run).values);
  }

  /** With a sandboxTemplate, the run's VM, allocated when there is none (and still time to run). */
  private async ensureOwnVM(): Promise<void> {
    const { run, st } = this;
    if (run.spec.sandboxTemplate === undefined || st.vmId || isFinished(st)) return;
    const deadline = deadlineAt(run.spec, st);
    if (deadline !== undefined && this.now.getTime() >= deadline) return;
    st.vmId = await this.r.allocate(run);
    this.r.events.normal(run, "Allocated", `the run runs in VM ${st.vmId} (spec.sandboxTemplate)`);
  }

  async close(): Promise<void> {
    await Promise.all([...this.vms.values()].map((vm) => vm.close().catch(() => undefined)));
  }

  /** The VM, or undefined without a client to reach it with (no Ready Connection). */
  private vmIfReachable(vmId: string): RunVM | undefined {
    try {
      return this.vm(vmId);
    } catch (err) {
      if (err instanceof NotReadyError) return undefined;
      throw err;
    }
  }

  private vm(vmId: string): RunVM {
    let vm = this.vms.get(vmId);
    if (vm === undefined) {
      this.handle ??= this.r.handleOf(this.run);
      vm = this.r.vm(this.handle, vmId);
      this.vms.set(vmId, vm);
    }
    return vm;
  }

  /**
   * The attempt's first step is about to start in a VM holding values of rotated Secrets
   * (SandboxRunReconciler.vmHoldsRotatedSecrets), and has not started there already: a start
   * whose record was lost (a status write that failed, a crash) left its marker, and that step
   * is followed, not held back or moved.
   */
  private async heldRotatedSecrets(attempt: number, vmId: string): Promise<boolean> {
    if (!(await this.r.vmHoldsRotatedSecrets(this.run, vmId))) return false;
    return (await this.vm(vmId).read(startedFile(stepPath(this.run.metadata.uid, attempt, 0)))) === undefined;
  }

  private async start(attempt: number, index: number, vmId: string, again = false): Promise<void> {
    const { run, st } = this;
    const vm = this.vm(vmId);
    // What the step needs first (a missing Secret is waited for without a call to the VM).
    const { envs, secretValues } = this.r.inputs(run, { files: false });
    this.r.maskingSecrets(run); // the values it starts with are masked in its output, even if rotated meanwhile
    // The files go up before the first step, and only if it has not started yet: a start whose
    // answer was lost (a crash, a status write that failed) may have begun it, and it may have
    // changed them since. Its marker is the first thing the step makes, before any of its work.
    if (index === 0 && (await vm.read(startedFile(stepPath(run.metadata.uid, attempt, 0)))) === undefined) {
      for (const f of this.r.inputs(run, { files: true }).files) await vm.upload(f.path, f.content, { secret: f.secret });
    }
    const deadline = deadlineAt(run.spec, st);
    const timeoutMs = deadline === undefined ? undefined : Math.max(1_000, deadline - this.now.getTime());
    const step = run.spec.steps[index]!;
    const commandId = await startStep(vm, { runUid: run.metadata.uid, attempt, index }, step, {
      ...(Object.keys(envs).length > 0 && { envs, secretValues }),
      ...(timeoutMs !== undefined && { timeoutMs }),
    });
    this.r.stepStarted(run, { vmId, attempt, index, ...(commandId !== undefined && { commandId }) });
    st.attempts = attempt;
    st.vmId = vmId;
    st.steps = [...(st.steps ?? []).slice(0, index), { name: step.name, ...(commandId !== undefined && { commandId }), startedAt: formatTime(this.now) }];
    if (index === 0 && !again) this.r.events.normal(run, "Started", `attempt ${attempt} started in VM ${vmId}`);
  }

  /** "ended" (recorded in status), "running", or what a lost step means for the attempt. */
  private async follow(attempt: number, index: number, commandId: string | undefined, vmId: string): Promise<"ended" | "running" | Next> {
    const { run, st } = this;
    const obs = await observeStep(this.vm(vmId), { runUid: run.metadata.uid, attempt, index }, commandId, this.r.heartbeats, this.now.getTime());
    const steps = st.steps!;
    const step = steps[index]!;
    if (obs.state === "running") return "running";
    // Its start's answer may have been cut before the VM had the command: started again (a start
    // that lands late exits at the marker).
    if (obs.state === "notStarted") {
      this.log.info({ step: step.name }, `starting the step again: ${obs.message}`);
      return { kind: "start", attempt, index, vmId, again: true };
    }
    if (obs.state === "lost") {
      // What may still run of it (its watcher died, not its command) must not run beside the
      // next attempt: stopped, best effort.
      if (obs.began) await this.kill({ vmId, attempt, index, ...(commandId !== undefined && { commandId }) });
      steps[index] = { ...step, finishedAt: formatTime(this.now) };
      return attemptFailed(run.spec, st, RunReason.CommandLost, `step "${step.name}": ${obs.message}`);
    }
    // Nothing ran (the step's directory could not be made in the VM): a failed step, with why.
    if (obs.state === "setupFailed") {
      steps[index] = { ...step, finishedAt: formatTime(this.now) };
      return attemptFailed(run.spec, st, RunReason.StepFailed, `step "${step.name}" failed: ${obs.message}`);
    }
    const output = (await this.readOutput(vmId, obs.outputPath)) ?? "";
    steps[index] = { ...step, exitCode: obs.exitCode, finishedAt: formatTime(this.now), output: tail(output) };
    this.outputs.set(step.name, output);
    if (obs.exitCode !== 0) {
      const line = lastLine(output);
      this.failureDetail = line === undefined ? undefined : `: ${line}`;
    }
    return "ended";
  }

  private failureDetail: string | undefined;

  /**
   * The step a deadline or a deletion killed is the one to debug: what it printed until then is
   * kept as a finished step's output is (if the VM can still be read).
   */
  private async keepKilledOutput(vmId: string): Promise<void> {
    const { run, st } = this;
    const steps = st.steps ?? [];
    const index = steps.findIndex((s) => s.finishedAt === undefined);
    if (index < 0) return;
    const step = steps[index]!;
    steps[index] = { ...step, finishedAt: formatTime(this.now) };
    let output: string | undefined;
    try {
      // Output that cannot be masked (an input Secret or ConfigMap gone meanwhile) is not kept.
      output = await this.readOutput(vmId, outputFile(stepPath(run.metadata.uid, Math.max(1, st.attempts ?? 1), index)));
    } catch {
      return;
    }
    if (output === undefined) return;
    steps[index] = { ...steps[index]!, output: tail(output) };
    this.outputs.set(step.name, output);
  }

  /**
   * A step's output as the run keeps it: masked, and capped to the step's share of the
   * ConfigMap, reading only the ends of the file the cap keeps. Undefined if there is no file.
   */
  private async readOutput(vmId: string, path: string): Promise<string | undefined> {
    const { run } = this;
    // The values to mask first: their length widens what is read at each cut.
    const { values: secrets, gone } = this.r.maskingSecrets(run);
    if (gone !== undefined) return `[output not kept: the Secret "${gone}" the run reads is gone, so its values could not be masked in it]\n`;
    const budget = perStepBudget(run.spec.steps.length);
    const { headBytes, tailBytes } = outputWindow(budget, secrets);
    const ends = await this.vm(vmId).readEnds(path, headBytes, tailBytes);
    return ends === undefined ? undefined : boundedOutput(ends, secrets, budget);
  }

  private async kill(step: StepToStop): Promise<void> {
    this.stopped = step;
    try {
      await stopStep(this.vm(step.vmId), refOf(this.run, step), step.commandId);
    } catch (err) {
      // The deadline or the deletion stands either way; a step left running dies with its VM.
      this.log.info({ err: errorMessage(err) }, "could not stop the running step");
    }
  }

  private async finish(phase: RunPhaseName, reason: string, message: string): Promise<Result | void> {
    const { run, st } = this;
    st.completionTime = formatTime(this.now);
    const full = this.failureDetail !== undefined && phase === RunPhase.Failed ? `${message}${this.failureDetail}` : message;
    await this.flush(phase, reason, full);
    if (phase === RunPhase.Failed) this.r.events.warning(run, reason, full);
    else this.r.events.normal(run, "Completed", full);
    // The files and markers are no longer needed once status says the run is over (a step
    // stopped just now keeps its cancel file: removeRunDir). Also from a pass that did not reach
    // the VM (a deadline met between two steps): the Sandbox's VM is shared, and the run's
    // directory would stay there. (A run's own VM goes.)
    if (st.vmId && (this.handle !== undefined || run.spec.sandboxRef !== undefined)) {
      const vm = this.vmIfReachable(st.vmId);
      if (vm !== undefined) await removeRunDir(vm, run.metadata.uid, this.stopped === undefined ? [] : [refOf(run, this.stopped)]).catch(() => undefined);
    }
    return this.r.afterFinish(run, st, this.log);
  }

  /**
   * The output first (so status never names output that is not there), then status. An output
   * write refused for good (RBAC, a quota, an admission policy; both of its names taken) does
   * not hold status up: the run goes on, and ends, with each step's tail in status and the
   * refusal in its message. One that fails for now (the API server) fails the pass, retried.
   */
  private async flush(phase: RunPhaseName, reason: string, message: string): Promise<void> {
    let refused = "";
    if (this.outputs.size > 0 || this.clearOutputs.length > 0) {
      const clear = this.clearOutputs.filter((k) => !this.outputs.has(k));
      try {
        this.st.outputConfigMap = await this.r.writeOutput(this.run, this.outputs, clear, this.st.outputConfigMap);
      } catch (err) {
        if (!outputRefused(err)) throw err;
        const why = this.masked(errorMessage(err));
        this.log.warn({ err: why }, "the output ConfigMap cannot be written; status keeps each step's tail");
        refused = `; the output ConfigMap could not be written (${why}): status keeps the last 2 KiB of each step's output`;
      }
      this.outputs.clear();
      this.clearOutputs = [];
    }
    await this.r.writeStatus(this.run, this.st, phase, reason, message + refused);
  }

  /** Back when the running step is next looked at, or the run's VM is next to be renewed if sooner (then on the priority lane). */
  private pollResult(renewAt: number | undefined): Result {
    const poll = pollDelayMs(this.st, this.run.spec, this.now);
    // At least 1 ms: a result of 0 is no requeue at all, and a renewal due by now must come back.
    const renewIn = renewAt === undefined ? Infinity : Math.max(1, renewAt - this.r.clock.getTime());
    return renewIn < poll ? { requeueAfterMs: renewIn, priority: true } : { requeueAfterMs: poll };
  }

  /**
   * A run's own VM renewed when that is due, while the run runs (waits and failed passes
   * included): when the next renewal is due. A failure of the service's is logged and tried
   * again (after a quarter of what the VM has left, 1 s to 30 s), not the run's failure: a VM
   * that is gone is found out by the step's next look. Anything else (a write the replica may
   * not make now) is thrown.
   */
  private async keepOwnVM(): Promise<number | undefined> {
    const { run, st } = this;
    if (run.spec.sandboxTemplate === undefined || !st.vmId || isFinished(st)) return undefined;
    let handle: ServiceHandle;
    try {
      handle = this.handle ?? this.r.upkeepHandleOf(run);
    } catch (err) {
      if (err instanceof NotReadyError) return undefined; // no client at all: what the run waits for says why
      throw err;
    }
    const clock = () => this.r.clock.getTime();
    try {
      return await keepRunVM(run, handle, st.vmId, clock);
    } catch (err) {
      if (!isServiceError(err)) throw err;
      const left = Date.parse(handle.vms.get(st.vmId)?.expires_at ?? "") - clock();
      this.log.warn({ vmId: st.vmId, leftMs: Number.isNaN(left) ? undefined : left, err: this.masked(errorMessage(err)) }, "could not renew the run's VM; trying again");
      // Past its expiry (or not known): nothing to hurry for; the step's next look tells.
      if (!(left > 0)) return undefined;
      return clock() + Math.min(RENEW_RETRY_MAX_MS, Math.max(1_000, left / 4));
    }
  }

  /**
   * Waiting: the dependency's watch brings the run back; the deadline too, if it has one, the
   * end of a wait for another VM than one found gone, and the next renewal of the run's VM.
   */
  private async waitResult(): Promise<Result> {
    const renewAt = await this.keepOwnVM();
    const now = this.r.clock.getTime();
    const until = [deadlineAt(this.run.spec, this.st), this.r.lostVMWaitEnds(this.run), renewAt].filter((t): t is number => t !== undefined);
    if (until.length === 0) return afterBackoff();
    const at = Math.min(...until);
    return { requeueAfterMs: Math.max(50, Math.min(30_000, at - now + 50)), ...(at === renewAt && { priority: true }) };
  }
}

/** Why a run waits for its Sandbox's VM that holds values of rotated envFrom Secrets. */
function rotatedSecretsMessage(run: SandboxRun, vmId: string, sb: Sandbox | undefined): string {
  const paused = sb?.metadata.annotations?.[Annotations.paused] === "true" ? ", once it is no longer paused" : "";
  return `the VM ${vmId} of Sandbox "${run.spec.sandboxRef?.name ?? ""}" holds values of its envFrom Secrets from before they changed, which a step could print and the run could not mask: waiting for the Sandbox to replace it${paused} (unless its managementPolicies leave out Update), or for the values to come back`;
}

/** Both names the run's output ConfigMap may have are another's. */
class OutputNameTaken extends Error {}

/** The API server refused the output ConfigMap's write, and would again: 400, 403 (RBAC, a quota), 422 (an admission policy), or both its names taken. */
function outputRefused(err: unknown): boolean {
  return err instanceof OutputNameTaken || isForbidden(err) || isInvalid(err) || (isKubeApiError(err) && err.status === 400);
}

/** How long an attempt waits for its Sandbox to name another VM than the one found gone. */
const LOST_VM_WAIT_MS = 60_000;
/** A renewal of a run's VM that failed is tried again at most this much later (sooner as the VM nears its end). */
const RENEW_RETRY_MAX_MS = 30_000;

/** Which step of the run a step to stop is. */
const refOf = (run: SandboxRun, step: StepToStop): StepRef => ({ runUid: run.metadata.uid, attempt: step.attempt, index: step.index });

const sameStep = (a: StepToStop, b: StepToStop): boolean => a.vmId === b.vmId && a.attempt === b.attempt && a.index === b.index;

/** The step a failed attempt failed at: the last that ended otherwise than with exit code 0 (none when its VM was lost between steps). */
function failingStep(st: SandboxRunStatus): RunStepStatus | undefined {
  return (st.steps ?? []).findLast((s) => s.finishedAt !== undefined && s.exitCode !== 0);
}

/** The step status says is running (started, not seen to end), if any. */
function runningStep(st: SandboxRunStatus | undefined): StepToStop | undefined {
  if (isFinished(st) || !st?.vmId) return undefined;
  const running = currentStep(st);
  if (running === undefined || running.step.startedAt === undefined) return undefined;
  const { index, step } = running;
  return { vmId: st.vmId, attempt: Math.max(1, st.attempts ?? 1), index, ...(step.commandId !== undefined && { commandId: step.commandId }) };
}

/**
 * The output ConfigMap's name: `<run>-output`, or with `uid` (that name taken by another
 * object) `<run>-output-<the uid's first 8 characters>`; shortened with a hash if too long.
 */
export function outputConfigMapName(run: string, uid?: string): string {
  const suffix = uid === undefined ? "-output" : `-output-${uid.slice(0, 8)}`;
  const name = `${run}${suffix}`;
  if (name.length <= 253) return name;
  const hash = createHash("sha256").update(run).digest("hex").slice(0, 8);
  return `${run.slice(0, 253 - suffix.length - 9)}-${hash}${suffix}`;
}

/** A label value is at most 63 characters. */
function labelValue(name: string): string {
  if (name.length <= 63) return name;
  return `${name.slice(0, 54)}-${createHash("sha256").update(name).digest("hex").slice(0, 8)}`;
}

function sandboxChanged(sb: Sandbox, old?: Sandbox): boolean {
  if (old === undefined) return true;
  const ready = (s: Sandbox) => s.status?.conditions?.find((c) => c.type === "Ready")?.status;
  return sb.status?.vmId !== old.status?.vmId || ready(sb) !== ready(old) || sb.metadata.deletionTimestamp !== old.metadata.deletionTimestamp ||
    sb.status?.observedGeneration !== old.status?.observedGeneration;
}

function collection(plural: string): string {
  return resourcePath({ group: GROUP, version: VERSION, plural });
}
