// The manager (controller-runtime's pkg/manager, in small): owns the KubeClient, the shared
// informers, the controllers, leader election, the probe/metrics servers, the event recorder,
// and an orderly shutdown.
//
// Start order: servers (so liveness answers during a long cache sync) -> informers (always,
// leader or not, so a standby has a warm cache and can take over at once) -> wait for cache
// sync -> campaign for the Lease (if enabled) -> controllers' workers while leading.
//
// Stop order (SIGTERM/SIGINT or stop()): controllers stop taking work and finish in-flight
// reconciles within the grace period -> the Lease is released (holderIdentity cleared, so the
// successor takes over at once; left to expire instead if a reconcile outlived the grace
// period, see abandonedWork) -> informers stop -> pending Events are flushed (bounded) ->
// servers close. In sharded mode the Lease is released as soon as the leader-only controllers
// have drained, while the replica's own controllers still finish theirs. Losing the Lease ends
// the manager with reason "leadership-lost" (as controller-runtime exits on lost leadership: a
// fresh process is the safe way back).
//
// Sharded mode (src/sharding/, `run --sharding`) uses a few options that are no-ops when unset:
// leaderOnlyControllers (the others run on every replica without waiting for leadership), a
// default label selector for some informers, a reconciler wrapper, and hooks while leading,
// as stop begins and after the controllers stopped.
import type { Logger } from "pino";
import { errorMessage } from "../lib/errors.js";
import { Controller, type ControllerOptions, type Reconciler } from "./controller.js";
import { EventRecorder } from "./events.js";
import { Informer, type CacheView, type InformerOptions } from "./informer.js";
import { KubeClient, type KubeObject } from "./kube-client.js";
import { LeaderElector, LeadershipLapsed, defaultIdentity, type HolderRecord } from "./leader-election.js";
import { createLogger } from "./logging.js";
import { Metrics, kubeResourceOf } from "./metrics.js";
import { HealthChecks, ProbeServer, metricsHandler, type BoundAddress, type Check } from "./probes.js";

export interface LeaderElectionConfig {
  /** Lease namespace (default: the client's current namespace, else "default"). */
  namespace?: string;
  /** Lease name (default "agent-operator-leader"). */
  name?: string;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
}

export interface ManagerOptions {
  client?: KubeClient;
  logger?: Logger;
  metrics?: Metrics;
  /** Namespaces to watch; empty/undefined = all. Namespaced resources get one list/watch per namespace. */
  namespaces?: string[];
  /** "" or "0" disables. Default ":8080". */
  metricsBindAddress?: string;
  /** "" or "0" disables. Default ":8081". */
  healthProbeBindAddress?: string;
  /** false/undefined: no election (single replica). */
  leaderElection?: boolean | LeaderElectionConfig;
  /** What this replica says of itself on the leader Lease, and how it tells a holder has ended (sharded mode's crash reports: HolderRecord). */
  leaderHolder?: HolderRecord;
  /** Identity for the Lease and Events' reportingInstance (default hostname_random). */
  identity?: string;
  /** Grace period for in-flight reconciles on shutdown (default 30 s). */
  gracefulShutdownTimeoutMs?: number;
  /** Fail start() if caches are not synced by then (default 2 min, controller-runtime's CacheSyncTimeout). */
  cacheSyncTimeoutMs?: number;
  /** Install SIGTERM/SIGINT handlers in start() (default true). */
  handleSignals?: boolean;
  /** Defaults for every informer the manager creates (watch timeouts, backoff). */
  informerDefaults?: Partial<Omit<InformerOptions, "path" | "logger" | "namespaces" | "labelSelector" | "fieldSelector" | "view">>;
  /**
   * Active-active (sharded mode, src/sharding/): with leader election, every controller runs
   * on every replica as soon as the caches are synced, except these, which run only while
   * leading. Undefined (the default): every controller runs only while leading.
   */
  leaderOnlyControllers?: readonly string[];
  /** Sharded mode: the label selector of an informer asked for without one (undefined: none). */
  defaultLabelSelector?: (path: string) => string | undefined;
  /** Sharded mode: wraps the reconciler of each controller newController() makes. */
  wrapReconciler?: (controller: string, reconciler: Reconciler) => Reconciler;
  /** Sharded mode: told of each controller newController() makes. */
  onController?: (controller: Controller) => void;
}

