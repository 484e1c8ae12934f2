// Deployment routes ("instances"). Deploy options are free-form: the state validates the keys
// the record carries (deploy-options.ts) and keeps the rest as sent, without echoing them.
import type { HandlerContext, HandlerResult, Route } from "../router.js";

const deploy = (ctx: HandlerContext): HandlerResult => ({ status: 200, body: ctx.state.deploy(ctx.params["agent_id"]!, ctx.body()) });

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
    // No query parameters are published: limit/offset are ignored, the whole list is answered.
    handler: (ctx) => ({ status: 200, body: ctx.state.listDeployments() }),
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
