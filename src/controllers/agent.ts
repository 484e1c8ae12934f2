// Agent: an agent in the registry. Every agent the operator creates carries the crash-safety
// marker in its metadata, so an agent created by a process that died before writing status is
// found again (inventory by marker, or the registry's 409 on the name) instead of duplicated.
import { createHash } from "node:crypto";
import { Annotations, MARKER_KEY } from "../api/names.js";
import type { Agent, AgentStatus } from "../api/index.js";
import { StalledError } from "../managed/errors.js";
import type { ActionResult, Connector, ExternalClient, Observation } from "../managed/external.js";
import {
  isConflict,
  isNotFound,
  isOutcomeUnknown,
  type Agent as RegistryAgent,
  type CreateAgentRequest,
  type UpdateAgentRequest,
} from "../service/index.js";
import { deepEqual } from "../runtime/status.js";
import type { ConnectionPool, ServiceHandle } from "./connection-pool.js";
import { newest } from "./marker.js";
import type { ObjectStore } from "./object-store.js";

export function agentExternalId(cr: Agent): string | undefined {
  return cr.metadata.annotations?.[Annotations.externalId] ?? cr.status?.agentId;
}

/**
 * What a deployment runs: a change of these redeploys the AgentDeployments that use the agent.
 * Description, capabilities and metadata are registry bookkeeping and do not.
 */
export function agentRevision(cr: Agent): string {
  const { image, version, manifest, endpoint } = cr.spec;
  return createHash("sha256").update(JSON.stringify([image, version ?? null, manifest ?? null, endpoint ?? null])).digest("hex").slice(0, 16);
}

export class AgentConnector implements Connector<Agent> {
  constructor(
    private readonly pool: ConnectionPool,
    private readonly store: ObjectStore,
  ) {}

  async connect(cr: Agent): Promise<ExternalClient<Agent>> {
    const handle = this.pool.forResource(cr.metadata.namespace, cr.spec.connectionRef, {
      deleting: cr.metadata.deletionTimestamp !== undefined,
    });
    return new AgentClient(handle, this.store);
  }
}

/** The updatable fields as the spec wants them; fields the spec leaves out are not managed. */
function desiredUpdatable(cr: Agent): UpdateAgentRequest {
  const { spec } = cr;
  const out: UpdateAgentRequest = {
    image: spec.image,
    metadata: { ...spec.metadata, [MARKER_KEY]: cr.metadata.uid },
  };
  if (spec.description !== undefined) out.description = spec.description;
  if (spec.version !== undefined) out.version = spec.version;
  if (spec.endpoint !== undefined) out.endpoint = spec.endpoint;
  if (spec.publicKey !== undefined) out.public_key = spec.publicKey;
  if (spec.capabilities !== undefined) out.capabilities = spec.capabilities;
  if (spec.manifest !== undefined) out.manifest = spec.manifest;
  return out;
}

const FIELD_NAMES: Record<string, string> = {
  image: "image",
  description: "description",
  version: "version",
  endpoint: "endpoint",
  public_key: "publicKey",
  capabilities: "capabilities",
  metadata: "metadata",
  manifest: "manifest",
};

class AgentClient implements ExternalClient<Agent> {
  constructor(
    private readonly handle: ServiceHandle,
    private readonly store: ObjectStore,
  ) {}

  async observe(cr: Agent): Promise<Observation<AgentStatus>> {
    const found = await this.find(cr);
    if (found === undefined) return { exists: false, upToDate: false };
    const patch = this.patchFor(cr, found);
    const differences = Object.keys(patch).map((k) => `spec.${FIELD_NAMES[k] ?? k}`);
    const upToDate = differences.length === 0;
    return {
      exists: true,
      upToDate,
      differences,
      status: { ...statusOf(found), ...(upToDate ? { revision: agentRevision(cr) } : {}) },
    };
  }

