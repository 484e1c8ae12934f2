// Forwarding to a VM's runtime (/compute/v1/vms/{id}/r/{path...}). The service passes the
// request on to the VM's agentd with the VM token injected; the emulator hands it to the VM's
// local runtime (./agentd.ts), whose answer (JSON, an event stream, a file, or an agentd error
// `{code, message}`) goes back as is. A gone VM is 404 in the compute dialect, as on every other
// VM route; a live VM without a runtime (cannot happen unless its creation failed) is 502. The
// body is passed raw: it may be anything (multipart uploads included), up to 64 MiB.
import { ServiceError } from "../errors.js";
import type { HandlerContext, HandlerResult, Route } from "../router.js";
import { serveAgentd } from "./agentd.js";

/** Forwarded bodies carry file uploads: a larger limit than the service's own 1 MiB. */
export const FORWARD_MAX_BODY_BYTES = 64 << 20;

function forward(method: string) {
  return (ctx: HandlerContext): Promise<HandlerResult> => {
    const id = ctx.params["id"]!;
    ctx.state.getVM(id); // 404 for an unknown, released or expired VM
    const runtime = ctx.runtimes.get(id);
    if (!runtime) throw new ServiceError(502, "bad_gateway", `cannot forward ${method} ${ctx.params["path"]!} to vm ${id}: its runtime is not running`);
    return serveAgentd({
      method,
      path: ctx.params["path"]!,
      query: ctx.query,
      headers: ctx.headers,
      raw: ctx.raw,
      runtime,
      skill: (name) => ctx.state.skills.get(name),
      omitEmpty: ctx.options.agentdOmitEmpty,
      noStartEvent: ctx.options.agentdNoStartEvent,
      backgroundStreams: ctx.options.agentdBackgroundStreams,
    });
  };
}

export const forwardRoutes: Route[] = ["GET", "POST", "DELETE"].map((method) => ({
  method,
  pattern: "/compute/v1/vms/:id/r/*path",
  operation: "vms.forward",
  auth: true,
  handler: forward(method),
  maxBodyBytes: FORWARD_MAX_BODY_BYTES,
}));
