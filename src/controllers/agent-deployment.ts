// AgentDeployment: a registry agent running on the Compute Service. The service has no update
// for deployments, so every difference is one of four actions: stop (suspend), redeploy
// (resume, the redeploy-at annotation, or a new agent revision), or replace (new deploy
// options, or a configuration changed behind our back: delete + deploy, the endpoint may
// change).
//
// The deployment record does not echo the deploy options (SERVICE.md), so they are never
// compared with it: status.optionsHash remembers what this operator applied, and
// status.configHash the service's config_hash as we left it. A spec change moves the first;
// a change made outside the operator moves the second.
import { createHash } from "node:crypto";
import stableStringify from "safe-stable-stringify";
import { Annotations, ConditionType, MARKER_KEY } from "../api/names.js";
import type { Agent, AgentDeployment, AgentDeploymentStatus } from "../api/index.js";
import { NotReadyError } from "../managed/errors.js";
import type { ActionResult, ConnectionDetails, Connector, ExternalClient, Observation } from "../managed/external.js";
import type { Informer } from "../runtime/informer.js";
import { formatTime } from "../runtime/status.js";
import { isNotFound, isOutcomeUnknown, type Deployment, type DeployOptions } from "../service/index.js";
import type { ConnectionPool, ServiceHandle } from "./connection-pool.js";
import { newest } from "./marker.js";

export function deploymentExternalId(cr: AgentDeployment): string | undefined {
  return cr.metadata.annotations?.[Annotations.externalId] ?? cr.status?.deploymentId;
}

/** The agent to deploy: resolved from agentRef (which must have an id) or given as agentId. */
interface Target {
  agentId: string;
  /** The Agent's revision, when it is managed here; undefined for an external agentId. */
  revision: string | undefined;
}

export class AgentDeploymentConnector implements Connector<AgentDeployment> {
  constructor(
    private readonly pool: ConnectionPool,
    private readonly agents: Informer<Agent>,
    private readonly now: () => Date = () => new Date(),
  ) {}

  async connect(cr: AgentDeployment): Promise<ExternalClient<AgentDeployment>> {
    const handle = this.pool.forResource(cr.metadata.namespace, cr.spec.connectionRef, {
      deleting: cr.metadata.deletionTimestamp !== undefined,
    });
    // Resolved when first needed: deleting a deployment must not wait for its Agent.
    return new DeploymentClient(handle, () => this.target(cr), this.now);
  }

  private target(cr: AgentDeployment): Target {
    if (cr.spec.agentId !== undefined) return { agentId: cr.spec.agentId, revision: undefined };
    const name = cr.spec.agentRef?.name ?? "";
    const agent = this.agents.get(cr.metadata.namespace, name);
    if (agent === undefined) {
      throw new NotReadyError("WaitingForAgent", `Agent "${name}" not found in namespace "${cr.metadata.namespace}" (spec.agentRef.name)`);
    }
    const ready = agent.status?.conditions?.find((c) => c.type === ConditionType.Ready);
    const synced = agent.status?.observedGeneration === agent.metadata.generation && ready?.status === "True";
    if (agent.status?.agentId === undefined || (!synced && cr.status?.deploymentId === undefined)) {
      throw new NotReadyError("WaitingForAgent", `Agent "${name}" has no id in the registry yet`);
    }
    // While the Agent is being updated, keep running the revision we have; roll out once it is synced.
    return { agentId: agent.status.agentId, revision: synced ? agent.status.revision : cr.status?.agentRevision };
  }
}

type Plan =
  | { action: "replace"; why: string }
  | { action: "stop" }
  | { action: "redeploy"; why: string }
  | { action: "none" };

class DeploymentClient implements ExternalClient<AgentDeployment> {
  private plan: Plan = { action: "none" };
  private current: Deployment | undefined;

  private targetCache: Target | undefined;

  constructor(
    private readonly handle: ServiceHandle,
    private readonly targetFn: () => Target,
    private readonly now: () => Date,
  ) {}

  private get target(): Target {
    return (this.targetCache ??= this.targetFn());
  }

  async observe(cr: AgentDeployment): Promise<Observation<AgentDeploymentStatus>> {
    const found = await this.find(cr);
    this.current = found;
    if (found === undefined) return { exists: false, upToDate: false };
    this.plan = this.planFor(cr, found);
    const upToDate = this.plan.action === "none";
    return {
      exists: true,
      upToDate,
      differences: upToDate ? [] : [describe(this.plan)],
      status: {
        ...statusOf(found),
        // Both hashes are what we applied and what the service said then; a drifted config_hash
        // must not be recorded before it is put back, or the drift would be forgotten.
        optionsHash: cr.status?.optionsHash ?? optionsHash(cr),
        configHash: cr.status?.configHash ?? found.config_hash,
        // The agent revision is only recorded once it is what runs.
        agentRevision: upToDate ? this.target.revision : cr.status?.agentRevision,
        redeployAt: cr.status?.redeployAt ?? cr.metadata.annotations?.[Annotations.redeployAt],
      },
      connectionDetails: detailsOf(found),
    };
  }

