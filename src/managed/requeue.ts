// When a reconcile asks to come back. Every requeue says when (controller-runtime deprecated a
// bare Requeue for RequeueAfter) except one, the wait for a dependency, and that one says why not.
import type { Result } from "../runtime/controller.js";

/**
 * Come back after this object's backoff in the work queue (5 ms, doubling per attempt, up to
 * 1000 s; src/runtime/workqueue.ts), without counting as an error. Not a time on purpose: the
 * delay grows with the number of times this object has come back in a row, a count only the
 * queue's rate limiter keeps, and a `requeueAfterMs` resets that count (the controller forgets
 * the key), so a delay computed here would stay at its first step. The dependency's own watch
 * brings the object back as soon as the dependency changes; this is the fallback. `noLaterThan`:
 * something is due by then all the same (a VM's renewal while its Connection is not Ready).
 */
export function afterBackoff(noLaterThan?: { ms: number; priority: boolean }): Result {
  if (noLaterThan === undefined) return { requeue: true };
  return { requeue: true, requeueNoLaterThanMs: noLaterThan.ms, priority: noLaterThan.priority };
}

/** `ms` give or take 10 %, so that objects handled together do not all come back together. */
export function jittered(ms: number): number {
  return Math.round(ms * (0.9 + Math.random() * 0.2));
}
