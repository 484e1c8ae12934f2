// The operator's Kubernetes API: one source of truth for TypeScript types, crds/*.yaml and
// the reference docs.
import { agentDeploymentKind } from "./agent-deployment.js";
import { agentKind } from "./agent.js";
import { connectionKind } from "./connection.js";
import type { KindDefinition } from "./kind.js";
import { sandboxRunKind } from "./sandbox-run.js";
import { sandboxKind } from "./sandbox.js";
import { skillKind } from "./skill.js";

export * from "./common.js";
export type * from "./agent.js";
export type * from "./agent-deployment.js";
export type * from "./connection.js";
export type * from "./sandbox.js";
export type * from "./sandbox-run.js";
export type * from "./skill.js";
export type { KindDefinition, PrinterColumn } from "./kind.js";
export { agentDeploymentKind, agentKind, connectionKind, sandboxKind, sandboxRunKind, skillKind };

export const allKinds: readonly KindDefinition[] = [
  connectionKind,
  skillKind,
  agentKind,
  agentDeploymentKind,
  sandboxKind,
  sandboxRunKind,
];
