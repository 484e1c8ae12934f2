// ServiceClient: the typed facade over the Agent Registry and Compute Service
// (shared/design/SERVICE.md). Methods are grouped by resource; each one calls a row of the
// operation table (operations.ts: its HTTP method, whether it may be repeated, path, body,
// decoding). The attempt loop (rate limit, token, retry) is in request.ts; this file wires
// them together, pages through lists, and talks to the token service.

import pino, { type Logger } from "pino";
import { REDACTED, REDACT_PATHS } from "../lib/redact-paths.js";
import { InvalidEndpointError, ServiceError, isAuthError, isServiceErrorBody } from "./errors.js";
import { HttpTransport, type HttpResponse } from "./http.js";
import { OPERATIONS, REGISTRY, decodeJson, pathOf, queryString } from "./operations.js";
import type { AgentsAPI, ArgsOf, DeploymentsAPI, OperationName, OperationSpec, PoolAPI, ResultOf, SkillsAPI, UsageAPI, VMsAPI } from "./operations.js";
import { DEFAULTS, resolveRetry } from "./options.js";
import type { Forwarding, ServiceClientHooks, ServiceClientOptions } from "./options.js";
import { ClientRateLimiter, type RateLimitOptions } from "./rate-limit.js";
import { Requester } from "./request.js";
import { userAgent } from "./user-agent.js";
import { TokenSource, parseTokenResponse } from "./token.js";
import type { IssuedToken } from "./token.js";
import type { AccessClient, Credentials } from "./types.js";

/** How long a refusal of the credentials by the token service is answered again without asking. */
export const REFUSAL_HOLD_MS = 30_000;

/** What the token service said of a client's credentials (`ServiceClient.credentials()`). */
export type CredentialsVerdict = "accepted" | "refused" | "unknown";

export type { AgentsAPI, DeploymentsAPI, PoolAPI, SkillsAPI, UsageAPI, VMsAPI } from "./operations.js";
export type { ServiceClientHooks, ServiceClientOptions } from "./options.js";

/** Page size used by the listAll helpers and usage.list. */
export const PAGE_SIZE = 100;

/**
 * The client's logger: a child of `parent` that censors REDACT_PATHS. Its `redact` replaces the
 * parent's (pino 10), so it is given the whole list, the paths of the operator's logger
 * (createLogger), not a list of the client's own. (The client never logs a body, a header or a
 * credential in the first place: the paths are a second line of defence.)
 */
export function clientLogger(parent: Logger | undefined): Logger {
  return (parent ?? pino({ level: "silent" })).child({ component: "service-client" }, { redact: { paths: [...REDACT_PATHS], censor: REDACTED } });
}

interface Endpoint {
  origin: string;
  /** Path prefix of the base URL without a trailing slash ("" for none). */
  prefix: string;
}

export { setServiceReplica } from "./user-agent.js";

export class ServiceClient {
  readonly agents: AgentsAPI = {
    create: (req) => this.call("agents.create", req),
    list: (q) => this.call("agents.list", q),
    // The registry reports `total`: paged until that many are read, or a page comes back empty
    // (so a server-side page cap below 100 costs nothing).
    listAll: (q) =>
      pageAll(
        "agents.list",
        async (limit, offset) => {
          const page = await this.agents.list({ ...q, limit, offset });
          return { items: page.agents, total: page.total };
        },
        (a) => a.id,
      ),
    get: (id) => this.call("agents.get", id),
    update: (id, req) => this.call("agents.update", id, req),
    delete: (id) => this.call("agents.delete", id),
    search: (capabilities) => this.call("agents.search", capabilities),
  };

  readonly deployments: DeploymentsAPI = {
    deploy: (agentId, options) => this.call("deployments.deploy", agentId, options),
    list: () => this.call("deployments.list"),
    get: (id) => this.call("deployments.get", id),
    stop: (id) => this.call("deployments.stop", id),
    redeploy: (id) => this.call("deployments.redeploy", id),
    delete: (id) => this.call("deployments.delete", id),
  };

  readonly vms: VMsAPI = {
    allocate: (req, secretValues) => this.call("vms.allocate", req, secretValues),
    list: (q) => this.call("vms.list", q),
    listAll: (q) => pageAll("vms.list", async (limit, offset) => ({ items: await this.vms.list({ ...q, limit, offset }) }), (v) => v.id),
    get: (id) => this.call("vms.get", id),
    renew: (id, ttlSeconds, opts) => this.callBy(opts?.neededBy, "vms.renew", id, ttlSeconds),
    release: (id, recycle) => this.call("vms.release", id, recycle),
    delete: (id) => this.call("vms.delete", id),
    endpoint: (id) => this.call("vms.endpoint", id),
    execute: (id, body) => this.call("vms.execute", id, body),
  };

