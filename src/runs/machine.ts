// The SandboxRun state machine: from the run's spec, its status (the only memory there is: a
// restarted operator has nothing else) and where its Sandbox stands, what to do next. Pure, so
// every decision is unit-tested; src/controllers/sandbox-run.ts does what it says.
//
// What makes it crash-safe: a step is started only when status does not record it started,
// and a start that happens twice anyway (the operator killed between starting the command and
// recording it) runs nothing the second time (the marker in ./script.ts). A step recorded
// started is followed, never started again: by its command's id, or by its files where the VM
// named no id; an attempt's number is in the marker, so a new attempt's steps run again on
// purpose.
import { RunConditionType, RunPhase, type RunPhaseName } from "../api/names.js";
import type { RunStepStatus, SandboxRunSpec, SandboxRunStatus } from "../api/index.js";
import { kstatusConditions, type StatedCondition } from "../managed/conditions.js";

/** Reasons the run's conditions and Events carry. */
export const RunReason = {
  WaitingForSandbox: "WaitingForSandbox",
  Running: "Running",
  Succeeded: "Succeeded",
  StepFailed: "StepFailed",
  BackoffLimitExceeded: "BackoffLimitExceeded",
  DeadlineExceeded: "DeadlineExceeded",
  SandboxDeleted: "SandboxDeleted",
  /** The VM the attempt ran in was replaced or went away. */
  VMLost: "VMLost",
  /** The step left no exit code and no longer runs: its command forgotten by the VM, its heartbeat stopped, or no trace of it. */
  CommandLost: "CommandLost",
  Retrying: "Retrying",
} as const;

/** Where the run's Sandbox stands, as the controller found it. */
export type SandboxState =
  | { state: "ready"; vmId: string }
  | { state: "waiting"; reason: string; message: string }
  /** Not there, or being deleted. */
  | { state: "gone"; message: string };

export type Next =
  | { kind: "finished" }
  | { kind: "wait"; reason: string; message: string }
  /** `again`: a step started before that left no trace in the VM (its start's answer cut short?). */
  | { kind: "start"; attempt: number; index: number; vmId: string; again?: boolean }
  /** `commandId`: none where the VM named none (the step is followed by its files). */
  | { kind: "follow"; attempt: number; index: number; commandId?: string; vmId: string }
  | { kind: "retry"; reason: string; message: string }
  | { kind: "fail"; reason: string; message: string; kill?: StepToStop }
  | { kind: "succeed" };

/** A running step to stop: where, which (the step's directory holds its cancel file), and its command's id if known. */
export interface StepToStop {
  vmId: string;
  attempt: number;
  index: number;
  commandId?: string;
}

export interface RunInput {
  spec: Pick<SandboxRunSpec, "steps" | "backoffLimit" | "activeDeadlineSeconds">;
  status: SandboxRunStatus;
  sandbox: SandboxState;
  now: Date;
}

export function isFinished(status: SandboxRunStatus | undefined): boolean {
  return status?.phase === RunPhase.Succeeded || status?.phase === RunPhase.Failed;
}

/** When the deadline passes (ms since the epoch), if the run has one and has been taken up. */
export function deadlineAt(spec: RunInput["spec"], status: SandboxRunStatus): number | undefined {
  if (spec.activeDeadlineSeconds === undefined || status.startTime === undefined) return undefined;
  return Date.parse(status.startTime) + spec.activeDeadlineSeconds * 1000;
}

/** The step being run (started, not seen to end), if any. */
export function currentStep(status: SandboxRunStatus): { index: number; step: RunStepStatus } | undefined {
  const steps = status.steps ?? [];
  const index = steps.findIndex((s) => s.finishedAt === undefined);
  return index < 0 ? undefined : { index, step: steps[index]! };
}

/** An attempt has started once its first step has (status.steps is emptied for the next one). */
export function attemptStarted(status: SandboxRunStatus): boolean {
  return (status.steps ?? []).length > 0 && status.vmId !== undefined;
}

/** What to do next. */
export function next({ spec, status, sandbox, now }: RunInput): Next {
  if (isFinished(status)) return { kind: "finished" };
  const started = attemptStarted(status);
  const running = currentStep(status);
  const deadline = deadlineAt(spec, status);
  // Every step ended with 0 (the last one seen to end only now, after the deadline): the run
  // did what it was asked within it, as a Job whose pods completed is Complete. A step cannot
  // run past the deadline: its command's timeout is the deadline.
  const steps = status.steps ?? [];
  if (started && running === undefined && steps.length >= spec.steps.length && steps.every((s) => s.exitCode === 0)) return { kind: "succeed" };
  const attempt = Math.max(1, status.attempts ?? 1);
  if (deadline !== undefined && now.getTime() >= deadline) {
    const kill = running !== undefined && status.vmId ? stepToStop(status.vmId, attempt, running) : undefined;
    return {
      kind: "fail",
      reason: RunReason.DeadlineExceeded,
      message: `the run was active longer than activeDeadlineSeconds (${spec.activeDeadlineSeconds}s)${running ? `; step "${running.step.name}" was stopped` : ""}`,
      ...(kill && { kill }),
    };
  }
  if (!started) {
    // Between attempts (or before the first): the attempt starts on the Sandbox's VM of now.
    if (sandbox.state === "gone") {
      if ((status.attempts ?? 0) > 0) return { kind: "fail", reason: RunReason.SandboxDeleted, message: `${sandbox.message} while the run was running` };
      return { kind: "wait", reason: RunReason.WaitingForSandbox, message: sandbox.message };
    }
    if (sandbox.state === "waiting") return { kind: "wait", reason: sandbox.reason, message: sandbox.message };
    return { kind: "start", attempt, index: 0, vmId: sandbox.vmId };
  }
  const vmId = status.vmId!;
  if (sandbox.state === "gone") {
    const kill = running !== undefined ? stepToStop(vmId, attempt, running) : undefined;
    return { kind: "fail", reason: RunReason.SandboxDeleted, message: `${sandbox.message} while the run was running`, ...(kill && { kill }) };
  }
  const last = steps[steps.length - 1]!;
  if (running === undefined) {
    if (last.exitCode !== 0) return attemptFailed(spec, status, RunReason.StepFailed, stepFailure(last));
    if (steps.length >= spec.steps.length) return { kind: "succeed" };
  }
  // The attempt's commands ran in its VM: another VM in the Sandbox means they are gone with it.
  // (A Sandbox that is only not Ready at this moment, a transient failure of its own, does not
  // stop the attempt.)
  if (sandbox.state === "ready" && sandbox.vmId !== vmId) {
    return attemptFailed(spec, status, RunReason.VMLost, `the Sandbox's VM ${vmId} was replaced by ${sandbox.vmId} during attempt ${attempt}`);
  }
  if (running !== undefined) {
    const { index, step } = running;
    return { kind: "follow", attempt, index, vmId, ...(step.commandId !== undefined && { commandId: step.commandId }) };
  }
  return { kind: "start", attempt, index: steps.length, vmId };
}

