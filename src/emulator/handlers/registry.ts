// Registry agent routes (/registry/v1/agents): request validation, then the domain state.
import { badRequest } from "../errors.js";
import { parseManifest } from "../manifest.js";
import type { HandlerContext, HandlerResult, Route } from "../router.js";
import {
  optionalObject,
  optionalString,
  optionalStringArray,
  optionalStringMap,
  pageParams,
  rejectUnknown,
  requiredString,
} from "../validate.js";
import type { AgentManifest, CreateAgentRequest, ImagePullSecret, JsonObject, UpdateAgentRequest } from "../wire.js";

const AGENT_STATES = new Set(["registered", "deploying", "running", "active", "idle", "sleeping", "stopped", "failed"]);
const DEFAULT_LIMIT = 20;

const CREATE_FIELDS = new Set([
  "image",
  "name",
  "org_id",
  "author",
  "capabilities",
  "description",
  "endpoint",
  "image_pull_secret",
  "manifest",
  "metadata",
  "version",
]);
const UPDATE_FIELDS = new Set([
  "capabilities",
  "description",
  "endpoint",
  "image",
  "manifest",
  "metadata",
  "name",
  "public_key",
  "state",
  "version",
]);
const SERVICE_OWNED = new Map([
  ["visibility", "cannot be set"],
  ["allowed_org_ids", "cannot be set"],
  ["id", "cannot be set"],
  ["created_at", "cannot be set"],
  ["updated_at", "cannot be set"],
]);
const CREATE_ONLY = new Map([
  ...SERVICE_OWNED,
  ["org_id", "is create-only and cannot be updated"],
  ["author", "is create-only and cannot be updated"],
  ["image_pull_secret", "is create-only and cannot be updated"],
]);

const PULL_SECRET_FIELDS = ["registry", "username", "password"] as const;

/** models.ImagePullSecret requires none of its fields: those given are kept (each a string). */
function pullSecret(body: JsonObject, strict: boolean): ImagePullSecret | undefined {
  const s = optionalObject(body, "image_pull_secret");
  if (s === undefined) return undefined;
  rejectUnknown(strict, s, new Set(PULL_SECRET_FIELDS), undefined, "image_pull_secret.");
  const out: ImagePullSecret = {};
  for (const k of PULL_SECRET_FIELDS) {
    const v = optionalString(s, k, `image_pull_secret.${k}`);
    if (v !== undefined) out[k] = v;
  }
  return out;
}

/** Only the published manifest keys survive (see manifest.ts); null counts as not given. */
function manifest(body: JsonObject): AgentManifest | undefined {
  const v = body["manifest"];
  return v === undefined || v === null ? undefined : parseManifest(v);
}

function create(ctx: HandlerContext): HandlerResult {
  const body = ctx.body("models.CreateAgentRequest");
  rejectUnknown(ctx.options.strictBodies, body, CREATE_FIELDS, SERVICE_OWNED);
  const req: CreateAgentRequest = {
    image: requiredString(body, "image"),
    name: requiredString(body, "name"),
    org_id: requiredString(body, "org_id"),
  };
  const author = optionalString(body, "author");
  if (author !== undefined) req.author = author;
  const capabilities = optionalStringArray(body, "capabilities");
  if (capabilities !== undefined) req.capabilities = capabilities;
  const description = optionalString(body, "description");
  if (description !== undefined) req.description = description;
  const endpoint = optionalString(body, "endpoint");
  if (endpoint !== undefined) req.endpoint = endpoint;
  const secret = pullSecret(body, ctx.options.strictBodies);
  if (secret !== undefined) req.image_pull_secret = secret;
  const m = manifest(body);
  if (m !== undefined) req.manifest = m;
  const metadata = optionalStringMap(body, "metadata");
  if (metadata !== undefined) req.metadata = metadata;
  const version = optionalString(body, "version");
  if (version !== undefined) req.version = version;
  return { status: 201, body: { agent: ctx.state.createAgent(req) } };
}

function update(ctx: HandlerContext): HandlerResult {
  const body = ctx.body("models.UpdateAgentRequest");
  rejectUnknown(ctx.options.strictBodies, body, UPDATE_FIELDS, CREATE_ONLY);
  const patch: UpdateAgentRequest = {};
  for (const k of ["description", "endpoint", "public_key", "version"] as const) {
    const v = optionalString(body, k);
    if (v !== undefined) patch[k] = v;
  }
  // Every field of models.UpdateAgentRequest is optional: null counts as not given, as for the
  // others (decision 19); an empty name or image is refused as on create (decision 4).
  for (const k of ["name", "image"] as const) {
    if (body[k] !== undefined && body[k] !== null) patch[k] = requiredString(body, k);
  }
  const state = optionalString(body, "state");
  if (state !== undefined) {
    if (!AGENT_STATES.has(state)) throw badRequest(`state must be one of ${[...AGENT_STATES].join(", ")}`);
    patch.state = state;
  }
  const capabilities = optionalStringArray(body, "capabilities");
  if (capabilities !== undefined) patch.capabilities = capabilities;
  const m = manifest(body);
  if (m !== undefined) patch.manifest = m;
  const metadata = optionalStringMap(body, "metadata");
  if (metadata !== undefined) patch.metadata = metadata;
  return { status: 200, body: { agent: ctx.state.updateAgent(ctx.params["id"]!, patch) } };
}

function list(ctx: HandlerContext): HandlerResult {
  const page = pageParams(ctx.query, DEFAULT_LIMIT, ctx.options.maxPageSize);
  const filter: { author?: string; status?: string } = {};
  const author = ctx.query.get("author");
  if (author !== null && author !== "") filter.author = author;
  const status = ctx.query.get("status");
  if (status !== null && status !== "") filter.status = status;
  return { status: 200, body: ctx.state.listAgents(filter, page) };
}

function search(ctx: HandlerContext): HandlerResult {
  const raw = ctx.query.get("capabilities");
  if (raw === null || raw.trim() === "") throw badRequest("capabilities is required");
  const capabilities = raw
    .split(",")
    .map((c) => c.trim())
    .filter((c) => c !== "");
  // No paging is published for search: limit/offset are ignored, as by the lists without it.
  return { status: 200, body: ctx.state.searchAgents(capabilities) };
}

export const registryRoutes: Route[] = [
  { method: "POST", pattern: "/registry/v1/agents", operation: "agents.create", auth: true, handler: create },
  { method: "GET", pattern: "/registry/v1/agents", operation: "agents.list", auth: true, handler: list },
  { method: "GET", pattern: "/registry/v1/agents/search", operation: "agents.search", auth: true, handler: search },
  {
    method: "GET",
    pattern: "/registry/v1/agents/:id",
    operation: "agents.get",
    auth: true,
    handler: (ctx) => ({ status: 200, body: { agent: ctx.state.getAgent(ctx.params["id"]!) } }),
  },
  { method: "PUT", pattern: "/registry/v1/agents/:id", operation: "agents.update", auth: true, handler: update },
  {
    method: "GET",
    pattern: "/registry/v1/agents/:id/public-key",
    operation: "agents.public_key",
    auth: true,
    handler: (ctx) => ({ status: 200, body: ctx.state.agentPublicKey(ctx.params["id"]!) }),
  },
  {
    method: "DELETE",
    pattern: "/registry/v1/agents/:id",
    operation: "agents.delete",
    auth: true,
    handler: (ctx) => {
      ctx.state.deleteAgent(ctx.params["id"]!);
      return { status: 204 };
    },
  },
];
