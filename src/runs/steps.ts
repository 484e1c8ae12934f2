// Starting and following one step in a VM (./script.ts says what runs there).
import { ALREADY_STARTED, exitFile, outputFile, parseExit, stepDir, stepScript, type StepScript } from "./script.js";
import type { RunVM } from "./vm.js";

export type StepObservation =
  | { state: "running" }
  /** `outputPath`: the file that holds what the step printed (it may be huge: read its ends). */
  | { state: "ended"; exitCode: number; outputPath: string }
  /** The VM knows neither the command nor how the step ended. */
  | { state: "lost"; message: string };

export interface StepRef {
  runUid: string;
  attempt: number;
  index: number;
}

/** Starts the step's script in the background: the command's id (a second start runs nothing). */
export function startStep(vm: RunVM, ref: StepRef, step: StepScript, opts: { envs?: Record<string, string>; timeoutMs?: number }): Promise<string> {
  return vm.start(stepScript(stepDir(ref.runUid, ref.attempt, ref.index), step), opts);
}

/**
 * Where the step stands. The `exit` file, when there, is the answer (whichever start of the
 * step wrote it). Without it: the command's status says whether it still runs; a command that
 * ended with ALREADY_STARTED was a second start, so the first one (whose id is not known) is
 * still at work; any other end without an `exit` file is a kill (the VM's timeout, a kill).
 */
export async function observeStep(vm: RunVM, ref: StepRef, commandId: string): Promise<StepObservation> {
  const dir = stepDir(ref.runUid, ref.attempt, ref.index);
  const status = await vm.status(commandId);
  if (status?.running === true) return { state: "running" };
  const exitText = await vm.read(exitFile(dir));
  const exitCode = exitText === undefined ? undefined : parseExit(exitText);
  if (exitCode !== undefined) return { state: "ended", exitCode, outputPath: outputFile(dir) };
  if (status === undefined) return { state: "lost", message: `the VM no longer knows command ${commandId} and the step left no exit code` };
  if (status.exitCode === ALREADY_STARTED) return { state: "running" };
  return { state: "ended", exitCode: status.exitCode ?? 137, outputPath: outputFile(dir) };
}
