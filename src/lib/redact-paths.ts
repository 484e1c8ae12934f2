// The paths pino censors in every log line: one list, for the operator's logger
// (src/runtime/logging.ts) and the service client's child logger (src/service/client.ts). A
// pino child given `redact` loses its parent's paths (pino 10: the child's replace them), so
// the child carries this whole list, not a list of its own. Neutral library: imports nothing
// from the rest of src/.
//
// Redaction is a safety net: code must not log secrets in the first place.

/**
 * Keys whose values are censored wherever they stand up to two levels below the top: a log
 * line's field, a field's (`err.token`, `headers.authorization`), and one below that
 * (`a.b.token`, `items[0].token`: pino matches an array's index as a key). pino's paths cannot
 * say "at any depth", so the shapes are listed; a key three levels down goes uncensored, which
 * is why code logs messages, not objects. The spellings a header, an SDK or a config file uses
 * for the same thing are listed as they are written (pino matches keys exactly).
 */
const SECRET_KEYS: readonly string[] = [
  "authorization",
  "Authorization",
  '["x-api-key"]',
  "token",
  "Token",
  "accessToken",
  "access_token",
  "refreshToken",
  "refresh_token",
  "apiKey",
  "apikey",
  "api_key",
  '["api-key"]',
  "password",
  "clientSecret",
  "client_secret",
  "image_pull_secret",
];

/** `key` one level below `parent` (`*`, `*.*`), in pino's syntax: a bracketed key takes no dot. */
const below = (parent: string, key: string): string => (key.startsWith("[") ? `${parent}${key}` : `${parent}.${key}`);

/** pino (@pinojs/redact, fast-redact's syntax): `*` matches one level, `["x-y"]` a key that is not an identifier. */
export const REDACT_PATHS: readonly string[] = [
  ...SECRET_KEYS.flatMap((key) => [key, below("*", key), below("*.*", key)]),
  // The client's credentials as handed to it ({apiKey} or {clientId, clientSecret}); deeper, a
  // `credentials` is a Connection's reference to its Secret, worth seeing.
  "credentials",
  // A Secret object's values; its metadata says which one it is.
  "secret.data",
  "secret.stringData",
  "*.secret.data",
  "*.secret.stringData",
];

/** What a censored value is written as. */
export const REDACTED = "[REDACTED]";
