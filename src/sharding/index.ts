// Sharded mode (`agent-operator run --sharding`, docs/sharding.md), put together:
//
//   every replica  - holds a member Lease (membership.ts), watches only the objects labelled
//                    with its identity (replica.ts), runs the sharded kinds' controllers at
//                    once, without waiting for leadership, and lets go of drained objects;
//   the leader     - is also the sharder (sharder.ts): the ring over live members, the owner
//                    labels, the moves; and runs the Connection controller, so that a
//                    Connection's token and usage work happens once, not once per replica.
import type { Logger } from "pino";
import { Gauge } from "prom-client";
import { GROUP, VERSION, kindNames, type KindNames } from "../api/names.js";
import type { Connection } from "../api/index.js";
import type { ServiceHandle } from "../controllers/connection-pool.js";
import type { Operator } from "../controllers/index.js";
import { REFERENCE_VIEW } from "../controllers/reference-view.js";
import type { ShardingOptions } from "../controllers/kind.js";
import { resourcePath } from "../runtime/kube-client.js";
import type { Manager, ManagerOptions } from "../runtime/manager.js";
import { labelValue, memberLeaseName } from "./labels.js";
import { CrashReports, PROCESS_ANNOTATION, SILENCE_MS, acquiringProcess, type ProcessRecord } from "./crash-report.js";
import { MemberLease, MemberSet, MembershipLapsed, type MembershipTimings } from "./membership.js";
import { ReplicaShard } from "./replica.js";
import { Sharder, type ShardedKind, type ShardedObject } from "./sharder.js";

export { replicaIdentity } from "./labels.js";
export { thisProcess } from "./crash-report.js";

const collection = (k: KindNames): string => resourcePath({ group: GROUP, version: VERSION, plural: k.plural });
const sharded = (k: KindNames): ShardedKind => ({ kind: k.kind, plural: k.plural, path: collection(k) });

/** The sharded kinds, by the name of their controller. */
export const SHARDED_CONTROLLERS: ReadonlyMap<string, ShardedKind> = new Map([
  ["skill", sharded(kindNames.skill)],
  ["agent", sharded(kindNames.agent)],
  ["agentdeployment", sharded(kindNames.agentDeployment)],
  ["sandbox", sharded(kindNames.sandbox)],
  ["sandboxrun", sharded(kindNames.sandboxRun)],
]);

/** Controllers that run on the leader only: a Connection's token and usage, once per Connection. */
export const LEADER_ONLY_CONTROLLERS = ["connection"] as const;

/** A Connection's inventories, by the name its ServiceHandle gives them. */
export type InventoryName = keyof Pick<ServiceHandle, "skills" | "agents" | "deployments" | "vms">;

const INVENTORY_OF: Readonly<Record<string, InventoryName>> = {
  [kindNames.skill.plural]: "skills",
  [kindNames.agent.plural]: "agents",
  [kindNames.agentDeployment.plural]: "deployments",
  [kindNames.sandbox.plural]: "vms",
  // A run with a template: its VM carries the run's marker.
  [kindNames.sandboxRun.plural]: "vms",
};

/** What a sharded kind's spec says of its Connection (a run's, of its template's). */
export interface ConnectionRefs {
  connectionRef?: { name?: string };
  sandboxTemplate?: { connectionRef?: { name?: string } };
}

/**
 * Where a moved-in object's service objects are found by its marker: which inventory, of the
 * Connection it names (a run's is its template's). null when it has none: a run on a Sandbox
 * allocates nothing, and a kind that is not sharded moves nowhere.
 */
export function arrivalInventory(plural: string, spec: ConnectionRefs | undefined): { inventory: InventoryName; connectionRef: { name?: string } | undefined } | null {
  const inventory = INVENTORY_OF[plural];
  if (inventory === undefined) return null;
  if (plural !== kindNames.sandboxRun.plural) return { inventory, connectionRef: spec?.connectionRef };
  const template = spec?.sandboxTemplate;
  return template === undefined ? null : { inventory, connectionRef: template.connectionRef };
}

export interface ShardingConfig {
  identity: string;
  /** Name of the leader election Lease; also the ring's name and the member Leases' prefix. */
  leaseName: string;
  logger: Logger;
  timings?: Partial<MembershipTimings>;
  /** The Pod and container this replica runs in (crash-report.ts thisProcess): its crash is then known from the kubelet's report. */
  process?: ProcessRecord;
}

