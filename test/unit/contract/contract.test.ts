// Contract test: every published endpoint of the Agent Registry and Compute Service, and every
// operation of agentd (the daemon in each VM), called over raw HTTP against the in-process
// emulator, each answer checked against the hand-written schemas
// of ./schemas.ts (which come from shared/design/SERVICE.md and the published OpenAPI
// descriptions, never from src/emulator or src/service). The client below is written from the
// descriptions too: global fetch, a bearer token from `POST {auth_url}/token`.
//
// ENDPOINTS is the table of what this file covers; AGENTD_ENDPOINTS the same for agentd, the
// daemon in every VM (agentd-api.json), reached through the forwarding route
// /compute/v1/vms/{id}/r/<agentd path>. Tests check both against the published descriptions
// (skipped when they are not beside the clone), the last test checks that every entry was
// really called with a token during the run (an agentd entry: a call through r/ that agentd
// answered, its concrete path matched against the templates).
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Static, TSchema } from "typebox";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { startEmulator } from "../../../src/emulator/index.js";
import * as S from "./schemas.js";

// ---------------------------------------------------------------------------------------------
// The covered endpoints: method and path template as published (compute-api.json,
// agent-registry-api.json), /internal/* excluded.
const ENDPOINTS = [
  // agent-registry-api.json
  ["GET", "/registry/v1/agents"],
  ["POST", "/registry/v1/agents"],
  ["GET", "/registry/v1/agents/search"],
  ["GET", "/registry/v1/agents/{id}"],
  ["PUT", "/registry/v1/agents/{id}"],
  ["DELETE", "/registry/v1/agents/{id}"],
  ["GET", "/registry/v1/agents/{id}/public-key"],
  ["GET", "/registry/v1/tools"],
  ["POST", "/registry/v1/tools"],
  ["GET", "/registry/v1/tools/{id}"],
  // compute-api.json
  ["GET", "/compute/v1/access/clients"],
  ["POST", "/compute/v1/access/clients"],
  ["DELETE", "/compute/v1/access/clients/{client_id}"],
  ["POST", "/compute/v1/agents/{agent_id}/deploy"],
  ["GET", "/compute/v1/deployments"],
  ["GET", "/compute/v1/deployments/{deployment_id}"],
  ["DELETE", "/compute/v1/deployments/{deployment_id}"],
  ["POST", "/compute/v1/deployments/{deployment_id}/redeploy"],
  ["POST", "/compute/v1/deployments/{deployment_id}/stop"],
  ["GET", "/compute/v1/pool/config"],
  ["PUT", "/compute/v1/pool/config"],
  ["GET", "/compute/v1/pool/status"],
  ["GET", "/compute/v1/skills"],
  ["POST", "/compute/v1/skills"],
  ["GET", "/compute/v1/skills/{name}"],
  ["PUT", "/compute/v1/skills/{name}"],
  ["DELETE", "/compute/v1/skills/{name}"],
  ["GET", "/compute/v1/usage"],
  ["GET", "/compute/v1/usage/summary"],
  ["GET", "/compute/v1/vms"],
  ["POST", "/compute/v1/vms/allocate"],
  ["GET", "/compute/v1/vms/{id}"],
  ["DELETE", "/compute/v1/vms/{id}"],
  ["GET", "/compute/v1/vms/{id}/endpoint"],
  ["POST", "/compute/v1/vms/{id}/execute"],
  ["GET", "/compute/v1/vms/{id}/r/{path}"],
  ["POST", "/compute/v1/vms/{id}/r/{path}"],
  ["DELETE", "/compute/v1/vms/{id}/r/{path}"],
  ["POST", "/compute/v1/vms/{id}/release"],
  ["POST", "/compute/v1/vms/{id}/renew"],
] as const;

// The agentd operations: method and path template exactly as published in agentd-api.json
// (its paths are relative to the daemon; through the compute API they follow `r/`).
const AGENTD_ENDPOINTS = [
  ["GET", "/v1/agents"],
  ["POST", "/v1/agents/execute"],
  ["GET", "/v1/agents/{id}"],
  ["DELETE", "/v1/agents/{id}"],
  ["GET", "/v1/code/contexts"],
  ["POST", "/v1/code/contexts"],
  ["GET", "/v1/code/contexts/{id}"],
  ["DELETE", "/v1/code/contexts/{id}"],
  ["POST", "/v1/code/execute"],
  ["DELETE", "/v1/code/execute/{id}"],
  ["POST", "/v1/commands/run"],
  ["DELETE", "/v1/commands/{id}"],
  ["GET", "/v1/commands/{id}/status"],
  ["POST", "/v1/directories"],
  ["DELETE", "/v1/directories"],
  ["DELETE", "/v1/files"],
  ["GET", "/v1/files/download"],
  ["GET", "/v1/files/info"],
  ["POST", "/v1/files/mv"],
  ["GET", "/v1/files/search"],
  ["POST", "/v1/files/upload"],
  ["GET", "/v1/metrics"],
  ["GET", "/v1/metrics/watch"],
  ["POST", "/v1/sessions/init"],
  ["DELETE", "/v1/sessions/{id}"],
  ["GET", "/v1/skills"],
  ["POST", "/v1/skills/load"],
  ["GET", "/v1/skills/{name}"],
  ["POST", "/v1/workspace/reset"],
] as const;

type Method = (typeof ENDPOINTS)[number][0];
type Template = (typeof ENDPOINTS)[number][1];

const keyOf = (method: string, template: string): string => `${method.toUpperCase()} ${template}`;
/** Path parameter names are not part of the wire contract: compare templates without them. */
const shapeOf = (method: string, template: string): string => keyOf(method, template.replace(/\{[^}]+\}/g, "{}"));
const TABLE = new Set(ENDPOINTS.map(([m, t]) => keyOf(m, t)));
const AGENTD_TABLE = new Set(AGENTD_ENDPOINTS.map(([m, t]) => keyOf(m, t)));

/** The forwarding route, and the agentd operation a concrete agentd path (after `r/`) hits. */
const FORWARD = "/compute/v1/vms/{id}/r/{path}";
const AGENTD_MATCHERS = AGENTD_ENDPOINTS.map(([method, template]) => ({
  key: keyOf(method, template),
  method: method as string,
  literal: !template.includes("{"),
  re: new RegExp(`^${template.replace(/\{[^}]+\}/g, "[^/]+")}$`),
}));
function agentdOperation(method: string, path: string): string | undefined {
  const concrete = `/${path.replace(/^\/+/, "")}`;
  const hits = AGENTD_MATCHERS.filter((x) => x.method === method.toUpperCase() && x.re.test(concrete));
  // A literal template wins over one with a parameter (none overlap today; keep it so).
  return (hits.find((x) => x.literal) ?? hits[0])?.key;
}

const REPO = fileURLToPath(new URL("../../../", import.meta.url));
const PUBLISHED_DIR = join(REPO, "..", "shared", "reference", "service-openapi");
/** Each published description and the table it is checked against. */
const PUBLISHED_FILES = {
  "compute-api.json": "service", // ENDPOINTS
  "agent-registry-api.json": "service", // ENDPOINTS
  "agentd-api.json": "agentd", // AGENTD_ENDPOINTS
} as const;
const HAVE_PUBLISHED = existsSync(PUBLISHED_DIR);
const SKIP_REASON = HAVE_PUBLISHED ? "" : ` (skipped: ${PUBLISHED_DIR} does not exist; CI has it beside the clone)`;

// ---------------------------------------------------------------------------------------------
// A raw HTTP client written from the descriptions.
interface Answer {
  status: number;
  headers: Headers;
  text: string;
  json: unknown;
}

interface CallOptions {
  params?: Record<string, string>;
  query?: Record<string, string | number | boolean>;
  body?: unknown;
  /** A multipart/form-data body (a file upload), instead of a JSON one. */
  form?: FormData;
  headers?: Record<string, string>;
  /** undefined: the session's token; null: no Authorization header; a string: that token. */
  token?: string | null;
  /**
   * For an event stream that does not end by itself (agentd's metrics/watch): read only this
   * many events, then drop the connection (AbortController). At most STREAM_WAIT_MS.
   */
  events?: number;
}

/** (method, template) pairs called with the session's token during the run. */
const exercised = new Set<string>();
/** agentd (method, template) pairs that answered a call through r/ with the session's token. */
const agentdExercised = new Set<string>();

const STREAM_WAIT_MS = 10_000;

async function readAnswer(res: Response): Promise<Answer> {
  const text = await res.text();
  let json: unknown = undefined;
  if (text !== "") {
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
  }
  return { status: res.status, headers: res.headers, text, json };
}

/** The first `count` events of an event stream, then the connection is dropped. */
async function readFirstEvents(res: Response, count: number, abort: AbortController): Promise<Answer> {
  if (!(res.headers.get("content-type") ?? "").startsWith("text/event-stream") || !res.body) return readAnswer(res);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  const complete = (): string => text.slice(0, text.lastIndexOf("\n\n") + 2);
  const eventsIn = (t: string): number => t.split("\n\n").filter((b) => b.split("\n").some((l) => l.startsWith("data:"))).length;
  const timer = setTimeout(() => abort.abort(), STREAM_WAIT_MS);
  try {
    while (eventsIn(complete()) < count) {
      const { done, value } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
    }
  } catch {
    // Aborted after STREAM_WAIT_MS: what came so far is the answer.
  } finally {
    clearTimeout(timer);
    abort.abort();
    await reader.cancel().catch(() => undefined);
  }
  return { status: res.status, headers: res.headers, text: complete(), json: undefined };
}

class RawService {
  token = "";

  constructor(
    readonly baseURL: string,
    readonly authURL: string,
  ) {}

  tokenByKey(apiKey: string): Promise<Answer> {
    return fetch(`${this.authURL}/token`, { method: "POST", headers: { "X-API-Key": apiKey } }).then(readAnswer);
  }

  tokenByClient(clientId: string, clientSecret: string): Promise<Answer> {
    return fetch(`${this.authURL}/token`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ grant_type: "client_credentials", client_id: clientId, client_secret: clientSecret }),
    }).then(readAnswer);
  }

  async login(apiKey: string): Promise<void> {
    const ans = await this.tokenByKey(apiKey);
    if (ans.status !== 200) throw new Error(`token: ${ans.status} ${ans.text}`);
    this.token = (ans.json as { access_token: string }).access_token;
  }

  async call(method: Method, template: Template, opts: CallOptions = {}): Promise<Answer> {
    const key = keyOf(method, template);
    if (!TABLE.has(key)) throw new Error(`not in the endpoint table: ${key}`);
    const path = template.replace(/\{([^}]+)\}/g, (_m, name: string) => {
      const v = opts.params?.[name];
      if (v === undefined) throw new Error(`${key}: no value for {${name}}`);
      // {path} of the forwarding endpoint is a runtime path of several segments.
      return name === "path" ? v.split("/").map(encodeURIComponent).join("/") : encodeURIComponent(v);
    });
    const url = new URL(this.baseURL + path);
    for (const [k, v] of Object.entries(opts.query ?? {})) url.searchParams.set(k, String(v));
    const headers: Record<string, string> = { accept: "application/json", ...opts.headers };
    const token = opts.token === undefined ? this.token : opts.token;
    if (token !== null) headers["authorization"] = `Bearer ${token}`;
    let body: string | FormData | undefined = opts.form;
    if (opts.body !== undefined) {
      headers["content-type"] = "application/json";
      body = typeof opts.body === "string" ? opts.body : JSON.stringify(opts.body);
    }
    const abort = opts.events === undefined ? undefined : new AbortController();
    const res = await fetch(url, { method, headers, body, signal: abort?.signal });
    const ans = abort ? await readFirstEvents(res, opts.events ?? 1, abort) : await readAnswer(res);
    if (opts.token === undefined) {
      exercised.add(key);
      // agentd answered unless the compute API did itself (its dialect has `error_code`: an
      // unknown or gone VM), or no agentd operation took the call (a 404 or 405 for the route
      // itself: PROJECT DECISION, docs/emulator.md, "agentd has no route" / "is not allowed").
      const body = ans.json as { error_code?: unknown; message?: unknown } | undefined;
      const byCompute = typeof body?.error_code === "string";
      const noRoute = (ans.status === 404 || ans.status === 405) && typeof body?.message === "string" && /^(agentd has no route|method \w+ is not allowed)/.test(body.message);
      const op = template === FORWARD && !byCompute && !noRoute ? agentdOperation(method, opts.params?.["path"] ?? "") : undefined;
      if (op) agentdExercised.add(op);
    }
    return ans;
  }
}

