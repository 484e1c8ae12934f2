import { describe, expect, it } from "vitest";
import { Controller, RetryNoLaterThan, generationChanged, parseKey, requestKey, type ReconcileContext, type Request, type Result } from "../../../src/runtime/controller.js";
import type { Informer } from "../../../src/runtime/informer.js";
import { KubeApiError, type KubeObject } from "../../../src/runtime/kube-client.js";
import { silentLogger } from "../../../src/runtime/logging.js";
import { Metrics } from "../../../src/runtime/metrics.js";
import { ItemExponentialFailureRateLimiter } from "../../../src/runtime/workqueue.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(cond: () => boolean, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await sleep(5);
  }
}

function make(reconcile: (req: Request, ctx: ReconcileContext) => Promise<Result | void>, concurrency = 4) {
  const metrics = new Metrics({ defaultMetrics: false });
  const c = new Controller({
    name: "test",
    reconciler: { reconcile },
    concurrency,
    logger: silentLogger(),
    metrics,
    rateLimiter: new ItemExponentialFailureRateLimiter(1, 50),
  });
  return { c, metrics };
}

describe("watch", () => {
  it("enqueues on the priority lane the objects the priority predicate says are urgent, ahead of those listed before them", async () => {
    const handlers: Array<(obj: KubeObject) => void> = [];
    const informer = { path: "/apis/x/v1/things", on: (event: string, fn: (obj: KubeObject) => void) => (event === "add" && handlers.push(fn), () => undefined) };
    const order: string[] = [];
    const { c } = make(async (req) => {
      order.push(req.name);
    }, 1);
    c.watch(informer as unknown as Informer<KubeObject>, undefined, { priority: (obj) => obj.metadata.name === "due-now" });
    // As a cold start lists them: three first, the urgent one last.
    for (const name of ["a", "b", "c", "due-now"]) for (const h of handlers) h({ metadata: { namespace: "ns", name } });
    await c.start();
    await until(() => order.length === 4);
    await c.stop(1_000);
    expect(order[0]).toBe("due-now");
  });
});

describe("keys", () => {
  it("round-trips namespace/name and cluster-scoped names", () => {
    expect(requestKey({ namespace: "a", name: "b" })).toBe("a/b");
    expect(parseKey("a/b")).toEqual({ namespace: "a", name: "b" });
    expect(parseKey("only")).toEqual({ namespace: "", name: "only" });
  });
  it("generationChanged filters status-only updates", () => {
    const o = (g: number) => ({ metadata: { generation: g } });
    expect(generationChanged(o(2), o(1))).toBe(true);
    expect(generationChanged(o(1), o(1))).toBe(false);
    expect(generationChanged(o(1))).toBe(true);
  });
});