export interface InformerForOptions {
  labelSelector?: string;
  fieldSelector?: string;
  /**
   * Whether the resource is namespaced (then the manager's namespace restriction applies).
   * Default: true, except for well-known cluster-scoped resources and paths that already
   * name a namespace.
   */
  namespaced?: boolean;
  /**
   * A projection of each object, cached instead of the object: informers of one path with
   * different views are different caches, told apart by name.
   */
  view?: CacheView;
  /**
   * The informer's list page size (InformerOptions.pageSize); default: the manager's
   * informerDefaults, else one list. The informer of a key is made once: asking for it again
   * with another page size throws.
   */
  pageSize?: number;
}

export type StopReason = "signal" | "stopped" | "leadership-lost" | "error";

const CLUSTER_SCOPED = new Set([
  "namespaces",
  "nodes",
  "persistentvolumes",
  "customresourcedefinitions",
  "clusterroles",
  "clusterrolebindings",
  "storageclasses",
  "priorityclasses",
  "validatingwebhookconfigurations",
  "mutatingwebhookconfigurations",
  "apiservices",
]);

export class Manager {
  readonly client: KubeClient;
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly identity: string;
  readonly events: EventRecorder;
  readonly namespaces: readonly string[];
  private readonly o: ManagerOptions;
  private readonly informers = new Map<string, Informer<KubeObject>>();
  private readonly controllers: Controller[] = [];
  private readonly healthChecks = new HealthChecks();
  private readonly readyChecks = new HealthChecks();
  private servers: ProbeServer[] = [];
  private metricsAddr: BoundAddress | undefined;
  private healthAddr: BoundAddress | undefined;
  private elector: LeaderElector | undefined;
  private readonly electionAbort = new AbortController();
  private electionDone: Promise<void> | undefined;
  private state: "new" | "starting" | "running" | "stopping" | "stopped" = "new";
  private leading = false;
  private stopPromise: Promise<void> | undefined;
  private resolveDone!: (r: StopReason) => void;
  private readonly donePromise: Promise<StopReason>;
  private stopReason: StopReason = "stopped";
  private abandoned = false;
  private readonly signalHandlers: [NodeJS.Signals, () => void][] = [];
  private readonly stopCountingRequests: () => void;
  private readonly leadingHooks: Array<(signal: AbortSignal) => void | Promise<void>> = [];
  private readonly stoppingHooks: Array<() => void> = [];
  private readonly stoppedHooks: Array<(drained: boolean) => Promise<void>> = [];

  constructor(opts: ManagerOptions = {}) {
    this.o = opts;
    this.logger = opts.logger ?? createLogger();
    this.client = opts.client ?? new KubeClient();
    this.metrics = opts.metrics ?? new Metrics();
    this.identity = opts.identity ?? defaultIdentity();
    this.namespaces = [...new Set((opts.namespaces ?? []).filter((n) => n.length > 0))];
    this.events = new EventRecorder({
      client: this.client,
      logger: this.logger,
      metrics: this.metrics,
      reportingInstance: this.identity,
      // Routine Normal Events every resource makes once: beyond the first few per kind, one
      // combined Event on the namespace (each resource's status says the same).
      aggregateReasons: ["Created", "Started", "Completed"],
    });
    const { kubeRequests, kubeRequestDuration } = this.metrics;
    this.stopCountingRequests = this.client.onRequest((r) => {
      const resource = kubeResourceOf(r.path);
      kubeRequests.inc({ method: r.method, resource, code: String(r.status) });
      if (!r.watch) kubeRequestDuration.observe({ method: r.method, resource }, r.durationMs / 1000);
    });
    this.donePromise = new Promise<StopReason>((resolve) => (this.resolveDone = resolve));
    this.healthChecks.add("ping", () => true);
    this.readyChecks.add("informers-synced", () => {
      for (const inf of this.informers.values()) if (!inf.hasSynced()) throw new Error(`cache of ${inf.path} not synced`);
      return true;
    });
  }

