// How a managed kind is put together, in the manner of controller-runtime's builder
// (ctrl.NewControllerManagedBy(mgr).For(kind).Watches(...)): a kind's module describes what
// is its own in a ManagedKind (names, id in the service, client, what it watches), and
// setupManagedKind builds the rest the same way for every kind: the controller and its
// ManagedReconciler, the one connector (the resource's Connection from the pool), the status
// writer's cache hooks, the Connection watches and the inventory-change mapping.
import { createHash } from "node:crypto";
import { CLAIM_ANNOTATIONS, ConditionType, DEFAULT_CONNECTION, FINALIZER, GROUP, VERSION, kindNames, type KindNames } from "../api/names.js";
import type { Connection, ObjectMeta } from "../api/index.js";
import { ConnectionSecretWriter, connectionSecretOwner, type SecretObject } from "../managed/connection-secret.js";
import type { Connector, ExternalClient, ManagedResource } from "../managed/external.js";
import { ManagedReconciler } from "../managed/reconciler.js";
import { ResourceMetrics } from "../managed/resource-metrics.js";
import { StatusWriter } from "../managed/status-writer.js";
import type { Controller, Request } from "../runtime/controller.js";
import type { Informer } from "../runtime/informer.js";
import { eventsWhile, type Events } from "../runtime/events.js";
import { configMapsPath, resourcePath, secretsPath, withWriteGate, type KubeClient, type KubeObject } from "../runtime/kube-client.js";
import type { Manager } from "../runtime/manager.js";
import { serviceClientHooks, type Metrics } from "../runtime/metrics.js";
import { deepEqual } from "../runtime/status.js";
import { ConnectionPool, type InventoryKind, type ServiceHandle } from "./connection-pool.js";
import { ObjectStore, type ConfigMapObject } from "./object-store.js";
import { REFERENCE_VIEW } from "./reference-view.js";

/** The type of the Secrets Helm keeps its releases in (helm.sh/helm/v3 pkg/storage/driver/secrets.go). */
const HELM_RELEASE_SECRET_TYPE = "helm.sh/release.v1";

export interface OperatorOptions {
  /** Every resource is observed again this often (jittered); default 10 min. */
  syncPeriodMs: number;
  /** Workers per controller; default 8. */
  concurrency: number;
  /**
   * A Sandbox's status is written on a change a user must see, and otherwise at most this
   * often, at a renewal (`--sandbox-status-interval`, 10 min in `agent-operator run`). Absent
   * or 0: at every renewal.
   */
  sandboxStatusIntervalMs?: number;
  /** Sharded mode (`--sharding`, src/sharding/); absent: every replica sees every object. */
  sharding?: ShardingOptions;
}

/** What the controllers need to know of sharded mode. */
export interface ShardingOptions {
  /** The label selector of this replica's share: each managed kind's own informer uses it. */
  ownSelector: string;
  /**
   * The resources (kind/name) that use a Connection, on every replica: the Connection
   * controller runs on the leader only. Throws while not known.
   */
  usersOf(namespace: string, connection: string): string[];
  /**
   * Asked before each write the sharded kinds' controllers make (their objects, status,
   * connection Secrets and Events; the service's objects and a VM's agentd); throws to refuse
   * it unsent.
   */
  writeGate?(): void;
  /**
   * Whether this replica works on `obj` (of the collection `path`) now: its own, or a fenced
   * member's that the heirs' ring gives it. Its cache of the share also holds the fenced
   * member's other objects, which the other heirs work on.
   */
  worksOn(path: string, obj: KubeObject): boolean;
}

/** What a kind's module may use to describe itself: the shared caches and a clock. */
export interface KindContext {
  /** The informer of one of the group's kinds, shared by every controller that asks for it. */
  informer<T extends ManagedResource>(names: KindNames): Informer<T>;
  readonly secrets: Informer<SecretObject>;
  readonly configMaps: Informer<ConfigMapObject>;
  readonly store: ObjectStore;
  now(): Date;
  /** The operator's options a kind reads (absent in unit tests: the defaults apply). */
  readonly options?: Pick<OperatorOptions, "sandboxStatusIntervalMs">;
  /** The operator's metrics, for a kind's own series (absent in unit tests). */
  readonly metrics?: Metrics;
}

