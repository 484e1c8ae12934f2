// Child processes of the VM runtimes. Each runs in its own process group (spawned detached, so
// it leads a new session), so that killing it kills what it started too: a shell's pipeline, a
// `sleep &`, a kernel's subprocess. A group is killed (and forgotten) at the latest when its
// leader has exited, so a group id is never signalled after it could have been reused. Every
// group still known is killed if the emulator's process exits without closing the emulator (a
// crashed test run must not leave work running).
import { spawn, type ChildProcess } from "node:child_process";
import { constants } from "node:os";

const liveGroups = new Set<number>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on("exit", () => {
    for (const pgid of liveGroups) signalGroup(pgid, "SIGKILL");
  });
}

export interface SpawnOptions {
  cwd: string;
  env: Record<string, string>;
  /** Keep stdin as a pipe (a kernel's command channel); default /dev/null. */
  stdinPipe?: boolean;
}

/** Spawns `file args` as the leader of a new process group; `.pid` is the group id. */
export function spawnGroup(file: string, args: readonly string[], opts: SpawnOptions): ChildProcess {
  installExitHook();
  const child = spawn(file, args, {
    cwd: opts.cwd,
    env: opts.env,
    detached: true,
    stdio: [opts.stdinPipe === true ? "pipe" : "ignore", "pipe", "pipe"],
  });
  if (child.pid !== undefined) liveGroups.add(child.pid);
  return child;
}

/** Signals every process of the group; false when there is none left. */
export function signalGroup(pgid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch {
    return false;
  }
}

/** Kills the group and forgets it. */
export function killGroup(pgid: number): void {
  signalGroup(pgid, "SIGKILL");
  liveGroups.delete(pgid);
}

/** A shell's convention for a process ended by a signal: 128 + the signal's number. */
export function exitCodeOf(code: number | null, signal: NodeJS.Signals | null): number {
  if (code !== null) return code;
  const n = signal !== null ? constants.signals[signal] : undefined;
  return n !== undefined ? 128 + n : 1;
}
