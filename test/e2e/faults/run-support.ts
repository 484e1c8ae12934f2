// Helpers of the SandboxRun crash suite (run-crash.test.ts): a plan of runs whose outcome is
// known in advance (which attempts run which steps, which lines the steps append), their
// manifests, and what the emulator itself saw: every command each step of each attempt was
// started as, and the lines the steps appended in the VMs' workspaces. Nothing here reads the
// operator's status: the evidence is the emulator's own records.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Emulator } from "../../../src/emulator/index.js";
import { ALREADY_STARTED, RUNS_DIR } from "../../../src/runs/script.js";

export interface PlannedStep {
  name: string;
  command?: string;
  language?: "python";
  code?: string;
}

export type RunKind = "ok" | "retry" | "fail" | "exhaust";

export interface RunPlan {
  name: string;
  kind: RunKind;
  sandbox: string;
  backoffLimit: number;
  steps: PlannedStep[];
  expected: {
    phase: "Succeeded" | "Failed";
    /** The Failed condition's reason, for runs that fail. */
    reason?: string;
    /** `<attempt>/<step index>` of every step the emulator must have run, with its exit code. */
    steps: Map<string, number>;
    /** How many times each line is in the run's log file (one line per step run). */
    lines: Map<string, number>;
  };
}

/** The file a run's steps append to, in /workspace (commands run there). */
export const logFile = (run: string): string => `ran-${run}.log`;
const line = (run: string, step: string) => `step-${run}-${step}`;

/** A shell step: a little work (so a kill can land mid-step), then one line appended. */
function shellStep(run: string, name: string, sleep: number, after = ""): PlannedStep {
  return { name, command: `sleep ${sleep.toFixed(2)}; echo ${line(run, name)} >> ${logFile(run)}${after}` };
}

function pythonStep(run: string, name: string, sleep: number): PlannedStep {
  return {
    name,
    language: "python",
    code: `import time\ntime.sleep(${sleep.toFixed(2)})\nwith open(${JSON.stringify(logFile(run))}, "a") as f:\n    f.write(${JSON.stringify(`${line(run, name)}\n`)})\nprint(sum(range(10)))\n`,
  };
}

/** The step of a `retry` run: fails the first time (no gate file yet, so it makes one), passes the next. */
function gateStep(run: string, sleep: number): PlannedStep {
  return shellStep(run, "gate", sleep, `; test -f gate-${run} || { touch gate-${run}; exit 1; }`);
}

/**
 * `count` runs over `sandboxes`: mostly 2-3 step runs that succeed (every third with a python
 * step), and at fixed places a run whose first attempt fails deterministically and whose
 * second succeeds (backoffLimit 1), one whose step fails (backoffLimit 0) and one that fails
 * both its attempts.
 */
export function planRuns(count: number, sandboxes: readonly string[], random: () => number = Math.random): RunPlan[] {
  const plans: RunPlan[] = [];
  const sleep = () => 0.3 + random() * 0.9;
  for (let i = 0; i < count; i++) {
    const name = `run-${String(i).padStart(2, "0")}`;
    const sandbox = sandboxes[i % sandboxes.length]!;
    const kind: RunKind = i % 8 === 5 ? "retry" : i % 10 === 9 ? "fail" : i === count - 2 ? "exhaust" : "ok";
    let steps: PlannedStep[];
    let backoffLimit = 0;
    const expectedSteps = new Map<string, number>();
    const lines = new Map<string, number>();
    const ran = (attempt: number, index: number, exitCode = 0) => {
      expectedSteps.set(`${attempt}/${index}`, exitCode);
      const l = line(name, steps[index]!.name);
      lines.set(l, (lines.get(l) ?? 0) + 1);
    };
    let expected: Pick<RunPlan["expected"], "phase" | "reason">;
    switch (kind) {
      case "ok": {
        steps = [shellStep(name, "first", sleep())];
        if (i % 3 === 0) steps.push(pythonStep(name, "py", sleep()));
        if (i % 2 === 0) steps.push(shellStep(name, "last", sleep()));
        if (steps.length === 1) steps.push(shellStep(name, "second", sleep()));
        steps.forEach((_, index) => ran(1, index));
        expected = { phase: "Succeeded" };
        break;
      }
      case "retry":
        backoffLimit = 1;
        steps = [shellStep(name, "first", sleep()), gateStep(name, sleep()), shellStep(name, "last", sleep())];
        ran(1, 0);
        ran(1, 1, 1);
        [0, 1, 2].forEach((index) => ran(2, index));
        expected = { phase: "Succeeded" };
        break;
      case "fail":
        steps = [shellStep(name, "first", sleep()), shellStep(name, "broken", sleep(), "; exit 3"), shellStep(name, "never", sleep())];
        ran(1, 0);
        ran(1, 1, 3);
        expected = { phase: "Failed", reason: "StepFailed" };
        break;
      case "exhaust":
        backoffLimit = 1;
        steps = [pythonStep(name, "py", sleep()), shellStep(name, "broken", sleep(), "; exit 3"), shellStep(name, "never", sleep())];
        for (const attempt of [1, 2]) {
          ran(attempt, 0);
          ran(attempt, 1, 3);
        }
        expected = { phase: "Failed", reason: "BackoffLimitExceeded" };
        break;
    }
    plans.push({ name, kind, sandbox, backoffLimit, steps, expected: { ...expected, steps: expectedSteps, lines } });
  }
  return plans;
}

