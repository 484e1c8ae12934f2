// The SandboxRun state machine's decisions, from status alone (all a restarted operator has).
import { describe, expect, it } from "vitest";
import type { SandboxRunSpec, SandboxRunStatus } from "../../../src/api/index.js";
import { attemptFailed, compareProgress, expiresAt, next, pollDelayMs, runConditions, type SandboxState } from "../../../src/runs/machine.js";

const NOW = new Date("2026-01-01T00:10:00Z");
const READY: SandboxState = { state: "ready", vmId: "vm-1" };
const spec = (extra: Partial<SandboxRunSpec> = {}): SandboxRunSpec => ({
  sandboxRef: { name: "box" },
  steps: [{ name: "a", command: "true" }, { name: "b", language: "python", code: "print(1)" }],
  ...extra,
});
const at = (min: number) => new Date(Date.parse("2026-01-01T00:00:00Z") + min * 60_000).toISOString().replace(/\.\d{3}Z$/, "Z");

describe("next", () => {
  it("waits for the Sandbox before the first attempt, and starts step 0 on its VM once Ready", () => {
    expect(next({ spec: spec(), status: {}, sandbox: { state: "gone", message: "Sandbox box not found" }, now: NOW })).toMatchObject({
      kind: "wait",
      reason: "WaitingForSandbox",
    });
    expect(next({ spec: spec(), status: {}, sandbox: { state: "waiting", reason: "WaitingForSandbox", message: "not Ready" }, now: NOW }).kind).toBe("wait");
    expect(next({ spec: spec(), status: { startTime: at(0) }, sandbox: READY, now: NOW })).toEqual({ kind: "start", attempt: 1, index: 0, vmId: "vm-1" });
  });

  it("follows a step whose command id is recorded, and never starts it again (a restart included)", () => {
    const status: SandboxRunStatus = { startTime: at(0), attempts: 1, vmId: "vm-1", steps: [{ name: "a", commandId: "c1", startedAt: at(1) }] };
    expect(next({ spec: spec(), status, sandbox: READY, now: NOW })).toEqual({ kind: "follow", attempt: 1, index: 0, commandId: "c1", vmId: "vm-1" });
    // A Sandbox that is not Ready for a moment does not stop the attempt.
    expect(next({ spec: spec(), status, sandbox: { state: "waiting", reason: "X", message: "y" }, now: NOW }).kind).toBe("follow");
  });

  it("starts the next step after a successful one, and succeeds after the last", () => {
    const one: SandboxRunStatus = { startTime: at(0), attempts: 1, vmId: "vm-1", steps: [{ name: "a", commandId: "c1", exitCode: 0, finishedAt: at(2) }] };
    expect(next({ spec: spec(), status: one, sandbox: READY, now: NOW })).toEqual({ kind: "start", attempt: 1, index: 1, vmId: "vm-1" });
    const two: SandboxRunStatus = { ...one, steps: [...one.steps!, { name: "b", commandId: "c2", exitCode: 0, finishedAt: at(3) }] };
    expect(next({ spec: spec(), status: two, sandbox: READY, now: NOW })).toEqual({ kind: "succeed" });
    // Even when the Sandbox has moved on to another VM meanwhile: the work is done.
    expect(next({ spec: spec(), status: two, sandbox: { state: "ready", vmId: "vm-2" }, now: NOW })).toEqual({ kind: "succeed" });
  });

  it("fails on a failed step without retries (StepFailed), retries while backoffLimit allows, then BackoffLimitExceeded", () => {
    const failed = (attempts: number): SandboxRunStatus => ({
      startTime: at(0),
      attempts,
      vmId: "vm-1",
      steps: [{ name: "a", commandId: "c", exitCode: 3, finishedAt: at(2) }],
    });
    expect(next({ spec: spec(), status: failed(1), sandbox: READY, now: NOW })).toMatchObject({ kind: "fail", reason: "StepFailed", message: 'step "a" failed with exit code 3' });
    expect(next({ spec: spec({ backoffLimit: 1 }), status: failed(1), sandbox: READY, now: NOW })).toMatchObject({ kind: "retry", reason: "StepFailed" });
    expect(next({ spec: spec({ backoffLimit: 1 }), status: failed(2), sandbox: READY, now: NOW })).toMatchObject({ kind: "fail", reason: "BackoffLimitExceeded" });
  });

  it("starts a new attempt at step 0 with its own number, on the Sandbox's VM of now", () => {
    const between: SandboxRunStatus = { startTime: at(0), attempts: 2, vmId: "vm-1", steps: [] };
    expect(next({ spec: spec({ backoffLimit: 2 }), status: between, sandbox: { state: "ready", vmId: "vm-2" }, now: NOW })).toEqual({
      kind: "start",
      attempt: 2,
      index: 0,
      vmId: "vm-2",
    });
  });

  it("fails with DeadlineExceeded past activeDeadlineSeconds, waiting included, and names the command to stop", () => {
    const running: SandboxRunStatus = { startTime: at(0), attempts: 1, vmId: "vm-1", steps: [{ name: "a", commandId: "c1", startedAt: at(1) }] };
    expect(next({ spec: spec({ activeDeadlineSeconds: 60 }), status: running, sandbox: READY, now: NOW })).toMatchObject({
      kind: "fail",
      reason: "DeadlineExceeded",
      kill: { vmId: "vm-1", attempt: 1, index: 0, commandId: "c1" },
    });
    expect(next({ spec: spec({ activeDeadlineSeconds: 60 }), status: { startTime: at(0) }, sandbox: { state: "waiting", reason: "W", message: "m" }, now: NOW })).toMatchObject({
      kind: "fail",
      reason: "DeadlineExceeded",
    });
    expect(next({ spec: spec({ activeDeadlineSeconds: 3600 }), status: running, sandbox: READY, now: NOW }).kind).toBe("follow");
  });

  it("follows a step the VM named no command id for by its files, never starting it again, and names it to stop by attempt and step", () => {
    const noId: SandboxRunStatus = { startTime: at(0), attempts: 2, vmId: "vm-1", steps: [{ name: "a", startedAt: at(1), finishedAt: at(2), exitCode: 0 }, { name: "b", startedAt: at(3) }] };
    expect(next({ spec: spec(), status: noId, sandbox: READY, now: NOW })).toEqual({ kind: "follow", attempt: 2, index: 1, vmId: "vm-1" });
    expect(next({ spec: spec({ activeDeadlineSeconds: 60 }), status: noId, sandbox: READY, now: NOW })).toMatchObject({
      kind: "fail",
      reason: "DeadlineExceeded",
      kill: { vmId: "vm-1", attempt: 2, index: 1 },
    });
    expect(next({ spec: spec(), status: noId, sandbox: { state: "gone", message: "gone" }, now: NOW })).toEqual({
      kind: "fail",
      reason: "SandboxDeleted",
      message: "gone while the run was running",
      kill: { vmId: "vm-1", attempt: 2, index: 1 },
    });
    // Started is started, with an id or without: a status that records it is further along.
    expect(compareProgress(noId, { ...noId, steps: noId.steps!.slice(0, 1) })).toBeGreaterThan(0);
  });

  it("succeeds past the deadline when every step is seen to have ended with 0 (the last one between two looks): a step cannot outlive the deadline", () => {
    const done: SandboxRunStatus = { startTime: at(0), attempts: 1, vmId: "vm-1", steps: [{ name: "a", commandId: "c1", startedAt: at(1), finishedAt: at(70), exitCode: 0 }] };
    const oneStep = spec({ activeDeadlineSeconds: 60, steps: [{ name: "a", command: "true" }] });
    expect(next({ spec: oneStep, status: done, sandbox: READY, now: NOW })).toEqual({ kind: "succeed" });
    // One that failed is not a success, nor is a run with a step still to start.
    const failed: SandboxRunStatus = { ...done, steps: [{ ...done.steps![0]!, exitCode: 1 }] };
    expect(next({ spec: oneStep, status: failed, sandbox: READY, now: NOW })).toMatchObject({ kind: "fail", reason: "DeadlineExceeded" });
    expect(next({ spec: spec({ activeDeadlineSeconds: 60 }), status: done, sandbox: READY, now: NOW })).toMatchObject({ kind: "fail", reason: "DeadlineExceeded" });
  });

  it("fails with SandboxDeleted when the Sandbox goes under a running run, and stops its step", () => {
    const running: SandboxRunStatus = { startTime: at(0), attempts: 1, vmId: "vm-1", steps: [{ name: "a", commandId: "c1", startedAt: at(1) }] };
    expect(next({ spec: spec(), status: running, sandbox: { state: "gone", message: 'Sandbox "box" was deleted' }, now: NOW })).toMatchObject({
      kind: "fail",
      reason: "SandboxDeleted",
      kill: { vmId: "vm-1", commandId: "c1" },
    });
    // Between two attempts too.
    expect(next({ spec: spec(), status: { startTime: at(0), attempts: 2, vmId: "vm-1", steps: [] }, sandbox: { state: "gone", message: "gone" }, now: NOW })).toMatchObject({
      kind: "fail",
      reason: "SandboxDeleted",
    });
  });

  it("counts a VM replaced under a running attempt as a failed attempt (VMLost)", () => {
    const running: SandboxRunStatus = { startTime: at(0), attempts: 1, vmId: "vm-1", steps: [{ name: "a", commandId: "c1", startedAt: at(1) }] };
    expect(next({ spec: spec(), status: running, sandbox: { state: "ready", vmId: "vm-2" }, now: NOW })).toMatchObject({ kind: "fail", reason: "VMLost" });
    expect(next({ spec: spec({ backoffLimit: 1 }), status: running, sandbox: { state: "ready", vmId: "vm-2" }, now: NOW })).toMatchObject({ kind: "retry", reason: "VMLost" });
  });

  it("does nothing more for a finished run", () => {
    expect(next({ spec: spec(), status: { phase: "Succeeded" }, sandbox: READY, now: NOW })).toEqual({ kind: "finished" });
    expect(next({ spec: spec(), status: { phase: "Failed" }, sandbox: READY, now: NOW })).toEqual({ kind: "finished" });
  });
});