  readonly skills: SkillsAPI = {
    create: (req) => this.call("skills.create", req),
    list: () => this.call("skills.list"),
    get: (name) => this.call("skills.get", name),
    update: (name, req) => this.call("skills.update", name, req),
    delete: (name) => this.call("skills.delete", name),
  };

  readonly pool: PoolAPI = {
    config: () => this.call("pool.config"),
  };

  readonly usage: UsageAPI = {
    list: async (q) => {
      if (q.workspaceId === "" || q.environmentId === "") {
        throw new TypeError("usage.list: workspaceId and environmentId are required");
      }
      // A record has no id of its own: the whole record is its key (the same VM, tier and times
      // twice is one record read twice).
      return pageAll("usage.list", async (limit, offset) => ({ items: await this.call("usage.list", q, limit, offset) }), (r) => JSON.stringify(r));
    },
    summary: () => this.call("usage.summary"),
  };

  private readonly transport: HttpTransport;
  private readonly requester: Requester;
  private readonly limiter: ClientRateLimiter;
  private readonly tokens: TokenSource;
  private readonly service: Endpoint;
  private readonly registry: Endpoint;
  private readonly auth: Endpoint;
  private readonly writeGate: (() => void) | undefined;
  private closed = false;
  private verdict: CredentialsVerdict = "unknown";
  /** The service (not the token service) answered a call of this client with a 2xx: see served(). */
  private answered = false;
  /** The token service's last refusal, answered again without asking for REFUSAL_HOLD_MS. */
  private refusal: { err: unknown; at: number } | undefined;
  private readonly now: () => number;
  private readonly hooks: ServiceClientHooks;

  constructor(opts: ServiceClientOptions) {
    this.service = endpoint(opts.baseURL, "baseURL");
    this.registry = opts.registryURL === undefined ? this.service : endpoint(opts.registryURL, "registryURL");
    this.auth = endpoint(opts.authURL, "authURL");
    this.writeGate = opts.writeGate;
    const creds = opts.credentials;
    const secrets = "apiKey" in creds ? [creds.apiKey] : [creds.clientSecret];
    if (secrets[0] === undefined || secrets[0] === "") throw new TypeError("service client: empty credentials");

    const log = clientLogger(opts.logger);
    const timeoutMs = opts.timeoutMs ?? DEFAULTS.timeoutMs;
    if (!(timeoutMs > 0)) throw new RangeError(`timeoutMs must be > 0, got ${timeoutMs}`);
    const maxConnections = opts.maxConnections ?? DEFAULTS.maxConnections;
    if (!(Number.isInteger(maxConnections) && maxConnections >= 1)) {
      throw new RangeError(`maxConnections must be an integer >= 1, got ${maxConnections}`);
    }

    this.transport = new HttpTransport({
      timeoutMs,
      maxConnections,
      insecureSkipTLSVerify: opts.insecureSkipTLSVerify,
      caCert: opts.caCert,
    });
    const hooks: ServiceClientHooks = opts.hooks ?? {};
    this.hooks = hooks;
    this.now = opts.now ?? Date.now;
    this.limiter = new ClientRateLimiter(opts.rateLimit ?? { qps: DEFAULTS.qps, burst: DEFAULTS.burst });
    this.requester = new Requester({
      transport: this.transport,
      limiter: this.limiter,
      retry: resolveRetry(opts.retry),
      timeoutMs,
      now: this.now,
      hooks,
      log,
      secrets,
      userAgent: userAgent("agent-operator/service-client"),
      writeGate: opts.writeGate,
    });
    this.tokens = new TokenSource(() => this.requestToken(opts), this.now, log);
    this.requester.setTokenSource(this.tokens);
  }

  accessClients(): Promise<AccessClient[]> {
    return this.call("access.clients");
  }

  /** Obtains (or reuses) a token; returns its expiry. Used by the Connection controller to report Ready. */
  authenticate(): Promise<{ expiresAt: Date }> {
    return this.tokens.authenticate();
  }

