// Starting, following and stopping one step in a VM (./script.ts says what runs there).
import { ALREADY_STARTED, HEARTBEAT_SECONDS, SETUP_FAILED, WORKSPACE, aliveFile, cancelFile, exitFile, outputFile, parseExit, runPath, startedFile, stepDir, stepPath, stepScript, type StepScript } from "./script.js";
import type { RunVM } from "./vm.js";

export type StepObservation =
  | { state: "running" }
  /** `outputPath`: the file that holds what the step printed (it may be huge: read its ends). */
  | { state: "ended"; exitCode: number; outputPath: string }
  /** The step could not be set up in the VM (its directory or marker not made) and did not run. */
  | { state: "setupFailed"; message: string }
  /**
   * The step left no exit code and no longer runs, as far as can be told: the VM forgot its
   * command, its heartbeat stopped, or it left no trace. `began`: the step left a trace (its
   * marker or heartbeat), so something of it may still run (its watcher died, not its command).
   */
  | { state: "lost"; message: string; began: boolean }
  /**
   * Started without an id, and no trace of it in the VM since (no marker, no heartbeat): the
   * start's answer may have been cut before the VM had the command. To be started again, once
   * (its marker makes a start that lands late run nothing).
   */
  | { state: "notStarted"; message: string };

export interface StepRef {
  runUid: string;
  attempt: number;
  index: number;
}

/**
 * How long a step's heartbeat may stay unchanged before the step counts as gone: many beats
 * (a VM busy enough to delay a few does not lose its step), and longer than the longest wait
 * between two looks at a running step (5 s).
 */
export const HEARTBEAT_SILENCE_MS = 15 * HEARTBEAT_SECONDS * 1000;

/**
 * What each followed step's `alive` file said, and since when on this process's clock: the
 * memory a step followed by its files is judged by (a heartbeat unchanged for
 * HEARTBEAT_SILENCE_MS: its shell is gone). Nothing of the VM's clock is read. A process that
 * starts following a step (a restart, a run moved to this replica) begins with no memory: it
 * waits that long again before it gives the step up.
 */
export class Heartbeats {
  private readonly seen = new Map<string, { beat: string | undefined; since: number }>();
  /** Steps started again after they left no trace (notStarted): once each. */
  private readonly restarted = new Set<string>();

  /** Whether the step's heartbeat, `beat` now, has stayed unchanged for longer than HEARTBEAT_SILENCE_MS. */
  silent(ref: StepRef, beat: string | undefined, now: number): boolean {
    const key = stepKey(ref);
    const last = this.seen.get(key);
    if (last === undefined || last.beat !== beat) {
      this.seen.set(key, { beat, since: now });
      return false;
    }
    return now - last.since > HEARTBEAT_SILENCE_MS;
  }

  /** Whether a step that left no trace may be started again: the first time it is asked. */
  mayStartAgain(ref: StepRef): boolean {
    const key = stepKey(ref);
    if (this.restarted.has(key)) return false;
    this.restarted.add(key);
    this.seen.delete(key); // its new start gets the whole silence again
    return true;
  }

  /** Forgets a run's steps (it ended, or left this process). */
  forget(runUid: string): void {
    for (const key of this.seen.keys()) if (key.startsWith(`${runUid}/`)) this.seen.delete(key);
    for (const key of this.restarted) if (key.startsWith(`${runUid}/`)) this.restarted.delete(key);
  }
}

const stepKey = (ref: StepRef): string => `${ref.runUid}/${ref.attempt}/${ref.index}`;

/**
 * Starts the step's script in the background, in /workspace (agentd's default working
 * directory is not published; the script names the step's directory relative to it): the
 * command's id, or undefined when the VM took the command without naming one (the step is
 * then followed by its files). A second start runs nothing.
 */
export function startStep(vm: RunVM, ref: StepRef, step: StepScript, opts: { envs?: Record<string, string>; secretValues?: readonly string[]; timeoutMs?: number }): Promise<string | undefined> {
  return vm.start(stepScript(stepDir(ref.runUid, ref.attempt, ref.index), step), { ...opts, cwd: WORKSPACE });
}

/**
 * Where the step stands. The `exit` file, when there, is the answer (whichever start of the
 * step wrote it). Without it: the command's status, when its id is known, says whether it
 * still runs; a command that ended with ALREADY_STARTED was a second start, so the first one
 * (whose id is not known) is the step; one that ended with SETUP_FAILED and left no marker
 * could not make the step's directory, and nothing ran; any other end without an `exit` file
 * is a kill (the VM's timeout, a kill). Where the step's own command is not known (no id, a
 * second start's, or one the VM forgot), its heartbeat says whether its shell still lives.
 */
