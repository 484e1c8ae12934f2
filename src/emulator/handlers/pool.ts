// The VM pool (/compute/v1/pool): status and configuration (see pool.ts for what each
// setting does in the emulator).
import { parsePoolConfigPatch } from "../pool.js";
import type { Route } from "../router.js";

export const poolRoutes: Route[] = [
  { method: "GET", pattern: "/compute/v1/pool/status", operation: "pool.status", auth: true, handler: (ctx) => ({ status: 200, body: ctx.state.poolStatus() }) },
  { method: "GET", pattern: "/compute/v1/pool/config", operation: "pool.config.get", auth: true, handler: (ctx) => ({ status: 200, body: ctx.state.poolConfig }) },
  {
    method: "PUT",
    pattern: "/compute/v1/pool/config",
    operation: "pool.config.update",
    auth: true,
    handler: (ctx) => ({ status: 200, body: ctx.state.updatePoolConfig(parsePoolConfigPatch(ctx.body("models.PoolConfig"), ctx.options.strictBodies)) }),
  },
];
