// ServiceClient: the typed facade over the Agent Registry and Compute Service
// (shared/design/SERVICE.md). Methods are grouped by resource; each one names its operation
// (the emulator's request-log names), its HTTP method and whether it may be repeated. The
// attempt loop (rate limit, token, retry) is in request.ts; this file builds paths, encodes
// bodies and decodes answers leniently (unknown fields pass through untouched).

import pino from "pino";
import { ServiceError } from "./errors.js";
import type { Operation } from "./errors.js";
import { HttpTransport } from "./http.js";
import type { HttpMethod } from "./http.js";
import { DEFAULTS, resolveRetry } from "./options.js";
import type { ServiceClientHooks, ServiceClientOptions } from "./options.js";
import { TokenBucket } from "./rate-limit.js";
import { Requester } from "./request.js";
import type { RetryClass } from "./retry.js";
import { TokenSource, parseTokenResponse } from "./token.js";
import type { IssuedToken } from "./token.js";
import type {
  AccessClient,
  Agent,
  AgentList,
  AgentVM,
  AllocateVMRequest,
  Allocation,
  CreateAgentRequest,
  Deployment,
  DeployOptions,
  JsonObject,
  JsonValue,
  ListAgentsQuery,
  ListVMsQuery,
  Skill,
  SkillRequest,
  UpdateAgentRequest,
  UsageQuery,
  UsageRecord,
  UsageSummary,
} from "./types.js";

export type { ServiceClientHooks, ServiceClientOptions } from "./options.js";

/** Page size used by the listAll helpers and usage.list. */
export const PAGE_SIZE = 100;

/**
 * Pino redaction paths for the client's child logger. The client never logs a body, a header
 * or a credential in the first place; these paths are a second line of defence should a
 * future log line carry one.
 */
export const REDACT_PATHS: string[] = [
  "apiKey",
  "clientSecret",
  "client_secret",
  "credentials",
  "authorization",
  "token",
  "access_token",
  "password",
  "headers.authorization",
  'headers["x-api-key"]',
  "*.apiKey",
  "*.clientSecret",
  "*.client_secret",
  "*.authorization",
  "*.token",
  "*.access_token",
  "*.password",
  "*.image_pull_secret",
];

export interface AgentsAPI {
  create(req: CreateAgentRequest): Promise<Agent>;
  list(q?: ListAgentsQuery): Promise<AgentList>;
  listAll(q?: Omit<ListAgentsQuery, "limit" | "offset">): Promise<Agent[]>;
  get(id: string): Promise<Agent>;
  update(id: string, req: UpdateAgentRequest): Promise<Agent>;
  delete(id: string): Promise<void>;
  search(capabilities: string[]): Promise<AgentList>;
}

export interface DeploymentsAPI {
  deploy(agentId: string, options: DeployOptions): Promise<Deployment>;
  /** Every deployment: the endpoint publishes no paging, so this is one call. */
  list(): Promise<Deployment[]>;
  get(id: string): Promise<Deployment>;
  stop(id: string): Promise<Deployment>;
  redeploy(id: string): Promise<Deployment>;
  delete(id: string): Promise<void>;
}

export interface VMsAPI {
  allocate(req: AllocateVMRequest): Promise<Allocation>;
  list(q?: ListVMsQuery): Promise<AgentVM[]>;
  listAll(q?: Omit<ListVMsQuery, "limit" | "offset">): Promise<AgentVM[]>;
  get(id: string): Promise<AgentVM>;
  renew(id: string, ttlSeconds: number): Promise<AgentVM>;
  release(id: string, recycle?: boolean): Promise<AgentVM>;
  delete(id: string): Promise<void>;
  endpoint(id: string): Promise<Record<string, string>>;
  execute(id: string, body: JsonObject): Promise<JsonValue>;
}

export interface SkillsAPI {
  create(req: SkillRequest): Promise<Skill>;
  list(): Promise<Skill[]>;
  get(name: string): Promise<Skill>;
  update(name: string, req: SkillRequest): Promise<Skill>;
  delete(name: string): Promise<void>;
}

export interface UsageAPI {
  /** Every record between from and to: pages of 100 until a short page. */
  list(q: UsageQuery): Promise<UsageRecord[]>;
  summary(): Promise<UsageSummary>;
}