// ---------------------------------------------------------------------------------------------
// Assertions.
function show(ans: Answer): string {
  return `HTTP ${ans.status} ${ans.text.length > 600 ? `${ans.text.slice(0, 600)}...` : ans.text}`;
}

/** A success answer: the status, a JSON body, and the body conforming to the schema. */
function expectBody<T extends TSchema>(ans: Answer, status: number, schema: T, what: string): Static<T> {
  expect(ans.status, `${what}: ${show(ans)}`).toBe(status);
  expect(ans.headers.get("content-type") ?? "", `${what}: content-type`).toMatch(/^application\/json/);
  expect(ans.json, `${what}: a JSON body: ${show(ans)}`).not.toBeUndefined();
  expect(S.violations(schema, ans.json), `${what}: schema violations in ${show(ans)}`).toEqual([]);
  return ans.json as Static<T>;
}

/** 204 with an empty body. */
function expectNoContent(ans: Answer, what: string): void {
  expect(ans.status, `${what}: ${show(ans)}`).toBe(204);
  expect(ans.text, `${what}: 204 body`).toBe("");
}

type Dialect = "compute" | "registry" | "agentd";

/**
 * An error answer in its dialect; the compute dialect's `code` is the HTTP status. agentd's
 * (D models.ErrorResponse {code, message}, neither required) is a JSON body; its `code`, when
 * there, is read as the HTTP status too.
 */
function expectError(ans: Answer, status: number, dialect: Dialect, what: string, mentions?: RegExp): void {
  expect(ans.status, `${what}: ${show(ans)}`).toBe(status);
  const schema = dialect === "compute" ? S.ComputeError : dialect === "registry" ? S.RegistryError : S.AgentdError;
  expect(ans.json, `${what}: a JSON ${dialect} error body: ${show(ans)}`).not.toBeUndefined();
  expect(S.violations(schema, ans.json), `${what}: ${dialect} error body: ${show(ans)}`).toEqual([]);
  const body = ans.json as { code?: number; message: string };
  if (dialect === "compute") expect(body.code, `${what}: code equals the HTTP status`).toBe(status);
  if (dialect === "agentd" && body.code !== undefined) expect(body.code, `${what}: code equals the HTTP status`).toBe(status);
  if (mentions) expect(body.message, `${what}: the message names the field`).toMatch(mentions);
}

const dialectOf = (template: string): "compute" | "registry" => (template.startsWith("/registry/") ? "registry" : "compute");

/** A server-sent event stream (S: "answers a server-sent event stream (`event`, `data` strings)"). */
function expectEventStream(ans: Answer, what: string): { event: string; data: string }[] {
  expect(ans.status, `${what}: ${show(ans)}`).toBe(200);
  expect(ans.headers.get("content-type") ?? "", `${what}: an event stream: ${show(ans)}`).toMatch(/^text\/event-stream/);
  const events: { event: string; data: string }[] = [];
  for (const block of ans.text.split("\n\n")) {
    const lines = block.split("\n").filter((l) => l !== "" && !l.startsWith(":"));
    if (lines.length === 0) continue;
    const event = lines.find((l) => l.startsWith("event:"))?.slice(6).trim() ?? "message";
    const data = lines.filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, ""));
    expect(data.length, `${what}: every event has data: ${JSON.stringify(block)}`).toBeGreaterThan(0);
    events.push({ event, data: data.join("\n") });
  }
  expect(events.length, `${what}: the stream carries events`).toBeGreaterThan(0);
  return events;
}

// ---------------------------------------------------------------------------------------------
// Fixtures.
const API_KEY = "contract-key";
const ORG = "org-contract";
const USAGE_HEADERS = { "X-Workspace-Id": "ws-contract", "X-Environment-Id": "env-contract" };
const UNKNOWN = "00000000-0000-4000-8000-000000000000";

type Emu = Awaited<ReturnType<typeof startEmulator>>;
let emu: Emu;
let api: RawService;

let seq = 0;
const unique = (prefix: string): string => `${prefix}-${Date.now().toString(36)}-${++seq}`;

async function newAgent(extra: Record<string, unknown> = {}): Promise<S.TAgent> {
  const body = { name: unique("agent"), image: "registry.example/agents/contract:1.0", org_id: ORG, ...extra };
  const ans = await api.call("POST", "/registry/v1/agents", { body });
  return expectBody(ans, 201, S.AgentResponse, "create agent").agent;
}

async function allocate(extra: Record<string, unknown> = {}): Promise<S.TAllocateResponse> {
  const ans = await api.call("POST", "/compute/v1/vms/allocate", { body: { tier: "standard", ...extra } });
  return expectBody(ans, 201, S.AllocateResponse, "allocate");
}

async function deploy(agentId: string, options: Record<string, unknown>): Promise<S.TDeployment> {
  const ans = await api.call("POST", "/compute/v1/agents/{agent_id}/deploy", { params: { agent_id: agentId }, body: options });
  return expectBody(ans, 200, S.Deployment, "deploy");
}

async function newSkill(): Promise<S.TSkill> {
  const body = { name: unique("skill"), content: "# a skill\nprint('hi')\n", description: "contract", resources: { "requirements.txt": "" } };
  const ans = await api.call("POST", "/compute/v1/skills", { body });
  return expectBody(ans, 201, S.Skill, "create skill");
}

beforeAll(async () => {
  emu = await startEmulator({ apiKey: API_KEY });
  api = new RawService(emu.baseURL, emu.authURL);
  await api.login(API_KEY);
});

afterAll(async () => {
  await emu?.close();
});

// ---------------------------------------------------------------------------------------------
// The schemas themselves, on hand-made bodies: they must reject what the facts rule out, or a
// passing run would prove nothing.
describe("contract: the schemas reject what the facts rule out", () => {
  const ts = "2026-05-15T12:00:00.000Z";
  const deployment = {
    id: "d1", name: "n", registry_id: "a1", image: "i:1", endpoint: "https://e", endpoint_name: "e", config_hash: "h",
    manifest: {}, metadata: { k: "v" }, skills: [], state: "running", tier: "standard", token: "t", created_at: ts, updated_at: ts,
  };
  const vm = {
    id: "v1", state: "allocated", tier: "standard", skills: [], metadata: {}, token: "t", ttl_seconds: 60,
    allocated_at: ts, created_at: ts, expires_at: ts,
  };

  it("accepts conforming bodies", () => {
    expect(S.violations(S.Deployment, deployment)).toEqual([]);
    expect(S.violations(S.AgentVM, vm)).toEqual([]);
    expect(S.violations(S.AgentVM, { ...vm, released_at: ts })).toEqual([]);
    expect(S.violations(S.ComputeError, { code: 404, error_code: "not_found", message: "m" })).toEqual([]);
    expect(S.violations(S.RegistryError, { error: "not_found", message: "m" })).toEqual([]);
  });

  // D marks no property of these required, and a Go server's omitempty may leave any out (the
  // emulator's agentdOmitEmpty drops running: false and exit_code: 0): present ones are typed.
  it("accepts an agentd error with properties left out (D models.ErrorResponse requires none)", () => {
    expect(S.violations(S.AgentdError, { code: 404, message: "m" })).toEqual([]);
    expect(S.violations(S.AgentdError, { message: "m" })).toEqual([]);
    expect(S.violations(S.AgentdError, { code: 500 })).toEqual([]);
  });

  it("accepts an ended command status with properties left out (D models.CommandStatus requires none)", () => {
    expect(S.violations(S.EndedCommandStatus, { id: "c", running: false, exit_code: 4, started_at: ts, finished_at: ts })).toEqual([]);
    expect(S.violations(S.EndedCommandStatus, { id: "c", started_at: ts, finished_at: ts }), "omitempty: running false and exit_code 0 left out").toEqual([]);
  });

  it("accepts agentd's other models with properties left out (D requires none)", () => {
    expect(S.violations(S.RunningCommandStatus, { id: "c", running: true, started_at: ts })).toEqual([]);
    expect(S.violations(S.RunningCommandStatus, { running: true })).toEqual([]);
    expect(S.violations(S.SkillInfo, { name: "s", loaded: true, path: "/workspace/skills/s" })).toEqual([]);
    expect(S.violations(S.SkillInfo, { name: "s" }), "omitempty: loaded false left out").toEqual([]);
    expect(S.violations(S.SkillInfoList, [])).toEqual([]);
    expect(S.violations(S.CodeContextList, [{ id: "x", language: "python" }])).toEqual([]);
    expect(S.violations(S.FileInfoList, [{ path: "/workspace/a", size: 3 }, { path: "/workspace/d", is_dir: true }])).toEqual([]);
    expect(S.violations(S.AgentProcessList, [{ id: "p", anything: [1] }]), "published as objects with additionalProperties: true").toEqual([]);
  });

  it.each([
    ["a Deployment echoing env", S.Deployment, { ...deployment, env: { K: "v" } }],
    ["a Deployment with agent_id", S.Deployment, { ...deployment, agent_id: "a1" }],
    ["a Deployment without registry_id", S.Deployment, { ...deployment, registry_id: undefined }],
    ["a Deployment without config_hash", S.Deployment, { ...deployment, config_hash: undefined }],
    ["a Deployment with a numeric metadata value", S.Deployment, { ...deployment, metadata: { k: 1 } }],
    ["an AgentVM with vm_id", S.AgentVM, { ...vm, vm_id: "v1" }],
    ["an AgentVM with skills_loaded", S.AgentVM, { ...vm, skills_loaded: [] }],
    ["an AgentVM keyed vm_id instead of id", S.AgentVM, { ...vm, id: undefined, vm_id: "v1" }],
    ["an AgentVM with a timestamp that does not parse", S.AgentVM, { ...vm, expires_at: "tomorrow" }],
    ["an AgentVM with a zoneless timestamp", S.AgentVM, { ...vm, expires_at: "2026-05-15T12:00:00" }],
    ["an AllocateResponse without vm_id", S.AllocateResponse, { state: "allocated", tier: "t", skills_loaded: [], endpoint: "e", ws_url: "wss://h", token: "t", expires_at: ts }],
    ["a compute error with a string code", S.ComputeError, { code: "404", error_code: "not_found", message: "m" }],
    ["a compute error in the registry dialect", S.ComputeError, { error: "not_found", message: "m" }],
    ["a registry error in the compute dialect", S.RegistryError, { code: 404, error_code: "not_found", message: "m" }],
    ["an agent in an unpublished state", S.Agent, { id: "a", name: "n", image: "i", org_id: "o", state: "deployed" }],
    ["a public-key map with a non-string value", S.PublicKeyMap, { public_key: 1 }],
    ["an agentd error in the compute dialect", S.AgentdError, { error_code: "not_found", message: "m" }],
    ["an agentd error with a string code", S.AgentdError, { code: "404", message: "m" }],
    ["an ended command status that says it is running", S.EndedCommandStatus, { id: "c", running: true, started_at: ts }],
    ["a command status with a string exit_code", S.EndedCommandStatus, { id: "c", running: false, exit_code: "4", started_at: ts, finished_at: ts }],
    ["a command status with a fractional exit_code", S.EndedCommandStatus, { id: "c", exit_code: 1.5 }],
    ["a command status keyed exitCode instead of exit_code", S.EndedCommandStatus, { id: "c", running: false, exitCode: 4 }],
    ["metrics with a string figure", S.MetricsSnapshot, { cpu_percent: "3" }],
    ["a running command status that says it is not running", S.RunningCommandStatus, { id: "c", running: false }],
    ["a running command status without running (reads as ended)", S.RunningCommandStatus, { id: "c", started_at: ts }],
    ["a running command status with a string exit_code", S.RunningCommandStatus, { id: "c", running: true, exit_code: "0" }],
    ["a skill info with a string loaded", S.SkillInfo, { name: "s", loaded: "true" }],
    ["a skill info with a field SkillInfo lacks", S.SkillInfo, { name: "s", loaded: true, content_hash: "h" }],
    ["a skill list that is a map by name", S.SkillInfoList, { s: { name: "s" } }],
    ["a code context list holding a context with a numeric id", S.CodeContextList, [{ id: 1 }]],
    ["a code context list wrapped in an object", S.CodeContextList, { contexts: [] }],
    ["a file list holding a file info with a string size", S.FileInfoList, [{ path: "/workspace/a", size: "3" }]],
    ["a file list holding a file info keyed name instead of path", S.FileInfoList, [{ name: "a", size: 3 }]],
    ["an agent-process list holding a string", S.AgentProcessList, ["p"]],
  ] as const)("rejects %s", (_what, schema, body) => {
    expect(S.violations(schema, JSON.parse(JSON.stringify(body)))).not.toEqual([]);
  });
});

