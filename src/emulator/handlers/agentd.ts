// agentd, the runtime daemon inside every VM (agentd-api.json), as the emulator serves it behind
// /compute/v1/vms/{id}/r/<agentd path>: commands, code contexts, files, directories, sessions,
// skills, metrics, the workspace, agents. Bodies, status codes and SSE streams are the published
// ones; errors are agentd's models.ErrorResponse `{code, message}` (the forwarding passes the
// runtime's answer through). Request bodies are read leniently, as the (Go) daemon decodes them:
// published fields are type-checked (400 naming the field), unknown ones ignored.
import type { IncomingHttpHeaders } from "node:http";
import { availableParallelism, freemem, loadavg, totalmem } from "node:os";
import { mkdir, rename, rm, stat, lstat, unlink, writeFile } from "node:fs/promises";
import { basename, dirname } from "node:path";
import { badRequest, notFound, ServiceError } from "../errors.js";
import type { HandlerResult } from "../router.js";
import type { Command } from "../runtime/commands.js";
import { executionSSE, eventsSSE, FileBody, SSEBody } from "../runtime/streams.js";
import { StreamBody } from "../http.js";
import { fileInfo, search } from "../runtime/files.js";
import { VM_WORKSPACE, vmPath } from "../runtime/paths.js";
import type { RunCommandRequest, SkillFiles, VMRuntime } from "../runtime/vm-runtime.js";
import { isObject } from "../validate.js";
import type { JsonObject } from "../wire.js";

/** How often metrics/watch sends a snapshot (published: every 2 seconds). */
export const METRICS_WATCH_MS = 2000;

export interface AgentdRequest {
  method: string;
  /** The agentd path, e.g. "v1/commands/run" (no leading slash, no query). */
  path: string;
  query: URLSearchParams;
  headers: IncomingHttpHeaders;
  raw: Buffer;
  runtime: VMRuntime;
  /** The service's skill store (for skills/load). */
  skill(name: string): SkillFiles | undefined;
  /** Zero values are left out of JSON answers and end events (EmulatorOptions.agentdOmitEmpty). */
  omitEmpty?: boolean;
  /** A command's stream has no start event (EmulatorOptions.agentdNoStartEvent). */
  noStartEvent?: boolean;
  /** A background command's stream goes on until it ends (EmulatorOptions.agentdBackgroundStreams). */
  backgroundStreams?: boolean;
}

type AgentdHandler = (req: AgentdRequest, params: Record<string, string>) => HandlerResult | Promise<HandlerResult>;

interface AgentdRoute {
  method: string;
  segments: string[];
  handler: AgentdHandler;
}

/** agentd's models.MetricsSnapshot. */
export interface MetricsSnapshot {
  cpu_percent: number;
  mem_total_bytes: number;
  mem_used_bytes: number;
  tokens_total: number;
}

// ---------------------------------------------------------------------------------------------
// Request bodies

function json(raw: Buffer): unknown {
  const text = raw.toString("utf8");
  if (text.trim() === "") return undefined;
  try {
    return JSON.parse(text);
  } catch (err) {
    throw badRequest(`malformed JSON body: ${(err as Error).message}`);
  }
}

function objectBody(raw: Buffer): JsonObject {
  const v = json(raw);
  if (v === undefined) return {};
  if (!isObject(v)) throw badRequest("request body must be a JSON object");
  return v;
}

/** A JSON array of paths; the published schema sets no minItems: an empty one is a no-op. */
function stringArrayBody(raw: Buffer, what: string): string[] {
  const v = json(raw);
  if (!Array.isArray(v)) throw badRequest(`request body must be a JSON array of ${what}`);
  return v.map((p, i) => {
    if (typeof p !== "string" || p === "") throw badRequest(`paths[${i}] must be a non-empty string`);
    return p;
  });
}

function str(body: JsonObject, field: string, required: boolean): string | undefined {
  const v = body[field];
  if (v === undefined || v === null) {
    if (required) throw badRequest(`${field} is required`);
    return undefined;
  }
  if (typeof v !== "string") throw badRequest(`${field} must be a string`);
  if (required && v.trim() === "") throw badRequest(`${field} must not be empty`);
  return v;
}

