// ServiceError: the one error type the service client throws, plus the predicates that
// controllers branch on. The message is written for a person (it ends up in a condition
// message or an Event); the fields are written for code.
//
// Secrets never reach an error: request bodies are never quoted, and any text that comes
// back from the service (message, body snippet) is scrubbed of the secrets the client knows
// before it is stored (see `scrub`).

import { STATUS_CODES } from "node:http";
import { mergeRanges, type Range } from "../lib/ranges.js";
import { REDACTED } from "../lib/redact-paths.js";
import { writtenForms } from "../lib/written-forms.js";
import { isTLSCode } from "./retry.js";

/** Every operation name the client uses; identical to the emulator's request-log names. */
export type Operation =
  | "agents.create"
  | "agents.list"
  | "agents.get"
  | "agents.update"
  | "agents.delete"
  | "agents.search"
  | "deployments.deploy"
  | "deployments.list"
  | "deployments.get"
  | "deployments.stop"
  | "deployments.redeploy"
  | "deployments.delete"
  | "vms.allocate"
  | "vms.list"
  | "vms.get"
  | "vms.renew"
  | "vms.release"
  | "vms.delete"
  | "vms.endpoint"
  | "vms.execute"
  | "skills.create"
  | "skills.list"
  | "skills.get"
  | "skills.update"
  | "skills.delete"
  | "usage.list"
  | "usage.summary"
  | "pool.config"
  | "access.clients"
  | "token";

export interface ServiceErrorInit {
  operation: string;
  message: string;
  status?: number;
  code?: number;
  errorCode?: string;
  serviceError?: string;
  serviceMessage?: string;
  retryable: boolean;
  outcomeUnknown?: boolean;
  retryAfterMs?: number;
  attempts?: number;
  cause?: unknown;
}

export class ServiceError extends Error {
  override readonly name = "ServiceError";
  /** e.g. "agents.create"; "token" for the token service. */
  readonly operation: string;
  /** HTTP status; undefined for network errors and timeouts. */
  readonly status?: number;
  /** Compute error body: `code`. */
  readonly code?: number;
  /** Compute error body: `error_code`. */
  readonly errorCode?: string;
  /** Registry error body: `error`. */
  readonly serviceError?: string;
  /** The service's own `message` (scrubbed of known secrets); safe to show to users. */
  readonly serviceMessage?: string;
  /** Transient: the caller may try the same thing again later (after a lookup if outcomeUnknown). */
  readonly retryable: boolean;
  /**
   * A non-idempotent call (a create, execute) may or may not have taken effect: timeout,
   * connection reset after the request was sent, 500/502/504. The caller must look the
   * object up (by its marker) before creating it again.
   */
  readonly outcomeUnknown: boolean;
  /** The service asked us to wait this long (Retry-After) before trying again. */
  readonly retryAfterMs?: number;
  /** How many HTTP attempts were made before giving up. */
  readonly attempts?: number;

  constructor(init: ServiceErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.operation = init.operation;
    this.status = init.status;
    this.code = init.code;
    this.errorCode = init.errorCode;
    this.serviceError = init.serviceError;
    this.serviceMessage = init.serviceMessage;
    this.retryable = init.retryable;
    this.outcomeUnknown = init.outcomeUnknown ?? false;
    this.retryAfterMs = init.retryAfterMs;
    this.attempts = init.attempts;
  }
}

/**
 * An endpoint option (baseURL, registryURL, authURL) that is not an http(s) URL: thrown when the
 * client is built; only a change of the option helps.
 */
export class InvalidEndpointError extends TypeError {
  constructor(
    readonly option: string,
    message: string,
  ) {
    super(message);
    this.name = "InvalidEndpointError";
  }
}

export function isServiceError(e: unknown): e is ServiceError {
  return e instanceof ServiceError;
}

/** 404: the object is gone. A 404 on delete/release is success for a finalizer. */
export function isNotFound(e: unknown): boolean {
  return e instanceof ServiceError && e.status === 404;
}

/**
 * A 404 the service itself answered, in its error body (compute's error_code, the registry's
 * error): the object is not there. A bare 404 (a gateway's, a route briefly missing behind a
 * load balancer) says nothing of the object.
 */
export function isServiceNotFound(e: unknown): boolean {
  return isNotFound(e) && ((e as ServiceError).errorCode !== undefined || (e as ServiceError).serviceError !== undefined);
}

/**
 * Whether a 404 (`err`) for an object means it is gone. The service's own 404 says so; a bare
 * one says nothing of the object, which is asked about once by `lookup` (a GET of it): gone if
 * that answers the service's own 404, or with an object that has `ended` (a released VM). Any
 * other answer, or failure: not known to be gone, and the 404 stands as the failure it is
 * (tried again). Taking an object that is there for gone would make a second one next to it
 * (a VM allocated, then the first released with the workload in it), or drop a finalizer while
 * the object runs on.
 */
