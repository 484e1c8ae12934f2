// The token service: issues opaque bearer tokens for an API key or client credentials, and
// checks them on every service call. Expiry runs on the emulator's clock so tests can move
// time instead of waiting 15 minutes. Each token remembers the client it was issued to, so
// revoking an access client also ends its tokens.
import type { IncomingHttpHeaders } from "node:http";
import { ServiceError } from "./errors.js";
import { newToken, secretEquals } from "./util.js";
import type { JsonObject, TokenResponse } from "./wire.js";

export interface AuthConfig {
  now(): number;
  apiKey(): string;
  /** True for an active client with this secret (see AccessClients). */
  verifyClient(clientId: string, secret: string): boolean;
  tokenTTLSeconds(): number;
  omitExpiresIn(): boolean;
}

export interface StoredToken {
  token: string;
  expiresAt: number;
  /** The access client it was issued to; absent for the API key. */
  clientId?: string;
}

const invalidClient = (message: string): ServiceError => new ServiceError(401, "invalid_client", message);

export class TokenStore {
  private readonly tokens = new Map<string, { expiresAt: number; clientId: string | undefined }>();
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
      return this.mint(undefined);
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
    if (!this.config.verifyClient(id, secret)) throw invalidClient("invalid client credentials");
    return this.mint(id);
  }

  /** Throws 401 unless the Authorization header carries a live token. */
  check(authorization: string | undefined): void {
    const m = authorization === undefined ? null : /^Bearer\s+(\S+)\s*$/i.exec(authorization);
    if (!m) throw unauthorized("missing bearer token");
    const entry = this.tokens.get(m[1]!);
    if (entry === undefined) throw unauthorized("invalid token");
    if (this.config.now() >= entry.expiresAt) {
      this.tokens.delete(m[1]!);
      throw unauthorized("token expired");
    }
  }

  revokeAll(): void {
    this.tokens.clear();
    this.onChange();
  }

  /** Every token issued to this client becomes invalid now. */
  revokeClient(clientId: string): void {
    for (const [token, entry] of this.tokens) if (entry.clientId === clientId) this.tokens.delete(token);
    this.onChange();
  }

  /** Forget expired tokens so a long run does not accumulate them. */
  prune(): void {
    const now = this.config.now();
    for (const [token, entry] of this.tokens) if (now >= entry.expiresAt) this.tokens.delete(token);
  }

  snapshot(): StoredToken[] {
    return [...this.tokens].map(([token, { expiresAt, clientId }]) => ({ token, expiresAt, ...(clientId !== undefined && { clientId }) }));
  }

  restore(tokens: readonly StoredToken[]): void {
    this.tokens.clear();
    for (const t of tokens) this.tokens.set(t.token, { expiresAt: t.expiresAt, clientId: t.clientId });
  }

  private mint(clientId: string | undefined): TokenResponse {
    const ttl = this.config.tokenTTLSeconds();
    const token = newToken(32);
    this.tokens.set(token, { expiresAt: this.config.now() + ttl * 1000, clientId });
    this.onChange();
    const res: TokenResponse = { access_token: token, token_type: "Bearer" };
    if (!this.config.omitExpiresIn()) res.expires_in = ttl;
    return res;
  }
}

function unauthorized(message: string): ServiceError {
  return new ServiceError(401, "unauthorized", message, { "WWW-Authenticate": 'Bearer error="invalid_token"' });
}
