// The one token bucket of the code base (golang.org/x/time/rate's, in small): `rate` tokens
// per `perMs` on a clock, at most `burst` banked, starting full. Every rate limit is built on it:
//   - src/service/rate-limit.ts: the service client's limiter (FIFO waiters behind one timer,
//     and a 429 pause: `holdUntil`);
//   - src/runtime/workqueue.ts: the queue's overall retry bucket (`reserve`, client-go's
//     BucketRateLimiter);
//   - src/runtime/events.ts: the Event recorder's per-object spam filter (`take`) and its
//     write rate (`reserve`);
//   - src/emulator/ratelimit.ts: the emulator's 429s (`take`).
// Neutral library: imports nothing from src/ (the emulator must never import src/service).
//
// Hand-written rather than an npm limiter (limiter, bottleneck, p-throttle): those are
// asynchronous schedulers that own their timers and read the wall clock. What is shared here is
// the synchronous arithmetic on an injectable clock (tests drive it with fake clocks; every user
// runs it on the monotonic clock, which a wall clock stepped back cannot stall); the
// waiting is the part each user does differently (a FIFO behind one timer, the queue's delay
// heap, the recorder's write slots, an HTTP 429), so it stays with them.

export interface TokenBucketOptions {
  /** Tokens added per `perMs` milliseconds; with the default `perMs`, per second (qps). */
  rate: number;
  /** Default 1000. A token every 5 minutes is `{ rate: 1, perMs: 300_000 }`. */
  perMs?: number;
  /** At most this many tokens are banked; the bucket starts full. */
  burst: number;
  /** Clock in ms; default performance.now (monotonic). */
  now?: () => number;
}

export class TokenBucket {
  private rate: number;
  private readonly perMs: number;
  private burst: number;
  private readonly now: () => number;
  private tokens: number;
  /** Tokens are counted up to here; in the future while held (nothing refills before it). */
  private last: number;

  constructor(o: TokenBucketOptions) {
    const perMs = o.perMs ?? 1000;
    if (!(o.rate > 0) || !(perMs > 0) || !(o.burst >= 0)) {
      throw new RangeError(`token bucket: rate and perMs must be > 0 and burst >= 0, got ${o.rate}/${perMs} ms, burst ${o.burst}`);
    }
    this.rate = o.rate;
    this.perMs = perMs;
    this.burst = o.burst;
    this.now = o.now ?? (() => performance.now());
    this.tokens = o.burst;
    this.last = this.now();
  }

  /**
   * Takes a token if one is there: 0. Otherwise takes nothing and returns the milliseconds
   * until one will be (including what is left of a hold).
   */
  take(): number {
    const now = this.refill();
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return 0;
    }
    return Math.max(0, this.last - now) + ((1 - this.tokens) * this.perMs) / this.rate;
  }

  /**
   * Takes a token even if none is there, borrowing it (x/time/rate's Reserve: the count goes
   * negative, and each later reservation waits behind the earlier ones). Returns the
   * milliseconds to wait before using it; 0 for now.
   */
  reserve(): number {
    const now = this.refill();
    this.tokens -= 1;
    return this.tokens >= 0 ? 0 : Math.max(0, this.last - now) + (-this.tokens * this.perMs) / this.rate;
  }

  /**
   * Empties the bucket and refills nothing before `at` (clock ms): a pause after which tokens
   * come at `rate` again, not in a burst. A later hold wins over an earlier one.
   */
  holdUntil(at: number): void {
    this.refill();
    this.tokens = 0;
    this.last = Math.max(this.last, at);
  }

  /** A new rate and burst from now on (what was earned so far is kept, up to the new burst). */
  setRate(rate: number, burst: number): void {
    if (!(rate > 0) || !(burst >= 0)) throw new RangeError(`token bucket: rate must be > 0 and burst >= 0, got ${rate}, burst ${burst}`);
    this.refill();
    this.rate = rate;
    this.burst = burst;
    this.tokens = Math.min(this.tokens, burst);
  }

  /** Counts the tokens earned since `last`; time only moves forward (a clock that steps back refills nothing). */
  private refill(): number {
    const now = this.now();
    if (now > this.last) {
      this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) * this.rate) / this.perMs);
      this.last = now;
    }
    return now;
  }
}
