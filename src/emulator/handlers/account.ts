// Account-level routes: the token service, usage records and summary, access clients.
import type { AccessClient } from "../../service/types.js";
import { badRequest } from "../errors.js";
import type { HandlerContext, HandlerResult, Route } from "../router.js";
import { rfc3339 } from "../util.js";
import { pageParams } from "../validate.js";

const DEFAULT_LIMIT = 100;

function usage(ctx: HandlerContext): HandlerResult {
  // Required by the service; the emulator has one workspace, so they do not filter (D).
  for (const header of ["X-Workspace-Id", "X-Environment-Id"]) {
    const v = ctx.headers[header.toLowerCase()];
    if (typeof v !== "string" || v.trim() === "") throw badRequest(`${header} header is required`);
  }
  const page = pageParams(ctx.query, DEFAULT_LIMIT, ctx.options.maxPageSize);
  const q: { from?: string; to?: string; tier?: string } = {};
  for (const k of ["from", "to", "tier"] as const) {
    const v = ctx.query.get(k);
    if (v !== null && v !== "") q[k] = v;
  }
  return { status: 200, body: ctx.state.listUsage(q, page) };
}

function accessClients(ctx: HandlerContext): HandlerResult {
  const createdAt = rfc3339(ctx.startedAt);
  // The API key is listed as a client without revealing the key itself.
  const clients: AccessClient[] = [
    { client_id: "api-key", name: "API key", is_active: true, created_at: createdAt },
    ...ctx.options.clients.map((c) => ({ client_id: c.clientId, name: c.clientId, is_active: true, created_at: createdAt })),
  ];
  return { status: 200, body: clients };
}

export const accountRoutes: Route[] = [
  {
    method: "POST",
    pattern: "/auth/token",
    operation: "token",
    auth: false,
    handler: (ctx) => ({ status: 200, body: ctx.tokens.issue(ctx.headers, () => ctx.body()) }),
  },
  { method: "GET", pattern: "/compute/v1/usage", operation: "usage.list", auth: true, handler: usage },
  { method: "GET", pattern: "/compute/v1/usage/summary", operation: "usage.summary", auth: true, handler: (ctx) => ({ status: 200, body: ctx.state.usageSummary() }) },
  { method: "GET", pattern: "/compute/v1/access/clients", operation: "access.clients", auth: true, handler: accessClients },
];
