// Agent: an agent in the registry. Every agent the operator creates carries the crash-safety
// marker in its metadata, so an agent created by a process that died before writing status is
// found again (inventory by marker, or the registry's 409 on the name) instead of duplicated.
import { createHash } from "node:crypto";
import { Annotations, MARKER_KEY, kindNames } from "../api/names.js";
import type { Agent, AgentStatus, Connection } from "../api/index.js";
import { FailedAfterChange, NotReadyError, StalledError } from "../managed/errors.js";
import { managementOf } from "../managed/management-policies.js";
import type { ActionResult, ExternalClient, Observation, Planned } from "../managed/external.js";
import {
  isConflict,
  isOutcomeUnknown,
  type Agent as RegistryAgent,
  type CreateAgentRequest,
  type UpdateAgentRequest,
} from "../service/index.js";
import { deepEqual } from "../runtime/status.js";
import type { ServiceHandle } from "./connection-pool.js";
import { fingerprint, referrers, requestOf, type KindContext, type ManagedKind } from "./kind.js";
import { changeObserved, findOwn, newest, removeObject } from "./marker.js";
import type { ObjectStore } from "./object-store.js";

export function agentExternalId(cr: Agent): string | undefined {
  return cr.metadata.annotations?.[Annotations.externalId] ?? cr.status?.agentId;
}

/**
 * What a deployment runs: a change of these redeploys the AgentDeployments that use the agent.
 * Description, capabilities and metadata are registry bookkeeping and do not. The manifest is
 * hashed with its keys in the order the API server gives them (Go sorts a map's keys by their
 * bytes, at every depth), whatever order they were written in: a manifest file (the planner's
 * input) keeps the author's. Objects are rebuilt with their keys inserted in that order and then
 * JSON.stringify'd, so that an object read from the API server hashes exactly as it did before
 * (revisions recorded in status stay the same), integer-like keys (which a JavaScript object
 * puts first) included.
 */
export function agentRevision(cr: Agent): string {
  const goOrder = (a: string, b: string) => Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"));
  const sorted = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(sorted);
    if (typeof v !== "object" || v === null) return v;
    // No prototype: a "__proto__" key is then a key like any other, as JSON.parse makes it.
    const out = Object.create(null) as Record<string, unknown>;
    for (const k of Object.keys(v).sort(goOrder)) out[k] = sorted((v as Record<string, unknown>)[k]);
    return out;
  };
  const { image, version, manifest, endpoint } = cr.spec;
  return createHash("sha256").update(JSON.stringify([image, version ?? null, sorted(manifest ?? null), endpoint ?? null])).digest("hex").slice(0, 16);
}

/**
 * How long after a create whose answer was lost a 409 whose taker the registry's list does not
 * show is put down to that create (the list lagging) and retried, rather than a NameTaken.
 */
const UNCERTAIN_CREATE_MS = 5 * 60_000;

/** Agents in the registry; an image pull Secret is read once, at creation. */
export function agents(ctx: KindContext): ManagedKind<Agent, AgentPlan> {
  /** Agents (CR uid) whose create's answer this process lost, and when. */
  const uncertain = new Map<string, number>();
  return {
    names: kindNames.agent,
    controller: "agent",
    inventory: "agents",
    externalId: agentExternalId,
    connectionSecret: false,
    // The image pull Secret goes with the create: fixing it is a fix of a refused agent.
    inputs: (cr) => (cr.spec.imagePullSecretRef ? fingerprint(ctx.store.secretData(cr.metadata.namespace, cr.spec.imagePullSecretRef.name, "spec.imagePullSecretRef.name")) : undefined),
    client: (handle) => new AgentClient(handle, ctx.store, uncertain, () => ctx.now().getTime()),
    watches(controller, own) {
      const usingSecret = referrers(own, "imagePullSecret", (a) => [a.spec.imagePullSecretRef?.name]);
      // Only an agent still to be created reads the Secret.
      controller.watch(ctx.secrets, (s) =>
        usingSecret(s)
          .filter((a) => a.status?.agentId === undefined)
          .map(requestOf),
      );
      own.on("delete", (a) => uncertain.delete(a.metadata.uid));
    },
  };
}

