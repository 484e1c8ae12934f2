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
  private waiters: Array<() => void> = [];
  private deadline: NodeJS.Timeout | undefined;

  constructor(private readonly maxWaitMs = MAX_WAIT_MS) {}

  /** The moves to make first, replacing the previous ones (a membership change looks at everything again). */
  set(keys: Iterable<string>): void {
    this.pending = new Set(keys);
    clearTimeout(this.deadline);
    if (this.pending.size === 0) return this.release();
    // One deadline for every waiter: a second membership change while moves wait (a rolling
    // restart) must not make each of them wait its own full time in turn.
    this.deadline = setTimeout(() => this.set([]), this.maxWaitMs);
    this.deadline.unref();
  }

  /** The move of `key` was looked at (placed, found placed, gone, or failed: retried as any other). */
  done(key: string): void {
    if (this.pending.delete(key) && this.pending.size === 0) this.set([]);
  }

  /** Resolves when `key` may be placed: at once if it is urgent or nothing is, else when no urgent move is left. */
  async before(key: string): Promise<void> {
    if (this.pending.size === 0 || this.pending.has(key)) return;
    await new Promise<void>((resolve) => this.waiters.push(resolve));
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
