// `agent-operator plan`: what the operator would do in the service if the manifests were
// applied now. The planned object of each resource is the manifest over the live one (metadata
// and status from the cluster, spec from the manifest), and the kind's own ExternalClient
// observes it: observe only reads (one list per collection, GETs), so the plan writes nothing,
// to the cluster or to the service. Nothing here calls create, update, cleanup or delete.
import { Annotations, ConditionType, DEFAULT_CONNECTION, GROUP, MARKER_KEY, VERSION, kindNames, type KindNames } from "../api/names.js";
import { allKinds, type Agent, type AgentDeployment, type Connection, type Sandbox, type Skill } from "../api/index.js";
import { agentDeployments, deploymentExternalId, type DeploymentPlan } from "../controllers/agent-deployment.js";
import { agentExternalId, agentNamed, agentOrgId, agentRevision, agents, imagePullSecretOf, type AgentPlan } from "../controllers/agent.js";
import { ConnectionPool, type ServiceHandle } from "../controllers/connection-pool.js";
import type { KindContext, ManagedKind } from "../controllers/kind.js";
import { ObjectStore, type ConfigMapObject } from "../controllers/object-store.js";
import { desiredAllocation, sandboxExternalId, sandboxes, type SandboxPlan } from "../controllers/sandbox.js";
import { skillExternalId, skillName, skillNamed, skills, waitForSkills, type SkillPlan } from "../controllers/skill.js";
import type { SecretObject } from "../managed/connection-secret.js";
import { NotReadyError, StalledError, classify } from "../managed/errors.js";
import { managementOf } from "../managed/management-policies.js";
import { isPaused } from "../managed/reconciler.js";
import type { ManagedResource, Observation } from "../managed/external.js";
import type { Informer } from "../runtime/informer.js";
import { KubeApiError, resourcePath, type KubeClient } from "../runtime/kube-client.js";
import { silentLogger } from "../runtime/logging.js";
import { change, diffFields, sameJSON } from "./diff.js";
import { ruleProblems, withDefaults } from "./admission.js";
import { ManifestError, isPlanned, type ManifestObject } from "./manifests.js";
import { SENSITIVE, summarize, type Change, type PlanResult, type ResourcePlan } from "./model.js";
import type { LabelMatcher } from "./selector.js";

/** The annotation `kubectl apply` leaves; `--prune` only deletes objects that carry it (as kubectl). */
export const LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration";

/** What the planner reads from the cluster: only GETs (lists, discovery). */
export interface ClusterReader {
  list<T>(path: string): Promise<T[]>;
  /**
   * Whether objects of the kind live in a namespace, as the API server's discovery says;
   * undefined when it does not know the kind (or cannot say).
   */
  namespaced?(apiVersion: string, kind: string): Promise<boolean | undefined>;
}

/** An API server's discovery answer for one group version (GET /api/v1, /apis/<group>/<version>). */
interface APIResourceList {
  resources?: Array<{ name: string; kind: string; namespaced: boolean }>;
}

export function kubeReader(kube: KubeClient): ClusterReader {
  const discovered = new Map<string, Promise<APIResourceList | undefined>>();
  return {
    async namespaced(apiVersion: string, kind: string): Promise<boolean | undefined> {
      let list = discovered.get(apiVersion);
      if (list === undefined) {
        // Not found: no such group version installed (yet). Any other failure ends the plan, as
        // a failed list does: guessing could list a namespace's resources as pruned.
        list = kube.get<APIResourceList>(apiVersion.includes("/") ? `/apis/${apiVersion}` : `/api/${apiVersion}`).catch((err: unknown) => {
          if (err instanceof KubeApiError && err.status === 404) return undefined;
          throw err;
        });
        discovered.set(apiVersion, list);
      }
      // Subresources (pods/status) name their parent's kind: only top-level resources count.
      return (await list)?.resources?.find((r) => r.kind === kind && !r.name.includes("/"))?.namespaced;
    },
    async list<T>(path: string): Promise<T[]> {
      const items: T[] = [];
      let cont: string | undefined;
      do {
        const page = await kube.list<T>(path, { limit: 500, continue: cont });
        items.push(...page.items);
        cont = page.metadata.continue || undefined;
      } while (cont !== undefined);
      return items;
    },
  };
}

export interface PlanOptions {
  prune: boolean;
  /** -l: only manifests (and, with --prune, live objects) whose labels match. */
  selector?: LabelMatcher;
  now?: () => Date;
}

type Obj = ManagedResource & { apiVersion?: string; kind?: string };

/** The informer surface the kinds read (get, list, indices), over a fixed set of objects. */
class StaticInformer<T extends { metadata: { name?: string; namespace?: string } }> {
  private readonly objects = new Map<string, T>();
  private readonly indexers = new Map<string, (obj: T) => string[]>();

  set(obj: T): void {
    this.objects.set(`${obj.metadata.namespace ?? ""}/${obj.metadata.name ?? ""}`, obj);
  }

  get(namespace: string | undefined, name: string): T | undefined {
    return this.objects.get(`${namespace ?? ""}/${name}`);
  }

  list(namespace?: string): T[] {
    return [...this.objects.values()].filter((o) => namespace === undefined || o.metadata.namespace === namespace);
  }

  hasIndex(name: string): boolean {
    return this.indexers.has(name);
  }

  addIndex(name: string, fn: (obj: T) => string[]): void {
    this.indexers.set(name, fn);
  }

  byIndex(name: string, value: string): T[] {
    const fn = this.indexers.get(name);
    return fn === undefined ? [] : this.list().filter((o) => fn(o).includes(value));
  }

  on(): () => void {
    return () => undefined;
  }

  as<U extends T>(): Informer<U & { metadata: { name?: string; namespace?: string } }> {
    return this as unknown as Informer<U>;
  }
}

