// The service client's public surface. Import from "src/service/index.js" only.

export { ServiceClient, PAGE_SIZE, REFUSAL_HOLD_MS, pageAll } from "./client.js";
export type { AgentsAPI, CredentialsVerdict, DeploymentsAPI, VMsAPI, SkillsAPI, UsageAPI } from "./client.js";
export type { ServiceClientOptions, ServiceClientHooks } from "./options.js";
export { DEFAULTS } from "./options.js";
export {
  InvalidEndpointError,
  ServiceError,
  isServiceError,
  isNotFound,
  isServiceNotFound,
  goneIndeed,
  isConflict,
  isBadRequest,
  isOutcomeUnknown,
  isTransient,
  isAuthError,
  isRateLimited,
  refusalOf,
  tlsErrorCode,
} from "./errors.js";
export type { Operation, Refusal } from "./errors.js";
export type { RetryClass } from "./retry.js";
export { DEFAULT_EXPIRES_IN_SECONDS, REFRESH_MARGIN_MS } from "./token.js";
export * from "./types.js";