export async function goneIndeed<T>(err: unknown, lookup: () => Promise<T>, ended: (obj: T) => boolean = () => false): Promise<boolean> {
  if (!isNotFound(err)) return false;
  if (isServiceNotFound(err)) return true;
  try {
    return ended(await lookup());
  } catch (again) {
    // The GET through the same gateway answered a bare 404 too, or failed: not known either way.
    return isServiceNotFound(again);
  }
}

/** 409: e.g. an agent name already taken in the org. */
export function isConflict(e: unknown): boolean {
  return e instanceof ServiceError && e.status === 409;
}

/** 400: the service rejected the input; `serviceMessage` says why (show it to the user). */
export function isBadRequest(e: unknown): boolean {
  return e instanceof ServiceError && e.status === 400;
}

/** A create whose effect is unknown: look the object up before creating again. */
export function isOutcomeUnknown(e: unknown): boolean {
  return e instanceof ServiceError && e.outcomeUnknown;
}

/** Worth requeueing with backoff (5xx, 429, 503 pool empty, network, timeouts). */
export function isTransient(e: unknown): boolean {
  return e instanceof ServiceError && e.retryable;
}

/** Credentials refused (token service) or the service refused the token (401/403). */
export function isAuthError(e: unknown): boolean {
  if (!(e instanceof ServiceError)) return false;
  if (e.status === 401 || e.status === 403) return true;
  return e.operation === "token" && e.status === 400;
}

/**
 * The code (e.g. DEPTH_ZERO_SELF_SIGNED_CERT) when the call failed because the server's TLS
 * certificate could not be verified (self-signed, unknown CA, expired, wrong name); else undefined.
 */
export function tlsErrorCode(e: unknown): string | undefined {
  if (!(e instanceof ServiceError) || e.status !== undefined) return undefined;
  const code = (e.cause as { code?: unknown } | undefined)?.code;
  return typeof code === "string" && isTLSCode(code) ? code : undefined;
}

/** 429 from the service. */
export function isRateLimited(e: unknown): boolean {
  return e instanceof ServiceError && e.status === 429;
}

/**
 * How the operator reads a refusal by the service (a ServiceError with one of these statuses),
 * for the resource's conditions:
 *   400, 413, 422 -> reason "ServiceRejected", permanent: the input is wrong or too large, and
 *                    the same spec gets the same answer; Stalled until the spec changes;
 *   401, 403      -> reason "Unauthorized", not permanent: credentials are rotated and
 *                    permissions granted outside the resource; retried with backoff.
 * Anything else is not a refusal (undefined): transient, not found, or outcome unknown, as the
 * other predicates say. A 409 is not one either: what it means depends on the call (a create's
 * 409 is a name already taken, which the caller adopts or reports as NameTaken), so callers
 * branch on isConflict. `message` is written for a condition: the service's own message when
 * it gave one, else ours.
 */
export interface Refusal {
  reason: "ServiceRejected" | "Unauthorized";
  /** Only a change of the spec helps (Stalled=True); otherwise retried with backoff. */
  permanent: boolean;
  message: string;
}

export function refusalOf(e: unknown): Refusal | undefined {
  if (!(e instanceof ServiceError)) return undefined;
  // Which call, and its status: one resource makes several (an allocation, a renewal, a file
  // upload), and the service's own words seldom say which. Without them, the client's message
  // (which names the call, and what it kept of an answer of another shape).
  const why = e.serviceMessage === undefined ? e.message : `${e.operation} (HTTP ${e.status}): ${e.serviceMessage}`;
  switch (e.status) {
    case 400:
    case 413:
    case 422:
      return { reason: "ServiceRejected", permanent: true, message: `the service refused ${why}` };
    case 401:
    case 403:
      return { reason: "Unauthorized", permanent: false, message: `the service refused the credentials at ${why}` };
    default:
      return undefined;
  }
}

// ---------------------------------------------------------------------------------------
// Error body parsing

/** What we could read out of an error body of either shape (or of none). */
export interface ParsedErrorBody {
  code?: number;
  errorCode?: string;
  serviceError?: string;
  serviceMessage?: string;
  /** A short snippet of a body that was not a recognised JSON error (for the message). */
  snippet?: string;
}

/**
 * Whether an error body is the service's own: compute's {code, error_code, message} or the
 * registry's {error, message}. A proxy's answer (an HTML page, Envoy's text, a bare
 * {"message"}) is not.
 */
export function isServiceErrorBody(body: ParsedErrorBody): boolean {
  return body.errorCode !== undefined || body.serviceError !== undefined || body.code !== undefined;
}

const SNIPPET_MAX = 200;

/**
 * Reads compute `{code, error_code, message}` and registry `{error, message}` bodies; any
 * other body (empty, HTML from a proxy, plain text) becomes a short whitespace-collapsed
 * snippet. `secrets` are replaced before anything is kept.
 */
