// The operator's controllers on a Manager: the shared part (informers, object store, status
// writer, connection pool), then the Connection controller, then one line per managed kind.
// Each kind's module says what it watches and how it reaches the service; src/controllers/kind.ts
// builds the rest the same way for all of them.
import type { ManagedResource } from "../managed/external.js";
import type { Controller } from "../runtime/controller.js";
import type { Manager } from "../runtime/manager.js";
import { agentDeployments } from "./agent-deployment.js";
import { agents } from "./agent.js";
import type { ConnectionPool } from "./connection-pool.js";
import { setupConnection } from "./connection.js";
import { OperatorContext, setupManagedKind, type KindContext, type ManagedKind, type OperatorOptions } from "./kind.js";
import { sandboxes } from "./sandbox.js";
import { setupSandboxRun } from "./sandbox-run.js";
import { skills } from "./skill.js";

export type { OperatorOptions };

export interface Operator {
  pool: ConnectionPool;
  controllers: Record<"connection" | "skill" | "agent" | "agentDeployment" | "sandbox" | "sandboxRun", Controller>;
}

export function setupOperator(manager: Manager, opts: OperatorOptions): Operator {
  const ctx = new OperatorContext(manager, opts);
  const connection = setupConnection(ctx);
  const managed = <R extends ManagedResource, Plan>(kind: (ctx: KindContext) => ManagedKind<R, Plan>) =>
    setupManagedKind(ctx, connection, kind(ctx));
  return {
    pool: ctx.pool,
    controllers: {
      connection,
      skill: managed(skills),
      agent: managed(agents),
      agentDeployment: managed(agentDeployments),
      sandbox: managed(sandboxes),
      sandboxRun: setupSandboxRun(ctx, connection),
    },
  };
}
