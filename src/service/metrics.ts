// The service client's Prometheus series (agentcompute_service_*, labelled by `connection`)
// and the hooks that feed them. The client itself never sees prom-client: it calls the hooks
// of its options (options.ts); this module turns them into metrics. The runtime's Metrics
// (src/runtime/metrics.ts) registers these series on the operator's one Registry as
// `metrics.service`; names, labels and help texts are documented in docs/metrics.md.
import { Counter, Histogram, type Registry } from "prom-client";
import type { ServiceClientHooks } from "./options.js";

const SERVICE_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

export class ServiceMetrics {
  readonly requests: Counter<"operation" | "status" | "connection">;
  readonly requestDuration: Histogram<"operation" | "connection">;
  readonly tokenRequests: Counter<"result" | "connection">;
  readonly retries: Counter<"operation" | "connection">;
  readonly rateLimitedSeconds: Counter<"connection">;

  constructor(registry: Registry) {
    const registers = [registry];
    this.requests = new Counter({
      name: "agentcompute_service_requests_total",
      help: "Requests made to the Agent Registry and Compute Service, by operation and HTTP status (or 'error')",
      labelNames: ["operation", "status", "connection"],
      registers,
    });
    this.requestDuration = new Histogram({
      name: "agentcompute_service_request_duration_seconds",
      help: "Duration of requests to the service, by operation",
      labelNames: ["operation", "connection"],
      buckets: SERVICE_BUCKETS,
      registers,
    });
    this.tokenRequests = new Counter({
      name: "agentcompute_service_token_requests_total",
      help: "Token requests made to the service's auth endpoint, by result",
      labelNames: ["result", "connection"],
      registers,
    });
    this.retries = new Counter({
      name: "agentcompute_service_retries_total",
      help: "Requests to the service retried, by operation",
      labelNames: ["operation", "connection"],
      registers,
    });
    this.rateLimitedSeconds = new Counter({
      name: "agentcompute_service_rate_limited_seconds_total",
      help: "Seconds spent waiting on the client-side rate limit (or a server Retry-After) before calling the service",
      labelNames: ["connection"],
      registers,
    });
  }

  /**
   * Removes every series of one connection (a deleted Connection): a cluster that makes a
   * Connection per preview environment would otherwise grow /metrics without bound. Series of
   * other connections stay. Call it once the connection's clients report nothing more
   * (ConnectionPool.forget silences them), or a call ending later would bring a series back.
   */
  async removeConnection(connection: string): Promise<void> {
    const metrics: Array<Counter<string> | Histogram<string>> = [this.requests, this.requestDuration, this.tokenRequests, this.retries, this.rateLimitedSeconds];
    for (const metric of metrics) {
      // A histogram's values are its buckets (labelled `le` too), sum and count: one series,
      // removed by its own labels (removing it again is a no-op).
      for (const { labels } of (await metric.get()).values) {
        if (labels["connection"] !== connection) continue;
        const { le: _le, ...own } = labels;
        metric.remove(own);
      }
    }
  }
}

/**
 * Hooks for the service client that feed agentcompute_service_* metrics: given the
 * ServiceMetrics, or an object holding them as `service` (the runtime's Metrics).
 * `connectionLabel` (e.g. "namespace/name" of the Connection CR) tells clients apart; empty
 * when omitted.
 */
export function serviceClientHooks(
  metrics: ServiceMetrics | { service: ServiceMetrics },
  connectionLabel = "",
): Required<Omit<ServiceClientHooks, "onCredentialsRefused">> {
  const m = metrics instanceof ServiceMetrics ? metrics : metrics.service;
  const connection = connectionLabel;
  return {
    onRequest(ev) {
      m.requests.inc({ operation: ev.operation, status: String(ev.status), connection });
      m.requestDuration.observe({ operation: ev.operation, connection }, ev.durationSeconds);
    },
    onTokenRequest(ev) {
      m.tokenRequests.inc({ result: ev.ok ? "success" : "error", connection });
    },
    onRetry(ev) {
      m.retries.inc({ operation: ev.operation, connection });
    },
    onRateLimited(ev) {
      if (ev.waitMs > 0) m.rateLimitedSeconds.inc({ connection }, ev.waitMs / 1000);
    },
  };
}