function stepToStop(vmId: string, attempt: number, running: { index: number; step: RunStepStatus }): StepToStop {
  return { vmId, attempt, index: running.index, ...(running.step.commandId !== undefined && { commandId: running.step.commandId }) };
}

/** A failed attempt: another one while backoffLimit allows, else the run fails. */
export function attemptFailed(spec: RunInput["spec"], status: SandboxRunStatus, reason: string, message: string): Next {
  const attempts = Math.max(1, status.attempts ?? 1);
  const limit = spec.backoffLimit ?? 0;
  if (attempts <= limit) return { kind: "retry", reason, message: `attempt ${attempts} failed: ${message}` };
  if (limit > 0) {
    return { kind: "fail", reason: RunReason.BackoffLimitExceeded, message: `${attempts} attempts failed (backoffLimit ${limit}); the last: ${message}` };
  }
  return { kind: "fail", reason, message };
}

function stepFailure(step: RunStepStatus): string {
  const code = step.exitCode === undefined ? "without an exit code" : `with exit code ${step.exitCode}`;
  return `step "${step.name}" failed ${code}`;
}

/** How often a running step is looked at: soon at first, then every few seconds. */
export function pollDelayMs(status: SandboxRunStatus, spec: RunInput["spec"], now: Date): number {
  const running = currentStep(status);
  const since = running?.step.startedAt !== undefined ? now.getTime() - Date.parse(running.step.startedAt) : 0;
  let delay = Math.min(5_000, Math.max(250, Math.round(since / 5)));
  const deadline = deadlineAt(spec, status);
  if (deadline !== undefined) delay = Math.min(delay, Math.max(0, deadline - now.getTime()) + 50);
  return delay;
}

/** When a finished run is to be deleted (ms since the epoch), if ttlSecondsAfterFinished is set. */
export function expiresAt(ttlSecondsAfterFinished: number | undefined, status: SandboxRunStatus): number | undefined {
  if (ttlSecondsAfterFinished === undefined || !isFinished(status) || status.completionTime === undefined) return undefined;
  return Date.parse(status.completionTime) + ttlSecondsAfterFinished * 1000;
}

/** The conditions of a run in `phase`, with the reason and message of where it stands. */
export function runConditions(phase: RunPhaseName, reason: string, message: string): StatedCondition[] {
  switch (phase) {
    case RunPhase.Succeeded:
      return [
        ...kstatusConditions({ state: "ready", reason, message }),
        { type: RunConditionType.Complete, status: "True", reason, message },
        { type: RunConditionType.Failed, status: "False", reason, message: undefined },
      ];
    case RunPhase.Failed:
      // Nothing more will happen without a new run: Stalled, as kstatus reads a failed Job.
      return [
        ...kstatusConditions({ state: "stalled", reason, message }),
        { type: RunConditionType.Complete, status: "False", reason, message: undefined },
        { type: RunConditionType.Failed, status: "True", reason, message },
      ];
    default:
      return kstatusConditions({ state: "reconciling", reason, message });
  }
}

/** The Running message: which step of how many, in which attempt. */
export function runningMessage(spec: RunInput["spec"], status: SandboxRunStatus): string {
  const running = currentStep(status);
  const attempts = status.attempts ?? 1;
  const of = spec.backoffLimit ? ` (attempt ${attempts} of ${spec.backoffLimit + 1})` : "";
  if (running === undefined) return `between steps${of}`;
  return `step ${running.index + 1}/${spec.steps.length} "${running.step.name}" is running${of}`;
}

/**
 * How far along a status is: finished, then the attempt, steps started, steps ended, the run's
 * VM given back. Every write of a run moves one of them forward.
 */
export function compareProgress(a: SandboxRunStatus, b: SandboxRunStatus): number {
  const key = (s: SandboxRunStatus) => [
    isFinished(s) ? 1 : 0,
    s.attempts ?? 0,
    (s.steps ?? []).filter((x) => x.startedAt !== undefined).length,
    (s.steps ?? []).filter((x) => x.finishedAt !== undefined).length,
    s.vmReleased === true ? 1 : 0,
  ];
  const x = key(a);
  const y = key(b);
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return x[i]! - y[i]!;
  return 0;
}