/** What is particular to one managed kind; everything else is setupManagedKind's. */
export interface ManagedKind<R extends ManagedResource, Plan> {
  names: KindNames;
  /** The controller's name: the `controller` label of its metrics and logs. */
  controller: string;
  /** The inventory of a Connection holding this kind's service objects. */
  inventory: InventoryKind;
  /** The resource's id in the service (status, or the adoption annotation), if it has one. */
  externalId(cr: R): string | undefined;
  /** Annotations claimed before the create, with the finalizer (see ManagedReconcilerOptions.claim). */
  claim?(cr: R): Record<string, string>;
  /** What the objects the spec refers to hold (see ManagedReconcilerOptions.inputs); `fingerprint` makes one. */
  inputs?(cr: R): string | undefined;
  /** true: the kind writes credentials or endpoints to the resource's connection Secret. */
  connectionSecret: boolean;
  /**
   * true: the service objects die unless written to (a VM's TTL), so they are kept alive by
   * the client's `upkeep` (renewals only) when nothing else may be done: paused, managed without
   * Update, the Connection not Ready, a spec the service refused, a change that failed.
   */
  needsUpkeep?: boolean;
  /** With `needsUpkeep`: the resource names an object its upkeep keeps alive (ManagedReconcilerOptions.keepsAlive). */
  keepsAlive?(cr: R): boolean;
  /** true: the client's update may create a service object (see ManagedReconcilerOptions.updateCreates). */
  updateCreates?: boolean;
  /**
   * With `needsUpkeep`: the resource's upkeep is due soon, so that its first pass (a restart, a
   * new leader, a share moved in: thousands of resources listed at once) goes on the priority
   * lane, ahead of the others, rather than in the informer's order.
   */
  upkeepSoon?(cr: R): boolean;
  /** The client for the resources of one Connection. It holds nothing between calls. */
  client(handle: ServiceHandle): ExternalClient<R, Plan>;
  /** Indices, and watches of what the kind depends on (beyond itself and its Connection). */
  watches?(controller: Controller, own: Informer<R>): void;
}

/** The shared part of the operator: informers, object store, status writer, connection pool. */
export class OperatorContext implements KindContext {
  readonly connections: Informer<Connection>;
  readonly secrets: Informer<SecretObject>;
  readonly configMaps: Informer<ConfigMapObject>;
  readonly store: ObjectStore;
  /**
   * The API server, as the managed kinds' controllers write to it: in sharded mode through the
   * membership's write gate (ShardingOptions.writeGate), else with leader election through the
   * leadership's (Manager.leaderWriteGate). The Connection controller, which runs on the
   * leader, writes through the leadership's gate only (gatedWrites).
   */
  readonly kube: KubeClient;
  /** The managed kinds' Events: in sharded mode, none while the write gate refuses. */
  readonly events: Events;
  /** The managed kinds' status (through `kube`). */
  readonly status: StatusWriter;
  readonly secretWriter: ConnectionSecretWriter;
  readonly pool: ConnectionPool;
  /** agentcompute_managed_resource_* of every managed kind (src/managed/resource-metrics.ts). */
  readonly resourceMetrics: ResourceMetrics;
  readonly metrics: Metrics;
  /** Per kind that holds Connections: its resources (kind/name) that use one, for "who uses this Connection". */
  private readonly users: Array<(namespace: string, connection: string) => string[]> = [];
  private readonly onInventoryChange = new Map<InventoryKind, (namespace: string, connection: string, changed: Set<string>) => void>();
  private credentialsRefused: ((namespace: string, name: string) => void) | undefined;

