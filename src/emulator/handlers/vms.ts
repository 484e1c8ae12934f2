// Agent VM routes ("sandboxes").
import { badRequest, ServiceError } from "../errors.js";
import { executionSSE } from "../runtime/streams.js";
import { startCommand } from "./agentd.js";
import type { HandlerContext, HandlerResult, Route } from "../router.js";
import {
  optionalBoolean,
  optionalPositiveInt,
  optionalString,
  optionalStringArray,
  optionalStringMap,
  pageParams,
  rejectUnknown,
  requiredPositiveInt,
  requiredString,
} from "../validate.js";
import type { AllocateRequest } from "../wire.js";

const DEFAULT_LIMIT = 100;
const ALLOCATE_FIELDS = new Set(["tier", "env", "metadata", "org_id", "secure_runtime", "skills", "ttl_seconds"]);

function allocate(ctx: HandlerContext): HandlerResult {
  const body = ctx.body("models.AllocateRequest");
  rejectUnknown(ctx.options.strictBodies, body, ALLOCATE_FIELDS);
  const req: AllocateRequest = { tier: requiredString(body, "tier") };
  const env = optionalStringMap(body, "env");
  if (env !== undefined) req.env = env;
  const metadata = optionalStringMap(body, "metadata");
  if (metadata !== undefined) req.metadata = metadata;
  const org = optionalString(body, "org_id");
  if (org !== undefined && org !== "") req.org_id = org;
  // A runtime's name (models.AllocateRequest: string); its values are not published.
  const secure = optionalString(body, "secure_runtime");
  if (secure !== undefined) req.secure_runtime = secure;
  const skills = optionalStringArray(body, "skills");
  if (skills !== undefined) req.skills = skills;
  const ttl = optionalPositiveInt(body, "ttl_seconds");
  if (ttl !== undefined) req.ttl_seconds = ttl;
  return { status: 201, body: ctx.state.allocateVM(req) };
}

function list(ctx: HandlerContext): HandlerResult {
  const page = pageParams(ctx.query, DEFAULT_LIMIT, ctx.options.maxPageSize);
  const filter: { state?: string; tier?: string } = {};
  const state = ctx.query.get("state");
  if (state !== null && state !== "") filter.state = state;
  const tier = ctx.query.get("tier");
  if (tier !== null && tier !== "") filter.tier = tier;
  return { status: 200, body: ctx.state.listVMs(filter, page) };
}

function renew(ctx: HandlerContext): HandlerResult {
  const body = ctx.body("models.RenewRequest");
  rejectUnknown(ctx.options.strictBodies, body, new Set(["ttl_seconds"]));
  const ttl = requiredPositiveInt(body, "ttl_seconds");
  return { status: 200, body: ctx.state.renewVM(ctx.params["id"]!, ttl) };
}

function release(ctx: HandlerContext): HandlerResult {
  const body = ctx.body("models.ReleaseRequest");
  rejectUnknown(ctx.options.strictBodies, body, new Set(["recycle"]));
  // recycle is accepted and validated; the emulator has no warm pool for it to change (D).
  optionalBoolean(body, "recycle");
  return { status: 200, body: ctx.state.releaseVM(ctx.params["id"]!) };
}

/**
 * The older SDKs' execute (body not published, D): `{code, language?, context_id?}` runs code in a
 * context (default: the VM's own context for the language, so state carries between calls), or
 * `{command, cwd?, envs?, timeout_ms?}` runs a shell command. Either answers the execution's
 * server-sent event stream, the same events as agentd's code/execute and commands/run.
 */
async function execute(ctx: HandlerContext): Promise<HandlerResult> {
  const id = ctx.params["id"]!;
  ctx.state.getVM(id); // 404 for a VM that is gone
  const runtime = ctx.runtimes.get(id);
  if (!runtime) throw new ServiceError(502, "bad_gateway", `cannot execute in vm ${id}: its runtime is not running`);
  const body = ctx.body();
  const code = optionalString(body, "code");
  const command = optionalString(body, "command");
  if ((code === undefined) === (command === undefined)) throw badRequest("exactly one of code and command is required");
  if (code !== undefined && code.trim() === "") throw badRequest("code must not be empty");
  if (command !== undefined) {
    const started = await startCommand(body, runtime);
    return { status: 200, body: executionSSE(started.command.execution) };
  }
  const language = optionalString(body, "language") ?? "python";
  const contextId = optionalString(body, "context_id");
  const kernel = contextId !== undefined && contextId !== "" ? runtime.context(contextId) : runtime.defaultContext(language);
  if (!kernel) throw new ServiceError(404, "not_found", `code context ${contextId} not found in vm ${id}`);
  return { status: 200, body: executionSSE(kernel.execute(code!)) };
}

export const vmRoutes: Route[] = [
  { method: "POST", pattern: "/compute/v1/vms/allocate", operation: "vms.allocate", auth: true, handler: allocate },
  { method: "GET", pattern: "/compute/v1/vms", operation: "vms.list", auth: true, handler: list },
  { method: "GET", pattern: "/compute/v1/vms/:id", operation: "vms.get", auth: true, handler: (ctx) => ({ status: 200, body: ctx.state.getVM(ctx.params["id"]!) }) },
  { method: "POST", pattern: "/compute/v1/vms/:id/renew", operation: "vms.renew", auth: true, handler: renew },
  { method: "POST", pattern: "/compute/v1/vms/:id/release", operation: "vms.release", auth: true, handler: release },
  {
    method: "DELETE",
    pattern: "/compute/v1/vms/:id",
    operation: "vms.delete",
    auth: true,
    handler: (ctx) => {
      ctx.state.deleteVM(ctx.params["id"]!);
      return { status: 204 };
    },
  },
  {
    method: "GET",
    pattern: "/compute/v1/vms/:id/endpoint",
    operation: "vms.endpoint",
    auth: true,
    handler: (ctx) => ({ status: 200, body: ctx.state.vmEndpoint(ctx.params["id"]!) }),
  },
  { method: "POST", pattern: "/compute/v1/vms/:id/execute", operation: "vms.execute", auth: true, handler: execute },
];
