// Bodies written over time: server-sent event streams (the agentd SSEEvent: `event` and `data`
// lines) and file downloads.
import { createReadStream } from "node:fs";
import type { ServerResponse } from "node:http";
import { StreamBody } from "../http.js";
import type { ExecEvent, Execution } from "./execution.js";

/** A comment line every so often keeps idle proxies from closing a long stream. */
const KEEPALIVE_MS = 15_000;

/**
 * A live reader that has stopped reading (its connection still open) is cut once
 * `maxUnreadBytes` wait for it and none of it has gone out for `stalledMs`: it must not make the emulator
 * buffer a command's whole output (docs/emulator.md, decision 36). A reader that reads, however
 * slowly, is never cut.
 */
export const STREAM_LIMITS = { maxUnreadBytes: 64 << 20, stalledMs: 10_000 };

/** Tells a stalled reader from a slow one: fed what was queued for it and what still waits, at each send. */
export class StallWatch {
  private queued = 0;
  private sentSoFar = 0;
  private lastProgress: number;

  constructor(private readonly now: () => number = Date.now) {
    this.lastProgress = now();
  }

  /** True when the reader should be cut: over the limit, and nothing went out for `stalledMs`. */
  stalled(adding: number, unread: number): boolean {
    this.queued += adding;
    const sent = this.queued - unread;
    const now = this.now();
    if (sent > this.sentSoFar) {
      this.sentSoFar = sent;
      this.lastProgress = now;
    }
    return unread > STREAM_LIMITS.maxUnreadBytes && now - this.lastProgress > STREAM_LIMITS.stalledMs;
  }
}

/** One event in the text/event-stream format; a multi-line `data` becomes several data lines. */
export function formatSSE(e: ExecEvent): string {
  return `event: ${e.event}\n${e.data
    .split(/\r\n|\r|\n/)
    .map((line) => `data: ${line}\n`)
    .join("")}\n`;
}

export interface SSESink {
  send(e: ExecEvent): void;
  end(): void;
}

/**
 * A text/event-stream answer fed by `source`, which starts when the answer goes out (so an answer
 * that a fault rule drops subscribes to nothing) and returns its cleanup.
 */
export class SSEBody extends StreamBody {
  readonly contentType = "text/event-stream";
  override readonly headers = { "cache-control": "no-cache", "x-accel-buffering": "no" };

  constructor(private readonly source: (sink: SSESink) => () => void) {
    super();
  }

  /** The same stream without the events `drop` picks. */
  without(drop: (e: ExecEvent) => boolean): SSEBody {
    return new SSEBody((sink) => this.source({ send: (e) => drop(e) || sink.send(e), end: () => sink.end() }));
  }

  /** The same stream with each event passed through `fn`. */
  map(fn: (e: ExecEvent) => ExecEvent): SSEBody {
    return new SSEBody((sink) => this.source({ send: (e) => sink.send(fn(e)), end: () => sink.end() }));
  }

  writeTo(res: ServerResponse): void {
    let done = false;
    let cleanup: () => void = () => {};
    const watch = new StallWatch();
    const cut = (): void => {
      stop();
      res.destroy();
    };
    const keepalive = setInterval(() => {
      // Also looked at while the command is quiet: a stalled reader is not kept for the next output.
      if (watch.stalled(0, res.writableLength)) cut();
      else res.write(": keepalive\n\n");
    }, KEEPALIVE_MS);
    keepalive.unref();
    const stop = (): void => {
      if (done) return;
      done = true;
      clearInterval(keepalive);
      cleanup();
    };
    res.once("close", stop);
    res.flushHeaders();
    cleanup = this.source({
      send: (e) => {
        if (done) return;
        const text = formatSSE(e);
        if (watch.stalled(Buffer.byteLength(text), res.writableLength)) cut();
        else res.write(text);
      },
      end: () => {
        if (done) return;
        stop();
        res.end();
      },
    });
    if (done) cleanup();
  }
}

/** The events of an execution, from its start, until it ends. */
export function executionSSE(execution: Execution): SSEBody {
  return new SSEBody((sink) => execution.subscribe((e) => (e ? sink.send(e) : sink.end())));
}

/** A fixed list of events, then the end of the stream. */
export function eventsSSE(events: readonly ExecEvent[]): SSEBody {
  return new SSEBody((sink) => {
    for (const e of events) sink.send(e);
    sink.end();
    return () => {};
  });
}

/**
 * A file's bytes (application/octet-stream): exactly the `size` its stat counted, which the
 * Content-Length announces. A file that grows meanwhile sends its first `size` bytes (never more
 * than announced: extra bytes would be read as the next answer on a kept-alive connection); one
 * that shrinks cannot fill the announced length, so the connection is cut (the client sees an
 * incomplete body at once instead of waiting for bytes that never come).
 */
export class FileBody extends StreamBody {
  readonly contentType = "application/octet-stream";
  override readonly headers: Record<string, string>;

  constructor(
    private readonly file: string,
    private readonly size: number,
    name: string,
  ) {
    super();
    this.headers = { "content-length": String(size), "content-disposition": `attachment; filename*=UTF-8''${encodeURIComponent(name)}` };
  }

  writeTo(res: ServerResponse): void {
    if (this.size === 0) {
      res.end();
      return;
    }
    const stream = createReadStream(this.file, { start: 0, end: this.size - 1 });
    let sent = 0;
    stream.on("data", (chunk) => (sent += chunk.length));
    stream.once("error", () => res.destroy());
    stream.once("end", () => (sent === this.size ? res.end() : res.destroy()));
    res.once("close", () => stream.destroy());
    stream.pipe(res, { end: false });
  }
}