// ---------------------------------------------------------------------------------------------
describe("contract: token service", () => {
  it("POST {auth_url}/token with X-API-Key answers {access_token, expires_in?}", async () => {
    const ans = await api.tokenByKey(API_KEY);
    expectBody(ans, 200, S.TokenResponse, "token");
  });

  it("refuses a wrong API key", async () => {
    const ans = await api.tokenByKey("not-the-key");
    expect(ans.status, show(ans)).toBeGreaterThanOrEqual(400);
    expect(ans.status, show(ans)).toBeLessThan(500);
    expect((ans.json as { access_token?: unknown } | undefined)?.access_token).toBeUndefined();
  });
});

describe("contract: 401 without a valid bearer token", () => {
  const params = { id: UNKNOWN, agent_id: UNKNOWN, deployment_id: UNKNOWN, client_id: UNKNOWN, name: "no-such-skill", path: "v1/metrics" };
  for (const [method, template] of ENDPOINTS) {
    it(`${method} ${template}`, async () => {
      const body = method === "GET" || method === "DELETE" ? undefined : {};
      const missing = await api.call(method, template, { params, body, token: null, headers: USAGE_HEADERS, query: { capabilities: "x" } });
      expectError(missing, 401, dialectOf(template), "no Authorization header");
      const wrong = await api.call(method, template, { params, body, token: "not-a-token", headers: USAGE_HEADERS, query: { capabilities: "x" } });
      expectError(wrong, 401, dialectOf(template), "an unknown token");
    });
  }
});

// ---------------------------------------------------------------------------------------------
describe("contract: registry agents", () => {
  it("POST /registry/v1/agents: 201 {agent}; 400 naming the field; 409 for a name taken in the org", async () => {
    const name = unique("agent");
    const created = await api.call("POST", "/registry/v1/agents", {
      body: {
        name,
        image: "registry.example/a:1",
        org_id: ORG,
        author: "contract",
        capabilities: ["summarise"],
        description: "d",
        metadata: { team: "a" },
        version: "1.0.0",
        manifest: { name, version: "1.0.0", skills: [{ id: "s1", inputModes: ["text"], outputModes: ["text"] }] },
      },
    });
    const agent = expectBody(created, 201, S.AgentResponse, "create").agent;
    expect(agent).toMatchObject({ name, image: "registry.example/a:1", org_id: ORG, capabilities: ["summarise"], metadata: { team: "a" } });

    const conflict = await api.call("POST", "/registry/v1/agents", { body: { name, image: "registry.example/b:1", org_id: ORG } });
    expectError(conflict, 409, "registry", "same name, same org");

    for (const [field, body] of [
      ["image", { name: unique("agent"), org_id: ORG }],
      ["name", { image: "i:1", org_id: ORG }],
      ["org_id", { name: unique("agent"), image: "i:1" }],
    ] as const) {
      const ans = await api.call("POST", "/registry/v1/agents", { body });
      expectError(ans, 400, "registry", `create without ${field}`, new RegExp(field));
    }
    const wrongType = await api.call("POST", "/registry/v1/agents", { body: { name: 42, image: "i:1", org_id: ORG } });
    expectError(wrongType, 400, "registry", "create with a numeric name", /name/);
    const wrongMeta = await api.call("POST", "/registry/v1/agents", { body: { name: unique("agent"), image: "i:1", org_id: ORG, metadata: { k: 1 } } });
    expectError(wrongMeta, 400, "registry", "create with a non-string metadata value", /metadata/);
  });

  it("GET /registry/v1/agents: {agents, total} with limit, offset and author", async () => {
    const author = unique("author");
    const mine = [await newAgent({ author }), await newAgent({ author }), await newAgent({ author })];
    const all = expectBody(await api.call("GET", "/registry/v1/agents"), 200, S.AgentsListResponse, "list");
    expect(all.total).toBeGreaterThanOrEqual(3);
    expect(all.agents.length).toBeLessThanOrEqual(20); // the published default limit

    const page = expectBody(await api.call("GET", "/registry/v1/agents", { query: { limit: 2 } }), 200, S.AgentsListResponse, "list limit=2");
    expect(page.agents).toHaveLength(2);
    expect(page.total).toBe(all.total);
    const last = expectBody(
      await api.call("GET", "/registry/v1/agents", { query: { limit: 2, offset: all.total - 1 } }),
      200,
      S.AgentsListResponse,
      "list last page",
    );
    expect(last.agents).toHaveLength(1);
    expect(last.total).toBe(all.total);

    const byAuthor = expectBody(await api.call("GET", "/registry/v1/agents", { query: { author } }), 200, S.AgentsListResponse, "list author");
    expect(byAuthor.agents.map((a) => a.id).sort()).toEqual(mine.map((a) => a.id).sort());
    expect(byAuthor.total).toBe(3);
  });

  it("GET /registry/v1/agents/{id}: 200 {agent}; 404", async () => {
    const agent = await newAgent();
    const got = expectBody(await api.call("GET", "/registry/v1/agents/{id}", { params: { id: agent.id } }), 200, S.AgentResponse, "get");
    expect(got.agent.id).toBe(agent.id);
    expectError(await api.call("GET", "/registry/v1/agents/{id}", { params: { id: UNKNOWN } }), 404, "registry", "get unknown");
  });

  it("PUT /registry/v1/agents/{id}: 200 {agent} with the change; 404; 400 for a wrong type", async () => {
    const agent = await newAgent();
    const ans = await api.call("PUT", "/registry/v1/agents/{id}", {
      params: { id: agent.id },
      body: { description: "updated", capabilities: ["a", "b"], version: "2.0.0", metadata: { x: "y" } },
    });
    const updated = expectBody(ans, 200, S.AgentResponse, "update").agent;
    expect(updated).toMatchObject({ id: agent.id, description: "updated", capabilities: ["a", "b"], version: "2.0.0", metadata: { x: "y" } });
    expectError(
      await api.call("PUT", "/registry/v1/agents/{id}", { params: { id: UNKNOWN }, body: { description: "x" } }),
      404,
      "registry",
      "update unknown",
    );
    // Not listed for PUT in the description (200, 404), but a wrong type is bad input (S: 400).
    expectError(
      await api.call("PUT", "/registry/v1/agents/{id}", { params: { id: agent.id }, body: { capabilities: "a,b" } }),
      400,
      "registry",
      "update with a string for capabilities",
      /capabilities/,
    );
  });

  it("DELETE /registry/v1/agents/{id}: 204 empty, then 404", async () => {
    const agent = await newAgent();
    expectNoContent(await api.call("DELETE", "/registry/v1/agents/{id}", { params: { id: agent.id } }), "delete");
    expectError(await api.call("GET", "/registry/v1/agents/{id}", { params: { id: agent.id } }), 404, "registry", "get deleted");
    expectError(await api.call("DELETE", "/registry/v1/agents/{id}", { params: { id: UNKNOWN } }), 404, "registry", "delete unknown");
  });

  it("GET /registry/v1/agents/search: {agents, total} by capabilities; 400 without them", async () => {
    const a = unique("cap");
    const b = unique("cap");
    const both = await newAgent({ capabilities: [a, b] });
    const onlyA = await newAgent({ capabilities: [a] });
    const ab = expectBody(
      await api.call("GET", "/registry/v1/agents/search", { query: { capabilities: `${a},${b}` } }),
      200,
      S.AgentsListResponse,
      "search a,b",
    );
    // Whether several capabilities match all or any of them is not published: only check inclusion.
    expect(ab.agents.map((x) => x.id)).toContain(both.id);
    const justA = expectBody(await api.call("GET", "/registry/v1/agents/search", { query: { capabilities: a } }), 200, S.AgentsListResponse, "search a");
    expect(justA.agents.map((x) => x.id).sort()).toEqual([both.id, onlyA.id].sort());
    expectError(await api.call("GET", "/registry/v1/agents/search"), 400, "registry", "search without capabilities", /capabilities/);
  });

  it("GET /registry/v1/agents/{id}/public-key: a map of strings carrying the key set by PUT; 404", async () => {
    const agent = await newAgent();
    const before = await api.call("GET", "/registry/v1/agents/{id}/public-key", { params: { id: agent.id } });
    // An agent without a key: the description lists only 200 and 404; either is a valid answer.
    if (before.status === 200) expectBody(before, 200, S.PublicKeyMap, "public-key before a key is set");
    else expectError(before, 404, "registry", "public-key before a key is set");

    const key = "MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=";
    expectBody(
      await api.call("PUT", "/registry/v1/agents/{id}", { params: { id: agent.id }, body: { public_key: key } }),
      200,
      S.AgentResponse,
      "set public_key",
    );
    const after = expectBody(await api.call("GET", "/registry/v1/agents/{id}/public-key", { params: { id: agent.id } }), 200, S.PublicKeyMap, "public-key");
    expect(Object.values(after)).toContain(key);
    expectError(await api.call("GET", "/registry/v1/agents/{id}/public-key", { params: { id: UNKNOWN } }), 404, "registry", "public-key unknown");
  });
});

