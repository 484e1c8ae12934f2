// What `logs` says on stderr about a run that has not ended: each situation once.
import { describe, expect, it } from "vitest";
import type { SandboxRunStatus } from "../../../src/api/index.js";
import { sayFailedAttempt, sayProgress } from "../../../src/commands/logs.js";

/** The lines said over a sequence of looks at a run, as printLogs says them (once each). */
function said(looks: SandboxRunStatus[], follow = true, live = false): string[] {
  const keys = new Set<string>();
  const lines: string[] = [];
  for (const st of looks) {
    sayProgress(
      st,
      "job",
      (key, line) => {
        if (keys.has(key)) return;
        keys.add(key);
        lines.push(line.trimEnd());
      },
      follow,
      live,
    );
  }
  return lines;
}

const ready = (reason: string, message: string) => [{ type: "Ready", status: "False" as const, reason, message, lastTransitionTime: "2026-11-25T00:00:00Z" }];

/** A run whose step "build" (of `of`) runs, Ready saying `reason` and `message` (default: Running). */
const runningStatus = (of: number, reason = "Running", message = `step 1/${of} "build" is running`): SandboxRunStatus => ({
  phase: "Running",
  attempts: 1,
  steps: [{ name: "build", commandId: "c1", startedAt: "2026-11-25T00:00:01Z" }],
  conditions: ready(reason, message),
});

describe("logs: what a run that has not ended is doing", () => {
  it("says why it waits, then that its step runs, once each however often it is looked at", () => {
    const waiting: SandboxRunStatus = { phase: "Pending", conditions: ready("WaitingForSandbox", 'Sandbox "box" is not Ready yet') };
    const running = runningStatus(2);
    expect(said([waiting, waiting, running, running])).toEqual([
      'sandboxrun/job: WaitingForSandbox: Sandbox "box" is not Ready yet',
      '--- step "build" (attempt 1) is running; its output is printed once it has ended ---',
    ]);
  });

  it("without -f, says a running step's output is not printed yet and that -f follows it", () => {
    const running = runningStatus(1);
    expect(said([running], false)).toEqual(['--- step "build" (attempt 1) is still running; its output is not printed yet (-f follows the run and prints it once the step has ended) ---']);
  });

  it("with the step's output read live, says only that it runs (its output follows, on stdout)", () => {
    const running = runningStatus(1);
    expect(said([running, running], true, true)).toEqual(['--- step "build" (attempt 1) is running ---']);
    expect(said([running], false, true)).toEqual(['--- step "build" (attempt 1) is still running; its output so far: ---']);
  });

  it("says a trouble met while a step runs, rather than only that the step runs", () => {
    const troubled = runningStatus(1, "SecretNotFound", 'Secret "creds" (spec.envFrom[0].secretRef.name) not found');
    expect(said([troubled])).toEqual(['sandboxrun/job: SecretNotFound: Secret "creds" (spec.envFrom[0].secretRef.name) not found']);
  });

  it("says when a new attempt starts, and a wait within it even if an earlier attempt waited for the same reason", () => {
    const wait = (attempts: number, message: string): SandboxRunStatus => ({ phase: "Running", attempts, steps: [], conditions: ready("WaitingForSandbox", message) });
    expect(said([wait(1, "not Ready yet"), wait(2, "not Ready yet"), wait(2, "not Ready yet")])).toEqual([
      "sandboxrun/job: WaitingForSandbox: not Ready yet",
      "--- attempt 2 (attempt 1 failed) ---",
      "sandboxrun/job: WaitingForSandbox: not Ready yet",
    ]);
  });

  it("says where the attempt before failed (its step's last output, on stderr), then the new attempt, before any step of it", () => {
    const st: SandboxRunStatus = {
      phase: "Running",
      attempts: 2,
      steps: [{ name: "one", commandId: "c3", startedAt: "2026-11-25T00:01:00Z", finishedAt: "2026-11-25T00:01:01Z", exitCode: 0 }],
      lastFailedAttempt: {
        attempt: 1,
        reason: "StepFailed",
        message: 'attempt 1 failed: step "two" failed with exit code 4',
        step: { name: "two", commandId: "c2", startedAt: "2026-11-25T00:00:02Z", finishedAt: "2026-11-25T00:00:03Z", exitCode: 4, output: "boom\n" },
      },
      conditions: ready("Running", "between steps"),
    };
    const out: string[] = [];
    const err: string[] = [];
    const printed = new Set(["1/one"]); // attempt 1's first step, printed when it ended
    const keys = new Set<string>();
    const sayOnce = (key: string, line: string) => {
      if (keys.has(key)) return;
      keys.add(key);
      err.push(line);
    };
    const io = { out: (t: string) => void out.push(t), err: (t: string) => void err.push(t) };
    sayFailedAttempt(st, printed, sayOnce, io);
    sayFailedAttempt(st, printed, sayOnce, io); // looked at again: said once
    expect(err).toEqual(['--- step "two" (attempt 1, exit code 4; the last of its output) ---\nboom\n', '--- attempt 2 (attempt 1 failed: step "two" failed with exit code 4) ---\n']);
    // Stdout is the output of the attempt that counts (a run that succeeded in attempt 2: its own).
    expect(out).toEqual([]);
  });
});
