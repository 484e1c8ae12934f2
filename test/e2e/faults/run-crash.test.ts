// The operator is SIGKILLed four times while 24 SandboxRuns (2-3 steps each: shell and python,
// retries with backoffLimit 1, failing steps) run in three Sandboxes' VMs: at random moments
// (mid-step, between a step's end and the status that says so, during a retry) and once right
// after a step's command started (before its id is recorded). It runs as a child process
// (`agent-operator run`); the emulator lives in the test process, so the VMs, their running
// commands and their workspaces survive every kill. After the last restart every run has
// finished as planned, and the emulator's own records say that every step of every attempt ran
// exactly once (a second start of a step, which the crash-safety marker stops before it runs
// anything, is allowed and counted), and so do the lines the steps appended in the VMs.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Emulator } from "../../../src/emulator/index.js";
import { startEmulator } from "../../../src/emulator/index.js";
import { kubectl, kubectlOk, testKubeconfig, useTestNamespace, waitFor } from "../support/kube.js";
import { API_KEY, apply, connectionManifest, installCRDs, type Resource } from "../support/operator.js";
import { startOperatorProcess, type OperatorProcess } from "../support/process.js";
import { appendedLines, executionRecords, planRuns, progress, ranTheStep, runManifests, secondStarts, type RunPlan, type StepCommand } from "./run-support.js";
import { createAll, mixedManifests, waitAllReady } from "./support.js";

const ns = useTestNamespace("fault-run-crash");
let emulator: Emulator;
let op: OperatorProcess | undefined;
const logs: string[] = [];

const SANDBOXES = 3;
const RUNS = 24;
const KILLS = 4;
/** The life killed right after a step's command started, rather than at a random moment. */
const TARGETED = 2;

const start = () => startOperatorProcess({ kubeconfig: testKubeconfig(), namespaces: [ns.name], logs, logLevel: process.env.E2E_LOG_LEVEL ?? "info" });
/** Commands the emulator has started in every VM (the operator's progress, as the service sees it). */
const started = () => emulator.runtimes.executions;

interface RunResource extends Resource {
  status?: Resource["status"] & { phase?: string };
}

async function listRuns(): Promise<RunResource[]> {
  const out = await kubectlOk(["get", "sandboxruns", "-o", "json"], { namespace: ns.name, timeoutMs: 60_000 });
  return (JSON.parse(out) as { items: RunResource[] }).items;
}

const finished = (r: RunResource) => r.status?.phase === "Succeeded" || r.status?.phase === "Failed";

/** Where the runs that have not finished stand, for a timeout's message. */
async function unfinished(): Promise<string> {
  const open = (await listRuns()).filter((r) => !finished(r));
  const ready = (r: RunResource) => r.status?.conditions?.find((c) => c.type === "Ready");
  return `${open.length} not finished: ${open.map((r) => `${r.metadata.name} ${r.status?.phase ?? "-"} ${ready(r)?.reason ?? "-"} "${ready(r)?.message ?? ""}"`).join("; ")}`;
}

/** waitFor, with the unfinished runs in the timeout's message. */
async function waitOrExplain<T>(probe: () => Promise<T | undefined | false> | T | undefined | false, opts: { timeoutMs: number; intervalMs?: number; description: string }): Promise<T> {
  try {
    return await waitFor(probe, opts);
  } catch (err) {
    throw new Error(`${err instanceof Error ? err.message : String(err)}; ${await unfinished()}`, { cause: err });
  }
}

beforeAll(async () => {
  await installCRDs();
  emulator = await startEmulator({ apiKey: API_KEY, strictBodies: true, orgId: "org-e2e" });
  await apply(connectionManifest(ns.name, emulator), ns.name);
});

afterAll(async () => {
  if (op?.alive()) {
    // Runs first (a finished run needs nothing of the service), then the Sandboxes' VMs.
    await kubectl(["delete", "sandboxruns", "--all", "--wait=true", "--timeout=60s"], { namespace: ns.name });
    await kubectl(["delete", "sandboxes", "--all", "--wait=true", "--timeout=60s"], { namespace: ns.name });
    await op.stop();
  }
  await emulator?.close();
});