describe("contract: registry tools", () => {
  it("POST /registry/v1/tools: 201 {tool}; 409 for the same id; 400 naming the field", async () => {
    const id = unique("tool");
    const tool = expectBody(
      await api.call("POST", "/registry/v1/tools", { body: { id, name: "Search", category: "web", description: "d" } }),
      201,
      S.ToolResponse,
      "create tool",
    ).tool;
    expect(tool).toMatchObject({ id, name: "Search", category: "web", description: "d" });
    expectError(await api.call("POST", "/registry/v1/tools", { body: { id, name: "Other" } }), 409, "registry", "same tool id");
    expectError(await api.call("POST", "/registry/v1/tools", { body: { id: unique("tool") } }), 400, "registry", "tool without name", /name/);
    expectError(await api.call("POST", "/registry/v1/tools", { body: { name: "n" } }), 400, "registry", "tool without id", /\bid\b/);
    expectError(await api.call("POST", "/registry/v1/tools", { body: { id: unique("tool"), name: 7 } }), 400, "registry", "numeric tool name", /name/);
  });

  it("GET /registry/v1/tools: {tools, total}, filtered by category", async () => {
    const category = unique("cat");
    const id = unique("tool");
    expectBody(await api.call("POST", "/registry/v1/tools", { body: { id, name: "T", category } }), 201, S.ToolResponse, "create tool");
    const all = expectBody(await api.call("GET", "/registry/v1/tools"), 200, S.ToolsListResponse, "list tools");
    expect(all.tools.map((t) => t.id)).toContain(id);
    expect(all.total).toBeGreaterThanOrEqual(all.tools.length);
    const cat = expectBody(await api.call("GET", "/registry/v1/tools", { query: { category } }), 200, S.ToolsListResponse, "list tools by category");
    expect(cat.tools.map((t) => t.id)).toEqual([id]);
  });

  it("GET /registry/v1/tools/{id}: 200 {tool}; 404", async () => {
    const id = unique("tool");
    expectBody(await api.call("POST", "/registry/v1/tools", { body: { id, name: "T" } }), 201, S.ToolResponse, "create tool");
    const got = expectBody(await api.call("GET", "/registry/v1/tools/{id}", { params: { id } }), 200, S.ToolResponse, "get tool");
    expect(got.tool.id).toBe(id);
    expectError(await api.call("GET", "/registry/v1/tools/{id}", { params: { id: UNKNOWN } }), 404, "registry", "get unknown tool");
  });
});

// ---------------------------------------------------------------------------------------------
describe("contract: deployments", () => {
  const MANIFEST = { name: "contract", version: "1.0.0", description: "an agent with a manifest" };
  const deployable = () => newAgent({ manifest: MANIFEST });
  const options = (env: Record<string, string>) => ({
    name: "contract-deployment",
    tier: "standard",
    skills: [],
    metadata: { team: "contract" },
    endpoint_name: unique("ep"),
    env,
  });

  it("POST /compute/v1/agents/{agent_id}/deploy: 200 Deployment, no echo of env, config_hash follows the options; 404", async () => {
    const agent = await deployable();
    const opts = { ...options({ CONTRACT_SECRET: "s3cr3t-value" }), contract_extra_option: "passed-through" };
    const ans = await api.call("POST", "/compute/v1/agents/{agent_id}/deploy", { params: { agent_id: agent.id }, body: opts });
    const d = expectBody(ans, 200, S.Deployment, "deploy");
    expect(d.registry_id).toBe(agent.id);
    expect(d.image).toBe(agent.image);
    expect(d).toMatchObject({ name: opts.name, tier: "standard", metadata: { team: "contract" }, endpoint_name: opts.endpoint_name, skills: [] });
    expect(ans.text, "the answer does not carry the env sent").not.toContain("s3cr3t-value");
    expect(ans.text, "the answer does not carry unknown options").not.toContain("passed-through");
    expect(Object.keys(d)).not.toContain("env");

    // The same options give the same hash; other options (here only env, which the record
    // does not show) give another one. No endpoint_name, so that deploying twice is not a clash.
    const plain = { name: "contract-hash", tier: "standard", metadata: { team: "contract" }, env: { CONTRACT_SECRET: "one" } };
    const first = await deploy(agent.id, plain);
    const second = await deploy(agent.id, { ...plain, env: { CONTRACT_SECRET: "one" } });
    expect(second.id).not.toBe(first.id);
    expect(second.config_hash, "same options, same config_hash").toBe(first.config_hash);
    const reordered = await deploy(agent.id, { env: { CONTRACT_SECRET: "one" }, metadata: { team: "contract" }, tier: "standard", name: "contract-hash" });
    expect(reordered.config_hash, "the same options in another key order, same config_hash").toBe(first.config_hash);
    const other = await deploy(agent.id, { ...plain, env: { CONTRACT_SECRET: "two" } });
    expect(other.config_hash, "other env, other config_hash").not.toBe(first.config_hash);
    const extra = await deploy(agent.id, { ...plain, contract_extra_option: "x" });
    expect(extra.config_hash, "an added (unknown) option, another config_hash").not.toBe(first.config_hash);
    expect(extra.config_hash).not.toBe(other.config_hash);

    expectError(
      await api.call("POST", "/compute/v1/agents/{agent_id}/deploy", { params: { agent_id: UNKNOWN }, body: {} }),
      404,
      "compute",
      "deploy an unknown agent",
    );
  });

  it("GET /compute/v1/deployments: a bare array of Deployment", async () => {
    const agent = await deployable();
    const d = await deploy(agent.id, options({}));
    const list = expectBody(await api.call("GET", "/compute/v1/deployments"), 200, S.DeploymentList, "list deployments");
    expect(Array.isArray(list)).toBe(true);
    expect(list.map((x) => x.id)).toContain(d.id);
  });

  it("GET /compute/v1/deployments/{deployment_id}: 200 Deployment; 404", async () => {
    const agent = await deployable();
    const d = await deploy(agent.id, options({ A: "1" }));
    const got = expectBody(await api.call("GET", "/compute/v1/deployments/{deployment_id}", { params: { deployment_id: d.id } }), 200, S.Deployment, "get");
    expect(got).toMatchObject({ id: d.id, registry_id: agent.id, config_hash: d.config_hash });
    expectError(await api.call("GET", "/compute/v1/deployments/{deployment_id}", { params: { deployment_id: UNKNOWN } }), 404, "compute", "get unknown");
  });

  it("POST .../stop and .../redeploy: 200 Deployment with the same config_hash; 404", async () => {
    const agent = await deployable();
    const d = await deploy(agent.id, options({ A: "1" }));
    const stopped = expectBody(
      await api.call("POST", "/compute/v1/deployments/{deployment_id}/stop", { params: { deployment_id: d.id } }),
      200,
      S.Deployment,
      "stop",
    );
    expect(stopped.id).toBe(d.id);
    expect(stopped.config_hash, "stop does not change the options").toBe(d.config_hash);
    const redeployed = expectBody(
      await api.call("POST", "/compute/v1/deployments/{deployment_id}/redeploy", { params: { deployment_id: d.id } }),
      200,
      S.Deployment,
      "redeploy",
    );
    expect(redeployed.id).toBe(d.id);
    expect(redeployed.config_hash, "redeploy does not change the options").toBe(d.config_hash);
    for (const template of ["/compute/v1/deployments/{deployment_id}/stop", "/compute/v1/deployments/{deployment_id}/redeploy"] as const) {
      expectError(await api.call("POST", template, { params: { deployment_id: UNKNOWN } }), 404, "compute", `${template} unknown`);
    }
  });

  it("DELETE /compute/v1/deployments/{deployment_id}: 204 empty, then 404", async () => {
    const agent = await deployable();
    const d = await deploy(agent.id, options({}));
    expectNoContent(await api.call("DELETE", "/compute/v1/deployments/{deployment_id}", { params: { deployment_id: d.id } }), "delete");
    expectError(await api.call("GET", "/compute/v1/deployments/{deployment_id}", { params: { deployment_id: d.id } }), 404, "compute", "get deleted");
    expectError(await api.call("DELETE", "/compute/v1/deployments/{deployment_id}", { params: { deployment_id: UNKNOWN } }), 404, "compute", "delete unknown");
  });

  // Last in this block, so that the lists above do not carry its record.
  it("deploying an agent without a manifest: the record still has every field (S: exactly the seed's table, manifest included)", async () => {
    const agent = await newAgent();
    const ans = await api.call("POST", "/compute/v1/agents/{agent_id}/deploy", { params: { agent_id: agent.id }, body: options({}) });
    expectBody(ans, 200, S.Deployment, "deploy an agent without a manifest");
  });
});

