// Access clients (client_credentials pairs). Two kinds: those configured by the `clients`
// option (their secret is in the options) and those created through
// POST /compute/v1/access/clients (only a hash of the secret is kept: it is shown once).
// Both kinds can be revoked; a revoked client stays listed with is_active false and its
// credentials are refused. The API key is not an OAuth client (the list's model is
// iamclient.OAuthClient): it is not listed, and its id is unknown here.
import { createHash } from "node:crypto";
import { notFound } from "./errors.js";
import type { StoredAccessClient } from "./records.js";
import { newId, newToken, rfc3339, secretEquals } from "./util.js";
import type { AccessClient, CreatedAccessClient } from "./wire.js";

export interface ConfiguredClient {
  clientId: string;
  clientSecret: string;
}

export interface AccessClientsConfig {
  now(): number;
  /** The `clients` option (changeable at run time). */
  configured(): readonly ConfiguredClient[];
  /** created_at of the API key and configured clients: the emulator's start. */
  startedAt(): number;
}

const sha256 = (s: string): string => createHash("sha256").update(s).digest("hex");

export class AccessClients {
  private readonly created = new Map<string, StoredAccessClient>();
  /** Ids of configured clients revoked through the API (kept across restarts). */
  private readonly revokedConfigured = new Set<string>();
  onChange: () => void = () => {};
  /** Called with a client id when it is revoked, so its tokens can go too. */
  onRevoke: (clientId: string) => void = () => {};

  constructor(private readonly config: AccessClientsConfig) {}

  create(name: string): CreatedAccessClient {
    const secret = newToken(32);
    const client: StoredAccessClient = {
      client_id: newId(),
      name,
      secret_sha256: sha256(secret),
      is_active: true,
      created_at: rfc3339(this.config.now()),
    };
    this.created.set(client.client_id, client);
    this.onChange();
    return { client_id: client.client_id, client_secret: secret, name };
  }

  /** Configured clients, then created ones (in creation order). */
  list(): AccessClient[] {
    const startedAt = rfc3339(this.config.startedAt());
    return [
      ...this.config.configured().map((c) => ({ client_id: c.clientId, name: c.clientId, is_active: !this.revokedConfigured.has(c.clientId), created_at: startedAt })),
      ...[...this.created.values()].map((c) => ({ client_id: c.client_id, name: c.name, is_active: c.is_active, created_at: c.created_at })),
    ];
  }

  /** Revoking an already revoked client is a no-op (it still exists, inactive). */
  revoke(clientId: string): void {
    const created = this.created.get(clientId);
    if (created) {
      created.is_active = false;
    } else if (this.config.configured().some((c) => c.clientId === clientId)) {
      this.revokedConfigured.add(clientId);
    } else {
      throw notFound(`access client ${clientId} not found`);
    }
    this.onChange();
    this.onRevoke(clientId);
  }

  /** True for an active client whose secret matches. */
  verify(clientId: string, secret: string): boolean {
    const created = this.created.get(clientId);
    if (created) return secretEquals(sha256(secret), created.secret_sha256) && created.is_active;
    const configured = this.config.configured().find((c) => c.clientId === clientId);
    // Compare even for an unknown id, so timing does not reveal which ids exist.
    const ok = secretEquals(secret, configured?.clientSecret ?? "\0no-such-client");
    return configured !== undefined && ok && !this.revokedConfigured.has(clientId);
  }

  snapshot(): { created: StoredAccessClient[]; revokedConfigured: string[] } {
    return { created: [...this.created.values()], revokedConfigured: [...this.revokedConfigured] };
  }

  restore(s: { created: readonly StoredAccessClient[]; revokedConfigured: readonly string[] }): void {
    this.created.clear();
    this.revokedConfigured.clear();
    for (const c of s.created) this.created.set(c.client_id, { ...c });
    for (const id of s.revokedConfigured) this.revokedConfigured.add(id);
  }
}