  /**
   * The shared informer for a collection path (cluster-wide form, e.g.
   * /apis/agentcompute.dev/v1alpha1/skills). One per path + selectors, shared by every
   * controller that asks; with a namespace restriction, it lists/watches each namespace.
   */
  informerFor<T extends KubeObject>(path: string, opts: InformerForOptions = {}): Informer<T> {
    const { key, labelSelector } = this.cacheOf(path, opts);
    const pageSize = opts.pageSize ?? this.o.informerDefaults?.pageSize;
    const existing = this.informers.get(key);
    if (existing) {
      // One cache per key: a second caller cannot have another page size, and must not think it has.
      if (existing.pageSize !== pageSize) {
        throw new Error(`informer for ${key} already lists with page size ${existing.pageSize ?? "none"}; asked for ${pageSize ?? "none"}`);
      }
      return existing as unknown as Informer<T>;
    }
    const plural = path.slice(path.lastIndexOf("/") + 1);
    const namespaced = opts.namespaced ?? (!CLUSTER_SCOPED.has(plural) && !path.includes("/namespaces/"));
    const informer = new Informer<T>(this.client, {
      ...this.o.informerDefaults,
      path,
      labelSelector,
      fieldSelector: opts.fieldSelector,
      ...(pageSize !== undefined && { pageSize }),
      // A view caches a projection its readers still type as T: they read only what it keeps.
      ...(opts.view && { view: opts.view as unknown as CacheView<T> }),
      namespaces: namespaced ? [...this.namespaces] : undefined,
      logger: this.logger,
      metrics: this.metrics,
    });
    this.informers.set(key, informer as unknown as Informer<KubeObject>);
    if (this.state === "starting" || this.state === "running") {
      informer.start().catch((err: unknown) => this.logger.error({ err: errorMessage(err), path }, "informer failed to start"));
    }
    return informer;
  }

  /** The informer informerFor(path, opts) returns, if some caller made it already; never makes one. */
  existingInformer<T extends KubeObject>(path: string, opts: Pick<InformerForOptions, "labelSelector" | "fieldSelector" | "view"> = {}): Informer<T> | undefined {
    return this.informers.get(this.cacheOf(path, opts).key) as Informer<T> | undefined;
  }

  /** One cache per collection, label selector (the default applied), field selector and view. */
  private cacheOf(path: string, opts: Pick<InformerForOptions, "labelSelector" | "fieldSelector" | "view">): { key: string; labelSelector: string | undefined } {
    const labelSelector = opts.labelSelector ?? this.o.defaultLabelSelector?.(path);
    return { key: `${path}?l=${labelSelector ?? ""}&f=${opts.fieldSelector ?? ""}&v=${opts.view?.name ?? ""}`, labelSelector };
  }

  /** Convenience: a Controller with the manager's logger and metrics, added to the manager. */
  newController(opts: Omit<ControllerOptions, "logger" | "metrics"> & Partial<Pick<ControllerOptions, "logger" | "metrics">>): Controller {
    const wrap = this.o.wrapReconciler;
    const c = new Controller({ logger: this.logger, metrics: this.metrics, ...opts, ...(wrap && { reconciler: wrap(opts.name, opts.reconciler) }) });
    this.addController(c);
    this.o.onController?.(c);
    return c;
  }

  addController(c: Controller): void {
    this.controllers.push(c);
    if (this.state === "running" && (this.leading || this.runsWithoutLeading(c))) void c.start();
  }

  /**
   * Sharded mode: `fn` runs each time this replica starts leading, with a signal aborted when
   * leading ends (the sharder's role).
   */
  whileLeading(fn: (signal: AbortSignal) => void | Promise<void>): void {
    this.leadingHooks.push(fn);
  }

  /** Sharded mode: `fn` runs as stop begins, before the controllers are given their grace period. */
  onStopping(fn: () => void): void {
    this.stoppingHooks.push(fn);
  }