  async create(cr: Agent): Promise<ActionResult<AgentStatus>> {
    const orgId = this.orgId(cr);
    const body: CreateAgentRequest = { name: cr.spec.name ?? cr.metadata.name, org_id: orgId, ...desiredUpdatable(cr) } as CreateAgentRequest;
    if (cr.spec.author !== undefined) body.author = cr.spec.author;
    if (cr.spec.imagePullSecretRef) {
      const ref = cr.spec.imagePullSecretRef.name;
      const s = this.store.secretKeys(cr.metadata.namespace, ref, "spec.imagePullSecretRef.name", ["registry", "username", "password"] as const);
      body.image_pull_secret = { registry: s.registry, username: s.username, password: s.password };
    }
    try {
      const created = await this.handle.client.agents.create(body);
      this.handle.agents.put(created);
      return { status: { ...statusOf(created), revision: agentRevision(cr) } };
    } catch (err) {
      if (isOutcomeUnknown(err)) this.handle.agents.invalidate();
      if (!isConflict(err)) throw err;
      return this.adoptAfterConflict(cr, body.name, orgId);
    }
  }

  async update(cr: Agent, observed: Observation<AgentStatus>): Promise<ActionResult<AgentStatus>> {
    const id = observed.status?.agentId;
    const found = id === undefined ? undefined : this.handle.agents.get(id);
    if (id === undefined || found === undefined) throw new Error("agent vanished between observe and update; retrying");
    const updated = await this.handle.client.agents.update(id, this.patchFor(cr, found));
    this.handle.agents.put(updated);
    return { status: { ...statusOf(updated), revision: agentRevision(cr) } };
  }

  async delete(cr: Agent): Promise<void> {
    const id = agentExternalId(cr) ?? (await this.find(cr))?.id;
    if (id === undefined) return;
    try {
      await this.handle.client.agents.delete(id);
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    this.handle.agents.remove(id);
  }

  /** By id (status or adoption annotation), else by this resource's marker. */
  private async find(cr: Agent): Promise<RegistryAgent | undefined> {
    const inventory = this.handle.agents;
    await inventory.ensureFresh();
    const id = agentExternalId(cr);
    if (id !== undefined) {
      const cached = inventory.get(id);
      if (cached !== undefined) return cached;
      // Not in the snapshot: confirm with one GET before concluding it is gone.
      try {
        const got = await this.handle.client.agents.get(id);
        inventory.put(got);
        return got;
      } catch (err) {
        if (isNotFound(err)) return undefined;
        throw err;
      }
    }
    return newest(inventory.findByMarker(cr.metadata.uid));
  }

  private async adoptAfterConflict(cr: Agent, name: string, orgId: string): Promise<ActionResult<AgentStatus>> {
    // The name is taken in the org. If it is our own agent (an earlier create whose answer
    // was lost), adopt it; otherwise the user has to choose.
    await this.handle.agents.refresh();
    const ours = newest(this.handle.agents.findByMarker(cr.metadata.uid));
    if (ours !== undefined) {
      return {
        status: statusOf(ours),
        event: { reason: "Adopted", message: `found agent ${ours.id} created earlier for this resource; adopted it` },
      };
    }
    const other = [...this.handle.agents.values()].find((a) => a.name === name && (a.org_id ?? orgId) === orgId);
    const hint = other ? ` (agent ${other.id})` : "";
    throw new StalledError(
      "NameTaken",
      `the agent name "${name}" is already taken in org "${orgId}" by an agent this resource does not manage${hint}; choose another spec.name, or adopt it with the annotation ${Annotations.externalId}: <id>`,
    );
  }

  /** The fields to send so the registry matches the spec (empty when it already does). */
  private patchFor(cr: Agent, found: RegistryAgent): UpdateAgentRequest {
    const desired = desiredUpdatable(cr);
    const patch: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(desired)) {
      if (!deepEqual(v, (found as unknown as Record<string, unknown>)[k])) patch[k] = v;
    }
    return patch as UpdateAgentRequest;
  }

  private orgId(cr: Agent): string {
    const orgId = cr.spec.orgId ?? this.handle.connection.spec.orgId;
    if (!orgId) {
      throw new StalledError(
        "OrgIdMissing",
        `spec.orgId is not set and Connection "${this.handle.connection.metadata.name}" has no spec.orgId; set one of them`,
      );
    }
    return orgId;
  }
}

function statusOf(a: RegistryAgent): Partial<AgentStatus> {
  return {
    agentId: a.id,
    state: a.state,
    visibility: a.visibility,
    allowedOrgIds: a.allowed_org_ids,
    createdAt: a.created_at,
    updatedAt: a.updated_at,
  };
}

