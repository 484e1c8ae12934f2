// Child processes of the VM runtimes. Each runs in its own process group (spawned detached, so
// it leads a new session), so that killing it kills what it started too: a shell's pipeline, a
// `sleep &`, a kernel's subprocess. A group is killed (and forgotten) at the latest when its
// leader has exited, so a group id is never signalled after it could have been reused. Every
// group still known is killed if the emulator's process exits without closing the emulator (a
// crashed test run must not leave work running).
//
// A process can leave its group (setsid, a daemon's double fork): each VM's processes also carry
// the VM's cookie in their environment (VM_COOKIE_VARIABLE), which children inherit whatever
// group or session they move to, and a VM's end kills every process carrying it (where /proc
// lists processes: Linux). Jenkins' ProcessTreeKiller finds a build's strays the same way.
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import { readFile, readdir } from "node:fs/promises";
import { constants } from "node:os";

/** The environment variable a VM's processes carry its cookie in. */
export const VM_COOKIE_VARIABLE = "AGENT_EMULATOR_VM_COOKIE";
/** Cookies of the VMs that started a process and have not ended: for the exit hook. */
const liveCookies = new Set<string>();

const liveGroups = new Set<number>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on("exit", () => {
    for (const pgid of liveGroups) signalGroup(pgid, "SIGKILL");
    if (liveCookies.size > 0) killCarryingNow([...liveCookies]);
  });
}

export interface SpawnOptions {
  cwd: string;
  env: Record<string, string>;
  /** Keep stdin as a pipe (a kernel's command channel); default /dev/null. */
  stdinPipe?: boolean;
  /** The VM's cookie, put in the environment last (see killCarrying). */
  cookie: string;
}

/** Spawns `file args` as the leader of a new process group; `.pid` is the group id. */
export function spawnGroup(file: string, args: readonly string[], opts: SpawnOptions): ChildProcess {
  installExitHook();
  liveCookies.add(opts.cookie);
  const child = spawn(file, args, {
    cwd: opts.cwd,
    env: { ...opts.env, [VM_COOKIE_VARIABLE]: opts.cookie },
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

/**
 * Kills every process whose environment carries `cookie` (those that left their group too);
 * nothing where /proc does not list processes. Reads /proc without holding the event loop: a
 * sweep ending hundreds of VMs must not stall the emulator's answers.
 */
export async function killCarrying(cookie: string): Promise<void> {
  liveCookies.delete(cookie);
  const pids = await readdir("/proc").catch(() => []);
  await Promise.all(
    pids.filter(isOtherPid).map(async (pid) => {
      // Gone meanwhile, or another user's: nothing to read, nothing of ours.
      if (carries(await readFile(`/proc/${pid}/environ`, "latin1").catch(() => ""), [cookie])) kill(pid);
    }),
  );
}

/** killCarrying for several cookies in one scan, synchronously: the process's exit hook. */
function killCarryingNow(cookies: readonly string[]): void {
  for (const pid of tryOr(() => readdirSync("/proc"), []).filter(isOtherPid)) {
    if (carries(tryOr(() => readFileSync(`/proc/${pid}/environ`, "latin1"), ""), cookies)) kill(pid);
  }
}

/** Whether a process's environment (/proc/<pid>/environ) carries one of the cookies. */
const carries = (environ: string, cookies: readonly string[]): boolean => cookies.some((c) => environ.includes(`${VM_COOKIE_VARIABLE}=${c}\0`));

function tryOr<T>(read: () => T, otherwise: T): T {
  try {
    return read();
  } catch {
    return otherwise;
  }
}

const isOtherPid = (d: string): boolean => /^\d+$/.test(d) && Number(d) !== process.pid;

function kill(pid: string): void {
  try {
    process.kill(Number(pid), "SIGKILL");
  } catch {
    // gone meanwhile
  }
}

/** A shell's convention for a process ended by a signal: 128 + the signal's number. */
export function exitCodeOf(code: number | null, signal: NodeJS.Signals | null): number {
  if (code !== null) return code;
  const n = signal !== null ? constants.signals[signal] : undefined;
  return n !== undefined ? 128 + n : 1;
}