/** The registry agent that holds `name` in org `orgId` (one listed without an org is taken as the org's), if the list shows one. */
export function agentNamed(agents: Iterable<RegistryAgent>, name: string, orgId: string): RegistryAgent | undefined {
  for (const a of agents) if (a.name === name && (a.org_id ?? orgId) === orgId) return a;
  return undefined;
}

/** The updatable fields as the spec wants them; fields the spec leaves out are not managed. */
function desiredUpdatable(cr: Agent): UpdateAgentRequest {
  const { spec } = cr;
  const out: UpdateAgentRequest = {};
  if (spec.image !== undefined) out.image = spec.image;
  // The crash-safety marker goes on agents this resource may create. An imported one (no
  // Create) is not marked: without Update the marker would read as drift forever.
  const marker: Record<string, string> = managementOf(cr.spec).create ? { [MARKER_KEY]: cr.metadata.uid } : {};
  if (spec.metadata !== undefined || MARKER_KEY in marker) out.metadata = { ...spec.metadata, ...marker };
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

/** The agent to update and the fields to send: those of the spec that differ from the registry. */
export interface AgentPlan {
  id: string;
  patch: UpdateAgentRequest;
}

class AgentClient implements ExternalClient<Agent, AgentPlan> {
  constructor(
    private readonly handle: ServiceHandle,
    private readonly store: ObjectStore,
    private readonly uncertain: Map<string, number>,
    private readonly now: () => number,
  ) {}

  async observe(cr: Agent): Promise<Observation<AgentStatus, AgentPlan>> {
    const found = await this.find(cr);
    if (found === undefined) return { exists: false, upToDate: false };
    const patch = agentPatch(cr, found);
    const differences = Object.keys(patch).map((k) => `spec.${FIELD_NAMES[k] ?? k}`);
    const upToDate = differences.length === 0;
    return {
      exists: true,
      upToDate,
      differences,
      status: { ...statusOf(found), ...(upToDate ? { revision: agentRevision(cr) } : {}) },
      plan: { id: found.id, patch },
    };
  }

  /** NameTaken stands while the registry's list (as last read) shows another agent of the name in the org. */
  refusalStands(cr: Agent, reason: string): boolean {
    if (reason !== "NameTaken") return true;
    const [name, orgId] = [cr.spec.name ?? cr.metadata.name, this.orgId(cr)];
    return agentNamed(this.handle.agents.values(), name, orgId) !== undefined;
  }

  async create(cr: Agent): Promise<ActionResult<AgentStatus>> {
    const orgId = this.orgId(cr);
    // public_key is updatable but not in models.CreateAgentRequest: set by an update after it.
    const { public_key: publicKey, ...updatable } = desiredUpdatable(cr);
    const body: CreateAgentRequest = { name: cr.spec.name ?? cr.metadata.name, org_id: orgId, ...updatable } as CreateAgentRequest;
    if (cr.spec.author !== undefined) body.author = cr.spec.author;
    const pullSecret = imagePullSecretOf(cr, this.store);
    if (pullSecret !== undefined) body.image_pull_secret = pullSecret;
    try {
      let created = await this.handle.client.agents.create(body);
      this.handle.agents.put(created);
      if (publicKey !== undefined) {
        try {
          this.handle.agents.put((created = await this.handle.client.agents.update(created.id, { public_key: publicKey })));
        } catch (err) {
          // The agent exists: status must say so (its id), and not that it matches the spec.
          // The failure is the reconcile's: a refusal stalls, anything else is retried, and
          // the next pass sees the key differ and sends it again.
          throw new FailedAfterChange(err, { ...statusOf(created) }, `agent ${created.id} was created, and its public key (spec.publicKey) could not be set`);
        }
      }
      return { status: { ...statusOf(created), revision: agentRevision(cr) } };
    } catch (err) {
      if (isOutcomeUnknown(err)) {
        this.handle.agents.invalidate();
        this.uncertain.set(cr.metadata.uid, this.now());
      }
      if (!isConflict(err)) throw err;
      return this.adoptAfterConflict(cr, body.name, orgId);
    }
  }

  async update(cr: Agent, { plan }: Planned<AgentStatus, AgentPlan>): Promise<ActionResult<AgentStatus>> {
    const updated = await changeObserved(this.handle.agents, plan.id, `agent ${plan.id}`, () => this.handle.client.agents.update(plan.id, plan.patch));
    this.handle.agents.put(updated);
    return { status: { ...statusOf(updated), revision: agentRevision(cr) } };
  }

  /**
   * The agent status names (or the annotation), and every agent carrying this resource's
   * marker: one created again after the named one vanished, whose status write was lost,
   * would otherwise be left holding the name. After a create whose outcome was unknown, on a
   * list read now (the contract): the look made LANDING_MS after it is for an agent that
   * landed since the last one, which a snapshot up to a sync period old does not show.
   * Otherwise on the snapshot: a namespace of thousands of Agents deleted at once would read
   * the whole registry once per few deletions.
   */
  async delete(cr: Agent, opts: { uncertainCreate?: boolean } = {}): Promise<void> {
    await (opts.uncertainCreate === true ? this.handle.agents.refresh() : this.handle.agents.ensureFresh());
    await this.handle.agents.readSinceArrival(cr.metadata.uid); // moved in (sharding): its previous owner may have made one since
    const ids = new Set(this.handle.agents.findByMarker(cr.metadata.uid).map((a) => a.id));
    const id = agentExternalId(cr);
    if (id !== undefined) ids.add(id);
    for (const each of ids) await removeObject(this.handle.agents, each, (key) => this.handle.client.agents.delete(key), { get: (key) => this.handle.client.agents.get(key) });
  }

  /**
   * By id (status or adoption annotation), else by this resource's marker. An agent named in
   * status that is gone is created again (a new agent, with the marker).
   */
  private async find(cr: Agent): Promise<RegistryAgent | undefined> {
    const { found } = await findOwn(cr, agentExternalId(cr), {
      inventory: this.handle.agents,
      get: (id) => this.handle.client.agents.get(id),
      adoptAfterLoss: false,
    });
    return found;
  }

  private async adoptAfterConflict(cr: Agent, name: string, orgId: string): Promise<ActionResult<AgentStatus>> {
    // The name is taken in the org. If it is our own agent (an earlier create whose answer
    // was lost), adopt it; otherwise the user has to choose.
    await this.handle.agents.refresh();
    const ours = newest(this.handle.agents.findByMarker(cr.metadata.uid));
    const lostAt = this.uncertain.get(cr.metadata.uid);
    if (ours !== undefined) {
      this.uncertain.delete(cr.metadata.uid);
      return {
        status: statusOf(ours),
        event: { reason: "Adopted", message: `found agent ${ours.id} created earlier for this resource; adopted it` },
      };
    }
    const other = agentNamed(this.handle.agents.values(), name, orgId);
    if (other === undefined && lostAt !== undefined && this.now() - lostAt < UNCERTAIN_CREATE_MS) {
      // The list does not show what took the name (it lags the registry): likely the create
      // this process lost the answer of. Not a refusal to stall on and tell the user to rename
      // over: tried again, with backoff, on a list read again, for a while.
      this.handle.agents.invalidate();
      throw new Error(`the agent name "${name}" is taken in org "${orgId}" (409), but the registry's list does not show by which agent yet; looking again`);
    }
    this.uncertain.delete(cr.metadata.uid);
    const hint = other ? ` (agent ${other.id})` : "";
    throw new StalledError(
      "NameTaken",
      `the agent name "${name}" is already taken in org "${orgId}" by an agent this resource does not manage${hint}; delete that agent from the registry (this resource creates its own once the registry's list no longer shows it), adopt it with the annotation ${Annotations.externalId}: <id>, or create this resource again with another spec.name (it is immutable)`,
    );
  }

  private orgId(cr: Agent): string {
    return agentOrgId(cr, this.handle.connection);
  }
}

/** The fields to send so the registry matches the spec (empty when it already does). */
export function agentPatch(cr: Agent, found: RegistryAgent): UpdateAgentRequest {
  const desired = desiredUpdatable(cr);
  // Without Create the marker is not this resource's to set, nor to take off: one the registry
  // holds (set while the policies were "*", or another resource's) is kept as it is. Compared,
  // it read as drift in spec.metadata, which cannot name the key, and Update sent it away.
  const marker = found.metadata?.[MARKER_KEY];
  if (desired.metadata !== undefined && !(MARKER_KEY in desired.metadata) && marker !== undefined) desired.metadata = { ...desired.metadata, [MARKER_KEY]: marker };
  const patch: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(desired)) {
    const asAnswered = k === "manifest" ? manifestAsAnswered : emptyAsAbsent;
    if (!deepEqual(asAnswered(v), asAnswered((found as unknown as Record<string, unknown>)[k]))) patch[k] = v;
  }
  // spec.metadata unset: only the marker is managed, and the registry's other keys (another
  // team's, on an agent taken over) are sent back as they are.
  if (cr.spec.metadata === undefined && desired.metadata !== undefined) {
    const theirs = found.metadata ?? {};
    if (Object.entries(desired.metadata).every(([k, v]) => theirs[k] === v)) delete patch["metadata"];
    else patch["metadata"] = { ...theirs, ...desired.metadata };
  }
  return patch as UpdateAgentRequest;
}