  /**
   * A valid bearer token (cached, shared with this client's own calls) for requests the client
   * cannot make itself: streams from a VM's agentd (agentd.ts), which this client's transport
   * would buffer whole. Pass the token the service just answered 401 to, to get a new one.
   * It is a credential: never log it or put it in an error.
   */
  accessToken(refused?: string): Promise<string> {
    if (refused !== undefined) this.tokens.invalidate(refused);
    return this.tokens.get();
  }

  /**
   * What the token service last said of this client's credentials: "accepted" (it issued a
   * token), "refused" (401/403, or 400 from the token endpoint), "unknown" (not asked yet, or
   * no answer). A token obtained before a refusal may still be in use until it expires.
   */
  credentials(): CredentialsVerdict {
    return this.verdict;
  }

  /**
   * Whether the service has answered a call of this client: a 2xx whose body reads as the
   * answer, or a refusal (not a 404) in the service's error body. Its base URL is then the
   * service's, not only its token service's URL (a token obtained says nothing of baseURL).
   */
  served(): boolean {
    return this.answered;
  }

  /**
   * Throws if the write gate (ServiceClientOptions.writeGate) refuses writes now: for the writes
   * made with this client's token by another client (a VM's agentd, agentd.ts).
   */
  checkWriteGate(): void {
    this.writeGate?.();
  }

  /**
   * For the attempts made with this client's token by another client (a VM's agentd through the
   * compute API's forwarding route, agentd.ts): they go to the same service and count against
   * the same limit, so each takes a token of this client's bucket, a 429 holds the whole client
   * back, and each is counted in this client's request metrics, as its own calls are.
   */
  readonly forwarding: Forwarding = {
    take: (operation) => this.requester.takeRateToken(operation),
    throttled: (retryAfterMs) => this.requester.throttled(retryAfterMs),
    attempted: (e) => this.requester.attempted(e),
  };

  /** A new client-side rate from now on (sharded mode: this replica's share of the Connection's). */
  setRateLimit(rateLimit: RateLimitOptions): void {
    this.limiter.setRate(rateLimit);
  }

  /** Closes the connection pool; calls waiting in the rate limiter or a backoff fail at once. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.requester.close();
    await this.transport.close();
  }

  // -------------------------------------------------------------------------------------

  /** One call to the service, as its row of the operation table says. */
  private call<K extends OperationName>(operation: K, ...args: ArgsOf<K>): Promise<ResultOf<K>> {
    return this.callBy(undefined, operation, ...args);
  }

  /** call(), for an answer of use only until `neededBy` (epoch ms; CallSpec.neededBy). */
  private async callBy<K extends OperationName>(neededBy: number | undefined, operation: K, ...args: ArgsOf<K>): Promise<ResultOf<K>> {
    const spec = OPERATIONS[operation] as OperationSpec<ArgsOf<K>, ResultOf<K>>;
    const path = pathOf(operation, spec.path, args[0]);
    const target = path.startsWith(REGISTRY) ? this.registry : this.service;
    const body = spec.body?.(...args);
    let res: HttpResponse;
    try {
      res = await this.requester.call({
        operation,
        method: spec.method,
        cls: spec.cls,
        origin: target.origin,
        path: target.prefix + path + queryString(spec.query?.(...args)),
        body: body === undefined ? undefined : JSON.stringify(body),
        headers: spec.headers?.(...args),
        auth: true,
        limited: true,
        secrets: spec.secrets?.(...args),
        writes: spec.method !== "GET",
        neededBy,
      });
    } catch (err) {
      // A refusal in the service's own words (its error body) says baseURL is the service's too;
      // not a 404, which the service's router gives any path a wrong prefix makes.
      if (err instanceof ServiceError && err.status !== undefined && err.status !== 404 && isServiceErrorBody(err)) this.answered = true;
      throw err;
    }
    try {
      const decoded = spec.decodeText !== undefined ? spec.decodeText(operation, res.status, res.text) : spec.decode(operation, decodeJson(operation, res.status, res.text));
      // Read as the service's answer: a host that answers every path 200 with a page is not it.
      this.answered = true;
      return decoded;
    } catch (err) {
      // A create answered 2xx did what it was asked, though its answer cannot be read (a proxy's
      // empty 200, a body cut short): the caller must look for what it made before making another.
      if (spec.cls !== "unsafe" || !(err instanceof ServiceError)) throw err;
      throw new ServiceError({
        operation,
        status: err.status,
        message: `${err.message}; the request may have taken effect (outcome unknown): look it up before creating again`,
        retryable: true,
        outcomeUnknown: true,
      });
    }
  }

