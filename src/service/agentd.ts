// AgentdClient: one VM's runtime daemon (agentd, shared/reference/service-openapi/agentd-api.json),
// reached through the Compute Service's forwarding route /compute/v1/vms/{id}/r/<agentd path>
// with the account's bearer token (shared/design/SERVICE.md, "Executing work in a VM").
//
// Why not ServiceClient: its transport reads whole bodies, and a command's output is a
// server-sent event stream that must reach the user as it is produced. This client streams; it
// borrows the ServiceClient's token (ServiceClient.accessToken) so both share one token cache,
// and, for the operator's own calls (a SandboxRun's steps), its rate limit and request metrics
// (ServiceClient.forwarding): the forwarding route is the same service, with the same limit.
//
//   const vm = new AgentdClient({ baseURL, vmId, accessToken: (r) => client.accessToken(r) });
//   for await (const e of vm.runCommand("make test")) ...        // start, stdout, stderr, end
//   const id = await vm.startCommand("server &", {}); // background: the id, at once (undefined: none named)
//   await vm.commandStatus(id); await vm.killCommand(id);
//   const ctx = await vm.createCodeContext("python", "s1"); vm.executeCode(ctx.id, "print(1)")
//
// Event names: the published description only says an event has `event` and `data` strings.
// The emulator's (src/emulator/runtime/execution.ts) are start {"id"|"context_id"}, stdout,
// stderr, timeout, error, end {"exit_code"|"status"}; the names the official SDK's WebSocket
// uses (started, output, done, execution_complete) are read as the same things, and a start's
// id under command_id or commandId too. Anything else comes through as "other". A stream that
// ends without an end event says nothing about how the command ended: ask commandStatus(id). A
// background start whose answer names no id resolves with none: a SandboxRun step is then
// followed and stopped by its files (src/runs/script.ts), not by its id.
//
// Retries: a 401 gets a new token and another attempt (nothing ran; RefusedTokens says how many
// in a row). Nothing else is retried here: a command sent once may have started, and the caller
// knows whether running it twice is acceptable (commandStatus by id is the way to find out).
//
// Secrets: what agentd answers to a refused request may quote it (a command's envs, an uploaded
// file), so the text of an error is scrubbed of what that call sent that may be secret (see
// commandSecrets, contentSecrets), and of the token, before anything is kept.
import { StringDecoder } from "node:string_decoder";
import { createParser } from "eventsource-parser";
import type { Dispatcher } from "undici";
import { ServiceDispatchers } from "./dispatcher.js";
import { ServiceError, envSecrets, httpErrorMessage, parseErrorBody, scrub } from "./errors.js";
import { DEFAULTS } from "./options.js";
import type { Forwarding } from "./options.js";
import { parseRetryAfter } from "./retry.js";
import { RefusedTokens } from "./token.js";
import { userAgent } from "./user-agent.js";

export interface AgentdClientOptions {
  /** Base URL of the Compute Service (a Connection's spec.baseURL). */
  baseURL: string;
  /** The VM's id (a Sandbox's status.vmId). */
  vmId: string;
  /**
   * A valid bearer token; `refused` is the token the service just answered 401 to.
   * `(r) => serviceClient.accessToken(r)` fits.
   */
  accessToken(refused?: string): Promise<string>;
  insecureSkipTLSVerify?: boolean;
  /** PEM text, or a path to a PEM file, trusted besides the system's roots. */
  caCert?: string;
  /** Deadline of a plain call, and of a stream's first byte of headers (default 30 s). A stream's body has none. */
  timeoutMs?: number;
  /** Asked before each attempt of a call that is not a GET; throws to refuse it unsent (ServiceClientOptions.writeGate). */
  writeGate?: () => void;
  /**
   * The Connection's client (`serviceClient.forwarding`): every attempt takes a token of its
   * rate limit, a 429 holds that client back, since the forwarding route is the same service,
   * and each attempt is counted in its request metrics as `agentd.<operation>`. Absent: not
   * limited nor counted (a person's one-off `exec`).
   */
  forwarding?: Forwarding;
  /**
   * Asked about a 404 or a 502 before it is thrown (or a 404 read as "no such file, command or
   * context"): either may be the compute API's own answer about the VM rather than agentd's, and
   * the body need not say which. An error returned is thrown instead (the VM is gone, or the
   * question could not be answered); undefined: the answer stands as agentd's. Absent: a 404
   * without error_code is agentd's (isAgentdNotFound).
   */
  explainError?: (err: ServiceError) => Promise<Error | undefined>;
}