export class Sharding {
  readonly identity: string;
  readonly replica: ReplicaShard;
  private sharder: Sharder | undefined;
  private member: MemberLease | undefined;
  private peers: MemberSet | undefined;
  /** The kubelet's reports on the replicas' Pods (where this replica knows its own: cfg.process). */
  private crashReports: CrashReports | undefined;
  /** This replica leads (runs the sharder), and so fences the member Leases that expire. */
  private leading = false;

  constructor(private readonly cfg: ShardingConfig) {
    this.identity = cfg.identity;
    this.replica = new ReplicaShard({
      identity: cfg.identity,
      logger: cfg.logger,
      controllers: SHARDED_CONTROLLERS,
      selectedByDefault: new Set([collection(kindNames.sandboxRun)]),
      mayWork: () => this.member?.mayWork() ?? false,
      publishInherits: (inherited) => this.member?.publishInherits(inherited) ?? Promise.resolve(),
    });
  }

  /** The manager's options for sharded mode. */
  managerOptions(): Pick<ManagerOptions, "identity" | "leaderOnlyControllers" | "defaultLabelSelector" | "wrapReconciler" | "onController" | "leaderHolder"> {
    return {
      identity: this.identity,
      // The leader Lease says which process holds it, as the member Lease does: a leader whose
      // crash the kubelet reports is succeeded at once, not when the leader Lease runs out.
      leaderHolder: {
        annotations: (acquireTime) => ({ [PROCESS_ANNOTATION]: this.cfg.process === undefined ? null : acquiringProcess(this.cfg.process, acquireTime) }),
        ended: (lease) => this.crashReports?.ended(lease) ?? false,
        silenceMs: SILENCE_MS,
      },
      leaderOnlyControllers: LEADER_ONLY_CONTROLLERS,
      defaultLabelSelector: (path) => this.replica.defaultLabelSelector(path),
      wrapReconciler: (name, r) => this.replica.wrap(name, r),
      onController: (c) => this.replica.watch(c),
    };
  }

  /** The operator's options for sharded mode (src/controllers/kind.ts). */
  operatorOptions(): ShardingOptions {
    return {
      ownSelector: this.replica.selector,
      // The wrapper reconciles nothing unless the membership is current, but a reconcile that
      // began while it was may still be running when it lapses: a process stopped (SIGSTOP, a
      // frozen VM) wakes mid-way with its share handed over. Each of its next writes, to the
      // service and to the API server, is refused unsent.
      writeGate: () => {
        if (!(this.member?.mayWork() ?? false)) throw new MembershipLapsed();
      },
      worksOn: (path, obj) => this.replica.worksOn(path, obj),
      usersOf: (namespace, connection) => {
        if (this.sharder === undefined) throw new Error("not the sharder: the Connection's users are not known here");
        return this.sharder.usersOf(namespace, connection);
      },
    };
  }

  /** Before the operator's controllers are set up. */
  bind(manager: Manager): void {
    this.replica.bind(manager);
  }

  /** The member Leases' names: this prefix and the identity (labels.ts memberLeaseName). */
  private get memberLeasePrefix(): string {
    return `${this.cfg.leaseName}-shard`;
  }

