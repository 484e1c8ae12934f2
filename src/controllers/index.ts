// Wires the five controllers onto a Manager: the informers they share, the watches that
// bring a resource back when something it depends on changes, and the connection pool.
import { FINALIZER, GROUP, VERSION, kindNames, type KindNames } from "../api/names.js";
import type { Agent, AgentDeployment, Connection, ObjectMeta, Sandbox, Skill } from "../api/index.js";
import { ConnectionSecretWriter, type SecretObject } from "../managed/connection-secret.js";
import type { Connector, ManagedResource } from "../managed/external.js";
import { ManagedReconciler } from "../managed/reconciler.js";
import { StatusWriter } from "../managed/status-writer.js";
import type { Controller, Request } from "../runtime/controller.js";
import type { Informer } from "../runtime/informer.js";
import { configMapsPath, resourcePath, secretsPath, type KubeObject } from "../runtime/kube-client.js";
import type { Manager } from "../runtime/manager.js";
import { serviceClientHooks } from "../runtime/metrics.js";
import { AgentDeploymentConnector, deploymentExternalId } from "./agent-deployment.js";
import { AgentConnector, agentExternalId } from "./agent.js";
import { ConnectionPool, type InventoryKind } from "./connection-pool.js";
import { ConnectionReconciler } from "./connection.js";
import { ObjectStore, type ConfigMapObject } from "./object-store.js";
import { SKILL_NAME_INDEX, SandboxConnector, sandboxExternalId } from "./sandbox.js";
import { SkillConnector, skillExternalId, skillName } from "./skill.js";
import { UsageGauges } from "./usage-metrics.js";

export interface OperatorOptions {
  /** Every resource is observed again this often (jittered); default 10 min. */
  syncPeriodMs: number;
  /** Workers per controller; default 8. */
  concurrency: number;
}

export interface Operator {
  pool: ConnectionPool;
  controllers: Record<"connection" | "skill" | "agent" | "agentDeployment" | "sandbox", Controller>;
}

const collection = (kind: KindNames) => resourcePath({ group: GROUP, version: VERSION, plural: kind.plural });

