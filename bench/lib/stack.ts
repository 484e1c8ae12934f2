// One scenario's world: an emulator of the service (in this process), a namespace on the real
// API server with the Connection to that emulator, the operator in its own process, and the
// benchmark's watch on the resources.
import path from "node:path";
import { startEmulator, type Emulator, type EmulatorOptions, type RequestStats } from "../../src/emulator/index.js";
import { createNamespace, deleteNamespace } from "../../dev/namespaces.js";
import { createAll } from "../../dev/objects.js";
import { BENCH_LABEL, type Cluster, type Plural } from "./cluster.js";
import { CACHE, OperatorProcess } from "./operator.js";
import { delta, type Sample } from "../../dev/prometheus.js";
import { API_KEY, ORG_ID, connectionObjects, type Manifest } from "./resources.js";
import { ReadyTracker } from "./tracker.js";
import { errorMessage, log, waitUntil } from "./util.js";

export interface StackOptions {
  cluster: Cluster;
  /** Namespace prefix, e.g. bench-cold. */
  name: string;
  emulator: EmulatorOptions;
  /** The Connection's rateLimit.qps (and the emulator's rateLimit). */
  rateLimit: number;
  syncPeriod: string;
  concurrency?: number;
  cpuProfDir?: string;
  heapSnapshotDir?: string;
  nodeOptions?: string;
  plurals: Plural[];
}

export interface Snapshot {
  at: number;
  metrics: Sample[];
  service: RequestStats;
}

export class Stack {
  operator: OperatorProcess | undefined;
  readonly tracker: ReadyTracker;

  private constructor(
    readonly o: StackOptions,
    readonly emulator: Emulator,
    readonly namespace: string,
  ) {
    this.tracker = new ReadyTracker(o.cluster.kube, namespace, o.plurals);
  }

  static async create(o: StackOptions): Promise<Stack> {
    const emulator = await startEmulator({
      apiKey: API_KEY,
      orgId: ORG_ID,
      rateLimit: o.rateLimit,
      requestLogLimit: 1_000_000,
      ...o.emulator,
    });
    const namespace = await createNamespace(o.cluster.kube, o.name, { label: BENCH_LABEL });
    await createAll(o.cluster.kube, connectionObjects(namespace, emulator, o.rateLimit), { ignoreExisting: true });
    log(`${o.name}: namespace ${namespace}, emulator ${emulator.baseURL} (rate limit ${o.rateLimit}/s, latency ${o.emulator.latencyMs ?? 0} ms)`);
    return new Stack(o, emulator, namespace);
  }

  get logFile(): string {
    return path.join(CACHE, "logs", `${this.namespace}.log`);
  }

  async create(objects: Manifest[], concurrency = 64): Promise<number> {
    const started = performance.now();
    await createAll(this.o.cluster.kube, objects, { concurrency, ignoreExisting: true });
    return performance.now() - started;
  }

  async startOperator(): Promise<OperatorProcess> {
    this.operator = await OperatorProcess.start({
      kubeconfig: this.o.cluster.operator.kubeconfig,
      namespace: this.namespace,
      syncPeriod: this.o.syncPeriod,
      concurrency: this.o.concurrency,
      cpuProfDir: this.o.cpuProfDir,
      heapSnapshotDir: this.o.heapSnapshotDir,
      nodeOptions: this.o.nodeOptions,
      logFile: this.logFile,
    });
    return this.operator;
  }

  async snapshot(): Promise<Snapshot> {
    if (!this.operator) throw new Error("operator not started");
    const [metrics] = await Promise.all([this.operator.scrape()]);
    return { at: performance.now(), metrics, service: this.emulator.stats() };
  }

  /**
   * Waits until the operator has nothing left to do: every work queue empty and no request
   * to the API server or the service for `quietMs`. Returns how long that took.
   */
  async settle(opts: { quietMs?: number; timeoutMs?: number } = {}): Promise<{ ms: number; settled: boolean }> {
    const quietMs = opts.quietMs ?? 10_000;
    const started = performance.now();
    let last = await this.snapshot();
    let quietSince = performance.now();
    try {
      await waitUntil(
        async () => {
          const now = await this.snapshot();
          const d = delta(last.metrics, now.metrics);
          const kubeWrites = d.filter((s) => s.name === "rest_client_requests_total" && s.labels.method !== "GET").reduce((a, s) => a + s.value, 0);
          const serviceCalls = now.service.total - last.service.total;
          const depth = now.metrics.filter((s) => s.name === "workqueue_depth").reduce((a, s) => a + s.value, 0);
          last = now;
          if (kubeWrites > 0 || serviceCalls > 0 || depth > 0) quietSince = performance.now();
          return performance.now() - quietSince >= quietMs;
        },
        { timeoutMs: opts.timeoutMs ?? 180_000, intervalMs: 5000, what: "the operator to settle" },
      );
      return { ms: performance.now() - started, settled: true };
    } catch {
      return { ms: performance.now() - started, settled: false };
    }
  }

  async teardown(): Promise<void> {
    try {
      await this.operator?.stop();
    } catch (err) {
      log(`stopping the operator: ${errorMessage(err)}`);
    }
    await this.tracker.stop().catch(() => undefined);
    await this.emulator.close();
    try {
      // The operator is stopped: the finalizers it put on the resources are stripped (the
      // service objects went away with the emulator), then the namespace controller deletes the rest.
      await deleteNamespace(this.o.cluster.kube, this.namespace, { stripFinalizers: true });
    } catch (err) {
      log(`deleting namespace ${this.namespace}: ${errorMessage(err)}`);
    }
  }
}
