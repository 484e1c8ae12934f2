// Options and hooks of the service client, with their defaults in one place: DEFAULTS is the
// one source of the client's defaults, also for the Connection CRD's schema (src/api/
// connection.ts) and the operator's connection pool. src/api (and so the CRD generator)
// imports this file: keep it free of value imports.

import type { Logger } from "pino";
import type { Credentials } from "./types.js";

export interface ServiceClientOptions {
  /** The service, e.g. https://api.example.com (a path prefix is kept). */
  baseURL: string;
  /**
   * The registry (`/registry/v1`), when it is served from another base URL than compute (the
   * official client has a separate registry base URL); default: baseURL.
   */
  registryURL?: string;
  /** The token service; the token is obtained from `POST {authURL}/token`. */
  authURL: string;
  credentials: Credentials;
  /** Client-side token bucket for every attempt to the service; default qps 50, burst 100. */
  rateLimit?: { qps: number; burst: number };
  /** Per attempt; default 30_000. */
  timeoutMs?: number;
  /** Defaults: maxAttempts 4 (first try included), baseDelayMs 200, maxDelayMs 30_000. */
  retry?: { maxAttempts?: number; baseDelayMs?: number; maxDelayMs?: number };
  /** Keep-alive sockets per origin; default 32. */
  maxConnections?: number;
  /** TLS verification is ON by default. */
  insecureSkipTLSVerify?: boolean;
  /** Extra CA (PEM text or a path to a PEM file), trusted in addition to the system roots. */
  caCert?: string;
  /** A child logger is made from it; secrets are redacted and never logged in the first place. */
  logger?: Logger;
  /** Metrics hooks (keeps prom-client out of this module). */
  hooks?: ServiceClientHooks;
  /** Clock (ms) for token expiry; default Date.now. */
  now?: () => number;
  /**
   * Asked right before every attempt of a call that changes something in the service (any
   * method but GET; token requests aside): throws to refuse it unsent. Sharded mode: a replica
   * whose membership is no longer current must not write for objects another replica may own
   * by now (src/sharding/).
   */
  writeGate?: () => void;
}

/** One HTTP attempt, as the onRequest hook reports it. */
export interface AttemptEvent {
  operation: string;
  method: string;
  status: number | "error";
  durationSeconds: number;
  attempt: number;
}

/**
 * What a ServiceClient lends another client that calls the same service with its token (a VM's
 * agentd through the compute API's forwarding route, agentd.ts): its rate limit, a token per
 * attempt and a 429 that holds back both; and its request metrics, each attempt counted with
 * the client's own.
 */
export interface Forwarding {
  /** Waits for a rate-limit token for one attempt of `operation`. */
  take(operation: string): Promise<void>;
  /** The service answered 429, with its Retry-After in ms if it gave one. */
  throttled(retryAfterMs: number | undefined): void;
  /** An attempt ended (answered, or `status` "error" when no answer came). */
  attempted(e: AttemptEvent): void;
}

/**
 * Called synchronously on the request path: keep them cheap, and do not throw (a throwing hook
 * is caught and logged, the call goes on).
 */
export interface ServiceClientHooks {
  /** Every HTTP attempt, token requests included (operation "token"). */
  onRequest?(e: AttemptEvent): void;
  /** Every HTTP attempt to the token endpoint. */
  onTokenRequest?(e: { ok: boolean; durationSeconds: number }): void;
  /** Before sleeping for a retry; `attempt` is the attempt that failed. */
  onRetry?(e: { operation: string; attempt: number; delayMs: number; reason: string }): void;
  /** An attempt waited in the client-side rate limiter. */
  onRateLimited?(e: { operation: string; waitMs: number }): void;
  /** The token service refused the credentials, having accepted them before or not yet been asked. */
  onCredentialsRefused?(): void;
}

export const DEFAULTS = {
  qps: 50,
  burst: 100,
  timeoutMs: 30_000,
  maxAttempts: 4,
  baseDelayMs: 200,
  maxDelayMs: 30_000,
  maxConnections: 32,
} as const;

export interface ResolvedRetry {
  maxAttempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

export function resolveRetry(r: ServiceClientOptions["retry"]): ResolvedRetry {
  const maxAttempts = r?.maxAttempts ?? DEFAULTS.maxAttempts;
  const baseDelayMs = r?.baseDelayMs ?? DEFAULTS.baseDelayMs;
  const maxDelayMs = r?.maxDelayMs ?? DEFAULTS.maxDelayMs;
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1) throw new RangeError(`retry.maxAttempts must be an integer >= 1, got ${maxAttempts}`);
  if (!(baseDelayMs >= 0)) throw new RangeError(`retry.baseDelayMs must be >= 0, got ${baseDelayMs}`);
  if (!(maxDelayMs >= baseDelayMs)) throw new RangeError(`retry.maxDelayMs must be >= baseDelayMs, got ${maxDelayMs}`);
  return { maxAttempts, baseDelayMs, maxDelayMs };
}
