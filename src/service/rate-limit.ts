// Client-side token bucket: `qps` tokens per second, at most `burst` banked. Every HTTP
// attempt to the service (retries included) takes one token, so retries can never amplify
// load beyond the configured rate.
//
// Waiters queue FIFO behind ONE timer (not a timer per waiting request): at 10,000 objects a
// cold start can park thousands of calls here, and that must stay cheap.
//
// A 429 from the service pauses the whole bucket until its Retry-After and empties it, so
// that after the pause calls trickle out at `qps` instead of bursting into the next 429.

export interface RateLimitOptions {
  qps: number;
  burst: number;
}

type Waiter = { resolve: (waitedMs: number) => void; reject: (e: Error) => void; since: number };

export class TokenBucket {
  private readonly qps: number;
  private readonly burst: number;
  private readonly clock: () => number;
  private tokens: number;
  private last: number;
  private pausedUntil = 0;
  // Array plus head index: O(1) dequeue without Array.shift's copying.
  private queue: (Waiter | undefined)[] = [];
  private head = 0;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(opts: RateLimitOptions, clock: () => number = () => performance.now()) {
    if (!(opts.qps > 0)) throw new RangeError(`rateLimit.qps must be > 0, got ${opts.qps}`);
    if (!(opts.burst >= 1)) throw new RangeError(`rateLimit.burst must be >= 1, got ${opts.burst}`);
    this.qps = opts.qps;
    this.burst = Math.floor(opts.burst);
    this.clock = clock;
    this.tokens = this.burst;
    this.last = clock();
  }

  /**
   * Takes a token without waiting if one is free and nobody is queued (the common case,
   * no promise allocated). Returns false if the caller must `wait()`.
   */
  tryTake(): boolean {
    if (this.closed || this.head < this.queue.length) return false;
    const now = this.clock();
    if (now < this.pausedUntil) return false;
    this.refill(now);
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return true;
    }
    return false;
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
    const now = this.clock();
    this.pausedUntil = Math.max(this.pausedUntil, now + ms);
    // Empty, and refilling only from the end of the pause: no burst when it lifts.
    this.tokens = 0;
    this.last = this.pausedUntil;
    // Re-arm: the timer may have been set for an earlier instant; drain() re-checks anyway.
    this.drain();
  }

  /** How long from now the bucket is paused (0 when not paused). */
  pausedForMs(): number {
    return Math.max(0, this.pausedUntil - this.clock());
  }

  get waiting(): number {
    return this.queue.length - this.head;
  }

  close(): void {
    this.closed = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    const err = new Error("service client closed");
    for (let i = this.head; i < this.queue.length; i++) this.queue[i]?.reject(err);
    this.queue = [];
    this.head = 0;
  }

  private refill(now: number): void {
    if (now > this.last) {
      this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) * this.qps) / 1000);
      this.last = now;
    }
  }

  private drain(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    const now = this.clock();
    if (now >= this.pausedUntil) {
      this.refill(now);
      while (this.head < this.queue.length && this.tokens >= 1) {
        const w = this.queue[this.head];
        this.queue[this.head] = undefined; // let it be collected
        this.head++;
        this.tokens -= 1;
        w?.resolve(Math.max(0, now - w.since));
      }
    }
    if (this.head >= this.queue.length) {
      // Empty: reset the array so it does not grow forever.
      this.queue = [];
      this.head = 0;
      return;
    }
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
    const untilToken = ((1 - this.tokens) * 1000) / this.qps;
    const delay = Math.max(this.pausedUntil - now, untilToken, 1);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.drain();
    }, Math.ceil(delay));
  }
}
