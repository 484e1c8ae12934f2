// Account-level routes: the token service, usage records and summary.
import { badRequest } from "../errors.js";
import type { HandlerContext, HandlerResult, Route } from "../router.js";
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
];
