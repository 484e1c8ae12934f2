// The allocation's ws_url: a WebSocket to the VM's runtime on the emulator's own HTTP server,
// at /compute/v1/vms/{id}/ws, speaking the official SDK's protocol (SERVICE.md, "Executing work
// in a VM"):
//
//   connect with `Authorization: Bearer <the account's access token>` (401 before the upgrade
//   otherwise; 404 for an unknown or gone VM). The upgrade meets the rate limit, fault rules,
//   random errors and latency as any request does, and is logged as `vms.ws` (status 101).
//   server -> {"type":"connected","data":"<code context id>"}   (the VM's python context)
//   client -> {"type":"execute","code":"...","language":"python","context_id":"..."}
//             (language and context_id optional: default python / the VM's context for it)
//   client -> {"type":"command","command":"...", "cwd"?, "envs"?, "timeout_ms"?}
//   server -> {"type":"started","data":"<command id | context id>"}
//             {"type":"stdout","data":"<one line, without its newline>"}   (and "stderr")
//             then {"type":"done","data":""} on success, or {"type":"error","data":"<why>"};
//             a command's final message also carries "exit_code".
// Messages are handled one at a time, in order. A malformed message gets an `error` message and
// the connection stays open. The connection closes (1001) when the VM is released, deleted or
// expires. Closing the connection does not stop what it started: a command runs on (its status
// is at r/v1/commands/{id}/status), a code block finishes in its context.
import { STATUS_CODES, type IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import { WebSocketServer, type RawData, type WebSocket } from "ws";
import type { TokenStore } from "../auth.js";
import { errorBody, ServiceError } from "../errors.js";
import type { RequestLogEntry } from "../options.js";
import { requestLine } from "../requestlog.js";
import { driverFor } from "../runtime/drivers.js";
import type { Execution } from "../runtime/execution.js";
import { StallWatch } from "../runtime/streams.js";
import type { RuntimeManager } from "../runtime/manager.js";
import type { VMRuntime } from "../runtime/vm-runtime.js";
import type { EmulatorState } from "../state.js";
import { isObject } from "../validate.js";
import { startCommand } from "./agentd.js";

/** What the server decided for a request on arrival (server.ts's Outcome). */
export type Admission =
  | { kind: "answer"; status: number; body: unknown; headers: Record<string, string> }
  | { kind: "drop" }
  | { kind: "handle"; after?: "drop" | { delayMs: number } };

export interface WebSocketDeps {
  state: EmulatorState;
  tokens: TokenStore;
  runtimes: RuntimeManager;
  /** Rate limit, fault rules, random errors, then the latency knob: as for every request. */
  admit(method: string, path: string): Promise<Admission>;
  log(entry: RequestLogEntry): void;
  now(): number;
  sleep(ms: number): Promise<void>;
  isClosed(): boolean;
}

export const WS_OPERATION = "vms.ws";
const WS_PATH = /^\/compute\/v1\/vms\/([^/]+)\/ws$/;

/** The path of a VM's WebSocket on the emulator's server. */
export const wsPath = (vmId: string): string => `/compute/v1/vms/${encodeURIComponent(vmId)}/ws`;

export interface WsMessage {
  type: string;
  data: string;
  exit_code?: number;
}

export class WebSocketEndpoint {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: 16 << 20 });

  constructor(private readonly deps: WebSocketDeps) {}

  /** For the HTTP server's "upgrade" event. */
  onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on("error", () => {}); // a client that goes away mid-handshake
    this.upgrade(req, socket, head).catch((err: unknown) => {
      console.error("emulator: WebSocket upgrade failed:", err);
      socket.destroy();
    });
  }

  /** Ends every connection. */
  close(): void {
    for (const ws of this.wss.clients) ws.terminate();
    this.wss.close();
  }

  private async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const time = this.deps.now();
    const line = requestLine(req);
    const { method, path } = line;
    const m = WS_PATH.exec(path);
    const operation = m ? WS_OPERATION : "route.not_found";
    const record = (status: number | "dropped"): void => this.deps.log({ time, ...line, status, operation });
    const reject = (status: number, body: unknown, headers: Record<string, string> = {}): void => {
      writeRaw(socket, status, body, headers);
      record(status);
    };
    const fail = (err: ServiceError): void => reject(err.status, errorBody("compute", err.status, err.code, err.message), err.headers);

    if (!m) return fail(new ServiceError(404, "not_found", `no route for ${method} ${path}`));
    if (method !== "GET") return fail(new ServiceError(405, "method_not_allowed", `method ${method} is not allowed on ${path} (allowed: GET)`, { Allow: "GET" }));
    const outcome = await this.deps.admit(method, path);
    if (this.deps.isClosed() || outcome.kind === "drop") {
      socket.destroy();
      return record("dropped");
    }
    if (outcome.kind === "answer") return reject(outcome.status, outcome.body, outcome.headers);
    let runtime: VMRuntime | undefined;
    try {
      this.deps.tokens.check(req.headers.authorization);
      const id = decodeURIComponent(m[1]!);
      this.deps.state.getVM(id); // 404 for an unknown, released or expired VM
      runtime = this.deps.runtimes.get(id);
      if (!runtime) throw new ServiceError(502, "bad_gateway", `vm ${id} has no runtime running`);
    } catch (err) {
      if (err instanceof ServiceError) return fail(err);
      if (err instanceof URIError) return fail(new ServiceError(404, "not_found", `no route for ${method} ${path}`));
      throw err;
    }
    if (outcome.after !== undefined && outcome.after !== "drop") await this.deps.sleep(outcome.after.delayMs);
    if (this.deps.isClosed() || socket.destroyed) {
      socket.destroy();
      return record("dropped");
    }
    const rt = runtime;
    this.wss.handleUpgrade(req, socket, head, (ws) => {
      if (outcome.after === "drop") {
        ws.terminate();
        return record("dropped");
      }
      record(101);
      new Session(ws, rt);
    });
  }
}