function nonNegativeInt(body: JsonObject, field: string): number | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) throw badRequest(`${field} must be a non-negative integer`);
  return v;
}

function stringMap(body: JsonObject, field: string): Record<string, string> | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (!isObject(v)) throw badRequest(`${field} must be an object of strings`);
  for (const [k, x] of Object.entries(v)) if (typeof x !== "string") throw badRequest(`${field}.${k} must be a string`);
  return v as Record<string, string>;
}

/**
 * models.RunCommandRequest: command (required), cwd (a VM path), envs, timeout_ms, background,
 * uid, gid. uid and gid are checked and ignored: everything runs as the emulator's user.
 */
export function parseRunCommand(body: JsonObject, rt: VMRuntime): RunCommandRequest & { background: boolean } {
  const command = str(body, "command", true)!;
  const req: RunCommandRequest & { background: boolean } = { command, background: false };
  const cwd = str(body, "cwd", false);
  if (cwd !== undefined && cwd !== "") req.cwd = rt.hostPath(cwd, "cwd");
  const envs = stringMap(body, "envs");
  if (envs !== undefined) req.envs = envs;
  const timeout = nonNegativeInt(body, "timeout_ms");
  if (timeout !== undefined && timeout > 0) req.timeoutMs = timeout;
  const bg = body["background"];
  if (bg !== undefined && bg !== null && typeof bg !== "boolean") throw badRequest("background must be a boolean");
  req.background = bg === true;
  nonNegativeInt(body, "uid");
  nonNegativeInt(body, "gid");
  return req;
}

/** A cwd that does not exist is the caller's mistake, not a failed command. */
async function checkDir(host: string | undefined, field: string): Promise<void> {
  if (host === undefined) return;
  const st = await stat(host).catch(() => undefined);
  if (!st?.isDirectory()) throw badRequest(`${field} is not an existing directory`);
}

/** Validates a RunCommandRequest and starts the command (400 before anything runs). */
export async function startCommand(body: JsonObject, rt: VMRuntime): Promise<{ background: boolean; command: Command }> {
  const req = parseRunCommand(body, rt);
  await checkDir(req.cwd, "cwd");
  return { background: req.background, command: rt.runCommand(req) };
}

/**
 * Why a file system call failed, for an answer: its errno code only (ENOTDIR, EACCES, ...), never
 * its message, which holds the emulator's host path.
 */
function fsReason(err: unknown): string {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return typeof code === "string" && code !== "" ? code : "unexpected error";
}

/** mkdir -p of a file's parents. One of them a regular file is ENOTDIR (Node says EEXIST). */
async function mkdirParents(file: string): Promise<void> {
  await mkdir(dirname(file), { recursive: true }).catch((err: NodeJS.ErrnoException) => {
    throw err.code === "EEXIST" ? Object.assign(new Error("a parent is not a directory"), { code: "ENOTDIR" }) : err;
  });
}

// ---------------------------------------------------------------------------------------------
// Handlers

const ok = (status: number, body?: unknown): HandlerResult => ({ status, ...(body !== undefined && { body }) });

async function runCommand(req: AgentdRequest): Promise<HandlerResult> {
  const { background, command } = await startCommand(objectBody(req.raw), req.runtime);
  // Published: the answer is an event stream. In the background it holds the start event (the
  // command's id) only (unless backgroundStreams); the command runs on, and its status says how it ended.
  if (background && req.backgroundStreams !== true) return ok(200, eventsSSE(command.execution.events.filter((e) => e.event === "start")));
  return ok(200, executionSSE(command.execution));
}

function commandStatus(req: AgentdRequest, p: Record<string, string>): HandlerResult {
  const cmd = req.runtime.command(p["id"]!);
  if (!cmd) throw notFound(`command ${p["id"]} not found`);
  return ok(200, cmd.status());
}

