// Every operation of the service as one row of a table: its HTTP method, whether it may be
// repeated (docs/service-client.md, "Operations"), its path, how its arguments become a query,
// a body and headers, which secrets it carries, and how its answer is read; and the public
// groups of methods (AgentsAPI...) that ServiceClient (client.ts) implements by calling rows
// by name. The attempt loop (request.ts) does the rest.
//
// Answers are decoded leniently: unknown fields pass through untouched, and the shapes some
// versions of the service send (a wrapped agent, an array under a key) are accepted.

import { createParser } from "eventsource-parser";
import { parseJsonOr } from "../lib/errors.js";
import { ServiceError, envSecrets } from "./errors.js";
import type { Operation } from "./errors.js";
import type { HttpMethod } from "./http.js";
import type { RetryClass } from "./retry.js";
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
  ListAgentsQuery,
  ServerSentEvent,
  ListVMsQuery,
  Skill,
  SkillRequest,
  UpdateAgentRequest,
  UsageQuery,
  UsageRecord,
  UsageSummary,
  PoolConfig,
} from "./types.js";

// ---------------------------------------------------------------------------------------
// The public groups of ServiceClient (client.ts), one method per row below

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
  /**
   * `secretValues`: the values `req.env` holds from Secrets, scrubbed from the service's answers
   * whatever their length (an env value is scrubbed only from 8 characters: most are plain).
   */
  allocate(req: AllocateVMRequest, secretValues?: readonly string[]): Promise<Allocation>;
  list(q?: ListVMsQuery): Promise<AgentVM[]>;
  listAll(q?: Omit<ListVMsQuery, "limit" | "offset">): Promise<AgentVM[]>;
  get(id: string): Promise<AgentVM>;
  /**
   * `neededBy`: when the renewal is too late (the VM's expiry, epoch ms): each attempt is
   * shortened so that a hung one leaves time for another before then.
   */
  renew(id: string, ttlSeconds: number, opts?: { neededBy?: number }): Promise<AgentVM>;
  release(id: string, recycle?: boolean): Promise<AgentVM>;
  delete(id: string): Promise<void>;
  endpoint(id: string): Promise<Record<string, string>>;
  /** Runs code or a command in the VM; the events it streamed, in order (output, then its end). */
  execute(id: string, body: JsonObject): Promise<ServerSentEvent[]>;
}

export interface SkillsAPI {
  create(req: SkillRequest): Promise<Skill>;
  list(): Promise<Skill[]>;
  get(name: string): Promise<Skill>;
  update(name: string, req: SkillRequest): Promise<Skill>;
  delete(name: string): Promise<void>;
}

export interface PoolAPI {
  config(): Promise<PoolConfig>;
}

export interface UsageAPI {
  /** Every record between from and to: pages of 100 until a short page. */
  list(q: UsageQuery): Promise<UsageRecord[]>;
  summary(): Promise<UsageSummary>;
}

// ---------------------------------------------------------------------------------------
// The table

export const REGISTRY = "/registry/v1";
export const COMPUTE = "/compute/v1";

export type Query = Record<string, string | number | boolean | undefined>;

/** One operation: `A` are the arguments of its facade method, `R` what it resolves to. */
export interface OperationSpec<A extends unknown[], R> {
  method: HttpMethod;
  cls: RetryClass;
  /** Under REGISTRY or COMPUTE; `{id}` is the first argument, encoded as one path segment. */
  path: string;
  query?: (...args: A) => Query;
  body?: (...args: A) => unknown;
  headers?: (...args: A) => Record<string, string>;
  /** Secrets the request carries (a pull password, env values), scrubbed from any answer we keep. */
  secrets?: (...args: A) => readonly string[] | undefined;
  /** The answer (JSON, undefined for an empty body) as `R`, or a ServiceError naming the shape expected. */
  decode: (operation: Operation, v: unknown) => R;
  /** Instead of `decode`, for an answer that is not JSON (an event stream): the raw text. */
  decodeText?: (operation: Operation, status: number, text: string) => R;
}

const op = <A extends unknown[], R>(spec: OperationSpec<A, R>): OperationSpec<A, R> => spec;

