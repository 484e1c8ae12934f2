// The shell script a step runs as in the VM. It is what makes a step crash-safe: the step's
// directory holds a `started` marker made with noclobber (an atomic "create if absent"), so a
// second start of the same step of the same attempt (the operator killed between starting it
// and recording its command id, or an answer lost on the way back) exits at once with
// ALREADY_STARTED and runs nothing. The step's output goes to a file in that directory and its
// exit code to `exit` (written last, by rename), which is how a step is followed when the id
// of the command that runs it is not known.
import type { RunLanguage } from "../api/index.js";

/** Exit code of a start that found the step already started (and ran nothing). */
export const ALREADY_STARTED = 213;

/** The runs' directory in the VM, relative to /workspace (commands run there). */
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

/** The step's directory in the VM (relative to /workspace): one per run, attempt and step. */
export function stepDir(runUid: string, attempt: number, index: number): string {
  return `${runDir(runUid)}/${attempt}/${index}`;
}

export function runDir(runUid: string): string {
  return `${RUNS_DIR}/${runUid}`;
}

export const outputFile = (dir: string): string => `${dir}/output`;
export const exitFile = (dir: string): string => `${dir}/exit`;

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
 * `cd` or `exit` of its own does not reach the wrapper), with stdin from /dev/null.
 */
export function stepScript(dir: string, step: StepScript): string {
  const d = shellQuote(dir);
  return [
    `mkdir -p ${d} && (set -C; : > ${d}/started) 2>/dev/null || exit ${ALREADY_STARTED}`,
    `${innerCommand(step)} > ${d}/output 2>&1 < /dev/null`,
    "code=$?",
    `echo "$code" > ${d}/exit.tmp && mv -f ${d}/exit.tmp ${d}/exit`,
    'exit "$code"',
  ].join("\n");
}

/** The exit code in an `exit` file's text; undefined if it is not one. */
export function parseExit(text: string): number | undefined {
  const t = text.trim();
  return /^\d{1,3}$/.test(t) ? Number(t) : undefined;
}
