// Route table and matcher. A route names its operation (the request log's stable name) and
// whether it needs a bearer token. Handlers on in-memory state are synchronous; those that reach
// a VM's runtime (files, processes) may return a promise.
import type { IncomingHttpHeaders } from "node:http";
import type { JsonObject } from "./wire.js";
import type { TokenStore } from "./auth.js";
import type { ResolvedOptions } from "./options.js";
import type { EmulatorState } from "./state.js";
import type { RuntimeManager } from "./runtime/manager.js";

export interface HandlerContext {
  params: Record<string, string>;
  query: URLSearchParams;
  headers: IncomingHttpHeaders;
  /**
   * The parsed JSON body; {} when empty, or 400 when empty and `required` (the published model's
   * name) says the operation's requestBody is required; 400 when malformed or not an object.
   */
  body(required?: string): JsonObject;
  state: EmulatorState;
  tokens: TokenStore;
  options: Readonly<ResolvedOptions>;
  /** When this emulator started (emulator clock, ms). */
  startedAt: number;
  method: string;
  /** The body as received (multipart uploads, JSON arrays); `body()` parses it as a JSON object. */
  raw: Buffer;
  /** The VMs' local runtimes (agentd). */
  runtimes: RuntimeManager;
}

export interface HandlerResult {
  status: number;
  /** JSON, a string, or a StreamBody (server-sent events, a file). */
  body?: unknown;
  headers?: Record<string, string>;
}

/** Most handlers answer at once; those that touch the disk or a VM runtime are async. */
export type Handler = (ctx: HandlerContext) => HandlerResult | Promise<HandlerResult>;

export interface Route {
  method: string;
  /**
   * e.g. "/compute/v1/vms/:id/renew". A last segment "*name" matches one or more remaining
   * segments, decoded and joined with "/" (e.g. "/compute/v1/vms/:id/r/*path").
   */
  pattern: string;
  operation: string;
  /** Needs `Authorization: Bearer`; false only for the token endpoint. */
  auth: boolean;
  handler: Handler;
  /** Body size limit; default MAX_BODY_BYTES (1 MiB). */
  maxBodyBytes?: number;
}

export type Match =
  | { kind: "ok"; route: Route; params: Record<string, string> }
  | { kind: "not_found" }
  | { kind: "method_not_allowed"; allow: string[] };

interface Compiled {
  route: Route;
  /** Fixed-depth segments; for a wildcard route, those before the wildcard. */
  segments: string[];
  /** The wildcard's parameter name, for a route ending in "*name". */
  rest?: string;
}

export class Router {
  /** Grouped by segment count so a request only looks at routes of its own depth. */
  private readonly byDepth = new Map<number, Compiled[]>();
  /** Trailing-wildcard routes: tried after the fixed-depth ones, which are more specific. */
  private readonly wildcards: Compiled[] = [];

  constructor(routes: readonly Route[]) {
    for (const route of routes) {
      const segments = route.pattern.split("/").slice(1);
      const last = segments.at(-1);
      if (last?.startsWith("*")) {
        this.wildcards.push({ route, segments: segments.slice(0, -1), rest: last.slice(1) });
        continue;
      }
      const list = this.byDepth.get(segments.length) ?? [];
      list.push({ route, segments });
      this.byDepth.set(segments.length, list);
    }
  }

  /** The first matching route wins, so literal routes (e.g. /agents/search) go before /:id. */
  match(method: string, path: string): Match {
    const parts = path.split("/").slice(1);
    const allow = new Set<string>();
    for (const { route, segments } of this.byDepth.get(parts.length) ?? []) {
      const params = matchSegments(segments, parts);
      if (!params) continue;
      if (route.method === method) return { kind: "ok", route, params };
      allow.add(route.method);
    }
    for (const { route, segments, rest } of this.wildcards) {
      if (parts.length <= segments.length) continue;
      const params = matchSegments(segments, parts.slice(0, segments.length));
      const tail = params && decodeAll(parts.slice(segments.length));
      if (!params || tail === undefined || tail === "") continue;
      if (route.method === method) return { kind: "ok", route, params: { ...params, [rest!]: tail } };
      allow.add(route.method);
    }
    return allow.size > 0 ? { kind: "method_not_allowed", allow: [...allow] } : { kind: "not_found" };
  }
}

function decode(part: string): string | undefined {
  try {
    return decodeURIComponent(part);
  } catch {
    return undefined; // malformed %-escape: no object can have that name
  }
}

function decodeAll(parts: readonly string[]): string | undefined {
  const out: string[] = [];
  for (const p of parts) {
    const d = decode(p);
    if (d === undefined) return undefined;
    out.push(d);
  }
  return out.join("/");
}

function matchSegments(pattern: readonly string[], parts: readonly string[]): Record<string, string> | undefined {
  const params: Record<string, string> = {};
  for (let i = 0; i < pattern.length; i++) {
    const p = pattern[i]!;
    const part = parts[i]!;
    if (p.startsWith(":")) {
      if (part === "") return undefined;
      const value = decode(part);
      if (value === undefined) return undefined;
      params[p.slice(1)] = value;
    } else if (p !== part) {
      return undefined;
    }
  }
  return params;
}