  async create(cr: AgentDeployment): Promise<ActionResult<AgentDeploymentStatus>> {
    const deployed = await this.deploy(cr);
    return {
      status: this.statusAfterDeploy(cr, deployed),
      connectionDetails: detailsOf(deployed),
    };
  }

  async update(cr: AgentDeployment): Promise<ActionResult<AgentDeploymentStatus>> {
    const current = this.current;
    if (current === undefined) throw new Error("deployment vanished between observe and update; retrying");
    const client = this.handle.client.deployments;
    switch (this.plan.action) {
      case "replace": {
        await this.remove(current.id);
        const deployed = await this.deploy(cr);
        return {
          status: this.statusAfterDeploy(cr, deployed),
          connectionDetails: detailsOf(deployed),
          event: {
            reason: "Replaced",
            message: `${this.plan.why}: replaced deployment ${current.id} with ${deployed.id}; the endpoint may have changed`,
          },
        };
      }
      case "stop": {
        const stopped = await client.stop(current.id);
        this.handle.deployments.put(stopped);
        return { status: { ...statusOf(stopped), configHash: stopped.config_hash }, event: { reason: "Stopped", message: `stopped deployment ${current.id} (spec.suspend: true)` } };
      }
      case "redeploy": {
        const redeployed = await client.redeploy(current.id);
        this.handle.deployments.put(redeployed);
        return {
          status: {
            ...statusOf(redeployed),
            configHash: redeployed.config_hash,
            agentRevision: this.target.revision,
            redeployAt: cr.metadata.annotations?.[Annotations.redeployAt],
            lastRedeployedAt: formatTime(this.now()),
          },
          connectionDetails: detailsOf(redeployed),
          event: { reason: "Redeployed", message: `redeployed ${current.id}: ${this.plan.why}` },
        };
      }
      case "none":
        return {};
    }
  }

  async delete(cr: AgentDeployment): Promise<void> {
    // A fresh read: whatever a crash left behind with this resource's marker goes too.
    await this.handle.deployments.refresh();
    const ids = new Set(this.handle.deployments.findByMarker(cr.metadata.uid).map((d) => d.id));
    const id = deploymentExternalId(cr);
    if (id !== undefined) ids.add(id);
    for (const each of ids) await this.remove(each);
  }

  private async deploy(cr: AgentDeployment): Promise<Deployment> {
    try {
      let deployed = await this.handle.client.deployments.deploy(this.target.agentId, desiredOptions(cr));
      this.handle.deployments.put(deployed);
      if (cr.spec.suspend) {
        deployed = await this.handle.client.deployments.stop(deployed.id);
        this.handle.deployments.put(deployed);
      }
      return deployed;
    } catch (err) {
      if (isOutcomeUnknown(err)) this.handle.deployments.invalidate();
      if (isNotFound(err)) {
        // The registry has no such agent: say which, and wait (it may be registered later;
        // an Agent managed here that was deleted out of band is recreated by its controller).
        const which = cr.spec.agentId !== undefined ? "spec.agentId" : `the id of Agent "${cr.spec.agentRef?.name ?? ""}"`;
        throw new NotReadyError(
          "WaitingForAgent",
          `the registry has no agent "${this.target.agentId}" (${which}); deploy answered: ${err instanceof Error ? err.message : String(err)}`,
        );
      }
      throw err;
    }
  }

