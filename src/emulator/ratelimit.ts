// The emulator's rate limit over service calls: `rate` tokens per second, burst of one
// second's worth, on the code base's one token bucket (src/lib/token-bucket.ts). It runs on
// real monotonic time, not the emulator's clock: a rate limit is about the throughput a client
// actually achieves, and a test's fake clock must not refill it.
import { performance } from "node:perf_hooks";
import { TokenBucket } from "../lib/token-bucket.js";

/** A bucket of `rate` calls per second; its `take()` is 0 when a call is allowed, else the ms until one is. */
export function callRateLimit(rate: number, clock: () => number = () => performance.now()): TokenBucket {
  return new TokenBucket({ rate, burst: Math.max(1, rate), now: clock });
}

/** Retry-After is whole seconds (RFC 9110); round up so a client that honours it succeeds. */
export function retryAfterSeconds(waitMs: number): number {
  return Math.max(1, Math.ceil(waitMs / 1000));
}
