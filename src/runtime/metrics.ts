// Prometheus metrics of the operator, on ONE prom-client Registry owned by this object (never
// prom-client's global registry: tests create many managers in one process, and a library
// must not collide with its host's metrics).
//
// Names and labels are controller-runtime's / client-go's, because that is what existing
// dashboards and alerts read:
//   workqueue_*{name}                         (sigs.k8s.io/controller-runtime/pkg/metrics/workqueue.go)
//   controller_runtime_reconcile_*{controller} (pkg/internal/controller/metrics)
//   leader_election_master_status{name}        (client-go/tools/leaderelection metrics)
// plus the operator's own agentcompute_* series. The service client's series are defined with
// its hooks in src/service/metrics.ts and registered here, on the same Registry.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import { ServiceMetrics } from "../service/metrics.js";

/** The service client's hooks for these metrics: `serviceClientHooks(metrics, "namespace/name")`. */
export { serviceClientHooks } from "../service/metrics.js";

/** controller-runtime's workqueue histogram buckets: 10 ns .. 1000 s, decades. */
const WORKQUEUE_BUCKETS = Array.from({ length: 12 }, (_, i) => 1e-8 * 10 ** i);

/** controller-runtime's reconcile_time_seconds buckets. */
const RECONCILE_BUCKETS = [
  0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75,
  2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
];

/** A renewal's lateness: on time (0, the usual), then up to a 10-minute renewal window. */
const RENEWAL_LATENESS_BUCKETS = [0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];

/** client-go's rest_client_request_duration_seconds buckets. */
const KUBE_BUCKETS = [0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60];

export type ReconcileResultLabel = "success" | "error" | "requeue" | "requeue_after";

type UnfinishedWorkProvider = () => { unfinishedSeconds: number; longestRunningSeconds: number };

export interface MetricsOptions {
  /** Also export process_* and nodejs_* metrics (default true). */
  defaultMetrics?: boolean;
}

export class Metrics {
  readonly registry: Registry;

  // workqueue (label: name)
  readonly workqueueDepth: Gauge<"name">;
  readonly workqueueAdds: Counter<"name">;
  readonly workqueueQueueDuration: Histogram<"name">;
  readonly workqueueWorkDuration: Histogram<"name">;
  readonly workqueueUnfinishedWork: Gauge<"name">;
  readonly workqueueLongestRunning: Gauge<"name">;
  readonly workqueueRetries: Counter<"name">;

  // controller (label: controller)
  readonly reconcileTotal: Counter<"controller" | "result">;
  readonly reconcileErrors: Counter<"controller">;
  readonly reconcilePanics: Counter<"controller">;
  readonly reconcileTime: Histogram<"controller">;
  readonly activeWorkers: Gauge<"controller">;
  readonly maxConcurrentReconciles: Gauge<"controller">;

  // leader election
  readonly leaderElectionMasterStatus: Gauge<"name">;

  // informers (label: resource = collection path)
  readonly informerWatchRestarts: Counter<"resource" | "reason">;
  readonly informerRelists: Counter<"resource">;
  /** By selector too: a sharded replica holds its own share and, for lookups, every object of a kind. */
  readonly informerObjects: Gauge<"resource" | "selector" | "view">;

  // events
  readonly eventsTotal: Counter<"type" | "result">;

  // Kubernetes API client (client-go's rest_client_requests_total, plus the resource)
  readonly kubeRequests: Counter<"method" | "resource" | "code">;
  readonly kubeRequestDuration: Histogram<"method" | "resource">;

  // Sandbox TTL renewals (src/controllers/sandbox.ts): status says them only every
  // --sandbox-status-interval, these series at once.
  readonly sandboxRenewals: Counter;
  readonly sandboxRenewalLateness: Histogram;

  // the service client's agentcompute_service_* (defined in src/service/metrics.ts)
  readonly service: ServiceMetrics;

  private readonly queues = new Map<string, UnfinishedWorkProvider>();

  constructor(opts: MetricsOptions = {}) {
    const registers = [(this.registry = new Registry())];
    if (opts.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry });

    const queues = this.queues;
    this.workqueueDepth = new Gauge({
      name: "workqueue_depth",
      help: "Current depth of workqueue",
      labelNames: ["name"],
      registers,
    });
    this.workqueueAdds = new Counter({
      name: "workqueue_adds_total",
      help: "Total number of adds handled by workqueue",
      labelNames: ["name"],
      registers,
    });
    this.workqueueQueueDuration = new Histogram({
      name: "workqueue_queue_duration_seconds",
      help: "How long in seconds an item stays in workqueue before being requested",
      labelNames: ["name"],
      buckets: WORKQUEUE_BUCKETS,
      registers,
    });
    this.workqueueWorkDuration = new Histogram({
      name: "workqueue_work_duration_seconds",
      help: "How long in seconds processing an item from workqueue takes",
      labelNames: ["name"],
      buckets: WORKQUEUE_BUCKETS,
      registers,
    });
    // client-go updates these two on a 500 ms ticker; computing them at scrape time needs no timer.
    this.workqueueUnfinishedWork = new Gauge({
      name: "workqueue_unfinished_work_seconds",
      help:
        "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. " +
        "Large values indicate stuck threads.",
      labelNames: ["name"],
      registers,
      collect() {
        for (const [name, p] of queues) this.set({ name }, p().unfinishedSeconds);
      },
    });
    this.workqueueLongestRunning = new Gauge({
      name: "workqueue_longest_running_processor_seconds",
      help: "How many seconds has the longest running processor for workqueue been running",
      labelNames: ["name"],
      registers,
      collect() {
        for (const [name, p] of queues) this.set({ name }, p().longestRunningSeconds);
      },
    });
    this.workqueueRetries = new Counter({
      name: "workqueue_retries_total",
      help: "Total number of retries handled by workqueue",
      labelNames: ["name"],
      registers,
    });