/** Every operation but `token` (the token service is not part of this API: see client.ts). */
export const OPERATIONS = {
  // ------------------------------------------------------------------ registry
  "agents.create": op<[req: CreateAgentRequest], Agent>({
    method: "POST", cls: "unsafe", path: `${REGISTRY}/agents`, body: (req) => req,
    secrets: (req) => (req.image_pull_secret?.password !== undefined ? [req.image_pull_secret.password] : undefined),
    decode: agentOf,
  }),
  "agents.list": op<[q?: ListAgentsQuery], AgentList>({
    method: "GET", cls: "idempotent", path: `${REGISTRY}/agents`, query: (q) => ({ ...q }), decode: agentListOf,
  }),
  "agents.get": op<[id: string], Agent>({ method: "GET", cls: "idempotent", path: `${REGISTRY}/agents/{id}`, decode: agentOf }),
  "agents.update": op<[id: string, req: UpdateAgentRequest], Agent>({
    method: "PUT", cls: "idempotent", path: `${REGISTRY}/agents/{id}`, body: (_id, req) => req, decode: agentOf,
  }),
  "agents.delete": op<[id: string], void>({ method: "DELETE", cls: "idempotent", path: `${REGISTRY}/agents/{id}`, decode: nothing }),
  "agents.search": op<[capabilities: string[]], AgentList>({
    method: "GET", cls: "idempotent", path: `${REGISTRY}/agents/search`,
    query: (capabilities) => ({ capabilities: capabilities.join(",") }), decode: agentListOf,
  }),

  // ------------------------------------------------------------------ deployments
  "deployments.deploy": op<[agentId: string, options: DeployOptions], Deployment>({
    method: "POST", cls: "unsafe", path: `${COMPUTE}/agents/{id}/deploy`, body: (_id, options) => options,
    secrets: (_id, options) => envSecrets(options.env), decode: objectOf,
  }),
  // The endpoint publishes no paging: one call.
  "deployments.list": op<[], Deployment[]>({
    method: "GET", cls: "idempotent", path: `${COMPUTE}/deployments`,
    decode: (o, v) => dedupe(arrayOf<Deployment>("deployments")(o, v), (d) => d.id),
  }),
  "deployments.get": op<[id: string], Deployment>({ method: "GET", cls: "idempotent", path: `${COMPUTE}/deployments/{id}`, decode: objectOf }),
  "deployments.stop": op<[id: string], Deployment>({ method: "POST", cls: "idempotent", path: `${COMPUTE}/deployments/{id}/stop`, decode: objectOf }),
  "deployments.redeploy": op<[id: string], Deployment>({ method: "POST", cls: "idempotent", path: `${COMPUTE}/deployments/{id}/redeploy`, decode: objectOf }),
  "deployments.delete": op<[id: string], void>({ method: "DELETE", cls: "idempotent", path: `${COMPUTE}/deployments/{id}`, decode: nothing }),

  // ------------------------------------------------------------------ VMs
  "vms.allocate": op<[req: AllocateVMRequest, secretValues?: readonly string[]], Allocation>({
    method: "POST", cls: "unsafe", path: `${COMPUTE}/vms/allocate`, body: (req) => req,
    secrets: (req, secretValues) => envSecrets(req.env, secretValues), decode: objectOf,
  }),
  "vms.list": op<[q?: ListVMsQuery], AgentVM[]>({
    method: "GET", cls: "idempotent", path: `${COMPUTE}/vms`, query: (q) => ({ ...q }), decode: arrayOf("vms"),
  }),
  "vms.get": op<[id: string], AgentVM>({ method: "GET", cls: "idempotent", path: `${COMPUTE}/vms/{id}`, decode: objectOf }),
  "vms.renew": op<[id: string, ttlSeconds: number], AgentVM>({
    method: "POST", cls: "idempotent", path: `${COMPUTE}/vms/{id}/renew`, body: (_id, ttlSeconds) => ({ ttl_seconds: ttlSeconds }), decode: objectOf,
  }),
  "vms.release": op<[id: string, recycle?: boolean], AgentVM>({
    method: "POST", cls: "idempotent", path: `${COMPUTE}/vms/{id}/release`, body: (_id, recycle = false) => ({ recycle }), decode: objectOf,
  }),
  "vms.delete": op<[id: string], void>({ method: "DELETE", cls: "idempotent", path: `${COMPUTE}/vms/{id}`, decode: nothing }),
  "vms.endpoint": op<[id: string], Record<string, string>>({ method: "GET", cls: "idempotent", path: `${COMPUTE}/vms/{id}/endpoint`, decode: stringMapOf }),
  // Running something twice is not harmless, so it is treated like a create (retried only when
  // the service certainly did nothing). The answer is a server-sent event stream (SERVICE.md).
  "vms.execute": op<[id: string, body: JsonObject], ServerSentEvent[]>({
    method: "POST", cls: "unsafe", path: `${COMPUTE}/vms/{id}/execute`, body: (_id, body) => body,
    decode: () => [],
    decodeText: (_o, _status, text) => parseEventStream(text),
  }),

  // ------------------------------------------------------------------ skills
  "skills.create": op<[req: SkillRequest], Skill>({ method: "POST", cls: "unsafe", path: `${COMPUTE}/skills`, body: (req) => req, decode: objectOf }),
  "skills.list": op<[], Skill[]>({ method: "GET", cls: "idempotent", path: `${COMPUTE}/skills`, decode: arrayOf("skills") }),
  "skills.get": op<[name: string], Skill>({ method: "GET", cls: "idempotent", path: `${COMPUTE}/skills/{id}`, decode: objectOf }),
  "skills.update": op<[name: string, req: SkillRequest], Skill>({
    method: "PUT", cls: "idempotent", path: `${COMPUTE}/skills/{id}`, body: (_name, req) => req, decode: objectOf,
  }),
  "skills.delete": op<[name: string], void>({ method: "DELETE", cls: "idempotent", path: `${COMPUTE}/skills/{id}`, decode: nothing }),

  // ------------------------------------------------------------------ usage and access
  /** One page; usage.list reads them all. */
  "usage.list": op<[q: UsageQuery, limit: number, offset: number], UsageRecord[]>({
    method: "GET", cls: "idempotent", path: `${COMPUTE}/usage`,
    headers: (q) => ({ "x-workspace-id": q.workspaceId, "x-environment-id": q.environmentId }),
    query: (q, limit, offset) => ({ from: q.from, to: q.to, tier: q.tier, limit, offset }),
    decode: arrayOf("records"),
  }),
  "usage.summary": op<[], UsageSummary>({ method: "GET", cls: "idempotent", path: `${COMPUTE}/usage/summary`, decode: objectOf }),
  "pool.config": op<[], PoolConfig>({ method: "GET", cls: "idempotent", path: `${COMPUTE}/pool/config`, decode: objectOf }),
  "access.clients": op<[], AccessClient[]>({ method: "GET", cls: "idempotent", path: `${COMPUTE}/access/clients`, decode: arrayOf("clients") }),
} satisfies Record<Exclude<Operation, "token">, OperationSpec<never, unknown>>;

