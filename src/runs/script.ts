// The shell script a step runs as in the VM. It is what makes a step crash-safe: the step's
// directory holds a `started` marker made with noclobber (an atomic "create if absent"), so a
// second start of the same step of the same attempt (the operator killed between starting it
// and recording its command id, or an answer lost on the way back) exits at once with
// ALREADY_STARTED and runs nothing. The step's output goes to a file in that directory and its
// exit code to `exit` (written last, by rename), which is how a step is followed when the id
// of the command that runs it is not known. A step whose directory or marker cannot be made
// (a file in the way, no permission, a read-only or full disk) exits SETUP_FAILED, running
// nothing: a failure of the step, not a second start.
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
  const d = shellQuote(dir);
  return [
    `mkdir -p ${d} 2>/dev/null || exit ${SETUP_FAILED}`,
    `(set -C; : > ${d}/started) 2>/dev/null || { [ -e ${d}/started ] && exit ${ALREADY_STARTED}; exit ${SETUP_FAILED}; }`,
    `${innerCommand(step)} > ${d}/output 2>&1 < /dev/null`,
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
