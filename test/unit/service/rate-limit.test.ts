// The client-side token bucket: unit tests on a fake clock (exact counts), and a contract
// test that bounds the request count the emulator sees. Counts are bounded from the time
// actually elapsed, so a slow machine only makes the bound looser, never flaky.

import { afterEach, describe, expect, it } from "vitest";
import { ClientRateLimiter } from "../../../src/service/rate-limit.js";
import { count, start } from "./helpers.js";
import type { Harness } from "./helpers.js";

describe("ClientRateLimiter", () => {
  it("allows a burst, then qps", () => {
    let t = 0;
    const b = new ClientRateLimiter({ qps: 10, burst: 5 }, () => t);
    let taken = 0;
    while (b.tryTake()) taken++;
    expect(taken).toBe(5);
    t += 1000; // one second refills 10, capped at the burst of 5
    taken = 0;
    while (b.tryTake()) taken++;
    expect(taken).toBe(5);
    t += 100; // 100 ms at 10 qps = 1 token
    expect(b.tryTake()).toBe(true);
    expect(b.tryTake()).toBe(false);
  });

  it("setRate() changes qps and burst from then on (a sharded replica's share of the Connection's rate)", () => {
    let t = 0;
    const b = new ClientRateLimiter({ qps: 30, burst: 30 }, () => t);
    while (b.tryTake());
    b.setRate({ qps: 10, burst: 3 }); // one of three replicas
    t += 1000; // one second at 10 qps, capped at the new burst of 3
    let taken = 0;
    while (b.tryTake()) taken++;
    expect(taken).toBe(3);
    t += 200; // 200 ms at 10 qps = 2 tokens (at the old 30 qps it would be 6)
    taken = 0;
    while (b.tryTake()) taken++;
    expect(taken).toBe(2);
    expect(() => b.setRate({ qps: 0, burst: 1 })).toThrow(/qps must be > 0/);
  });

  it("serves waiters FIFO and lets nobody jump the queue", async () => {
    const b = new ClientRateLimiter({ qps: 200, burst: 1 });
    expect(b.tryTake()).toBe(true);
    const order: number[] = [];
    const waits = [1, 2, 3].map((i) => b.wait().then(() => order.push(i)));
    // A newcomer may not take a token while others wait.
    expect(b.tryTake()).toBe(false);
    expect(b.waiting).toBe(3);
    await Promise.all(waits);
    expect(order).toEqual([1, 2, 3]);
    b.close();
  });

  it("pause() empties the bucket and holds everyone", () => {
    let t = 0;
    const b = new ClientRateLimiter({ qps: 10, burst: 10 }, () => t);
    b.pause(2000);
    expect(b.tryTake()).toBe(false);
    t += 1999;
    expect(b.tryTake()).toBe(false);
    t += 1; // pause over, but the bucket starts empty: no burst into the next 429
    expect(b.pausedForMs()).toBe(0);
    expect(b.tryTake()).toBe(false);
    t += 100; // then qps as usual
    expect(b.tryTake()).toBe(true);
    expect(b.tryTake()).toBe(false);
  });

  it("close() rejects waiters", async () => {
    const b = new ClientRateLimiter({ qps: 0.001, burst: 1 });
    b.tryTake();
    const w = b.wait();
    b.close();
    await expect(w).rejects.toThrow(/closed/);
  });

  it("rejects nonsense settings", () => {
    expect(() => new ClientRateLimiter({ qps: 0, burst: 1 })).toThrow(RangeError);
    expect(() => new ClientRateLimiter({ qps: 1, burst: 0 })).toThrow(RangeError);
  });
});

describe("client rate limit against the emulator", () => {
  let h: Harness | undefined;
  afterEach(async () => {
    await h?.close();
    h = undefined;
  });

  it("bounds the number of requests by burst + qps x elapsed", async () => {
    const qps = 40;
    const burst = 5;
    let waited = 0;
    h = await start({}, { rateLimit: { qps, burst }, hooks: { onRateLimited: () => waited++ } });
    await h.client.authenticate(); // the token service is not rate limited
    h.emu.clearRequests();
    const t0 = performance.now();
    const calls = Array.from({ length: 60 }, () => h!.client.skills.list());
    await new Promise((r) => setTimeout(r, 400));
    const seen = count(h.emu, "skills.list");
    const elapsed = (performance.now() - t0) / 1000;
    expect(seen).toBeLessThanOrEqual(burst + Math.ceil(qps * elapsed) + 1);
    expect(seen).toBeLessThan(60);
    await Promise.all(calls);
    expect(count(h.emu, "skills.list")).toBe(60);
    expect(waited).toBeGreaterThan(0);
  });

  it("a 429 storm from the service does not hot-loop", async () => {
    // The service allows 20/s; the client is configured far above that and must adapt to 429s.
    h = await start({ rateLimit: 20 }, { rateLimit: { qps: 1000, burst: 1000 }, retry: { maxAttempts: 10, baseDelayMs: 5, maxDelayMs: 3000 } });
    await h.client.authenticate();
    h.emu.clearRequests();
    const results = await Promise.all(Array.from({ length: 50 }, () => h!.client.skills.list()));
    expect(results).toHaveLength(50);
    // Without the client-wide pause each of the 50 calls would spin on its own backoff; with
    // it, 429s are bounded by a few rounds of in-flight calls.
    const n429 = count(h.emu, "skills.list", 429);
    expect(n429).toBeLessThan(150);
  });
});