describe("SIGKILL at random points while 24 SandboxRuns run in 3 Sandboxes", () => {
  it("finishes every run as planned, every step of every attempt run exactly once", async () => {
    op = await start();
    await createAll(mixedManifests({ prefix: "rc", skills: 0, agents: 0, deployments: 0, sandboxes: SANDBOXES }), ns.name);
    const sandboxes = await waitAllReady(ns.name, SANDBOXES, { prefix: "rc", timeoutMs: 120_000 });
    const plans = planRuns(
      RUNS,
      sandboxes.map((s) => s.metadata.name),
    );
    const expectedSteps = plans.reduce((n, p) => n + p.expected.steps.size, 0);

    // The runs come in waves, one per operator life, so every life has runs to start as well as
    // runs to follow. Each life starts a step or a few, then dies at a random moment: mid-step,
    // between starting a step's command and recording its id, before or after a status write,
    // during a retry. The next life comes up a few seconds later, the steps still running (or
    // ended while nobody looked) in the VMs.
    const wave = Math.ceil(RUNS / KILLS);
    const killedAt: Array<{ steps: number; running: number }> = [];
    const killTimes: number[] = [];
    for (let i = 0; i < KILLS; i++) {
      await createAll(runManifests(plans.slice(i * wave, (i + 1) * wave)), ns.name);
      const before = started();
      if (i === TARGETED) {
        // This life dies the moment a step's command has started in the VM: most likely before
        // the operator has recorded its id.
        await waitOrExplain(() => started() > before, { timeoutMs: 120_000, intervalMs: 1, description: `a step started (life ${i + 1})` });
      } else {
        const steps = 1 + Math.floor(Math.random() * 6);
        await waitOrExplain(() => started() >= before + steps, { timeoutMs: 120_000, intervalMs: 20, description: `${steps} more steps started (life ${i + 1})` });
        await new Promise((r) => setTimeout(r, Math.random() * 1_500));
      }
      const exit = await op.kill("SIGKILL");
      // After the exit: a start the dead process had sent still lands before this.
      killTimes.push(Date.now());
      killedAt.push(progress(emulator));
      expect(exit.signal).toBe("SIGKILL");
      op = await start();
    }

    const runs = await waitOrExplain(
      async () => {
        const all = await listRuns();
        return all.length === RUNS && all.every(finished) ? all : undefined;
      },
      { timeoutMs: 150_000, intervalMs: 1_000, description: `${RUNS} SandboxRuns to finish` },
    );
    // Every kill landed with steps still to start.
    expect(killedAt.every((k) => k.steps > 0 && k.steps < expectedSteps), `kills at ${JSON.stringify(killedAt)} of ${expectedSteps} steps`).toBe(true);

    // Every run ended as planned.
    const byName = new Map(runs.map((r) => [r.metadata.name, r]));
    const outcome = (p: RunPlan) => {
      const r = byName.get(p.name);
      const failed = r?.status?.conditions?.find((c) => c.type === "Failed");
      return { name: p.name, phase: r?.status?.phase, ...(p.expected.reason !== undefined && { reason: failed?.reason }) };
    };
    expect(plans.map(outcome)).toEqual(plans.map((p) => ({ name: p.name, phase: p.expected.phase, ...(p.expected.reason !== undefined && { reason: p.expected.reason }) })));

    // The emulator's records: for each run (by its uid, in the step's marker directory), the
    // steps of the attempts it was planned to run and no others, each run by exactly one
    // command (any further start of it ran nothing: ALREADY_STARTED), ended with the planned
    // exit code, in the VM of the run's Sandbox.
    const records = executionRecords(emulator);
    const vmOf = new Map(sandboxes.map((s) => [s.metadata.name, s.status?.vmId as string]));
    const problems: string[] = [];
    for (const p of plans) {
      const uid = byName.get(p.name)!.metadata.uid;
      const seen = records.byRun.get(uid) ?? new Map<string, StepCommand[]>();
      for (const key of new Set([...seen.keys(), ...p.expected.steps.keys()])) {
        const cmds = seen.get(key) ?? [];
        const ran = ranTheStep(cmds);
        const want = p.expected.steps.get(key);
        const what = `${p.name} attempt/step ${key}`;
        if (want === undefined) problems.push(`${what}: not planned, but started ${cmds.length} time(s) ${JSON.stringify(cmds)}`);
        else if (ran.length !== 1) problems.push(`${what}: ran ${ran.length} times ${JSON.stringify(cmds)}`);
        else if (ran[0]!.exitCode !== want) problems.push(`${what}: exit code ${ran[0]!.exitCode}, planned ${want} ${JSON.stringify(cmds)}`);
        if (cmds.some((c) => c.running)) problems.push(`${what}: still running ${JSON.stringify(cmds)}`);
        if (cmds.some((c) => c.vmId !== vmOf.get(p.sandbox))) problems.push(`${what}: ran outside the VM of ${p.sandbox} ${JSON.stringify(cmds)}`);
      }
      // The lines the steps appended: each step that ran, once per attempt that ran it.
      const files = appendedLines(emulator, p.name);
      const lines = files.get(vmOf.get(p.sandbox)!);
      if (files.size !== 1 || lines === undefined) problems.push(`${p.name}: log file in VMs ${[...files.keys()].join(", ") || "none"}`);
      else if (JSON.stringify([...lines].sort()) !== JSON.stringify([...p.expected.lines].sort())) {
        problems.push(`${p.name}: appended ${JSON.stringify([...lines])}, planned ${JSON.stringify([...p.expected.lines])}`);
      }
    }
    expect(problems).toEqual([]);
    // Nothing else ran in the VMs: every execution the emulator counted is a step's command.
    expect(records.other).toBe(0);
    expect(records.executions).toBe(records.commands);
    const again = secondStarts(records, killTimes);
    expect(records.commands).toBe(expectedSteps + again.total);
    expect(op.alive()).toBe(true);
    console.log(
      `run crash suite: killed at ${killedAt.map((k) => `${k.steps} steps (${k.running} running)`).join(", ")} of ${expectedSteps}; ${expectedSteps} steps ran once each; ` +
        `${again.total} second start(s) stopped by the marker (${again.sameLife.length} without a restart in between)`,
    );
    if (again.sameLife.length > 0) console.log(`second starts by a live operator: ${again.sameLife.join("; ")}; restarts at ${killTimes.join(", ")}`);
  }, 360_000);
});
