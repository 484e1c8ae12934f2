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

/** Ready's (and the others') reason while `agentcompute.dev/paused: "true"` holds the resource. */
export const PAUSED_REASON = "ReconcilePaused";

/**
 * The triple of a paused resource. The operator has seen the generation and deliberately does
 * nothing, so nothing is in progress (Reconciling=False) and nothing is waited for: kstatus
 * readers (Flux's wait, kubectl wait on Reconciling) do not hang on a pause. Ready stays True
 * only while the service object is as the spec last applied says (`inSync`); a spec changed
 * while paused, or a resource that was not Ready, is Ready=False until it is resumed. Stalled is
 * left out when `keepStalled`: a refusal of this generation stays remembered (and shown).
 */
export function pausedConditions({ inSync, message, keepStalled }: { inSync: boolean; message: string; keepStalled: boolean }): StatedCondition[] {
  const out: StatedCondition[] = [
    { type: ConditionType.Ready, status: inSync ? "True" : "False", reason: "ReconcilePaused", message },
    { type: ConditionType.Reconciling, status: "False", reason: PAUSED_REASON, message: undefined },
  ];
  if (!keepStalled) out.push({ type: ConditionType.Stalled, status: "False", reason: PAUSED_REASON, message: undefined });
  return out;
}

/**
 * A dependency (an Agent, a Skill, a Connection) its controller has not reported on yet: no
 * Ready condition, or Ready=True for an older generation. It is being created or updated and
 * nothing is known to be wrong, so a dependant waiting on it says nothing for longer (see
 * ManagedReconcilerOptions.progressingGraceMs); once it reports trouble, its Ready=False
 * says so, and the dependant reports its wait after the usual grace.
 */
export function notReportedYet(dependency: Dependency): boolean {
  const ready = readyOf(dependency);
  if (ready === undefined) return true;
  return ready.status === "True" && dependency.status?.observedGeneration !== dependency.metadata.generation;
}

/** The reason a dependency's Ready=False gives, for a dependant's wait message; undefined unless it says False. */
export function troubleOf(dependency: Dependency): string | undefined {
  const ready = readyOf(dependency);
  return ready?.status === "False" ? (ready.reason ?? "no reason given") : undefined;
}

/** What notReportedYet and troubleOf read of a dependency. */
interface Dependency {
  metadata: { generation?: number };
  status?: { observedGeneration?: number; conditions?: ReadonlyArray<{ type: string; status: string; reason?: string }> };
}

const readyOf = (dependency: Dependency) => dependency.status?.conditions?.find((c) => c.type === ConditionType.Ready);
