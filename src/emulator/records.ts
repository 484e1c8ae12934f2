// How the emulator stores each service object, and the wire view it answers with. Stored
// records keep what the service keeps but never sends (a pull secret's password, a VM's env,
// a deployment's options, instants as numbers); views are built per response, field by field,
// so a stored-only field can never leak into an answer.
import type {
  Agent,
  AgentManifest,
  AgentVM,
  Allocation,
  DeployOptions,
  Deployment,
  ImagePullSecret,
  Skill,
  Tool,
  UsageRecord,
} from "./wire.js";
import { rfc3339 } from "./util.js";

export interface StoredAgent extends Omit<Agent, "image_pull_secret"> {
  /** Stored in full; the password is never sent back. */
  image_pull_secret?: ImagePullSecret;
}

export interface StoredDeployment extends Omit<Deployment, "manifest"> {
  /** The agent's manifest at the last deploy or redeploy, if it had one (the view sends {} otherwise). */
  manifest?: AgentManifest;
  /** The deploy options as received (env included): kept, never sent. */
  options: DeployOptions;
  /** Emulator extra, never sent: 1, plus one per redeploy (so tests can count redeploys). */
  revision: number;
}

export interface StoredVM {
  id: string;
  state: string;
  tier: string;
  /** Not on the record: it scopes the VM list. */
  org_id: string;
  skills: string[];
  metadata: Record<string, string>;
  /** Kept, never sent. */
  env: Record<string, string>;
  /** The runtime's name as sent at allocation; kept, never sent. */
  secure_runtime?: string;
  endpoint: string;
  ws_url: string;
  token: string;
  ttl_seconds: number;
  allocatedAt: number;
  expiresAt: number;
}

/** A usage record with the org of its VM: the usage endpoints answer the caller's org only. */
export interface StoredUsage extends UsageRecord {
  /** Not on the record: it scopes the usage list and summary, as a VM's scopes the VM list. */
  org_id: string;
}

export type StoredSkill = Skill;

export type StoredTool = Tool;

/** An access client created through POST /compute/v1/access/clients. */
export interface StoredAccessClient {
  client_id: string;
  name: string;
  /** Hex SHA-256 of the secret: the secret itself is shown once, at creation. */
  secret_sha256: string;
  is_active: boolean;
  created_at: string;
}

const cloneManifest = (m: AgentManifest): AgentManifest => structuredClone(m);

/** The agent as the registry answers it: everything but the pull secret's password. */
export function agentView(a: StoredAgent): Agent {
  const view: Agent = {
    id: a.id,
    name: a.name,
    org_id: a.org_id,
    image: a.image,
    ...(a.author !== undefined && { author: a.author }),
    ...(a.description !== undefined && { description: a.description }),
    ...(a.version !== undefined && { version: a.version }),
    ...(a.endpoint !== undefined && { endpoint: a.endpoint }),
    ...(a.public_key !== undefined && { public_key: a.public_key }),
    capabilities: [...a.capabilities],
    metadata: { ...a.metadata },
    ...(a.manifest !== undefined && { manifest: cloneManifest(a.manifest) }),
    state: a.state,
    visibility: a.visibility,
    allowed_org_ids: [...a.allowed_org_ids],
    created_at: a.created_at,
    updated_at: a.updated_at,
  };
  if (a.image_pull_secret) view.image_pull_secret = { registry: a.image_pull_secret.registry, username: a.image_pull_secret.username };
  return view;
}

/** Exactly the record's fields: never the options (env) nor the emulator's revision. */
export function deploymentView(d: StoredDeployment): Deployment {
  return {
    id: d.id,
    name: d.name,
    registry_id: d.registry_id,
    image: d.image,
    endpoint: d.endpoint,
    endpoint_name: d.endpoint_name,
    config_hash: d.config_hash,
    // Every field of the record is always sent (SERVICE.md: exactly the seed's table): an agent
    // without a manifest deploys with an empty one.
    manifest: d.manifest !== undefined ? cloneManifest(d.manifest) : {},
    metadata: { ...d.metadata },
    skills: [...d.skills],
    state: d.state,
    tier: d.tier,
    token: d.token,
    created_at: d.created_at,
    updated_at: d.updated_at,
  };
}

/**
 * models.AgentVM. It carries the VM token (the published record has it); not env, org_id,
 * secure_runtime or the connection details (those are the allocation's and /endpoint's).
 * The emulator creates a VM when it allocates it, so created_at equals allocated_at.
 */
export function vmView(vm: StoredVM, releasedAt?: number): AgentVM {
  const view: AgentVM = {
    id: vm.id,
    state: vm.state,
    tier: vm.tier,
    skills: [...vm.skills],
    metadata: { ...vm.metadata },
    token: vm.token,
    ttl_seconds: vm.ttl_seconds,
    allocated_at: rfc3339(vm.allocatedAt),
    created_at: rfc3339(vm.allocatedAt),
    expires_at: rfc3339(vm.expiresAt),
  };
  if (releasedAt !== undefined) view.released_at = rfc3339(releasedAt);
  return view;
}

export function allocationView(vm: StoredVM): Allocation {
  return {
    vm_id: vm.id,
    state: vm.state,
    tier: vm.tier,
    skills_loaded: [...vm.skills],
    endpoint: vm.endpoint,
    ws_url: vm.ws_url,
    token: vm.token,
    expires_at: rfc3339(vm.expiresAt),
  };
}

export function skillView(s: StoredSkill): Skill {
  return {
    name: s.name,
    content: s.content,
    ...(s.description !== undefined && { description: s.description }),
    resources: { ...s.resources },
    content_hash: s.content_hash,
    created_at: s.created_at,
    updated_at: s.updated_at,
  };
}

export const toolView = (t: StoredTool): Tool => ({ id: t.id, name: t.name, category: t.category, description: t.description, created_at: t.created_at });

export const usageView = (u: StoredUsage): UsageRecord => ({
  vm_id: u.vm_id,
  tier: u.tier,
  started_at: u.started_at,
  ended_at: u.ended_at,
  duration_seconds: u.duration_seconds,
  reason: u.reason,
});
