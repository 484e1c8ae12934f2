// Response schemas of the Agent Registry and Compute Service, written by hand for the contract
// test (contract.test.ts). They are deliberately independent of the emulator (src/emulator) and
// of the project's client (src/service): nothing here is derived from their types.
//
// Where each schema comes from:
// - shared/design/SERVICE.md ("S" below): the facts, and the final word where it and the
//   published descriptions disagree.
// - shared/reference/service-openapi/agent-registry-api.json ("R"): models.Agent,
//   models.AgentManifest, models.ImagePullSecret, models.ManifestSkill, models.AgentResponse,
//   models.AgentsListResponse, models.Tool, models.ToolResponse, models.ToolsListResponse,
//   models.ErrorResponse (registry dialect), the public-key answer (a map of strings).
// - shared/reference/service-openapi/compute-api.json ("C"): models.Agent (there: the
//   Deployment record), models.AgentVM, models.AllocateResponse, models.Skill,
//   models.UsageRecord, models.UsageSummary, models.PoolStatus, models.PoolConfig,
//   iamclient.OAuthClient, iamclient.OAuthClientResponse, models.ErrorResponse (compute
//   dialect), the VM endpoint answer (a map of strings).
// - shared/reference/service-openapi/agentd-api.json ("D"): the VM runtime reached through
//   /compute/v1/vms/{id}/r/<path>: models.ErrorResponse (agentd's {code, message}),
//   models.CodeContext, models.CommandStatus, models.FileInfo, models.MetricsSnapshot,
//   models.SkillInfo, and the answers published without a model: the agent-process list
//   and record (objects with `additionalProperties: true`), the upload and session-init
//   answers (maps of strings), the lists of CodeContext, FileInfo and SkillInfo.
//
// Rules applied:
// - Types are the published ones; metadata values are strings (C/R `additionalProperties:
//   string`); timestamps are RFC 3339 strings (S, "Gaps we decided") and must parse.
// - Required: what S says a record has. The published descriptions mark nothing required in
//   answers, so where S is silent a property is optional but typed.
// - Strict (additionalProperties: false) for every published model: the service is a Go
//   program whose answers are its structs (the `models.*` names), so a property the model
//   lacks, say a field under a second, wrong name, is a departure even though OpenAPI allows
//   extra properties by default. S says so outright of the Deployment record ("exactly the
//   seed's table", never `env`/`agent_id`) and the Agent VM record (its id field is `id`, not
//   `vm_id`). Maps of strings (metadata, the public-key and endpoint answers) stay open.
import { Type, type Static, type TSchema } from "typebox";
import { Value } from "typebox/value";

/** RFC 3339 date-time (S: "Timestamps: RFC 3339 strings in UTC"). */
export const Timestamp = Type.String({ format: "date-time" });
/** A map of strings (metadata, env, the public-key and VM endpoint answers). */
export const StringMap = Type.Record(Type.String(), Type.String());
const StringList = Type.Array(Type.String());
const FreeObject = Type.Record(Type.String(), Type.Unknown());

// ---------------------------------------------------------------------------------------------
// Token service (S "Base URLs and auth": `access_token`; `expires_in` seconds, may be absent).
export const TokenResponse = Type.Object({
  access_token: Type.String({ minLength: 1 }),
  expires_in: Type.Optional(Type.Integer({ minimum: 1 })),
});

// ---------------------------------------------------------------------------------------------
// Error dialects (S "Error bodies and status codes"; C and R models.ErrorResponse).
/** Compute: {code:int, error_code:string, message:string}; the test also checks code == status. */
export const ComputeError = Type.Object({
  code: Type.Integer(),
  error_code: Type.String({ minLength: 1 }),
  message: Type.String(),
});
/** Registry: {error:string, message:string}. */
export const RegistryError = Type.Object({
  error: Type.String({ minLength: 1 }),
  message: Type.String(),
});

// ---------------------------------------------------------------------------------------------
// Registry (R).
/** S: "Agent state values: registered, deploying, running, active, idle, sleeping, stopped, failed". */
export const AGENT_STATES = ["registered", "deploying", "running", "active", "idle", "sleeping", "stopped", "failed"] as const;
/** S: "visibility: private, public". */
export const AGENT_VISIBILITIES = ["private", "public"] as const;