export type Operations = typeof OPERATIONS;
export type OperationName = keyof Operations;
export type ArgsOf<K extends OperationName> = Operations[K] extends OperationSpec<infer A, unknown> ? A : never;
export type ResultOf<K extends OperationName> = Operations[K] extends OperationSpec<never, infer R> ? R : never;

// ---------------------------------------------------------------------------------------
// Paths and queries

/** `{id}` of the path template replaced by `id`, as one path segment. */
export function pathOf(operation: Operation, template: string, id: unknown): string {
  return template.includes("{id}") ? template.replace("{id}", () => seg(operation, id)) : template;
}

/** A path segment; an empty id would silently address the collection instead. */
function seg(op: Operation, id: unknown): string {
  if (typeof id !== "string" || id === "") throw new TypeError(`${op}: empty id`);
  return encodeURIComponent(id);
}

export function queryString(q: Query | undefined): string {
  if (q === undefined) return "";
  let out = "";
  for (const k in q) {
    const v = q[k];
    if (v === undefined || v === "") continue;
    out += `${out === "" ? "?" : "&"}${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`;
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Decoding

/** The body of a 2xx answer as JSON; undefined when empty. */
export function decodeJson(op: Operation, status: number, text: string): unknown {
  if (text === "" || status === 204) return undefined;
  // Never quote a 2xx body: it may carry a token.
  return parseJsonOr(text, (notJson) => new ServiceError({ operation: op, status, message: `${op}: the service answered HTTP ${status} with a body that is ${notJson}`, retryable: false }));
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

function nothing(): void {}

function agentOf(op: Operation, v: unknown): Agent {
  // The registry wraps the agent ({agent: {...}}); accept a bare agent too.
  if (isObject(v) && isObject(v.agent)) return v.agent as unknown as Agent;
  if (isObject(v) && typeof v.id === "string") return v as unknown as Agent;
  throw shapeError(op, "an {agent} object", v);
}

function agentListOf(op: Operation, v: unknown): AgentList {
  if (isObject(v) && Array.isArray(v.agents)) {
    const agents = v.agents as Agent[];
    return { agents, total: typeof v.total === "number" ? v.total : agents.length };
  }
  if (Array.isArray(v)) return { agents: v as Agent[], total: v.length };
  throw shapeError(op, "an {agents, total} object", v);
}

function objectOf<T>(op: Operation, v: unknown): T {
  if (isObject(v)) return v as T;
  throw shapeError(op, "an object", v);
}

/** A bare array, as documented; also an object wrapping it under `key`, which some versions send. */
function arrayOf<T>(key: string): (op: Operation, v: unknown) => T[] {
  return (op, v) => {
    if (Array.isArray(v)) return v as T[];
    if (isObject(v) && Array.isArray(v[key])) return v[key] as T[];
    if (v === undefined) return [];
    throw shapeError(op, "an array", v);
  };
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

/** Drops repeats of an id (an item that moved between two page reads); items without an id stay. */
export function dedupe<T>(items: T[], key: (x: T) => unknown): T[] {
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

/** A whole server-sent event stream as its events; an event without a name is a "message". */
export function parseEventStream(text: string): ServerSentEvent[] {
  const events: ServerSentEvent[] = [];
  const parser = createParser({ onEvent: (e) => events.push({ event: e.event ?? "message", data: e.data }) });
  parser.feed(text);
  parser.feed("\n\n"); // a stream cut without its final blank line still yields its last event
  return events;
}