/** models.RunCommandRequest, less `command` and `background`. */
export interface CommandOptions {
  /** Working directory in the VM. */
  cwd?: string;
  envs?: Record<string, string>;
  /**
   * The values of `envs` read from Secrets (a SandboxRun's envFrom): kept out of the text of an
   * error whatever their length, as the service client's vms.allocate keeps them (envSecrets).
   * Not sent.
   */
  secretValues?: readonly string[];
  /** The VM kills the command after this long (0 or absent: no limit). */
  timeoutMs?: number;
  uid?: number;
  gid?: number;
}

/** An event of a command's or a code execution's stream. `end` is the last one. */
export type ExecEvent =
  /** The command's id (for status and kill), or the code context's id. */
  | { type: "start"; id: string }
  | { type: "stdout"; text: string }
  | { type: "stderr"; text: string }
  /** The command ran out of its time and was killed (its end follows). */
  | { type: "timeout"; timeoutMs?: number }
  /** Code raised (its traceback went to stderr). */
  | { type: "error"; name?: string; value?: string }
  /** A command's exit code; a code execution's status (ok or error; an interrupted block is an error named KeyboardInterrupt). */
  | { type: "end"; exitCode?: number; status?: string }
  | { type: "other"; event: string; data: string };

/** A stream of events. Breaking out of `for await`, or close(), drops the connection (the command runs on: kill it by id). */
export interface ExecStream extends AsyncIterable<ExecEvent> {
  close(): void;
}

/** agentd's models.CommandStatus. */
export interface CommandStatus {
  id: string;
  running: boolean;
  /** Once it has ended. */
  exitCode?: number;
  startedAt?: string;
  finishedAt?: string;
}

/** A file's two ends (AgentdClient.downloadFileEnds). */
export interface FileEnds {
  head: Buffer;
  /** The last bytes after `head`; what lies between the two is not read. */
  tail: Buffer;
  /** The file's size in bytes. */
  size: number;
}

/** agentd's models.CodeContext. */
export interface CodeContext {
  id: string;
  language?: string;
  sessionId?: string;
  kernelId?: string;
  createdAt?: string;
}

type Method = "GET" | "POST" | "DELETE";

/**
 * How long a background command's answer may go on, once it has begun, before the command is
 * taken as started without an id: agentd's own answer names it at once where it names it, and
 * an agentd whose background answer streams the whole run would hold the step's start until
 * the step ends.
 */
const ID_WAIT_MS = 5_000;

export class AgentdClient {
  private readonly origin: string;
  /** `<base path>/compute/v1/vms/<id>/r/` */
  private readonly prefix: string;
  private readonly dispatchers: ServiceDispatchers;
  private readonly timeoutMs: number;
  /** Named after the replica in sharded mode, as the service client's. */
  private readonly userAgent = userAgent("agent-operator/agentd-client");

  constructor(private readonly opts: AgentdClientOptions) {
    const u = new URL(opts.baseURL);
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new TypeError(`agentd client: baseURL must be http(s), got ${u.protocol}`);
    if (opts.vmId === "") throw new TypeError("agentd client: empty vmId");
    this.origin = u.origin;
    this.prefix = `${u.pathname.replace(/\/+$/, "")}/compute/v1/vms/${encodeURIComponent(opts.vmId)}/r/`;
    this.timeoutMs = opts.timeoutMs ?? DEFAULTS.timeoutMs;
    this.dispatchers = new ServiceDispatchers({
      headersTimeoutMs: this.timeoutMs,
      insecureSkipTLSVerify: opts.insecureSkipTLSVerify,
      caCert: opts.caCert,
    });
  }

