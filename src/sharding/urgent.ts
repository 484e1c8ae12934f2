// The moves that keep a VM alive go before all others, across kinds. A dead replica's Sandbox
// has a running VM whose renewals stop until the Sandbox moves; its Agents, Skills and
// deployments lose nothing by waiting a few seconds. The sharder has one work queue (and its
// workers) per kind, and every kind's PATCHes share one API server: without this, a dead
// replica's Sandboxes moved at the pace of a fraction of the PATCHes, and on a busy 2-core
// host the last of them moved after the 30 s renewal window (bench: shards, quiet failover).

/**
 * How long the other moves wait at most after a membership change, all together: an urgent
 * move that keeps failing must not hold the rest up, nor a queue of waiting moves its workers.
 */
const MAX_WAIT_MS = 10_000;

export class UrgentMoves {
  private pending = new Set<string>();
  /** Which set() the pending keys are of: a move looked at under an older one does not count. */
  private epoch = 0;
  private waiters: Array<() => void> = [];
  private deadline: NodeJS.Timeout | undefined;

  constructor(private readonly maxWaitMs = MAX_WAIT_MS) {}

  /** The moves to make first, replacing the previous ones (a membership change looks at everything again). */
  set(keys: Iterable<string>): void {
    this.pending = new Set(keys);
    this.epoch++;
    clearTimeout(this.deadline);
    // Every waiter looks again: a move held under the previous set may be urgent now (a second
    // replica died while the first one's moves waited), and must not wait out the deadline.
    this.release();
    if (this.pending.size === 0) return;
    // One deadline for every waiter: a second membership change while moves wait (a rolling
    // restart) must not make each of them wait its own full time in turn.
    this.deadline = setTimeout(() => this.set([]), this.maxWaitMs);
    this.deadline.unref();
  }

  /**
   * The move of `key` was looked at (placed, found placed, gone, or failed: retried as any
   * other), under the set of `epoch` (what before() returned). One looked at under an earlier
   * set decided on the older membership: it is looked at again, and counts then.
   */
  done(key: string, epoch: number): void {
    if (epoch !== this.epoch) return;
    if (this.pending.delete(key) && this.pending.size === 0) this.set([]);
  }

  /**
   * Resolves when `key` may be placed: at once if it is urgent (in the set, or by `urgent()`,
   * asked again at every wake) or nothing is, else when no urgent move is left; with the epoch
   * to hand to done().
   */
  async before(key: string, urgent: () => boolean = () => false): Promise<number> {
    while (this.pending.size > 0 && !this.pending.has(key) && !urgent()) {
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
    return this.epoch;
  }

  /** Every waiter asks again: a move it waits with has become urgent by itself. */
  wake(): void {
    this.release();
  }

  get size(): number {
    return this.pending.size;
  }

  private release(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const resolve of waiters) resolve();
  }
}
