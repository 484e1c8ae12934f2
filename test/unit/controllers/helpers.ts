// A small world for the kinds' unit tests: the real in-process emulator behind a real
// ServiceClient (through the real ConnectionPool), the real ManagedReconciler, and in place of
// the API server an in-memory store that applies the finalizer and status patches the
// reconciler sends. What a test asserts is what a user would see: the calls the emulator
// logged, what the service holds, the resource's status and its Events.
import { kindNames, type KindNames } from "../../../src/api/names.js";
import type { Connection } from "../../../src/api/index.js";
import { ConnectionSecretWriter, type SecretObject } from "../../../src/managed/connection-secret.js";
import type { ManagedResource } from "../../../src/managed/external.js";
import { ManagedReconciler } from "../../../src/managed/reconciler.js";
import { StatusWriter } from "../../../src/managed/status-writer.js";
import { ConnectionPool, type ServiceHandle } from "../../../src/controllers/connection-pool.js";
import { poolConnector, type KindContext, type ManagedKind } from "../../../src/controllers/kind.js";
import { ObjectStore, type ConfigMapObject } from "../../../src/controllers/object-store.js";
import { startEmulator, type Emulator } from "../../../src/emulator/index.js";
import type { ReconcileContext, Result } from "../../../src/runtime/controller.js";
import type { EventRecorder } from "../../../src/runtime/events.js";
import type { Informer } from "../../../src/runtime/informer.js";
import { KubeApiError, secretsPath, type KubeClient } from "../../../src/runtime/kube-client.js";
import { silentLogger } from "../../../src/runtime/logging.js";

export const NS = "team-a";
export const ORG = "org-emulator";
export const API_KEY = "unit-test-api-key-5d1e";

interface Stored {
  metadata: {
    name: string;
    namespace: string;
    uid?: string;
    generation?: number;
    resourceVersion?: string;
    annotations?: Record<string, string>;
    finalizers?: string[];
    deletionTimestamp?: string;
  };
  spec?: unknown;
  status?: unknown;
}

/** The informer surface the controllers read (get, list, indices), over a plain map. */
export class FakeInformer<T extends Stored> {
  private readonly objects = new Map<string, T>();
  private readonly indexers = new Map<string, (obj: T) => string[]>();

  get(namespace: string | undefined, name: string): T | undefined {
    return this.objects.get(`${namespace ?? ""}/${name}`);
  }

  list(namespace?: string): T[] {
    return [...this.objects.values()].filter((o) => namespace === undefined || o.metadata.namespace === namespace);
  }

  set(obj: T): T {
    this.objects.set(`${obj.metadata.namespace}/${obj.metadata.name}`, obj);
    return obj;
  }

  delete(namespace: string, name: string): void {
    this.objects.delete(`${namespace}/${name}`);
  }

  hasIndex(name: string): boolean {
    return this.indexers.has(name);
  }

  addIndex(name: string, fn: (obj: T) => string[]): void {
    this.indexers.set(name, fn);
  }

  byIndex(name: string, value: string): T[] {
    const fn = this.indexers.get(name);
    if (fn === undefined) throw new Error(`no index ${name}`);
    return this.list().filter((o) => fn(o).includes(value));
  }

  on(): () => void {
    return () => undefined;
  }

  as<U>(): Informer<U & Stored> {
    return this as unknown as Informer<U & Stored>;
  }
}

export interface RecordedEvent {
  type: "Normal" | "Warning";
  reason: string;
  message: string;
}

let uids = 0;

export class World {
  readonly informers = new Map<string, FakeInformer<Stored>>();
  readonly secrets = new FakeInformer<SecretObject>();
  readonly configMaps = new FakeInformer<ConfigMapObject>();
  readonly events: RecordedEvent[] = [];
  readonly ctx: KindContext;
  readonly pool: ConnectionPool;
  readonly kube: KubeClient;
  /** Set: every write to a path it matches (e.g. /\/secrets\//, /\/status$/) fails with `error` (the API server refusing, or down). */
  writeFault: { path: RegExp; error: Error } | undefined;
  /** How long a wait for a dependency goes unreported (the operator's is 5 s); set before a kind's first reconcile. */
  dependencyGraceMs = 0;
  private constructor(
    readonly emu: Emulator,
    readonly clock: { ms: number },
  ) {
    this.ctx = {
      informer: <T extends ManagedResource>(names: KindNames) => this.informer(names).as<T>() as unknown as Informer<T>,
      secrets: this.secrets.as<SecretObject>(),
      configMaps: this.configMaps.as<ConfigMapObject>(),
      store: new ObjectStore(this.secrets.as<SecretObject>(), this.configMaps.as<ConfigMapObject>()),
      now: () => new Date(this.clock.ms),
    };
    this.pool = new ConnectionPool({
      connections: this.informer(kindNames.connection).as<Connection>() as unknown as Informer<Connection>,
      secrets: this.secrets.as<SecretObject>(),
      logger: silentLogger(),
      inventoryMaxAgeMs: 60_000,
    });
    this.kube = this.fakeKube();
  }