  /** Runs a shell command (`/bin/sh -c`) and streams its events until it ends. */
  runCommand(command: string, opts: CommandOptions = {}): ExecStream {
    return this.stream("commands.run", "v1/commands/run", commandBody(command, opts, false), commandSecrets(opts));
  }

  /**
   * Starts a command in the background; resolves with its id as soon as the VM has it, or with
   * undefined when the VM took the command without naming an id (the published description
   * names no event that carries it: the caller follows the command some other way): its answer
   * ended without one, or went on to the command's output or end, or stayed open ID_WAIT_MS
   * after it began with nothing (an agentd whose background answer streams the whole run).
   * Within the timeout: an answer that does not begin (a frozen VM) must not hold the caller
   * for ever.
   */
  async startCommand(command: string, opts: CommandOptions = {}): Promise<string | undefined> {
    // An error event's name and value (agentd's, not the command's output).
    let failure: string | undefined;
    let timedOut = false;
    let timer = setTimeout(() => {
      timedOut = true;
      events.close();
    }, this.timeoutMs);
    // The VM answered: the command is its. An id, if one comes, comes first.
    const answered = () => {
      clearTimeout(timer);
      timer = setTimeout(() => events.close(), Math.min(ID_WAIT_MS, this.timeoutMs));
    };
    const secrets = commandSecrets(opts);
    const events = this.stream("commands.run", "v1/commands/run", commandBody(command, opts, true), secrets, answered);
    try {
      for await (const e of events) {
        if (e.type === "start") return e.id;
        // agentd's words about the request, which may quote its envs.
        if (e.type === "error") failure ??= scrub([e.name, e.value].filter((x) => x !== undefined && x !== "").join(": "), secrets) || "an error event";
        else if (e.type !== "other") break; // its output or its end: it runs, and no id came first
      }
    } finally {
      clearTimeout(timer);
      events.close();
    }
    if (timedOut) {
      throw new ServiceError({
        operation: "commands.run",
        message: `commands.run: the VM did not answer within ${this.timeoutMs} ms (the command may have started)`,
        retryable: true,
        outcomeUnknown: true,
      });
    }
    // An error event instead of an id: the command did not start as asked.
    if (failure !== undefined) {
      throw new ServiceError({ operation: "commands.run", message: `commands.run: the VM refused the command: ${failure}`, retryable: false, outcomeUnknown: true });
    }
    return undefined;
  }

  async commandStatus(id: string): Promise<CommandStatus> {
    return toCommandStatus(await this.json("commands.status", "GET", `v1/commands/${encodeURIComponent(id)}/status`), id);
  }

  /** Kills a command and what it started. False when the VM does not know it (404): it ended long ago, or never was. */
  async killCommand(id: string): Promise<boolean> {
    try {
      await this.json("commands.kill", "DELETE", `v1/commands/${encodeURIComponent(id)}`);
      return true;
    } catch (err) {
      if (isAgentdNotFound(err)) return false;
      throw err;
    }
  }

  /** A Jupyter kernel context for executeCode (language e.g. "python"). */
  async createCodeContext(language: string, sessionId: string): Promise<CodeContext> {
    const o = asObject(await this.json("code.contexts.create", "POST", "v1/code/contexts", { language, session_id: sessionId }));
    return {
      id: typeof o.id === "string" ? o.id : "",
      ...(typeof o.language === "string" && { language: o.language }),
      ...(typeof o.session_id === "string" && { sessionId: o.session_id }),
      ...(typeof o.kernel_id === "string" && { kernelId: o.kernel_id }),
      ...(typeof o.created_at === "string" && { createdAt: o.created_at }),
    };
  }

