// The service client's rate limiter: `qps` tokens per second, at most `burst` banked (the token
// bucket itself is src/lib/token-bucket.ts). Every HTTP attempt to the service (retries
// included) takes one token, so retries can never amplify load beyond the configured rate.
//
// Waiters queue FIFO behind ONE timer (not a timer per waiting request): at 10,000 objects a
// cold start can park thousands of calls here, and that must stay cheap.
//
// A 429 from the service pauses the whole bucket until its Retry-After and empties it, so
// that after the pause calls trickle out at `qps` instead of bursting into the next 429.
import { Fifo } from "../lib/fifo.js";
import { TokenBucket } from "../lib/token-bucket.js";

export interface RateLimitOptions {
  qps: number;
  burst: number;
}

function validate(opts: RateLimitOptions): void {
  if (!(opts.qps > 0)) throw new RangeError(`rateLimit.qps must be > 0, got ${opts.qps}`);
  if (!(opts.burst >= 1)) throw new RangeError(`rateLimit.burst must be >= 1, got ${opts.burst}`);
}

type Waiter = { resolve: (waitedMs: number) => void; reject: (e: Error) => void; since: number };

export class ClientRateLimiter {
  private readonly bucket: TokenBucket;
  private readonly clock: () => number;
  private pausedUntil = 0;
  private readonly queue = new Fifo<Waiter>();
  private timer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(opts: RateLimitOptions, clock: () => number = () => performance.now()) {
    validate(opts);
    this.clock = clock;
    this.bucket = new TokenBucket({ rate: opts.qps, burst: Math.floor(opts.burst), now: clock });
  }

  /** A new rate from now on (sharded mode: this replica's share of the Connection's rate). */
  setRate(opts: RateLimitOptions): void {
    validate(opts);
    this.bucket.setRate(opts.qps, Math.floor(opts.burst));
    // The waiters' timer was set at the old rate: look again now.
    this.drain();
  }

  /**
   * Takes a token without waiting if one is free and nobody is queued (the common case,
   * no promise allocated). Returns false if the caller must `wait()`.
   */
  tryTake(): boolean {
    if (this.closed || this.queue.size > 0) return false;
    return this.bucket.take() === 0;
  }

  /** Waits FIFO for a token; resolves with the milliseconds waited. */
  wait(): Promise<number> {
    if (this.closed) return Promise.reject(new Error("service client closed"));
    return new Promise<number>((resolve, reject) => {
      this.queue.push({ resolve, reject, since: this.clock() });
      this.drain();
    });
  }

  /** The service said 429: hold everyone until `ms` from now and restart from an empty bucket. */
  pause(ms: number): void {
    this.pausedUntil = Math.max(this.pausedUntil, this.clock() + ms);
    // Empty, and refilling only from the end of the pause: no burst when it lifts.
    this.bucket.holdUntil(this.pausedUntil);
    // Re-arm: the timer may have been set for an earlier instant; drain() re-checks anyway.
    this.drain();
  }

  /** How long from now the bucket is paused (0 when not paused). */
  pausedForMs(): number {
    return Math.max(0, this.pausedUntil - this.clock());
  }

  get waiting(): number {
    return this.queue.size;
  }

  close(): void {
    this.closed = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    const err = new Error("service client closed");
    for (const w of this.queue.clear()) w.reject(err);
  }

  private drain(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    const now = this.clock();
    let delay = 0;
    while (this.queue.size > 0) {
      delay = this.bucket.take();
      if (delay > 0) break;
      const w = this.queue.shift() as Waiter;
      w.resolve(Math.max(0, now - w.since));
    }
    if (this.queue.size === 0) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.drain();
    }, Math.ceil(Math.max(delay, 1)));
  }
}