  /** After setupOperator: the sharder's role while leading, and leaving the ring on stop. */
  attach(manager: Manager, operator: Operator, leaseNamespace: string): void {
    const log = manager.logger;
    const connections = manager.informerFor<Connection>(collection(kindNames.connection));
    const ring = labelValue(this.cfg.leaseName);
    const membersGauge = new Gauge({
      name: "agentcompute_shard_members",
      help: "Live replicas of the shard ring as this replica sees them; it takes 1/this of each Connection's rateLimit",
      registers: [manager.metrics.registry],
    });
    this.crashReports = this.cfg.process && new CrashReports({ client: manager.client, namespace: this.cfg.process.namespace, logger: log, metrics: manager.metrics });
    // One view of the live members per replica. A Connection's rateLimit is what the service
    // allows all replicas together: each takes its share, 1 / the live members. On the leader
    // the same view is the sharder's ring.
    const peers = new MemberSet({
      client: manager.client,
      namespace: leaseNamespace,
      ring,
      logger: log,
      metrics: manager.metrics,
      leaseDurationMs: this.cfg.timings?.leaseDurationMs,
      fencing: () => this.leading,
      self: this.identity,
      // A fence of this replica (a wrong verdict, or a process that stalled) is met as soon as
      // the watch shows it, rather than at the next renewal.
      ownLease: { name: memberLeaseName(this.memberLeasePrefix, this.identity), taken: () => this.member?.checkHeld() },
      // The kubelet reports a replica's crash within seconds, its Lease runs out in a lease duration.
      crashReports: this.crashReports,
      leasesInUse: () => {
        const owners = this.sharder?.owners();
        return owners && new Set([...owners].map((o) => memberLeaseName(this.memberLeasePrefix, o)));
      },
      onChange: (m, eligible) => {
        membersGauge.set(m.length);
        operator.pool.setRateShare(1 / Math.max(1, m.length));
        this.sharder?.setMembers(m, eligible);
      },
      // A fenced member's heirs work on its objects at once, before any of them is relabelled.
      onSuccession: (view) => {
        this.replica.setSuccession(view);
        this.sharder?.setSuccession(view);
      },
    });
    this.peers = peers;
    manager.whileLeading(async (signal) => {
      // Leadership already over (a stop ended it as it began): no sharder beside the next leader's.
      if (signal.aborted) return;
      const sharder = new Sharder({
        client: manager.client,
        logger: log,
        metrics: manager.metrics,
        namespaces: manager.namespaces,
        kinds: [...SHARDED_CONTROLLERS.values()],
        // The kinds other kinds look up have a cache of every object here already (their
        // reference view): the sharder reads those rather than keep a second copy of each.
        sharedInformer: (kind) => manager.existingInformer<ShardedObject>(kind.path, { view: REFERENCE_VIEW }),
        // A user of a deleting Connection letting go (deleted, or a run's VM given back, on
        // any replica) brings the Connection back: its controller runs here, on the leader,
        // and sees every replica's objects through the sharder only.
        onLetGo: (_kind, namespace, name) => {
          if (connections.get(namespace, name)?.metadata.deletionTimestamp !== undefined) operator.controllers.connection.enqueue({ namespace, name });
        },
      });
      // The ring is this replica's view of the members (below), from now on and as it changes;
      // looked at again as the sharder's, which counts a member gone only once it is fenced
      // (as a non-leader, this replica dropped expired ones without fencing them).
      this.leading = true;
      peers.refresh();
      sharder.setSuccession(peers.succession());
      sharder.setMembers(peers.members(), peers.eligible());
      this.sharder = sharder;
      const stop = async (): Promise<void> => {
        this.leading = false;
        this.sharder = undefined;
        await sharder.stop();
      };
      signal.addEventListener("abort", () => void stop(), { once: true });
      await sharder.start();
      log.info("sharder running");
    });
    this.member = new MemberLease({
      client: manager.client,
      namespace: leaseNamespace,
      name: memberLeaseName(this.memberLeasePrefix, this.identity),
      identity: this.identity,
      ring,
      logger: log,
      process: this.cfg.process,
      ...this.cfg.timings,
      ownsObjects: (signal) => peers.shareStillMoving(this.identity, () => this.replica.ownsAny(), signal),
      onJoined: () => this.replica.resume(),
      onLost: () => {
        void manager.stop("leadership-lost");
        // The sharder hands the share over 5 s after the renew deadline: a reconcile still in
        // flight by then (a hung service call) must not outlive this process's membership.
        setTimeout(() => {
          log.error("membership lost and the controllers did not stop within 3 s; exiting");
          process.exit(1);
        }, 3_000).unref();
      },
    });
    const member = this.member;
    this.replica.setInventories((kind, obj) => {
      const where = arrivalInventory(kind.plural, (obj as { spec?: ConnectionRefs }).spec);
      if (where === null) return null;
      try {
        return operator.pool.forResource(obj.metadata.namespace ?? "", where.connectionRef, { deleting: true })[where.inventory];
      } catch {
        return undefined; // the Connection is not usable yet: the reconcile says why, and retries
      }
    });
    // Stopping: the member Lease is renewed no more from the first moment, so the share moves
    // within a lease duration even if a reconcile hangs through the whole grace period: at the
    // renew deadline the membership is lost (onLost above: writes refused, the process ended 3 s
    // later if the reconcile still runs), before the sharder may move anything.
    manager.onStopping(() => member.stopRenewing());
    // Leave the ring once the controllers have stopped: the share then moves without a drain.
    // Not while a reconcile that outlived the grace period may still write: the Lease then
    // expires, and is fenced, as a killed replica's. The member Lease first: its stop ends the
    // wait for the renew deadline (stopRenewing), which the view of the members must not delay.
    // (A leader has handed the sharder over by now, unless its own controllers hung: the Lease is kept then.)
    manager.onControllersStopped(async (drained) => {
      await member.stop({ leave: drained });
      await peers.stop();
    });
  }

  /**
   * Joins the ring (after the caches synced, so the share lands in a warm replica). The view of
   * the members first: this replica may lead (and place objects) before its own Lease is
   * taken, which for a fenced identity waits for its old share to move.
   */
  async join(): Promise<void> {
    await this.peers?.start();
    await this.member?.start();
  }
}