/** R models.ManifestSkill. */
export const ManifestSkill = Type.Object({
  id: Type.Optional(Type.String()),
  inputModes: Type.Optional(StringList),
  outputModes: Type.Optional(StringList),
}, { additionalProperties: false });

/** R models.AgentManifest. */
export const AgentManifest = Type.Object({
  authentication: Type.Optional(FreeObject),
  capabilities: Type.Optional(FreeObject),
  description: Type.Optional(Type.String()),
  input_schema: Type.Optional(FreeObject),
  name: Type.Optional(Type.String()),
  output_schema: Type.Optional(FreeObject),
  runtime: Type.Optional(FreeObject),
  skills: Type.Optional(Type.Array(ManifestSkill)),
  url: Type.Optional(Type.String()),
  version: Type.Optional(Type.String()),
}, { additionalProperties: false });

/** R models.ImagePullSecret (S: create-only `image_pull_secret{registry,username,password}`). */
export const ImagePullSecret = Type.Object({
  registry: Type.Optional(Type.String()),
  username: Type.Optional(Type.String()),
  password: Type.Optional(Type.String()),
}, { additionalProperties: false });

/**
 * R models.Agent. Required: id, and what S says every agent has from its create request
 * (image, name, org_id are the required create fields) plus its `state` (S lists the values).
 */
export const Agent = Type.Object({
  id: Type.String({ minLength: 1 }),
  name: Type.String({ minLength: 1 }),
  image: Type.String({ minLength: 1 }),
  org_id: Type.String({ minLength: 1 }),
  state: Type.Union(AGENT_STATES.map((s) => Type.Literal(s))),
  visibility: Type.Optional(Type.Union(AGENT_VISIBILITIES.map((v) => Type.Literal(v)))),
  allowed_org_ids: Type.Optional(StringList),
  author: Type.Optional(Type.String()),
  capabilities: Type.Optional(StringList),
  description: Type.Optional(Type.String()),
  endpoint: Type.Optional(Type.String()),
  image_pull_secret: Type.Optional(ImagePullSecret),
  manifest: Type.Optional(AgentManifest),
  metadata: Type.Optional(StringMap),
  public_key: Type.Optional(Type.String()),
  version: Type.Optional(Type.String()),
  created_at: Type.Optional(Timestamp),
  updated_at: Type.Optional(Timestamp),
}, { additionalProperties: false });

/** R models.AgentResponse: {agent} (S: create 201 / get / update 200 `{agent}`). */
export const AgentResponse = Type.Object({ agent: Agent });

/** R models.AgentsListResponse: {agents, total} (S: list and search). */
export const AgentsListResponse = Type.Object({
  agents: Type.Array(Agent),
  total: Type.Integer({ minimum: 0 }),
});

/** R models.Tool. Required: id and name (R models.CreateToolRequest requires them). */
export const Tool = Type.Object({
  id: Type.String({ minLength: 1 }),
  name: Type.String({ minLength: 1 }),
  category: Type.Optional(Type.String()),
  description: Type.Optional(Type.String()),
  created_at: Type.Optional(Timestamp),
}, { additionalProperties: false });

/** R models.ToolResponse: {tool}. */
export const ToolResponse = Type.Object({ tool: Tool });

/** R models.ToolsListResponse: {tools, total}. */
export const ToolsListResponse = Type.Object({
  tools: Type.Array(Tool),
  total: Type.Integer({ minimum: 0 }),
});

/** R GET /registry/v1/agents/{id}/public-key: `additionalProperties: string`. */
export const PublicKeyMap = StringMap;

// ---------------------------------------------------------------------------------------------
// Compute (C).
/**
 * The Deployment record. S: "fields are exactly the seed's table: id, name, registry_id, image,
 * endpoint, endpoint_name, config_hash, manifest, metadata, skills, state, tier, token,
 * created_at, updated_at" and it does not echo `env` or other free-form options. C publishes
 * these properties under the (misleading) name models.Agent; types from there. All fields
 * required, nothing else allowed.
 */
