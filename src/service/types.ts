// Wire types of the Agent Registry and Compute Service (see shared/design/SERVICE.md).
// Field names are the service's snake_case. Every field the service may omit is optional:
// the operator must tolerate partial records, and unknown fields pass through untouched.

/** Free-form JSON object as the service sends and accepts it. */
export type JsonObject = { [key: string]: JsonValue };
export type JsonValue = string | number | boolean | null | JsonValue[] | JsonObject;

// ---------------------------------------------------------------------------------------
// Registry (/registry/v1)

export type AgentState =
  | "registered"
  | "deploying"
  | "running"
  | "active"
  | "idle"
  | "sleeping"
  | "stopped"
  | "failed"
  | (string & {});

export type Visibility = "private" | "public" | (string & {});

export interface ImagePullSecret {
  registry: string;
  username: string;
  password: string;
}

/** The agent's manifest (published models.AgentManifest): a fixed set of keys, in the registry's spelling. */
export interface AgentManifest {
  name?: string;
  description?: string;
  version?: string;
  url?: string;
  authentication?: JsonObject;
  capabilities?: JsonObject;
  input_schema?: JsonObject;
  output_schema?: JsonObject;
  runtime?: JsonObject;
  skills?: ManifestSkill[];
}

export interface ManifestSkill {
  id?: string;
  inputModes?: string[];
  outputModes?: string[];
}

export interface Agent {
  id: string;
  name: string;
  org_id?: string;
  image?: string;
  author?: string;
  description?: string;
  version?: string;
  endpoint?: string;
  public_key?: string;
  capabilities?: string[];
  metadata?: Record<string, string>;
  manifest?: AgentManifest;
  state?: AgentState;
  visibility?: Visibility;
  allowed_org_ids?: string[];
  created_at?: string;
  updated_at?: string;
}

export interface CreateAgentRequest {
  name: string;
  org_id: string;
  image: string;
  author?: string;
  capabilities?: string[];
  description?: string;
  endpoint?: string;
  image_pull_secret?: ImagePullSecret;
  manifest?: AgentManifest;
  metadata?: Record<string, string>;
  version?: string;
}

/** Any subset of the updatable fields. */
export interface UpdateAgentRequest {
  capabilities?: string[];
  description?: string;
  endpoint?: string;
  image?: string;
  manifest?: AgentManifest;
  metadata?: Record<string, string>;
  name?: string;
  public_key?: string;
  state?: AgentState;
  version?: string;
}

export interface ListAgentsQuery {
  author?: string;
  status?: string;
  limit?: number;
  offset?: number;
}

export interface AgentList {
  agents: Agent[];
  total: number;
}

// ---------------------------------------------------------------------------------------
// Deployments (/compute/v1/deployments)

/**
 * Deploy options are not specified by the service. Known keys are typed; unknown keys are
 * passed through unchanged.
 */
export interface DeployOptions {
  name?: string;
  tier?: string;
  skills?: string[];
  env?: Record<string, string>;
  metadata?: Record<string, string>;
  endpoint_name?: string;
  [key: string]: JsonValue | undefined;
}

/**
 * The deployment record (deploy, list, get, stop, redeploy). It does NOT echo the deploy
 * options back (no `env`): what was applied is known only to whoever applied it, so the
 * operator remembers a hash of its options and watches the service's `config_hash`.
 */
export interface Deployment {
  id: string;
  /** The registry agent's id (not `agent_id`). */
  registry_id?: string;
  name?: string;
  image?: string;
  state?: string;
  tier?: string;
  skills?: string[];
  metadata?: Record<string, string>;
  manifest?: JsonObject;
  endpoint?: string;
  endpoint_name?: string;
  /** The service's hash of the deployment's configuration: changes when someone reconfigures it. */
  config_hash?: string;
  /** A credential: goes to a Secret, never to status or logs. */
  token?: string;
  created_at?: string;
  updated_at?: string;
  [key: string]: JsonValue | undefined;
}

// ---------------------------------------------------------------------------------------
// Agent VMs (/compute/v1/vms)

export type VMState = "allocated" | "released" | "expired" | "terminated" | (string & {});

export interface AllocateVMRequest {
  tier: string;
  env?: Record<string, string>;
  metadata?: Record<string, string>;
  org_id?: string;
  /** Names a runtime (a string, not a flag); its values are not published, so it is passed through. */
  secure_runtime?: string;
  skills?: string[];
  ttl_seconds?: number;
}

/** The answer to allocate: the VM plus its connection details. */
export interface Allocation {
  vm_id: string;
  state: VMState;
  tier: string;
  skills_loaded?: string[];
  endpoint?: string;
  ws_url?: string;
  /** A credential: goes to a Secret, never to status or logs. */
  token?: string;
  expires_at?: string;
}

/**
 * The VM record (get, list, renew, release): a different shape from the allocation. Its id
 * field is `id`, it names its skills `skills`, and it has no endpoint or ws_url (those come
 * from the allocation, or from GET /vms/{id}/endpoint).
 */
export interface AgentVM {
  id: string;
  state: VMState;
  tier?: string;
  skills?: string[];
  metadata?: Record<string, string>;
  /** A credential: goes to a Secret, never to status or logs. */
  token?: string;
  ttl_seconds?: number;
  allocated_at?: string;
  created_at?: string;
  expires_at?: string;
  released_at?: string;
}

/** One event of a server-sent event stream (execute's answer). */
export interface ServerSentEvent {
  event: string;
  data: string;
}

export interface ListVMsQuery {
  state?: string;
  tier?: string;
  limit?: number;
  offset?: number;
}

// ---------------------------------------------------------------------------------------
// Skills (/compute/v1/skills)

export interface SkillRequest {
  name: string;
  content: string;
  description?: string;
  /** File name -> content, written under /workspace/skills/<name>/ on the VM. */
  resources?: Record<string, string>;
}

export interface Skill {
  name: string;
  content?: string;
  description?: string;
  resources?: Record<string, string>;
  content_hash?: string;
  created_at?: string;
  updated_at?: string;
}

// ---------------------------------------------------------------------------------------
// Usage and access clients

export interface UsageQuery {
  workspaceId: string;
  environmentId: string;
  /** YYYY-MM-DD; the service defaults to 30 days ago. */
  from?: string;
  /** YYYY-MM-DD; the service defaults to today. */
  to?: string;
  tier?: string;
}

export interface UsageRecord {
  vm_id: string;
  tier: string;
  started_at: string;
  ended_at: string;
  duration_seconds: number;
  reason: string;
}

/** The VM pool's configuration (GET /compute/v1/pool/config); only what the operator reads is typed. */
export interface PoolConfig {
  /** The longest ttl_seconds an allocation or a renewal may ask for. */
  max_vm_ttl_seconds?: number;
}

export interface UsageSummary {
  period_start: string;
  period_end: string;
  total_seconds: number;
  vm_count: number;
  by_tier: Record<string, number>;
}

export interface AccessClient {
  client_id: string;
  name: string;
  is_active: boolean;
  created_at: string;
}

// ---------------------------------------------------------------------------------------
// Auth

export interface TokenResponse {
  access_token: string;
  /** Seconds; absent means 900. */
  expires_in?: number;
  token_type?: string;
}

export type Credentials =
  | { apiKey: string }
  | { clientId: string; clientSecret: string };

/** Error bodies: compute `{code, error_code, message}`, registry `{error, message}`. */
export interface ComputeErrorBody {
  code?: number;
  error_code?: string;
  message?: string;
}
export interface RegistryErrorBody {
  error?: string;
  message?: string;
}