  /** Runs code in a context and streams its events (end carries status ok or error). */
  executeCode(contextId: string, code: string): ExecStream {
    return this.stream("code.execute", "v1/code/execute", { code, context_id: contextId }, []);
  }

  /** Interrupts what runs in a context (nothing running: still fine). */
  async interruptCode(contextId: string): Promise<void> {
    await this.json("code.interrupt", "DELETE", `v1/code/execute/${encodeURIComponent(contextId)}`);
  }

  async deleteCodeContext(contextId: string): Promise<void> {
    await this.json("code.contexts.delete", "DELETE", `v1/code/contexts/${encodeURIComponent(contextId)}`);
  }

  /** A file's size in bytes (models.FileInfo.size); undefined when the VM has no such file. */
  async fileSize(path: string): Promise<number | undefined> {
    let body: unknown;
    try {
      body = await this.json("files.info", "GET", `v1/files/info?path=${encodeURIComponent(path)}`);
    } catch (err) {
      if (isAgentdNotFound(err)) return undefined;
      throw err;
    }
    const size = asObject(body).size;
    // Every field of models.FileInfo is optional: a Go service's omitempty leaves out a size of 0.
    if (size === undefined) return 0;
    if (typeof size !== "number" || !Number.isInteger(size) || size < 0) {
      throw new ServiceError({ operation: "files.info", message: `files.info: the VM answered a size that is not a byte count: ${JSON.stringify(size)}`, retryable: false });
    }
    return size;
  }

  /** A file's text; undefined when the VM has no such file (agentd's own 404). */
  async downloadFile(path: string): Promise<string | undefined> {
    try {
      return (await this.call("files.download", "GET", `v1/files/download?path=${encodeURIComponent(path)}`)).text;
    } catch (err) {
      if (isAgentdNotFound(err)) return undefined;
      throw err;
    }
  }