/** One connection: messages handled in order against one VM's runtime. */
class Session {
  private chain: Promise<void> = Promise.resolve();
  private readonly stallWatch = new StallWatch();
  private stopFollowing: (() => void) | undefined;

  constructor(
    private readonly ws: WebSocket,
    private readonly rt: VMRuntime,
  ) {
    const offClose = rt.onClose(() => {
      this.send({ type: "error", data: "the VM is gone" });
      ws.close(1001, "the VM is gone");
    });
    ws.on("error", () => {});
    ws.on("close", () => {
      offClose();
      this.stopFollowing?.();
    });
    ws.on("message", (data: RawData, isBinary: boolean) => {
      this.chain = this.chain.then(() => this.handle(data, isBinary)).catch((err: unknown) => this.send({ type: "error", data: messageOf(err) }));
    });
    if (rt.closed) return;
    try {
      this.send({ type: "connected", data: rt.defaultContext("python").id });
    } catch (err) {
      this.send({ type: "error", data: messageOf(err) });
      ws.close(1011, "no code context");
    }
  }

  private send(msg: WsMessage): void {
    if (this.ws.readyState !== this.ws.OPEN) return;
    const text = JSON.stringify(msg);
    // A client that stops reading is cut rather than buffered for (as a server-sent stream's).
    if (this.stallWatch.stalled(Buffer.byteLength(text), this.ws.bufferedAmount)) {
      this.ws.terminate();
      return;
    }
    this.ws.send(text);
  }

  private async handle(data: RawData, isBinary: boolean): Promise<void> {
    let msg: unknown;
    try {
      msg = isBinary ? undefined : JSON.parse(rawText(data));
    } catch {
      msg = undefined;
    }
    if (!isObject(msg)) return this.send({ type: "error", data: "a message must be a JSON object with a type" });
    switch (msg["type"]) {
      case "execute": {
        const code = msg["code"];
        if (typeof code !== "string") return this.send({ type: "error", data: "code is required (a string)" });
        if (code.trim() === "") return this.send({ type: "error", data: "code must not be empty" });
        const language = typeof msg["language"] === "string" && msg["language"] !== "" ? msg["language"] : undefined;
        const contextId = typeof msg["context_id"] === "string" && msg["context_id"] !== "" ? msg["context_id"] : undefined;
        const kernel = contextId !== undefined ? this.rt.context(contextId) : this.rt.defaultContext(language ?? "python");
        if (!kernel) return this.send({ type: "error", data: `code context ${contextId} not found` });
        if (language !== undefined && driverFor(language)?.language !== kernel.language) {
          return this.send({ type: "error", data: `code context ${kernel.id} runs ${kernel.language}, not ${language}` });
        }
        return this.follow(kernel.execute(code));
      }
      case "command": {
        const { command } = await startCommand(msg, this.rt);
        return this.follow(command.execution);
      }
      default:
        return this.send({ type: "error", data: `unknown message type ${JSON.stringify(msg["type"])} (expected "execute" or "command")` });
    }
  }

