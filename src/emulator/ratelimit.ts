// Token bucket over service calls: `rate` tokens per second, burst of one second's worth.
// It runs on real monotonic time, not the emulator's clock: a rate limit is about the
// throughput a client actually achieves, and a test's fake clock must not refill it.
import { performance } from "node:perf_hooks";

export class TokenBucket {
  private tokens: number;
  private last: number;
  private readonly capacity: number;

  constructor(
    private readonly rate: number,
    private readonly clock: () => number = () => performance.now(),
  ) {
    this.capacity = Math.max(1, rate);
    this.tokens = this.capacity;
    this.last = clock();
  }

  /** Take one token: 0 when allowed, otherwise the ms until one is available. */
  take(): number {
    const now = this.clock();
    this.tokens = Math.min(this.capacity, this.tokens + ((now - this.last) * this.rate) / 1000);
    this.last = now;
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return 0;
    }
    return ((1 - this.tokens) * 1000) / this.rate;
  }
}

/** Retry-After is whole seconds (RFC 9110); round up so a client that honours it succeeds. */
export function retryAfterSeconds(waitMs: number): number {
  return Math.max(1, Math.ceil(waitMs / 1000));
}
