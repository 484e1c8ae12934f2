// TokenSource: one bearer-token cache per client.
//
// - A token is reused until 30 s before it expires (or a tenth of its lifetime for short
//   tokens, so a 5 s token costs about one request per lifetime, not two), then refreshed.
// - All callers that need a fresh token at the same moment share ONE in-flight request.
// - `invalidate(token)` is called when the service answers 401 with that token; only the first
//   caller to report a given token clears it, so N concurrent 401s cause one refresh.
// - RefusedTokens says, for one call, which 401s earn a new token and another attempt.
// - Within the margin the refresh runs in the background: calls go on with the cached token,
//   which still works, rather than wait for a slow token service. If it fails, the cached
//   token keeps being used until it actually expires (the token service may be briefly down;
//   the service is not), and the refresh is tried again every few seconds.

import type { Logger } from "pino";

/** What the token endpoint gave us. */
export interface IssuedToken {
  accessToken: string;
  /** Seconds (the service's `expires_in`, 900 when absent). */
  expiresInSeconds: number;
}

interface Cached {
  token: string;
  /** Clock ms at which the token stops working (measured from when we asked for it). */
  expiresAt: number;
  /** Clock ms from which we fetch a new one. */
  refreshAt: number;
}

/** Refresh this long before expiry (the official SDK's 30 s). */
export const REFRESH_MARGIN_MS = 30_000;
/** How long after a failed background refresh the next is tried. */
const REFRESH_RETRY_MS = 5_000;
/** `expires_in` when the token service omits it. */
export const DEFAULT_EXPIRES_IN_SECONDS = 900;

export class TokenSource {
  private current: Cached | undefined;
  private inflight: Promise<Cached> | undefined;
  /** After a background refresh failed: the next is tried from then (not at every call). */
  private retryRefreshAt = -Infinity;

  constructor(
    private readonly fetchToken: () => Promise<IssuedToken>,
    private readonly now: () => number,
    private readonly log?: Logger,
  ) {}

  /** The cached token if it is still good, without allocating a promise (the hot path). */
  peek(): string | undefined {
    const c = this.current;
    return c !== undefined && this.now() < c.refreshAt ? c.token : undefined;
  }

  async get(): Promise<string> {
    return (await this.getCached()).token;
  }

  /** Obtains (or reuses) a token and says when it expires. */
  async authenticate(): Promise<{ expiresAt: Date }> {
    const c = await this.getCached();
    return { expiresAt: new Date(c.expiresAt) };
  }

  /** The service refused `token` (401): forget it unless it was already replaced. */
  invalidate(token: string): void {
    if (this.current !== undefined && this.current.token === token) this.current = undefined;
  }

  private async getCached(): Promise<Cached> {
    const c = this.current;
    const now = this.now();
    if (c !== undefined && now < c.refreshAt) return c;
    if (c !== undefined && now < c.expiresAt) {
      // In the margin: refreshed in the background while the calls go on with the token, which
      // still works. Waiting for the refresh would hold every call of the client for as long
      // as a slow or hung token service takes (its retries: minutes), VM renewals among them.
      if (this.inflight === undefined && now >= this.retryRefreshAt) {
        this.refresh().catch((e: unknown) => {
          this.retryRefreshAt = this.now() + REFRESH_RETRY_MS;
          this.log?.warn({ err: e }, "token refresh failed; using the cached token until it expires");
        });
      }
      return c;
    }
    // None, or expired: nothing to ride out on.
    return this.refresh();
  }

  private refresh(): Promise<Cached> {
    if (this.inflight === undefined) {
      const requestedAt = this.now();
      this.inflight = this.fetchToken()
        .then((t) => {
          const ttlMs = t.expiresInSeconds * 1000;
          const margin = Math.min(REFRESH_MARGIN_MS, ttlMs / 10);
          const c: Cached = { token: t.accessToken, expiresAt: requestedAt + ttlMs, refreshAt: requestedAt + ttlMs - margin };
          this.current = c;
          this.log?.debug({ expiresInSeconds: t.expiresInSeconds }, "token obtained");
          return c;
        })
        .finally(() => {
          this.inflight = undefined;
        });
    }
    return this.inflight;
  }
}

/** New tokens one call gets after 401s in a row; the next 401 ends it (credentials the service does not accept). */
export const TOKEN_REFRESHES_PER_CALL = 2;

/**
 * Which 401s of one call earn a new token and one more attempt. Each token may be refused
 * once: a token fetched while the service was revoking tokens (or one that expired on its way
 * through a slow token service) is refused too, and the call gets another. The same token
 * refused twice (a token service that hands the same one back) or a third refused in a row
 * (TOKEN_REFRESHES_PER_CALL: the service does not accept what these credentials get) end the
 * call, since a further token would be refused as well.
 */
export class RefusedTokens {
  private refused: string | undefined;
  private refreshes = 0;

  /** The token refused last, if any (the one to replace: TokenSource.invalidate). */
  get last(): string | undefined {
    return this.refused;
  }

  /** The service answered 401 to `token`: true when the call should get a new one and try again. */
  retryAfter(token: string): boolean {
    if (token === this.refused || this.refreshes >= TOKEN_REFRESHES_PER_CALL) return false;
    this.refused = token;
    this.refreshes++;
    return true;
  }

  /** The call waited (a backoff): a wait may outlast a short-lived token, so refusals count anew. */
  waited(): void {
    this.refreshes = 0;
  }
}

/**
 * Reads the token endpoint's answer. Returns undefined when there is no usable access_token;
 * `expires_in` may be absent (900), a number or a numeric string.
 */
export function parseTokenResponse(body: unknown): IssuedToken | undefined {
  if (body === null || typeof body !== "object" || Array.isArray(body)) return undefined;
  const o = body as Record<string, unknown>;
  if (typeof o.access_token !== "string" || o.access_token === "") return undefined;
  const raw = typeof o.expires_in === "string" ? Number(o.expires_in) : o.expires_in;
  const expiresInSeconds = typeof raw === "number" && Number.isFinite(raw) && raw > 0 ? raw : DEFAULT_EXPIRES_IN_SECONDS;
  return { accessToken: o.access_token, expiresInSeconds };
}
