// One HTTP attempt over undici: a single keep-alive `Agent` per client (a Pool per origin, so
// the service and the token service each get up to `maxConnections` sockets), a per-attempt
// deadline, and failures turned into a TransportError that says whether the request can
// have reached the service. Retries, auth and parsing live above this layer.

import { ServiceDispatchers } from "./dispatcher.js";
import { isNotSentCode, isTLSCode } from "./retry.js";

export type HttpMethod = "GET" | "POST" | "PUT" | "DELETE";

export interface TransportOptions {
  timeoutMs: number;
  maxConnections: number;
  insecureSkipTLSVerify?: boolean;
  /** PEM text, or a path to a PEM file. */
  caCert?: string;
}

export interface HttpRequest {
  origin: string;
  path: string;
  method: HttpMethod;
  headers: Record<string, string>;
  body?: string;
  /** This attempt's deadline, when shorter than the transport's timeoutMs. */
  timeoutMs?: number;
}

export interface HttpResponse {
  status: number;
  statusText: string;
  /** Lower-cased names. */
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

/** A failure below HTTP: no status line was received (or the body was cut off). */
export class TransportError extends Error {
  override readonly name = "TransportError";
  constructor(
    message: string,
    /** "no": certainly not sent (refused, DNS, connect timeout); "maybe": it may have been processed. */
    readonly sent: "no" | "maybe",
    /** Retrying cannot help (TLS verification, client closed). */
    readonly permanent: boolean,
    readonly timeout: boolean,
    readonly code: string | undefined,
    cause: unknown,
  ) {
    super(message, { cause });
  }
}

export class HttpTransport {
  private readonly dispatchers: ServiceDispatchers;
  private readonly timeoutMs: number;

  constructor(o: TransportOptions) {
    this.timeoutMs = o.timeoutMs;
    this.dispatchers = new ServiceDispatchers({
      connections: o.maxConnections,
      // Backstops to the per-attempt AbortSignal deadline (undici's default is 300 s).
      headersTimeoutMs: o.timeoutMs,
      bodyTimeoutMs: o.timeoutMs,
      insecureSkipTLSVerify: o.insecureSkipTLSVerify,
      caCert: o.caCert,
    });
  }

  async send(req: HttpRequest): Promise<HttpResponse> {
    // A total deadline for the attempt (queueing in the pool, connect, headers and body). Our
    // own timer rather than AbortSignal.timeout(): it is cleared when the answer is in, so
    // at 200 req/s there are not thousands of spent 30 s timers waiting to fire.
    const timeoutMs = Math.min(req.timeoutMs ?? this.timeoutMs, this.timeoutMs);
    const ac = new AbortController();
    const timer = setTimeout(abortWithTimeout, timeoutMs, ac);
    try {
      const res = await this.dispatchers.for(req.origin).request({
        origin: req.origin,
        path: req.path,
        method: req.method,
        headers: req.headers,
        body: req.body ?? null,
        signal: ac.signal,
      });
      // Always consume the body so that the socket goes back to the pool.
      const text = await res.body.text();
      return { status: res.statusCode, statusText: res.statusText, headers: res.headers, text };
    } catch (e) {
      throw toTransportError(e, timeoutMs);
    } finally {
      clearTimeout(timer);
    }
  }

  close(): Promise<void> {
    return this.dispatchers.close();
  }
}

/** One shared abort reason: undici rejects with it, and it carries no request data. */
const TIMEOUT_REASON = Object.assign(new Error("request timed out"), { name: "TimeoutError" });

function abortWithTimeout(ac: AbortController): void {
  ac.abort(TIMEOUT_REASON);
}

function errCode(e: unknown): string | undefined {
  if (e !== null && typeof e === "object" && "code" in e) {
    const c = (e as { code: unknown }).code;
    if (typeof c === "string") return c;
  }
  return undefined;
}

function toTransportError(e: unknown, timeoutMs: number): TransportError {
  const code = errCode(e) ?? errCode(e instanceof Error ? e.cause : undefined);
  const name = e instanceof Error ? e.name : "";
  if (e === TIMEOUT_REASON || name === "TimeoutError" || code === "UND_ERR_HEADERS_TIMEOUT" || code === "UND_ERR_BODY_TIMEOUT") {
    return new TransportError(`no answer within ${timeoutMs} ms`, "maybe", false, true, code ?? "TIMEOUT", e);
  }
  if (code === "UND_ERR_CONNECT_TIMEOUT") {
    return new TransportError("connect timed out", "no", false, true, code, e);
  }
  if (code === "UND_ERR_CLOSED" || code === "UND_ERR_DESTROYED") {
    return new TransportError("service client closed", "no", true, false, code, e);
  }
  if (isTLSCode(code)) {
    return new TransportError(`TLS verification failed (${code})`, "no", true, false, code, e);
  }
  if (isNotSentCode(code)) {
    const what = code === "ECONNREFUSED" ? "connection refused" : "cannot reach the service";
    return new TransportError(`${what} (${code})`, "no", false, false, code, e);
  }
  // Sockets closed or reset mid-request, parser errors: the request may have been processed.
  // undici's messages here ("other side closed") carry no request data, so they are safe to show.
  const detail = e instanceof Error && e.message !== "" ? e.message : "network error";
  const what = code === "UND_ERR_SOCKET" || code === "ECONNRESET" || code === "EPIPE" ? "connection lost" : "network error";
  return new TransportError(`${what}: ${detail}${code !== undefined ? ` (${code})` : ""}`, "maybe", false, false, code, e);
}
