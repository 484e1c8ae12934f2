// Retry policy: which failures are retried, which make a non-idempotent call's outcome
// unknown, and how long to wait. Pure functions, so the policy table in
// docs/service-client.md can be checked against one place.

/**
 * How a call may be repeated.
 * - "idempotent": repeating it leaves the service as one call would (GET, PUT, DELETE, and the
 *   POSTs renew, release, stop, redeploy, token). Any transient failure is retried.
 * - "unsafe": repeating it may do the work twice (agents.create, skills.create,
 *   deployments.deploy, vms.allocate, vms.execute). Retried only when the service certainly did
 *   nothing: nothing was sent (connection refused, DNS, connect timeout) or it answered 408,
 *   429 or (with its own error body) 503. Anything else after sending makes the outcome unknown.
 */
export type RetryClass = "idempotent" | "unsafe";

/** What went wrong with one attempt. */
export type Failure =
  | {
      kind: "status";
      status: number;
      /**
       * The answer carries the service's own error body ({code, error_code} or {error}); false
       * for a proxy's (Envoy's "upstream reset before headers", a CDN's page). Undefined: not known.
       */
      fromService?: boolean;
    }
  | {
      kind: "network";
      /** "no": the request never left (refused, DNS, connect timeout); "maybe": it may have been processed. */
      sent: "no" | "maybe";
      /** A configuration problem (TLS verification): retrying cannot help. */
      permanent: boolean;
    };

export interface Verdict {
  /** Repeat the call now (after a backoff), within the attempt budget. */
  retry: boolean;
  /** If we give up: may the caller try again later (requeue with backoff)? */
  transient: boolean;
  /** The call may have taken effect; the caller must look before creating again. */
  outcomeUnknown: boolean;
}

// Answers that mean "not processed": 408 (server gave up reading the request), 429 (rate
// limited before any work), 503 (unavailable; the service documents it for allocate's empty
// pool as "retry shortly"). A 503 a proxy answered (not the service's error body) is not
// among them: a proxy sends one when the upstream reset the connection before its headers,
// which may be after the service received the request.
const NOT_PROCESSED = new Set([408, 429, 503]);
// 5xx that say the server does not do what was asked (501 Not Implemented, 505 HTTP Version
// Not Supported): nothing was done, and asking again gets the same answer. Any other 5xx
// (500, 502, 504, 507, a CDN's 520-527, ...) is transient but says nothing about whether the
// work was done.
const NOT_SUPPORTED = new Set([501, 505]);

export function judge(cls: RetryClass, f: Failure): Verdict {
  if (f.kind === "status") {
    const proxied503 = f.status === 503 && f.fromService === false;
    if (NOT_PROCESSED.has(f.status) && !proxied503) return { retry: true, transient: true, outcomeUnknown: false };
    if (f.status >= 500 && f.status <= 599 && !NOT_SUPPORTED.has(f.status)) {
      return cls === "idempotent"
        ? { retry: true, transient: true, outcomeUnknown: false }
        : { retry: false, transient: true, outcomeUnknown: true };
    }
    // 400, 401, 403, 404, 409, 422, ...: the same request would get the same answer.
    return { retry: false, transient: false, outcomeUnknown: false };
  }
  if (f.permanent) return { retry: false, transient: false, outcomeUnknown: false };
  if (f.sent === "no" || cls === "idempotent") return { retry: true, transient: true, outcomeUnknown: false };
  return { retry: false, transient: true, outcomeUnknown: true };
}

// Node/undici error codes raised before a single byte of the request was written.
const NOT_SENT_CODES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EADDRNOTAVAIL",
  "UND_ERR_CONNECT_TIMEOUT",
]);

// TLS verification failures: the operator's configuration (caCert, insecureSkipTLSVerify) must change.
const TLS_CODES = new Set([
  "CERT_HAS_EXPIRED",
  "CERT_NOT_YET_VALID",
  "CERT_UNTRUSTED",
  "CERT_SIGNATURE_FAILURE",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "ERR_TLS_CERT_ALTNAME_INVALID",
]);

export function isNotSentCode(code: string | undefined): boolean {
  return code !== undefined && NOT_SENT_CODES.has(code);
}

export function isTLSCode(code: string | undefined): boolean {
  return code !== undefined && TLS_CODES.has(code);
}

export interface BackoffOptions {
  baseDelayMs: number;
  maxDelayMs: number;
}

/**
 * Full jitter (AWS architecture blog, "Exponential Backoff and Jitter"): a uniform delay in
 * [0, min(max, base·2^retry)]. Spreads a herd of callers that failed together better than
 * equal jitter, at the cost of sometimes retrying almost at once, which the rate limiter bounds.
 */
export function backoffDelay(retry: number, o: BackoffOptions, random: () => number = Math.random): number {
  const ceiling = Math.min(o.maxDelayMs, o.baseDelayMs * 2 ** retry);
  return Math.floor(random() * ceiling);
}

/**
 * The delay before the next attempt. A Retry-After wins over our own backoff (it is the
 * service's explicit instruction), plus a little jitter so that callers told the same instant
 * do not all arrive together.
 */
export function retryDelay(
  retry: number,
  retryAfterMs: number | undefined,
  o: BackoffOptions,
  random: () => number = Math.random,
): number {
  if (retryAfterMs === undefined) return backoffDelay(retry, o, random);
  return retryAfterMs + Math.floor(random() * Math.min(o.baseDelayMs, 1000));
}

/** The shortest attempt a deadline makes: an answer slower than this is not hurried further. */
export const MIN_ATTEMPT_MS = 2_000;

/**
 * How long one attempt may take when the call's answer is of use only until `neededBy` (a VM's
 * expiry, for its renewal): half the time left, so that a hung attempt (a black-holed backend, a
 * half-open connection) leaves time for another, but never less than MIN_ATTEMPT_MS nor more
 * than the client's timeout. Past `neededBy`, or without one, the client's timeout.
 */
export function attemptTimeout(timeoutMs: number, nowMs: number, neededBy: number | undefined): number {
  if (neededBy === undefined || !(neededBy > nowMs)) return timeoutMs;
  return Math.min(timeoutMs, Math.max(MIN_ATTEMPT_MS, Math.floor((neededBy - nowMs) / 2)));
}

/**
 * `Retry-After` as delay-seconds or an HTTP-date (RFC 9110 §10.2.3). Returns milliseconds,
 * or undefined when absent or unreadable (then our own backoff applies).
 */
export function parseRetryAfter(value: string | string[] | undefined, nowMs: number): number | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  if (v === undefined) return undefined;
  const s = v.trim();
  if (s === "") return undefined;
  if (/^\d+(\.\d+)?$/.test(s)) return Math.round(Number(s) * 1000);
  // An HTTP-date always names a month; this keeps Date.parse's leniency ("-1" is year -1) out.
  if (!/[a-z]/i.test(s)) return undefined;
  const t = Date.parse(s);
  if (Number.isNaN(t)) return undefined;
  return Math.max(0, t - nowMs);
}
