// Deployment routes ("instances"): deploy options are free-form, so only the keys the record
// is known to carry are type-checked; everything else passes through as sent.
import type { DeployOptions } from "../../service/types.js";
import type { HandlerContext, HandlerResult, Route } from "../router.js";
import { optionalString, optionalStringArray, optionalStringMap, pageParams } from "../validate.js";

const DEFAULT_LIMIT = 100;

function deploy(ctx: HandlerContext): HandlerResult {
  const body = ctx.body();
  // Validation only: the typed values are the same as those sent.
  optionalString(body, "name");
  optionalString(body, "tier");
  optionalString(body, "endpoint_name");
  optionalStringArray(body, "skills");
  optionalStringMap(body, "env");
  optionalStringMap(body, "metadata");
  return { status: 200, body: ctx.state.deploy(ctx.params["agent_id"]!, body as DeployOptions) };
}

const byId =
  (fn: (ctx: HandlerContext, id: string) => unknown) =>
  (ctx: HandlerContext): HandlerResult => ({ status: 200, body: fn(ctx, ctx.params["id"]!) });

export const deploymentRoutes: Route[] = [
  { method: "POST", pattern: "/compute/v1/agents/:agent_id/deploy", operation: "deployments.deploy", auth: true, handler: deploy },
  {
    method: "GET",
    pattern: "/compute/v1/deployments",
    operation: "deployments.list",
    auth: true,
    handler: (ctx) => ({ status: 200, body: ctx.state.listDeployments(pageParams(ctx.query, DEFAULT_LIMIT, ctx.options.maxPageSize)) }),
  },
  { method: "GET", pattern: "/compute/v1/deployments/:id", operation: "deployments.get", auth: true, handler: byId((ctx, id) => ctx.state.getDeployment(id)) },
  {
    method: "POST",
    pattern: "/compute/v1/deployments/:id/stop",
    operation: "deployments.stop",
    auth: true,
    handler: byId((ctx, id) => ctx.state.stopDeployment(id)),
  },
  {
    method: "POST",
    pattern: "/compute/v1/deployments/:id/redeploy",
    operation: "deployments.redeploy",
    auth: true,
    handler: byId((ctx, id) => ctx.state.redeploy(id)),
  },
  {
    method: "DELETE",
    pattern: "/compute/v1/deployments/:id",
    operation: "deployments.delete",
    auth: true,
    handler: (ctx) => {
      ctx.state.deleteDeployment(ctx.params["id"]!);
      return { status: 204 };
    },
  },
];