function killCommand(req: AgentdRequest, p: Record<string, string>): HandlerResult {
  const cmd = req.runtime.command(p["id"]!);
  if (!cmd) throw notFound(`command ${p["id"]} not found`);
  cmd.kill();
  return ok(204);
}

function createContext(req: AgentdRequest): HandlerResult {
  const body = objectBody(req.raw);
  const language = str(body, "language", true)!;
  const session = str(body, "session_id", true)!;
  return ok(201, req.runtime.createContext(language, session).view());
}

function getContext(req: AgentdRequest, p: Record<string, string>): HandlerResult {
  const k = req.runtime.context(p["id"]!);
  if (!k) throw notFound(`code context ${p["id"]} not found`);
  return ok(200, k.view());
}

function deleteContext(req: AgentdRequest, p: Record<string, string>): HandlerResult {
  if (!req.runtime.deleteContext(p["id"]!)) throw notFound(`code context ${p["id"]} not found`);
  return ok(204);
}

function executeCode(req: AgentdRequest): HandlerResult {
  const body = objectBody(req.raw);
  // models.ExecuteCodeRequest requires code: an empty (or blank) block is refused as an empty
  // command is.
  const code = str(body, "code", true)!;
  const id = str(body, "context_id", true)!;
  const k = req.runtime.context(id);
  if (!k) throw notFound(`code context ${id} not found`);
  return ok(200, executionSSE(k.execute(code)));
}

function interrupt(req: AgentdRequest, p: Record<string, string>): HandlerResult {
  const k = req.runtime.context(p["id"]!);
  if (!k) throw notFound(`code context ${p["id"]} not found`);
  k.interrupt(); // nothing running: nothing to interrupt, still 204
  return ok(204);
}

async function upload(req: AgentdRequest): Promise<HandlerResult> {
  const type = req.headers["content-type"] ?? "";
  if (!/^multipart\/form-data/i.test(type)) throw badRequest("the body must be multipart/form-data with fields path and file");
  let form: FormData;
  try {
    form = await new Request("http://agentd/upload", { method: "POST", headers: { "content-type": type }, body: new Uint8Array(req.raw) }).formData();
  } catch (err) {
    throw badRequest(`malformed multipart body: ${(err as Error).message}`);
  }
  const path = form.get("path");
  const file = form.get("file");
  if (typeof path !== "string" || path === "") throw badRequest("path is required");
  if (file === null) throw badRequest("file is required");
  let target = req.runtime.hostPath(path, "path");
  const st = await stat(target).catch(() => undefined);
  // A directory (or a path ending in "/") receives the file under its own name.
  if (st?.isDirectory() || path.endsWith("/")) {
    const name = typeof file === "string" ? "" : basename(file.name);
    if (name === "" || name === "." || name === "..") throw badRequest("path names a directory and the file has no name");
    target = req.runtime.hostPath(`${vmPath(req.runtime.workspace, target)}/${name}`, "path");
  }
  const bytes = typeof file === "string" ? Buffer.from(file) : Buffer.from(await file.arrayBuffer());
  // A parent that is a regular file (`plain.txt/x`: ENOTDIR), a symbolic link loop (ELOOP), ...:
  // the caller's mistake, 400 naming the path as it was given.
  try {
    await mkdirParents(target);
    await writeFile(target, bytes);
  } catch (err) {
    throw badRequest(`path ${JSON.stringify(path)} cannot be written: ${fsReason(err)}`);
  }
  return ok(201, { path: vmPath(req.runtime.workspace, target), size: String(bytes.length) });
}

function queryPath(req: AgentdRequest, field = "path"): string {
  const p = req.query.get(field);
  if (p === null || p === "") throw badRequest(`${field} is required`);
  return req.runtime.hostPath(p, field);
}

async function download(req: AgentdRequest): Promise<HandlerResult> {
  const host = queryPath(req);
  const st = await stat(host).catch(() => undefined);
  if (!st) throw notFound(`${req.query.get("path")} not found`);
  if (st.isDirectory()) throw badRequest(`path ${req.query.get("path")} is a directory`);
  return ok(200, new FileBody(host, st.size, basename(host)));
}