export async function observeStep(vm: RunVM, ref: StepRef, commandId: string | undefined, heartbeats: Heartbeats, now = Date.now()): Promise<StepObservation> {
  const dir = stepPath(ref.runUid, ref.attempt, ref.index);
  const status = commandId === undefined ? undefined : await vm.status(commandId);
  if (status?.running === true) return { state: "running" };
  // Without an id, the heartbeat before the exit file: an answer of the VM's, so that the exit
  // file's 404 (the step still running) is taken as agentd's without asking the compute API
  // each time. With one, it is read only where the command's status does not settle it.
  const beatFirst = commandId === undefined ? await vm.read(aliveFile(dir)) : undefined;
  const exitText = await vm.read(exitFile(dir));
  const exitCode = exitText === undefined ? undefined : parseExit(exitText);
  if (exitCode !== undefined) return { state: "ended", exitCode, outputPath: outputFile(dir) };
  if (status !== undefined && status.exitCode !== ALREADY_STARTED) {
    // With the marker there, the step did start: its own command exited so (and its exit file
    // could not be written).
    if (status.exitCode === SETUP_FAILED && (await vm.read(startedFile(dir))) === undefined) return setupFailed(dir);
    return { state: "ended", exitCode: status.exitCode ?? 137, outputPath: outputFile(dir) };
  }
  const beat = commandId === undefined ? beatFirst : await vm.read(aliveFile(dir));
  // A command the VM forgot, of a step that left no trace at all: nothing to wait for.
  if (commandId !== undefined && status === undefined && beat === undefined && (await vm.read(startedFile(dir))) === undefined) {
    return { state: "lost", message: `the VM no longer knows command ${commandId} and the step left no trace in ${dir}`, began: false };
  }
  if (!heartbeats.silent(ref, beat, now)) return { state: "running" };
  const silence = `${HEARTBEAT_SILENCE_MS / 1000}s`;
  if (beat !== undefined) return { state: "lost", message: `the step's heartbeat (${aliveFile(dir)}) stopped for ${silence} and it left no exit code: killed in the VM, or the VM restarted`, began: true };
  if ((await vm.read(startedFile(dir))) === undefined) {
    const message = `the step left no trace in ${dir} for ${silence} after its start: its directory could not be made there, or the VM did not run the command`;
    if (commandId === undefined && heartbeats.mayStartAgain(ref)) return { state: "notStarted", message };
    return { state: "lost", message, began: false };
  }
  return { state: "lost", message: `the step began (its marker is in ${dir}) but never wrote a heartbeat for ${silence}, nor an exit code`, began: true };
}

function setupFailed(dir: string): StepObservation {
  return {
    state: "setupFailed",
    message: `the step's directory ${dir} (or the marker file in it) could not be created in the VM (a file in its way, no permission, or a read-only or full disk), so the step did not run`,
  };
}

/**
 * Stops the step: kills its command when its id is known, and writes its `cancel` file, which
 * its watcher acts on within a heartbeat: the only way when the id is not known, and the way
 * that reaches the step when the id is a second start's. After a kill by id the file is a
 * second chance only: a VM whose disk is full must not hold a deletion up.
 */
export async function stopStep(vm: RunVM, ref: StepRef, commandId: string | undefined): Promise<void> {
  if (commandId === undefined) return cancelStep(vm, ref);
  await vm.kill(commandId);
  await cancelStep(vm, ref).catch(() => undefined);
}

/** Writes the step's `cancel` file: its watcher stops it within a heartbeat. */
export function cancelStep(vm: RunVM, ref: StepRef): Promise<void> {
  return vm.upload(cancelFile(stepPath(ref.runUid, ref.attempt, ref.index)), "");
}

/**
 * Removes the run's directory (its steps' output files and markers) from a VM, once the run is
 * over or deleted: a Sandbox's VM is shared and outlives the run. A step stopped just before may
 * not have read its cancel file yet (its watcher looks every heartbeat, and the file is the stop
 * where the id is not known, or is a second start's): that file is written again, alone, even
 * where the removal failed.
 */
export async function removeRunDir(vm: RunVM, runUid: string, stopped: readonly StepRef[]): Promise<void> {
  try {
    await vm.removeDir(runPath(runUid));
  } finally {
    for (const ref of stopped) await cancelStep(vm, ref).catch(() => undefined);
  }
}