    this.reconcileTotal = new Counter({
      name: "controller_runtime_reconcile_total",
      help: "Total number of reconciliations per controller",
      labelNames: ["controller", "result"],
      registers,
    });
    this.reconcileErrors = new Counter({
      name: "controller_runtime_reconcile_errors_total",
      help: "Total number of reconciliation errors per controller",
      labelNames: ["controller"],
      registers,
    });
    this.reconcilePanics = new Counter({
      name: "controller_runtime_reconcile_panics_total",
      help: "Total number of reconciliation panics (non-Error throws) per controller",
      labelNames: ["controller"],
      registers,
    });
    this.reconcileTime = new Histogram({
      name: "controller_runtime_reconcile_time_seconds",
      help: "Length of time per reconciliation per controller",
      labelNames: ["controller"],
      buckets: RECONCILE_BUCKETS,
      registers,
    });
    this.activeWorkers = new Gauge({
      name: "controller_runtime_active_workers",
      help: "Number of currently used workers per controller",
      labelNames: ["controller"],
      registers,
    });
    this.maxConcurrentReconciles = new Gauge({
      name: "controller_runtime_max_concurrent_reconciles",
      help: "Maximum number of concurrent reconciles per controller",
      labelNames: ["controller"],
      registers,
    });

    this.leaderElectionMasterStatus = new Gauge({
      name: "leader_election_master_status",
      help: "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
      labelNames: ["name"],
      registers,
    });

    this.informerWatchRestarts = new Counter({
      name: "agentcompute_informer_watch_restarts_total",
      help: "Watches of an informer that ended and were re-established, by reason (closed, error, list_error: the list before the watch failed, gone, stalled)",
      labelNames: ["resource", "reason"],
      registers,
    });
    this.informerRelists = new Counter({
      name: "agentcompute_informer_relists_total",
      help: "Full lists an informer had (initial sync and after 410 Gone); failed ones are watch restarts with reason list_error",
      labelNames: ["resource"],
      registers,
    });
    this.informerObjects = new Gauge({
      name: "agentcompute_informer_objects",
      help: "Objects held in an informer's cache (selector: its label selector, empty for all; view: the projection it keeps, empty for whole objects)",
      labelNames: ["resource", "selector", "view"],
      registers,
    });

    this.eventsTotal = new Counter({
      name: "agentcompute_events_total",
      help: "Kubernetes Events recorded, by type and outcome (created, aggregated, dropped, failed)",
      labelNames: ["type", "result"],
      registers,
    });

    this.kubeRequests = new Counter({
      name: "rest_client_requests_total",
      help: "Requests to the Kubernetes API server, by method, resource (plural[/subresource]) and HTTP status code (or 'error'); watches are GETs",
      labelNames: ["method", "resource", "code"],
      registers,
    });

    this.kubeRequestDuration = new Histogram({
      name: "rest_client_request_duration_seconds",
      help: "Time until the Kubernetes API server's answer (its headers), by method and resource; watches are not observed",
      labelNames: ["method", "resource"],
      buckets: KUBE_BUCKETS,
      registers,
    });

    this.sandboxRenewals = new Counter({
      name: "agentcompute_sandbox_renewals_total",
      help: "Sandbox VM TTL renewals the service accepted",
      registers,
    });
    this.sandboxRenewalLateness = new Histogram({
      name: "agentcompute_sandbox_renewal_lateness_seconds",
      help: "How long after it was due (expiresAt - renewBeforeSeconds) a Sandbox VM was renewed; 0 when on time",
      buckets: RENEWAL_LATENESS_BUCKETS,
      registers,
    });

    this.service = new ServiceMetrics(this.registry);
  }

  /** Register a queue's in-flight work for the unfinished/longest-running gauges. */
  registerQueue(name: string, provider: UnfinishedWorkProvider): () => void {
    this.queues.set(name, provider);
    return () => {
      if (this.queues.get(name) === provider) {
        this.queues.delete(name);
        this.workqueueUnfinishedWork.remove({ name });
        this.workqueueLongestRunning.remove({ name });
      }
    };
  }

  /** Prometheus text exposition. */
  async render(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}

/**
 * The resource a Kubernetes API path addresses, for metric labels: `plural` or
 * `plural/subresource` (`sandboxes/status`, `secrets`, `leases`); "other" for paths that are
 * not resource paths (/version, /readyz). Bounded by the kinds the operator touches.
 */
export function kubeResourceOf(path: string): string {
  const parts = path.split("?", 1)[0]!.split("/").filter((p) => p !== "");
  // /api/v1/... or /apis/{group}/{version}/...
  let i: number;
  if (parts[0] === "api") i = 2;
  else if (parts[0] === "apis") i = 3;
  else return "other";
  if (parts[i] === "namespaces" && parts.length > i + 2) i += 2; // namespaced: skip namespaces/{ns}
  const plural = parts[i];
  if (plural === undefined) return "other";
  const sub = parts[i + 2];
  return sub === undefined ? plural : `${plural}/${sub}`;
}