// ---------------------------------------------------------------------------------------------
describe("contract: agent VMs", () => {
  it("POST /compute/v1/vms/allocate: 201 Allocation; 400 naming the field", async () => {
    const skill = await newSkill();
    const alloc = await allocate({ skills: [skill.name], metadata: { purpose: "contract" }, ttl_seconds: 600, env: { K: "v" } });
    expect(alloc.tier).toBe("standard");
    expect(alloc.state, "S: `allocated` after allocation").toBe("allocated");
    expect(alloc.skills_loaded).toContain(skill.name);
    const expires = Date.parse(alloc.expires_at);
    expect(Math.abs(expires - (Date.now() + 600_000)), "expires_at = now + ttl_seconds").toBeLessThan(120_000);

    // secure_runtime is a string (S; models.AllocateRequest); its values are not published.
    const secure = await api.call("POST", "/compute/v1/vms/allocate", { body: { tier: "standard", secure_runtime: "gvisor" } });
    expectBody(secure, 201, S.AllocateResponse, "allocate with a secure_runtime string");

    const bad: [string, Record<string, unknown>, RegExp][] = [
      ["without tier", {}, /tier/],
      ["with a numeric tier", { tier: 3 }, /tier/],
      ["with a string ttl_seconds", { tier: "standard", ttl_seconds: "600" }, /ttl_seconds/],
      ["with a non-string metadata value", { tier: "standard", metadata: { k: 1 } }, /metadata/],
      ["with a boolean secure_runtime", { tier: "standard", secure_runtime: true }, /secure_runtime/],
      ["with a string for skills", { tier: "standard", skills: "a" }, /skills/],
    ];
    for (const [what, body, field] of bad) {
      expectError(await api.call("POST", "/compute/v1/vms/allocate", { body }), 400, "compute", `allocate ${what}`, field);
    }
  });

  // S ("Executing work in a VM"): the SDK connects to ws_url with the account's bearer token;
  // the server's first message is JSON whose `data` is a code context id; the client sends
  // {"type":"execute",...} or {"type":"command",...}; the server answers {type, data} messages
  // `started`, `stdout`/`output`, `stderr`, ending with `done` or `execution_complete` (success)
  // or `error`. The SDK joins the output lines. An emulator must serve a real ws_url on its own host.
  it("the allocation's ws_url is a WebSocket on the emulator's own host, speaking the execute protocol", async () => {
    const alloc = await allocate();
    const url = new URL(alloc.ws_url);
    expect(url.host, "ws_url is on the emulator's own host").toBe(new URL(emu.baseURL).host);

    const refused = await new Promise<number>((resolve) => {
      const ws = new WebSocket(alloc.ws_url);
      ws.once("unexpected-response", (_req, res) => {
        resolve(res.statusCode ?? 0);
        ws.terminate();
      });
      ws.once("open", () => {
        ws.close();
        resolve(101);
      });
      ws.once("error", () => {});
    });
    expect(refused, "no bearer token: refused").toBe(401);

    const ws = new WebSocket(alloc.ws_url, { headers: { Authorization: `Bearer ${api.token}` } });
    const inbox: { type: string; data: unknown }[] = [];
    let wake: (() => void) | undefined;
    ws.on("message", (d) => {
      inbox.push(JSON.parse(d.toString()) as { type: string; data: unknown });
      wake?.();
    });
    const next = async (): Promise<{ type: string; data: unknown }> => {
      while (inbox.length === 0) await new Promise<void>((r) => (wake = r));
      return inbox.shift()!;
    };
    const request = async (msg: Record<string, unknown>): Promise<{ output: string; status: "ok" | "error" }> => {
      ws.send(JSON.stringify(msg));
      const lines: string[] = [];
      for (;;) {
        const m = await next();
        expect(typeof m.type, `a {type, data} message: ${JSON.stringify(m)}`).toBe("string");
        if (m.type === "stdout" || m.type === "output") lines.push(String(m.data));
        if (m.type === "done" || m.type === "execution_complete") return { output: lines.join("\n"), status: "ok" };
        if (m.type === "error") return { output: lines.join("\n"), status: "error" };
      }
    };
    try {
      await new Promise<void>((resolve, reject) => {
        ws.once("open", () => resolve());
        ws.once("error", reject);
      });
      const first = await next();
      expect(typeof first.data, `the first message's data is a code context id: ${JSON.stringify(first)}`).toBe("string");
      const contextId = first.data as string;
      expect(contextId).not.toBe("");
      expect(await request({ type: "execute", code: "x = 41", language: "python", context_id: contextId })).toMatchObject({ status: "ok" });
      const printed = await request({ type: "execute", code: "print(x + 1)", language: "python", context_id: contextId });
      expect(printed, "state carries between executes, as in a Jupyter kernel").toEqual({ output: expect.stringContaining("42"), status: "ok" });
      expect(await request({ type: "command", command: "echo contract" })).toEqual({ output: expect.stringContaining("contract"), status: "ok" });
      expect((await request({ type: "command", command: "exit 3" })).status, "a failing command").toBe("error");
    } finally {
      ws.close();
    }
  });

  it("POST /compute/v1/vms/allocate: 503 when the pool is empty", async () => {
    const empty = await startEmulator({ apiKey: API_KEY, poolSize: 0 });
    try {
      const other = new RawService(empty.baseURL, empty.authURL);
      await other.login(API_KEY);
      expectError(await other.call("POST", "/compute/v1/vms/allocate", { body: { tier: "standard" } }), 503, "compute", "allocate from an empty pool");
    } finally {
      await empty.close();
    }
  });

  it("GET /compute/v1/vms/{id}: the AgentVM record, its id the allocation's vm_id; 404", async () => {
    const alloc = await allocate({ metadata: { purpose: "get" }, ttl_seconds: 900 });
    const vm = expectBody(await api.call("GET", "/compute/v1/vms/{id}", { params: { id: alloc.vm_id } }), 200, S.AgentVM, "get VM");
    expect(vm.id).toBe(alloc.vm_id);
    expect(vm.state).toBe("allocated");
    expect(vm.tier).toBe(alloc.tier);
    expect(vm.metadata).toEqual({ purpose: "get" });
    expect(vm.ttl_seconds).toBe(900);
    expect(Date.parse(vm.expires_at)).toBe(Date.parse(alloc.expires_at));
    expectError(await api.call("GET", "/compute/v1/vms/{id}", { params: { id: UNKNOWN } }), 404, "compute", "get unknown VM");
  });

  it("GET /compute/v1/vms: a bare array of AgentVM, with limit, offset, state and tier", async () => {
    const mine = [await allocate(), await allocate(), await allocate()];
    const all = expectBody(await api.call("GET", "/compute/v1/vms"), 200, S.AgentVMList, "list VMs");
    expect(all.map((v) => v.id)).toEqual(expect.arrayContaining(mine.map((a) => a.vm_id)));
    const page = expectBody(await api.call("GET", "/compute/v1/vms", { query: { limit: 2 } }), 200, S.AgentVMList, "list limit=2");
    expect(page).toHaveLength(2);
    const next = expectBody(await api.call("GET", "/compute/v1/vms", { query: { limit: 2, offset: 2 } }), 200, S.AgentVMList, "list offset=2");
    expect(next.length).toBeGreaterThanOrEqual(1);
    expect(next.map((v) => v.id)).not.toEqual(expect.arrayContaining(page.map((v) => v.id)));
    const beyond = expectBody(await api.call("GET", "/compute/v1/vms", { query: { offset: 100_000 } }), 200, S.AgentVMList, "list beyond the end");
    expect(beyond).toEqual([]);
    const allocated = expectBody(await api.call("GET", "/compute/v1/vms", { query: { state: "allocated", tier: "standard" } }), 200, S.AgentVMList, "list by state/tier");
    expect(allocated.map((v) => v.id)).toEqual(expect.arrayContaining(mine.map((a) => a.vm_id)));
    for (const v of allocated) expect(v).toMatchObject({ state: "allocated", tier: "standard" });
    // S: the list is "scoped to the caller's org": a VM allocated for another org is not in it.
    const foreign = await allocate({ org_id: unique("org-other") });
    const scoped = expectBody(await api.call("GET", "/compute/v1/vms", { query: { limit: 100 } }), 200, S.AgentVMList, "list after a foreign allocation");
    expect(scoped.map((v) => v.id)).not.toContain(foreign.vm_id);
  });

  it("POST /compute/v1/vms/{id}/renew: 200 AgentVM with the new ttl_seconds and expires_at; 400; 404", async () => {
    const alloc = await allocate({ ttl_seconds: 600 });
    const renewed = expectBody(
      await api.call("POST", "/compute/v1/vms/{id}/renew", { params: { id: alloc.vm_id }, body: { ttl_seconds: 7200 } }),
      200,
      S.AgentVM,
      "renew",
    );
    expect(renewed.id).toBe(alloc.vm_id);
    expect(renewed.ttl_seconds).toBe(7200);
    // The new expiry is later; whether it counts from now or from the old expiry is not published.
    const renewedAt = Date.parse(renewed.expires_at);
    expect(renewedAt).toBeGreaterThan(Date.parse(alloc.expires_at));
    expect(renewedAt).toBeGreaterThan(Date.now() + 7_200_000 - 120_000);
    expect(renewedAt).toBeLessThan(Date.parse(alloc.expires_at) + 7_200_000 + 120_000);
    const got = expectBody(await api.call("GET", "/compute/v1/vms/{id}", { params: { id: alloc.vm_id } }), 200, S.AgentVM, "get after renew");
    expect(Date.parse(got.expires_at)).toBe(Date.parse(renewed.expires_at));
    // ttl_seconds is required (S; models.RenewRequest).
    expectError(
      await api.call("POST", "/compute/v1/vms/{id}/renew", { params: { id: alloc.vm_id }, body: {} }),
      400,
      "compute",
      "renew without ttl_seconds",
      /ttl_seconds/,
    );
    expectError(
      await api.call("POST", "/compute/v1/vms/{id}/renew", { params: { id: UNKNOWN }, body: { ttl_seconds: 60 } }),
      404,
      "compute",
      "renew unknown",
    );
  });

  it("POST /compute/v1/vms/{id}/release: 200 AgentVM with released_at; 404", async () => {
    const alloc = await allocate();
    const released = expectBody(
      await api.call("POST", "/compute/v1/vms/{id}/release", { params: { id: alloc.vm_id }, body: { recycle: false } }),
      200,
      S.AgentVM,
      "release",
    );
    expect(released.id).toBe(alloc.vm_id);
    expect(released.released_at, "release answers released_at").toEqual(expect.any(String));
    expect(Math.abs(Date.parse(released.released_at ?? "") - Date.now())).toBeLessThan(120_000);
    expectError(
      await api.call("POST", "/compute/v1/vms/{id}/release", { params: { id: UNKNOWN }, body: { recycle: false } }),
      404,
      "compute",
      "release unknown",
    );
  });

  it("DELETE /compute/v1/vms/{id}: 204 empty, then 404", async () => {
    const alloc = await allocate();
    expectNoContent(await api.call("DELETE", "/compute/v1/vms/{id}", { params: { id: alloc.vm_id } }), "delete VM");
    expectError(await api.call("GET", "/compute/v1/vms/{id}", { params: { id: alloc.vm_id } }), 404, "compute", "get deleted VM");
    expectError(await api.call("DELETE", "/compute/v1/vms/{id}", { params: { id: UNKNOWN } }), 404, "compute", "delete unknown VM");
  });

  it("GET /compute/v1/vms/{id}/endpoint: a map of strings; 404", async () => {
    const alloc = await allocate();
    const ep = expectBody(await api.call("GET", "/compute/v1/vms/{id}/endpoint", { params: { id: alloc.vm_id } }), 200, S.EndpointMap, "endpoint");
    expect(Object.keys(ep).length).toBeGreaterThan(0);
    expectError(await api.call("GET", "/compute/v1/vms/{id}/endpoint", { params: { id: UNKNOWN } }), 404, "compute", "endpoint unknown");
  });

  it("POST /compute/v1/vms/{id}/execute: a server-sent event stream of the run for a live VM; 404 for an unknown one", async () => {
    const alloc = await allocate();
    const ans = await api.call("POST", "/compute/v1/vms/{id}/execute", { params: { id: alloc.vm_id }, body: { code: "print(6 * 7)", language: "python" } });
    // C: 200, body not described. S: "Older SDK versions used POST /compute/v1/vms/{id}/execute
    // answering server-sent events", and the code really runs.
    const events = expectEventStream(ans, "execute");
    expect(events.map((e) => e.data).join("\n"), "the code ran: its output is in the stream").toContain("42");
    expectError(
      await api.call("POST", "/compute/v1/vms/{id}/execute", { params: { id: UNKNOWN }, body: { code: "print(1)" } }),
      404,
      "compute",
      "execute unknown",
    );
  });

  it("GET/POST/DELETE /compute/v1/vms/{id}/r/{path}: 404 for an unknown VM; the runtime's (agentd's) answer for a live one", async () => {
    const alloc = await allocate();
    const template = "/compute/v1/vms/{id}/r/{path}";
    for (const [method, path, body] of [
      ["GET", "v1/metrics", undefined],
      ["POST", "v1/code/contexts", { language: "python", session_id: "contract" }],
      ["DELETE", "v1/commands/no-such-command", undefined],
    ] as const) {
      expectError(await api.call(method, template, { params: { id: UNKNOWN, path }, body }), 404, "compute", `${method} r/ unknown VM`);
    }
    const r = (method: "GET" | "POST" | "DELETE", path: string, body?: unknown): Promise<Answer> => api.call(method, template, { params: { id: alloc.vm_id, path }, body });

    // D: GET v1/metrics -> 200 models.MetricsSnapshot.
    expectBody(await r("GET", "v1/metrics"), 200, S.MetricsSnapshot, "r/v1/metrics");
    // D: POST v1/code/contexts {language, session_id} -> 201 models.CodeContext; then
    // POST v1/code/execute {code, context_id} -> an event stream of the run (S: "(SSE stream)").
    const ctx = expectBody(await r("POST", "v1/code/contexts", { language: "python", session_id: "contract" }), 201, S.CodeContext, "r/v1/code/contexts");
    expect(ctx.id, "a context has an id").toEqual(expect.any(String));
    const ran = expectEventStream(await r("POST", "v1/code/execute", { code: "print('ran ' + str(40 + 2))", context_id: ctx.id }), "r/v1/code/execute");
    expect(ran.map((e) => e.data).join("\n")).toContain("ran 42");
    // D: DELETE v1/commands/{id} of an unknown command -> 404 models.ErrorResponse {code, message}.
    const gone = await r("DELETE", "v1/commands/no-such-command");
    expect(gone.status, show(gone)).toBe(404);
    expect(S.violations(S.AgentdError, gone.json), `agentd error body: ${show(gone)}`).toEqual([]);
    expect((gone.json as { code: number }).code).toBe(404);

    // S: POST v1/commands/run answers an event stream of the command's output, and "a command id
    // plus its status is what makes a run resumable"; GET v1/commands/{id}/status answers
    // {id, running, exit_code, started_at, finished_at}.
    const run = expectEventStream(await r("POST", "v1/commands/run", { command: "echo contract-run; exit 4" }), "r/v1/commands/run");
    expect(run.map((e) => e.data).join("\n")).toContain("contract-run");
    // PROJECT DECISION, NOT CONTRACT: the stream tells the command's id as JSON {"id"} in an
    // event's data (the emulator's `start` event). D models.SSEEvent publishes only `event` and
    // `data` strings, no event names and no id; the framing is the project's own
    // (docs/emulator.md, decision 28), checked here because the status call below needs the id.
    const ids = run.flatMap((e) => {
      try {
        const d = JSON.parse(e.data) as { id?: unknown };
        return typeof d.id === "string" ? [d.id] : [];
      } catch {
        return [];
      }
    });
    expect(ids.length, "the stream names the command's id (project decision 28, not contract)").toBeGreaterThan(0);
    const status = expectBody(await r("GET", `v1/commands/${ids[0]}/status`), 200, S.EndedCommandStatus, "r/v1/commands/{id}/status");
    expect(status).toMatchObject({ id: ids[0], running: false, exit_code: 4 });
  });

  it("r/ agentd: the file, directory, kill and delete calls a SandboxRun makes, with the published statuses", async () => {
    const alloc = await allocate();
    const template = "/compute/v1/vms/{id}/r/{path}";
    const r = (method: "GET" | "POST" | "DELETE", path: string, opts: Omit<CallOptions, "params"> = {}): Promise<Answer> =>
      api.call(method, template, { params: { id: alloc.vm_id, path }, ...opts });
    // D: POST v1/files/upload (multipart: path, file) -> 201, a map of strings.
    const form = new FormData();
    form.set("path", "/workspace/contract/in.txt");
    form.set("file", new Blob(["hello, contract"]), "in.txt");
    expectBody(await r("POST", "v1/files/upload", { form }), 201, S.StringMap, "r/v1/files/upload");
    // D: GET v1/files/download?path= -> 200 application/octet-stream, the bytes; 404 models.ErrorResponse.
    const got = await r("GET", "v1/files/download", { query: { path: "/workspace/contract/in.txt" } });
    expect(got.status, show(got)).toBe(200);
    expect(got.headers.get("content-type") ?? "").toMatch(/^application\/octet-stream/);
    expect(got.text).toBe("hello, contract");
    // D: GET v1/files/info?path= -> 200 models.FileInfo (logs reads a step's output size with it); 404 models.ErrorResponse.
    const info = expectBody(await r("GET", "v1/files/info", { query: { path: "/workspace/contract/in.txt" } }), 200, S.FileInfo, "r/v1/files/info");
    expect(info).toMatchObject({ size: "hello, contract".length });
    expect(info.is_dir ?? false).toBe(false);
    const noInfo = await r("GET", "v1/files/info", { query: { path: "/workspace/contract/none.txt" } });
    expect(noInfo.status, show(noInfo)).toBe(404);
    expect(S.violations(S.AgentdError, noInfo.json), `agentd error body: ${show(noInfo)}`).toEqual([]);
    // D: DELETE v1/directories ["<path>"] -> 204; what was in it is gone.
    expectNoContent(await r("DELETE", "v1/directories", { body: ["/workspace/contract"] }), "r/v1/directories (DELETE)");
    const missing = await r("GET", "v1/files/download", { query: { path: "/workspace/contract/in.txt" } });
    expect(missing.status, show(missing)).toBe(404);
    expect(S.violations(S.AgentdError, missing.json), `agentd error body: ${show(missing)}`).toEqual([]);
    // D: DELETE v1/commands/{id} of a running command -> 204. The id is read from the stream's
    // first event as JSON {"id"}: PROJECT DECISION, NOT CONTRACT (D models.SSEEvent is only
    // `event` and `data` strings; the framing is docs/emulator.md decision 28).
    const started = expectEventStream(await r("POST", "v1/commands/run", { body: { command: "sleep 30", background: true } }), "r/v1/commands/run");
    const id = (JSON.parse(started[0]?.data ?? "{}") as { id?: string }).id ?? "";
    expect(id, "the background stream's first event names the command's id (project decision 28, not contract)").not.toBe("");
    expectNoContent(await r("DELETE", `v1/commands/${id}`), "r/v1/commands/{id} (DELETE) of a running command");
    // D: DELETE v1/code/execute/{id} (interrupt; nothing running) -> 204; DELETE v1/code/contexts/{id} -> 204, then 404.
    const ctx = expectBody(await r("POST", "v1/code/contexts", { body: { language: "python", session_id: "contract-files" } }), 201, S.CodeContext, "r/v1/code/contexts");
    expectNoContent(await r("DELETE", `v1/code/execute/${ctx.id ?? ""}`), "r/v1/code/execute/{id} (DELETE)");
    expectNoContent(await r("DELETE", `v1/code/contexts/${ctx.id ?? ""}`), "r/v1/code/contexts/{id} (DELETE)");
    expectError(await r("DELETE", `v1/code/contexts/${ctx.id ?? ""}`), 404, "agentd", "r/v1/code/contexts/{id} (DELETE) again");
  });
});