  /** Relays an execution as started / stdout / stderr lines / done or error. */
  private follow(execution: Execution): Promise<void> {
    return new Promise((resolve) => {
      const lines = { stdout: new LineSplitter(), stderr: new LineSplitter() };
      let error: { name?: string; value?: string } | undefined;
      const flush = (): void => {
        for (const s of ["stdout", "stderr"] as const) for (const line of lines[s].flush()) this.send({ type: s, data: line });
      };
      let finished = false;
      const finish = (): void => {
        if (finished) return;
        finished = true;
        this.stopFollowing = undefined;
        resolve();
      };
      const unsubscribe = execution.subscribe((e) => {
        if (!e) return finish();
        const data = (): Record<string, unknown> => JSON.parse(e.data) as Record<string, unknown>;
        switch (e.event) {
          case "start":
            this.send({ type: "started", data: String(data()["id"] ?? data()["context_id"] ?? "") });
            break;
          case "stdout":
          case "stderr":
            for (const line of lines[e.event].push(e.data)) this.send({ type: e.event, data: line });
            break;
          case "timeout": // the end event says so (its error)
            break;
          case "error":
            error = data() as typeof error;
            break;
          case "end": {
            flush();
            const end = data();
            if (execution.kind === "command") {
              // The end event's status and error (runtime/commands.ts commandEnd) are the SSE
              // transports' words for the same outcome: both transports say it alike.
              const exitCode = Number(end["exit_code"]);
              if (end["status"] === "ok") this.send({ type: "done", data: "", exit_code: exitCode });
              else this.send({ type: "error", data: typeof end["error"] === "string" ? end["error"] : `command exited with code ${exitCode}`, exit_code: exitCode });
            } else if (end["status"] === "ok") {
              this.send({ type: "done", data: "" });
            } else {
              const name = error?.name ?? String(end["status"]);
              this.send({ type: "error", data: error?.value ? `${name}: ${error.value}` : name });
            }
            break;
          }
        }
      });
      this.stopFollowing = () => {
        unsubscribe();
        finish();
      };
      if (finished) this.stopFollowing = undefined;
    });
  }
}

/** Splits text into lines (without "\n" or "\r\n"), holding an unfinished line back. */
export class LineSplitter {
  private rest = "";

  push(text: string): string[] {
    const parts = (this.rest + text).split("\n");
    this.rest = parts.pop() ?? "";
    return parts.map((l) => (l.endsWith("\r") ? l.slice(0, -1) : l));
  }

  flush(): string[] {
    const r = this.rest;
    this.rest = "";
    return r === "" ? [] : [r];
  }
}

function rawText(data: RawData): string {
  if (Array.isArray(data)) return Buffer.concat(data).toString("utf8");
  return Buffer.from(data as ArrayBuffer).toString("utf8");
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** An HTTP answer on a socket that was asking to upgrade, then the end of it. */
function writeRaw(socket: Duplex, status: number, body: unknown, headers: Record<string, string>): void {
  if (socket.destroyed) return;
  const isText = typeof body === "string";
  const text = body === undefined ? "" : isText ? body : JSON.stringify(body);
  const lines = [
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ""}`,
    `Content-Type: ${isText ? "text/plain; charset=utf-8" : "application/json"}`,
    `Content-Length: ${Buffer.byteLength(text)}`,
    "Connection: close",
    ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
  ];
  socket.end(`${lines.join("\r\n")}\r\n\r\n${text}`);
}
