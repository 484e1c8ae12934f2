// The local emulator of the Agent Registry and Compute Service (see docs/emulator.md).
export { startEmulator, type Emulator } from "./server.js";
export type { EmulatorOptions, FaultAction, FaultRule, RequestLogEntry, RequestStats } from "./options.js";
export { DEFAULT_API_KEY } from "./options.js";
export { EmulatorState, contentHash, type AgentPatch, type UsageReason } from "./state.js";
export { configHash } from "./deploy-options.js";
export { DEFAULT_POOL_CONFIG } from "./pool.js";
export type { StoredAccessClient, StoredAgent, StoredDeployment, StoredSkill, StoredTool, StoredVM } from "./records.js";
export { ServiceError } from "./errors.js";
export type { RuntimeManager } from "./runtime/manager.js";
export type { VMRuntime, SkillInfo, RunCommandRequest } from "./runtime/vm-runtime.js";
export { SKILL_CONTENT_FILE, DEFAULT_SESSION } from "./runtime/vm-runtime.js";
export type { Command, CommandStatus } from "./runtime/commands.js";
export { TIMEOUT_EXIT_CODE } from "./runtime/commands.js";
export type { Kernel, CodeContext } from "./runtime/kernel.js";
export type { Execution, ExecEvent } from "./runtime/execution.js";
export { VM_WORKSPACE } from "./runtime/paths.js";
export type * as wire from "./wire.js";