  static async start(): Promise<World> {
    // One clock for the emulator (expiry) and the controllers (when a renewal is due).
    const clock = { ms: Date.UTC(2030, 0, 1) };
    // strictBodies: a field of the operator's the service would drop unread is an error here.
    const emu = await startEmulator({ apiKey: API_KEY, orgId: ORG, now: () => clock.ms, strictBodies: true });
    const world = new World(emu, clock);
    world.secrets.set({ metadata: { name: "creds", namespace: NS }, data: { apiKey: Buffer.from(API_KEY).toString("base64") } });
    world.apply<Connection>("connections", {
      metadata: { name: "default" },
      spec: { baseURL: emu.baseURL, authURL: emu.authURL, orgId: ORG, credentials: { secretRef: { name: "creds" } } },
    });
    world.setStatus("connections", "default", { observedGeneration: 1, conditions: [{ type: "Ready", status: "True", lastTransitionTime: "2030-01-01T00:00:00Z" }] });
    return world;
  }

  async close(): Promise<void> {
    await this.pool.close();
    await this.emu.close();
  }

  advance(ms: number): void {
    this.clock.ms += ms;
  }

  informer(names: KindNames): FakeInformer<Stored> {
    let inf = this.informers.get(names.plural);
    if (inf === undefined) this.informers.set(names.plural, (inf = new FakeInformer()));
    return inf;
  }

  /** Creates or changes a resource as kubectl apply would (a new generation when the spec changes). */
  apply<R>(plural: string, obj: { metadata: Partial<Stored["metadata"]> & { name: string }; spec: unknown }): R {
    const inf = this.byPlural(plural);
    const existing = inf.get(NS, obj.metadata.name);
    const generation = (existing?.metadata.generation ?? 0) + (existing === undefined || JSON.stringify(existing.spec) !== JSON.stringify(obj.spec) ? 1 : 0);
    const stored: Stored = {
      ...existing,
      ...obj,
      metadata: {
        ...existing?.metadata,
        ...obj.metadata,
        namespace: NS,
        uid: existing?.metadata.uid ?? `uid-${++uids}`,
        generation,
        resourceVersion: String(++uids),
      },
    };
    return inf.set(stored) as R;
  }

  get<R>(plural: string, name: string): R {
    const obj = this.byPlural(plural).get(NS, name);
    if (obj === undefined) throw new Error(`${plural}/${name} not found`);
    return obj as R;
  }

  setStatus(plural: string, name: string, status: Record<string, unknown>): void {
    const obj = this.get<Stored>(plural, name);
    this.byPlural(plural).set({ ...obj, status: { ...(obj.status as object), ...status }, metadata: { ...obj.metadata, resourceVersion: String(++uids) } });
  }

  /** The default Connection's controller reports it not Ready (Ready=False) for its generation. */
  connectionNotReady(reason: string, message: string): void {
    this.setStatus("connections", "default", {
      conditions: [{ type: "Ready", status: "False", reason, message, lastTransitionTime: "2030-01-01T00:00:00Z" }],
    });
  }

  /**
   * Runs `act` (a reconcile), then puts the resource's status back as it was before: the
   * process died before its status write landed. Returns the status that was lost.
   */
  async losingStatus<S>(plural: string, name: string, act: () => Promise<unknown>): Promise<S> {
    const before = this.get<Stored>(plural, name).status;
    await act();
    const obj = this.get<Stored>(plural, name);
    this.byPlural(plural).set({ ...obj, status: before, metadata: { ...obj.metadata, resourceVersion: String(++uids) } });
    return obj.status as S;
  }

  /** The ServiceHandle of the default Connection (real client, real inventories). */
  handle(): ServiceHandle {
    return this.pool.forResource(NS, undefined);
  }

  /**
   * One reconcile by the real ManagedReconciler, as the controller would run it: one
   * reconciler per kind object, as in the operator (it remembers between passes); a new kind
   * object (a test's "second process") gets a new one.
   */
  async reconcile<R extends ManagedResource, P>(kind: ManagedKind<R, P>, name: string): Promise<Result | void> {
    let reconciler = this.reconcilers.get(kind) as ManagedReconciler<R, P> | undefined;
    if (reconciler === undefined) this.reconcilers.set(kind, (reconciler = this.reconcilerFor(kind)));
    return reconciler.reconcile({ namespace: NS, name }, reconcileContext());
  }

