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
import { AGENT_REVISION_KEY, Annotations, ConditionType, MARKER_KEY, OPTIONS_HASH_KEY, kindNames } from "../api/names.js";
import type { Agent, AgentDeployment, AgentDeploymentStatus, Skill } from "../api/index.js";
import { notReportedYet, troubleOf } from "../managed/conditions.js";
import { managementOf } from "../managed/management-policies.js";
import { FailedAfterChange, NotReadyError, StalledError } from "../managed/errors.js";
import { errorMessage } from "../lib/errors.js";
import type { ActionResult, ConnectionDetails, ExternalClient, Observation, Planned } from "../managed/external.js";
import type { Informer } from "../runtime/informer.js";
import { formatTime } from "../runtime/status.js";
import { isNotFound, isOutcomeUnknown, isServiceNotFound, type Deployment, type DeployOptions } from "../service/index.js";
import type { ServiceHandle } from "./connection-pool.js";
import { connectionName, fingerprint, referrers, requestOf, type KindContext, type ManagedKind } from "./kind.js";
import { findOwn, goneSinceObserved, madeFor, removeObject } from "./marker.js";
import { skillUsers, skillsByName, waitForSkills } from "./skill.js";

export function deploymentExternalId(cr: AgentDeployment): string | undefined {
  return cr.metadata.annotations?.[Annotations.externalId] ?? cr.status?.deploymentId;
}

/** Deployments of registry agents; an Agent getting its id, or a new revision, brings its deployments back. */
export function agentDeployments(ctx: KindContext): ManagedKind<AgentDeployment, DeploymentPlan> {
  const agents = ctx.informer<Agent>(kindNames.agent);
  const skills = skillsByName(ctx);
  return {
    names: kindNames.agentDeployment,
    controller: "agentdeployment",
    inventory: "deployments",
    externalId: deploymentExternalId,
    connectionSecret: true,
    // A deploy refused for its Agent (the image) is fixed in the Agent: its new revision.
    inputs: (cr) => {
      const agent = referencedAgent(cr, agents);
      return agent === undefined ? undefined : fingerprint(agent.status?.agentId, agent.status?.revision);
    },
    client: (handle) => new DeploymentClient(handle, agents, skills, () => ctx.now()),
    watches(controller, own) {
      const ofAgent = referrers(own, "agentRef", (d) => [d.spec.agentRef?.name]);
      controller.watch(agents, (a) => ofAgent(a).map(requestOf));
      const loading = skillUsers(own);
      controller.watch(skills, (sk) => loading(sk).map(requestOf));
    },
  };
}

/** The Agent resource spec.agentRef names, if the cache has it (none for an agentId). */
function referencedAgent(cr: AgentDeployment, agents: Informer<Agent>): Agent | undefined {
  return cr.spec.agentRef === undefined ? undefined : agents.get(cr.metadata.namespace, cr.spec.agentRef.name);
}

/** The agent to deploy: resolved from agentRef (which must have an id) or given as agentId. */
export interface Target {
  agentId: string;
  /** The Agent's revision, when it is managed here; undefined for an external agentId. */
  revision: string | undefined;
}

/** Throws NotReadyError while the Agent is missing, has no id, or (for a first deploy) is not synced. */
export function targetOf(cr: AgentDeployment, agents: Informer<Agent>): Target {
  if (cr.spec.agentId !== undefined) return { agentId: cr.spec.agentId, revision: undefined };
  const name = cr.spec.agentRef?.name ?? "";
  const agent = agents.get(cr.metadata.namespace, name);
  if (agent === undefined) {
    throw new NotReadyError("WaitingForAgent", `Agent "${name}" not found in namespace "${cr.metadata.namespace}" (spec.agentRef.name)`);
  }
  const ready = agent.status?.conditions?.find((c) => c.type === ConditionType.Ready);
  const synced = agent.status?.observedGeneration === agent.metadata.generation && ready?.status === "True";
  if (agent.status?.agentId === undefined || (!synced && cr.status?.deploymentId === undefined)) {
    // A first deploy also waits for an Agent being updated: it deploys the latest spec.
    const what = agent.status?.agentId === undefined ? "has no id in the registry yet" : "is not Ready for its latest spec yet";
    const trouble = troubleOf(agent);
    const why = trouble === undefined ? "" : `; the Agent is not Ready (${trouble})`;
    throw new NotReadyError("WaitingForAgent", `Agent "${name}" ${what}${why}`, notReportedYet(agent));
  }
  // While the Agent is being updated, keep running the revision we have; roll out once it is synced.
  return { agentId: agent.status.agentId, revision: synced ? agent.status.revision : cr.status?.agentRevision };
}

