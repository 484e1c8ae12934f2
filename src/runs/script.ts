// The shell script a step runs as in the VM. It is what makes a step crash-safe: the step's
// directory holds a `started` marker made with noclobber (an atomic "create if absent"), so a
// second start of the same step of the same attempt (the operator killed between starting it
// and recording its command id, or an answer lost on the way back) exits at once with
// ALREADY_STARTED and runs nothing. A step whose directory or marker cannot be made (a file in
// the way, no permission, a read-only or full disk) exits SETUP_FAILED, running nothing: a
// failure of the step, not a second start.
//
// The step can be followed by its files alone, for when the id of the command that runs it is
// not known (the published agentd API names no event that carries it; a second start's id is
// that of a command that ran nothing): its output goes to `output`, its exit code to `exit`
// (written last, by rename), and while its shell lives a watcher beside it rewrites `alive`
// every HEARTBEAT_SECONDS (a counter: no clock of the VM is compared with the operator's) and
// stops the step when a `cancel` file appears (SIGTERM, then SIGKILL two seconds later, to the
// process whose pid the step wrote to `pid` as it began, or the wrapper's child that is not the
// watcher where that file went before the watcher read it, and every process below it). A process
// that left the step's tree (a daemon) is not reached that way; agentd's kill of a known
// command reaches its whole process group.
//
// The published agentd API gives neither a command's default working directory nor what a
// relative file path is relative to: every step is started with cwd /workspace, so the paths
// its script names relative to it are well defined, and the file API is sent absolute paths
// (stepPath, runPath). (The script's own paths stay relative: an emulator runs the script on a
// host where /workspace is another directory, its cwd.)
import type { RunLanguage } from "../api/index.js";

/** Exit code of a start that found the step already started (and ran nothing). */
export const ALREADY_STARTED = 213;
/** Exit code of a start that could not make the step's directory or its marker (and ran nothing). */
export const SETUP_FAILED = 214;

/** How often a running step's watcher rewrites its `alive` file. */
export const HEARTBEAT_SECONDS = 2;

/** The VM's workspace: the steps' working directory, and what a relative spec.files path is relative to. */
export const WORKSPACE = "/workspace";

/** The runs' directory in the VM, relative to /workspace (the steps' cwd). */
export const RUNS_DIR = ".agent-operator/runs";

const INTERPRETERS: Record<RunLanguage, string> = {
  python: "python3 -c",
  javascript: "node -e",
};

export interface StepScript {
  /** What the shell runs: the step's command, or its interpreter with its code. */
  command?: string | undefined;
  language?: RunLanguage | undefined;
  code?: string | undefined;
}

/** The step's directory in the VM, relative to /workspace (as its script names it): one per run, attempt and step. */
export function stepDir(runUid: string, attempt: number, index: number): string {
  return `${runDir(runUid)}/${attempt}/${index}`;
}

/** The run's directory in the VM, relative to /workspace. */
export function runDir(runUid: string): string {
  return `${RUNS_DIR}/${runUid}`;
}

/** The step's directory as an absolute path (what the file API is sent). */
export const stepPath = (runUid: string, attempt: number, index: number): string => vmPath(stepDir(runUid, attempt, index));
/** The run's directory as an absolute path (what the file API is sent). */
export const runPath = (runUid: string): string => vmPath(runDir(runUid));

export const outputFile = (dir: string): string => `${dir}/output`;
export const exitFile = (dir: string): string => `${dir}/exit`;
export const startedFile = (dir: string): string => `${dir}/started`;
/** Rewritten every HEARTBEAT_SECONDS while the step's shell lives. */
export const aliveFile = (dir: string): string => `${dir}/alive`;
/** Its appearance stops the step: written by the operator with every stop (the stop itself when the step's command id is not known). */
export const cancelFile = (dir: string): string => `${dir}/cancel`;

/** A path in the VM as an absolute one: a relative path is relative to /workspace. */
export function vmPath(path: string): string {
  return path.startsWith("/") ? path : `${WORKSPACE}/${path}`;
}

/** A string as one shell word ('...' with each ' written as '\''). */
export function shellQuote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/** The user's part of the script: the command, or the interpreter given the code. */
export function innerCommand(step: StepScript): string {
  if (step.command !== undefined) return `/bin/sh -c ${shellQuote(step.command)}`;
  if (step.language === undefined || step.code === undefined) throw new Error("a step needs a command, or a language and code");
  return `${INTERPRETERS[step.language]} ${shellQuote(step.code)}`;
}

/**
 * The whole script for one step of one attempt. The user's command runs in its own shell (a
 * `cd` or `exit` of its own does not reach the wrapper), with stdin from /dev/null. A marker
 * that cannot be made is ALREADY_STARTED only if it is there (another start made it), else
 * SETUP_FAILED, as is a directory that cannot be made.
 */