export const Deployment = Type.Object(
  {
    id: Type.String({ minLength: 1 }),
    name: Type.String(),
    registry_id: Type.String({ minLength: 1 }),
    image: Type.String(),
    endpoint: Type.String(),
    endpoint_name: Type.String(),
    config_hash: Type.String({ minLength: 1 }),
    manifest: FreeObject,
    metadata: StringMap,
    skills: StringList,
    state: Type.String({ minLength: 1 }),
    tier: Type.String(),
    token: Type.String({ minLength: 1 }),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { additionalProperties: false },
);

/** C GET /compute/v1/deployments: a bare array (S). */
export const DeploymentList = Type.Array(Deployment);

/**
 * The Agent VM record (get, list, renew, release). S and C models.AgentVM: id, state, tier,
 * skills, metadata, token, ttl_seconds, allocated_at, created_at, expires_at, released_at; id
 * is `id`, never `vm_id`; nothing else (no `skills_loaded`, `vm_id`, `env`, ...). Required:
 * all but `released_at` (only a released VM has one; the release test requires it) and
 * `token` (S names the allocation's token as the credential to keep; a record may omit it).
 */
export const AgentVM = Type.Object(
  {
    id: Type.String({ minLength: 1 }),
    state: Type.String({ minLength: 1 }),
    tier: Type.String({ minLength: 1 }),
    skills: StringList,
    metadata: StringMap,
    token: Type.Optional(Type.String()),
    ttl_seconds: Type.Integer({ minimum: 1 }),
    allocated_at: Timestamp,
    created_at: Timestamp,
    expires_at: Timestamp,
    released_at: Type.Optional(Timestamp),
  },
  { additionalProperties: false },
);

/** C GET /compute/v1/vms: a bare array of AgentVM. */
export const AgentVMList = Type.Array(AgentVM);

/**
 * C models.AllocateResponse; S "Allocation result fields: vm_id, state, tier, skills_loaded,
 * endpoint, ws_url, token, expires_at" (all required). `ws_url` is a WebSocket URL (S: "a
 * WebSocket to the VM's agentd").
 */
export const AllocateResponse = Type.Object({
  vm_id: Type.String({ minLength: 1 }),
  state: Type.String({ minLength: 1 }),
  tier: Type.String({ minLength: 1 }),
  skills_loaded: StringList,
  endpoint: Type.String({ minLength: 1 }),
  ws_url: Type.String({ pattern: "^wss?://" }),
  token: Type.String({ minLength: 1 }),
  expires_at: Timestamp,
}, { additionalProperties: false });

/** C GET /compute/v1/vms/{id}/endpoint: `additionalProperties: string`. */
export const EndpointMap = StringMap;

/**
 * C models.Skill. Required: name, content (C models.CreateSkillRequest requires them) and
 * content_hash (S: "computed by the service on create/update").
 */
export const Skill = Type.Object({
  name: Type.String({ minLength: 1 }),
  content: Type.String(),
  content_hash: Type.String({ minLength: 1 }),
  description: Type.Optional(Type.String()),
  resources: Type.Optional(StringMap),
  created_at: Type.Optional(Timestamp),
  updated_at: Type.Optional(Timestamp),
}, { additionalProperties: false });

/** C GET /compute/v1/skills: a bare array. */
export const SkillList = Type.Array(Skill);

/** C models.UsageRecord; S: "UsageRecord {vm_id, tier, started_at, ended_at, duration_seconds, reason}" (all required). */
export const UsageRecord = Type.Object({
  vm_id: Type.String({ minLength: 1 }),
  tier: Type.String(),
  started_at: Timestamp,
  ended_at: Timestamp,
  duration_seconds: Type.Integer({ minimum: 0 }),
  reason: Type.String(),
}, { additionalProperties: false });

/** C GET /compute/v1/usage: a bare array (S). */
export const UsageList = Type.Array(UsageRecord);

/**
 * C models.UsageSummary; S: "{period_start, period_end, total_seconds, vm_count, by_tier} for
 * the current calendar month" (all required). Neither says whether the period bounds are days
 * or instants: a full date (YYYY-MM-DD, the format of usage's from/to) or an RFC 3339 date-time.
 */
export const UsageSummary = Type.Object({
  period_start: Type.Union([Type.String({ format: "date" }), Timestamp]),
  period_end: Type.Union([Type.String({ format: "date" }), Timestamp]),
  total_seconds: Type.Integer({ minimum: 0 }),
  vm_count: Type.Integer({ minimum: 0 }),
  by_tier: Type.Record(Type.String(), Type.Integer()),
}, { additionalProperties: false });

/** C iamclient.OAuthClient; S: "{client_id, name, is_active, created_at}" (all required). */
export const OAuthClient = Type.Object({
  client_id: Type.String({ minLength: 1 }),
  name: Type.String(),
  is_active: Type.Boolean(),
  created_at: Timestamp,
}, { additionalProperties: false });

/** C GET /compute/v1/access/clients: a bare array (S). */
export const OAuthClientList = Type.Array(OAuthClient);

/** C iamclient.OAuthClientResponse. Required: the credentials it exists to hand out, and name. */
export const OAuthClientResponse = Type.Object({
  client_id: Type.String({ minLength: 1 }),
  client_secret: Type.String({ minLength: 1 }),
  name: Type.String(),
});

/** C models.PoolStatus (nothing published as required). */
export const PoolStatus = Type.Object({
  allocated: Type.Optional(Type.Integer({ minimum: 0 })),
  by_tier: Type.Optional(Type.Record(Type.String(), Type.Integer())),
  total: Type.Optional(Type.Integer({ minimum: 0 })),
  warm: Type.Optional(Type.Integer({ minimum: 0 })),
}, { additionalProperties: false });

/** C models.PoolConfig (nothing published as required; scale_up_threshold is a ratio 0..1). */
export const PoolConfig = Type.Object({
  default_skills: Type.Optional(StringList),
  default_tier: Type.Optional(Type.String()),
  idle_ttl_seconds: Type.Optional(Type.Integer()),
  max_total: Type.Optional(Type.Integer()),
  max_vm_ttl_seconds: Type.Optional(Type.Integer()),
  max_warm: Type.Optional(Type.Integer()),
  min_warm: Type.Optional(Type.Integer()),
  recycle: Type.Optional(Type.Boolean()),
  scale_up_threshold: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
}, { additionalProperties: false });

// ---------------------------------------------------------------------------------------------
// The VM runtime, agentd (D), answering through /compute/v1/vms/{id}/r/<path>.
/**
 * D models.ErrorResponse: {code:int, message:string} (no error_code). Neither is published as
 * required: both optional but typed; strict, as every published model (a compute `error_code`
 * is a departure). The tests check `code` against the status where they need it.
 */
export const AgentdError = Type.Object({
  code: Type.Optional(Type.Integer()),
  message: Type.Optional(Type.String()),
}, { additionalProperties: false });

/** D models.CodeContext (S: "a Jupyter kernel context"). */
export const CodeContext = Type.Object({
  id: Type.Optional(Type.String()),
  kernel_id: Type.Optional(Type.String()),
  language: Type.Optional(Type.String()),
  session_id: Type.Optional(Type.String()),
  created_at: Type.Optional(Type.String()),
}, { additionalProperties: false });

/**
 * D models.CommandStatus {id, running, exit_code, started_at, finished_at} (S names the same
 * five). Nothing is published as required, and a Go server's `omitempty` leaves out zero values
 * (`running: false`, `exit_code: 0`), so every field is optional but typed. For a command that
 * has ended, `running` is not true.
 */
const commandStatusFields = {
  id: Type.Optional(Type.String()),
  exit_code: Type.Optional(Type.Integer()),
  started_at: Type.Optional(Type.String()),
  finished_at: Type.Optional(Type.String()),
};
export const EndedCommandStatus = Type.Object({ ...commandStatusFields, running: Type.Optional(Type.Literal(false)) }, { additionalProperties: false });

/**
 * D models.CommandStatus of a command that is still running. As above every field is optional
 * but typed, except `running`: it must be there and true, since a Go server's `omitempty` drops
 * only `running: false`, and a status without it reads as an ended command (S: the status is
 * what tells a resumed run whether its command still runs).
 */
export const RunningCommandStatus = Type.Object({ ...commandStatusFields, running: Type.Literal(true) }, { additionalProperties: false });

/** D GET v1/code/contexts: an array of models.CodeContext. */
export const CodeContextList = Type.Array(CodeContext);

/**
 * D models.FileInfo {path, size, is_dir, mode, mod_time, owner, group}: nothing published as
 * required (omitempty leaves out `size: 0` and `is_dir: false`), each typed.
 */
export const FileInfo = Type.Object({
  path: Type.Optional(Type.String()),
  size: Type.Optional(Type.Integer({ minimum: 0 })),
  is_dir: Type.Optional(Type.Boolean()),
  mode: Type.Optional(Type.String()),
  mod_time: Type.Optional(Type.String()),
  owner: Type.Optional(Type.String()),
  group: Type.Optional(Type.String()),
}, { additionalProperties: false });

/** D GET v1/files/search: an array of models.FileInfo. */
export const FileInfoList = Type.Array(FileInfo);

/** D models.SkillInfo {name, loaded, path}: nothing published as required, each typed. */
export const SkillInfo = Type.Object({
  name: Type.Optional(Type.String()),
  loaded: Type.Optional(Type.Boolean()),
  path: Type.Optional(Type.String()),
}, { additionalProperties: false });

/** D GET v1/skills and POST v1/skills/load: an array of models.SkillInfo. */
export const SkillInfoList = Type.Array(SkillInfo);

/**
 * D GET v1/agents/{id}: an object with `additionalProperties: true` (no model is published);
 * GET v1/agents: an array of them.
 */
export const AgentProcess = FreeObject;
export const AgentProcessList = Type.Array(AgentProcess);

/** D models.MetricsSnapshot. */
export const MetricsSnapshot = Type.Object({
  cpu_percent: Type.Optional(Type.Number()),
  mem_total_bytes: Type.Optional(Type.Integer()),
  mem_used_bytes: Type.Optional(Type.Integer()),
  tokens_total: Type.Optional(Type.Integer()),
}, { additionalProperties: false });

export type TAgent = Static<typeof Agent>;
export type TDeployment = Static<typeof Deployment>;
export type TAgentVM = Static<typeof AgentVM>;
export type TAllocateResponse = Static<typeof AllocateResponse>;
export type TSkill = Static<typeof Skill>;
export type TPoolConfig = Static<typeof PoolConfig>;

/**
 * The schema's complaints about a value, one line each (empty when it conforms). Every string
 * with a date-time format is also checked with Date.parse, so "parses" is not left to the
 * format checker alone.
 */
export function violations(schema: TSchema, value: unknown): string[] {
  const out = Value.Check(schema, value)
    ? []
    : Value.Errors(schema, value).map((e) => `${e.instancePath || "/"}: ${e.message}`);
  collectUnparsableTimestamps(schema, value, "", out);
  return [...new Set(out)];
}

function collectUnparsableTimestamps(schema: unknown, value: unknown, path: string, out: string[]): void {
  if (schema === null || typeof schema !== "object") return;
  const s = schema as Record<string, unknown>;
  if (s["format"] === "date-time" && typeof value === "string" && Number.isNaN(Date.parse(value))) {
    out.push(`${path || "/"}: timestamp does not parse: ${JSON.stringify(value)}`);
  }
  const props = s["properties"] as Record<string, unknown> | undefined;
  if (props && value !== null && typeof value === "object" && !Array.isArray(value)) {
    for (const [k, sub] of Object.entries(props)) {
      collectUnparsableTimestamps(sub, (value as Record<string, unknown>)[k], `${path}/${k}`, out);
    }
  }
  if (s["items"] && Array.isArray(value)) {
    value.forEach((v, i) => collectUnparsableTimestamps(s["items"], v, `${path}/${i}`, out));
  }
}