async function info(req: AgentdRequest): Promise<HandlerResult> {
  const host = queryPath(req);
  const st = await lstat(host).catch(() => undefined);
  if (!st) throw notFound(`${req.query.get("path")} not found`);
  return ok(200, fileInfo(req.runtime.workspace, host, st));
}

async function deleteFiles(req: AgentdRequest): Promise<HandlerResult> {
  const given = stringArrayBody(req.raw, "file paths");
  const hosts = given.map((p, i) => req.runtime.hostPath(p, `paths[${i}]`));
  for (const [i, h] of hosts.entries()) {
    const st = await lstat(h).catch(() => undefined);
    if (st?.isDirectory()) throw badRequest(`paths[${i}] is a directory (DELETE v1/directories removes directories)`);
  }
  for (const [i, h] of hosts.entries()) {
    await unlink(h).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== "ENOENT") throw badRequest(`paths[${i}] ${JSON.stringify(given[i])} cannot be deleted: ${fsReason(err)}`);
    });
  }
  return ok(204);
}

async function move(req: AgentdRequest): Promise<HandlerResult> {
  const v = json(req.raw);
  if (!Array.isArray(v)) throw badRequest("request body must be a JSON array of {src, dst}"); // [] moves nothing
  const moves = v.map((m, i) => {
    if (!isObject(m)) throw badRequest(`moves[${i}] must be an object {src, dst}`);
    return { src: req.runtime.hostPath(m["src"], `moves[${i}].src`), dst: req.runtime.hostPath(m["dst"], `moves[${i}].dst`), i };
  });
  for (const { src, dst, i } of moves) {
    if (src === req.runtime.workspace || dst === req.runtime.workspace) throw badRequest(`moves[${i}] cannot move ${VM_WORKSPACE} itself`);
    if (!(await lstat(src).catch(() => undefined))) throw badRequest(`moves[${i}].src does not exist`);
    try {
      await mkdirParents(dst);
      await rename(src, dst);
    } catch (err) {
      throw badRequest(`moves[${i}] failed: ${fsReason(err)}`);
    }
  }
  return ok(204);
}

async function searchFiles(req: AgentdRequest): Promise<HandlerResult> {
  const pattern = req.query.get("pattern");
  if (pattern === null || pattern === "") throw badRequest("pattern is required");
  const dir = req.runtime.hostPath(req.query.get("dir") || ".", "dir");
  const st = await stat(dir).catch(() => undefined);
  if (!st?.isDirectory()) throw badRequest("dir is not an existing directory");
  return ok(200, await search(req.runtime.workspace, dir, pattern));
}

async function createDirs(req: AgentdRequest): Promise<HandlerResult> {
  const hosts = stringArrayBody(req.raw, "directory paths").map((p, i) => req.runtime.hostPath(p, `paths[${i}]`));
  for (const [i, h] of hosts.entries()) {
    await mkdir(h, { recursive: true }).catch((err: unknown) => {
      throw badRequest(`paths[${i}] cannot be created: ${fsReason(err)}`);
    });
  }
  return ok(201);
}

async function deleteDirs(req: AgentdRequest): Promise<HandlerResult> {
  const hosts = stringArrayBody(req.raw, "directory paths").map((p, i) => req.runtime.hostPath(p, `paths[${i}]`));
  for (const [i, h] of hosts.entries()) if (h === req.runtime.workspace) throw badRequest(`paths[${i}] is ${VM_WORKSPACE} itself (POST v1/workspace/reset empties it)`);
  for (const [i, h] of hosts.entries()) {
    // force: a missing directory is no error; one under a regular file (ENOTDIR) is refused.
    await rm(h, { recursive: true, force: true, maxRetries: 3 }).catch((err: unknown) => {
      throw badRequest(`paths[${i}] cannot be removed: ${fsReason(err)}`);
    });
  }
  return ok(204);
}