export function stepScript(dir: string, step: StepScript): string {
  // Absolute from the start: a step that removes and makes /workspace again (a fresh clone)
  // leaves the wrapper's working directory behind, and the exit file must still land.
  const d = '"$_ao_d"';
  // The watcher: a background subshell. It beats while the step's own process lives (its pid
  // from the pid file; the wrapper's $$ until that is there; by /proc too, as `kill -0` is
  // refused for a process of another user, a step that became `sudo ...`) and until the exit
  // file is written, making the directory again if the step removed it (or a deletion of the
  // run did, whose cancel file then lands in it again). On a cancel file it
  // signals the step's process and every process below it (one scan of /proc, read before the
  // signals: once the step's shell dies its children belong to init; the step's pid alone
  // where there is no awk), SIGTERM, then SIGKILL two seconds later, and stops. Its output goes
  // nowhere, so that an agentd which waits for the command's pipes to close does not wait for it.
  const beat = [
    `[ -n "$p" ] || p=$(cat ${d}/pid 2>/dev/null)`,
    // (Not once the step has ended: the wrapper's children then are its mkdir and mv.)
    `[ -n "$p" ] || [ -e ${d}/exit ] || p=$(kid)`,
    'if [ -n "$p" ]; then live "$p" || break; else live $$ || break; fi',
    `[ -e ${d}/exit ] && break`,
    `n=$((n+1)); mkdir -p ${d}; echo "$n" > ${d}/alive.tmp && mv -f ${d}/alive.tmp ${d}/alive`,
    `if [ -n "$p" ] && [ -e ${d}/cancel ]; then t=$(tree "$p"); [ -n "$t" ] || t=$p; kill -s TERM $t; sleep ${HEARTBEAT_SECONDS}; kill -s KILL $t $(tree "$p"); break; fi`,
    `sleep ${HEARTBEAT_SECONDS}`,
  ].join("; ");
  const live = 'live() { kill -0 "$1" 2>/dev/null || [ -d /proc/"$1" ]; }';
  // The pid and its descendants, from each process's parent in /proc/<pid>/stat (the fields
  // after the command name, which may hold spaces and parentheses, so cut at its last ")").
  // (Through cat: a process that ends during the scan must not end it, as it does some awks.)
  const tree =
    "tree() { cat /proc/[0-9]*/stat 2>/dev/null | awk -v root=\"$1\" '{ s = $0; sub(/^.*\\) /, \"\", s); split(s, a, \" \"); parent[$1] = a[2] } " +
    "END { n = 1; q[1] = root; out = root; for (i = 1; i <= n; i++) for (c in parent) if (parent[c] == q[i]) { q[++n] = c; out = out \" \" c }; print out }' 2>/dev/null; }";
  // The step's process without its pid file (gone with the run's directory, removed at a
  // deletion before the watcher read it): the wrapper's child that is not the watcher, which
  // knows its own pid as the parent of a process it starts (its $$ is the wrapper's).
  const kid =
    "kid() { [ -n \"$me\" ] && cat /proc/[0-9]*/stat 2>/dev/null | awk -v parent=\"$$\" -v me=\"$me\" '{ s = $0; sub(/^.*\\) /, \"\", s); split(s, a, \" \"); if (a[2] == parent && $1 != me) { print $1; exit } }' 2>/dev/null; }";
  const watcher = `(${live}; ${tree}; ${kid}; me=$(exec /bin/sh -c 'echo $PPID'); p=; n=0; while :; do ${beat}; done) > /dev/null 2>&1 < /dev/null &`;
  return [
    `_ao_d="$PWD"/${shellQuote(dir)}`,
    `mkdir -p ${d} 2>/dev/null || exit ${SETUP_FAILED}`,
    `(set -C; : > ${d}/started) 2>/dev/null || { [ -e ${d}/started ] && exit ${ALREADY_STARTED}; exit ${SETUP_FAILED}; }`,
    watcher,
    // In the foreground (a background command would start with SIGINT ignored), through a shell
    // that writes its pid for the watcher and then becomes the step's command (named "sh", so
    // that the shell's own messages read as before).
    `/bin/sh -c '{ echo $$ > "$1"; } 2>/dev/null; shift; exec "$@"' sh ${d}/pid ${innerCommand(step)} > ${d}/output 2>&1 < /dev/null`,
    "code=$?",
    // Made again if the step removed it (a `git clean -xdf` in /workspace): the exit file, not
    // the exit code 213 or 214 of a step that lost it, must say how the step ended.
    `mkdir -p ${d} 2>/dev/null`,
    `echo "$code" > ${d}/exit.tmp && mv -f ${d}/exit.tmp ${d}/exit`,
    'exit "$code"',
  ].join("\n");
}

/** The exit code in an `exit` file's text; undefined if it is not one. */
export function parseExit(text: string): number | undefined {
  const t = text.trim();
  return /^\d{1,3}$/.test(t) ? Number(t) : undefined;
}