  /**
   * Sharded mode: `fn` runs on stop, after the controllers stopped and before the Lease is
   * released; `drained`: no reconcile outlived the grace period (none may still be writing).
   */
  onControllersStopped(fn: (drained: boolean) => Promise<void>): void {
    this.stoppedHooks.push(fn);
  }

  private runsWithoutLeading(c: Controller): boolean {
    const only = this.o.leaderOnlyControllers;
    return only !== undefined && !only.includes(c.name);
  }

  addHealthCheck(name: string, check: Check): void {
    this.healthChecks.add(name, check);
  }

  addReadyCheck(name: string, check: Check): void {
    this.readyChecks.add(name, check);
  }

  isLeader(): boolean {
    return this.leading;
  }

  /**
   * With leader election: the gate of the leader's writes (withWriteGate, ServiceClient's
   * writeGate), which refuses them unsent once its Lease was not renewed within the renew
   * deadline (LeaderElector.mayLead), so that a leader stalled past that writes nothing beside
   * the next. Undefined without leader election (nothing to yield to).
   */
  leaderWriteGate(): (() => void) | undefined {
    if (!this.o.leaderElection) return undefined;
    return () => {
      if (!(this.elector?.mayLead() ?? false)) throw new LeadershipLapsed();
    };
  }

  metricsAddress(): BoundAddress | undefined {
    return this.metricsAddr;
  }

  healthAddress(): BoundAddress | undefined {
    return this.healthAddr;
  }

  /**
   * After stop: whether reconciles outlived the grace period. They were aborted, not awaited,
   * and may still be writing; the process should end rather than let them run on.
   */
  abandonedWork(): boolean {
    return this.abandoned;
  }

  /** Resolves with why the manager ended, once stop() has completed. */
  done(): Promise<StopReason> {
    return this.donePromise;
  }

  /** Start everything; resolves once caches are synced and (without election) workers run. */
  async start(): Promise<void> {
    if (this.state !== "new") throw new Error(`manager already ${this.state}`);
    this.state = "starting";
    if (this.o.handleSignals ?? true) this.installSignalHandlers();
    try {
      await this.startServers();
      const syncTimeoutMs = this.o.cacheSyncTimeoutMs ?? 120_000;
      await this.waitForCacheSync(syncTimeoutMs);
    } catch (err) {
      if (this.stopPromise) {
        // stop() (e.g. SIGTERM) during startup: not a start failure.
        await this.stopPromise;
        return;
      }
      this.logger.error({ err: errorMessage(err) }, "manager failed to start");
      await this.stop("error");
      throw err;
    }
    if (this.state !== "starting") return; // stopped meanwhile
    this.state = "running";
    const le = this.o.leaderElection;
    if (!le) {
      this.leading = true;
      await Promise.all(this.controllers.map((c) => c.start()));
      this.logger.info({ controllers: this.controllers.map((c) => c.name) }, "manager running");
      return;
    }
    // Sharded mode: the replica's share starts now; only the leader-only controllers wait.
    const always = this.controllers.filter((c) => this.runsWithoutLeading(c));
    if (always.length > 0) await Promise.all(always.map((c) => c.start()));
    const cfg: LeaderElectionConfig = le === true ? {} : le;
    const namespace = cfg.namespace ?? this.client.currentNamespace() ?? "default";
    this.elector = new LeaderElector({
      client: this.client,
      namespace,
      name: cfg.name ?? "agent-operator-leader",
      identity: this.identity,
      leaseDurationMs: cfg.leaseDurationMs,
      renewDeadlineMs: cfg.renewDeadlineMs,
      retryPeriodMs: cfg.retryPeriodMs,
      logger: this.logger,
      metrics: this.metrics,
      holder: this.o.leaderHolder,
      onStartedLeading: async (signal) => {
        // Won just as the stop ended the campaign (the abort is on its way): lead nothing.
        if (this.state !== "running" || signal.aborted) return;
        this.leading = true;
        this.logger.info("leading: starting controllers");
        for (const hook of this.leadingHooks) {
          void Promise.resolve()
            .then(() => hook(signal))
            .catch((err: unknown) => this.logger.error({ err: errorMessage(err) }, "while-leading hook failed"));
        }
        await Promise.all(this.controllers.map((c) => c.start()));
      },
      onStoppedLeading: () => {
        this.leading = false;
      },
    });
    this.electionDone = this.elector.run(this.electionAbort.signal).then(() => {
      if (this.electionAbort.signal.aborted) return;
      if (this.stopPromise !== undefined) {
        // Lost while stopping (its renewals failing mid-drain): the stop under way gave the
        // leader's reconciles the whole grace period, but another replica may lead by now. They
        // are aborted at once, as a loss before the stop would have them, and the process ends
        // as one that lost leadership.
        this.logger.error("leader election lost while stopping");
        this.stopReason = "leadership-lost";
        for (const c of this.controllers) if (!this.runsWithoutLeading(c)) c.abortInFlight("leadership lost");
        return;
      }
      this.logger.error("leader election lost; stopping");
      void this.stop("leadership-lost");
    });
    this.logger.info({ lease: `${namespace}/${cfg.name ?? "agent-operator-leader"}` }, "manager running; campaigning for leadership");
  }

