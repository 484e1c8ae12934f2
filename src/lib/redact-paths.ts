// The paths pino censors in every log line: one list, for the operator's logger
// (src/runtime/logging.ts) and the service client's child logger (src/service/client.ts). A
// pino child given `redact` loses its parent's paths (pino 10: the child's replace them), so
// the child carries this whole list, not a list of its own. Neutral library: imports nothing
// from the rest of src/.
//
// Redaction is a safety net: code must not log secrets in the first place.

/** pino (fast-redact) syntax: `*` matches one level, `a["x-y"]` a key that is not an identifier. */
export const REDACT_PATHS: readonly string[] = [
  "authorization",
  "Authorization",
  "*.authorization",
  "headers.authorization",
  "headers.Authorization",
  'headers["x-api-key"]',
  "*.headers.authorization",
  "*.headers.Authorization",
  "credentials",
  "apiKey",
  "*.apiKey",
  "token",
  "*.token",
  "password",
  "*.password",
  "clientSecret",
  "*.clientSecret",
  "client_secret",
  "*.client_secret",
  "access_token",
  "*.access_token",
  "refresh_token",
  "*.refresh_token",
  "api_key",
  "*.api_key",
  "*.image_pull_secret",
  "secret.data",
  "secret.stringData",
  "*.secret.data",
  "*.secret.stringData",
];

/** What a censored value is written as. */
export const REDACTED = "[REDACTED]";