export function parseErrorBody(text: string, secrets: readonly string[]): ParsedErrorBody {
  const trimmed = text.trim();
  if (trimmed === "") return {};
  if (trimmed.startsWith("{")) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(trimmed);
    } catch {
      parsed = undefined;
    }
    if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) {
      const o = parsed as Record<string, unknown>;
      const out: ParsedErrorBody = {};
      if (typeof o.code === "number") out.code = o.code;
      if (typeof o.error_code === "string" && o.error_code !== "") out.errorCode = scrub(o.error_code, secrets);
      if (typeof o.error === "string" && o.error !== "") out.serviceError = scrub(o.error, secrets);
      let message = o.message;
      // Gateways in front of services sometimes nest: {"error": {"message": ...}}.
      if (typeof message !== "string" && o.error !== null && typeof o.error === "object") {
        message = (o.error as Record<string, unknown>).message;
      }
      if (typeof message === "string" && message !== "") out.serviceMessage = scrub(message, secrets);
      if (out.errorCode !== undefined || out.serviceError !== undefined || out.serviceMessage !== undefined) {
        return out;
      }
      if (out.code !== undefined) return { ...out, snippet: snippet(trimmed, secrets) };
    }
  }
  return { snippet: snippet(trimmed, secrets) };
}

function snippet(text: string, secrets: readonly string[]): string {
  // Scrub before truncating so that a secret cut in half by the truncation cannot survive.
  const flat = scrub(text, secrets).replace(/\s+/g, " ");
  return flat.length > SNIPPET_MAX ? `${flat.slice(0, SNIPPET_MAX)}…` : flat;
}

/**
 * Replaces every occurrence of a known secret, also in the forms a body or a URL carries it
 * (see writtenForms); where two overlap, both go under one [REDACTED]. A secret under 4
 * characters would match inside ordinary words, so it is replaced only where it stands alone
 * (see standsAlone): a short password in `"password":"abc"` goes, the "abc" of "abcdef" stays.
 */
export function scrub(text: string, secrets: readonly string[]): string {
  const found: Range[] = [];
  for (const secret of new Set(secrets)) {
    const short = secret.length < 4;
    for (const form of new Set(writtenForms(secret))) {
      for (let i = text.indexOf(form); i >= 0; i = text.indexOf(form, i + 1)) {
        if (!short || standsAlone(text, i, i + form.length)) found.push([i, i + form.length]);
      }
    }
  }
  if (found.length === 0) return text;
  let out = "";
  let at = 0;
  for (const [start, end] of mergeRanges(found)) {
    out += text.slice(at, start) + REDACTED;
    at = end;
  }
  return out + text.slice(at);
}

/** No letter or digit either side, but for the end of an escape before it (\n, %20, \u0026). */
function standsAlone(text: string, start: number, end: number): boolean {
  const before = text.slice(Math.max(0, start - 6), start);
  const clearBefore = !/[A-Za-z0-9]$/.test(before) || /(\\[nrt]|%[0-9A-Fa-f]{2}|\\u[0-9A-Fa-f]{4})$/.test(before);
  return clearBefore && !/[A-Za-z0-9]/.test(text[end] ?? "");
}

/**
 * Environment values may come from Secrets (envFrom): keep them out of error text. Those the
 * caller names as Secret values are kept out whatever their length (scrub matches one of under
 * 4 characters only where it stands alone); of the others, only those long enough not to be
 * ordinary words ("true", "prod") that an error message must keep.
 */
export function envSecrets(env: Record<string, string> | undefined, secretValues: readonly string[] = []): string[] | undefined {
  const vals = [...Object.values(env ?? {}).filter((v) => typeof v === "string" && v.length >= 8), ...secretValues.filter((v) => v !== "")];
  return vals.length > 0 ? vals : undefined;
}

/**
 * `agents.create: conflict: name "x" already taken (HTTP 409)`. `lead` replaces the body's
 * error kind with our own explanation (e.g. "credentials refused by the token service");
 * the service's message still follows it.
 */
export function httpErrorMessage(
  operation: string,
  status: number,
  statusText: string | undefined,
  body: ParsedErrorBody,
  opts: { lead?: string; suffix?: string } = {},
): string {
  const parts: string[] = [];
  const kind = body.errorCode ?? body.serviceError;
  if (opts.lead !== undefined) parts.push(opts.lead);
  else if (kind !== undefined) parts.push(kind);
  if (body.serviceMessage !== undefined) parts.push(body.serviceMessage);
  else if (opts.lead !== undefined && kind !== undefined) parts.push(kind);
  if (parts.length === 0) {
    parts.push(statusText !== undefined && statusText !== "" ? statusText : (STATUS_CODES[status] ?? "error"));
    if (body.snippet !== undefined) parts.push(body.snippet);
  }
  const tail = opts.suffix === undefined ? "" : `; ${opts.suffix}`;
  return `${operation}: ${parts.join(": ")} (HTTP ${status})${tail}`;
}