  /**
   * The kind `make` builds over this world's context, built once: one operator process, whose
   * reconciler remembers between passes (a kind built anew is a new process).
   */
  kindOf<K extends object>(make: (ctx: KindContext) => K): K {
    let kind = this.kinds.get(make) as K | undefined;
    if (kind === undefined) this.kinds.set(make, (kind = make(this.ctx)));
    return kind;
  }

  private readonly kinds = new Map<unknown, unknown>();

  /**
   * Set: the reconcilers' writes to resources reach the API server (what the next write builds
   * on) but not the cache, until catchUp(): the watch lagging behind, as it does under load.
   */
  cacheLags = false;
  private readonly unseen = new Map<string, Stored>();

  /** The cache receives the writes it lagged behind on. */
  catchUp(): void {
    for (const [key, obj] of this.unseen) this.byPlural(key.split("/")[0] ?? "").set(obj);
    this.unseen.clear();
  }

  /** Forgets what the reconcilers remember between passes, as an operator restart does. */
  restart(): void {
    this.reconcilers = new WeakMap();
  }

  private reconcilers = new WeakMap<object, unknown>();

  private reconcilerFor<R extends ManagedResource, P>(kind: ManagedKind<R, P>): ManagedReconciler<R, P> {
    return new ManagedReconciler<R, P>({
      kind: kind.names,
      informer: this.informer(kind.names).as<R>() as unknown as Informer<R>,
      kube: this.kube,
      events: this.recorder(),
      connector: poolConnector(this.pool, kind),
      externalId: (cr) => kind.externalId(cr),
      claim: kind.claim,
      ...(kind.inputs && { inputs: kind.inputs }),
      status: new StatusWriter(this.kube, () => new Date(this.clock.ms)),
      syncPeriodMs: 600_000,
      dependencyGraceMs: this.dependencyGraceMs,
      needsUpkeep: kind.needsUpkeep ?? false,
      ...(kind.connectionSecret && { secrets: new ConnectionSecretWriter(this.kube, this.secrets.as<SecretObject>()) }),
      ...(kind.keepsAlive && { keepsAlive: kind.keepsAlive }),
      updateCreates: kind.updateCreates ?? false,
      now: () => new Date(this.clock.ms),
    });
  }

  /** Operations the emulator served since the last call (e.g. "vms.renew"), token requests aside. */
  calls(): string[] {
    const ops = this.emu.requests.filter((r) => r.operation !== "token").map((r) => r.operation);
    this.emu.clearRequests();
    return ops;
  }

  /** The calls since the last calls()/writes() that change something in the service. */
  writes(): string[] {
    return this.calls().filter((op) => !/\.(list|get|endpoint)$/.test(op));
  }

  recorder(): EventRecorder {
    return {
      normal: (_o: unknown, reason: string, message: string) => this.events.push({ type: "Normal", reason, message }),
      warning: (_o: unknown, reason: string, message: string) => this.events.push({ type: "Warning", reason, message }),
    } as unknown as EventRecorder;
  }

  private byPlural(plural: string): FakeInformer<Stored> {
    return this.informer({ kind: plural, plural });
  }

  /** The plural and name of an object's path (or its status subresource's). */
  private objectAt(path: string): [plural: string, name: string] {
    const m = /\/namespaces\/([^/]+)\/([^/]+)\/([^/]+)(\/status)?$/.exec(path);
    if (m === null) throw new Error(`unexpected path ${path}`);
    return [m[2] ?? "", m[3] ?? ""];
  }

  /** The object at `path` as the API server has it (the cache may lag: cacheLags). */
  private stored(path: string): Stored {
    const [plural, name] = this.objectAt(path);
    return this.unseen.get(`${plural}/${name}`) ?? this.get<Stored>(plural, name);
  }