interface Endpoint {
  origin: string;
  /** Path prefix of the base URL without a trailing slash ("" for none). */
  prefix: string;
}

type Query = Record<string, string | number | boolean | undefined>;

interface Call {
  operation: Operation;
  method: HttpMethod;
  cls: RetryClass;
  path: string;
  query?: Query;
  body?: unknown;
  headers?: Record<string, string>;
  secrets?: readonly string[];
}

const REGISTRY = "/registry/v1";
const COMPUTE = "/compute/v1";
const USER_AGENT = "agent-operator/service-client";

export class ServiceClient {
  readonly agents: AgentsAPI;
  readonly deployments: DeploymentsAPI;
  readonly vms: VMsAPI;
  readonly skills: SkillsAPI;
  readonly usage: UsageAPI;

  private readonly transport: HttpTransport;
  private readonly requester: Requester;
  private readonly tokens: TokenSource;
  private readonly service: Endpoint;
  private readonly registry: Endpoint;
  private readonly auth: Endpoint;
  private closed = false;

  constructor(opts: ServiceClientOptions) {
    this.service = endpoint(opts.baseURL, "baseURL");
    this.registry = opts.registryURL === undefined ? this.service : endpoint(opts.registryURL, "registryURL");
    this.auth = endpoint(opts.authURL, "authURL");
    const creds = opts.credentials;
    const secrets = "apiKey" in creds ? [creds.apiKey] : [creds.clientSecret];
    if (secrets[0] === undefined || secrets[0] === "") throw new TypeError("service client: empty credentials");

    const log = (opts.logger ?? pino({ level: "silent" })).child(
      { component: "service-client" },
      { redact: { paths: REDACT_PATHS, censor: "[REDACTED]" } },
    );
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
    this.requester = new Requester({
      transport: this.transport,
      limiter: new TokenBucket(opts.rateLimit ?? { qps: DEFAULTS.qps, burst: DEFAULTS.burst }),
      retry: resolveRetry(opts.retry),
      hooks,
      log,
      secrets,
      userAgent: USER_AGENT,
    });
    this.tokens = new TokenSource(() => this.requestToken(opts), opts.now ?? Date.now, log);
    this.requester.setTokenSource(this.tokens);

    // ---------------------------------------------------------------- registry
    this.agents = {
      create: async (req) => {
        const pw = req.image_pull_secret?.password;
        const v = await this.json({
          operation: "agents.create", method: "POST", cls: "unsafe", path: `${REGISTRY}/agents`, body: req,
          secrets: pw !== undefined ? [pw] : undefined,
        });
        return this.agentOf("agents.create", v);
      },
      list: async (q) => this.agentListOf("agents.list", await this.json({
        operation: "agents.list", method: "GET", cls: "idempotent", path: `${REGISTRY}/agents`, query: { ...q },
      })),
      listAll: async (q) => {
        // The registry reports `total`: page until we have it, or until a page comes back
        // empty (so a server-side page cap below 100 costs nothing). Deduplicated by id so
        // that an agent shifting pages between two reads appears once.
        const all: Agent[] = [];
        let offset = 0;
        for (;;) {
          const page = await this.agents.list({ ...q, limit: PAGE_SIZE, offset });
          for (const a of page.agents) all.push(a);
          offset += page.agents.length;
          if (page.agents.length === 0 || offset >= page.total) break;
        }
        return dedupe(all, (a) => a.id);
      },
      get: async (id) => this.agentOf("agents.get", await this.json({
        operation: "agents.get", method: "GET", cls: "idempotent", path: `${REGISTRY}/agents/${seg("agents.get", id)}`,
      })),
      update: async (id, req) => this.agentOf("agents.update", await this.json({
        operation: "agents.update", method: "PUT", cls: "idempotent", path: `${REGISTRY}/agents/${seg("agents.update", id)}`, body: req,
      })),
      delete: async (id) => {
        await this.json({ operation: "agents.delete", method: "DELETE", cls: "idempotent", path: `${REGISTRY}/agents/${seg("agents.delete", id)}` });
      },
      search: async (capabilities) => this.agentListOf("agents.search", await this.json({
        operation: "agents.search", method: "GET", cls: "idempotent", path: `${REGISTRY}/agents/search`,
        query: { capabilities: capabilities.join(",") },
      })),
    };

    // ---------------------------------------------------------------- deployments
    this.deployments = {
      deploy: async (agentId, options) => objectOf<Deployment>("deployments.deploy", await this.json({
        operation: "deployments.deploy", method: "POST", cls: "unsafe",
        path: `${COMPUTE}/agents/${seg("deployments.deploy", agentId)}/deploy`, body: options, secrets: envSecrets(options.env),
      })),
      list: async () => dedupe(arrayOf<Deployment>("deployments.list", await this.json({
        operation: "deployments.list", method: "GET", cls: "idempotent", path: `${COMPUTE}/deployments`,
      }), "deployments"), (d) => d.id),
      get: async (id) => objectOf<Deployment>("deployments.get", await this.json({
        operation: "deployments.get", method: "GET", cls: "idempotent", path: `${COMPUTE}/deployments/${seg("deployments.get", id)}`,
      })),
      stop: async (id) => objectOf<Deployment>("deployments.stop", await this.json({
        operation: "deployments.stop", method: "POST", cls: "idempotent", path: `${COMPUTE}/deployments/${seg("deployments.stop", id)}/stop`,
      })),
      redeploy: async (id) => objectOf<Deployment>("deployments.redeploy", await this.json({
        operation: "deployments.redeploy", method: "POST", cls: "idempotent", path: `${COMPUTE}/deployments/${seg("deployments.redeploy", id)}/redeploy`,
      })),
      delete: async (id) => {
        await this.json({ operation: "deployments.delete", method: "DELETE", cls: "idempotent", path: `${COMPUTE}/deployments/${seg("deployments.delete", id)}` });
      },
    };

    // ---------------------------------------------------------------- VMs
    this.vms = {
      allocate: async (req) => objectOf<Allocation>("vms.allocate", await this.json({
        operation: "vms.allocate", method: "POST", cls: "unsafe", path: `${COMPUTE}/vms/allocate`, body: req, secrets: envSecrets(req.env),
      })),
      list: async (q) => arrayOf<AgentVM>("vms.list", await this.json({
        operation: "vms.list", method: "GET", cls: "idempotent", path: `${COMPUTE}/vms`, query: { ...q },
      }), "vms"),
      listAll: async (q) => dedupe(await pageAll((limit, offset) => this.vms.list({ ...q, limit, offset })), (v) => v.id),
      get: async (id) => objectOf<AgentVM>("vms.get", await this.json({
        operation: "vms.get", method: "GET", cls: "idempotent", path: `${COMPUTE}/vms/${seg("vms.get", id)}`,
      })),
      renew: async (id, ttlSeconds) => objectOf<AgentVM>("vms.renew", await this.json({
        operation: "vms.renew", method: "POST", cls: "idempotent", path: `${COMPUTE}/vms/${seg("vms.renew", id)}/renew`,
        body: { ttl_seconds: ttlSeconds },
      })),
      release: async (id, recycle = false) => objectOf<AgentVM>("vms.release", await this.json({
        operation: "vms.release", method: "POST", cls: "idempotent", path: `${COMPUTE}/vms/${seg("vms.release", id)}/release`,
        body: { recycle },
      })),
      delete: async (id) => {
        await this.json({ operation: "vms.delete", method: "DELETE", cls: "idempotent", path: `${COMPUTE}/vms/${seg("vms.delete", id)}` });
      },
      endpoint: async (id) => stringMapOf("vms.endpoint", await this.json({
        operation: "vms.endpoint", method: "GET", cls: "idempotent", path: `${COMPUTE}/vms/${seg("vms.endpoint", id)}/endpoint`,
      })),
      execute: async (id, body) => {
        // What execute does is not described; running something twice is not harmless, so it
        // is treated like a create (retried only when the service certainly did nothing).
        const v = await this.json({ operation: "vms.execute", method: "POST", cls: "unsafe", path: `${COMPUTE}/vms/${seg("vms.execute", id)}/execute`, body });
        return v === undefined ? null : (v as JsonValue);
      },
    };

    // ---------------------------------------------------------------- skills
    this.skills = {
      create: async (req) => objectOf<Skill>("skills.create", await this.json({
        operation: "skills.create", method: "POST", cls: "unsafe", path: `${COMPUTE}/skills`, body: req,
      })),
      list: async () => arrayOf<Skill>("skills.list", await this.json({
        operation: "skills.list", method: "GET", cls: "idempotent", path: `${COMPUTE}/skills`,
      }), "skills"),
      get: async (name) => objectOf<Skill>("skills.get", await this.json({
        operation: "skills.get", method: "GET", cls: "idempotent", path: `${COMPUTE}/skills/${seg("skills.get", name)}`,
      })),
      update: async (name, req) => objectOf<Skill>("skills.update", await this.json({
        operation: "skills.update", method: "PUT", cls: "idempotent", path: `${COMPUTE}/skills/${seg("skills.update", name)}`, body: req,
      })),
      delete: async (name) => {
        await this.json({ operation: "skills.delete", method: "DELETE", cls: "idempotent", path: `${COMPUTE}/skills/${seg("skills.delete", name)}` });
      },
    };

    // ---------------------------------------------------------------- usage
    this.usage = {
      list: async (q) => {
        if (q.workspaceId === "" || q.environmentId === "") {
          throw new TypeError("usage.list: workspaceId and environmentId are required");
        }
        const headers = { "x-workspace-id": q.workspaceId, "x-environment-id": q.environmentId };
        return pageAll(async (limit, offset) => arrayOf<UsageRecord>("usage.list", await this.json({
          operation: "usage.list", method: "GET", cls: "idempotent", path: `${COMPUTE}/usage`, headers,
          query: { from: q.from, to: q.to, tier: q.tier, limit, offset },
        }), "records"));
      },
      summary: async () => objectOf<UsageSummary>("usage.summary", await this.json({
        operation: "usage.summary", method: "GET", cls: "idempotent", path: `${COMPUTE}/usage/summary`,
      })),
    };
  }