  constructor(
    readonly manager: Manager,
    readonly options: OperatorOptions,
  ) {
    this.connections = manager.informerFor<Connection>(collection(kindNames.connection));
    // Not ours, and not bounded in size: a namespace may hold hundreds of large Secrets. Listed
    // in pages, so a start holds one page's text at a time, not the whole collection's; the API
    // server reads these pages from etcd. Helm's release Secrets (a compressed copy of every
    // release's manifests, up to 1 MiB each, one per revision kept) are left out by the API
    // server: no resource can name one for anything the operator reads, and in a shared
    // cluster they would be most of the cache.
    this.secrets = manager.informerFor<SecretObject>(secretsPath(), { pageSize: 500, fieldSelector: `type!=${HELM_RELEASE_SECRET_TYPE}` });
    this.configMaps = manager.informerFor<ConfigMapObject>(configMapsPath(), { pageSize: 500 });
    this.store = new ObjectStore(this.secrets, this.configMaps);
    // Sharded mode: the replica's membership; else, with leader election, the leadership.
    const gate = options.sharding?.writeGate ?? manager.leaderWriteGate();
    ({ kube: this.kube, events: this.events } = gatedWrites(manager, gate));
    this.status = new StatusWriter(this.kube);
    this.secretWriter = new ConnectionSecretWriter(this.kube, this.secrets);
    this.resourceMetrics = new ResourceMetrics(manager.metrics.registry);
    this.metrics = manager.metrics;
    this.pool = new ConnectionPool({
      connections: this.connections,
      secrets: this.secrets,
      logger: manager.logger,
      hooks: (connection) => ({
        ...serviceClientHooks(manager.metrics, connection),
        onCredentialsRefused: () => {
          const [namespace, name] = connection.split("/") as [string, string];
          this.credentialsRefused?.(namespace, name);
        },
      }),
      inventoryMaxAgeMs: options.syncPeriodMs,
      writeGate: gate,
      onInventoryChange: (connectionKey, kind, keys) => {
        const [namespace, name] = connectionKey.split("/") as [string, string];
        this.onInventoryChange.get(kind)?.(namespace, name, new Set(keys));
      },
    });
    // Every replica has clients of a Connection (sharded mode: the Connection controller runs on
    // the leader only): each drops them, and their metric series, when the Connection goes.
    this.connections.on("delete", (c) => {
      const { namespace, name } = c.metadata;
      this.pool.forget(namespace, name);
      void manager.metrics.service.removeConnection(`${namespace}/${name}`);
    });
  }

  now(): Date {
    return new Date();
  }

  /**
   * Told when the token service refuses a Connection's credentials in any call of any resource
   * (revoked, rotated out): the Connection controller looks at once, rather than stay Ready
   * until its next look while every resource fails.
   */
  whenCredentialsRefused(then: (namespace: string, name: string) => void): void {
    this.credentialsRefused = then;
  }

  /**
   * The informer other kinds look a kind's resources up in. In sharded mode it holds every
   * resource of the kind, each as its reference view (./reference-view.ts: what lookups read);
   * otherwise it is the kind's own informer.
   */
  informer<T extends ManagedResource>(names: KindNames): Informer<T> {
    if (this.options.sharding !== undefined) return this.manager.informerFor<T>(collection(names), { view: REFERENCE_VIEW });
    return this.manager.informerFor<T>(collection(names));
  }

  /**
   * A managed kind's own informer: in sharded mode, only this replica's share. Lookups of
   * other kinds (informer()) see every object.
   */
  ownInformer<T extends ManagedResource>(names: KindNames): Informer<T> {
    const sharding = this.options.sharding;
    if (sharding === undefined) return this.informer<T>(names);
    return this.manager.informerFor<T>(collection(names), { labelSelector: sharding.ownSelector });
  }

  /** The resources (kind/name) of the namespace that use this Connection. */
  usersOf(namespace: string, connection: string): string[] {
    if (this.options.sharding !== undefined) return this.options.sharding.usersOf(namespace, connection);
    return this.users.flatMap((of) => of(namespace, connection));
  }

  /** Registers a kind whose resources hold a Connection (`connectionOf`; undefined: none) for usersOf. */
  addConnectionUsers<T extends KubeObject>(kind: string, informer: Informer<T>, connectionOf: (obj: T) => string | undefined): void {
    this.users.push((namespace, connection) =>
      informer
        .list(namespace)
        .filter((obj) => connectionOf(obj) === connection)
        .map((obj) => `${kind}/${obj.metadata.name ?? ""}`),
    );
  }

  /** Registers a kind for usersOf and for the changes its inventory reads find. */
  addManaged<R extends ManagedResource>(
    kind: string,
    informer: Informer<R>,
    inventory: InventoryKind,
    changed: (namespace: string, connection: string, keys: Set<string>) => void,
  ): void {
    this.addConnectionUsers(kind, informer, connectionName);
    this.onInventoryChange.set(inventory, changed);
  }
}

/**
 * Builds one managed kind's controller; `connection` is the Connection controller, which a
 * deleting Connection's last user brings back.
 */