  /**
   * A file's first `headBytes` and last `tailBytes`, read as a stream: memory stays within
   * about their sum whatever the file's size (agentd has no Range). Undefined when the VM has no
   * such file. The timeout bounds the wait for the answer and each pause in the body, not the
   * whole body: a large file takes as long as it takes.
   */
  async downloadFileEnds(path: string, headBytes: number, tailBytes: number): Promise<FileEnds | undefined> {
    const operation = "files.download";
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(new Error(`no answer within ${this.timeoutMs} ms`)), this.timeoutMs);
    try {
      const res = await this.send(operation, "GET", `v1/files/download?path=${encodeURIComponent(path)}`, undefined, ac.signal, this.timeoutMs);
      clearTimeout(timer); // from here undici's bodyTimeout: at most timeoutMs between two chunks
      const head: Buffer[] = [];
      let headLength = 0;
      const tail: Buffer[] = [];
      let tailLength = 0;
      let size = 0;
      try {
        for await (const chunk of res.body) {
          let b = chunk as Buffer;
          size += b.length;
          if (headLength < headBytes) {
            const taken = b.subarray(0, headBytes - headLength);
            head.push(taken);
            headLength += taken.length;
            b = b.subarray(taken.length);
          }
          if (b.length === 0) continue;
          tail.push(b);
          tailLength += b.length;
          while (tail.length > 1 && tailLength - tail[0]!.length >= tailBytes) tailLength -= tail.shift()!.length;
        }
      } catch (err) {
        throw transportError(operation, err, ac.signal);
      }
      const last = Buffer.concat(tail);
      return { head: Buffer.concat(head), tail: last.subarray(Math.max(0, last.length - tailBytes)), size };
    } catch (err) {
      if (isAgentdNotFound(err)) return undefined;
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Writes a file (multipart: path, file), creating its directories: bytes as they are, a string
   * as UTF-8. `secret`: the content is a Secret's (a SandboxRun's secretKeyRef file), kept out of
   * the text of an error that quotes it.
   */
  async uploadFile(path: string, content: Buffer | string, opts: { secret?: boolean } = {}): Promise<void> {
    const boundary = `----agent-operator-${Math.random().toString(36).slice(2)}${Date.now().toString(36)}`;
    const name = path.split("/").pop() || "file";
    const bytes = Buffer.concat([
      Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="path"\r\n\r\n${path}\r\n`),
      Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${name.replace(/["\r\n]/g, "_")}"\r\nContent-Type: application/octet-stream\r\n\r\n`),
      typeof content === "string" ? Buffer.from(content, "utf8") : content,
      Buffer.from(`\r\n--${boundary}--\r\n`),
    ]);
    const secrets = opts.secret === true ? contentSecrets(content) : [];
    await this.call("files.upload", "POST", "v1/files/upload", new RawBody(bytes, `multipart/form-data; boundary=${boundary}`), secrets);
  }

  /** Removes a directory and what is in it (gone already: fine). */
  async removeDirectory(path: string): Promise<void> {
    try {
      await this.call("directories.delete", "DELETE", "v1/directories", [path]);
    } catch (err) {
      if (!isAgentdNotFound(err)) throw err;
    }
  }

  close(): Promise<void> {
    return this.dispatchers.close();
  }

  // -------------------------------------------------------------------------------------

  /** A plain call: JSON (or nothing) back. */
  private async json(operation: string, method: Method, path: string, body?: unknown): Promise<unknown> {
    const { status, text } = await this.call(operation, method, path, body);
    if (text.trim() === "") return undefined;
    try {
      return JSON.parse(text) as unknown;
    } catch {
      throw new ServiceError({ operation, status, message: `${operation}: the VM answered HTTP ${status} with a body that is not JSON`, retryable: false });
    }
  }

  /** A plain call: the status and the body's text, within the timeout. `secrets`: what it sends that an error must not quote. */
  private async call(operation: string, method: Method, path: string, body?: unknown, secrets: readonly string[] = []): Promise<{ status: number; text: string }> {
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(new Error(`no answer within ${this.timeoutMs} ms`)), this.timeoutMs);
    try {
      const res = await this.send(operation, method, path, body, ac.signal, this.timeoutMs, secrets);
      return { status: res.statusCode, text: await res.body.text() };
    } finally {
      clearTimeout(timer);
    }
  }

  /** `secrets`: what it sends that an error must not quote; `answered`: told once the answer has begun (its status and headers are in). */
  private stream(operation: string, path: string, body: unknown, secrets: readonly string[], answered?: () => void): ExecStream {
    const ac = new AbortController();
    const send = async (): Promise<Dispatcher.ResponseData> => {
      const res = await this.send(operation, "POST", path, body, ac.signal, 0, secrets);
      answered?.();
      return res;
    };
    return {
      close: () => ac.abort(),
      [Symbol.asyncIterator]: () => events(operation, send, ac),
    };
  }

  /**
   * One request, with another (and a new token) after a 401. Non-2xx answers throw, their text
   * scrubbed of the token and of `secrets` (what the request carries that may be secret).
   */
  private async send(operation: string, method: Method, path: string, body: unknown, signal: AbortSignal, bodyTimeout: number, secrets: readonly string[] = []): Promise<Dispatcher.ResponseData> {
    const refused = new RefusedTokens();
    for (let attempt = 1; ; attempt++) {
      await this.opts.forwarding?.take(operation);
      const token = await this.opts.accessToken(refused.last);
      if (method !== "GET") this.opts.writeGate?.();
      const started = performance.now();
      const attempted = (status: number | "error"): void =>
        this.opts.forwarding?.attempted({ operation: `agentd.${operation}`, method, status, durationSeconds: (performance.now() - started) / 1000, attempt });
      let res: Dispatcher.ResponseData;
      try {
        res = await this.dispatchers.for(this.origin).request({
          origin: this.origin,
          path: this.prefix + path,
          method,
          headers: {
            authorization: `Bearer ${token}`,
            accept: operation === "commands.run" || operation === "code.execute" ? "text/event-stream" : "application/json",
            "user-agent": this.userAgent,
            ...(body !== undefined && { "content-type": body instanceof RawBody ? body.contentType : "application/json" }),
          },
          body: body === undefined ? null : body instanceof RawBody ? body.bytes : JSON.stringify(body),
          signal,
          bodyTimeout,
        });
      } catch (err) {
        attempted("error");
        throw transportError(operation, err, signal);
      }
      attempted(res.statusCode);
      if (res.statusCode >= 200 && res.statusCode < 300) return res;
      const text = await res.body.text().catch(() => "");
      if (res.statusCode === 429) this.opts.forwarding?.throttled(parseRetryAfter(res.headers["retry-after"], Date.now()));
      if (res.statusCode === 401 && refused.retryAfter(token)) continue;
      // agentd may quote the request it refuses ("invalid envs: PIN=..."): neither the token nor
      // what the request carried of a Secret reaches a message.
      const parsed = parseErrorBody(text, [token, ...secrets]);
      const error = new ServiceError({
        operation,
        status: res.statusCode,
        code: parsed.code,
        errorCode: parsed.errorCode,
        serviceMessage: parsed.serviceMessage,
        message: httpErrorMessage(operation, res.statusCode, res.statusText, parsed),
        retryable: res.statusCode === 429 || res.statusCode >= 500,
        outcomeUnknown: res.statusCode >= 500 && method === "POST",
      });
      if ((res.statusCode === 404 || res.statusCode === 502) && this.opts.explainError !== undefined) throw (await this.opts.explainError(error)) ?? error;
      throw error;
    }
  }
}