  /** Graceful shutdown (idempotent). */
  stop(reason: StopReason = "stopped"): Promise<void> {
    if (this.stopPromise) return this.stopPromise;
    this.stopReason = reason;
    this.stopPromise = this.doStop();
    return this.stopPromise;
  }

  private async doStop(): Promise<void> {
    this.state = "stopping";
    for (const hook of this.stoppingHooks) {
      try {
        hook();
      } catch (err) {
        this.logger.warn({ err: errorMessage(err) }, "stop hook failed");
      }
    }
    // Leadership lost: another replica may lead by now (it takes the Lease once it runs out,
    // some 3 s after this one gave up renewing), so the leader's reconciles in flight are stopped
    // at once rather than given the grace period beside it (controller-runtime sets
    // gracefulShutdownTimeout to 0 in OnStoppedLeading for this). The process then ends.
    // Controllers that run without leading (sharded mode) are fenced by their own member Lease,
    // not by this one: they keep the grace period, and their share moves at once if they drain.
    const grace = this.o.gracefulShutdownTimeoutMs ?? 30_000;
    const graceOf = (c: Controller) => (this.stopReason === "leadership-lost" && !this.runsWithoutLeading(c) ? 0 : grace);
    this.logger.info({ reason: this.stopReason, graceMs: grace }, "manager stopping");
    const deadline = Date.now() + grace;
    const stopAll = (cs: readonly Controller[]) => Promise.all(cs.map((c) => c.stop(graceOf(c)).catch(() => "timeout" as const)));
    const leaderOnly = this.controllers.filter((c) => !this.runsWithoutLeading(c));
    const shared = this.controllers.filter((c) => this.runsWithoutLeading(c));
    const outcomes = (
      await Promise.all([
        stopAll(leaderOnly).then(async (ends) => {
          // Sharded mode: once the leader's own work has stopped, another replica may lead at once,
          // while this one's share drains (its member Lease fences that, not the leader Lease).
          // Leading on, a stopping leader whose share hangs would hold the sharder, and with it
          // every move of that share, until its process ends and the Lease runs out. And a
          // stopping replica that does not lead stops campaigning, rather than win mid-drain.
          if (shared.length > 0 && ends.every((o) => o === "drained")) await this.endElection("leadership handed over while the replica's share drains");
          return ends;
        }),
        stopAll(shared),
      ])
    ).flat();
    const drained = outcomes.every((o) => o === "drained");
    if (!drained) {
      // Abandoned reconciles may still write: a successor must not start beside them. Leave the
      // leader Lease to expire (as sharded mode keeps its member Lease), and say so: the caller
      // ends the process (`abandonedWork`), which ends them.
      this.abandoned = true;
      if (this.electionAbort.signal.aborted) {
        // Handed over already: only the replica's share was still at work, fenced by its member Lease.
        this.logger.warn({ graceMs: grace }, "reconciles outlived the grace period");
      } else {
        this.elector?.keepLeaseOnStop();
        this.logger.warn({ graceMs: grace }, "reconciles outlived the grace period: the leader Lease is left to expire, not released");
      }
    }
    for (const hook of this.stoppedHooks) await hook(drained).catch((err: unknown) => this.logger.warn({ err: errorMessage(err) }, "stop hook failed"));
    // The Events still waiting (aggregated, rate-limited) go out while the Lease is still held:
    // once the election ends, the leader's write gate refuses them. Leadership lost: the client
    // is closed without waiting for them, so that nothing still running here writes beside the
    // next leader.
    if (this.stopReason !== "leadership-lost") await Promise.race([this.events.flush(), delay(Math.max(1_000, Math.min(5_000, deadline - Date.now())))]);
    await this.endElection();
    await Promise.all([...this.informers.values()].map((i) => i.stop().catch(() => undefined)));
    this.events.close(); // what is still waiting (rate limit) is dropped, not written through a closed client
    await Promise.all(this.servers.map((s) => s.close().catch(() => undefined)));
    await this.client.close();
    for (const [sig, h] of this.signalHandlers.splice(0)) process.off(sig, h);
    this.state = "stopped";
    this.stopCountingRequests();
    this.logger.info({ reason: this.stopReason }, "manager stopped");
    this.resolveDone(this.stopReason);
  }

