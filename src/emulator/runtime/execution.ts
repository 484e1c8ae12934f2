// One execution (a command, or a code block run in a context): the ordered events it produced,
// kept so that any number of readers (a server-sent event stream, a WebSocket, a test) can
// follow it from the start, whenever they arrive. What is kept is bounded: output beyond the
// limit is not kept (one `truncated` event marks where it was left out), but every reader that is
// attached when output is produced gets all of it, untouched: the limit bounds the emulator's
// memory, never a live stream.
//
// Events (`event`, `data`: the published agentd SSEEvent):
//   start   JSON: {"id"} for a command, {"context_id"} for code
//   stdout  output text, as produced (not split into lines)
//   stderr  output text
//   timeout JSON {"timeout_ms"}: a command ran out of time and was killed (then end)
//   error   JSON {"name","value"}: code raised (its traceback went to stderr; then end)
//   end     JSON: {"exit_code", "status": "ok"|"error", "error"?} for a command (status "ok" for
//           exit code 0; `error` says why it failed: "command exited with code 3"),
//           {"status": "ok"|"error", "error"?} for code ("ZeroDivisionError: ...", "KeyboardInterrupt")
//   truncated JSON {"limit_bytes"}: only in a replay (a reader that arrived late), where output
//           beyond the limit was left out of what is kept; never sent to a live reader (D)
// `end` is always the last event.

export interface ExecEvent {
  event: string;
  data: string;
}

/** Called with each event, then once with undefined when the execution has ended. */
export type ExecListener = (e: ExecEvent | undefined) => void;

export type ExecutionKind = "command" | "code";

export class Execution {
  private readonly _events: ExecEvent[] = [];
  private readonly listeners = new Set<ExecListener>();
  private outputBytes = 0;
  private _truncated = false;
  private _ended = false;
  private readonly endPromise: Promise<void>;
  private resolveEnd!: () => void;

  constructor(
    readonly kind: ExecutionKind,
    /** A command's id, or the code context's id. */
    readonly id: string,
    private readonly limitBytes: number,
  ) {
    this.endPromise = new Promise((resolve) => (this.resolveEnd = resolve));
  }

  get events(): readonly ExecEvent[] {
    return this._events;
  }
  get ended(): boolean {
    return this._ended;
  }
  /** True once output went beyond the limit (the rest is not kept for replay). */
  get truncated(): boolean {
    return this._truncated;
  }

  /** The stdout (or stderr) text kept so far, joined (the first limit bytes of output). */
  text(stream: "stdout" | "stderr"): string {
    return this._events
      .filter((e) => e.event === stream)
      .map((e) => e.data)
      .join("");
  }

  /**
   * Output of one stream: to every attached reader, all of it; kept for later readers up to the
   * limit, then one `truncated` event (kept only: a live reader misses nothing) and no more.
   */
  output(stream: "stdout" | "stderr", text: string): void {
    if (this._ended || text === "") return;
    const e = { event: stream, data: text };
    this.broadcast(e);
    if (this._truncated) return;
    const size = Buffer.byteLength(text);
    if (this.outputBytes + size <= this.limitBytes) {
      this.outputBytes += size;
      this._events.push(e);
      return;
    }
    const head = utf8Prefix(text, this.limitBytes - this.outputBytes);
    if (head !== "") this._events.push({ event: stream, data: head });
    this.outputBytes = this.limitBytes;
    this._truncated = true;
    this._events.push({ event: "truncated", data: JSON.stringify({ limit_bytes: this.limitBytes }) });
  }

  /** A control event (start, timeout, error). */
  emit(event: string, data: unknown): void {
    if (this._ended) return;
    this.push({ event, data: typeof data === "string" ? data : JSON.stringify(data) });
  }

  /** The last event; later calls are ignored. */
  end(data: unknown): void {
    if (this._ended) return;
    this.push({ event: "end", data: JSON.stringify(data) });
    this._ended = true;
    for (const fn of this.listeners) fn(undefined);
    this.listeners.clear();
    this.resolveEnd();
  }

  /** Replays the events so far, then follows; returns the unsubscribe function. */
  subscribe(fn: ExecListener): () => void {
    for (const e of this._events) fn(e);
    if (this._ended) {
      fn(undefined);
      return () => {};
    }
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** Resolves when `end` has been emitted. */
  wait(): Promise<void> {
    return this.endPromise;
  }

  /** The end event's data, parsed; undefined while running. */
  result(): Record<string, unknown> | undefined {
    const last = this._ended ? this._events.at(-1) : undefined;
    return last ? (JSON.parse(last.data) as Record<string, unknown>) : undefined;
  }

  /** Kept, and sent to every attached reader. */
  private push(e: ExecEvent): void {
    this._events.push(e);
    this.broadcast(e);
  }

  private broadcast(e: ExecEvent): void {
    for (const fn of this.listeners) fn(e);
  }
}

/** The longest prefix of `text` of at most `bytes` UTF-8 bytes, never splitting a character. */
function utf8Prefix(text: string, bytes: number): string {
  if (bytes <= 0) return "";
  const buf = Buffer.from(text, "utf8").subarray(0, bytes);
  let end = buf.length;
  // Back off over a trailing partial multi-byte sequence.
  let i = end - 1;
  while (i >= 0 && (buf[i]! & 0xc0) === 0x80) i--;
  if (i >= 0) {
    const lead = buf[i]!;
    const need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
    if (end - i < need) end = i;
  }
  return buf.subarray(0, end).toString("utf8");
}
