// The token service: issues opaque bearer tokens for an API key or client credentials, and
// checks them on every service call. Expiry runs on the emulator's clock so tests can move
// time instead of waiting 15 minutes.
import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";
import type { JsonObject, TokenResponse } from "../service/types.js";
import { ServiceError } from "./errors.js";
import { newToken } from "./util.js";

export interface AuthConfig {
  now(): number;
  apiKey(): string;
  clients(): readonly { clientId: string; clientSecret: string }[];
  tokenTTLSeconds(): number;
  omitExpiresIn(): boolean;
}

/** Compare secrets in constant time; hashing first makes the lengths equal. */
function secretEquals(a: string, b: string): boolean {
  const ha = createHash("sha256").update(a).digest();
  const hb = createHash("sha256").update(b).digest();
  return timingSafeEqual(ha, hb);
}

const invalidClient = (message: string): ServiceError => new ServiceError(401, "invalid_client", message);

export class TokenStore {
  /** token -> expiry on the emulator's clock (ms). */
  private readonly tokens = new Map<string, number>();
  onChange: () => void = () => {};

  constructor(private readonly config: AuthConfig) {}

  get size(): number {
    return this.tokens.size;
  }

  /** POST /auth/token: an X-API-Key header wins over a client_credentials body. */
  issue(headers: IncomingHttpHeaders, body: () => JsonObject): TokenResponse {
    const key = headers["x-api-key"];
    if (typeof key === "string" && key !== "") {
      if (!secretEquals(key, this.config.apiKey())) throw invalidClient("invalid API key");
      return this.mint();
    }
    const b = body();
    if (Object.keys(b).length === 0) throw invalidClient("missing credentials: send X-API-Key or a client_credentials body");
    if (b["grant_type"] !== "client_credentials") {
      throw new ServiceError(400, "unsupported_grant_type", 'grant_type must be "client_credentials"');
    }
    const id = b["client_id"];
    const secret = b["client_secret"];
    if (typeof id !== "string" || id === "") throw invalidClient("client_id is required");
    if (typeof secret !== "string" || secret === "") throw invalidClient("client_secret is required");
    const client = this.config.clients().find((c) => c.clientId === id);
    // Check the secret even for an unknown id so timing does not reveal which ids exist.
    const ok = secretEquals(secret, client?.clientSecret ?? "\0no-such-client");
    if (!client || !ok) throw invalidClient("invalid client credentials");
    return this.mint();
  }

  /** Throws 401 unless the Authorization header carries a live token. */
  check(authorization: string | undefined): void {
    const m = authorization === undefined ? null : /^Bearer\s+(\S+)\s*$/i.exec(authorization);
    if (!m) throw unauthorized("missing bearer token");
    const expiresAt = this.tokens.get(m[1]!);
    if (expiresAt === undefined) throw unauthorized("invalid token");
    if (this.config.now() >= expiresAt) {
      this.tokens.delete(m[1]!);
      throw unauthorized("token expired");
    }
  }

  revokeAll(): void {
    this.tokens.clear();
    this.onChange();
  }

  /** Forget expired tokens so a long run does not accumulate them. */
  prune(): void {
    const now = this.config.now();
    for (const [token, expiresAt] of this.tokens) if (now >= expiresAt) this.tokens.delete(token);
  }

  snapshot(): { token: string; expiresAt: number }[] {
    return [...this.tokens].map(([token, expiresAt]) => ({ token, expiresAt }));
  }

  restore(tokens: readonly { token: string; expiresAt: number }[]): void {
    this.tokens.clear();
    for (const t of tokens) this.tokens.set(t.token, t.expiresAt);
  }

  private mint(): TokenResponse {
    const ttl = this.config.tokenTTLSeconds();
    const token = newToken(32);
    this.tokens.set(token, this.config.now() + ttl * 1000);
    this.onChange();
    const res: TokenResponse = { access_token: token, token_type: "Bearer" };
    if (!this.config.omitExpiresIn()) res.expires_in = ttl;
    return res;
  }
}

function unauthorized(message: string): ServiceError {
  return new ServiceError(401, "unauthorized", message, { "WWW-Authenticate": 'Bearer error="invalid_token"' });
}
