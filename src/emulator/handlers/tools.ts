// Registry tool catalog (/registry/v1/tools): create, list by category, get. Not org-scoped
// and not paged: the description publishes only a `category` filter.
import type { HandlerContext, HandlerResult, Route } from "../router.js";
import { optionalString, rejectUnknown, requiredString } from "../validate.js";
import type { CreateToolRequest } from "../wire.js";

const CREATE_FIELDS = new Set(["id", "name", "category", "description"]);

function create(ctx: HandlerContext): HandlerResult {
  const body = ctx.body("models.CreateToolRequest");
  rejectUnknown(ctx.options.strictBodies, body, CREATE_FIELDS);
  const req: CreateToolRequest = { id: requiredString(body, "id"), name: requiredString(body, "name") };
  const category = optionalString(body, "category");
  if (category !== undefined) req.category = category;
  const description = optionalString(body, "description");
  if (description !== undefined) req.description = description;
  return { status: 201, body: { tool: ctx.state.createTool(req) } };
}

function list(ctx: HandlerContext): HandlerResult {
  const category = ctx.query.get("category");
  return { status: 200, body: ctx.state.listTools(category === null || category === "" ? undefined : category) };
}

export const toolRoutes: Route[] = [
  { method: "POST", pattern: "/registry/v1/tools", operation: "tools.create", auth: true, handler: create },
  { method: "GET", pattern: "/registry/v1/tools", operation: "tools.list", auth: true, handler: list },
  {
    method: "GET",
    pattern: "/registry/v1/tools/:id",
    operation: "tools.get",
    auth: true,
    handler: (ctx) => ({ status: 200, body: { tool: ctx.state.getTool(ctx.params["id"]!) } }),
  },
];