/** The runs as one multi-document manifest (JSON documents: the code has newlines and quotes). */
export function runManifests(plans: readonly RunPlan[]): string {
  return plans
    .map((p) =>
      JSON.stringify({
        apiVersion: "agentcompute.dev/v1alpha1",
        kind: "SandboxRun",
        metadata: { name: p.name },
        spec: { sandboxRef: { name: p.sandbox }, backoffLimit: p.backoffLimit, steps: p.steps },
      }),
    )
    .join("\n---\n");
}

/** One command the emulator started for a step (`<attempt>/<index>`) of a run. */
export interface StepCommand {
  vmId: string;
  commandId: string;
  /** The command's exit code once it ended (ALREADY_STARTED: a second start that ran nothing). */
  exitCode: number | undefined;
  running: boolean;
  /** When the emulator started it (its clock, ms since the epoch). */
  startedAt: number;
}

export interface ExecutionRecords {
  /** By run uid, then `<attempt>/<index>`: every command started for that step. */
  byRun: Map<string, Map<string, StepCommand[]>>;
  /** Commands that are not a run's step (there should be none). */
  other: number;
  /** Sum of the live VMs' own execution counters. */
  executions: number;
  /** Commands in the live VMs. */
  commands: number;
}

const STEP_DIR = new RegExp(`${RUNS_DIR.replaceAll(".", "\\.")}/([0-9a-f-]+)/(\\d+)/(\\d+)`);

/** What the emulator's VM runtimes started: each command, grouped by the run step it belongs to. */
export function executionRecords(emulator: Emulator): ExecutionRecords {
  const byRun = new Map<string, Map<string, StepCommand[]>>();
  let other = 0;
  let executions = 0;
  let commands = 0;
  for (const [vmId, rt] of emulator.runtimes.all) {
    executions += rt.executions;
    for (const cmd of rt.commands.values()) {
      commands++;
      const m = STEP_DIR.exec(cmd.spec.command);
      if (m === null) {
        other++;
        continue;
      }
      const [, uid, attempt, index] = m;
      const status = cmd.status();
      const steps = byRun.get(uid!) ?? new Map<string, StepCommand[]>();
      byRun.set(uid!, steps);
      const key = `${attempt}/${index}`;
      steps.set(key, [...(steps.get(key) ?? []), { vmId, commandId: cmd.id, exitCode: status.exit_code, running: status.running, startedAt: cmd.startedAt }]);
    }
  }
  return { byRun, other, executions, commands };
}

/** Commands of one step that really ran it (not a second start stopped by the marker). */
export const ranTheStep = (cmds: readonly StepCommand[]): StepCommand[] => cmds.filter((c) => c.exitCode !== ALREADY_STARTED);

/** How far the runs are at this moment, as the VMs see it: steps started (once each), commands running. */
export function progress(emulator: Emulator): { steps: number; running: number } {
  let steps = 0;
  let running = 0;
  for (const cmds of [...executionRecords(emulator).byRun.values()].flatMap((m) => [...m.values()])) {
    steps += cmds.some((c) => c.exitCode !== ALREADY_STARTED) ? 1 : 0;
    running += cmds.filter((c) => c.running).length;
  }
  return { steps, running };
}

/**
 * Second starts the marker stopped, over every run; `sameLife`: those with no restart of the
 * operator between the step's first start and them (a live operator starting a step again),
 * as `<run uid> <attempt>/<index>: first start, second start (emulator clock, ms)`.
 */
export function secondStarts(records: ExecutionRecords, restartedAt: readonly number[] = []): { total: number; sameLife: string[] } {
  let total = 0;
  const sameLife: string[] = [];
  for (const [uid, steps] of records.byRun) {
    for (const [key, cmds] of steps) {
      const first = Math.min(...cmds.map((c) => c.startedAt));
      for (const c of cmds) {
        if (c.exitCode !== ALREADY_STARTED) continue;
        total++;
        if (!restartedAt.some((t) => t > first && t < c.startedAt)) sameLife.push(`${uid} ${key}: ${first}, ${c.startedAt}`);
      }
    }
  }
  return { total, sameLife };
}

/** The run's log file in every live VM's workspace that has one: vm id → its lines, counted. */
export function appendedLines(emulator: Emulator, run: string): Map<string, Map<string, number>> {
  const out = new Map<string, Map<string, number>>();
  for (const [vmId, rt] of emulator.runtimes.all) {
    const file = join(rt.workspace, logFile(run));
    if (!existsSync(file)) continue;
    const counts = new Map<string, number>();
    for (const l of readFileSync(file, "utf8").split("\n")) if (l !== "") counts.set(l, (counts.get(l) ?? 0) + 1);
    out.set(vmId, counts);
  }
  return out;
}