// ---------------------------------------------------------------------------------------------
// agentd (D: agentd-api.json), every published operation, through the forwarding route with the
// session's token. The r/ tests of "agent VMs" above hold the calls a SandboxRun makes; these
// hold the rest, and the published 400s and 404s that a client can reach.
type AgentdCall = (method: "GET" | "POST" | "DELETE", path: string, opts?: Omit<CallOptions, "params">) => Promise<Answer>;
const agentdOf =
  (vmId: string): AgentdCall =>
  (method, path, opts = {}) =>
    api.call(method, FORWARD, { params: { id: vmId, path }, ...opts });

/** A file's bytes through r/v1/files/upload (D: multipart path + file -> 201, a map of strings). */
async function upload(r: AgentdCall, path: string, content: string): Promise<void> {
  const form = new FormData();
  form.set("path", path);
  form.set("file", new Blob([content]), path.split("/").pop() ?? "file");
  expectBody(await r("POST", "v1/files/upload", { form }), 201, S.StringMap, `r/v1/files/upload ${path}`);
}

/** The command's id from a v1/commands/run stream: PROJECT DECISION, NOT CONTRACT (decision 28). */
function commandIdOf(events: { event: string; data: string }[]): string {
  for (const e of events) {
    try {
      const d = JSON.parse(e.data) as { id?: unknown };
      if (typeof d.id === "string" && d.id !== "") return d.id;
    } catch {
      // not JSON: output
    }
  }
  return "";
}

