// The kstatus triple (Ready / Reconciling / Stalled) from one statement of where a resource
// stands, so that every controller sets the three the same way: tools that wait on them
// (kubectl wait, Flux, Argo CD's health script in docs/gitops.md) read them together, and a
// triple assembled by hand in one place and not another is how they came to disagree.
import { ConditionType } from "../api/names.js";
import type { ConditionInput } from "../runtime/status.js";

/** A condition as a controller states it; the status writer stamps observedGeneration. */
export type StatedCondition = Omit<ConditionInput, "observedGeneration">;

export interface Standing {
  /**
   * - ready: Ready=True.
   * - reconciling: not ready, and the operator keeps at it (a dependency to wait for, a
   *   transient failure): Reconciling=True carries the message.
   * - stalled: not ready, and only a change by the user helps: Stalled=True carries the message.
   * - unavailable: not ready, with nothing in progress and nothing to fix in the spec (a VM
   *   that expired with keepAlive false).
   */
  state: "ready" | "reconciling" | "stalled" | "unavailable";
  /** CamelCase; the same on all three, so whichever a tool reads names the cause. */
  reason: string;
  message: string;
}

export function kstatusConditions({ state, reason, message }: Standing): StatedCondition[] {
  const reconciling = state === "reconciling";
  const stalled = state === "stalled";
  return [
    { type: ConditionType.Ready, status: state === "ready" ? "True" : "False", reason, message },
    { type: ConditionType.Reconciling, status: reconciling ? "True" : "False", reason, message: reconciling ? message : undefined },
    { type: ConditionType.Stalled, status: stalled ? "True" : "False", reason, message: stalled ? message : undefined },
  ];
}
