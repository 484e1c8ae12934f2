// The emulator's own wire records: what goes over HTTP, written from the service's published
// descriptions (compute-api.json, agent-registry-api.json) and shared/design/SERVICE.md, which
// wins where they disagree (the Deployment record). The emulator stands for the service, so it
// must not borrow the operator's client types (src/service): a client bug copied into shared
// types would be invisible to tests that run the client against this emulator.
//
// Field names are the service's snake_case. A field marked optional is one the emulator
// omits in some answers (e.g. `released_at` before release); everything else is always sent.

/** Any JSON value / object, as request bodies arrive. */
export type JsonValue = string | number | boolean | null | JsonValue[] | JsonObject;
export type JsonObject = { [key: string]: JsonValue };

// ---------------------------------------------------------------------------------------
// Error bodies (published models.ErrorResponse of each API)

/** Compute (and any non-registry path): `code` repeats the HTTP status. */
export interface ComputeErrorBody {
  code: number;
  error_code: string;
  message: string;
}

/** Registry and the token service. */
export interface RegistryErrorBody {
  error: string;
  message: string;
}

// ---------------------------------------------------------------------------------------
// Token service (POST {auth_url}/token)

export interface TokenResponse {
  access_token: string;
  token_type: "Bearer";
  /** Seconds; the `omitExpiresIn` knob leaves it out (clients must then assume 900). */
  expires_in?: number;
}

// ---------------------------------------------------------------------------------------
// Registry (/registry/v1): models.Agent, models.AgentManifest, models.Tool, ...

/** models.ImagePullSecret: no field is required. */
export interface ImagePullSecret {
  registry?: string;
  username?: string;
  password?: string;
}

/** models.ManifestSkill. The camelCase keys are the published ones. */
export interface ManifestSkill {
  id?: string;
  inputModes?: string[];
  outputModes?: string[];
}

/** models.AgentManifest: a closed struct on the (Go) service, so other keys are dropped. */
export interface AgentManifest {
  authentication?: JsonObject;
  capabilities?: JsonObject;
  description?: string;
  input_schema?: JsonObject;
  name?: string;
  output_schema?: JsonObject;
  runtime?: JsonObject;
  skills?: ManifestSkill[];
  url?: string;
  version?: string;
}

/** models.Agent as answered: the pull secret without its password. */
export interface Agent {
  id: string;
  name: string;
  org_id: string;
  image: string;
  author?: string;
  description?: string;
  version?: string;
  endpoint?: string;
  public_key?: string;
  capabilities: string[];
  metadata: Record<string, string>;
  manifest?: AgentManifest;
  state: string;
  visibility: string;
  allowed_org_ids: string[];
  image_pull_secret?: Omit<ImagePullSecret, "password">;
  created_at: string;
  updated_at: string;
}

/** models.CreateAgentRequest. */
export interface CreateAgentRequest {
  image: string;
  name: string;
  org_id: string;
  author?: string;
  capabilities?: string[];
  description?: string;
  endpoint?: string;
  image_pull_secret?: ImagePullSecret;
  manifest?: AgentManifest;
  metadata?: Record<string, string>;
  version?: string;
}

/** models.UpdateAgentRequest: any subset. */
export interface UpdateAgentRequest {
  capabilities?: string[];
  description?: string;
  endpoint?: string;
  image?: string;
  manifest?: AgentManifest;
  metadata?: Record<string, string>;
  name?: string;
  public_key?: string;
  state?: string;
  version?: string;
}

/** models.AgentResponse */
export interface AgentResponse {
  agent: Agent;
}

/** models.AgentsListResponse (list and search). */
export interface AgentsListResponse {
  agents: Agent[];
  total: number;
}

/** GET /registry/v1/agents/{id}/public-key: published as a map of strings. */
export type PublicKeyResponse = Record<string, string>;

/** models.Tool */
export interface Tool {
  id: string;
  name: string;
  category: string;
  description: string;
  created_at: string;
}

/** models.CreateToolRequest */
export interface CreateToolRequest {
  id: string;
  name: string;
  category?: string;
  description?: string;
}

/** models.ToolResponse */
export interface ToolResponse {
  tool: Tool;
}

/** models.ToolsListResponse */
export interface ToolsListResponse {
  tools: Tool[];
  total: number;
}

// ---------------------------------------------------------------------------------------
// Deployments (/compute/v1/agents/{id}/deploy, /compute/v1/deployments)

/**
 * Deploy options: free-form on the service. The keys the record carries are typed; any other
 * key (env included) is kept by the service but never sent back.
 */
