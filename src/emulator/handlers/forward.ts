// Forwarding to a VM's runtime (/compute/v1/vms/{id}/r/{path...}). The service passes the
// request on to the VM's agentd with the VM token injected. The emulator has no VM runtime
// yet (a later change adds one), so for a live VM it answers what the service answers when the
// runtime cannot be reached: 502. A gone VM is 404, as on every other VM route. The body is
// never read: it may be anything (multipart uploads included).
import { ServiceError } from "../errors.js";
import type { HandlerContext, HandlerResult, Route } from "../router.js";

function forward(method: string) {
  return (ctx: HandlerContext): HandlerResult => {
    const id = ctx.params["id"]!;
    ctx.state.getVM(id); // 404 for an unknown, released or expired VM
    throw new ServiceError(502, "bad_gateway", `cannot forward ${method} ${ctx.params["path"]!} to vm ${id}: the VM runtime (agentd) is not emulated yet`);
  };
}

export const forwardRoutes: Route[] = ["GET", "POST", "DELETE"].map((method) => ({
  method,
  pattern: "/compute/v1/vms/:id/r/*path",
  operation: "vms.forward",
  auth: true,
  handler: forward(method),
}));
