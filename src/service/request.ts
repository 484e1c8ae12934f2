// The attempt loop shared by every call (token requests included):
//   rate limit -> bearer token -> one HTTP attempt -> hooks/log -> success, 401 re-auth,
//   retry with backoff, or a ServiceError.
// It returns the raw 2xx answer; decoding is the facade's job.

import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "pino";
import { ServiceError, httpErrorMessage, isServiceErrorBody, parseErrorBody } from "./errors.js";
import type { Operation } from "./errors.js";
import { TransportError } from "./http.js";
import type { HttpMethod, HttpResponse, HttpTransport } from "./http.js";
import type { ResolvedRetry, ServiceClientHooks } from "./options.js";
import type { ClientRateLimiter } from "./rate-limit.js";
import { attemptTimeout, backoffDelay, judge, parseRetryAfter, retryDelay } from "./retry.js";
import type { Failure, RetryClass } from "./retry.js";
import { REGISTRY } from "./operations.js";
import { RefusedTokens } from "./token.js";
import type { TokenSource } from "./token.js";

export interface CallSpec {
  operation: Operation;
  method: HttpMethod;
  cls: RetryClass;
  origin: string;
  /** Path and query, already encoded. */
  path: string;
  /** JSON text; never quoted in errors or logs. */
  body?: string;
  /** Extra headers (X-API-Key, X-Workspace-Id, ...). */
  headers?: Record<string, string>;
  /** Send the bearer token (and re-authenticate on a 401: RefusedTokens). */
  auth: boolean;
  /** Take a rate-limiter token per attempt (service calls; not the token service). */
  limited: boolean;
  /** Secrets carried by this request (e.g. an image pull password) to scrub from answers. */
  secrets?: readonly string[];
  /** A better first phrase for some statuses (e.g. 401 from the token service). */
  explain?: (status: number) => string | undefined;
  /** The call changes something in the service: each attempt passes the write gate first. */
  writes?: boolean;
  /** When the answer stops being of use (epoch ms): attempts are shortened (attemptTimeout). */
  neededBy?: number;
}

type HookEvent<K extends keyof ServiceClientHooks> = Parameters<NonNullable<ServiceClientHooks[K]>>[0];

export interface RequesterDeps {
  transport: HttpTransport;
  limiter: ClientRateLimiter;
  retry: ResolvedRetry;
  hooks: ServiceClientHooks;
  log: Logger;
  /** The client's own secrets (API key, client secret) to scrub from any text we keep. */
  secrets: readonly string[];
  userAgent: string;
  /** The transport's timeout for one attempt (ServiceClientOptions.timeoutMs). */
  timeoutMs: number;
  /** The clock CallSpec.neededBy is on (ServiceClientOptions.now). */
  now: () => number;
  /** ServiceClientOptions.writeGate. */
  writeGate?: () => void;
}

const JSON_TYPE = "application/json";

export class Requester {
  private tokens: TokenSource | undefined;
  private readonly closing = new AbortController();

  constructor(private readonly d: RequesterDeps) {}

  setTokenSource(t: TokenSource): void {
    this.tokens = t;
  }

  /** Cancels backoff sleeps so that close() does not wait for them. */
  close(): void {
    this.closing.abort();
    this.d.limiter.close();
  }

  /** Takes a rate-limiter token for one attempt, waiting FIFO behind the others if none is free. */
  async takeRateToken(operation: string): Promise<void> {
    const { d } = this;
    if (d.limiter.tryTake()) return;
    const waitMs = await d.limiter.wait().catch((e: unknown) => {
      throw closedError(operation, e);
    });
    if (d.hooks.onRateLimited !== undefined) this.emit("onRateLimited", { operation, waitMs });
  }

  /** An attempt made by a client this one lends its token to (ServiceClient.forwarding): counted as one of its own. */
  attempted(e: HookEvent<"onRequest">): void {
    if (this.d.hooks.onRequest !== undefined) this.emit("onRequest", e);
  }

