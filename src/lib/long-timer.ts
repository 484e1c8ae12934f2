// Node's setTimeout takes at most 2^31-1 ms (24.8 days) and fires after 1 ms for anything
// longer, with only a warning: a timeout of 30 days (a VM's default maximum TTL) would fire at
// once. Longer waits are armed in steps.

/** The longest delay setTimeout honours. */
export const MAX_TIMER_MS = 2_147_483_647;

/** A timer that does not keep the process alive; returns its cancel. */
export function unrefTimeout(fn: () => void, ms: number): () => void {
  const due = performance.now() + ms;
  let timer: NodeJS.Timeout;
  const arm = (left: number) => {
    timer = setTimeout(() => {
      const rest = due - performance.now();
      if (rest > 0) arm(rest);
      else fn();
    }, Math.min(Math.max(0, left), MAX_TIMER_MS));
    timer.unref();
  };
  arm(ms);
  return () => clearTimeout(timer);
}
