// The local emulator of the Agent Registry and Compute Service (see docs/emulator.md).
export { startEmulator, type Emulator } from "./server.js";
export type { EmulatorOptions, FaultAction, FaultRule, RequestLogEntry, RequestStats } from "./options.js";
export { DEFAULT_API_KEY } from "./options.js";
export { EmulatorState, contentHash, type AgentPatch, type UsageReason } from "./state.js";
export { configHash } from "./deploy-options.js";
export { DEFAULT_POOL_CONFIG } from "./pool.js";
export type { StoredAccessClient, StoredAgent, StoredDeployment, StoredSkill, StoredTool, StoredVM } from "./records.js";
export { ServiceError } from "./errors.js";
export type * as wire from "./wire.js";