/**
 * An empty value ("", [], {}) or null as absent: a spec that clears a field (description: "",
 * capabilities: []) matches a registry that leaves empty fields out of its answers (a Go
 * server's omitempty) or sends null, rather than be sent again at every resync. Only at the
 * top: what a map holds (metadata) is kept as given, empty values too.
 */
function emptyAsAbsent(v: unknown): unknown {
  if (v === null || v === "") return undefined;
  if (Array.isArray(v)) return v.length === 0 ? undefined : v;
  if (typeof v === "object" && Object.keys(v as object).length === 0) return undefined;
  return v;
}

/** The fields of a struct (a Go server's, with omitempty), empty ones left out; absent if none is left. */
function structAsAnswered(v: unknown, field: (key: string, value: unknown) => unknown = (_k, x) => emptyAsAbsent(x)): unknown {
  if (v === null || typeof v !== "object" || Array.isArray(v)) return emptyAsAbsent(v);
  const kept = Object.entries(v as Record<string, unknown>).flatMap(([k, x]) => {
    const normal = field(k, x);
    return normal === undefined ? [] : [[k, normal] as const];
  });
  return kept.length === 0 ? undefined : Object.fromEntries(kept);
}

/**
 * The manifest as the registry answers it: models.AgentManifest and its skills
 * (models.ManifestSkill) are structs, so their empty fields may be left out
 * (skills[].inputModes: []); the free-form objects in it (input_schema, runtime...) are kept
 * as given, empty values inside them too.
 */