/** What to do about a deployment that exists. The service has no update for deployments. */
export type Action =
  | { action: "replace"; why: string }
  | { action: "stop" }
  | { action: "redeploy"; why: string }
  | { action: "none" };

/** The action, with what observe found: the deployment and the agent to run. */
export type DeploymentPlan = Action & { deployment: Deployment; target: Target };

class DeploymentClient implements ExternalClient<AgentDeployment, DeploymentPlan> {
  constructor(
    private readonly handle: ServiceHandle,
    private readonly agents: Informer<Agent>,
    private readonly skills: Informer<Skill>,
    private readonly now: () => Date,
  ) {}

  async observe(cr: AgentDeployment): Promise<Observation<AgentDeploymentStatus, DeploymentPlan>> {
    const { found, leftovers } = await findOwn(cr, deploymentExternalId(cr), {
      inventory: this.handle.deployments,
      get: (id) => this.handle.client.deployments.get(id),
      adoptAfterLoss: true,
    });
    if (found === undefined) return { exists: false, upToDate: false };
    // Resolved only now: deleting a deployment, or one that is gone, must not wait for its Agent.
    const target = targetOf(cr, this.agents);
    // A deployment adopted (after a lost status write) says which options it was deployed
    // with, and for which revision of its Agent, if we deployed it: compared with those, not
    // with the lost one's (nor taken for one running the Agent as it is now).
    const adopted = cr.status?.deploymentId !== found.id;
    const recorded = adopted ? madeFor(cr, found, OPTIONS_HASH_KEY) : undefined;
    const revision = adopted ? madeFor(cr, found, AGENT_REVISION_KEY) : undefined;
    const applied =
      recorded === undefined
        ? cr
        : { ...cr, status: { ...cr.status, optionsHash: recorded, configHash: found.config_hash, ...(revision !== undefined && { agentRevision: revision }) } };
    const plan = { ...planFor(applied, found, target), deployment: found, target };
    // Moved in from another owner (sharding), which may have replaced the deployment just before
    // it let go, status unwritten: a replacement is planned on a snapshot read since. (No await
    // between findOwn's look at the snapshot and this check: see the same check in sandbox.ts.)
    if (plan.action === "replace" && (await this.handle.deployments.readSinceArrival(cr.metadata.uid))) return this.observe(cr);
    const upToDate = plan.action === "none";
    // Failed, with nothing that will change it: what it runs is what the spec asks, or the
    // policies leave out the Update that would.
    const mayUpdate = managementOf(cr.spec).update;
    return {
      exists: true,
      upToDate,
      ...((upToDate || !mayUpdate) && found.state === "failed" && { notReady: failedCondition(found.id, mayUpdate) }),
      differences: upToDate ? [] : [describe(plan)],
      status: {
        ...statusOf(found),
        // Both hashes are what we applied and what the service said then; a drifted config_hash
        // must not be recorded before it is put back, or the drift would be forgotten. (An
        // imported deployment's is never put back: recorded as it is.)
        optionsHash: applied.status?.optionsHash ?? optionsHash(cr),
        configHash: cr.metadata.annotations?.[Annotations.externalId] === found.id ? found.config_hash : (applied.status?.configHash ?? found.config_hash),
        // The agent revision is only recorded once it is what runs.
        agentRevision: upToDate ? target.revision : cr.status?.agentRevision,
        redeployAt: cr.status?.redeployAt ?? cr.metadata.annotations?.[Annotations.redeployAt],
      },
      connectionDetails: detailsOf(found),
      plan,
      leftovers,
    };
  }

  async create(cr: AgentDeployment): Promise<ActionResult<AgentDeploymentStatus>> {
    let target: Target;
    let deployed: Deployment;
    try {
      target = targetOf(cr, this.agents);
      deployed = await this.deploy(cr, target);
    } catch (err) {
      // The deployment status names is gone (deleted outside the operator): status and the
      // connection Secret must not go on handing out its endpoint and token meanwhile.
      const gone = cr.status?.deploymentId;
      if (gone === undefined) throw err;
      throw new FailedAfterChange(err, DEPLOYMENT_GONE, `deployment ${gone} is gone; its connection Secret is deleted until a deployment runs again`, true);
    }
    return {
      status: this.statusAfterDeploy(cr, deployed, target),
      connectionDetails: detailsOf(deployed),
    };
  }

