// Access clients (/compute/v1/access/clients): client_credentials pairs that really work at
// POST /auth/token until revoked (see access-clients.ts for the rules).
import type { HandlerContext, HandlerResult, Route } from "../router.js";
import { rejectUnknown, requiredString } from "../validate.js";

function create(ctx: HandlerContext): HandlerResult {
  const body = ctx.body("{name}");
  rejectUnknown(ctx.options.strictBodies, body, new Set(["name"]));
  return { status: 201, body: ctx.state.createAccessClient(requiredString(body, "name")) };
}

export const accessRoutes: Route[] = [
  { method: "GET", pattern: "/compute/v1/access/clients", operation: "access.clients", auth: true, handler: (ctx) => ({ status: 200, body: ctx.state.listAccessClients() }) },
  { method: "POST", pattern: "/compute/v1/access/clients", operation: "access.clients.create", auth: true, handler: create },
  {
    method: "DELETE",
    pattern: "/compute/v1/access/clients/:client_id",
    operation: "access.clients.revoke",
    auth: true,
    handler: (ctx) => {
      ctx.state.revokeAccessClient(ctx.params["client_id"]!);
      return { status: 204 };
    },
  },
];
