// Agent VM routes ("sandboxes").
import { ServiceError } from "../errors.js";
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
  const body = ctx.body();
  rejectUnknown(body, ALLOCATE_FIELDS);
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
  const body = ctx.body();
  rejectUnknown(body, new Set(["ttl_seconds"]));
  const ttl = requiredPositiveInt(body, "ttl_seconds");
  return { status: 200, body: ctx.state.renewVM(ctx.params["id"]!, ttl) };
}

function release(ctx: HandlerContext): HandlerResult {
  const body = ctx.body();
  rejectUnknown(body, new Set(["recycle"]));
  // recycle is accepted and validated; the emulator has no warm pool for it to change (D).
  optionalBoolean(body, "recycle");
  return { status: 200, body: ctx.state.releaseVM(ctx.params["id"]!) };
}

function execute(ctx: HandlerContext): HandlerResult {
  const id = ctx.params["id"]!;
  ctx.state.getVM(id); // 404 for a VM that is gone
  // Execute runs what it is sent inside the VM, and the emulator has no VM runtime yet: it
  // answers as forwarding does, what the service answers when the runtime cannot be reached,
  // rather than a 200 for work that never ran (D).
  throw new ServiceError(502, "bad_gateway", `cannot execute in vm ${id}: the VM runtime (agentd) is not emulated yet`);
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