  /** The service answered 429: every call of the client waits until `retryAfterMs` (or a backoff) from now. */
  throttled(retryAfterMs: number | undefined, retries = 0): void {
    // At most maxDelayMs: a Retry-After of an hour (or an HTTP-date a skewed clock puts far
    // ahead) must not hold every call of the client, VM renewals among them, for that long.
    // A 429 after the pause pauses again.
    this.d.limiter.pause(Math.min(retryAfterMs ?? backoffDelay(retries, this.d.retry), this.d.retry.maxDelayMs));
  }

  async call(spec: CallSpec): Promise<HttpResponse> {
    const { d } = this;
    const debug = d.log.isLevelEnabled("debug");
    let attempt = 0;
    let retries = 0;
    const refused = new RefusedTokens();
    for (;;) {
      attempt++;
      if (spec.limited) await this.takeRateToken(spec.operation);

      let bearer: string | undefined;
      if (spec.auth) {
        // Fetched after the rate limiter: a token taken before a long wait could expire in the queue.
        bearer = this.tokens?.peek() ?? (await this.requireTokens().get());
      }

      const headers: Record<string, string> = { accept: JSON_TYPE, "user-agent": d.userAgent };
      if (spec.body !== undefined) headers["content-type"] = JSON_TYPE;
      if (bearer !== undefined) headers.authorization = `Bearer ${bearer}`;
      if (spec.headers !== undefined) Object.assign(headers, spec.headers);

      // Last thing before sending: the wait for the rate limiter, a token or a backoff may have
      // outlasted what allowed the call when it began.
      if (spec.writes === true) d.writeGate?.();

      const started = performance.now();
      let res: HttpResponse | undefined;
      let netErr: TransportError | undefined;
      try {
        const timeoutMs = attemptTimeout(d.timeoutMs, d.now(), spec.neededBy);
        res = await d.transport.send({ origin: spec.origin, path: spec.path, method: spec.method, headers, body: spec.body, timeoutMs });
      } catch (e) {
        if (!(e instanceof TransportError)) throw e;
        netErr = e;
      }
      const durationSeconds = (performance.now() - started) / 1000;
      const status = res?.status ?? "error";
      // Events are only built when someone listens.
      if (d.hooks.onRequest !== undefined) {
        this.emit("onRequest", { operation: spec.operation, method: spec.method, status, durationSeconds, attempt });
      }
      if (spec.operation === "token" && d.hooks.onTokenRequest !== undefined) {
        this.emit("onTokenRequest", { ok: res !== undefined && res.status >= 200 && res.status < 300, durationSeconds });
      }
      if (debug) {
        // Only scalars: nothing here can carry a secret, and nothing is re-serialised.
        d.log.debug(
          { operation: spec.operation, method: spec.method, path: spec.path, status, attempt, ms: Math.round(durationSeconds * 1000), error: netErr?.code },
          "service request",
        );
      }

      if (res !== undefined && res.status >= 200 && res.status < 300) return res;

      if (res !== undefined && res.status === 401 && spec.auth && bearer !== undefined && refused.retryAfter(bearer)) {
        // Revoked or expired early: a refresh (shared with concurrent callers) and a retry.
        this.requireTokens().invalidate(bearer);
        continue;
      }

      const failure: Failure =
        res !== undefined
          ? { kind: "status", status: res.status, ...(res.status === 503 && { fromService: answeredByService(parseErrorBody(res.text, []), spec) }) }
          : { kind: "network", sent: netErr?.sent ?? "maybe", permanent: netErr?.permanent ?? false };
      const verdict = judge(spec.cls, failure);
      const retryAfterMs = res !== undefined ? parseRetryAfter(res.headers["retry-after"], Date.now()) : undefined;
      if (res?.status === 429 && spec.limited) {
        // Adaptive: the whole client holds back, not just this call.
        this.throttled(retryAfterMs, retries);
      }

      const budgetLeft = retries + 1 < d.retry.maxAttempts;
      const waitTooLong = retryAfterMs !== undefined && retryAfterMs > d.retry.maxDelayMs;
      if (verdict.retry && budgetLeft && !waitTooLong) {
        const delayMs = retryDelay(retries, retryAfterMs, d.retry);
        retries++;
        refused.waited();
        const reason = res !== undefined ? `HTTP ${res.status}` : (netErr?.code ?? "network error");
        if (d.hooks.onRetry !== undefined) this.emit("onRetry", { operation: spec.operation, attempt, delayMs, reason });
        if (debug) d.log.debug({ operation: spec.operation, attempt, delayMs, reason }, "retrying service request");
        if (delayMs > 0) {
          await sleep(delayMs, undefined, { signal: this.closing.signal }).catch((e: unknown) => {
            throw closedError(spec.operation, e);
          });
        }
        continue;
      }

      const gaveUp = verdict.retry ? (waitTooLong ? `asked to retry after ${retryAfterMs} ms` : `gave up after ${attempt} attempts`) : undefined;
      throw this.failure(spec, res, netErr, bearer, verdict, retryAfterMs, attempt, gaveUp);
    }
  }

