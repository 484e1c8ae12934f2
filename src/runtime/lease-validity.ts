// How long a Lease written lets its holder work: both the sharded replica's member Lease and
// the leader Lease. Another may take a Lease once it has not been renewed for a lease duration
// by that one's clock; its holder stops writing a renew deadline (shorter) after the write that
// renewed it was sent, so that no write of the old holder lands beside the new one's.

/** A moment on both clocks. */
export interface Instant {
  mono: number;
  wall: number;
}
export const instant = (): Instant => ({ mono: performance.now(), wall: Date.now() });

/**
 * Until when a write of a Lease (a replica's member Lease, the leader Lease) lets its holder
 * work, on two clocks. The monotonic one is immune to steps of the wall clock, but does not
 * advance while the machine is suspended, nor (on some hypervisors) while a VM is paused; the
 * wall clock does. Work stops when either says the time ran out. The renewals' own deadline is
 * the monotonic one alone: a step forward of the wall clock only makes the holder wait for its
 * next renewal, it does not end the hold (a replica fenced while it slept learns it from that
 * renewal's 409).
 */
export class LeaseValidity {
  private until: Instant = { mono: -Infinity, wall: -Infinity };

  /** A write sent at `sent` succeeded. */
  renewed(sent: Instant, forMs: number): void {
    this.until = { mono: sent.mono + forMs, wall: sent.wall + forMs };
  }

  end(): void {
    this.until = { mono: -Infinity, wall: -Infinity };
  }

  /** Whether the holder may work: neither clock says the time ran out. */
  mayWork(): boolean {
    const at = instant();
    return this.until.mono > at.mono && this.until.wall > at.wall;
  }

  /** What is left for the renewals, on the monotonic clock. */
  renewalMs(at: number = performance.now()): number {
    return this.until.mono - at;
  }
}