async function initSession(req: AgentdRequest): Promise<HandlerResult> {
  const id = str(objectBody(req.raw), "session_id", true)!;
  const dir = req.runtime.sessionDir(id);
  await mkdir(dir, { recursive: true }).catch((err: unknown) => {
    throw badRequest(`session_id ${JSON.stringify(id)}: ${vmPath(req.runtime.workspace, dir)} cannot be created: ${fsReason(err)}`);
  });
  return ok(201, { session_id: id, path: vmPath(req.runtime.workspace, dir) });
}

async function deleteSession(req: AgentdRequest, p: Record<string, string>): Promise<HandlerResult> {
  await req.runtime.deleteSession(p["id"]!);
  return ok(204);
}

function loadSkills(req: AgentdRequest): HandlerResult {
  const body = objectBody(req.raw);
  const names = body["skills"];
  if (names === undefined || names === null) throw badRequest("skills is required");
  if (!Array.isArray(names) || names.some((n) => typeof n !== "string")) throw badRequest("skills must be an array of strings");
  const found = (names as string[]).map((name, i) => {
    const s = req.skill(name);
    if (!s) throw badRequest(`skills[${i}]: skill ${JSON.stringify(name)} does not exist`);
    return s;
  });
  return ok(200, found.map((s) => req.runtime.loadSkill(s)));
}

function getSkill(req: AgentdRequest, p: Record<string, string>): HandlerResult {
  const s = req.runtime.skill(p["name"]!);
  if (!s) throw notFound(`skill ${p["name"]} is not loaded`);
  return ok(200, s);
}

/** The host's figures stand in for the VM's: the emulator has no VM to measure. */
export function metricsSnapshot(): MetricsSnapshot {
  const total = totalmem();
  return {
    cpu_percent: Math.min(100, Math.round((loadavg()[0]! / availableParallelism()) * 1000) / 10),
    mem_total_bytes: total,
    mem_used_bytes: total - freemem(),
    tokens_total: 0,
  };
}

function watchMetrics(req: AgentdRequest): HandlerResult {
  return ok(
    200,
    new SSEBody((sink) => {
      const tick = (): void => sink.send({ event: "metrics", data: JSON.stringify(metricsSnapshot()) });
      tick();
      const t = setInterval(tick, METRICS_WATCH_MS);
      t.unref();
      const off = req.runtime.onClose(() => sink.end());
      return () => {
        clearInterval(t);
        off();
      };
    }),
  );
}

async function resetWorkspace(req: AgentdRequest): Promise<HandlerResult> {
  await req.runtime.resetWorkspace();
  return ok(204);
}

function agentsNotEmulated(req: AgentdRequest): HandlerResult {
  // The published requestBody is required and an object (400 otherwise, as published); then
  // models.ExecuteRequest is published without fields: there is no telling what to run.
  if (json(req.raw) === undefined) throw badRequest("request body is required: a JSON object (models.ExecuteRequest)");
  objectBody(req.raw);
  throw new ServiceError(501, "not_implemented", "agent processes are not emulated: the body of v1/agents/execute (models.ExecuteRequest) is not published");
}

function noAgent(_req: AgentdRequest, p: Record<string, string>): HandlerResult {
  throw notFound(`agent process ${p["id"]} not found`);
}

const ROUTES: AgentdRoute[] = (
  [
    ["POST", "v1/commands/run", runCommand],
    ["GET", "v1/commands/:id/status", commandStatus],
    ["DELETE", "v1/commands/:id", killCommand],
    ["GET", "v1/code/contexts", (r) => ok(200, [...r.runtime.contexts.values()].map((k) => k.view()))],
    ["POST", "v1/code/contexts", createContext],
    ["GET", "v1/code/contexts/:id", getContext],
    ["DELETE", "v1/code/contexts/:id", deleteContext],
    ["POST", "v1/code/execute", executeCode],
    ["DELETE", "v1/code/execute/:id", interrupt],
    ["POST", "v1/files/upload", upload],
    ["GET", "v1/files/download", download],
    ["GET", "v1/files/info", info],
    ["DELETE", "v1/files", deleteFiles],
    ["POST", "v1/files/mv", move],
    ["GET", "v1/files/search", searchFiles],
    ["POST", "v1/directories", createDirs],
    ["DELETE", "v1/directories", deleteDirs],
    ["POST", "v1/sessions/init", initSession],
    ["DELETE", "v1/sessions/:id", deleteSession],
    ["GET", "v1/skills", (r) => ok(200, r.runtime.skills())],
    ["POST", "v1/skills/load", loadSkills],
    ["GET", "v1/skills/:name", getSkill],
    ["GET", "v1/metrics", () => ok(200, metricsSnapshot())],
    ["GET", "v1/metrics/watch", watchMetrics],
    ["POST", "v1/workspace/reset", resetWorkspace],
    ["GET", "v1/agents", () => ok(200, [])],
    ["POST", "v1/agents/execute", agentsNotEmulated],
    ["GET", "v1/agents/:id", noAgent],
    ["DELETE", "v1/agents/:id", noAgent],
  ] as [string, string, AgentdHandler][]
).map(([method, pattern, handler]) => ({ method, segments: pattern.split("/"), handler }));

