import { afterEach, describe, expect, it, vi } from "vitest";
import { Metrics } from "../../../src/runtime/metrics.js";
import {
  BucketRateLimiter,
  ItemExponentialFailureRateLimiter,
  MaxOfRateLimiter,
  WorkQueue,
  defaultControllerRateLimiter,
} from "../../../src/runtime/workqueue.js";

/** Drain what is ready right now (get() resolves synchronously-ish when items are queued). */
async function drainReady(q: WorkQueue): Promise<string[]> {
  const out: string[] = [];
  while (q.len() > 0) {
    const item = await q.get();
    if (!item) break;
    out.push(item.key);
    q.done(item.key);
  }
  return out;
}

afterEach(() => {
  vi.useRealTimers();
});

describe("WorkQueue basics", () => {
  it("hands out keys in FIFO order and de-duplicates waiting keys", async () => {
    const q = new WorkQueue({ name: "t" });
    q.add("a");
    q.add("b");
    q.add("a");
    q.add("c");
    q.add("b");
    expect(q.len()).toBe(3);
    expect(await drainReady(q)).toEqual(["a", "b", "c"]);
    q.shutDown();
  });

  it("never hands one key to two workers; an add during processing is re-queued after done", async () => {
    const q = new WorkQueue({ name: "t" });
    q.add("a");
    const first = await q.get();
    expect(first?.key).toBe("a");
    q.add("a"); // while processing
    q.add("a"); // coalesced
    expect(q.len()).toBe(0); // not available while "a" is in process
    let second: string | undefined;
    void q.get().then((i) => (second = i?.key));
    await new Promise((r) => setImmediate(r));
    expect(second).toBeUndefined();
    q.done("a");
    await new Promise((r) => setImmediate(r));
    expect(second).toBe("a");
    q.done("a");
    expect(q.len()).toBe(0);
    q.shutDown();
  });

  it("coalesces many adds during processing into exactly one more run", async () => {
    const q = new WorkQueue({ name: "t" });
    q.add("k");
    const it1 = await q.get();
    for (let i = 0; i < 100; i++) q.add("k");
    q.done(it1!.key);
    expect(q.len()).toBe(1);
    const it2 = await q.get();
    q.done(it2!.key);
    expect(q.len()).toBe(0);
    q.shutDown();
  });

  it("with concurrent workers, no key is ever processed twice at once", async () => {
    const q = new WorkQueue({ name: "t" });
    const active = new Set<string>();
    let violations = 0;
    let processed = 0;
    const worker = async (): Promise<void> => {
      for (;;) {
        const item = await q.get();
        if (!item) return;
        if (active.has(item.key)) violations++;
        active.add(item.key);
        await new Promise((r) => setTimeout(r, Math.random() * 2));
        if (Math.random() < 0.3) q.add(item.key); // re-add while processing
        active.delete(item.key);
        processed++;
        q.done(item.key);
      }
    };
    const workers = Array.from({ length: 8 }, () => worker());
    for (let round = 0; round < 20; round++) {
      for (let k = 0; k < 10; k++) q.add(`key-${k}`);
      await new Promise((r) => setTimeout(r, 1));
    }
    while (q.len() > 0 || q.processingLen() > 0) await new Promise((r) => setTimeout(r, 5));
    q.shutDown();
    await Promise.all(workers);
    expect(violations).toBe(0);
    expect(processed).toBeGreaterThanOrEqual(10);
  });

  it("get() waits for an add", async () => {
    const q = new WorkQueue({ name: "t" });
    const p = q.get();
    q.add("x");
    expect((await p)?.key).toBe("x");
    q.shutDown();
  });
});

describe("priority lane", () => {
  it("hands out priority items before ordinary ones", async () => {
    const q = new WorkQueue({ name: "t" });
    for (let i = 0; i < 1000; i++) q.add(`cold-${i}`);
    q.add("renew-1", { priority: true });
    q.add("renew-2", { priority: true });
    expect((await q.get())?.key).toBe("renew-1");
    expect((await q.get())?.key).toBe("renew-2");
    expect((await q.get())?.key).toBe("cold-0");
    q.shutDown();
  });

  it("promotes a waiting ordinary key and processes it once", async () => {
    const q = new WorkQueue({ name: "t" });
    q.add("a");
    q.add("b");
    q.add("b", { priority: true });
    expect(q.len()).toBe(2);
    const first = await q.get();
    expect(first).toEqual({ key: "b", priority: true });
    q.done("b");
    expect(await drainReady(q)).toEqual(["a"]); // no second "b"
    q.shutDown();
  });

  it("a priority add during processing re-queues on the priority lane", async () => {
    const q = new WorkQueue({ name: "t" });
    q.add("a");
    const a = await q.get();
    q.add("z");
    q.add("a", { priority: true });
    q.done(a!.key);
    expect((await q.get())?.key).toBe("a");
    q.shutDown();
  });
});

