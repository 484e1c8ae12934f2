// How a reconcile can fail, as the generic reconciler sees it. Kind clients throw these (or
// let ServiceErrors through); the reconciler turns them into conditions, events and requeues.
import { errorMessage } from "../lib/errors.js";
import { RetryNoLaterThan } from "../runtime/controller.js";
import { ServiceError, refusalOf } from "../service/index.js";

/**
 * A dependency is not there yet (Connection not Ready, Agent without id, Secret missing...).
 * Ready=False with this reason; requeued with backoff and when the dependency changes.
 */
export class NotReadyError extends Error {
  constructor(
    readonly reason: string,
    message: string,
    /**
     * The dependency exists and its controller has not reported on it yet (see
     * `notReportedYet`): it is being created or updated, and nothing is known to be wrong.
     */
    readonly dependencyProgressing = false,
  ) {
    super(message);
    this.name = "NotReadyError";
  }
}

/**
 * The resource cannot progress without a change by the user (the service answered 400, a
 * name is taken by an object that is not ours...). Stalled=True; no retry until the spec changes.
 */
export class StalledError extends Error {
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super(message);
    this.name = "StalledError";
  }
}

/**
 * A first create met an object of the name the resource claimed (a Skill's), which no create of
 * its own can have made: the reconciler withdraws the claim, so that no later look (nor the
 * deletion) takes that object for one a lost create made.
 */
export class ClaimTaken extends StalledError {}

/**
 * A failure after a step that changed what status must say (a deployment deleted, its
 * replacement then refused): the reconciler writes `status` (a field given as null is removed)
 * with the conditions of the failure, which is sorted by its cause.
 */
export class FailedAfterChange extends Error {
  constructor(
    override readonly cause: unknown,
    readonly status: Record<string, unknown>,
    /** What the step before did, added to the failure's message. */
    readonly done?: string,
    /**
     * The step took away what the connection Secret points at (a deleted deployment's endpoint
     * and token): the reconciler deletes the Secret, which the next success writes again.
     */
    readonly connectionGone = false,
    /** When to come back at the latest for the upkeep the step did (a VM renewed: its next renewal). */
    readonly next?: { ms: number; priority: boolean },
  ) {
    super(errorMessage(cause), { cause });
    this.name = "FailedAfterChange";
  }
}

export type Failure =
  | { kind: "notReady"; reason: string; message: string; dependencyProgressing: boolean }
  | { kind: "stalled"; reason: string; message: string }
  | { kind: "transient"; reason: string; message: string };

/** Sorts any thrown value into what the user should see and whether retrying can help. */
export function classify(err: unknown): Failure {
  // Says when to retry, not what went wrong: the cause does.
  if (err instanceof RetryNoLaterThan) return classify(err.cause);
  if (err instanceof FailedAfterChange) {
    const failure = classify(err.cause);
    return err.done === undefined ? failure : { ...failure, message: `${failure.message}; ${err.done}` };
  }
  if (err instanceof NotReadyError) {
    return { kind: "notReady", reason: err.reason, message: err.message, dependencyProgressing: err.dependencyProgressing };
  }
  if (err instanceof StalledError) return { kind: "stalled", reason: err.reason, message: err.message };
  // ServiceRejected (400/413/422: the same spec gets the same answer) stalls; Unauthorized
  // (401/403) is retried, since credentials and permissions change outside the resource.
  const refusal = refusalOf(err);
  if (refusal !== undefined) return { kind: refusal.permanent ? "stalled" : "transient", reason: refusal.reason, message: refusal.message };
  if (err instanceof ServiceError) {
    if (err.outcomeUnknown) {
      // What happened, in the client's words (a timeout, a cut connection, an answer without
      // the id it needed), which say the outcome is unknown or are told so here.
      const said = err.message.includes("outcome unknown") ? err.message : `${err.message}; outcome unknown`;
      return { kind: "transient", reason: "OutcomeUnknown", message: `${said}; looked up before it is tried again` };
    }
    return { kind: "transient", reason: "ServiceUnavailable", message: err.message };
  }
  return { kind: "transient", reason: "ReconcileError", message: errorMessage(err) };
}