export function setupOperator(manager: Manager, opts: OperatorOptions): Operator {
  const connections = manager.informerFor<Connection & KubeObject>(collection(kindNames.connection));
  const skills = manager.informerFor<Skill & KubeObject>(collection(kindNames.skill));
  const agents = manager.informerFor<Agent & KubeObject>(collection(kindNames.agent));
  const deployments = manager.informerFor<AgentDeployment & KubeObject>(collection(kindNames.agentDeployment));
  const sandboxes = manager.informerFor<Sandbox & KubeObject>(collection(kindNames.sandbox));
  const secrets = manager.informerFor<SecretObject & KubeObject>(secretsPath());
  const configMaps = manager.informerFor<ConfigMapObject & KubeObject>(configMapsPath());

  const store = new ObjectStore(secrets, configMaps);
  const secretWriter = new ConnectionSecretWriter(manager.client, secrets);
  const status = new StatusWriter(manager.client);
  const controllers = {} as Operator["controllers"];

  // An out-of-band change found by an inventory read brings back the resources it concerns.
  const withIds = <R extends ManagedResource & KubeObject>(informer: Informer<R>, idOf: (cr: R) => string | undefined) =>
    (namespace: string, connection: string) =>
      informer
        .list(namespace)
        .filter((cr) => (cr.spec.connectionRef?.name ?? "default") === connection)
        .map((cr) => ({ request: requestOf(cr), id: idOf(cr) }));
  const byInventory: Record<InventoryKind, { resources: ReturnType<typeof withIds>; controller: () => Controller }> = {
    agents: { resources: withIds(agents, agentExternalId), controller: () => controllers.agent },
    deployments: { resources: withIds(deployments, deploymentExternalId), controller: () => controllers.agentDeployment },
    vms: { resources: withIds(sandboxes, sandboxExternalId), controller: () => controllers.sandbox },
    skills: { resources: withIds(skills, skillExternalId), controller: () => controllers.skill },
  };
  const pool = new ConnectionPool({
    connections,
    secrets,
    logger: manager.logger,
    hooks: (connection) => serviceClientHooks(manager.metrics, connection),
    inventoryMaxAgeMs: opts.syncPeriodMs,
    onInventoryChange(connectionKey, kind, keys) {
      const changed = new Set(keys);
      const [namespace, name] = connectionKey.split("/") as [string, string];
      const { resources, controller } = byInventory[kind];
      for (const { request, id } of resources(namespace, name)) {
        if (id !== undefined && changed.has(id)) controller().enqueue(request);
      }
    },
  });

  // --- Connection ----------------------------------------------------------------------
  controllers.connection = manager.newController({
    name: "connection",
    concurrency: 2,
    reconciler: new ConnectionReconciler({
      informer: connections,
      usersOf: (namespace, connection) =>
        managedInformers.flatMap(([kind, informer]) =>
          informer
            .list(namespace)
            .filter((cr) => (cr.spec.connectionRef?.name ?? "default") === connection)
            .map((cr) => `${kind}/${cr.metadata.name}`),
        ),
      kube: manager.client,
      pool,
      status,
      events: manager.events,
      usage: new UsageGauges(manager.metrics.registry),
    }),
  });
  controllers.connection.watch(connections, undefined, { filter: specOrMetaChanged });
  controllers.connection.watch(secrets, (s) =>
    connections
      .list(s.metadata.namespace)
      .filter((c) => c.spec.credentials.secretRef.name === s.metadata.name)
      .map(requestOf),
  );

  // A deleting Connection waits for its users; the last one going brings it back.
  const managedInformers: Array<[string, Informer<ManagedResource & KubeObject>]> = [
    ["Skill", skills as unknown as Informer<ManagedResource & KubeObject>],
    ["Agent", agents as unknown as Informer<ManagedResource & KubeObject>],
    ["AgentDeployment", deployments as unknown as Informer<ManagedResource & KubeObject>],
    ["Sandbox", sandboxes as unknown as Informer<ManagedResource & KubeObject>],
  ];
  for (const [, informer] of managedInformers) {
    controllers.connection.watch(
      informer,
      (cr) => [{ namespace: cr.metadata.namespace, name: cr.spec.connectionRef?.name ?? "default" }],
      {
        filter: (cr, _old, event) =>
          event === "delete" &&
          connections.get(cr.metadata.namespace, cr.spec.connectionRef?.name ?? "default")?.metadata.deletionTimestamp !== undefined,
      },
    );
  }

  // --- managed kinds -----------------------------------------------------------------------
  const managed = <R extends ManagedResource & KubeObject>(
    name: string,
    kind: KindNames,
    informer: Informer<R>,
    connector: Connector<R>,
    externalId: (cr: R) => string | undefined,
    withSecrets: boolean,
  ): Controller => {
    const controller = manager.newController({
      name,
      concurrency: opts.concurrency,
      reconciler: new ManagedReconciler<R>({
        kind,
        informer,
        kube: manager.client,
        events: manager.events,
        connector,
        externalId,
        status,
        syncPeriodMs: opts.syncPeriodMs,
        secrets: withSecrets ? secretWriter : undefined,
      }),
    });
    controller.watch(informer, undefined, { filter: specOrMetaChanged });
    informer.on("update", (cr) => status.seen(cr));
    informer.on("delete", (cr) => status.forget(cr.metadata.uid));
    // A Connection that becomes Ready (or changes) brings back everything that uses it.
    controller.watch(
      connections,
      (c) =>
        informer
          .list(c.metadata.namespace)
          .filter((cr) => (cr.spec.connectionRef?.name ?? "default") === c.metadata.name)
          .map(requestOf),
      { filter: readinessChanged },
    );
    return controller;
  };

  // Map functions ("which Sandboxes load this Skill?") answer from informer indices: at 10,000
  // resources a scan of the namespace per event (every Secret, Agent and Skill the cold start
  // writes is one) was the operator's biggest CPU cost after garbage collection, and most of
  // that garbage.
  const skillsUsingConfigMap = referrers(skills, "configMap", (s) => [
    s.spec.contentFrom?.configMapKeyRef.name,
    s.spec.resourcesFrom?.configMapRef.name,
  ]);
  const agentsUsingSecret = referrers(agents, "imagePullSecret", (a) => [a.spec.imagePullSecretRef?.name]);
  const deploymentsOfAgent = referrers(deployments, "agentRef", (d) => [d.spec.agentRef?.name]);
  const sandboxesLoadingSkill = referrers(sandboxes, "skill", (sb) => sb.spec.skills ?? []);
  const sandboxesUsingSecret = referrers(sandboxes, "envFromSecret", (sb) => (sb.spec.envFrom ?? []).map((e) => e.secretRef.name));
  skills.addIndex(SKILL_NAME_INDEX, (s) => [`${s.metadata.namespace}/${skillName(s)}`]);

  controllers.skill = managed("skill", kindNames.skill, skills, new SkillConnector(pool, store), skillExternalId, false);
  controllers.skill.watch(configMaps, (cm) => skillsUsingConfigMap(cm).map(requestOf));

  controllers.agent = managed("agent", kindNames.agent, agents, new AgentConnector(pool, store), agentExternalId, false);
  controllers.agent.watch(secrets, (s) =>
    agentsUsingSecret(s)
      .filter((a) => a.status?.agentId === undefined)
      .map(requestOf),
  );

  controllers.agentDeployment = managed(
    "agentdeployment",
    kindNames.agentDeployment,
    deployments,
    new AgentDeploymentConnector(pool, agents),
    deploymentExternalId,
    true,
  );
  // The Agent getting its id, or a new revision, brings its deployments back.
  controllers.agentDeployment.watch(agents, (a) => deploymentsOfAgent(a).map(requestOf));

  controllers.sandbox = managed("sandbox", kindNames.sandbox, sandboxes, new SandboxConnector(pool, store, skills), sandboxExternalId, true);
  controllers.sandbox.watch(skills, (sk) =>
    sandboxesLoadingSkill({ metadata: { namespace: sk.metadata.namespace, name: skillName(sk) } }).map(requestOf),
  );
  controllers.sandbox.watch(secrets, (s) => sandboxesUsingSecret(s).map(requestOf));

  return { pool, controllers };
}