/** Common cluster-scoped kinds: they touch no namespace (when discovery cannot say). */
const CLUSTER_SCOPED = new Set(["Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PersistentVolume", "StorageClass", "PriorityClass", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"]);

/** Kinds the planner knows to be namespaced: ours, and what they read. */
const NAMESPACED = new Set([...allKinds.map((k) => `${GROUP}/${VERSION}/${k.kind}`), "v1/Secret", "v1/ConfigMap"]);

/**
 * The kinds among the manifests whose objects live in no namespace, as discovery says (the
 * parser gave every object the default namespace; a cluster-scoped one must not make `--prune`
 * list that namespace's objects as dropped).
 */
async function clusterScopedKinds(reader: ClusterReader, manifests: ManifestObject[], all: ManifestObject[] = manifests): Promise<Set<string>> {
  const out = new Set<string>();
  const defined = scopesDefined(all);
  const kinds = new Map(manifests.map((m) => [`${m.apiVersion}/${m.kind}`, m] as const));
  for (const [key, m] of kinds) {
    if (NAMESPACED.has(key)) continue;
    const namespaced = defined.get(key) ?? (await reader.namespaced?.(m.apiVersion, m.kind)) ?? !CLUSTER_SCOPED.has(m.kind);
    if (!namespaced) out.add(key);
  }
  return out;
}

/** `<group>/<version>/<kind>` -> namespaced, for the CustomResourceDefinitions among the manifests (not installed yet, perhaps). */
function scopesDefined(manifests: ManifestObject[]): Map<string, boolean> {
  const out = new Map<string, boolean>();
  for (const m of manifests) {
    if (m.kind !== "CustomResourceDefinition" || !m.apiVersion.startsWith("apiextensions.k8s.io/")) continue;
    const spec = m.spec as { group?: unknown; scope?: unknown; names?: { kind?: unknown }; versions?: Array<{ name?: unknown }> } | undefined;
    if (typeof spec?.group !== "string" || typeof spec.names?.kind !== "string" || !Array.isArray(spec.versions)) continue;
    for (const v of spec.versions) if (typeof v?.name === "string") out.set(`${spec.group}/${v.name}/${spec.names.kind}`, spec.scope !== "Cluster");
  }
  return out;
}

const ORDER = [kindNames.connection, kindNames.skill, kindNames.agent, kindNames.agentDeployment, kindNames.sandbox, kindNames.sandboxRun];

const collection = (names: KindNames, namespace: string) => resourcePath({ group: GROUP, version: VERSION, plural: names.plural, namespace });

/** The cluster as the plan reads it: our kinds, Secrets and ConfigMaps of the namespaces concerned. */
interface Live {
  byKind: Map<string, Obj[]>;
  secrets: SecretObject[];
  configMaps: ConfigMapObject[];
}

/**
 * `defined`: the kinds whose CustomResourceDefinitions are among the manifests (scopesDefined).
 * A kind the cluster does not serve has no objects there yet when the manifests install its
 * CRD (a first install planned whole); otherwise applying fails ("no matches for kind"), and so
 * does the plan, saying how to install the CRDs rather than the API server's bare 404.
 */
async function readCluster(reader: ClusterReader, namespaces: string[], defined: Map<string, boolean>): Promise<Live> {
  const live: Live = { byKind: new Map(), secrets: [], configMaps: [] };
  for (const ns of namespaces) {
    for (const names of ORDER) {
      const path = collection(names, ns);
      const items = await reader.list<Obj>(path).catch((err: unknown) => {
        if (!(err instanceof KubeApiError) || err.status !== 404) throw err;
        if (defined.has(`${GROUP}/${VERSION}/${names.kind}`)) return [];
        throw new Error(
          `the cluster serves no ${names.plural}.${GROUP} (GET ${path}: HTTP 404): the ${GROUP} CustomResourceDefinitions are not installed (or are older than this agent-operator): ` +
            "install the operator first (kubectl apply -k manifests/ from its repository, or its Helm chart: docs/install.md), or plan its CRDs (crds/) with the manifests",
          { cause: err },
        );
      });
      live.byKind.set(names.kind, [...(live.byKind.get(names.kind) ?? []), ...items]);
    }
    live.secrets.push(...(await reader.list<SecretObject>(resourcePath({ version: "v1", plural: "secrets", namespace: ns }))));
    live.configMaps.push(...(await reader.list<ConfigMapObject>(resourcePath({ version: "v1", plural: "configmaps", namespace: ns }))));
  }
  return live;
}

function isReady(obj: { metadata: { generation?: number }; status?: { observedGeneration?: number; conditions?: Array<{ type: string; status: string }> } }): boolean {
  const ready = obj.status?.conditions?.find((c) => c.type === ConditionType.Ready);
  return ready?.status === "True" && obj.status?.observedGeneration === obj.metadata.generation;
}

/** The manifest over the live object: metadata and status from the cluster, spec from the manifest. */
function plannedObject(m: ManifestObject, live: Obj | undefined): Obj {
  const spec = withDefaults(m.kind, m.spec);
  if (live === undefined) {
    return {
      apiVersion: m.apiVersion,
      kind: m.kind,
      metadata: {
        name: m.metadata.name,
        namespace: m.metadata.namespace,
        uid: `planned-${m.metadata.namespace}-${m.metadata.name}`,
        generation: 1,
        ...(m.metadata.labels ? { labels: m.metadata.labels } : {}),
        ...(m.metadata.annotations ? { annotations: m.metadata.annotations } : {}),
      },
      spec,
    } as Obj;
  }
  const changed = !sameJSON(live.spec, spec);
  // kubectl apply sets the manifest's annotations (others stay); only ours matter to observe.
  const annotations = { ...live.metadata.annotations, ...m.metadata.annotations };
  for (const key of Object.values(Annotations)) {
    if (m.metadata.annotations?.[key] === undefined && live.metadata.annotations?.[key] !== undefined) {
      // Dropped from the manifest: apply removes an annotation it set before.
      if (live.metadata.annotations[LAST_APPLIED]?.includes(key) || appliedFields(live).some((f) => f["f:metadata"]?.["f:annotations"]?.[`f:${key}`] !== undefined)) {
        delete annotations[key];
      }
    }
  }
  return {
    ...live,
    // List items carry no apiVersion and kind.
    apiVersion: m.apiVersion,
    kind: m.kind,
    metadata: { ...live.metadata, annotations, generation: (live.metadata.generation ?? 1) + (changed ? 1 : 0) },
    spec,
  } as Obj;
}

function secretOf(m: ManifestObject): SecretObject {
  const data: Record<string, string> = { ...m.data };
  for (const [k, v] of Object.entries(m.stringData ?? {})) data[k] = Buffer.from(v, "utf8").toString("base64");
  return { metadata: { name: m.metadata.name, namespace: m.metadata.namespace }, data } as SecretObject;
}

export async function plan(reader: ClusterReader, manifests: ManifestObject[], opts: PlanOptions): Promise<PlanResult> {
  const now = opts.now ?? (() => new Date());
  // -n given: an object that names another namespace, of a kind the parser could not tell the
  // scope of, is refused as kubectl apply -n refuses it, unless the kind is cluster-scoped.
  const foreign = manifests.filter((m) => m.namespaceError !== undefined);
  if (foreign.length > 0) {
    const scoped = await clusterScopedKinds(reader, foreign, manifests);
    const refused = foreign.find((m) => !scoped.has(`${m.apiVersion}/${m.kind}`));
    if (refused?.namespaceError !== undefined) throw new ManifestError(refused.namespaceError);
  }
  const selected = opts.selector === undefined ? manifests : manifests.filter((m) => opts.selector?.(m.metadata.labels));
  // The namespaces the manifests touch (as kubectl apply --prune: those of namespaced objects).
  const clusterScoped = await clusterScopedKinds(reader, selected, manifests);
  const namespaces = [...new Set(selected.filter((m) => !clusterScoped.has(`${m.apiVersion}/${m.kind}`)).map((m) => m.metadata.namespace))].sort();
  const live = await readCluster(reader, namespaces, scopesDefined(manifests));
  const liveOf = (kind: string, ns: string, name: string) =>
    live.byKind.get(kind)?.find((o) => o.metadata.namespace === ns && o.metadata.name === name);
  const planned = selected.filter(isPlanned);
  // The spec's CEL rules, where the API server runs them: a new object, or a spec that changes
  // (an unchanged one is let through by its ratcheting). One it refuses is a bad manifest, as
  // one the schema refuses is, not a create the plan cannot keep.
  for (const m of planned) {
    const l = liveOf(m.kind, m.metadata.namespace, m.metadata.name);
    if (l !== undefined && sameJSON(withDefaults(m.kind, l.spec), withDefaults(m.kind, m.spec))) continue;
    const problems = ruleProblems(m.kind, m.spec, l?.spec);
    if (problems.length > 0) throw new ManifestError(`${m.source}: ${m.kind} "${m.metadata.name}": the API server would refuse it: ${problems.join("; ")}`);
  }
  const inManifests = (kind: string, ns: string, name: string) => planned.find((m) => m.kind === kind && m.metadata.namespace === ns && m.metadata.name === name);

  // What the kinds read, as it will be once the manifests are applied.
  const connections = new StaticInformer<Connection>();
  for (const c of live.byKind.get("Connection") ?? []) connections.set(c as unknown as Connection);
  const liveSecrets = new StaticInformer<SecretObject>();
  const secrets = new StaticInformer<SecretObject>();
  for (const s of live.secrets) {
    liveSecrets.set(s);
    secrets.set(s);
  }
  const secretChanges: Deps["secrets"] = {
    differs: (ns, name) => !sameJSON(liveSecrets.get(ns, name)?.data ?? null, secrets.get(ns, name)?.data ?? null),
    existed: (ns, name) => liveSecrets.get(ns, name) !== undefined,
  };
  const configMaps = new StaticInformer<ConfigMapObject>();
  for (const c of live.configMaps) configMaps.set(c);
  for (const m of selected) {
    if (m.apiVersion === "v1" && m.kind === "Secret") secrets.set(secretOf(m));
    if (m.apiVersion === "v1" && m.kind === "ConfigMap") configMaps.set({ metadata: { name: m.metadata.name, namespace: m.metadata.namespace }, data: m.data ?? {} });
  }
  // Skills and Agents as the operator will have them: live ones as they are; one only in the
  // manifests without a status (no id yet). Each is planned before its dependants, and once it
  // is, one the operator brings in line with its spec (created, updated, or up to date: not
  // paused, not held back by its policies, not unknown) is given the status it will have then:
  // Ready, a new one with an id known only then, an Agent with its new revision. Dependants are
  // planned "after" them.
  const skillInformer = new StaticInformer<Skill>();
  const agentInformer = new StaticInformer<Agent>();
  const syncedStatus = (obj: Obj, extra: Record<string, unknown>) => ({
    ...obj.status,
    ...extra,
    observedGeneration: obj.metadata.generation,
    conditions: [{ type: ConditionType.Ready, status: "True", reason: "Available", lastTransitionTime: now().toISOString() }],
  });
  for (const s of live.byKind.get("Skill") ?? []) skillInformer.set(s as unknown as Skill);
  for (const a of live.byKind.get("Agent") ?? []) agentInformer.set(a as unknown as Agent);
  for (const m of planned) {
    if (liveOf(m.kind, m.metadata.namespace, m.metadata.name) !== undefined) continue;
    const { status: _none, ...obj } = plannedObject(m, undefined);
    if (m.kind === "Skill") skillInformer.set(obj as unknown as Skill);
    if (m.kind === "Agent") agentInformer.set(obj as unknown as Agent);
  }
  const synced = (obj: Obj, l: Obj | undefined) => {
    if (obj.kind === "Skill") skillInformer.set({ ...obj, status: syncedStatus(obj, { skillName: skillName(obj as unknown as Skill) }) } as unknown as Skill);
    if (obj.kind === "Agent") {
      const revision = agentRevision(obj as unknown as Agent);
      const agentId = (l?.status as { agentId?: string } | undefined)?.agentId ?? `(id of Agent ${obj.metadata.name}, known once created)`;
      agentInformer.set({ ...obj, status: syncedStatus(obj, { agentId, revision }) } as unknown as Agent);
    }
  };

  const ctx: KindContext = {
    informer: <T extends ManagedResource>(names: KindNames) =>
      (names.kind === "Skill" ? skillInformer : names.kind === "Agent" ? agentInformer : new StaticInformer()) as unknown as Informer<T>,
    secrets: secrets.as<SecretObject>(),
    configMaps: configMaps.as<ConfigMapObject>(),
    store: new ObjectStore(secrets.as<SecretObject>(), configMaps.as<ConfigMapObject>()),
    now,
  };
  const pool = new ConnectionPool({
    connections: connections.as<Connection>(),
    // The credentials the operator uses now: the cluster's, not the manifests'.
    secrets: liveSecrets.as<SecretObject>(),
    logger: silentLogger(),
    // One read of each collection for the whole plan, a failed one included: against a slow or
    // black-holed service, a plan of many resources would otherwise pay the client's full
    // retries once per resource.
    inventoryMaxAgeMs: 3_600_000,
    inventoryKeepsFailure: true,
  });
  const kinds = {
    Skill: skills(ctx),
    Agent: agents(ctx),
    AgentDeployment: agentDeployments(ctx),
    Sandbox: sandboxes(ctx),
  } as const;

  const out: ResourcePlan[] = [];
  try {
    const sorted = [...planned].sort(
      (a, b) =>
        ORDER.findIndex((k) => k.kind === a.kind) - ORDER.findIndex((k) => k.kind === b.kind) ||
        a.metadata.namespace.localeCompare(b.metadata.namespace) ||
        a.metadata.name.localeCompare(b.metadata.name),
    );
    for (const m of sorted) {
      const l = liveOf(m.kind, m.metadata.namespace, m.metadata.name);
      const base: ResourcePlan = { kind: m.kind, namespace: m.metadata.namespace, name: m.metadata.name, action: "none", changes: [], notes: [], source: m.source };
      if (l?.metadata.deletionTimestamp !== undefined) {
        // Being deleted (held by a pause, a missing Connection, another finalizer): the operator
        // finishes the deletion whatever the manifest says, and an apply does not bring it back.
        const r = { ...base, action: "delete" as const, ...deletion(m.kind, plannedObject(m, l)) };
        r.notes.push(`it is being deleted (metadata.deletionTimestamp ${l.metadata.deletionTimestamp}): applying does not stop that; apply again once it is gone to have it made anew`);
        out.push(r);
        continue;
      }
      if (m.kind === "Connection") {
        out.push(planConnection(base, m, l));
        continue;
      }
      if (m.kind === kindNames.sandboxRun.kind) {
        out.push(planRun(base, m, l));
        continue;
      }
      const obj = plannedObject(m, l);
      const kind = kinds[m.kind as keyof typeof kinds] as unknown as ManagedKind<Obj, unknown>;
      const planOf = (k: string, ns: string, name: string) => out.find((r) => r.kind === k && r.namespace === ns && r.name === name);
      const actionOf = (k: string, ns: string, name: string) => planOf(k, ns, name)?.action;
      const createWaits = (k: string, ns: string, name: string) => planOf(k, ns, name)?.notes.find((n) => n.startsWith("then waits: ") || n.startsWith("then stalls: "));
      const { plan: r, inSync } = await planManaged(base, obj, l, kind, { pool, store: ctx.store, secrets: secretChanges, inManifests, agentInformer, skillInformer, liveOf, actionOf, createWaits });
      if (inSync) synced(obj, l);
      out.push(r);
    }
    if (opts.prune) out.push(...pruned(live, planned, namespaces, opts.selector));
  } finally {
    await pool.close();
  }
  return summarize(out);
}

function planConnection(base: ResourcePlan, m: ManifestObject, l: Obj | undefined): ResourcePlan {
  const notes = ["a Connection has no object in the service: it says how its namespace reaches the service"];
  if (l === undefined) return { ...base, action: "create", changes: diffFields(undefined, withDefaults(m.kind, m.spec), "spec"), notes };
  const changes = diffFields(withDefaults(m.kind, l.spec), withDefaults(m.kind, m.spec), "spec");
  return { ...base, action: changes.length > 0 ? "update" : "none", changes, notes: changes.length > 0 ? notes : [] };
}

/**
 * A SandboxRun is a Job-like record, not a service object to keep in line: applying a new one
 * runs its steps; its spec is immutable, so a changed one is refused by the API server.
 */
function planRun(base: ResourcePlan, m: ManifestObject, l: Obj | undefined): ResourcePlan {
  const wanted = withDefaults(m.kind, m.spec);
  if (l === undefined) {
    return { ...base, action: "create", changes: diffFields(undefined, wanted, "spec"), notes: ["runs its steps in a sandbox VM once applied"] };
  }
  const changes = diffFields(withDefaults(m.kind, l.spec), wanted, "spec");
  if (changes.length === 0) return { ...base, action: "none", changes: [], notes: [] };
  return {
    ...base,
    action: "unknown",
    reason: "a SandboxRun's spec is immutable: the API server refuses this change; delete the run and apply it again to run it anew",
    changes,
    notes: [],
  };
}

interface Deps {
  pool: ConnectionPool;
  store: ObjectStore;
  /** Secrets as the manifests leave them, next to the cluster's now. */
  secrets: {
    /** The manifests change its data (or bring it). */
    differs(ns: string, name: string): boolean;
    /** It is in the cluster now. */
    existed(ns: string, name: string): boolean;
  };
  inManifests(kind: string, ns: string, name: string): ManifestObject | undefined;
  agentInformer: StaticInformer<Agent>;
  skillInformer: StaticInformer<Skill>;
  liveOf(kind: string, ns: string, name: string): Obj | undefined;
  /** The action planned for a resource planned earlier (Skills and Agents come first). */
  actionOf(kind: string, ns: string, name: string): ResourcePlan["action"] | undefined;
  /** A planned create's "then waits: ..." (or "then stalls: ...") note, if it has one. */
  createWaits(kind: string, ns: string, name: string): string | undefined;
}

/** What observeOne saw besides the plan, for planManaged. */
interface Seen {
  upToDate: boolean;
  /** The create would wait (or stall). */
  createWaits: boolean;
  /** Leftover service objects the operator gives back (none when it gives back nothing). */
  leftovers: string[];
}

/**
 * The plan of one managed resource, and whether the operator brings its service object in line
 * with its spec (created, updated, or found up to date; not paused, not held back by its
 * policies, not unknown): then its status says so (Ready, an Agent's new revision).
 */
async function planManaged(base: ResourcePlan, cr: Obj, l: Obj | undefined, kind: ManagedKind<Obj, unknown>, deps: Deps): Promise<{ plan: ResourcePlan; inSync: boolean }> {
  // The API server defaults stored objects as it reads them, so a field added to the CRD since
  // (managementPolicies) is on the live side too.
  const specChanges = diffFields(l === undefined ? undefined : withDefaults(cr.kind, l.spec), cr.spec, "spec");
  const notes = dependencyNotes(cr, deps);
  const paused = isPaused(cr);
  const seen: Seen = { upToDate: false, createWaits: false, leftovers: [] };
  let result = withinPolicies(cr, await observeOne(base, cr, l, kind, deps, specChanges, notes, seen));
  if (paused && result.action !== "none") {
    const plan: ResourcePlan = {
      ...result,
      action: "none",
      reason: `paused (${Annotations.paused}: "true"): the operator makes no change in the service; once resumed it ${result.action === "unknown" ? "cannot be planned" : `would ${result.action}`}${result.reason ? `: ${result.reason}` : ""}`,
    };
    return { plan: specOnly(plan, specChanges), inSync: false };
  }
  // A create that would wait (or stall) leaves its dependants waiting too.
  const inSync = (result.action === "create" && !seen.createWaits) || result.action === "update" || (result.action === "none" && seen.upToDate && !paused);
  if (seen.leftovers.length > 0) {
    // Given back first, whatever else is done: a change in the service even when nothing else is.
    const giveBack = `gives back ${seen.leftovers.length} leftover service object(s) carrying its marker: ${seen.leftovers.join(", ")}`;
    if (result.action === "none") {
      // The give-back is the change: fields the plan found but does not make (drift its
      // policies leave alone) are not listed as if they were updated.
      result = { ...result, action: "update", reason: result.reason === undefined ? giveBack : `${giveBack}; ${result.reason}`, changes: [] };
    } else {
      result.notes.push(giveBack);
    }
  }
  return { plan: specOnly(result, specChanges), inSync };
}

/**
 * Nothing to do in the service, but the manifest changes the resource (a new TTL, keepAlive
 * false, a deletion policy; a paused one's or a held-back one's new spec): applying changes
 * something all the same, so it is shown (the spec's changes) and counts as a change
 * (specChanged: exit code 2).
 */
function specOnly(plan: ResourcePlan, specChanges: Change[]): ResourcePlan {
  if (plan.action !== "none" || specChanges.length === 0) return plan;
  return {
    ...plan,
    reason: plan.reason ?? "only the resource changes: nothing changes in the service now",
    changes: plan.changes.length > 0 ? plan.changes : specChanges,
    specChanged: true,
  };
}

async function observeOne(
  base: ResourcePlan,
  cr: Obj,
  l: Obj | undefined,
  kind: ManagedKind<Obj, unknown>,
  deps: Deps,
  specChanges: Change[],
  notes: string[],
  seen: Seen,
): Promise<ResourcePlan> {
  const { namespace } = cr.metadata;
  const connection = cr.spec.connectionRef?.name ?? DEFAULT_CONNECTION;
  let handle: ServiceHandle;
  try {
    handle = deps.pool.forResource(namespace, cr.spec.connectionRef);
  } catch (err) {
    const f = classify(err);
    const inManifests = deps.inManifests("Connection", namespace, connection) !== undefined;
    const inCluster = deps.liveOf("Connection", namespace, connection) !== undefined;
    const pending = inManifests && !inCluster;
    const why = pending ? `Connection "${connection}" is only in the manifests: the service can be read once it is applied and Ready` : `${f.reason}: ${f.message}`;
    if (l === undefined && !inManifests && !inCluster) {
      const note = `waits for Connection "${connection}", which is neither in the cluster nor in the manifests; not checked against the service`;
      return { ...base, action: "create", changes: specChanges, notes: [...notes, note] };
    }
    if (l === undefined) {
      return { ...base, action: "create", changes: specChanges, notes: [...notes, `after Connection "${connection}" is Ready; not checked against the service (${why})`] };
    }
    return { ...base, action: "unknown", reason: why, changes: specChanges, notes };
  }
  const client = kind.client(handle);
  let observed: Observation<unknown, unknown>;
  try {
    observed = await client.observe(cr);
  } catch (err) {
    const f = classify(err);
    if (err instanceof NotReadyError && l === undefined) {
      return { ...base, action: "create", changes: specChanges, notes: [...notes, `then waits: ${f.reason}: ${f.message}`] };
    }
    return { ...base, action: "unknown", reason: `${f.reason}: ${f.message}`, changes: specChanges, notes };
  }
  const serviceId = kind.externalId(cr) ?? idOf(cr.kind, observed);
  const withId = serviceId !== undefined ? { serviceId } : {};
  if (!observed.exists) {
    const adopting = cr.metadata.annotations?.[Annotations.externalId];
    if (adopting !== undefined) {
      return { ...base, action: "unknown", reason: `ExternalNotFound: annotation ${Annotations.externalId}: "${adopting}" names no object in the service`, changes: specChanges, notes };
    }
    if (l !== undefined && serviceId !== undefined) notes.push(`its service object ${serviceId} is gone: a new one is created`);
    if (cr.kind === "Agent") {
      const name = (cr.spec as { name?: string }).name ?? cr.metadata.name;
      // As the operator tells a name taken (adoptAfterConflict): in the org the create is made in
      // (without one, the create stalls: beforeCreate says so).
      const orgId = (cr.spec as { orgId?: string }).orgId || handle.connection.spec.orgId;
      const other = orgId ? agentNamed(handle.agents.values(), name, orgId) : undefined;
      if (other !== undefined) notes.push(`an agent named "${name}" (${other.id}) exists already and is not this resource's: the create will be refused (NameTaken)`);
    }
    const waits = beforeCreate(cr, handle, deps);
    if (waits !== undefined) notes.push(waits);
    seen.createWaits = waits !== undefined;
    return { ...base, action: "create", changes: specChanges, notes };
  }
  // As the reconciler: only what the resource may have created is its to give back, and a
  // paused one gives back nothing.
  if (managementOf(cr.spec).create && !isPaused(cr)) seen.leftovers = observed.leftovers ?? [];
  if (observed.unconfirmed !== undefined) {
    // The object is kept (a VM renewed), but whether it is what the spec asks for cannot be
    // told (a Secret or skill it needs is missing, the service's list cannot be read): the
    // operator reports it Reconciling, not Ready; the plan cannot promise anything either.
    if ((observed.plan as { action?: string } | undefined)?.action === "renew") notes.push("its VM's TTL renewal is due (routine)");
    const { reason, message } = observed.unconfirmed;
    return { ...base, action: "unknown", ...withId, reason: `${reason}: ${message}`, changes: specChanges, notes };
  }
  if (observed.upToDate || observed.notReady !== undefined) {
    if (observed.notReady !== undefined) notes.push(`${observed.notReady.reason}: ${observed.notReady.message}`);
    // Unusable and different from the spec, without the Update that would mend it: the
    // differences are reported (Drifted), as the reconciler does; withinPolicies says so.
    if (!observed.upToDate && !managementOf(cr.spec).update) return { ...base, ...withId, ...actionOf(cr, observed, handle, specChanges, notes, deps.secrets) };
    const p = observed.plan as { action?: string } | undefined;
    if (p?.action === "renew") notes.push("its VM's TTL renewal is due (routine)");
    seen.upToDate = observed.upToDate;
    return { ...base, action: "none", ...withId, notes };
  }
  return { ...base, ...withId, ...actionOf(cr, observed, handle, specChanges, notes, deps.secrets) };
}

/**
 * What the kind's create checks before it sends anything, as a note: "then waits: <reason>"
 * for what it waits for (a Sandbox's envFrom Secret or skill, an Agent's image pull Secret),
 * "then stalls: <reason>" for what it refuses (an Agent without an org); undefined when the
 * create would go ahead.
 */
function beforeCreate(cr: Obj, handle: ServiceHandle, deps: Deps): string | undefined {
  try {
    if (cr.kind === "Sandbox") desiredAllocation(cr as unknown as Sandbox, handle, { store: deps.store, skills: deps.skillInformer.as<Skill>() });
    if (cr.kind === "Agent") agentCreateChecks(cr as unknown as Agent, handle, deps.store);
    if (cr.kind === "AgentDeployment") waitForSkills(deps.skillInformer.as<Skill>(), cr, (cr as unknown as AgentDeployment).spec.skills ?? []);
    return undefined;
  } catch (err) {
    if (err instanceof NotReadyError) return `then waits: ${err.reason}: ${err.message}`;
    if (err instanceof StalledError) return `then stalls: ${err.reason}: ${err.message}`;
    throw err;
  }
}

/** The checks of an Agent's create (AgentClient.create's own): an org, and the image pull Secret with its keys set. */
function agentCreateChecks(cr: Agent, handle: ServiceHandle, store: ObjectStore): void {
  agentOrgId(cr, handle.connection);
  imagePullSecretOf(cr, store);
}

/**
 * What spec.managementPolicies let through of the planned action (src/managed/reconciler.ts
 * does the same): no create without Create, no update or replace without Update.
 */
function withinPolicies(cr: Obj, plan: ResourcePlan): ResourcePlan {
  const management = managementOf(cr.spec);
  if (plan.action === "create" && !management.create) {
    return { ...plan, action: "none", reason: `ExternalNotFound: nothing to observe, and spec.managementPolicies ${management.stated} leaves out Create` };
  }
  if ((plan.action === "update" || plan.action === "replace") && !management.update) {
    const what = plan.action === "update" ? "the differences" : "the replacement";
    return { ...plan, action: "none", reason: `spec.managementPolicies ${management.stated} leaves out Update: ${what} would be reported (condition Drifted), not applied` };
  }
  return plan;
}

/** What an update of a service object that exists amounts to, kind by kind. */
function actionOf(
  cr: Obj,
  observed: Observation<unknown, unknown>,
  handle: ServiceHandle,
  specChanges: Change[],
  notes: string[],
  secrets: Deps["secrets"],
): Pick<ResourcePlan, "action" | "reason" | "changes" | "notes"> {
  switch (cr.kind) {
    case "Agent": {
      const p = observed.plan as AgentPlan;
      const found = handle.agents.get(p.id) as unknown as Record<string, unknown> | undefined;
      // Field by field, as a create's are (diffFields: leaves, redacted at any depth), never
      // whole objects: a manifest or metadata holds secret-looking fields.
      const changes: Change[] = [];
      const extra: string[] = [];
      for (const [k, v] of Object.entries(p.patch)) {
        const field = `spec.${k === "public_key" ? "publicKey" : k}`;
        const before = k === "metadata" ? withoutMarker(found?.[k]) : found?.[k];
        const after = k === "metadata" ? withoutMarker(v) : v;
        const diff = diffFields(before, after, field);
        if (diff.length > 0) changes.push(...diff);
        else if (k === "metadata") extra.push(`adds the operator's marker (${MARKER_KEY} in the agent's metadata), by which it finds the agent again`);
        else changes.push(change(field, before, after));
      }
      const drift = changes.length > 0 && specChanges.length === 0 ? ["the registry differs from the spec (changed outside the operator): put back"] : [];
      return { action: "update", changes, notes: [...notes, ...drift, ...extra] };
    }
    case "Skill": {
      const p = (observed.plan as SkillPlan).fields;
      const found = handle.skills.get(p.name) as unknown as Record<string, unknown> | undefined;
      const want = p as unknown as Record<string, unknown>;
      const changes = (observed.differences ?? []).map((d) => change(`spec.${d}`, found?.[d], want[d]));
      return { action: "update", changes, notes };
    }
    case "AgentDeployment": {
      const p = observed.plan as DeploymentPlan;
      // As for a Sandbox's VM: the operator does not replace a deployment the user named to take
      // over (reason AdoptedDeploymentNotReplaced, until the annotation is removed).
      if (p.action === "replace" && cr.metadata.annotations?.[Annotations.externalId] === p.deployment.id) {
        return adoptedNotReplaced("AdoptedDeploymentNotReplaced", p.why, "deployment", p.deployment.id, specChanges, notes);
      }
      if (p.action === "replace") return { action: "replace", reason: `${p.why}; the endpoint may change`, changes: specChanges, notes };
      if (p.action === "stop") return { action: "update", reason: "stop the deployment (spec.suspend: true)", changes: specChanges, notes };
      if (p.action === "redeploy") return { action: "update", reason: `redeploy: ${p.why}`, changes: specChanges, notes };
      return { action: "none", changes: [], notes };
    }
    case "Sandbox": {
      const p = observed.plan as SandboxPlan;
      if (p.action === "replace" && cr.metadata.annotations?.[Annotations.externalId] === p.vm.id) {
        return adoptedNotReplaced("AdoptedVMNotReplaced", p.why, "VM", p.vm.id, specChanges, notes);
      }
      if (p.action === "replace") {
        // The envFrom Secrets whose values the manifests change (never the values): a cause of
        // the replacement the spec's changes do not show.
        const ns = cr.metadata.namespace;
        const fromSecrets = [...new Set(((cr as unknown as Sandbox).spec.envFrom ?? []).map((e) => e.secretRef.name))].filter((name) => secrets.differs(ns, name));
        const extra = fromSecrets.length > 0 ? [change(`env from Secrets ${fromSecrets.join(", ")}`, fromSecrets.some((name) => secrets.existed(ns, name)) ? SENSITIVE : undefined, SENSITIVE)] : [];
        return { action: "replace", reason: `${p.why}: a new VM is allocated, then ${p.vm.id} is released`, changes: [...specChanges, ...extra], notes };
      }
      if (p.action === "renew") return { action: "none", changes: [], notes: [...notes, "its VM's TTL renewal is due (routine)"] };
      return { action: "none", changes: [], notes };
    }
    default:
      return { action: "update", reason: (observed.differences ?? []).join(", "), changes: specChanges, notes };
  }
}

/** A replacement of what the adoption annotation names, which the operator does not make: `unknown`. */
function adoptedNotReplaced(reason: string, why: string, what: string, id: string, changes: Change[], notes: string[]): Pick<ResourcePlan, "action" | "reason" | "changes" | "notes"> {
  return {
    action: "unknown",
    reason: `${reason}: ${why}, which needs a new ${what}, but the annotation ${Annotations.externalId} names ${what} ${id}: the operator will not replace it (remove the annotation to have it replaced)`,
    changes,
    notes,
  };
}

/** Metadata without the operator's marker; absent when nothing else is in it. */
function withoutMarker(v: unknown): unknown {
  if (typeof v !== "object" || v === null) return v;
  const { [MARKER_KEY]: _marker, ...rest } = v as Record<string, unknown>;
  return Object.keys(rest).length > 0 ? rest : undefined;
}

/**
 * Each kind's own id of its service object, as its controller reads it (the adoption
 * annotation, else status): an AgentDeployment's status also holds its Agent's id, which is not
 * its object.
 */
const EXTERNAL_IDS: Record<string, (o: Obj) => string | undefined> = {
  Skill: (o) => skillExternalId(o as unknown as Skill),
  Agent: (o) => agentExternalId(o as unknown as Agent),
  AgentDeployment: (o) => deploymentExternalId(o as unknown as AgentDeployment),
  Sandbox: (o) => sandboxExternalId(o as unknown as Sandbox),
};

/** The status field of each kind that holds its service object's id. */
const STATUS_IDS: Record<string, string> = { Skill: "skillName", Agent: "agentId", AgentDeployment: "deploymentId", Sandbox: "vmId" };

/** The id of the service object observe found, out of the status it would write. */
function idOf(kind: string, observed: Observation<unknown, unknown>): string | undefined {
  const field = STATUS_IDS[kind];
  const id = field === undefined ? undefined : (observed.status as Record<string, unknown> | undefined)?.[field];
  return typeof id === "string" ? id : undefined;
}

/** Dependencies that are only in the manifests (or nowhere): the action happens after them. */
function dependencyNotes(cr: Obj, deps: Deps): string[] {
  const ns = cr.metadata.namespace;
  const notes: string[] = [];
  const dep = (kind: string, name: string) => {
    const l = deps.liveOf(kind, ns, name);
    const m = deps.inManifests(kind, ns, name);
    const action = deps.actionOf(kind, ns, name);
    const waits = action === "create" ? deps.createWaits(kind, ns, name) : undefined;
    if (l === undefined && m !== undefined && waits !== undefined) notes.push(`after ${kind} ${name} is created, which ${waits.slice("then ".length)}`);
    else if (l === undefined && m !== undefined && (action === undefined || action === "create")) notes.push(`after ${kind} ${name} is created`);
    else if (l === undefined && m !== undefined) notes.push(`waits for ${kind} ${name}, which is only in the manifests and is not created by this apply (see its plan)`);
    else if (l === undefined) notes.push(`waits for ${kind} ${name}, which is neither in the cluster nor in the manifests`);
    else if (action === "update" || action === "replace") notes.push(`after ${kind} ${name} is ${action === "update" ? "updated" : "replaced"}`);
    else if (!isReady(l)) notes.push(`waits for ${kind} ${name}, not Ready now`);
  };
  if (cr.kind === "AgentDeployment") {
    const ref = (cr as unknown as AgentDeployment).spec.agentRef?.name;
    if (ref !== undefined) dep("Agent", ref);
  }
  // A Sandbox's and a deployment's skills: both wait for the Skill resources that make them.
  if (cr.kind === "Sandbox" || cr.kind === "AgentDeployment") {
    for (const name of (cr as unknown as { spec: { skills?: string[] } }).spec.skills ?? []) {
      const skill = skillNamed(deps.skillInformer.as<Skill>(), cr, name);
      if (skill !== undefined) dep("Skill", skill.metadata.name);
    }
  }
  return notes;
}

/** Objects of our kinds in the namespaces concerned that the manifests drop (as kubectl apply --prune). */
/**
 * Whether an object was applied, and so is pruned when its manifest goes: kubectl apply leaves
 * its last-applied annotation; server-side apply (Flux's kustomize-controller, `kubectl apply
 * --server-side`, Argo CD's ServerSideApply) leaves a managedFields entry of operation Apply.
 */
function applied(o: Obj): boolean {
  return o.metadata.annotations?.[LAST_APPLIED] !== undefined || appliedFields(o).length > 0;
}

/** The fields each server-side apply to `o` set (managedFields of operation Apply, FieldsV1). */
type FieldsV1 = { "f:metadata"?: { "f:annotations"?: Record<string, unknown> } };
function appliedFields(o: Obj): FieldsV1[] {
  const entries = (o.metadata.managedFields ?? []) as Array<{ operation?: unknown; subresource?: unknown; fieldsV1?: FieldsV1 } | null>;
  // Of the object itself: a controller applying only its status did not apply the object.
  return entries.filter((f) => f?.operation === "Apply" && (f.subresource ?? "") === "").map((f) => f?.fieldsV1 ?? {});
}

function pruned(live: Live, planned: ManifestObject[], namespaces: string[], selector: LabelMatcher | undefined): ResourcePlan[] {
  const out: ResourcePlan[] = [];
  const kept = new Set(planned.map((m) => `${m.kind}/${m.metadata.namespace}/${m.metadata.name}`));
  for (const names of ORDER) {
    for (const o of live.byKind.get(names.kind) ?? []) {
      const { namespace, name, labels } = o.metadata;
      if (!namespaces.includes(namespace) || kept.has(`${names.kind}/${namespace}/${name}`)) continue;
      if (!applied(o)) continue; // created another way (kubectl create, a script): not pruned
      if (selector !== undefined && !selector(labels)) continue;
      if (o.metadata.deletionTimestamp !== undefined) continue;
      out.push({ kind: names.kind, namespace, name, action: "delete", changes: [], ...deletion(names.kind, o) });
    }
  }
  return out;
}

/** What the deletion of `o` does, as the kind's finalizer does it (src/managed/reconciler.ts finalize). */
function deletion(kind: string, o: Obj): Pick<ResourcePlan, "reason" | "serviceId" | "notes"> {
  if (kind === "Connection") return { notes: ["waits until no resource of the namespace uses it"] };
  if (kind === kindNames.sandboxRun.kind) return { reason: "the run and its output ConfigMap go (a step still running is stopped)", notes: [] };
  const id = EXTERNAL_IDS[kind]?.(o);
  const management = managementOf(o.spec);
  let reason: string;
  if (o.spec.deletionPolicy === "Orphan") reason = "the service object is left in place (deletionPolicy: Orphan)";
  else if (!management.delete) reason = `the service object is left in place (spec.managementPolicies ${management.stated} leaves out Delete)`;
  else if (kind === "Sandbox") reason = "its VM is released";
  else reason = "its service object is deleted";
  const notes = isPaused(o) ? ["paused: the deletion waits until the annotation is removed"] : [];
  return { reason, ...(typeof id === "string" && { serviceId: id }), notes };
}