  private async remove(id: string): Promise<void> {
    try {
      await this.handle.client.deployments.delete(id);
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    this.handle.deployments.remove(id);
  }

  private statusAfterDeploy(cr: AgentDeployment, d: Deployment): Partial<AgentDeploymentStatus> {
    return {
      ...statusOf(d),
      agentRevision: this.target.revision,
      optionsHash: optionsHash(cr),
      configHash: d.config_hash,
      redeployAt: cr.metadata.annotations?.[Annotations.redeployAt],
    };
  }

  /** By id (status or adoption annotation), else by this resource's marker. */
  private async find(cr: AgentDeployment): Promise<Deployment | undefined> {
    const inventory = this.handle.deployments;
    await inventory.ensureFresh();
    const id = deploymentExternalId(cr);
    if (id === undefined) return this.byMarker(cr);
    const cached = inventory.get(id);
    if (cached !== undefined) return this.withoutExtras(cr, cached);
    try {
      const got = await this.handle.client.deployments.get(id);
      inventory.put(got);
      return await this.withoutExtras(cr, got);
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    // The deployment in status is gone. A deploy made since then whose status write never
    // landed (API server unreachable, process killed) left one with our marker: adopt it rather
    // than deploy yet another on every retry. Not when adopting by annotation: that names one.
    if (cr.metadata.annotations?.[Annotations.externalId] !== undefined) return undefined;
    return this.byMarker(cr);
  }

  /**
   * Any other deployment carrying this resource's marker is a leftover (a deploy whose answer
   * was lost landed after a retry succeeded): delete it. `keep` is the one status names.
   */
  private async withoutExtras(cr: AgentDeployment, keep: Deployment): Promise<Deployment> {
    if (cr.metadata.annotations?.[Annotations.externalId] !== undefined) return keep;
    for (const d of this.handle.deployments.findByMarker(cr.metadata.uid)) if (d.id !== keep.id) await this.remove(d.id);
    return keep;
  }

  /** The newest deployment carrying this resource's marker; any other one is deleted. */
  private async byMarker(cr: AgentDeployment): Promise<Deployment | undefined> {
    const candidates = this.handle.deployments.findByMarker(cr.metadata.uid);
    const keep = newest(candidates);
    for (const extra of candidates) if (extra !== keep) await this.remove(extra.id);
    return keep;
  }

  private planFor(cr: AgentDeployment, found: Deployment): Plan {
    if (found.registry_id !== undefined && found.registry_id !== this.target.agentId) {
      return { action: "replace", why: `the agent changed to ${this.target.agentId}` };
    }
    // No recorded hash (adopted, or recorded by an older operator): what runs is taken as
    // applied from this spec, and recorded; a later spec change replaces it.
    const applied = cr.status?.optionsHash;
    if (applied !== undefined && applied !== optionsHash(cr)) {
      return { action: "replace", why: `the deploy options in the spec changed (optionsHash ${applied} is now ${optionsHash(cr)})` };
    }
    const known = cr.status?.configHash;
    if (known !== undefined && found.config_hash !== undefined && found.config_hash !== known) {
      return {
        action: "replace",
        why: `its configuration was changed outside the operator (config_hash ${known} is now ${found.config_hash})`,
      };
    }
    if (cr.spec.suspend) return found.state === "stopped" ? { action: "none" } : { action: "stop" };
    if (found.state === "stopped") return { action: "redeploy", why: "it was stopped and spec.suspend is false" };
    const redeployAt = cr.metadata.annotations?.[Annotations.redeployAt];
    if (redeployAt !== undefined && redeployAt !== cr.status?.redeployAt && cr.status?.deploymentId !== undefined) {
      return { action: "redeploy", why: `annotation ${Annotations.redeployAt}: "${redeployAt}"` };
    }
    const running = cr.status?.agentRevision;
    if (this.target.revision !== undefined && running !== undefined && running !== this.target.revision) {
      return { action: "redeploy", why: `the Agent changed (revision ${this.target.revision})` };
    }
    return { action: "none" };
  }
}

/** The deploy options the spec asks for, with the crash-safety marker. */
export function desiredOptions(cr: AgentDeployment): DeployOptions {
  const { spec } = cr;
  const options: DeployOptions = { ...(spec.options ?? {}) } as DeployOptions;
  if (spec.tier !== undefined) options.tier = spec.tier;
  if (spec.skills !== undefined) options.skills = spec.skills;
  if (spec.env !== undefined) options.env = spec.env;
  options.metadata = { ...spec.metadata, [MARKER_KEY]: cr.metadata.uid };
  return options;
}

/** Hash of the deploy options the spec asks for (status.optionsHash records the applied one). */
export function optionsHash(cr: AgentDeployment): string {
  // Keys sorted at every depth, so that key order in the spec never looks like a change.
  return createHash("sha256").update(stableStringify(desiredOptions(cr))).digest("hex").slice(0, 16);
}



function statusOf(d: Deployment): Partial<AgentDeploymentStatus> {
  return {
    deploymentId: d.id,
    agentId: d.registry_id,
    state: d.state,
    endpoint: d.endpoint,
    endpointName: d.endpoint_name,
    tier: d.tier,
  };
}

function detailsOf(d: Deployment): ConnectionDetails {
  const details: ConnectionDetails = { deploymentId: d.id };
  if (d.token) details.token = d.token;
  if (d.endpoint) details.endpoint = d.endpoint;
  if (d.endpoint_name) details.endpointName = d.endpoint_name;
  return details;
}

function describe(plan: Plan): string {
  switch (plan.action) {
    case "replace":
    case "redeploy":
      return plan.why;
    case "stop":
      return "spec.suspend is true";
    case "none":
      return "";
  }
}