describe("delayed adds", () => {
  it("uses one timer and releases keys in ready-time order", async () => {
    vi.useFakeTimers();
    const spy = vi.spyOn(globalThis, "setTimeout");
    const q = new WorkQueue({ name: "t" });
    for (let i = 0; i < 1000; i++) q.addAfter(`k${i}`, 10_000 + i);
    q.addAfter("early", 100);
    q.addAfter("middle", 5_000);
    // One live timer at most; re-arming replaces it (far fewer than 1002 timers).
    expect(spy.mock.calls.length).toBeLessThanOrEqual(3);
    expect(q.len()).toBe(0);
    expect(q.delayedLen()).toBe(1002);
    await vi.advanceTimersByTimeAsync(100);
    expect(await drainReady(q)).toEqual(["early"]);
    await vi.advanceTimersByTimeAsync(4_900);
    expect(await drainReady(q)).toEqual(["middle"]);
    await vi.advanceTimersByTimeAsync(5_002);
    expect(await drainReady(q)).toEqual(["k0", "k1", "k2"]);
    q.shutDown();
    spy.mockRestore();
  });

  it("is not held back by the wall clock stepping back (NTP, a resumed VM): a renewal due in 50 ms comes in 50 ms", async () => {
    const q = new WorkQueue({ name: "t" });
    const wall = Date.now();
    q.addAfter("ns/renew", 50, { priority: true });
    const now = vi.spyOn(Date, "now").mockReturnValue(wall - 60_000);
    try {
      const got = await Promise.race([q.get(), new Promise<undefined>((r) => setTimeout(() => r(undefined), 5_000))]);
      expect(got?.key).toBe("ns/renew");
    } finally {
      now.mockRestore();
      q.shutDown();
    }
  });

  it("an earlier addAfter for the same key wins; a later one does not postpone it", async () => {
    vi.useFakeTimers();
    const q = new WorkQueue({ name: "t" });
    q.addAfter("a", 10_000);
    q.addAfter("a", 1_000);
    q.addAfter("a", 50_000);
    expect(q.delayedLen()).toBe(1);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(await drainReady(q)).toEqual(["a"]);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(await drainReady(q)).toEqual([]);
    q.shutDown();
  });

  it("an immediate add supersedes a pending delayed add of the same key", async () => {
    vi.useFakeTimers();
    const q = new WorkQueue({ name: "t" });
    q.addAfter("a", 1_000);
    q.add("a");
    expect(q.delayedLen()).toBe(0);
    expect(await drainReady(q)).toEqual(["a"]);
    await vi.advanceTimersByTimeAsync(2_000);
    expect(await drainReady(q)).toEqual([]);
    q.shutDown();
  });

  it("a delayed priority add still promotes a key stuck behind an ordinary backlog", async () => {
    vi.useFakeTimers();
    const q = new WorkQueue({ name: "t" });
    for (let i = 0; i < 100; i++) q.add(`cold-${i}`);
    q.add("sandbox"); // ordinary, at the back of the backlog
    q.addAfter("sandbox", 1_000, { priority: true }); // its TTL renewal, due in 1 s
    q.add("sandbox"); // another ordinary event does not cancel the renewal timer
    expect(q.delayedLen()).toBe(1);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(await q.get()).toEqual({ key: "sandbox", priority: true });
    q.done("sandbox");
    expect(q.len()).toBe(100); // processed once, not again from the ordinary lane
    q.shutDown();
  });

  it("a delayed priority add lands in the priority lane", async () => {
    vi.useFakeTimers();
    const q = new WorkQueue({ name: "t" });
    for (let i = 0; i < 10; i++) q.add(`cold-${i}`);
    q.addAfter("renew", 500, { priority: true });
    await vi.advanceTimersByTimeAsync(500);
    expect(await q.get()).toEqual({ key: "renew", priority: true });
    q.shutDown();
  });
});