export function setupManagedKind<R extends ManagedResource, Plan>(
  ctx: OperatorContext,
  connection: Controller,
  kind: ManagedKind<R, Plan>,
): Controller {
  const informer = ctx.ownInformer<R>(kind.names);
  // The gauges count this informer's cache; the reconciler reports its outcomes for drift.
  const sharding = ctx.options.sharding;
  const path = collection(kind.names);
  const resourceMetrics = ctx.resourceMetrics.track(kind.names.kind, informer, sharding && ((cr) => sharding.worksOn(path, cr)));
  const reconciler = new ManagedReconciler<R, Plan>({
    kind: kind.names,
    informer,
    kube: ctx.kube,
    events: ctx.events,
    connector: poolConnector(ctx.pool, kind),
    externalId: (cr) => kind.externalId(cr),
    claim: kind.claim,
    ...(kind.inputs && { inputs: kind.inputs }),
    status: ctx.status,
    syncPeriodMs: ctx.options.syncPeriodMs,
    secrets: kind.connectionSecret ? ctx.secretWriter : undefined,
    needsUpkeep: kind.needsUpkeep ?? false,
    ...(kind.keepsAlive && { keepsAlive: kind.keepsAlive }),
    updateCreates: kind.updateCreates ?? false,
    resourceMetrics,
  });
  const controller = ctx.manager.newController({ name: kind.controller, concurrency: ctx.options.concurrency, reconciler });
  controller.watch(informer, undefined, { filter: specOrMetaChanged, ...(kind.upkeepSoon && { priority: kind.upkeepSoon }) });
  informer.on("update", (cr) => {
    ctx.status.seen(cr);
    reconciler.seen(cr);
  });
  informer.on("delete", (cr) => ctx.status.forget(cr.metadata.uid));
  // A Connection that becomes Ready (or changes) brings back everything that uses it.
  controller.watch(ctx.connections, (c) => usingConnection(informer, c.metadata.namespace, c.metadata.name).map(requestOf), {
    filter: readinessChanged,
  });
  // A deleting Connection waits for its users; the last one going brings it back.
  connection.watch(informer, (cr) => [{ namespace: cr.metadata.namespace, name: connectionName(cr) }], {
    filter: (cr, _old, event) =>
      event === "delete" && ctx.connections.get(cr.metadata.namespace, connectionName(cr))?.metadata.deletionTimestamp !== undefined,
  });
  // An out-of-band change found by an inventory read brings back the resources it concerns.
  ctx.addManaged(kind.names.kind, informer, kind.inventory, (namespace, connectionName, changed) => {
    for (const cr of usingConnection(informer, namespace, connectionName)) {
      const id = kind.externalId(cr);
      if (id !== undefined && changed.has(id)) controller.enqueue(requestOf(cr));
    }
  });
  if (kind.connectionSecret) {
    // Its connection Secret deleted or edited by someone else: written again now, not at the
    // next resync (controller-runtime's Owns). Not on its creation, nor on a write that leaves
    // the data as it was: the operator's own writes would each bring the resource back.
    controller.watch(
      ctx.secrets,
      (s) => {
        const owner = connectionSecretOwner(s);
        return owner?.kind === kind.names.kind ? [{ namespace: s.metadata.namespace, name: owner.name }] : [];
      },
      { filter: (s, old, event) => event === "delete" || (event === "update" && !deepEqual(old?.data, s.data)) },
    );
  }
  kind.watches?.(controller, informer);
  return controller;
}

/** The manager's client and Events, writing only while `gate` lets them (none: always). */
export function gatedWrites(manager: Pick<Manager, "client" | "events">, gate: (() => void) | undefined): { kube: KubeClient; events: Events } {
  if (gate === undefined) return { kube: manager.client, events: manager.events };
  return { kube: withWriteGate(manager.client, gate), events: eventsWhile(manager.events, () => passes(gate)) };
}

/** Whether a write gate lets writes through now. */
function passes(gate: () => void): boolean {
  try {
    gate();
    return true;
  } catch {
    return false;
  }
}

/** The one connector: the resource's Connection from the pool, and the kind's client for it. */
export function poolConnector<R extends ManagedResource, Plan>(pool: ConnectionPool, kind: Pick<ManagedKind<R, Plan>, "client">): Connector<R, Plan> {
  return {
    async connect(cr) {
      // While deleting, the client built before serves even if the credentials are gone.
      const deleting = cr.metadata.deletionTimestamp !== undefined;
      return kind.client(pool.forResource(cr.metadata.namespace, cr.spec.connectionRef, { deleting }));
    },
    connectForUpkeep(cr) {
      return kind.client(pool.forUpkeep(cr.metadata.namespace, cr.spec.connectionRef));
    },
    inputs: (cr) => pool.inputsOf(cr.metadata.namespace, cr.spec.connectionRef),
  };
}