export interface DeployOptions {
  name?: string;
  tier?: string;
  skills?: string[];
  metadata?: Record<string, string>;
  endpoint_name?: string;
  env?: Record<string, string>;
  [key: string]: JsonValue | undefined;
}

/** The Deployment record (SERVICE.md's table; the description's models.Agent of /compute). */
export interface Deployment {
  id: string;
  name: string;
  /** The registry agent it was deployed from. */
  registry_id: string;
  /** The registry agent's image at the last deploy or redeploy. */
  image: string;
  endpoint: string;
  endpoint_name: string;
  /** Computed by the service from the deploy options it received. */
  config_hash: string;
  /** The registry agent's manifest at the last deploy or redeploy; {} when it has none. */
  manifest: AgentManifest;
  metadata: Record<string, string>;
  skills: string[];
  state: string;
  tier: string;
  /** A credential. */
  token: string;
  created_at: string;
  updated_at: string;
}

// ---------------------------------------------------------------------------------------
// Agent VMs (/compute/v1/vms)

/** models.AllocateRequest */
export interface AllocateRequest {
  tier: string;
  env?: Record<string, string>;
  metadata?: Record<string, string>;
  org_id?: string;
  /** Names a runtime; the values are not published, so it is passed through. */
  secure_runtime?: string;
  skills?: string[];
  ttl_seconds?: number;
}

/** models.AllocateResponse: the only answer that says `vm_id` and `skills_loaded`. */
export interface Allocation {
  vm_id: string;
  state: string;
  tier: string;
  skills_loaded: string[];
  endpoint: string;
  ws_url: string;
  /** A credential. */
  token: string;
  expires_at: string;
}

/** models.AgentVM: get, list, renew, release. */
export interface AgentVM {
  id: string;
  state: string;
  tier: string;
  skills: string[];
  metadata: Record<string, string>;
  token: string;
  ttl_seconds: number;
  allocated_at: string;
  created_at: string;
  expires_at: string;
  /** Only once released. */
  released_at?: string;
}

/** models.RenewRequest */
export interface RenewRequest {
  ttl_seconds: number;
}

/** models.ReleaseRequest */
export interface ReleaseRequest {
  recycle?: boolean;
}

/** GET /compute/v1/vms/{id}/endpoint: published as a map of strings. */
export type VMEndpoint = Record<string, string>;

// ---------------------------------------------------------------------------------------
// Pool (/compute/v1/pool)

/** models.PoolConfig: GET answers all of it; PUT takes any subset and answers all of it. */
export interface PoolConfig {
  default_skills: string[];
  default_tier: string;
  idle_ttl_seconds: number;
  max_total: number;
  max_vm_ttl_seconds: number;
  max_warm: number;
  min_warm: number;
  recycle: boolean;
  /** 0..1 */
  scale_up_threshold: number;
}

/** models.PoolStatus */
export interface PoolStatus {
  allocated: number;
  by_tier: Record<string, number>;
  total: number;
  warm: number;
}

// ---------------------------------------------------------------------------------------
// Skills (/compute/v1/skills)

/** models.CreateSkillRequest (create and PUT). */
export interface SkillRequest {
  name: string;
  content: string;
  description?: string;
  /** File name -> content, written under /workspace/skills/<name>/ on a VM. */
  resources?: Record<string, string>;
}

/** models.Skill */
export interface Skill {
  name: string;
  content: string;
  description?: string;
  resources: Record<string, string>;
  content_hash: string;
  created_at: string;
  updated_at: string;
}

// ---------------------------------------------------------------------------------------
// Usage and access clients

/** models.UsageRecord: keeps `vm_id`, as published. */
export interface UsageRecord {
  vm_id: string;
  tier: string;
  started_at: string;
  ended_at: string;
  duration_seconds: number;
  reason: string;
}

/** models.UsageSummary */
export interface UsageSummary {
  period_start: string;
  period_end: string;
  total_seconds: number;
  vm_count: number;
  by_tier: Record<string, number>;
}

/** iamclient.OAuthClient (the list). */
export interface AccessClient {
  client_id: string;
  name: string;
  is_active: boolean;
  created_at: string;
}

/** POST /compute/v1/access/clients body. */
export interface CreateAccessClientRequest {
  name: string;
}

/** iamclient.OAuthClientResponse: the only answer that carries the secret. */
export interface CreatedAccessClient {
  client_id: string;
  client_secret: string;
  name: string;
}