describe("rate limiting", () => {
  it("exponential per-item backoff 5 ms doubling up to 1000 s; forget resets", () => {
    const rl = new ItemExponentialFailureRateLimiter(5, 1_000_000);
    expect([rl.when("a"), rl.when("a"), rl.when("a"), rl.when("a")]).toEqual([5, 10, 20, 40]);
    expect(rl.numRequeues("a")).toBe(4);
    expect(rl.when("b")).toBe(5);
    for (let i = 0; i < 100; i++) rl.when("a");
    expect(rl.when("a")).toBe(1_000_000);
    rl.forget("a");
    expect(rl.numRequeues("a")).toBe(0);
    expect(rl.when("a")).toBe(5);
  });

  it("the token bucket allows a burst then spaces requests at qps", () => {
    let now = 0;
    const rl = new BucketRateLimiter(10, 100, () => now);
    for (let i = 0; i < 100; i++) expect(rl.when("x")).toBe(0);
    expect(rl.when("x")).toBe(100);
    expect(rl.when("x")).toBe(200);
    now += 1_000; // 10 tokens back
    expect(rl.when("x")).toBe(0); // debt of 2 repaid, 8 tokens left
  });

  it("MaxOf takes the larger delay", () => {
    let now = 0;
    const rl = new MaxOfRateLimiter(new ItemExponentialFailureRateLimiter(5, 1_000_000), new BucketRateLimiter(10, 1, () => now));
    expect(rl.when("a")).toBe(5);
    expect(rl.when("b")).toBe(100); // bucket empty
    now += 10_000;
    expect(rl.when("a")).toBe(10);
  });

  it("addRateLimited backs off growing delays; forget + numRequeues through the queue", async () => {
    vi.useFakeTimers();
    const q = new WorkQueue({ name: "t", rateLimiter: defaultControllerRateLimiter() });
    q.addRateLimited("a");
    expect(q.numRequeues("a")).toBe(1);
    expect(q.len()).toBe(0);
    await vi.advanceTimersByTimeAsync(5);
    expect(await drainReady(q)).toEqual(["a"]);
    q.addRateLimited("a"); // 10 ms
    q.addRateLimited("a"); // 20 ms requested; earlier (10) wins
    await vi.advanceTimersByTimeAsync(9);
    expect(q.len()).toBe(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(await drainReady(q)).toEqual(["a"]);
    expect(q.numRequeues("a")).toBe(3);
    q.forget("a");
    expect(q.numRequeues("a")).toBe(0);
    q.shutDown();
  });
});

describe("shutdown", () => {
  it("getPriority() takes only priority keys: one added, one promoted from the ordinary lane, each handed over at once", async () => {
    const q = new WorkQueue({ name: "t" });
    q.add("ordinary");
    q.add("waiting"); // in the ordinary lane, as behind a backlog
    let got: string | undefined;
    const next = () => q.getPriority().then((item) => (got = item?.key));
    let p = next();
    await Promise.resolve();
    expect(got).toBeUndefined(); // no ordinary key for it
    q.add("waiting", { priority: true }); // its renewal came due: promoted
    await p;
    expect(got).toBe("waiting");
    p = next();
    q.add("renewal", { priority: true });
    await p;
    expect(got).toBe("renewal");
    // The ordinary key is still there for get(); a getPriority() waiting at shutdown ends.
    expect((await q.get())?.key).toBe("ordinary");
    p = next();
    q.shutDown();
    await p;
    expect(got).toBeUndefined();
  });

  it("shutDown resolves waiting getters with undefined and ignores later adds", async () => {
    const q = new WorkQueue({ name: "t" });
    const p = q.get();
    q.shutDown();
    expect(await p).toBeUndefined();
    q.add("a");
    expect(q.len()).toBe(0);
    expect(await q.get()).toBeUndefined();
  });

  it("shutDownWithDrain waits for in-flight items to be done", async () => {
    const q = new WorkQueue({ name: "t" });
    q.add("a");
    q.add("b");
    const a = await q.get();
    let drained = false;
    const p = q.shutDownWithDrain().then(() => (drained = true));
    await new Promise((r) => setImmediate(r));
    expect(drained).toBe(false);
    expect(await q.get()).toBeUndefined(); // "b" is not handed out any more
    q.done(a!.key);
    await p;
    expect(drained).toBe(true);
  });

  it("shutDownWithDrain resolves at once when idle", async () => {
    const q = new WorkQueue({ name: "t" });
    await q.shutDownWithDrain();
  });
});

describe("metrics", () => {
  it("exports client-go workqueue series for the queue", async () => {
    const metrics = new Metrics({ defaultMetrics: false });
    const q = new WorkQueue({ name: "skills", metrics });
    q.add("a");
    q.add("a");
    q.add("b");
    const a = await q.get();
    q.addAfter("c", 10);
    const text = await metrics.registry.metrics();
    expect(text).toMatch(/workqueue_depth\{name="skills"\} 1/);
    expect(text).toMatch(/workqueue_adds_total\{name="skills"\} 2/);
    expect(text).toMatch(/workqueue_retries_total\{name="skills"\} 1/);
    expect(text).toMatch(/workqueue_queue_duration_seconds_count\{name="skills"\} 1/);
    expect(text).toMatch(/workqueue_unfinished_work_seconds\{name="skills"\} \d/);
    expect(text).toMatch(/workqueue_longest_running_processor_seconds\{name="skills"\} \d/);
    q.done(a!.key);
    expect(await metrics.registry.metrics()).toMatch(/workqueue_work_duration_seconds_count\{name="skills"\} 1/);
    q.shutDown();
  });
});