  async update(cr: AgentDeployment, { plan }: Planned<AgentDeploymentStatus, DeploymentPlan>): Promise<ActionResult<AgentDeploymentStatus>> {
    const current = plan.deployment;
    const client = this.handle.client.deployments;
    switch (plan.action) {
      case "replace": {
        // The user named this deployment to take over (it may run an agent of theirs, with
        // options the operator never saw): deleting it would lose it, and leave the annotation
        // naming nothing. The user decides, as for a Sandbox's adopted VM.
        if (cr.metadata.annotations?.[Annotations.externalId] === current.id) {
          throw new StalledError(
            "AdoptedDeploymentNotReplaced",
            `${plan.why}, which needs a new deployment (the service cannot change one), but the annotation ${Annotations.externalId} names deployment ${current.id}, taken over as it is: ` +
              `remove the annotation ${Annotations.externalId} to have it replaced (${current.id} deleted, a new one deployed), or put the spec back`,
          );
        }
        // Before the old one goes: it runs on while the new one's Skills are made.
        this.waitForSkills(cr);
        await this.remove(current.id);
        let deployed: Deployment;
        try {
          deployed = await this.deploy(cr, plan.target);
        } catch (err) {
          // Status must not go on naming the deployment just deleted, running, with its endpoint.
          throw new FailedAfterChange(
            err,
            DEPLOYMENT_GONE,
            `deployment ${current.id} was deleted to be replaced (${plan.why}); its connection Secret is deleted until a deployment runs again`,
            true,
          );
        }
        return {
          status: this.statusAfterDeploy(cr, deployed, plan.target),
          connectionDetails: detailsOf(deployed),
          event: {
            reason: "Replaced",
            message: `${plan.why}: replaced deployment ${current.id} with ${deployed.id}; the endpoint may have changed`,
          },
        };
      }
      case "stop": {
        const stopped = await this.change(current.id, "stop", plan.target, () => client.stop(current.id));
        this.handle.deployments.put(stopped);
        return { status: { ...statusOf(stopped), configHash: stopped.config_hash }, event: { reason: "Stopped", message: `stopped deployment ${current.id} (spec.suspend: true)` } };
      }
      case "redeploy": {
        const redeployed = await this.change(current.id, "redeploy", plan.target, () => client.redeploy(current.id));
        this.handle.deployments.put(redeployed);
        return {
          status: {
            ...statusOf(redeployed),
            configHash: redeployed.config_hash,
            agentRevision: plan.target.revision,
            redeployAt: cr.metadata.annotations?.[Annotations.redeployAt],
            lastRedeployedAt: formatTime(this.now()),
          },
          connectionDetails: detailsOf(redeployed),
          event: { reason: "Redeployed", message: `redeployed ${current.id}: ${plan.why}` },
        };
      }
      case "none":
        return {};
    }
  }

  /**
   * A stop or a redeploy of deployment `id`. Its 404 need not be about the deployment: a
   * redeploy takes its agent's image from the registry, and the agent may be gone (an external
   * spec.agentId deleted, or an Agent being made again). The deployment is asked for: gone, the
   * pass waits and the next deploys again (as changeObserved does); there, the pass waits for the agent,
   * saying so, rather than take the deployment for gone at every pass.
   */
  private async change(id: string, verb: string, target: Target, call: () => Promise<Deployment>): Promise<Deployment> {
    try {
      return await call();
    } catch (err) {
      if (!isNotFound(err)) throw err;
      // Gone by the service's own 404; a bare one (a gateway's) is a failed read, tried again.
      const still = await this.handle.client.deployments.get(id).catch((e: unknown) => {
        if (isServiceNotFound(e)) return undefined;
        throw e;
      });
      if (still === undefined) {
        this.handle.deployments.remove(id);
        throw goneSinceObserved(`deployment ${id}`);
      }
      this.handle.deployments.put(still);
      throw new NotReadyError("WaitingForAgent", `deployment ${id} is there, but its ${verb} was answered 404 (${errorMessage(err)}): its agent "${target.agentId}" may be gone from the registry`);
    }
  }

  async cleanup(_cr: AgentDeployment, leftovers: string[]): Promise<void> {
    for (const id of leftovers) await this.remove(id);
  }

  async delete(cr: AgentDeployment): Promise<void> {
    // A fresh read: whatever a crash left behind with this resource's marker goes too.
    await this.handle.deployments.refresh();
    const ids = new Set(this.handle.deployments.findByMarker(cr.metadata.uid).map((d) => d.id));
    const id = deploymentExternalId(cr);
    if (id !== undefined) ids.add(id);
    for (const each of ids) await this.remove(each);
  }