/** A body sent as it is (a multipart upload), not as JSON. */
class RawBody {
  constructor(
    readonly bytes: Buffer,
    readonly contentType: string,
  ) {}
}

/**
 * A 404 of agentd itself (no such file, command or context), told apart from the compute API's
 * own 404 (no such VM) by the service's error_code, which that body may leave out: a client
 * with explainError has asked about such a 404 before it is thrown.
 */
export function isAgentdNotFound(err: unknown): boolean {
  return err instanceof ServiceError && err.status === 404 && err.errorCode === undefined;
}

/**
 * agentd's answer to `GET v1/commands/{id}/status`. The published model requires no field, and
 * its names (`models.CommandStatus`) are a Go server's: a Go `omitempty` leaves out an
 * `exit_code` of 0, so a command that has finished (`finished_at` set) without one exited 0.
 */
export function toCommandStatus(body: unknown, id: string): CommandStatus {
  const o = asObject(body);
  const running = o.running === true;
  const finishedAt = typeof o.finished_at === "string" && o.finished_at !== "" ? o.finished_at : undefined;
  const exitCode = typeof o.exit_code === "number" ? o.exit_code : !running && finishedAt !== undefined ? 0 : undefined;
  return {
    id: typeof o.id === "string" ? o.id : id,
    running,
    ...(exitCode !== undefined && { exitCode }),
    ...(typeof o.started_at === "string" && { startedAt: o.started_at }),
    ...(finishedAt !== undefined && { finishedAt }),
  };
}

/** The events of one streamed answer, read as they come. */
async function* events(operation: string, send: () => Promise<Dispatcher.ResponseData>, ac: AbortController): AsyncGenerator<ExecEvent> {
  let res: Dispatcher.ResponseData;
  try {
    res = await send();
  } catch (err) {
    if (ac.signal.aborted) return; // closed by the caller before the answer came
    throw err;
  }
  const queue: ExecEvent[] = [];
  const parser = createParser({ onEvent: (e) => queue.push(toExecEvent(e.event ?? "message", e.data)) });
  const decoder = new StringDecoder("utf8");
  try {
    for await (const chunk of res.body) {
      parser.feed(decoder.write(chunk as Buffer));
      while (queue.length > 0) yield queue.shift()!;
    }
    parser.feed(decoder.end());
    parser.feed("\n\n"); // a stream cut without its final blank line still yields its last event
    while (queue.length > 0) yield queue.shift()!;
  } catch (err) {
    if (ac.signal.aborted) return; // closed by the caller
    throw transportError(operation, err, ac.signal);
  } finally {
    // Early exit (break, close) or the end: either way the socket is done with.
    if (!res.body.destroyed) res.body.destroy();
  }
}