  /** Stop campaigning; the Lease, if held, is released (unless keepLeaseOnStop). Idempotent. */
  private async endElection(why?: string): Promise<void> {
    if (!this.electionAbort.signal.aborted) {
      if (why !== undefined && this.leading) this.logger.info(why);
      this.electionAbort.abort(new Error("manager stopping"));
    }
    await this.electionDone?.catch(() => undefined);
    this.leading = false;
  }

  private async startServers(): Promise<void> {
    const metricsAddr = this.o.metricsBindAddress ?? ":8080";
    const healthAddr = this.o.healthProbeBindAddress ?? ":8081";
    const enabled = (a: string): boolean => a !== "" && a !== "0";
    const health = this.healthChecks.handler();
    const ready = this.readyChecks.handler();
    if (enabled(metricsAddr) && enabled(healthAddr) && metricsAddr === healthAddr) {
      const s = new ProbeServer(metricsAddr)
        .route("/metrics", metricsHandler(this.metrics))
        .route("/healthz", health)
        .route("/readyz", ready);
      this.servers.push(s);
      this.metricsAddr = this.healthAddr = await s.listen();
      return;
    }
    if (enabled(metricsAddr)) {
      const s = new ProbeServer(metricsAddr).route("/metrics", metricsHandler(this.metrics));
      this.servers.push(s);
      this.metricsAddr = await s.listen();
    }
    if (enabled(healthAddr)) {
      const s = new ProbeServer(healthAddr).route("/healthz", health).route("/readyz", ready);
      this.servers.push(s);
      this.healthAddr = await s.listen();
    }
    this.logger.info({ metrics: this.metricsAddr?.address, health: this.healthAddr?.address }, "probe servers listening");
  }

  private async waitForCacheSync(timeoutMs: number): Promise<void> {
    const all = Promise.all([...this.informers.values()].map((i) => i.start()));
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const pending = [...this.informers.values()].filter((i) => !i.hasSynced()).map((i) => i.path);
        reject(new Error(`caches not synced within ${timeoutMs} ms: ${pending.join(", ")}`));
      }, timeoutMs);
    });
    try {
      await Promise.race([all, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  private installSignalHandlers(): void {
    let received = 0;
    for (const sig of ["SIGTERM", "SIGINT"] as const) {
      const h = (): void => {
        received++;
        if (received > 1) {
          // Second signal: the operator asked twice; do not make them wait (controller-runtime does the same).
          this.logger.warn({ signal: sig }, "second signal: exiting now");
          process.exit(1);
        }
        this.logger.info({ signal: sig }, "signal received; shutting down");
        void this.stop("signal");
      };
      process.on(sig, h);
      this.signalHandlers.push([sig, h]);
    }
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