  private async deploy(cr: AgentDeployment, target: Target): Promise<Deployment> {
    this.waitForSkills(cr);
    try {
      const options = desiredOptions(cr);
      options.metadata = {
        ...options.metadata,
        [OPTIONS_HASH_KEY]: optionsHash(cr),
        ...(target.revision !== undefined && { [AGENT_REVISION_KEY]: target.revision }),
      };
      let deployed = await this.handle.client.deployments.deploy(target.agentId, options);
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
          `the registry has no agent "${target.agentId}" (${which})${this.otherConnection(cr)}; deploy answered: ${errorMessage(err)}`,
        );
      }
      throw err;
    }
  }

  /**
   * Said when the deployment's Agent is registered through another Connection: an account
   * the deploy's own Connection may not reach, so its registry lacks the id.
   */
  private otherConnection(cr: AgentDeployment): string {
    const agent = referencedAgent(cr, this.agents);
    if (agent === undefined || connectionName(agent) === connectionName(cr)) return "";
    return `; Agent "${agent.metadata.name}" is registered through Connection "${connectionName(agent)}", this deployment deploys through "${connectionName(cr)}": if they reach different accounts, set spec.connectionRef.name to "${connectionName(agent)}"`;
  }

  /**
   * WaitingForSkill while a Skill resource of the namespace that makes one of spec.skills is
   * not Ready, as a Sandbox waits: apply order never matters, and a deploy naming a skill still
   * being made could be refused, and stall. A skill no Skill resource makes is the service's.
   */
  private waitForSkills(cr: AgentDeployment): void {
    waitForSkills(this.skills, cr, cr.spec.skills ?? []);
  }

  private remove(id: string): Promise<void> {
    return removeObject(this.handle.deployments, id, (key) => this.handle.client.deployments.delete(key), { get: (key) => this.handle.client.deployments.get(key) });
  }

  private statusAfterDeploy(cr: AgentDeployment, d: Deployment, target: Target): Partial<AgentDeploymentStatus> {
    return {
      ...statusOf(d),
      agentRevision: target.revision,
      optionsHash: optionsHash(cr),
      configHash: d.config_hash,
      redeployAt: cr.metadata.annotations?.[Annotations.redeployAt],
    };
  }
}

/** What a deployment that exists needs so that it runs the spec. */
export function planFor(cr: AgentDeployment, found: Deployment, target: Target): Action {
  if (found.registry_id !== undefined && found.registry_id !== target.agentId) {
    return { action: "replace", why: `the agent changed to ${target.agentId}` };
  }
  // No recorded hash (adopted, or recorded by an older operator): what runs is taken as
  // applied from this spec, and recorded; a later spec change replaces it.
  const applied = cr.status?.optionsHash;
  if (applied !== undefined && applied !== optionsHash(cr)) {
    return { action: "replace", why: `the deploy options in the spec changed (optionsHash ${applied} is now ${optionsHash(cr)})` };
  }
  const known = cr.status?.configHash;
  // One the user named with the annotation is taken as it is, changes made to it in the service
  // included: they are its owner's, and replacing it would delete it.
  const imported = cr.metadata.annotations?.[Annotations.externalId] === found.id;
  if (!imported && known !== undefined && found.config_hash !== undefined && found.config_hash !== known) {
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
  if (target.revision !== undefined && running !== undefined && running !== target.revision) {
    return { action: "redeploy", why: `the Agent changed (revision ${target.revision})` };
  }
  return { action: "none" };
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

/**
 * The service says the deployment failed. Not redeployed on the operator's own account: the
 * same image would most likely fail again, in a loop that hides why. A new revision of the
 * Agent redeploys it, as does the annotation.
 */
function failedCondition(id: string, mayUpdate: boolean): { reason: string; message: string; stalled: true } {
  const mend = mayUpdate
    ? `it is redeployed when its Agent changes, or on a new value of the annotation ${Annotations.redeployAt}`
    : "spec.managementPolicies leaves out Update, so the operator does not redeploy it: add Update, or redeploy it outside the operator";
  return { reason: "DeploymentFailed", message: `the service reports deployment ${id} as failed; ${mend}`, stalled: true };
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

/** The status fields that name a deployment, removed when it is gone and none replaced it. */
const DEPLOYMENT_GONE = { deploymentId: null, agentId: null, state: null, endpoint: null, endpointName: null, tier: null, agentRevision: null };

function detailsOf(d: Deployment): ConnectionDetails {
  const details: ConnectionDetails = { deploymentId: d.id };
  if (d.token) details.token = d.token;
  if (d.endpoint) details.endpoint = d.endpoint;
  if (d.endpoint_name) details.endpointName = d.endpoint_name;
  return details;
}

function describe(plan: Action): string {
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
