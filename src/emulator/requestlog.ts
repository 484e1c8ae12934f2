// The request log tests assert on, bounded for long benchmarks: the newest entries are kept
// (trimmed a tenth at a time, so trimming is amortised O(1)), while counters by operation and
// status count everything until clear().
import type { IncomingMessage } from "node:http";
import type { RequestLogEntry, RequestStats } from "./options.js";

/** What the log keeps of a request, read the same way for HTTP calls and WebSocket upgrades. */
export function requestLine(req: IncomingMessage): Pick<RequestLogEntry, "method" | "path" | "query" | "userAgent"> {
  const url = req.url ?? "/";
  const q = url.indexOf("?");
  const userAgent = req.headers["user-agent"];
  return {
    method: (req.method ?? "GET").toUpperCase(),
    path: q < 0 ? url : url.slice(0, q),
    query: q < 0 ? "" : url.slice(q + 1),
    ...(userAgent !== undefined && { userAgent }),
  };
}

export class RequestLog {
  readonly entries: RequestLogEntry[] = [];
  private total = 0;
  private readonly byOperation = new Map<string, number>();
  private readonly byStatus = new Map<string, number>();

  constructor(private readonly limit: () => number) {}

  add(entry: RequestLogEntry): void {
    const cap = this.limit();
    this.entries.push(entry);
    if (this.entries.length > cap) this.entries.splice(0, this.entries.length - cap + Math.floor(cap / 10));
    this.total++;
    this.byOperation.set(entry.operation, (this.byOperation.get(entry.operation) ?? 0) + 1);
    const status = String(entry.status);
    this.byStatus.set(status, (this.byStatus.get(status) ?? 0) + 1);
  }

  clear(): void {
    this.entries.length = 0;
    this.total = 0;
    this.byOperation.clear();
    this.byStatus.clear();
  }

  stats(): RequestStats {
    return {
      total: this.total,
      byOperation: Object.fromEntries(this.byOperation),
      byStatus: Object.fromEntries(this.byStatus),
    };
  }
}