/** One SSE event as an ExecEvent (see the header for the names). */
export function toExecEvent(event: string, data: string): ExecEvent {
  switch (event) {
    case "start":
    case "started": {
      // The id's key is not published either: the emulator's, and the spellings a Go or Python
      // server would likely use. (The SDK's WebSocket names this message "started".)
      const o = parseObject(data);
      const id = [o?.id, o?.command_id, o?.commandId, o?.context_id].find((v): v is string => typeof v === "string" && v !== "");
      return id !== undefined ? { type: "start", id } : { type: "other", event, data };
    }
    case "stdout":
    case "output":
      return { type: "stdout", text: data };
    case "stderr":
      return { type: "stderr", text: data };
    case "timeout": {
      const ms = parseObject(data)?.timeout_ms;
      return typeof ms === "number" ? { type: "timeout", timeoutMs: ms } : { type: "timeout" };
    }
    case "error": {
      const o = parseObject(data);
      return {
        type: "error",
        ...(typeof o?.name === "string" && { name: o.name }),
        ...(typeof o?.value === "string" ? { value: o.value } : o === undefined && data !== "" ? { value: data } : {}),
      };
    }
    case "end":
    case "done":
    case "exit":
    case "execution_complete": {
      const o = parseObject(data);
      const code = o?.exit_code ?? o?.exitCode;
      return {
        type: "end",
        ...(typeof code === "number" && Number.isInteger(code) && { exitCode: code }),
        ...(typeof o?.status === "string" && { status: o.status }),
      };
    }
    default:
      return { type: "other", event, data };
  }
}

/** What a command's request carries that an error must not quote: its envs' values (envSecrets). */
function commandSecrets(o: CommandOptions): readonly string[] {
  return envSecrets(o.envs, o.secretValues) ?? [];
}

/**
 * A secret file's content as an error would quote it: its text, and without the line break it
 * ends with (a Secret made with --from-file keeps the file's last newline). Bytes that are not
 * UTF-8 are matched as they decode.
 */
function contentSecrets(content: Buffer | string): string[] {
  const text = typeof content === "string" ? content : content.toString("utf8");
  return [...new Set([text, text.trim()])].filter((t) => t !== "");
}

function commandBody(command: string, o: CommandOptions, background: boolean): Record<string, unknown> {
  return {
    command,
    ...(o.cwd !== undefined && { cwd: o.cwd }),
    ...(o.envs !== undefined && { envs: o.envs }),
    ...(o.timeoutMs !== undefined && { timeout_ms: o.timeoutMs }),
    ...(o.uid !== undefined && { uid: o.uid }),
    ...(o.gid !== undefined && { gid: o.gid }),
    ...(background && { background: true }),
  };
}

function parseObject(data: string): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(data);
    return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

function asObject(v: unknown): Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
}

/** Failures below HTTP. undici's messages carry no request data (no token), so they are shown. */
function transportError(operation: string, err: unknown, signal: AbortSignal): ServiceError {
  if (err instanceof ServiceError) return err;
  const e = signal.aborted && signal.reason instanceof Error ? signal.reason : err;
  const code = (e as { code?: unknown } | null)?.code;
  const detail = e instanceof Error && e.message !== "" ? e.message : "network error";
  return new ServiceError({
    operation,
    message: `${operation}: cannot reach the service: ${detail}${typeof code === "string" ? ` (${code})` : ""}`,
    retryable: true,
    outcomeUnknown: true,
    cause: err,
  });
}
