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
  manifest?: JsonObject;
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
  manifest?: JsonObject;
  metadata?: Record<string, string>;
  version?: string;
}

/** Any subset of the updatable fields. */
export interface UpdateAgentRequest {
  capabilities?: string[];
  description?: string;
  endpoint?: string;
  image?: string;
  manifest?: JsonObject;
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

export interface Deployment {
  id: string;
  agent_id: string;
  name?: string;
  state?: string;
  tier?: string;
  skills?: string[];
  env?: Record<string, string>;
  metadata?: Record<string, string>;
  endpoint?: string;
  endpoint_name?: string;
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
  secure_runtime?: boolean;
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

export interface AgentVM {
  vm_id: string;
  state: VMState;
  tier: string;
  org_id?: string;
  skills_loaded?: string[];
  metadata?: Record<string, string>;
  secure_runtime?: boolean;
  endpoint?: string;
  ws_url?: string;
  ttl_seconds?: number;
  allocated_at?: string;
  expires_at?: string;
  released_at?: string;
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
