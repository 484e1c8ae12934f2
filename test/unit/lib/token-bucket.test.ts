// The one token bucket (src/lib/token-bucket.ts), on a fake clock: exact counts.
import { describe, expect, it } from "vitest";
import { TokenBucket } from "../../../src/lib/token-bucket.js";

describe("TokenBucket", () => {
  it("take(): a burst, then one token per 1/rate; a refused take costs nothing and says how long to wait", () => {
    let t = 0;
    const b = new TokenBucket({ rate: 10, burst: 3, now: () => t });
    expect([b.take(), b.take(), b.take()]).toEqual([0, 0, 0]);
    expect(b.take()).toBe(100);
    expect(b.take()).toBe(100); // nothing was taken by the refusal
    t += 50;
    expect(b.take()).toBe(50);
    t += 50;
    expect(b.take()).toBe(0);
    t += 10_000; // refills up to the burst only
    expect([b.take(), b.take(), b.take()]).toEqual([0, 0, 0]);
    expect(b.take()).toBeGreaterThan(0);
  });

  it("reserve(): borrows, and each reservation waits behind the previous ones", () => {
    let t = 0;
    const b = new TokenBucket({ rate: 10, burst: 2, now: () => t });
    expect([b.reserve(), b.reserve(), b.reserve(), b.reserve()]).toEqual([0, 0, 100, 200]);
    t += 200; // the debt of two is repaid, nothing banked
    expect(b.reserve()).toBe(100);
    t += 1_000;
    expect(b.reserve()).toBe(0);
  });

  it("perMs: one token every 5 minutes", () => {
    let t = 0;
    const b = new TokenBucket({ rate: 1, perMs: 300_000, burst: 2, now: () => t });
    expect([b.take(), b.take()]).toEqual([0, 0]);
    expect(b.take()).toBe(300_000);
    t += 300_000;
    expect(b.take()).toBe(0);
    expect(b.take()).toBe(300_000);
  });

  it("holdUntil(): empty until then, then tokens at the rate (no burst); a later hold wins", () => {
    let t = 0;
    const b = new TokenBucket({ rate: 10, burst: 10, now: () => t });
    b.holdUntil(2_000);
    expect(b.take()).toBe(2_100);
    b.holdUntil(1_000); // earlier: the longer hold stands
    t = 2_000;
    expect(b.take()).toBe(100);
    t = 2_100;
    expect(b.take()).toBe(0);
    expect(b.take()).toBe(100);
  });

  it("refills nothing when the clock steps back", () => {
    let t = 1_000;
    const b = new TokenBucket({ rate: 10, burst: 1, now: () => t });
    expect(b.take()).toBe(0);
    t = 0;
    expect(b.take()).toBe(1_100);
    t = 1_100;
    expect(b.take()).toBe(0);
  });

  it("rejects nonsense settings", () => {
    expect(() => new TokenBucket({ rate: 0, burst: 1 })).toThrow(RangeError);
    expect(() => new TokenBucket({ rate: 1, perMs: 0, burst: 1 })).toThrow(RangeError);
    expect(() => new TokenBucket({ rate: 1, burst: -1 })).toThrow(RangeError);
    expect(() => new TokenBucket({ rate: Number.NaN, burst: 1 })).toThrow(RangeError);
  });
});