  async accessClients(): Promise<AccessClient[]> {
    return arrayOf<AccessClient>("access.clients", await this.json({
      operation: "access.clients", method: "GET", cls: "idempotent", path: `${COMPUTE}/access/clients`,
    }), "clients");
  }

  /** Obtains (or reuses) a token; returns its expiry. Used by the Connection controller to report Ready. */
  authenticate(): Promise<{ expiresAt: Date }> {
    return this.tokens.authenticate();
  }

  /** Closes the connection pool; calls waiting in the rate limiter or a backoff fail at once. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.requester.close();
    await this.transport.close();
  }

  // -------------------------------------------------------------------------------------

  /** One call to the service; returns the decoded JSON body (undefined for an empty one). */
  private async json(c: Call): Promise<unknown> {
    const target = c.path.startsWith(REGISTRY) ? this.registry : this.service;
    const res = await this.requester.call({
      operation: c.operation,
      method: c.method,
      cls: c.cls,
      origin: target.origin,
      path: target.prefix + c.path + queryString(c.query),
      body: c.body === undefined ? undefined : JSON.stringify(c.body),
      headers: c.headers,
      auth: true,
      limited: true,
      secrets: c.secrets,
    });
    return decode(c.operation, res.status, res.text);
  }

  /** The token endpoint: API key in a header, or client credentials in a JSON body. */
  private async requestToken(opts: ServiceClientOptions): Promise<IssuedToken> {
    const creds = opts.credentials;
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
    const t = parseTokenResponse(decode("token", res.status, res.text));
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

  private agentOf(op: Operation, v: unknown): Agent {
    // The registry wraps the agent ({agent: {...}}); accept a bare agent too.
    if (isObject(v) && isObject(v.agent)) return v.agent as unknown as Agent;
    if (isObject(v) && typeof v.id === "string") return v as unknown as Agent;
    throw shapeError(op, "an {agent} object", v);
  }

  private agentListOf(op: Operation, v: unknown): AgentList {
    if (isObject(v) && Array.isArray(v.agents)) {
      const agents = v.agents as Agent[];
      return { agents, total: typeof v.total === "number" ? v.total : agents.length };
    }
    if (Array.isArray(v)) return { agents: v as Agent[], total: v.length };
    throw shapeError(op, "an {agents, total} object", v);
  }
}

// ---------------------------------------------------------------------------------------
// helpers

function endpoint(raw: string, what: string): Endpoint {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new TypeError(`service client: ${what} is not a URL: ${JSON.stringify(raw)}`);
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") {
    throw new TypeError(`service client: ${what} must be http(s), got ${u.protocol}`);
  }
  return { origin: u.origin, prefix: u.pathname.replace(/\/+$/, "") };
}