  /**
   * The writes the reconcilers make: finalizers (metadata), the status subresource, and
   * connection Secrets (created, merged into, deleted).
   */
  private fakeKube(): KubeClient {
    const failing = (path: string) => {
      if (this.writeFault?.path.test(path)) throw this.writeFault.error;
    };
    const secret = (path: string, write: (name: string) => SecretObject) => {
      const name = /\/secrets\/([^/]+)$/.exec(path)?.[1];
      return this.secrets.set(write(name ?? ""));
    };
    // A write's gate (withWriteGate) is asked before it is sent, as the KubeClient does.
    type WriteOptions = { gate?: () => void } | undefined;
    const create = async (path: string, body: SecretObject, opts?: WriteOptions) => {
      opts?.gate?.();
      failing(path);
      return secret(path, () => body);
    };
    type MergePatch = { data?: Record<string, string>; metadata?: { resourceVersion?: string; finalizers?: string[]; annotations?: Record<string, string | null> }; status?: Record<string, unknown> };
    type JsonPatch = Array<{ op: "test" | "remove"; path: string; value?: unknown }>;
    const patch = async (path: string, patchBody: MergePatch | JsonPatch, _type?: string, opts?: WriteOptions) => {
      opts?.gate?.();
      failing(path);
      // A JSON patch of the finalizers (removeFinalizer: test the entry, then remove it), as a
      // merge patch of what it leaves.
      const body: MergePatch = Array.isArray(patchBody) ? { metadata: { finalizers: finalizersAfter(this.stored(path), patchBody) } } : patchBody;
      if (path.startsWith(`${secretsPath(NS)}/`)) {
        return secret(path, (name) => {
          const obj = this.secrets.get(NS, name);
          if (obj === undefined) throw new Error(`secret ${name} not found`);
          return { ...obj, data: { ...obj.data, ...body.data } };
        });
      }
      const [plural, name] = this.objectAt(path);
      const obj = this.stored(path);
      // A resourceVersion in the patch is a precondition, as the API server holds it.
      const expected = body.metadata?.resourceVersion;
      if (expected !== undefined && expected !== obj.metadata.resourceVersion) {
        throw new KubeApiError({ status: 409, reason: "Conflict", message: `the object has been modified (${expected} is not ${obj.metadata.resourceVersion ?? "?"})`, method: "PATCH", path });
      }
      const next: Stored = { ...obj, metadata: { ...obj.metadata, resourceVersion: String(++uids) } };
      if (body.status !== undefined) next.status = mergeKeys(obj.status as Record<string, unknown> | undefined, body.status);
      if (body.metadata?.finalizers !== undefined) next.metadata.finalizers = body.metadata.finalizers;
      if (body.metadata?.annotations !== undefined) next.metadata.annotations = mergeKeys(obj.metadata.annotations, body.metadata.annotations) as Record<string, string>;
      if (this.cacheLags) {
        // The API server has it; the cache gets it at catchUp(). Later writes build on it.
        this.unseen.set(`${plural}/${name}`, next);
        return next;
      }
      return this.byPlural(plural).set(next);
    };
    const remove = async (path: string, opts?: WriteOptions) => {
      opts?.gate?.();
      failing(path);
      const name = /\/secrets\/([^/]+)$/.exec(path)?.[1];
      if (name === undefined) throw new Error(`unexpected delete of ${path}`);
      this.secrets.delete(NS, name);
    };
    return { patch, create, delete: remove } as unknown as KubeClient;
  }
}

/** The finalizers a JSON patch of test and remove ops on /metadata/finalizers/<i> leaves. */
function finalizersAfter(obj: Stored, ops: Array<{ op: "test" | "remove"; path: string; value?: unknown }>): string[] {
  const finalizers = [...(obj.metadata.finalizers ?? [])];
  for (const op of ops) {
    const at = Number(/^\/metadata\/finalizers\/(\d+)$/.exec(op.path)?.[1]);
    if (Number.isNaN(at)) throw new Error(`unexpected JSON patch path ${op.path}`);
    if (op.op === "test" && finalizers[at] !== op.value) throw new Error(`JSON patch test failed at ${op.path}: ${JSON.stringify(finalizers)} ${JSON.stringify(op.value)}`);
    if (op.op === "remove") finalizers.splice(at, 1);
  }
  return finalizers;
}

/** A JSON merge patch (RFC 7386), as the API server applies one: nested objects merged key by key, null removes a key. */
function mergeKeys(base: Record<string, unknown> | undefined, patch: Record<string, unknown>): Record<string, unknown> {
  const merged: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete merged[k];
    else if (isMapping(v) && isMapping(merged[k])) merged[k] = mergeKeys(merged[k], v);
    else merged[k] = v;
  }
  return merged;
}

function isMapping(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** A Secret of NS holding `data` as text (stored base64, as the API server serves it). */
export function secretOf(name: string, data: Record<string, string>): SecretObject {
  return { metadata: { name, namespace: NS }, data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString("base64")])) };
}

export function reconcileContext(): ReconcileContext {
  return { log: silentLogger(), reconcileId: "r", signal: new AbortController().signal, priority: false, retries: 0 };
}

/** A condition of a resource's status. */
export function condition(obj: unknown, type: string): { status: string; reason?: string; message?: string } | undefined {
  const conditions = (obj as { status?: { conditions?: Array<{ type: string; status: string; reason?: string; message?: string }> } }).status?.conditions;
  return conditions?.find((c) => c.type === type);
}