describe("contract: agentd, every published operation through /compute/v1/vms/{id}/r/{path}", () => {
  it("v1/agents, v1/agents/{id}: 200 an array of objects, the published 404s; v1/agents/execute 501 (PROJECT DECISION 31)", async () => {
    const r = agentdOf((await allocate()).vm_id);
    // D: GET v1/agents -> 200, an array of objects (`additionalProperties: true`).
    const list = expectBody(await r("GET", "v1/agents"), 200, S.AgentProcessList, "r/v1/agents");
    // PROJECT DECISION, NOT CONTRACT: agent processes are not emulated (docs/emulator.md decision
    // 31), so the list is empty, and GET/DELETE v1/agents/{id} can only answer their 404s.
    expect(list, "no agent process runs (project decision 31, not contract)").toEqual([]);
    // D: GET v1/agents/{id} -> 200 an object; 404 models.ErrorResponse.
    expectError(await r("GET", `v1/agents/${UNKNOWN}`), 404, "agentd", "r/v1/agents/{id} unknown");
    // D: DELETE v1/agents/{id} -> 204; 404 models.ErrorResponse.
    expectError(await r("DELETE", `v1/agents/${UNKNOWN}`), 404, "agentd", "r/v1/agents/{id} (DELETE) unknown");
    // D: POST v1/agents/execute (models.ExecuteRequest: an object, no properties published) ->
    // 200 an event stream; 400. PROJECT DECISION, NOT CONTRACT: 501 in agentd's dialect, since
    // what to run is not published (docs/emulator.md decision 31); no published status is 501.
    expectError(await r("POST", "v1/agents/execute", { body: {} }), 501, "agentd", "r/v1/agents/execute (project decision 31, not contract)");
    // D: its requestBody is required, an object: 400 without one, or for another JSON value.
    expectError(await r("POST", "v1/agents/execute"), 400, "agentd", "r/v1/agents/execute without a body");
    expectError(await r("POST", "v1/agents/execute", { body: [] }), 400, "agentd", "r/v1/agents/execute with an array");
  });

  it("v1/code/contexts and v1/code/execute: list, get, the 204s of interrupt and delete, the published 400s and 404s", async () => {
    const r = agentdOf((await allocate()).vm_id);
    const session = unique("ctx-session");
    // D: POST v1/code/contexts (models.CreateContextRequest requires language and session_id) -> 201 CodeContext; 400.
    const ctx = expectBody(await r("POST", "v1/code/contexts", { body: { language: "python", session_id: session } }), 201, S.CodeContext, "r/v1/code/contexts");
    expect(ctx.id, "a context has an id").toEqual(expect.any(String));
    const id = ctx.id ?? "";
    expectError(await r("POST", "v1/code/contexts", { body: { language: "python" } }), 400, "agentd", "create a context without session_id");
    expectError(await r("POST", "v1/code/contexts", { body: { session_id: session } }), 400, "agentd", "create a context without language");

    // D: GET v1/code/contexts -> 200 CodeContext[].
    const list = expectBody(await r("GET", "v1/code/contexts"), 200, S.CodeContextList, "r/v1/code/contexts (GET)");
    expect(list.map((c) => c.id)).toContain(id);
    // D: GET v1/code/contexts/{id} -> 200 CodeContext; 404.
    const got = expectBody(await r("GET", `v1/code/contexts/${id}`), 200, S.CodeContext, "r/v1/code/contexts/{id}");
    expect(got).toMatchObject({ id, session_id: session });
    expectError(await r("GET", `v1/code/contexts/${UNKNOWN}`), 404, "agentd", "r/v1/code/contexts/{id} unknown");

    // D: POST v1/code/execute (models.ExecuteCodeRequest requires code and context_id) -> 400;
    // 404 for an unknown context. Those two are published as text/event-stream: PROJECT
    // DECISION, NOT CONTRACT, agentd's errors are JSON {code, message} everywhere
    // (docs/emulator.md decision 37), which expectError reads.
    expectError(await r("POST", "v1/code/execute", { body: { context_id: id } }), 400, "agentd", "execute without code");
    expectError(await r("POST", "v1/code/execute", { body: { code: "print(1)" } }), 400, "agentd", "execute without context_id");
    expectError(await r("POST", "v1/code/execute", { body: { code: "print(1)", context_id: UNKNOWN } }), 404, "agentd", "execute in an unknown context");

    // D: DELETE v1/code/execute/{id} (interrupt; here nothing runs) -> 204; 404. The context lives on.
    expectNoContent(await r("DELETE", `v1/code/execute/${id}`), "r/v1/code/execute/{id} (DELETE)");
    expectError(await r("DELETE", `v1/code/execute/${UNKNOWN}`), 404, "agentd", "interrupt in an unknown context");
    expectBody(await r("GET", `v1/code/contexts/${id}`), 200, S.CodeContext, "the context after an interrupt");

    // D: DELETE v1/code/contexts/{id} -> 204; 404. Then it is gone from get and list.
    expectNoContent(await r("DELETE", `v1/code/contexts/${id}`), "r/v1/code/contexts/{id} (DELETE)");
    expectError(await r("GET", `v1/code/contexts/${id}`), 404, "agentd", "get a deleted context");
    expectError(await r("DELETE", `v1/code/contexts/${id}`), 404, "agentd", "delete a deleted context");
    const after = expectBody(await r("GET", "v1/code/contexts"), 200, S.CodeContextList, "r/v1/code/contexts after delete");
    expect(after.map((c) => c.id)).not.toContain(id);
  });

  it("v1/commands: run 400; the status of a running command; kill 204, then ended; the published 404s", async () => {
    const r = agentdOf((await allocate()).vm_id);
    // D: POST v1/commands/run (models.RunCommandRequest requires command; timeout_ms an integer)
    // -> 400, published as text/event-stream: JSON by PROJECT DECISION (decision 37), as above.
    expectError(await r("POST", "v1/commands/run", { body: {} }), 400, "agentd", "run without command");
    expectError(await r("POST", "v1/commands/run", { body: { command: "true", timeout_ms: "5" } }), 400, "agentd", "run with a string timeout_ms");

    const started = expectEventStream(await r("POST", "v1/commands/run", { body: { command: "sleep 30", background: true } }), "r/v1/commands/run (background)");
    const id = commandIdOf(started);
    expect(id, "the stream names the command's id (project decision 28, not contract)").not.toBe("");
    // D: GET v1/commands/{id}/status -> 200 models.CommandStatus; of a command that runs: running true.
    const running = expectBody(await r("GET", `v1/commands/${id}/status`), 200, S.RunningCommandStatus, "r/v1/commands/{id}/status of a running command");
    expect(running.id ?? id).toBe(id);
    // PROJECT DECISION, NOT CONTRACT: while running, no exit_code and no finished_at (docs/emulator.md decision 29).
    expect(running, "no exit_code while running (project decision 29, not contract)").not.toHaveProperty("exit_code");
    expect(running, "no finished_at while running (project decision 29, not contract)").not.toHaveProperty("finished_at");

    // D: DELETE v1/commands/{id} ("Terminates a running command") -> 204; its status then says it ended.
    expectNoContent(await r("DELETE", `v1/commands/${id}`), "r/v1/commands/{id} (DELETE) of a running command");
    let status = await r("GET", `v1/commands/${id}/status`);
    for (let i = 0; i < 100 && (status.json as { running?: unknown } | undefined)?.running === true; i++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      status = await r("GET", `v1/commands/${id}/status`);
    }
    const ended = expectBody(status, 200, S.EndedCommandStatus, "r/v1/commands/{id}/status after the kill");
    expect(ended.id ?? id).toBe(id);

    expectError(await r("GET", `v1/commands/${UNKNOWN}/status`), 404, "agentd", "status of an unknown command");
    expectError(await r("DELETE", `v1/commands/${UNKNOWN}`), 404, "agentd", "kill an unknown command");
  });

  it("v1/files and v1/directories: mkdir 201, search, mv 204, delete 204, and the published 400s", async () => {
    const r = agentdOf((await allocate()).vm_id);
    const base = `/workspace/${unique("files")}`;
    // D: POST v1/directories (an array of paths) -> 201 (no body published); 400. Parents are
    // named first: whether one path's missing parents are made is not published.
    const made = await r("POST", "v1/directories", { body: [base, `${base}/a`, `${base}/a/b`, `${base}/c`] });
    expect(made.status, `r/v1/directories: ${show(made)}`).toBe(201);
    for (const dir of [`${base}/a`, `${base}/a/b`, `${base}/c`]) {
      const info = expectBody(await r("GET", "v1/files/info", { query: { path: dir } }), 200, S.FileInfo, `r/v1/files/info ${dir}`);
      expect(info.is_dir, `${dir} is a directory`).toBe(true);
    }
    expectError(await r("POST", "v1/directories", { body: { paths: [`${base}/d`] } }), 400, "agentd", "mkdir with an object for the array");

    // D: POST v1/files/upload requires path and file (multipart): 400 without either.
    await upload(r, `${base}/a/one.txt`, "one");
    await upload(r, `${base}/a/other.md`, "other");
    const noFile = new FormData();
    noFile.set("path", `${base}/a/none.txt`);
    expectError(await r("POST", "v1/files/upload", { form: noFile }), 400, "agentd", "upload without file");
    const noPath = new FormData();
    noPath.set("file", new Blob(["x"]), "x.txt");
    expectError(await r("POST", "v1/files/upload", { form: noPath }), 400, "agentd", "upload without path");
    // D: GET v1/files/download and v1/files/info require path: 400 without it (download's 400
    // is published as application/octet-stream: JSON by PROJECT DECISION, decision 37).
    expectError(await r("GET", "v1/files/download"), 400, "agentd", "download without path");
    expectError(await r("GET", "v1/files/info"), 400, "agentd", "info without path");

    // D: GET v1/files/search?dir=&pattern= (a glob, required) -> 200 FileInfo[]; 400.
    const found = expectBody(await r("GET", "v1/files/search", { query: { dir: `${base}/a`, pattern: "*.txt" } }), 200, S.FileInfoList, "r/v1/files/search");
    expect(found.map((f) => f.path ?? ""), "the matching file is found").toEqual([expect.stringMatching(/one\.txt$/)]);
    expectError(await r("GET", "v1/files/search", { query: { dir: `${base}/a` } }), 400, "agentd", "search without pattern");

    // D: POST v1/files/mv ("Array of {src, dst}", maps of strings) -> 204; 400.
    expectNoContent(await r("POST", "v1/files/mv", { body: [{ src: `${base}/a/one.txt`, dst: `${base}/a/b/two.txt` }] }), "r/v1/files/mv");
    const moved = await r("GET", "v1/files/download", { query: { path: `${base}/a/b/two.txt` } });
    expect(moved.status, show(moved)).toBe(200);
    expect(moved.text, "the file is at its destination").toBe("one");
    expectError(await r("GET", "v1/files/info", { query: { path: `${base}/a/one.txt` } }), 404, "agentd", "the moved file's source");
    expectError(await r("POST", "v1/files/mv", { body: { src: `${base}/a/other.md`, dst: `${base}/c/other.md` } }), 400, "agentd", "mv with an object for the array");

    // D: DELETE v1/files (an array of paths) -> 204; 400.
    expectNoContent(await r("DELETE", "v1/files", { body: [`${base}/a/b/two.txt`, `${base}/a/other.md`] }), "r/v1/files (DELETE)");
    for (const path of [`${base}/a/b/two.txt`, `${base}/a/other.md`]) {
      expectError(await r("GET", "v1/files/info", { query: { path } }), 404, "agentd", `info of the deleted ${path}`);
    }
    expectError(await r("DELETE", "v1/files", { body: { paths: [`${base}/c`] } }), 400, "agentd", "delete files with an object for the array");

    // D: DELETE v1/directories (an array of paths; recursive) -> 204; 400.
    expectNoContent(await r("DELETE", "v1/directories", { body: [base] }), "r/v1/directories (DELETE)");
    expectError(await r("GET", "v1/files/info", { query: { path: `${base}/a/b` } }), 404, "agentd", "info under the deleted directory");
    expectError(await r("DELETE", "v1/directories", { body: { paths: [base] } }), 400, "agentd", "delete directories with an object for the array");
  });

  it("v1/sessions: init 201 (a map of strings) makes the session's directory; 400; delete 204 removes it", async () => {
    const r = agentdOf((await allocate()).vm_id);
    const sid = unique("session");
    // D: POST v1/sessions/init ("Session init request with session_id", a map of strings) -> 201 a map of strings; 400.
    const init = expectBody(await r("POST", "v1/sessions/init", { body: { session_id: sid } }), 201, S.StringMap, "r/v1/sessions/init");
    // PROJECT DECISION, NOT CONTRACT: the answer's keys are not published (a map of strings);
    // the emulator's are {session_id, path} with path /workspace/sessions/<id> (docs/emulator.md,
    // the agentd table and decision 33).
    expect(init, "the answer's keys (project decision, not contract)").toEqual({ session_id: sid, path: `/workspace/sessions/${sid}` });
    const dir = init["path"] ?? "";
    // D: "Creates the workspace directory for a session".
    const info = expectBody(await r("GET", "v1/files/info", { query: { path: dir } }), 200, S.FileInfo, "the session's directory");
    expect(info.is_dir).toBe(true);
    expectError(await r("POST", "v1/sessions/init", { body: { session_id: 5 } }), 400, "agentd", "init with a numeric session_id");
    expectError(await r("POST", "v1/sessions/init", { body: {} }), 400, "agentd", "init without session_id");
    // D: DELETE v1/sessions/{id} -> 204 ("Removes the workspace directory for a session"); 500 only when that fails.
    expectNoContent(await r("DELETE", `v1/sessions/${sid}`), "r/v1/sessions/{id} (DELETE)");
    expectError(await r("GET", "v1/files/info", { query: { path: dir } }), 404, "agentd", "the session's directory after delete");
  });

  it("v1/skills: the VM's skills (allocated with a compute skill), get, load, the published 400 and 404", async () => {
    const skill = await newSkill();
    const later = await newSkill();
    const r = agentdOf((await allocate({ skills: [skill.name] })).vm_id);
    // D: GET v1/skills -> 200 SkillInfo[]: the skill named at allocation is loaded.
    const list = expectBody(await r("GET", "v1/skills"), 200, S.SkillInfoList, "r/v1/skills");
    const entry = list.find((s) => s.name === skill.name);
    expect(entry, `the allocated skill is listed: ${JSON.stringify(list)}`).toBeDefined();
    expect(entry?.loaded ?? true, "not listed as unloaded").toBe(true);
    // PROJECT DECISION, NOT CONTRACT: SkillInfo.path is the skill's directory (docs/emulator.md, agentd table).
    expect(entry?.path, "path (project decision, not contract)").toBe(`/workspace/skills/${skill.name}`);
    // S: a skill's resources are written under /workspace/skills/<name>/ on the VM.
    expectBody(
      await r("GET", "v1/files/info", { query: { path: `/workspace/skills/${skill.name}/requirements.txt` } }),
      200,
      S.FileInfo,
      "the skill's resource in the VM",
    );

    // D: GET v1/skills/{name} -> 200 SkillInfo; 404 (not loaded).
    const got = expectBody(await r("GET", `v1/skills/${skill.name}`), 200, S.SkillInfo, "r/v1/skills/{name}");
    expect(got.name).toBe(skill.name);
    expectError(await r("GET", `v1/skills/${unique("missing")}`), 404, "agentd", "r/v1/skills/{name} unknown");
    expectError(await r("GET", `v1/skills/${later.name}`), 404, "agentd", "r/v1/skills/{name} of a skill not loaded in this VM");

    // D: POST v1/skills/load (models.LoadSkillsRequest requires skills) -> 200 SkillInfo[]; 400.
    const loaded = expectBody(await r("POST", "v1/skills/load", { body: { skills: [later.name] } }), 200, S.SkillInfoList, "r/v1/skills/load");
    expect(loaded.map((s) => s.name)).toContain(later.name);
    expect(expectBody(await r("GET", `v1/skills/${later.name}`), 200, S.SkillInfo, "r/v1/skills/{name} after load").name).toBe(later.name);
    const both = expectBody(await r("GET", "v1/skills"), 200, S.SkillInfoList, "r/v1/skills after load");
    expect(both.map((s) => s.name)).toEqual(expect.arrayContaining([skill.name, later.name]));
    expectError(await r("POST", "v1/skills/load", { body: {} }), 400, "agentd", "load without skills");
    expectError(await r("POST", "v1/skills/load", { body: { skills: later.name } }), 400, "agentd", "load with a string for skills");
  });

  it("v1/metrics/watch: an event stream of metrics snapshots (its first event read, then the client goes)", async () => {
    const r = agentdOf((await allocate()).vm_id);
    const events = expectEventStream(await r("GET", "v1/metrics/watch", { events: 1 }), "r/v1/metrics/watch");
    // D: "Streams metrics snapshots every 2 seconds via SSE": an event's data is a snapshot,
    // read as models.MetricsSnapshot in JSON. Its event name is not published (decision 28).
    const data = events[0]?.data ?? "";
    const snapshot = ((): unknown => {
      try {
        return JSON.parse(data);
      } catch {
        return undefined;
      }
    })();
    expect(snapshot, `the event's data is JSON: ${JSON.stringify(data)}`).not.toBeUndefined();
    expect(S.violations(S.MetricsSnapshot, snapshot), `a snapshot: ${data}`).toEqual([]);
  });

  it("v1/workspace/reset: 204; the sessions' data is gone", async () => {
    const r = agentdOf((await allocate()).vm_id);
    const sid = unique("reset");
    const init = expectBody(await r("POST", "v1/sessions/init", { body: { session_id: sid } }), 201, S.StringMap, "r/v1/sessions/init");
    // The session's directory: the init answer's `path` (PROJECT DECISION, NOT CONTRACT, as above).
    const dir = init["path"] ?? `/workspace/sessions/${sid}`;
    await upload(r, `${dir}/data.txt`, "session data");
    // D: POST v1/workspace/reset ("Wipes all session data for pool recycling") -> 204; 500 only when that fails.
    expectNoContent(await r("POST", "v1/workspace/reset"), "r/v1/workspace/reset");
    expectError(await r("GET", "v1/files/info", { query: { path: `${dir}/data.txt` } }), 404, "agentd", "a session's file after reset");
    expectError(await r("GET", "v1/files/info", { query: { path: dir } }), 404, "agentd", "a session's directory after reset");
  });
});

