// A code context (agentd's "Jupyter kernel session"): one long-lived interpreter process (see
// drivers.ts) that runs code blocks one at a time, in order, in one namespace. Blocks sent while
// one runs wait their turn. An interpreter that dies (os._exit, a crash) fails the block it was
// running and is started afresh, empty, for the next one.
import type { ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { StringDecoder } from "node:string_decoder";
import { newId, rfc3339 } from "../util.js";
import type { Driver } from "./drivers.js";
import { Execution } from "./execution.js";
import { killGroup, signalGroup, spawnGroup } from "./process-group.js";

/** agentd's models.CodeContext. */
export interface CodeContext {
  id: string;
  kernel_id: string;
  language: string;
  session_id: string;
  created_at: string;
}

export interface KernelOptions {
  /** Host directory the interpreter runs in. */
  cwd: string;
  env: Record<string, string>;
  /** The VM's cookie (process-group.ts: killCarrying). */
  cookie: string;
  limitBytes: number;
  now: () => number;
  /** Called when a block is handed to the interpreter (the VM counts executions). */
  onDispatch: () => void;
}

interface Running {
  execution: Execution;
  outDone: boolean;
  errDone: boolean;
  info: { status?: string; ename?: string; evalue?: string };
}

export class Kernel {
  readonly id = newId();
  readonly createdAt: number;
  private kernelId = newId();
  private proc: ChildProcess | undefined;
  private readonly queue: { execution: Execution; code: string }[] = [];
  private current: Running | undefined;
  private closed = false;
  private startError: string | undefined;

  constructor(
    readonly driver: Driver,
    readonly sessionId: string,
    private readonly opts: KernelOptions,
  ) {
    this.createdAt = opts.now();
    this.start();
  }

  get language(): string {
    return this.driver.language;
  }

  /** True while a block runs or waits. */
  get busy(): boolean {
    return this.current !== undefined || this.queue.length > 0;
  }

  view(): CodeContext {
    return { id: this.id, kernel_id: this.kernelId, language: this.language, session_id: this.sessionId, created_at: rfc3339(this.createdAt) };
  }

  /** Queues a block; its Execution starts (a `start` event) when the interpreter takes it. */
  execute(code: string): Execution {
    const execution = new Execution("code", this.id, this.opts.limitBytes);
    if (this.closed) {
      failBlock(execution, "ContextClosed", "the code context was deleted");
      return execution;
    }
    this.queue.push({ execution, code });
    this.next();
    return execution;
  }

  /** Interrupts the running block (SIGINT to the interpreter's group); false when none runs. */
  interrupt(): boolean {
    const pid = this.proc?.pid;
    if (this.current === undefined || pid === undefined) return false;
    return signalGroup(pid, "SIGINT");
  }

  /** Kills the interpreter; the running and waiting blocks end with an error. */
  close(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    const pid = this.proc?.pid;
    this.proc = undefined;
    if (pid !== undefined) killGroup(pid);
    const pending = [...(this.current ? [this.current.execution] : []), ...this.queue.map((q) => q.execution)];
    this.current = undefined;
    this.queue.length = 0;
    for (const e of pending) {
      failBlock(e, "ContextClosed", reason);
    }
  }

  private start(): void {
    const mark = randomBytes(12).toString("hex");
    const marker = Buffer.from(`\x1e${mark}`);
    let proc: ChildProcess;
    try {
      proc = spawnGroup(this.driver.command, this.driver.args, { cwd: this.opts.cwd, env: { ...this.opts.env, EMU_KERNEL_MARK: mark }, stdinPipe: true, cookie: this.opts.cookie });
    } catch (err) {
      // next() fails the block it wanted to run with this message.
      this.proc = undefined;
      this.startError = `cannot start the ${this.language} interpreter: ${(err as Error).message}`;
      return;
    }
    this.proc = proc;
    this.kernelId = newId();
    const out = new MarkerScanner(
      marker,
      (text) => this.current?.execution.output("stdout", text),
      (payload) => {
        if (!this.current) return;
        try {
          this.current.info = JSON.parse(payload) as Running["info"];
        } catch {
          this.current.info = { status: "error", ename: "KernelError", evalue: "unreadable end marker" };
        }
        this.current.outDone = true;
        this.settle();
      },
    );
    const errs = new MarkerScanner(
      marker,
      (text) => this.current?.execution.output("stderr", text),
      () => {
        if (!this.current) return;
        this.current.errDone = true;
        this.settle();
      },
    );
    proc.stdout?.on("data", (b: Buffer) => out.write(b));
    proc.stderr?.on("data", (b: Buffer) => errs.write(b));
    proc.stdin?.on("error", () => {}); // a dead interpreter: "close" below reports it
    let gone = false;
    const onGone = (why: string): void => {
      if (gone) return;
      gone = true;
      if (proc.pid !== undefined) killGroup(proc.pid); // what the interpreter left running
      if (this.proc !== proc) return; // replaced or closed already
      this.proc = undefined;
      this.died(why);
    };
    proc.once("error", (err) => onGone(`cannot start the ${this.language} interpreter: ${err.message}`));
    proc.once("close", (code, signal) => onGone(`the ${this.language} interpreter exited (${signal ?? `code ${code}`})`));
  }

  /** The interpreter is gone: fail the running block; the next block gets a fresh one. */
  private died(why: string): void {
    const cur = this.current;
    this.current = undefined;
    if (cur) {
      failBlock(cur.execution, "KernelDied", why);
    }
    if (!this.closed && this.queue.length > 0) {
      this.start();
      this.next();
    }
  }

  private settle(): void {
    const cur = this.current;
    if (!cur || !cur.outDone || !cur.errDone) return;
    this.current = undefined;
    if (cur.info.status === "ok") cur.execution.end({ status: "ok" });
    // An interrupted block fails as a Jupyter kernel's does: status error, KeyboardInterrupt.
    else failBlock(cur.execution, cur.info.ename ?? "Error", cur.info.evalue ?? "");
    this.next();
  }

  private next(): void {
    if (this.closed || this.current !== undefined) return;
    const item = this.queue.shift();
    if (!item) return;
    if (this.proc === undefined) this.start();
    const proc = this.proc;
    if (proc?.stdin == null) {
      failBlock(item.execution, "KernelDied", this.startError ?? `the ${this.language} interpreter is not running`);
      return this.next();
    }
    this.current = { execution: item.execution, outDone: false, errDone: false, info: {} };
    this.opts.onDispatch();
    item.execution.emit("start", { context_id: this.id });
    proc.stdin.write(`${JSON.stringify({ code: item.code })}\n`);
  }
}

/**
 * Splits a byte stream into text and end markers (`marker` + payload + "\n"), holding back a
 * possible partial marker at the end of a chunk until the next one decides.
 */
export class MarkerScanner {
  private pending: Buffer = Buffer.alloc(0);
  private decoder = new StringDecoder("utf8");

  constructor(
    private readonly marker: Buffer,
    private readonly onText: (text: string) => void,
    private readonly onMarker: (payload: string) => void,
  ) {}

  write(chunk: Buffer): void {
    let buf = this.pending.length > 0 ? Buffer.concat([this.pending, chunk]) : chunk;
    this.pending = Buffer.alloc(0);
    for (;;) {
      const i = buf.indexOf(this.marker);
      if (i < 0) break;
      const nl = buf.indexOf(0x0a, i + this.marker.length);
      this.text(buf.subarray(0, i));
      if (nl < 0) {
        this.pending = Buffer.from(buf.subarray(i));
        return;
      }
      const rest = this.decoder.end();
      if (rest !== "") this.onText(rest);
      this.decoder = new StringDecoder("utf8");
      this.onMarker(buf.subarray(i + this.marker.length, nl).toString("utf8"));
      buf = buf.subarray(nl + 1);
    }
    const keep = partialSuffix(buf, this.marker);
    this.text(buf.subarray(0, buf.length - keep));
    if (keep > 0) this.pending = Buffer.from(buf.subarray(buf.length - keep));
  }

  private text(bytes: Buffer): void {
    if (bytes.length === 0) return;
    const s = this.decoder.write(bytes);
    if (s !== "") this.onText(s);
  }
}

/** How many bytes at the end of `buf` are a proper prefix of `marker`. */
function partialSuffix(buf: Buffer, marker: Buffer): number {
  for (let k = Math.min(marker.length - 1, buf.length); k > 0; k--) {
    if (buf.subarray(buf.length - k).equals(marker.subarray(0, k))) return k;
  }
  return 0;
}

/**
 * A block that did not succeed: an `error` event {name, value}, then `end` with status "error"
 * (the official SDK knows ok and error only) and an `error` message ("ZeroDivisionError:
 * division by zero", "KeyboardInterrupt", as the ws_url's `error` message says it), the key the
 * SDK's parser reads besides `status`.
 */
function failBlock(execution: Execution, name: string, value: string): void {
  execution.emit("error", { name, value });
  execution.end({ status: "error", error: value !== "" ? `${name}: ${value}` : name });
}