/**
 * Indexes `informer` by the names `refs` returns (objects of the same namespace) and returns
 * the lookup: the objects that reference a given object, by its namespace and name.
 *
 * Map functions ("which Sandboxes load this Skill?") answer from these indices: at 10,000
 * resources a scan of the namespace per event (every Secret, Agent and Skill the cold start
 * writes is one) was the operator's biggest CPU cost after garbage collection, and most of
 * that garbage. An index name stands for one mapping: two controllers asking for the same one
 * of a shared informer (the Sandbox and SandboxRun controllers, of a Sandbox's envFrom Secrets)
 * share one index.
 */
export function referrers<T extends KubeObject>(
  informer: Informer<T>,
  index: string,
  refs: (obj: T) => Array<string | undefined>,
): (target: { metadata: { namespace?: string; name?: string } }) => T[] {
  if (!informer.hasIndex(index)) {
    informer.addIndex(index, (obj) => {
      const out: string[] = [];
      for (const r of refs(obj)) if (r !== undefined) out.push(`${obj.metadata.namespace ?? ""}/${r}`);
      return out;
    });
  }
  return (target) => informer.byIndex(index, `${target.metadata.namespace ?? ""}/${target.metadata.name ?? ""}`);
}

export function requestOf(obj: { metadata: { namespace?: string; name?: string } }): Request {
  return { namespace: obj.metadata.namespace ?? "", name: obj.metadata.name ?? "" };
}

/** The name of the Connection a resource uses. */
export function connectionName(cr: ManagedResource): string {
  return cr.spec.connectionRef?.name ?? DEFAULT_CONNECTION;
}

function usingConnection<R extends ManagedResource>(informer: Informer<R>, namespace: string, connection: string): R[] {
  return informer.list(namespace).filter((cr) => connectionName(cr) === connection);
}

function collection(kind: KindNames): string {
  return resourcePath({ group: GROUP, version: VERSION, plural: kind.plural });
}

/**
 * Our own status writes come back as watch events; reconciling on them would double the work
 * and the writes. Spec (generation), annotations (adoption, redeploy-at), finalizers and
 * deletion are what matter. The operator adding its own finalizer is not news either: the
 * reconcile that added it carried on with the answer.
 */
export function specOrMetaChanged<T extends { metadata: ObjectMeta }>(obj: T, old?: T): boolean {
  if (old === undefined || obj.metadata.generation !== old.metadata.generation) return true;
  const m = obj.metadata;
  const o = old.metadata;
  if (m.deletionTimestamp !== o.deletionTimestamp) return true;
  // The operator's own claim, written with the finalizer, is not news either.
  const unclaimed = (a: Record<string, string> | undefined) => Object.entries(a ?? {}).filter(([k]) => !CLAIM_ANNOTATIONS.includes(k));
  if (JSON.stringify(unclaimed(m.annotations)) !== JSON.stringify(unclaimed(o.annotations))) return true;
  const now = m.finalizers ?? [];
  const before = o.finalizers ?? [];
  if (JSON.stringify(now) === JSON.stringify(before)) return false;
  const ownAdded = now.length === before.length + 1 && now[now.length - 1] === FINALIZER && !before.includes(FINALIZER) &&
    before.every((f, i) => now[i] === f);
  return !ownAdded;
}

/** A Connection's token refreshes and usage updates do not concern its dependants; its readiness does. */
export function readinessChanged(obj: Connection, old?: Connection): boolean {
  if (old === undefined) return true;
  const ready = (c: Connection) => c.status?.conditions?.find((x) => x.type === ConditionType.Ready);
  const a = ready(obj);
  const b = ready(old);
  return a?.status !== b?.status || a?.observedGeneration !== b?.observedGeneration || obj.status?.observedGeneration !== old.status?.observedGeneration;
}

/** An opaque fingerprint of `parts` (ManagedKind.inputs): a hash, since they may hold Secret values. */
export function fingerprint(...parts: unknown[]): string {
  return createHash("sha256").update(JSON.stringify(parts)).digest("hex");
}