  /**
   * The token endpoint: API key in a header, or client credentials in a JSON body. Refused
   * credentials stay refused until they change (a new client): for REFUSAL_HOLD_MS the refusal
   * is answered again without asking, so that every call of every resource does not cost the
   * token service a request (revoked credentials, thousands of resources).
   */
  private async requestToken(opts: ServiceClientOptions): Promise<IssuedToken> {
    const held = this.refusal;
    if (held !== undefined && this.now() - held.at < REFUSAL_HOLD_MS) throw held.err;
    try {
      const t = await this.fetchToken(opts.credentials);
      this.verdict = "accepted";
      this.refusal = undefined;
      return t;
    } catch (err) {
      if (isAuthError(err)) {
        const news = this.verdict !== "refused";
        this.verdict = "refused";
        this.refusal = { err, at: this.now() };
        if (news) this.hooks.onCredentialsRefused?.();
      }
      throw err;
    }
  }

  private async fetchToken(creds: Credentials): Promise<IssuedToken> {
    const res = await this.requester.call({
      operation: "token",
      method: "POST",
      // Asking for a token twice only yields two tokens: safe to repeat.
      cls: "idempotent",
      origin: this.auth.origin,
      path: `${this.auth.prefix}/token`,
      auth: false,
      limited: false,
      ...("apiKey" in creds
        ? { headers: { "x-api-key": creds.apiKey } }
        : { body: JSON.stringify({ grant_type: "client_credentials", client_id: creds.clientId, client_secret: creds.clientSecret }) }),
      explain: (status) => (status === 401 || status === 403 ? "credentials refused by the token service" : undefined),
    });
    const t = parseTokenResponse(decodeJson("token", res.status, res.text));
    if (t === undefined) {
      throw new ServiceError({
        operation: "token",
        status: res.status,
        message: `token: the token service answered HTTP ${res.status} without an access_token`,
        retryable: false,
      });
    }
    return t;
  }
}

// ---------------------------------------------------------------------------------------
// helpers

function endpoint(raw: string, what: string): Endpoint {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new InvalidEndpointError(what, `service client: ${what} is not a URL: ${JSON.stringify(raw)}`);
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") {
    throw new InvalidEndpointError(what, `service client: ${what} must be http(s), got ${u.protocol}`);
  }
  return { origin: u.origin, prefix: u.pathname.replace(/\/+$/, "") };
}

/**
 * limit/offset paging until the list is read whole: `total` items when the service reports it,
 * else a short page. The service's maximum page size is not published: if the FIRST page of a
 * bare array is shorter than asked, that may be a server-side cap rather than the end, so one
 * more page is read; if it is not empty, the first page's length is taken as the real page size
 * from then on (one extra request for lists shorter than a page; no item missed behind a cap).
 *
 * Items are deduplicated by `key` (the first copy kept): an insertion ahead of the offset between
 * two reads shifts an item into the next page. A page that brings nothing new ends the listing
 * with an error: a service that ignores offset (it is optional in the published descriptions)
 * sends its first page again and again, which would be paged forever, or, with a total, cut
 * short and passed off as the whole list, and a VM missing from it is allocated a second time.
 */
export async function pageAll<T>(
  operation: string,
  fetchPage: (limit: number, offset: number) => Promise<{ items: T[]; total?: number }>,
  key: (x: T) => string | undefined,
  pageSize = PAGE_SIZE,
): Promise<T[]> {
  const seen = new Set<string>();
  const out: T[] = [];
  let offset = 0;
  let full = pageSize;
  let first = true;
  for (;;) {
    const { items: page, total } = await fetchPage(pageSize, offset);
    let fresh = 0;
    for (const x of page) {
      const k = key(x) ?? JSON.stringify(x);
      if (seen.has(k)) continue;
      seen.add(k);
      out.push(x);
      fresh++;
    }
    // A full page of nothing new: a short one is the end of a list that shifted under the
    // paging (an item inserted ahead of the offset moves the last one into the next page).
    if (page.length >= full && fresh === 0) {
      throw new ServiceError({
        operation,
        status: 200,
        retryable: true,
        message: `${operation}: the page at offset ${offset} holds only items already listed: the service seems to ignore offset, so the list cannot be read whole`,
      });
    }
    offset += page.length;
    if (page.length === 0) break;
    if (total !== undefined) {
      if (offset >= total) break;
      continue;
    }
    if (first && page.length < pageSize) {
      full = page.length;
      first = false;
      continue;
    }
    first = false;
    if (page.length < full) break;
  }
  return out;
}