describe("Controller", () => {
  it("runs keys concurrently but never one key twice at once", async () => {
    const active = new Set<string>();
    let maxParallel = 0;
    let overlap = 0;
    const counts = new Map<string, number>();
    const { c } = make(async (req) => {
      const k = `${req.namespace}/${req.name}`;
      if (active.has(k)) overlap++;
      active.add(k);
      maxParallel = Math.max(maxParallel, active.size);
      await sleep(5);
      active.delete(k);
      counts.set(k, (counts.get(k) ?? 0) + 1);
    });
    await c.start();
    for (let round = 0; round < 5; round++) {
      for (let i = 0; i < 6; i++) c.enqueue({ namespace: "ns", name: `o${i}` });
      await sleep(2);
    }
    await until(() => c.queue.len() === 0 && c.queue.processingLen() === 0 && counts.size === 6);
    await c.stop(1_000);
    expect(overlap).toBe(0);
    expect(maxParallel).toBeGreaterThan(1);
    expect(maxParallel).toBeLessThanOrEqual(4);
  });

  it("keeps a worker for the priority lane: a renewal runs while every other worker is busy with slow ordinary keys", async () => {
    let release: () => void = () => undefined;
    const slow = new Promise<void>((r) => (release = r));
    const done: string[] = [];
    const { c } = make(async (req) => {
      if (req.name.startsWith("slow")) await slow;
      done.push(req.name);
    }, 1);
    await c.start();
    c.enqueue({ namespace: "ns", name: "slow-1" });
    c.enqueue({ namespace: "ns", name: "slow-2" });
    await until(() => c.queue.processingLen() === 1);
    c.enqueue({ namespace: "ns", name: "ordinary" });
    c.enqueue({ namespace: "ns", name: "renewal" }, { priority: true });
    await until(() => done.includes("renewal"));
    // The ordinary keys wait for the one ordinary worker: the kept one takes no ordinary key.
    expect(done).toEqual(["renewal"]);
    release();
    await until(() => done.length === 4);
    expect(done.slice(1).sort()).toEqual(["ordinary", "slow-1", "slow-2"]);
    await c.stop(1_000);
  });

  it("retries errors with backoff, then forgets on success", async () => {
    let calls = 0;
    const retries: number[] = [];
    const { c, metrics } = make(async (_req, ctx) => {
      calls++;
      retries.push(ctx.retries);
      if (calls < 3) throw new Error("service said 503");
    });
    await c.start();
    c.enqueue({ namespace: "ns", name: "x" });
    await until(() => calls === 3);
    await until(() => c.queue.processingLen() === 0);
    expect(retries).toEqual([0, 1, 2]);
    expect(c.queue.numRequeues("ns/x")).toBe(0);
    const text = await metrics.registry.metrics();
    expect(text).toMatch(/controller_runtime_reconcile_errors_total\{controller="test"\} 2/);
    expect(text).toMatch(/controller_runtime_reconcile_total\{controller="test",result="error"\} 2/);
    expect(text).toMatch(/controller_runtime_reconcile_total\{controller="test",result="success"\} 1/);
    expect(text).toMatch(/controller_runtime_max_concurrent_reconciles\{controller="test"\} 4/);
    expect(text).toMatch(/controller_runtime_reconcile_time_seconds_count\{controller="test"\} 3/);
    await c.stop(1_000);
  });

  it("survives thrown non-Errors and synchronous throws", async () => {
    let calls = 0;
    const { c, metrics } = make((() => {
      calls++;
      if (calls === 1) throw "a string"; // synchronous, non-Error
      if (calls === 2) return Promise.reject({ weird: true });
      return Promise.resolve();
    }) as (req: Request, ctx: ReconcileContext) => Promise<void>);
    await c.start();
    c.enqueue({ namespace: "ns", name: "p" });
    await until(() => calls === 3);
    await until(() => c.queue.processingLen() === 0);
    expect(await metrics.registry.metrics()).toMatch(/controller_runtime_reconcile_panics_total\{controller="test"\} 2/);
    await c.stop(1_000);
  });

  /**
   * A controller whose backoff is an hour from the first failure, so that only a cap can bring
   * the key back; `first` is what its first reconcile does. Returns the lanes of the first two
   * reconciles and the metrics text after them.
   */
  async function cappedRetry(first: () => Promise<Result | void>): Promise<{ lanes: boolean[]; text: string }> {
    const metrics = new Metrics({ defaultMetrics: false });
    const lanes: boolean[] = [];
    const c = new Controller({
      name: "test",
      rateLimiter: new ItemExponentialFailureRateLimiter(3_600_000, 3_600_000),
      reconciler: {
        reconcile: async (_req, ctx) => {
          lanes.push(ctx.priority);
          if (lanes.length === 1) return first();
        },
      },
      concurrency: 1,
      logger: silentLogger(),
      metrics,
    });
    await c.start();
    c.enqueue({ namespace: "ns", name: "renew" });
    await until(() => lanes.length === 2);
    const text = await metrics.registry.metrics();
    await c.stop(1_000);
    return { lanes, text };
  }

  it("a failure that must be retried no later than a time is, however long the key's backoff has grown", async () => {
    const { lanes, text } = await cappedRetry(async () => {
      throw new RetryNoLaterThan(new Error("status write failed"), 20, true);
    });
    expect(lanes).toEqual([false, true]);
    expect(text).toMatch(/controller_runtime_reconcile_total\{controller="test",result="error"\} 1/);
  });

  it("a failure whose server asked to wait (Retry-After: an empty pool) comes back no sooner, however young its backoff", async () => {
    let calls = 0;
    const busy = Object.assign(new Error("vms.allocate: pool_exhausted (HTTP 503)"), { retryAfterMs: 1_500 });
    const { c } = make(async () => {
      calls++;
      // As the managed reconciler throws it: wrapped, the service's error its cause.
      if (calls === 1) throw new Error("reconcile failed", { cause: busy });
    }, 1);
    await c.start();
    c.enqueue({ namespace: "ns", name: "k" });
    await sleep(800); // the backoff alone would have brought it back after 1 ms
    expect(calls).toBe(1);
    await until(() => calls === 2, 5_000);
    await c.stop(1_000);
  });

  it("a failure the API server asked to wait after (APF's 429 with Retry-After, once the client gave up) comes back no sooner", async () => {
    let calls = 0;
    const throttled = new KubeApiError({ status: 429, reason: "TooManyRequests", message: "too many requests", retryAfterSeconds: 1, method: "PATCH", path: "/apis/x" });
    const { c } = make(async () => {
      calls++;
      if (calls === 1) throw throttled;
    }, 1);
    await c.start();
    c.enqueue({ namespace: "ns", name: "k" });
    await sleep(600);
    expect(calls).toBe(1);
    await until(() => calls === 2, 5_000);
    await c.stop(1_000);
  });

  it("a failure capped at a time already past (1 ms) comes back after a second, not in a loop past the backoff", async () => {
    let calls = 0;
    const c = new Controller({
      name: "test",
      rateLimiter: new ItemExponentialFailureRateLimiter(3_600_000, 3_600_000),
      reconciler: {
        reconcile: async () => {
          calls++;
          throw new RetryNoLaterThan(new Error("renewal failed"), 1, true);
        },
      },
      concurrency: 1,
      logger: silentLogger(),
      metrics: new Metrics({ defaultMetrics: false }),
    });
    await c.start();
    c.enqueue({ namespace: "ns", name: "k" });
    await sleep(500);
    expect(calls).toBe(1);
    await until(() => calls === 2, 5_000);
    await c.stop(1_000);
  });

  it("a wait for a dependency backs off, but comes back no later than the time it says, without counting as an error", async () => {
    const { lanes, text } = await cappedRetry(async () => ({ requeue: true, requeueNoLaterThanMs: 20, priority: true }));
    expect(lanes).toEqual([false, true]);
    expect(text).toMatch(/controller_runtime_reconcile_total\{controller="test",result="requeue"\} 1/);
    expect(text).toMatch(/controller_runtime_reconcile_errors_total\{controller="test"\} 0/);
  });

  it("requeueAfter re-runs the key later; priority goes to the priority lane", async () => {
    const seen: { name: string; priority: boolean }[] = [];
    let first = true;
    const { c, metrics } = make(async (req, ctx) => {
      seen.push({ name: req.name, priority: ctx.priority });
      if (req.name === "renew" && first) {
        first = false;
        return { requeueAfterMs: 20, priority: true };
      }
    }, 1);
    await c.start();
    c.enqueue({ namespace: "ns", name: "renew" });
    await until(() => seen.length === 2);
    expect(seen[1]).toEqual({ name: "renew", priority: true });
    expect(await metrics.registry.metrics()).toMatch(/result="requeue_after"\} 1/);
    await c.stop(1_000);
  });

  it("stop waits for in-flight reconciles within the grace period and takes no new work", async () => {
    let started = 0;
    let finished = 0;
    const { c } = make(async () => {
      started++;
      await sleep(50);
      finished++;
    }, 2);
    await c.start();
    for (let i = 0; i < 10; i++) c.enqueue({ namespace: "ns", name: `k${i}` });
    await until(() => started === 2);
    await c.stop(5_000);
    expect(finished).toBe(started);
    expect(started).toBeLessThan(10);
  });

  it("stop aborts the signal of reconciles that outlive the grace period", async () => {
    let aborted = false;
    const { c } = make(async (_req, ctx) => {
      await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve()));
      aborted = ctx.signal.aborted;
    }, 1);
    await c.start();
    c.enqueue({ namespace: "ns", name: "slow" });
    await until(() => c.queue.processingLen() === 1);
    await c.stop(50);
    await until(() => aborted);
  });

  it("gives the reconciler a child logger and a reconcile id", async () => {
    let ctxSeen: ReconcileContext | undefined;
    const { c } = make(async (_req, ctx) => {
      ctxSeen = ctx;
    });
    await c.start();
    c.enqueue({ namespace: "ns", name: "n" });
    await until(() => ctxSeen !== undefined);
    expect(ctxSeen!.reconcileId).toMatch(/^[0-9a-f-]{36}$/);
    expect(ctxSeen!.log.bindings()).toMatchObject({ controller: "test", namespace: "ns", name: "n" });
    await c.stop(1_000);
  });
});
