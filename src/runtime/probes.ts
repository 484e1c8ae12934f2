// Small HTTP servers for the kubelet and Prometheus (controller-runtime's metrics server and
// healthz package): /metrics on the metrics address; /healthz and /readyz on the health
// address. Each named check runs on every request; the answer is 200 "ok" or 500 with the
// failing checks listed (?verbose lists all of them), as controller-runtime's healthz does.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { errorMessage } from "../lib/errors.js";
import type { Metrics } from "./metrics.js";

/** A health check: resolve/return true (or void) when healthy; false or throw when not. */
export type Check = () => boolean | void | Promise<boolean | void>;

export interface BoundAddress {
  host: string;
  port: number;
  /** "host:port" (IPv6 hosts in brackets) */
  address: string;
}

/** Parse ":8080", "127.0.0.1:0", "[::1]:8081", "0" into host/port ("" host = all interfaces). */
export function parseBindAddress(addr: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d+)$/.exec(addr.trim());
  if (m) return { host: m[1] ?? m[2] ?? "", port: Number(m[3]) };
  if (/^\d+$/.test(addr.trim())) return { host: "", port: Number(addr) };
  throw new Error(`invalid bind address "${addr}" (want host:port, e.g. :8080 or 127.0.0.1:0)`);
}

function formatAddress(a: AddressInfo): BoundAddress {
  const host = a.address;
  const hostPart = host.includes(":") ? `[${host}]` : host;
  return { host, port: a.port, address: `${hostPart}:${a.port}` };
}

export type Handler = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>;

/** One node:http server with a route table; listen() resolves with the bound address. */
export class ProbeServer {
  private readonly server: Server;
  private readonly routes = new Map<string, Handler>();
  private bound: BoundAddress | undefined;

  constructor(private readonly bindAddress: string) {
    this.server = createServer((req, res) => {
      const url = new URL(req.url ?? "/", "http://localhost");
      const handler = this.routes.get(url.pathname);
      if (!handler || (req.method !== "GET" && req.method !== "HEAD")) {
        res.writeHead(handler ? 405 : 404, { "content-type": "text/plain; charset=utf-8" }).end(handler ? "method not allowed\n" : "not found\n");
        return;
      }
      Promise.resolve()
        .then(() => handler(req, res))
        .catch((err: unknown) => {
          if (!res.headersSent) res.writeHead(500, { "content-type": "text/plain; charset=utf-8" });
          res.end(`internal error: ${errorMessage(err)}\n`);
        });
    });
    // Probes are tiny; a slow client must not hold sockets for long.
    this.server.requestTimeout = 10_000;
    this.server.headersTimeout = 10_000;
    this.server.keepAliveTimeout = 5_000;
  }

  route(path: string, handler: Handler): this {
    this.routes.set(path, handler);
    return this;
  }

  async listen(): Promise<BoundAddress> {
    const { host, port } = parseBindAddress(this.bindAddress);
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error): void => reject(err);
      this.server.once("error", onError);
      const done = (): void => {
        this.server.off("error", onError);
        resolve();
      };
      if (host) this.server.listen(port, host, done);
      else this.server.listen(port, done);
    });
    this.bound = formatAddress(this.server.address() as AddressInfo);
    return this.bound;
  }

  address(): BoundAddress | undefined {
    return this.bound;
  }

  async close(): Promise<void> {
    if (!this.server.listening) return;
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }
}

/** Named checks rendered the way controller-runtime's healthz handler does. */
export class HealthChecks {
  private readonly checks = new Map<string, Check>();

  add(name: string, check: Check): this {
    this.checks.set(name, check);
    return this;
  }

  async run(): Promise<{ ok: boolean; results: { name: string; ok: boolean; error?: string }[] }> {
    const results = await Promise.all(
      [...this.checks].map(async ([name, check]) => {
        try {
          const r = await check();
          return r === false ? { name, ok: false, error: "not ready" } : { name, ok: true };
        } catch (err) {
          return { name, ok: false, error: errorMessage(err) };
        }
      }),
    );
    return { ok: results.every((r) => r.ok), results };
  }

  handler(): Handler {
    return async (req, res) => {
      const verbose = new URL(req.url ?? "/", "http://localhost").searchParams.has("verbose");
      const { ok, results } = await this.run();
      let body: string;
      if (ok && !verbose) body = "ok\n";
      else {
        body = results
          .filter((r) => verbose || !r.ok)
          .map((r) => (r.ok ? `[+]${r.name} ok` : `[-]${r.name} failed: ${r.error ?? "not ready"}`))
          .join("\n");
        body += `\n${ok ? "check passed" : "check failed"}\n`;
      }
      res.writeHead(ok ? 200 : 500, { "content-type": "text/plain; charset=utf-8", "x-content-type-options": "nosniff" });
      res.end(req.method === "HEAD" ? undefined : body);
    };
  }
}

/** /metrics in Prometheus text format. */
export function metricsHandler(metrics: Metrics): Handler {
  return async (req, res) => {
    const { contentType, body } = await metrics.render();
    res.writeHead(200, { "content-type": contentType });
    res.end(req.method === "HEAD" ? undefined : body);
  };
}