function manifestAsAnswered(v: unknown): unknown {
  return structAsAnswered(v, (k, x) => (k === "skills" && Array.isArray(x) && x.length > 0 ? x.map((skill) => structAsAnswered(skill)) : emptyAsAbsent(x)));
}

function statusOf(a: RegistryAgent): Partial<AgentStatus> {
  return {
    agentId: a.id,
    name: a.name,
    orgId: a.org_id,
    image: a.image,
    version: a.version,
    state: a.state,
    visibility: a.visibility,
    allowedOrgIds: a.allowed_org_ids,
    createdAt: a.created_at,
    updatedAt: a.updated_at,
  };
}

/**
 * The org an Agent is registered in: its own, else its Connection's; neither stalls it. An
 * empty one (a template's empty value, stored before the CRD refused it at creation) is unset.
 */
export function agentOrgId(cr: Agent, connection: Pick<Connection, "metadata" | "spec">): string {
  const orgId = cr.spec.orgId || connection.spec.orgId;
  if (!orgId) {
    throw new StalledError("OrgIdMissing", `spec.orgId is not set and Connection "${connection.metadata.name}" has no spec.orgId; set one of them`);
  }
  return orgId;
}

/** The image pull credentials an Agent's create sends, from spec.imagePullSecretRef (none without it). */
export function imagePullSecretOf(cr: Agent, store: ObjectStore): { registry: string; username: string; password: string } | undefined {
  const ref = cr.spec.imagePullSecretRef?.name;
  if (ref === undefined) return undefined;
  const keys = ["registry", "username", "password"] as const;
  const s = store.secretKeys(cr.metadata.namespace, ref, "spec.imagePullSecretRef.name", keys);
  // An empty value would reach the registry as no credential at all, refused in its words.
  const empty = keys.filter((k) => s[k].trim() === "");
  if (empty.length > 0) {
    throw new NotReadyError("SecretKeyMissing", `Secret "${ref}" (spec.imagePullSecretRef.name) has an empty ${empty.map((k) => `"${k}"`).join(", ")}: set ${empty.length > 1 ? "them" : "it"}`);
  }
  return { registry: s.registry, username: s.username, password: s.password };
}