/** A path segment; an empty id would silently address the collection instead. */
function seg(op: Operation, id: string): string {
  if (typeof id !== "string" || id === "") throw new TypeError(`${op}: empty id`);
  return encodeURIComponent(id);
}

function queryString(q: Query | undefined): string {
  if (q === undefined) return "";
  let out = "";
  for (const k in q) {
    const v = q[k];
    if (v === undefined || v === "") continue;
    out += `${out === "" ? "?" : "&"}${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`;
  }
  return out;
}

function decode(op: Operation, status: number, text: string): unknown {
  if (text === "" || status === 204) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    // Never quote a 2xx body: it may carry a token.
    throw new ServiceError({
      operation: op,
      status,
      message: `${op}: the service answered HTTP ${status} with a body that is not JSON (${text.length} bytes)`,
      retryable: false,
    });
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

function describe(v: unknown): string {
  if (v === undefined) return "an empty body";
  if (Array.isArray(v)) return "an array";
  return v === null ? "null" : `a ${typeof v}`;
}

function shapeError(op: Operation, expected: string, got: unknown): ServiceError {
  return new ServiceError({ operation: op, message: `${op}: unexpected answer: expected ${expected}, got ${describe(got)}`, retryable: false });
}

function objectOf<T>(op: Operation, v: unknown): T {
  if (isObject(v)) return v as T;
  throw shapeError(op, "an object", v);
}

/** A bare array, as documented; also an object wrapping it under `key`, which some versions send. */
function arrayOf<T>(op: Operation, v: unknown, key: string): T[] {
  if (Array.isArray(v)) return v as T[];
  if (isObject(v) && Array.isArray(v[key])) return v[key] as T[];
  if (v === undefined) return [];
  throw shapeError(op, "an array", v);
}

function stringMapOf(op: Operation, v: unknown): Record<string, string> {
  if (!isObject(v)) throw shapeError(op, "an object of strings", v);
  const out: Record<string, string> = {};
  for (const k in v) {
    const x = v[k];
    if (typeof x === "string") out[k] = x;
  }
  return out;
}

/** Environment values may come from Secrets (envFrom): keep them out of error text. */
function envSecrets(env: Record<string, string> | undefined): string[] | undefined {
  if (env === undefined) return undefined;
  const vals = Object.values(env).filter((v) => typeof v === "string" && v.length >= 8);
  return vals.length > 0 ? vals : undefined;
}

/**
 * limit/offset paging over a bare array until a short page. The service's maximum page size
 * is not published: if the FIRST page is shorter than asked, that may be a server-side cap
 * rather than the end, so one more page is read; if it is not empty, the first page's length
 * is taken as the real page size from then on. Costs one extra request for lists shorter
 * than a page; never misses items behind a cap.
 */
export async function pageAll<T>(fetchPage: (limit: number, offset: number) => Promise<T[]>, pageSize = PAGE_SIZE): Promise<T[]> {
  const out: T[] = [];
  let offset = 0;
  let full = pageSize;
  let first = true;
  for (;;) {
    const page = await fetchPage(pageSize, offset);
    for (const x of page) out.push(x);
    offset += page.length;
    if (page.length === 0) break;
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

/** Drops repeats of an id (an item that moved between two page reads); items without an id stay. */
function dedupe<T>(items: T[], key: (x: T) => unknown): T[] {
  const seen = new Set<string>();
  const out: T[] = [];
  for (const x of items) {
    const k = key(x);
    if (typeof k === "string") {
      if (seen.has(k)) continue;
      seen.add(k);
    }
    out.push(x);
  }
  return out;
}
