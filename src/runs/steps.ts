// Starting and following one step in a VM (./script.ts says what runs there).
import { ALREADY_STARTED, SETUP_FAILED, WORKSPACE, exitFile, outputFile, parseExit, startedFile, stepDir, stepPath, stepScript, type StepScript } from "./script.js";
import type { RunVM } from "./vm.js";

export type StepObservation =
  | { state: "running" }
  /** `outputPath`: the file that holds what the step printed (it may be huge: read its ends). */
  | { state: "ended"; exitCode: number; outputPath: string }
  /** The step could not be set up in the VM (its directory or marker not made) and did not run. */
  | { state: "setupFailed"; message: string }
  /** The VM knows neither the command nor how the step ended. */
  | { state: "lost"; message: string };

export interface StepRef {
  runUid: string;
  attempt: number;
  index: number;
}

/**
 * Starts the step's script in the background, in /workspace (agentd's default working
 * directory is not published; the script names the step's directory relative to it): the
 * command's id (a second start runs nothing).
 */
export function startStep(vm: RunVM, ref: StepRef, step: StepScript, opts: { envs?: Record<string, string>; timeoutMs?: number }): Promise<string> {
  return vm.start(stepScript(stepDir(ref.runUid, ref.attempt, ref.index), step), { ...opts, cwd: WORKSPACE });
}

/**
 * Where the step stands. The `exit` file, when there, is the answer (whichever start of the
 * step wrote it). Without it: the command's status says whether it still runs; a command that
 * ended with ALREADY_STARTED was a second start, so the first one (whose id is not known) is
 * still at work; one that ended with SETUP_FAILED and left no marker could not make the step's
 * directory, and nothing ran; any other end without an `exit` file is a kill (the VM's
 * timeout, a kill).
 */
export async function observeStep(vm: RunVM, ref: StepRef, commandId: string): Promise<StepObservation> {
  const dir = stepPath(ref.runUid, ref.attempt, ref.index);
  const status = await vm.status(commandId);
  if (status?.running === true) return { state: "running" };
  const exitText = await vm.read(exitFile(dir));
  const exitCode = exitText === undefined ? undefined : parseExit(exitText);
  if (exitCode !== undefined) return { state: "ended", exitCode, outputPath: outputFile(dir) };
  if (status === undefined) return { state: "lost", message: `the VM no longer knows command ${commandId} and the step left no exit code` };
  if (status.exitCode === ALREADY_STARTED) return { state: "running" };
  // With the marker there, the step did start: its own command exited so (and its exit file
  // could not be written).
  if (status.exitCode === SETUP_FAILED && (await vm.read(startedFile(dir))) === undefined) {
    return {
      state: "setupFailed",
      message: `the step's directory ${dir} (or the marker file in it) could not be created in the VM (a file in its way, no permission, or a read-only or full disk), so the step did not run`,
    };
  }
  return { state: "ended", exitCode: status.exitCode ?? 137, outputPath: outputFile(dir) };
}