  private failure(
    spec: CallSpec,
    res: HttpResponse | undefined,
    netErr: TransportError | undefined,
    bearer: string | undefined,
    verdict: { transient: boolean; outcomeUnknown: boolean },
    retryAfterMs: number | undefined,
    attempts: number,
    gaveUp: string | undefined,
  ): ServiceError {
    const notes: string[] = [];
    if (verdict.outcomeUnknown) notes.push("the request may have taken effect (outcome unknown): look it up before creating again");
    if (gaveUp !== undefined) notes.push(gaveUp);
    const suffix = notes.length > 0 ? notes.join("; ") : undefined;
    const base = { operation: spec.operation, retryable: verdict.transient, outcomeUnknown: verdict.outcomeUnknown, retryAfterMs, attempts };
    if (res === undefined) {
      const what = netErr?.message ?? "network error";
      return new ServiceError({ ...base, message: `${spec.operation}: ${what}${suffix !== undefined ? `; ${suffix}` : ""}`, cause: netErr });
    }
    const secrets = this.secretsFor(spec, bearer);
    const body = parseErrorBody(res.text, secrets);
    const message = httpErrorMessage(spec.operation, res.status, res.statusText, body, { lead: spec.explain?.(res.status), suffix });
    return new ServiceError({
      ...base,
      message,
      status: res.status,
      code: body.code,
      errorCode: body.errorCode,
      serviceError: body.serviceError,
      serviceMessage: body.serviceMessage,
    });
  }

  private secretsFor(spec: CallSpec, bearer: string | undefined): readonly string[] {
    const extra: string[] = [];
    if (bearer !== undefined) extra.push(bearer);
    if (spec.secrets !== undefined) extra.push(...spec.secrets);
    return extra.length === 0 ? this.d.secrets : [...this.d.secrets, ...extra];
  }

  private requireTokens(): TokenSource {
    if (this.tokens === undefined) throw new Error("service client: no token source");
    return this.tokens;
  }

  /** Calls a metrics hook; a throwing hook is logged, never allowed to fail the call. */
  private emit<K extends keyof ServiceClientHooks>(name: K, event: HookEvent<K>): void {
    const fn = this.d.hooks[name] as ((e: HookEvent<K>) => void) | undefined;
    try {
      fn?.call(this.d.hooks, event);
    } catch (e) {
      this.d.log.warn({ err: e, hook: name }, "service client hook threw");
    }
  }
}

function closedError(operation: string, cause: unknown): ServiceError {
  return new ServiceError({ operation, message: `${operation}: service client closed`, retryable: false, cause });
}

/**
 * Whether a 503 is the service's own "not processed" rather than a proxy's. A bare `{code,
 * message}` is also what a gateway writes when the upstream reset before its headers (ESPv2,
 * API Gateway), which may be after the service took the request, and `{error}` what a Spring
 * one writes: a call that is not idempotent takes it as the service's only by the field its
 * own service's errors have, `error_code` (compute) or `error` (registry), and otherwise as an
 * outcome unknown (looked up before it is made again).
 */
function answeredByService(body: ReturnType<typeof parseErrorBody>, spec: { cls: RetryClass; path: string }): boolean {
  if (spec.cls === "idempotent") return isServiceErrorBody(body);
  return spec.path.startsWith(`${REGISTRY}/`) ? body.serviceError !== undefined : body.errorCode !== undefined;
}