/**
 * Indexes `informer` by the names `refs` returns (objects of the same namespace) and returns
 * the lookup: the objects that reference a given object, by its namespace and name.
 */
function referrers<T extends KubeObject>(
  informer: Informer<T>,
  index: string,
  refs: (obj: T) => Array<string | undefined>,
): (target: { metadata: { namespace?: string; name?: string } }) => T[] {
  informer.addIndex(index, (obj) => {
    const out: string[] = [];
    for (const r of refs(obj)) if (r !== undefined) out.push(`${obj.metadata.namespace ?? ""}/${r}`);
    return out;
  });
  return (target) => informer.byIndex(index, `${target.metadata.namespace ?? ""}/${target.metadata.name ?? ""}`);
}

function requestOf(obj: { metadata: { namespace?: string; name?: string } }): Request {
  return { namespace: obj.metadata.namespace ?? "", name: obj.metadata.name ?? "" };
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
  if (JSON.stringify(m.annotations ?? {}) !== JSON.stringify(o.annotations ?? {})) return true;
  const now = m.finalizers ?? [];
  const before = o.finalizers ?? [];
  if (JSON.stringify(now) === JSON.stringify(before)) return false;
  const ownAdded = now.length === before.length + 1 && now[now.length - 1] === FINALIZER && !before.includes(FINALIZER) &&
    before.every((f, i) => now[i] === f);
  return !ownAdded;
}

/** A Connection's token refreshes and usage updates do not concern its dependants; its readiness does. */
function readinessChanged(obj: Connection & KubeObject, old?: Connection & KubeObject): boolean {
  if (old === undefined) return true;
  const ready = (c: Connection) => c.status?.conditions?.find((x) => x.type === "Ready");
  const a = ready(obj);
  const b = ready(old);
  return a?.status !== b?.status || a?.observedGeneration !== b?.observedGeneration || obj.status?.observedGeneration !== old.status?.observedGeneration;
}