function match(method: string, path: string): { route: AgentdRoute; params: Record<string, string> } | { allow: string[] } | undefined {
  const parts = path.replace(/^\/+/, "").split("/");
  const allow: string[] = [];
  for (const route of ROUTES) {
    if (route.segments.length !== parts.length) continue;
    const params: Record<string, string> = {};
    let ok = true;
    for (let i = 0; i < parts.length && ok; i++) {
      const seg = route.segments[i]!;
      if (seg.startsWith(":")) {
        if (parts[i] === "") ok = false;
        else params[seg.slice(1)] = parts[i]!;
      } else if (seg !== parts[i]) ok = false;
    }
    if (!ok) continue;
    if (route.method === method) return { route, params };
    allow.push(route.method);
  }
  return allow.length > 0 ? { allow } : undefined;
}

/** agentd's models.ErrorResponse. */
export const agentdError = (status: number, message: string): { code: number; message: string } => ({ code: status, message });

/** A Go server's `omitempty` at every level: zero values are left out of objects. */
function omitEmpty(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(omitEmpty);
  if (value === null || typeof value !== "object") return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    const kept = omitEmpty(v);
    const empty = kept === 0 || kept === false || kept === "" || kept === null || (Array.isArray(kept) && kept.length === 0);
    if (!empty) out[k] = kept;
  }
  return out;
}

function withoutEmpty(result: HandlerResult): HandlerResult {
  const { body } = result;
  if (body instanceof SSEBody) return { ...result, body: body.map((e) => (e.event === "end" ? { event: e.event, data: JSON.stringify(omitEmpty(JSON.parse(e.data))) } : e)) };
  if (body === undefined || body instanceof StreamBody || typeof body === "string") return result;
  return { ...result, body: omitEmpty(body) };
}

/** Serves one agentd request; errors come back in agentd's dialect. */
export async function serveAgentd(req: AgentdRequest): Promise<HandlerResult> {
  try {
    const m = match(req.method, req.path);
    if (!m) throw notFound(`agentd has no route for ${req.method} ${req.path}`);
    if ("allow" in m) {
      const allow = m.allow.join(", ");
      throw new ServiceError(405, "method_not_allowed", `method ${req.method} is not allowed on ${req.path} (allowed: ${allow})`, { Allow: allow });
    }
    let result = await m.route.handler(req, m.params);
    if (req.noStartEvent === true && req.path === "v1/commands/run" && result.body instanceof SSEBody) {
      result = { ...result, body: result.body.without((e) => e.event === "start") };
    }
    return req.omitEmpty === true ? withoutEmpty(result) : result;
  } catch (err) {
    if (err instanceof ServiceError) return { status: err.status, body: agentdError(err.status, err.message), headers: err.headers };
    // Anything else is a bug in the emulator: logged in full here, answered as agentd would, in
    // its dialect, and without the error's message (a file system error's names a host path).
    console.error(`emulator: agentd ${req.method} ${req.path} failed:`, err);
    const code = (err as NodeJS.ErrnoException | undefined)?.code;
    return { status: 500, body: agentdError(500, typeof code === "string" ? `internal error: ${code}` : "internal error") };
  }
}