// ---------------------------------------------------------------------------------------------
describe("contract: skills", () => {
  it("POST /compute/v1/skills: 201 Skill with content_hash; 400 naming the field", async () => {
    const skill = await newSkill();
    expect(skill.resources).toEqual({ "requirements.txt": "" });
    expectError(await api.call("POST", "/compute/v1/skills", { body: { name: unique("skill") } }), 400, "compute", "skill without content", /content/);
    expectError(await api.call("POST", "/compute/v1/skills", { body: { content: "c" } }), 400, "compute", "skill without name", /name/);
    expectError(
      await api.call("POST", "/compute/v1/skills", { body: { name: unique("skill"), content: 5 } }),
      400,
      "compute",
      "skill with numeric content",
      /content/,
    );
  });

  it("GET /compute/v1/skills: a bare array of Skill", async () => {
    const skill = await newSkill();
    const list = expectBody(await api.call("GET", "/compute/v1/skills"), 200, S.SkillList, "list skills");
    expect(list.map((s) => s.name)).toContain(skill.name);
  });

  it("GET /compute/v1/skills/{name}: 200 Skill; 404", async () => {
    const skill = await newSkill();
    const got = expectBody(await api.call("GET", "/compute/v1/skills/{name}", { params: { name: skill.name } }), 200, S.Skill, "get skill");
    expect(got).toMatchObject({ name: skill.name, content: skill.content, content_hash: skill.content_hash });
    expectError(await api.call("GET", "/compute/v1/skills/{name}", { params: { name: unique("missing") } }), 404, "compute", "get unknown skill");
  });

  it("PUT /compute/v1/skills/{name}: 200 Skill with a new content_hash; 400 naming the field", async () => {
    const skill = await newSkill();
    const updated = expectBody(
      await api.call("PUT", "/compute/v1/skills/{name}", { params: { name: skill.name }, body: { name: skill.name, content: "changed" } }),
      200,
      S.Skill,
      "update skill",
    );
    expect(updated.content).toBe("changed");
    expect(updated.content_hash).not.toBe(skill.content_hash);
    expectError(
      await api.call("PUT", "/compute/v1/skills/{name}", { params: { name: skill.name }, body: { name: skill.name, content: ["x"] } }),
      400,
      "compute",
      "update with a non-string content",
      /content/,
    );
  });

  it("DELETE /compute/v1/skills/{name}: 204 empty, then 404 on get", async () => {
    const skill = await newSkill();
    expectNoContent(await api.call("DELETE", "/compute/v1/skills/{name}", { params: { name: skill.name } }), "delete skill");
    expectError(await api.call("GET", "/compute/v1/skills/{name}", { params: { name: skill.name } }), 404, "compute", "get deleted skill");
  });
});

// ---------------------------------------------------------------------------------------------
describe("contract: usage", () => {
  it("GET /compute/v1/usage: a bare array of UsageRecord; 400 without its required headers", async () => {
    const alloc = await allocate();
    expectBody(
      await api.call("POST", "/compute/v1/vms/{id}/release", { params: { id: alloc.vm_id }, body: { recycle: false } }),
      200,
      S.AgentVM,
      "release",
    );
    const list = expectBody(await api.call("GET", "/compute/v1/usage", { headers: USAGE_HEADERS }), 200, S.UsageList, "usage");
    expect(Array.isArray(list)).toBe(true);
    const today = new Date().toISOString().slice(0, 10);
    const page = expectBody(
      await api.call("GET", "/compute/v1/usage", { headers: USAGE_HEADERS, query: { from: today, to: today, tier: "standard", limit: 1, offset: 0 } }),
      200,
      S.UsageList,
      "usage with from/to/tier/limit/offset",
    );
    expect(page.length).toBeLessThanOrEqual(1);

    expectError(await api.call("GET", "/compute/v1/usage"), 400, "compute", "usage without headers", /X-Workspace-Id|X-Environment-Id/i);
    expectError(
      await api.call("GET", "/compute/v1/usage", { headers: { "X-Workspace-Id": "ws" } }),
      400,
      "compute",
      "usage without X-Environment-Id",
      /X-Environment-Id/i,
    );
    expectError(
      await api.call("GET", "/compute/v1/usage", { headers: { "X-Environment-Id": "env" } }),
      400,
      "compute",
      "usage without X-Workspace-Id",
      /X-Workspace-Id/i,
    );
  });

  it("GET /compute/v1/usage/summary: UsageSummary", async () => {
    const summary = expectBody(await api.call("GET", "/compute/v1/usage/summary"), 200, S.UsageSummary, "usage summary");
    // S: "for the current calendar month".
    expect(summary.period_start.slice(0, 7)).toBe(new Date().toISOString().slice(0, 7));
  });
});

// ---------------------------------------------------------------------------------------------
describe("contract: access clients", () => {
  it("list, create (its credentials obtain a token), revoke (204; the credentials are refused)", async () => {
    expectBody(await api.call("GET", "/compute/v1/access/clients"), 200, S.OAuthClientList, "list clients");
    const name = unique("client");
    const created = expectBody(await api.call("POST", "/compute/v1/access/clients", { body: { name } }), 201, S.OAuthClientResponse, "create client");
    expect(created.name).toBe(name);

    const token = await api.tokenByClient(created.client_id, created.client_secret);
    const t = expectBody(token, 200, S.TokenResponse, "token by client_credentials");
    const withIt = await api.call("GET", "/compute/v1/pool/status", { token: t.access_token });
    expectBody(withIt, 200, S.PoolStatus, "a call with the client's token");

    const listed = expectBody(await api.call("GET", "/compute/v1/access/clients"), 200, S.OAuthClientList, "list clients");
    const entry = listed.find((c) => c.client_id === created.client_id);
    expect(entry, "the new client is listed").toBeDefined();
    expect(entry).toMatchObject({ name, is_active: true });
    expect(JSON.stringify(listed), "the list does not carry the secret").not.toContain(created.client_secret);

    expectNoContent(
      await api.call("DELETE", "/compute/v1/access/clients/{client_id}", { params: { client_id: created.client_id } }),
      "revoke client",
    );
    const refused = await api.tokenByClient(created.client_id, created.client_secret);
    expect(refused.status, `token after revoke: ${show(refused)}`).toBeGreaterThanOrEqual(400);
    expect(refused.status).toBeLessThan(500);
    expect((refused.json as { access_token?: unknown } | undefined)?.access_token).toBeUndefined();
  });
});

// ---------------------------------------------------------------------------------------------
describe("contract: pool", () => {
  it("GET /compute/v1/pool/status: PoolStatus", async () => {
    expectBody(await api.call("GET", "/compute/v1/pool/status"), 200, S.PoolStatus, "pool status");
  });

  it("GET and PUT /compute/v1/pool/config: PoolConfig; 400 for a wrong type", async () => {
    const cfg = expectBody(await api.call("GET", "/compute/v1/pool/config"), 200, S.PoolConfig, "get pool config");
    const wanted: S.TPoolConfig = { ...cfg, idle_ttl_seconds: (cfg.idle_ttl_seconds ?? 300) + 1 };
    const put = expectBody(await api.call("PUT", "/compute/v1/pool/config", { body: wanted }), 200, S.PoolConfig, "put pool config");
    expect(put.idle_ttl_seconds).toBe(wanted.idle_ttl_seconds);
    const again = expectBody(await api.call("GET", "/compute/v1/pool/config"), 200, S.PoolConfig, "get pool config after put");
    expect(again.idle_ttl_seconds).toBe(wanted.idle_ttl_seconds);
    expectError(
      await api.call("PUT", "/compute/v1/pool/config", { body: { ...wanted, min_warm: "two" } }),
      400,
      "compute",
      "pool config with a string min_warm",
      /min_warm/,
    );
    expectError(
      await api.call("PUT", "/compute/v1/pool/config", { body: { ...wanted, recycle: "yes" } }),
      400,
      "compute",
      "pool config with a string recycle",
      /recycle/,
    );
  });
});

// ---------------------------------------------------------------------------------------------
describe("contract: coverage", () => {
  function published(table: "service" | "agentd" = "service", key: (method: string, path: string) => string = shapeOf): Set<string> {
    const out = new Set<string>();
    for (const [file, of] of Object.entries(PUBLISHED_FILES)) {
      if (of !== table) continue;
      const doc = JSON.parse(readFileSync(join(PUBLISHED_DIR, file), "utf8")) as { paths: Record<string, Record<string, unknown>> };
      for (const [path, item] of Object.entries(doc.paths)) {
        if (path.startsWith("/internal/")) continue;
        for (const method of Object.keys(item)) {
          if (["get", "put", "post", "delete", "patch", "head", "options", "trace"].includes(method)) out.add(key(method, path));
        }
      }
    }
    return out;
  }

  it.skipIf(!HAVE_PUBLISHED)(`every published method+path (but /internal/*) is in the table${SKIP_REASON}`, () => {
    const table = new Set(ENDPOINTS.map(([m, t]) => shapeOf(m, t)));
    const missing = [...published()].filter((k) => !table.has(k));
    expect(missing, "published endpoints missing from the table").toEqual([]);
  });

  it.skipIf(!HAVE_PUBLISHED)(`every table entry is a published method+path${SKIP_REASON}`, () => {
    const pub = published();
    const extra = ENDPOINTS.map(([m, t]) => shapeOf(m, t)).filter((k) => !pub.has(k));
    expect(extra, "table entries not in the published descriptions").toEqual([]);
  });

  // agentd's table is written exactly as published (parameter names too): compared as is.
  it.skipIf(!HAVE_PUBLISHED)(`every published agentd method+path is in the agentd table${SKIP_REASON}`, () => {
    const missing = [...published("agentd", keyOf)].filter((k) => !AGENTD_TABLE.has(k));
    expect(missing, "published agentd operations missing from the agentd table").toEqual([]);
  });

  it.skipIf(!HAVE_PUBLISHED)(`every agentd table entry is a published method+path${SKIP_REASON}`, () => {
    const pub = published("agentd", keyOf);
    const extra = [...AGENTD_TABLE].filter((k) => !pub.has(k));
    expect(extra, "agentd table entries not in agentd-api.json").toEqual([]);
  });

  // Runs last in this file: every table entry was called, with a token, by a test above; every
  // agentd entry answered a call through r/ with the session's token.
  it("every table entry was exercised by an authenticated request", () => {
    const missed = [...TABLE].filter((k) => !exercised.has(k));
    expect(missed).toEqual([]);
    const missedAgentd = [...AGENTD_TABLE].filter((k) => !agentdExercised.has(k)).map((k) => `agentd ${k}`);
    expect(missedAgentd, "agentd operations no call through r/ reached").toEqual([]);
  });
});