describe("around the decisions", () => {
  it("attemptFailed keeps the reason without retries", () => {
    expect(attemptFailed(spec(), { attempts: 1 }, "CommandLost", "x")).toEqual({ kind: "fail", reason: "CommandLost", message: "x" });
  });

  it("polls a running step soon at first, then every few seconds, never past the deadline", () => {
    const status = (startedMin: number): SandboxRunStatus => ({ startTime: at(0), attempts: 1, vmId: "v", steps: [{ name: "a", commandId: "c", startedAt: at(startedMin) }] });
    expect(pollDelayMs(status(10), spec(), NOW)).toBe(250);
    expect(pollDelayMs(status(0), spec(), NOW)).toBe(5_000);
    expect(pollDelayMs(status(0), spec({ activeDeadlineSeconds: 601 }), NOW)).toBe(1_050);
  });

  it("deletes a finished run ttlSecondsAfterFinished after its completion", () => {
    expect(expiresAt(60, { phase: "Succeeded", completionTime: at(1) })).toBe(Date.parse(at(2)));
    expect(expiresAt(60, { phase: "Running" })).toBeUndefined();
    expect(expiresAt(undefined, { phase: "Failed", completionTime: at(1) })).toBeUndefined();
  });

  it("sets Ready and Complete on success, Stalled and Failed on failure, Reconciling while running", () => {
    const byType = (cs: ReturnType<typeof runConditions>) => Object.fromEntries(cs.map((c) => [c.type, c.status]));
    expect(byType(runConditions("Succeeded", "Succeeded", "ok"))).toEqual({ Ready: "True", Reconciling: "False", Stalled: "False", Complete: "True", Failed: "False" });
    expect(byType(runConditions("Failed", "StepFailed", "no"))).toEqual({ Ready: "False", Reconciling: "False", Stalled: "True", Complete: "False", Failed: "True" });
    expect(byType(runConditions("Running", "Running", "step 1"))).toEqual({ Ready: "False", Reconciling: "True", Stalled: "False" });
  });

  it("orders statuses by how far along they are, so an older cached one is never taken for the latest", () => {
    const running: SandboxRunStatus = { attempts: 1, vmId: "v", steps: [{ name: "a", commandId: "c", startedAt: at(0) }] };
    const ended: SandboxRunStatus = { attempts: 1, vmId: "v", steps: [{ name: "a", commandId: "c", startedAt: at(0), finishedAt: at(1), exitCode: 1 }] };
    const retry: SandboxRunStatus = { attempts: 2, vmId: "v", steps: [] };
    const done: SandboxRunStatus = { ...ended, phase: "Failed" };
    const released: SandboxRunStatus = { ...done, vmReleased: true };
    const order = [{}, running, ended, retry, done, released];
    for (let i = 1; i < order.length; i++) {
      expect(compareProgress(order[i]!, order[i - 1]!)).toBeGreaterThan(0);
      expect(compareProgress(order[i - 1]!, order[i]!)).toBeLessThan(0);
    }
    expect(compareProgress(running, { ...running })).toBe(0);
  });
});
