// SandboxRun end to end: the real API server, the emulator (which really runs the commands),
// the operator. A run is applied before its Sandbox and waits; then it runs its steps in the
// Sandbox's VM and reports exit codes and output as a Job would.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { writeServiceAccountKubeconfig } from "../../../dev/service-account.js";
import { main as logs, type LogsIO } from "../../../src/commands/logs.js";
import { kubectl, kubectlOk, testKubeconfig, waitFor } from "../support/kube.js";
import { apply, condition, connectionManifest, eventReasons, everythingSaid, getResource, useStack, waitForReady, type Resource } from "../support/operator.js";

const t = useStack("sbxrun");
const SECRET_VALUE = "run-secret-value-8d2f61";

interface StepStatus {
  name: string;
  exitCode?: number;
  startedAt?: string;
  finishedAt?: string;
  output?: string;
  commandId?: string;
}

const steps = (r: Resource) => (r.status?.steps ?? []) as StepStatus[];
const run = (name: string) => getResource(t.stack.kube, "sandboxruns", t.namespace, name);

/** The run, once its first step is started (its command id in status). */
function firstStepStarted(name: string): Promise<Resource> {
  return waitFor(
    async () => {
      const r = await run(name);
      return steps(r)[0]?.commandId !== undefined ? r : undefined;
    },
    { timeoutMs: 60_000, description: `sandboxrun/${name}'s first step started` },
  );
}

/** When a run's activeDeadlineSeconds pass (ms since the epoch). */
const deadlineOf = (r: Resource): number => Date.parse(r.status?.startTime as string) + (r.spec?.activeDeadlineSeconds as number) * 1000;

/** Resolves `extraMs` after the time `at` (ms since the epoch). */
const sleepPast = (at: number, extraMs: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, Math.max(0, at - Date.now()) + extraMs));

/** Waits until the run has finished (Succeeded or Failed). */
function finished(name: string, timeoutMs = 60_000): Promise<Resource> {
  return waitFor(
    async () => {
      const r = await run(name);
      return r.status?.phase === "Succeeded" || r.status?.phase === "Failed" ? r : undefined;
    },
    { timeoutMs, description: `sandboxrun/${name} finished` },
  );
}

async function configMap(name: string): Promise<{ data?: Record<string, string>; metadata: { ownerReferences?: Array<{ uid: string; kind: string }>; labels?: Record<string, string>; annotations?: Record<string, string> } }> {
  return JSON.parse(await kubectlOk(["get", "configmap", name, "-o", "json"], { namespace: t.namespace })) as never;
}

async function sandboxVM(name = "box"): Promise<string> {
  const sb = await waitForReady(t.stack, "sandboxes", name);
  return sb.status?.vmId as string;
}

/** A Sandbox of its own for one test, Ready; its VM's id. */
async function readySandbox(name: string): Promise<string> {
  await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: ${name}}
spec: {tier: standard, ttlSeconds: 3600}`, t.namespace);
  return sandboxVM(name);
}

const runManifest = (name: string, spec: string) => `
apiVersion: agentcompute.dev/v1alpha1
kind: SandboxRun
metadata: {name: ${name}}
spec:
  sandboxRef: {name: box}
${spec}`;

/** A run in a VM of its own: `template` is the sandboxTemplate's fields, flow style. */
const templateRunManifest = (name: string, template: string, spec: string) => `
apiVersion: agentcompute.dev/v1alpha1
kind: SandboxRun
metadata: {name: ${name}}
spec:
  sandboxTemplate: {${template}}
${spec}`;

/** What a service in trouble answers (a fault rule's action). */
const UNAVAILABLE = { status: 503, body: { code: 503, error_code: "unavailable", message: "try again later" } };

describe("SandboxRun", () => {
  it("waits for its Sandbox, then runs a shell step and a python step, with outputs in status and the ConfigMap", async () => {
    await apply(`
apiVersion: v1
kind: Secret
metadata: {name: run-secrets}
stringData: {TOKEN: ${SECRET_VALUE}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: run-input}
data: {numbers.txt: "1 2 3"}
---${runManifest("two-step", `
  env: {MODE: nightly}
  envFrom: [{secretRef: {name: run-secrets}}]
  files: [{path: /workspace/data/numbers.txt, configMapKeyRef: {name: run-input, key: numbers.txt}}]
  steps:
    - name: list
      command: 'echo "hello-$MODE"; cat data/numbers.txt; echo; echo "token=$TOKEN"'
    - name: eval
      language: python
      code: |
        nums = open("data/numbers.txt").read().split()
        print(sum(range(10)) + sum(int(n) for n in nums))`)}`, t.namespace);
    const waiting = await waitForReady(t.stack, "sandboxruns", "two-step", { status: "False", reason: "WaitingForSandbox" });
    expect(waiting.status?.phase).toBe("Pending");

    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: box}
spec: {tier: standard, ttlSeconds: 3600}`, t.namespace);
    // What a user (and a pipeline) does: wait for Ready.
    await kubectlOk(["wait", "--for=condition=Ready", "sandboxrun/two-step", "--timeout=60s"], { namespace: t.namespace });

    const r = await run("two-step");
    expect(r.status?.phase).toBe("Succeeded");
    expect(condition(r, "Complete")?.status).toBe("True");
    expect(condition(r, "Failed")?.status).toBe("False");
    expect(condition(r, "Reconciling")?.status).toBe("False");
    expect(condition(r, "Stalled")?.status).toBe("False");
    expect(r.status?.attempts).toBe(1);
    expect(r.status?.startTime).toBeTruthy();
    expect(r.status?.completionTime).toBeTruthy();
    const [list, evalStep] = steps(r);
    expect(list).toMatchObject({ name: "list", exitCode: 0 });
    expect(list?.output).toContain("hello-nightly\n1 2 3");
    expect(evalStep).toMatchObject({ name: "eval", exitCode: 0, output: "51\n" });
    expect(evalStep?.startedAt && evalStep.finishedAt).toBeTruthy();

    const cm = await configMap(r.status?.outputConfigMap as string);
    expect(cm.data?.["list"]).toContain("hello-nightly");
    expect(cm.data?.["eval"]).toBe("51\n");
    expect(cm.metadata.ownerReferences).toEqual([expect.objectContaining({ kind: "SandboxRun", uid: r.metadata.uid })]);

    // The Secret's value was in the step's environment, and is masked wherever the run reports.
    expect(list?.output).toContain("token=***");
    expect(cm.data?.["list"]).toContain("token=***");
    expect(await everythingSaid(t.stack)).not.toContain(SECRET_VALUE);
    expect(JSON.stringify(cm)).not.toContain(SECRET_VALUE);

    // Each step ran once.
    const vmId = await sandboxVM();
    expect(t.stack.emulator.runtimes.get(vmId)?.executions).toBe(2);

    // The finalizer it kept while running goes when it ends, in the pass that ends it: no
    // conflict with the status that pass wrote, no error logged.
    const done = await waitFor(async () => {
      const x = await run("two-step");
      return x.metadata.finalizers === undefined ? x : undefined;
    }, { description: "the finished run's finalizer removed" });
    expect(done.metadata.finalizers).toBeUndefined();
    expect(t.stack.logs.filter((l) => l.includes('"name":"two-step"') && l.includes("reconciler error"))).toEqual([]);
  }, 120_000);

  it("refuses a change of spec, naming the fix", async () => {
    const res = await kubectl(["patch", "sandboxrun", "two-step", "--type=merge", "-p", '{"spec":{"backoffLimit":3}}'], { namespace: t.namespace });
    expect(res.exitCode).not.toBe(0);
    expect(res.stderr).toContain("spec is immutable");
    expect(res.stderr).toContain("delete the SandboxRun and create it again");
  });

  it("fails at a failing command with its exit code and output, and runs no further step", async () => {
    await apply(runManifest("fails", `
  steps:
    - {name: boom, command: 'echo "about to fail"; exit 3'}
    - {name: never, command: 'touch never-ran'}`), t.namespace);
    const r = await finished("fails");
    expect(r.status?.phase).toBe("Failed");
    const ready = condition(r, "Ready");
    expect(ready).toMatchObject({ status: "False", reason: "StepFailed" });
    expect(ready?.message).toContain('step "boom" failed with exit code 3');
    expect(ready?.message).toContain("about to fail");
    expect(condition(r, "Failed")).toMatchObject({ status: "True", reason: "StepFailed" });
    expect(condition(r, "Stalled")?.status).toBe("True");
    expect(steps(r)).toEqual([expect.objectContaining({ name: "boom", exitCode: 3 })]);
    const workspace = t.stack.emulator.runtimes.get(await sandboxVM())?.workspace as string;
    expect(existsSync(join(workspace, "never-ran"))).toBe(false);
    const events = await kubectlOk(["get", "events", "--field-selector", "involvedObject.name=fails,reason=StepFailed", "-o", "json"], { namespace: t.namespace });
    expect(events).toContain("exit code 3");
    // kubectl wait on Ready gives up on a failed run (it never becomes Ready); on Failed it returns.
    await kubectlOk(["wait", "--for=condition=Failed", "sandboxrun/fails", "--timeout=10s"], { namespace: t.namespace });
  }, 90_000);

  it("reports a step that prints far more than a ConfigMap holds by its head and tail, secrets masked at both ends", async () => {
    // 32 MiB between two lines that print the Secret's value: the operator reads only the ends.
    await apply(runManifest("loud", `
  envFrom: [{secretRef: {name: run-secrets}}]
  steps:
    - {name: loud, command: 'echo "first token=$TOKEN"; head -c 33554432 /dev/zero | tr "\\0" x; echo; echo "last token=$TOKEN"'}`), t.namespace);
    const r = await finished("loud");
    expect(r.status?.phase).toBe("Succeeded");
    expect(steps(r)[0]?.output).toMatch(/x\nlast token=\*\*\*\n$/);
    const out = (await configMap(r.status?.outputConfigMap as string)).data?.["loud"] ?? "";
    expect(out).toMatch(/^first token=\*\*\*\nxxx/);
    expect(out).toMatch(/\n\[\.\.\. \d+ bytes of output cut here \.\.\.\]\nxxx/);
    expect(out).toMatch(/last token=\*\*\*\n$/);
    expect(Buffer.byteLength(out)).toBeLessThanOrEqual(768 * 1024);
    expect(await everythingSaid(t.stack)).not.toContain(SECRET_VALUE);
  }, 90_000);

  it("fails a step past activeDeadlineSeconds with DeadlineExceeded, stops it, and keeps what it printed", async () => {
    await apply(runManifest("slow", `
  activeDeadlineSeconds: 3
  steps:
    - {name: sleepy, command: 'echo "getting started"; sleep 60'}`), t.namespace);
    const r = await finished("slow");
    expect(r.status?.phase).toBe("Failed");
    expect(condition(r, "Ready")).toMatchObject({ status: "False", reason: "DeadlineExceeded" });
    expect(condition(r, "Failed")).toMatchObject({ status: "True", reason: "DeadlineExceeded" });
    // The step that hung is the one to debug: its output so far is in status and the ConfigMap.
    expect(steps(r)[0]).toMatchObject({ name: "sleepy", output: "getting started\n", finishedAt: expect.any(String) });
    expect((await configMap(r.status?.outputConfigMap as string)).data).toEqual({ sleepy: "getting started\n" });
    const commandId = steps(r)[0]?.commandId as string;
    const rt = t.stack.emulator.runtimes.get(await sandboxVM());
    await waitFor(() => rt?.command(commandId)?.running === false, { description: "the step's command stopped" });
  }, 90_000);

  it("succeeds when its last step ended with 0 before the deadline, though the operator looks only after it (down meanwhile)", async () => {
    await apply(runManifest("late-look", `
  activeDeadlineSeconds: 4
  steps:
    - {name: quick, command: 'sleep 1; echo done'}`), t.namespace);
    const deadline = deadlineOf(await firstStepStarted("late-look"));
    // The step ends after a second; the operator is back once the deadline has passed.
    await t.stack.restartOperator(() => sleepPast(deadline, 1_000));
    const r = await finished("late-look");
    expect(r.status?.phase).toBe("Succeeded");
    expect(steps(r)[0]).toMatchObject({ name: "quick", exitCode: 0, output: "done\n" });
  }, 90_000);

  it("succeeds when its last step ended with 0 before its Sandbox's deletion, though the operator looks only after it", async () => {
    await readySandbox("doomed");
    await apply(runManifest("outlived", `
  steps:
    - {name: quick, command: 'sleep 1; echo done'}`).replace("sandboxRef: {name: box}", "sandboxRef: {name: doomed}"), t.namespace);
    await firstStepStarted("outlived");
    try {
      await t.stack.restartOperator(async () => {
        // Paused: its deletion waits, and its VM with it, so the step can still be looked at.
        await kubectlOk(["annotate", "sandbox", "doomed", "agentcompute.dev/paused=true"], { namespace: t.namespace });
        await kubectlOk(["delete", "sandbox", "doomed", "--wait=false"], { namespace: t.namespace });
        await new Promise((resolve) => setTimeout(resolve, 2_000)); // the step ends meanwhile
      });
      const r = await finished("outlived");
      expect(condition(r, "Ready")).toMatchObject({ reason: "Succeeded" });
      expect(steps(r)[0]).toMatchObject({ name: "quick", exitCode: 0, output: "done\n" });
    } finally {
      await kubectlOk(["annotate", "sandbox", "doomed", "agentcompute.dev/paused-"], { namespace: t.namespace });
    }
  }, 90_000);

  it("fails at its deadline though its VM's agentd cannot be reached to look at the step (a wedged VM)", async () => {
    const vmId = await sandboxVM();
    await apply(runManifest("wedged", `
  activeDeadlineSeconds: 4
  steps:
    - {name: stuck, command: 'sleep 60'}`), t.namespace);
    const deadline = deadlineOf(await firstStepStarted("wedged"));
    const BAD_GATEWAY = { status: 502, body: { code: 502, error_code: "bad_gateway", message: "the VM's runtime does not answer" } };
    try {
      await t.stack.restartOperator(async () => {
        t.stack.emulator.injectFault({ path: new RegExp(`^/compute/v1/vms/${vmId}/r/`), times: Infinity, action: BAD_GATEWAY });
        await sleepPast(deadline, 500);
      });
      const r = await finished("wedged");
      expect(r.status?.phase).toBe("Failed");
      expect(condition(r, "Ready")).toMatchObject({ status: "False", reason: "DeadlineExceeded" });
    } finally {
      t.stack.emulator.clearFaults();
    }
  }, 90_000);

  /** A run of one step that sleeps for minutes in the Sandbox's VM, once its step runs. */
  async function runForever(name: string) {
    await apply(runManifest(name, `
  steps:
    - {name: forever, command: 'sleep 300'}`), t.namespace);
    const r = await firstStepStarted(name);
    const rt = t.stack.emulator.runtimes.get(await sandboxVM());
    const commandId = steps(r)[0]!.commandId!;
    expect(rt?.command(commandId)?.running).toBe(true);
    return { r, running: () => rt?.command(commandId)?.running === true };
  }

  it("stops its running step in the Sandbox's VM when it is deleted", async () => {
    const { running } = await runForever("deleted-mid-step");
    await kubectlOk(["delete", "sandboxrun", "deleted-mid-step", "--wait=true", "--timeout=30s"], { namespace: t.namespace });
    await waitFor(() => !running(), { description: "the deleted run's step stopped" });
  }, 90_000);

  it("stops the step of a run deleted while no operator ran: its finalizer holds the deletion until then", async () => {
    const { r, running } = await runForever("deleted-while-down");
    expect(r.metadata.finalizers).toContain("agentcompute.dev/finalizer");
    await t.stack.restartOperator(async () => {
      await kubectlOk(["delete", "sandboxrun", "deleted-while-down", "--wait=false"], { namespace: t.namespace });
      // Nothing stops it while no operator runs; the run waits, marked for deletion.
      expect((await run("deleted-while-down")).metadata.deletionTimestamp).toBeDefined();
      expect(running()).toBe(true);
    });
    await waitFor(() => !running(), { description: "the deleted run's step stopped" });
    await waitFor(async () => (await kubectl(["get", "sandboxrun", "deleted-while-down"], { namespace: t.namespace })).exitCode !== 0, {
      description: "sandboxrun/deleted-while-down gone",
    });
  }, 90_000);

  it("with backoffLimit: 1 tries the whole run once more, then fails with BackoffLimitExceeded", async () => {
    const rt = t.stack.emulator.runtimes.get(await sandboxVM())!;
    const before = rt.executions;
    await apply(runManifest("retried", `
  backoffLimit: 1
  steps:
    - {name: flaky, command: 'echo ran >> retried-count.txt; exit 1'}`), t.namespace);
    const r = await finished("retried");
    expect(r.status?.phase).toBe("Failed");
    expect(r.status?.attempts).toBe(2);
    expect(condition(r, "Ready")).toMatchObject({ status: "False", reason: "BackoffLimitExceeded" });
    expect(rt.executions - before).toBe(2);
    expect(readFileSync(join(rt.workspace, "retried-count.txt"), "utf8")).toBe("ran\nran\n");
    // The first attempt's failure stays in status past the second's start.
    expect(r.status?.lastFailedAttempt).toMatchObject({ attempt: 1, reason: "StepFailed", message: expect.stringContaining("attempt 1 failed"), step: { name: "flaky", exitCode: 1 } });
    // logs tells both attempts, the first's failure before the second.
    const o = { out: "", err: "" };
    expect(await logs(["-n", t.namespace, "--kubeconfig", testKubeconfig(), "retried"], "logs", { out: (x) => void (o.out += x), err: (x) => void (o.err += x) })).toBe(0);
    expect(o.out).toBe(""); // the steps print nothing
    expect(o.err).toBe(
      '--- step "flaky" (attempt 1, exit code 1; the last of its output) ---\n' +
        '--- attempt 2 (attempt 1 failed: step "flaky" failed with exit code 1) ---\n' +
        '--- step "flaky" (attempt 2, exit code 1) ---\n',
    );
    const events = await kubectlOk(["get", "events", "--field-selector", "involvedObject.name=retried,reason=Retrying", "-o", "json"], { namespace: t.namespace });
    expect(events).toContain("attempt 1 failed");
  }, 90_000);

  it("with backoffLimit: 1 keeps in its output ConfigMap only the last attempt's output, not a step the failed attempt got further to", async () => {
    await apply(runManifest("retried-output", `
  backoffLimit: 1
  steps:
    - {name: build, command: 'if [ -e retried-output.mark ]; then echo build-2; exit 1; fi; echo build-1'}
    - {name: test, command: 'touch retried-output.mark; echo test-1; exit 1'}`), t.namespace);
    const r = await finished("retried-output");
    expect(r.status?.attempts).toBe(2);
    expect(condition(r, "Ready")).toMatchObject({ reason: "BackoffLimitExceeded" });
    expect((await configMap(r.status?.outputConfigMap as string)).data).toEqual({ build: "build-2\n" });
  }, 90_000);

  it("agent-operator logs prints the steps' output; with -f it follows a run and exits with how it ended", async () => {
    const capture = () => {
      const o = { out: "", err: "" };
      const io: LogsIO = { out: (x) => void (o.out += x), err: (x) => void (o.err += x), intervalMs: 100 };
      return { o, io };
    };
    const args = (...rest: string[]) => ["-n", t.namespace, "--kubeconfig", testKubeconfig(), ...rest];
    const done = capture();
    expect(await logs(args("two-step"), "logs", done.io)).toBe(0);
    expect(done.o.out).toContain("hello-nightly\n1 2 3");
    expect(done.o.out.endsWith("51\n")).toBe(true);
    expect(done.o.err).toContain('step "eval" (attempt 1, exit code 0)');

    const failed = capture();
    expect(await logs(args("-f", "sandboxrun/fails"), "logs", failed.io)).toBe(1);
    expect(failed.o.out).toBe("about to fail\n");
    expect(failed.o.err).toContain("failed: StepFailed");

    await apply(runManifest("followed", `
  steps:
    - {name: one, command: 'echo one; sleep 1'}
    - {name: two, command: 'echo two'}`), t.namespace);
    const followed = capture();
    expect(await logs(args("-f", "followed"), "logs", followed.io)).toBe(0);
    expect(followed.o.out).toBe("one\ntwo\n");
    // A step that runs a while is said to run (once), rather than nothing until it ends.
    expect(followed.o.err.match(/step "one" \(attempt 1\) is running/g)).toHaveLength(1);

    // A run that waits says why.
    await apply(runManifest("no-sandbox", `
  steps:
    - {name: never, command: 'true'}`).replace("sandboxRef: {name: box}", "sandboxRef: {name: no-such-box}"), t.namespace);
    await waitForReady(t.stack, "sandboxruns", "no-sandbox", { status: "False", reason: "WaitingForSandbox" });
    const waiting = capture();
    expect(await logs(args("no-sandbox"), "logs", waiting.io)).toBe(0);
    expect(waiting.o.out).toBe("");
    expect(waiting.o.err).toContain('sandboxrun/no-sandbox: WaitingForSandbox: Sandbox "no-such-box" (spec.sandboxRef) not found');

    const missing = capture();
    expect(await logs(args("no-such-run"), "logs", missing.io)).toBe(1);
    expect(missing.o.err).toContain('SandboxRun "no-such-run" not found');
    expect(await logs([], "logs", capture().io)).toBe(2);
  }, 90_000);

  it("agent-operator logs -f prints a running step's output as it is written, the run's secret values masked; without the rights to mask, once it has ended", async () => {
    const workspace = t.stack.emulator.runtimes.get(await sandboxVM())!.workspace;
    const liveSecret = `${SECRET_VALUE}-live`;
    await apply(`
apiVersion: v1
kind: Secret
metadata: {name: live-secrets}
stringData: {LIVE_TOKEN: ${liveSecret}}
---${runManifest("live", `
  envFrom: [{secretRef: {name: live-secrets}}]
  steps:
    - {name: talk, command: 'echo first; echo "token=$LIVE_TOKEN"; while [ ! -e go-live ]; do sleep 0.1; done; echo last'}
    - {name: after, command: 'echo after'}`)}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: run-reader}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: run-reader}
rules: [{apiGroups: [agentcompute.dev], resources: [sandboxruns], verbs: [get]}, {apiGroups: [""], resources: [configmaps], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: run-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: run-reader}
subjects: [{kind: ServiceAccount, name: run-reader}]`, t.namespace);
    const readerKubeconfig = join(mkdtempSync(join(tmpdir(), "logs-reader-")), "kubeconfig");
    await writeServiceAccountKubeconfig({ adminKubeconfig: testKubeconfig(), namespace: t.namespace, name: "run-reader", duration: "10m", file: readerKubeconfig });
    const follow = (kubeconfig: string) => {
      const o = { out: "", err: "" };
      const io: LogsIO = { out: (x) => void (o.out += x), err: (x) => void (o.err += x), intervalMs: 100 };
      return { o, done: logs(["-n", t.namespace, "--kubeconfig", kubeconfig, "-f", "live"], "logs", io) };
    };
    const admin = follow(testKubeconfig());
    const reader = follow(readerKubeconfig);
    // The step's first lines reach the follower while the step still waits for its gate file:
    // its value masked, and nothing of it in clear.
    await waitFor(() => admin.o.out.includes("token=***\n"), { timeoutMs: 60_000, description: "the running step's output, followed live" });
    expect(steps(await run("live"))[0]?.finishedAt).toBeUndefined();
    expect(admin.o.out).toBe("first\ntoken=***\n");
    expect(admin.o.err).toContain('--- step "talk" (attempt 1) is running ---');
    // One who may not read the Secrets to mask with gets no live output, and is told why.
    await waitFor(() => reader.o.err.includes("live output is off"), { timeoutMs: 30_000, description: "the reader told live output is off" });
    expect(reader.o.err).toMatch(/live output is off \(cannot read Sandbox "box" in namespace "[^"]+": .*forbidden.* \(this needs get on sandboxes, connections and secrets\)\)/);
    expect(reader.o.out).toBe("");

    writeFileSync(join(workspace, "go-live"), "");
    expect(await admin.done).toBe(0);
    expect(await reader.done).toBe(0);
    expect(admin.o.out).toBe("first\ntoken=***\nlast\nafter\n");
    expect(admin.o.err).toContain('--- step "talk" (attempt 1) ended, exit code 0 ---');
    // The same output, whole, once each step had ended.
    expect(reader.o.out).toBe(admin.o.out);
    expect(reader.o.err).toContain('--- step "talk" (attempt 1, exit code 0) ---');
    for (const o of [admin.o, reader.o]) expect(o.out + o.err).not.toContain(liveSecret);
  }, 90_000);

  it("agent-operator logs -f prints the end of a step followed live whose attempt failed, once, before the next attempt's output", async () => {
    const workspace = t.stack.emulator.runtimes.get(await sandboxVM())!.workspace;
    await apply(runManifest("live-retried", `
  backoffLimit: 1
  steps:
    - {name: flaky, command: 'echo try; while [ ! -e go-live-retried ]; do sleep 0.1; done; if [ -e live-retried-once ]; then echo ok; else touch live-retried-once; echo failing; exit 3; fi'}`), t.namespace);
    const o = { out: "", err: "" };
    const io: LogsIO = { out: (x) => void (o.out += x), err: (x) => void (o.err += x), intervalMs: 100 };
    const done = logs(["-n", t.namespace, "--kubeconfig", testKubeconfig(), "-f", "live-retried"], "logs", io);
    await waitFor(() => o.out === "try\n", { timeoutMs: 60_000, description: "the first attempt's output, followed live" });
    writeFileSync(join(workspace, "go-live-retried"), "");
    expect(await done).toBe(0);
    expect(o.out).toBe("try\nfailing\ntry\nok\n");
    const ended = o.err.indexOf('--- step "flaky" (attempt 1) ended, exit code 3 ---\n');
    expect(ended).toBeGreaterThanOrEqual(0);
    expect(o.err.indexOf("--- attempt 2 (attempt 1 failed")).toBeGreaterThan(ended);
    // Its end was printed live: not again, on stderr, as the last of the failed attempt's output.
    expect(o.err).not.toContain("the last of its output");
  }, 90_000);

  it("is followed to its end, not restarted, when the operator restarts during a step", async () => {
    const rt = t.stack.emulator.runtimes.get(await sandboxVM())!;
    const before = rt.executions;
    await apply(runManifest("survives", `
  steps:
    - {name: long, command: 'echo started >> survives.txt; sleep 3; echo finished'}
    - {name: after, command: 'echo after >> survives.txt'}`), t.namespace);
    await waitFor(async () => steps(await run("survives"))[0]?.commandId, { description: "the first step's command id in status" });
    await t.stack.restartOperator();
    const r = await finished("survives");
    expect(r.status?.phase).toBe("Succeeded");
    expect(steps(r).map((s) => [s.name, s.exitCode, s.output])).toEqual([
      ["long", 0, "finished\n"],
      ["after", 0, ""],
    ]);
    expect(readFileSync(join(rt.workspace, "survives.txt"), "utf8")).toBe("started\nafter\n");
    expect(rt.executions - before).toBe(2);
  }, 90_000);

  it("with a sandboxTemplate runs in a VM of its own, released when the run ends; its envFrom Secret's values are masked", async () => {
    await apply(`
apiVersion: v1
kind: Secret
metadata: {name: template-secrets}
stringData: {VM_TOKEN: vm-${SECRET_VALUE}}
---
apiVersion: agentcompute.dev/v1alpha1
kind: SandboxRun
metadata: {name: own-vm}
spec:
  sandboxTemplate: {tier: standard, env: {WHERE: own}, envFrom: [{secretRef: {name: template-secrets}}]}
  steps:
    - {name: where, command: 'echo "in $WHERE vm"; echo "vm-token=$VM_TOKEN"'}`, t.namespace);
    await kubectlOk(["wait", "--for=condition=Ready", "sandboxrun/own-vm", "--timeout=60s"], { namespace: t.namespace });
    // The release is recorded in status first, then the finalizer that guarded it goes.
    const r = await waitFor(async () => {
      const x = await run("own-vm");
      return x.status?.vmReleased === true && !("finalizers" in x.metadata) ? x : undefined;
    }, { description: "the run's VM released and its finalizer gone" });
    const vmId = r.status?.vmId as string;
    expect(vmId).not.toBe(await sandboxVM());
    // The VM's env (the template's envFrom) reached the step, and is masked wherever the run reports.
    expect(steps(r)[0]).toMatchObject({ exitCode: 0, output: "in own vm\nvm-token=***\n" });
    expect(JSON.stringify(await configMap(r.status?.outputConfigMap as string))).not.toContain(SECRET_VALUE);
    expect(await everythingSaid(t.stack)).not.toContain(SECRET_VALUE);
    expect(t.stack.emulator.state.vms.get(vmId)?.state ?? "gone").not.toBe("allocated");
    expect(t.stack.emulator.runtimes.get(vmId)).toBeUndefined();
    expect(r.metadata).not.toHaveProperty("finalizers");
  }, 90_000);

  it("with a sandboxTemplate keeps its VM alive past the template's TTL while a step runs", async () => {
    // A 10 s TTL renewed 5 s before it runs out; the step takes 16 s.
    await apply(templateRunManifest("outlives-ttl", "tier: standard, ttlSeconds: 10, renewBeforeSeconds: 5", `
  steps:
    - {name: long, command: 'sleep 16; echo done'}`), t.namespace);
    const r = await finished("outlives-ttl", 90_000);
    expect(r.status?.phase).toBe("Succeeded");
    expect(steps(r)[0]).toMatchObject({ exitCode: 0, output: "done\n" });
    const vmId = r.status?.vmId as string;
    const renewals = t.stack.emulator.requests.filter((q) => q.operation === "vms.renew" && q.path.includes(vmId) && q.status === 200);
    expect(renewals.length).toBeGreaterThanOrEqual(2);
  }, 120_000);

  it("with a sandboxTemplate gives its VM, allocated to outlive the deadline, back when deleted while running", async () => {
    await apply(templateRunManifest("own-vm-deleted", "tier: standard", `
  activeDeadlineSeconds: 7200
  steps:
    - {name: forever, command: 'sleep 300'}`), t.namespace);
    const r = await waitFor(async () => {
      const x = await run("own-vm-deleted");
      return steps(x)[0]?.commandId !== undefined ? x : undefined;
    }, { description: "the step running" });
    const vmId = r.status?.vmId as string;
    expect(t.stack.emulator.state.vms.get(vmId)?.state).toBe("allocated");
    // The run's VM is asked to live as long as the run may (the deadline and a margin), not the
    // template's ttlSeconds (3600 by default), so that it needs no renewal.
    expect(t.stack.emulator.state.vms.get(vmId)?.ttl_seconds).toBe(7200 + 300);
    await kubectlOk(["delete", "sandboxrun", "own-vm-deleted", "--wait=true", "--timeout=30s"], { namespace: t.namespace });
    expect(t.stack.emulator.state.vms.get(vmId)?.state ?? "gone").not.toBe("allocated");
    expect(t.stack.emulator.runtimes.get(vmId)).toBeUndefined();
  }, 90_000);

  it("with a sandboxTemplate holds its Connection's deletion until its VM is given back (kubectl delete of both at once)", async () => {
    await apply(connectionManifest(t.namespace, t.stack.emulator, { name: "held", secretName: "held-credentials" }), t.namespace);
    await waitForReady(t.stack, "connections", "held");
    await apply(templateRunManifest("holds-connection", "tier: standard, connectionRef: {name: held}", `
  steps:
    - {name: forever, command: 'sleep 300'}`), t.namespace);
    const r = await waitFor(async () => {
      const x = await run("holds-connection");
      return steps(x)[0]?.commandId !== undefined ? x : undefined;
    }, { description: "the step running" });
    const vmId = r.status?.vmId as string;
    // The Connection first, as kubectl delete -k may: it waits, saying for what.
    await kubectlOk(["delete", "connection", "held", "--wait=false"], { namespace: t.namespace });
    const waiting = await waitFor(async () => {
      const c = await getResource(t.stack.kube, "connections", t.namespace, "held");
      return condition(c, "Reconciling")?.reason === "InUse" ? c : undefined;
    }, { description: "the Connection's deletion waiting for its users" });
    expect(condition(waiting, "Reconciling")?.message).toContain("SandboxRun/holds-connection");
    // The run's deletion gives its VM back through it; then the Connection goes.
    await kubectlOk(["delete", "sandboxrun", "holds-connection", "--wait=true", "--timeout=60s"], { namespace: t.namespace });
    expect(t.stack.emulator.state.vms.get(vmId)?.state ?? "gone").not.toBe("allocated");
    await kubectlOk(["wait", "--for=delete", "connection/held", "--timeout=60s"], { namespace: t.namespace });
  }, 150_000);

  it("with a sandboxTemplate naming a Connection that does not exist: waits, and is deleted when asked (nothing to give back)", async () => {
    await apply(templateRunManifest("no-connection", "tier: standard, connectionRef: {name: missing}", `  steps: [{name: s, command: "true"}]`), t.namespace);
    const waiting = await waitForReady(t.stack, "sandboxruns", "no-connection", { status: "False", reason: "ConnectionNotFound" });
    expect(waiting.metadata.finalizers).toContain("agentcompute.dev/finalizer");
    await kubectlOk(["delete", "sandboxrun", "no-connection", "--timeout=60s"], { namespace: t.namespace });
  });

  it("with a sandboxTemplate naming a Connection that does not exist: fails at its deadline, and ends (ttlSecondsAfterFinished) all the same", async () => {
    await apply(templateRunManifest("never-connected", "tier: standard, connectionRef: {name: missing}", `
  activeDeadlineSeconds: 3
  ttlSecondsAfterFinished: 1
  steps: [{name: s, command: "true"}]`), t.namespace);
    const r = await finished("never-connected");
    expect(condition(r, "Failed")).toMatchObject({ status: "True", reason: "DeadlineExceeded" });
    // Nothing to give back: its finalizer goes, and the run with it.
    await kubectlOk(["wait", "--for=delete", "sandboxrun/never-connected", "--timeout=60s"], { namespace: t.namespace });
  }, 90_000);

  it("asks for its template's TTL when the service refuses one lengthened for a long deadline", async () => {
    const before = t.stack.emulator.state.poolConfig.max_vm_ttl_seconds;
    t.stack.emulator.state.updatePoolConfig({ max_vm_ttl_seconds: 7200 });
    try {
      await apply(templateRunManifest("long-deadline", "tier: standard, ttlSeconds: 3600", `
  activeDeadlineSeconds: 86400
  steps:
    - {name: quick, command: 'echo quick'}`), t.namespace);
      const r = await finished("long-deadline");
      expect(r.status?.phase).toBe("Succeeded");
      const allocations = t.stack.emulator.requests.filter((q) => q.operation === "vms.allocate" && q.userAgent !== undefined).slice(-2);
      expect(allocations.map((q) => q.status)).toEqual([400, 201]);
    } finally {
      t.stack.emulator.state.updatePoolConfig({ max_vm_ttl_seconds: before });
    }
  }, 90_000);

  it("fails when the service refuses its template's VM, with the service's answer", async () => {
    await apply(templateRunManifest("refused-vm", "tier: unknown-tier", `
  steps:
    - {name: never, command: 'true'}`), t.namespace);
    const r = await finished("refused-vm");
    expect(r.status?.phase).toBe("Failed");
    expect(condition(r, "Failed")).toMatchObject({ status: "True", reason: "ServiceRejected", message: expect.stringContaining('tier "unknown-tier" is not available') });
    expect(r.status?.startTime).toBeTruthy();
    expect(steps(r)).toEqual([]);
  }, 90_000);

  it("says in status that the service keeps failing its VM's allocation, and fails at its deadline", async () => {
    t.stack.emulator.injectFault({ method: "POST", path: "/compute/v1/vms/allocate", times: 1_000, action: UNAVAILABLE });
    try {
      await apply(templateRunManifest("unallocated", "tier: standard", `
  activeDeadlineSeconds: 4
  steps:
    - {name: never, command: 'true'}`), t.namespace);
      // Said while it retries, with the time it was taken up (the deadline counts from it).
      const waiting = await waitFor(
        async () => {
          const x = await run("unallocated");
          return condition(x, "Ready")?.reason === "ServiceUnavailable" ? x : undefined;
        },
        { description: "the run to say the service is unavailable" },
      );
      expect(waiting.status).toMatchObject({ phase: "Pending", startTime: expect.any(String) });
      const r = await finished("unallocated");
      expect(r.status?.phase).toBe("Failed");
      expect(condition(r, "Failed")).toMatchObject({ status: "True", reason: "DeadlineExceeded" });
      expect(r.status?.startTime).toBe(waiting.status?.startTime);
    } finally {
      t.stack.emulator.clearFaults();
    }
  }, 90_000);

  it("keeps its output apart from a ConfigMap of its output's name that is not its own (the user's, or a deleted run's)", async () => {
    const say = (word: string) => `
  steps:
    - {name: say, command: 'echo ${word}'}`;
    // The user's own ConfigMap has the name: left alone.
    await apply(`
apiVersion: v1
kind: ConfigMap
metadata: {name: apart-output}
data: {mine: keep}
---${runManifest("apart", say("apart"))}`, t.namespace);
    const apart = await finished("apart");
    expect(apart.status?.outputConfigMap).toBe(`apart-output-${apart.metadata.uid.slice(0, 8)}`);
    expect((await configMap(apart.status?.outputConfigMap as string)).data).toEqual({ say: "apart\n" });
    const users = await configMap("apart-output");
    expect(users.data).toEqual({ mine: "keep" });
    expect(users.metadata.ownerReferences).toBeUndefined();

    // A run deleted and applied again under its name: the first one's output, which garbage
    // collection deletes after its run (held here by a finalizer, as it is on a busy cluster for
    // a while), is not written into, nor taken as the second one's.
    await apply(runManifest("again", say("first")), t.namespace);
    const first = await finished("again");
    expect(first.status?.outputConfigMap).toBe("again-output");
    const hold = (finalizers: string[] | null) =>
      kubectlOk(["patch", "configmap", "again-output", "--type=merge", "-p", JSON.stringify({ metadata: { finalizers } })], { namespace: t.namespace });
    await hold(["example.com/hold"]);
    try {
      await kubectlOk(["delete", "sandboxrun", "again", "--wait=true", "--timeout=30s"], { namespace: t.namespace });
      await apply(runManifest("again", say("second")), t.namespace);
      const second = await finished("again");
      expect(second.metadata.uid).not.toBe(first.metadata.uid);
      expect(second.status?.outputConfigMap).toBe(`again-output-${second.metadata.uid.slice(0, 8)}`);
      expect((await configMap(second.status?.outputConfigMap as string)).data).toEqual({ say: "second\n" });
      expect((await configMap("again-output")).data).toEqual({ say: "first\n" });
    } finally {
      await hold(null);
    }
  }, 90_000);

  it("waits for its Sandbox's next VM when the one its step ran in is gone, rather than spend its retries on it", async () => {
    const first = await readySandbox("lost-box");
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: SandboxRun
metadata: {name: lost}
spec:
  sandboxRef: {name: lost-box}
  backoffLimit: 2
  steps:
    - {name: slow, command: 'sleep 1; echo done'}`, t.namespace);
    await waitFor(async () => steps(await run("lost"))[0]?.commandId !== undefined, { description: "the step running" });
    t.stack.emulator.state.deleteVM(first); // gone outside the operator, mid-step
    // The second attempt waits for the Sandbox's next VM (the run's read of the VMs told the
    // Sandbox, which allocated another) instead of starting in the gone one, and succeeds there.
    const r = await finished("lost");
    expect(r.status).toMatchObject({ phase: "Succeeded", attempts: 2 });
    expect(r.status?.vmId).not.toBe(first);
    expect(steps(r)[0]).toMatchObject({ exitCode: 0, output: "done\n" });
  }, 90_000);

  it("does not count an attempt when its Sandbox's VM is gone before the first step started: it waits for the next VM", async () => {
    const first = await readySandbox("stale-box");
    t.stack.emulator.state.deleteVM(first); // gone outside the operator; the Sandbox still names it
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: SandboxRun
metadata: {name: stale}
spec:
  sandboxRef: {name: stale-box}
  steps:
    - {name: only, command: 'echo done'}`, t.namespace);
    // backoffLimit 0: a lost VM counted as a failed attempt would fail the run.
    const r = await finished("stale");
    expect(r.status).toMatchObject({ phase: "Succeeded", attempts: 1 });
    expect(r.status?.vmId).not.toBe(first);
  }, 90_000);

  it("stays Succeeded while the release of its VM fails, and gives the VM back once the service answers", async () => {
    t.stack.emulator.injectFault({ method: "POST", path: /^\/compute\/v1\/vms\/[^/]+\/release$/, times: 3, action: UNAVAILABLE });
    try {
      await apply(templateRunManifest("release-later", "tier: standard", `
  steps:
    - {name: ok, command: 'true'}`), t.namespace);
      const done = await waitFor(
        async () => {
          const x = await run("release-later");
          return x.status?.vmReleased === true ? x : undefined;
        },
        { description: "the run's VM released" },
      );
      expect(done.status).toMatchObject({ phase: "Succeeded", vmReleased: true });
      expect(t.stack.emulator.requests.filter((r) => r.operation === "vms.release" && r.status === 503)).toHaveLength(3);
      // It was finished once: one Completed Event, said once (each retry of the release leaves it finished).
      const events = JSON.parse(
        await kubectlOk(["get", "events", "--field-selector", "involvedObject.name=release-later,reason=Completed", "-o", "json"], { namespace: t.namespace }),
      ) as { items: Array<{ count?: number; series?: { count?: number } }> };
      expect(events.items.map((e) => e.series?.count ?? e.count ?? 1)).toEqual([1]);
      expect(t.stack.emulator.state.vms.get(done.status?.vmId as string)).toBeUndefined();
    } finally {
      t.stack.emulator.clearFaults();
    }
  }, 90_000);

  it("stays Succeeded, and gives its VM back later, when the operator restarts without its Connection's credentials", async () => {
    await apply(connectionManifest(t.namespace, t.stack.emulator, { name: "fragile", secretName: "fragile-credentials" }), t.namespace);
    await waitForReady(t.stack, "connections", "fragile");
    t.stack.emulator.injectFault({ method: "POST", path: /^\/compute\/v1\/vms\/[^/]+\/release$/, times: Infinity, action: UNAVAILABLE });
    try {
      await apply(templateRunManifest("stranded", "tier: standard, connectionRef: {name: fragile}", `
  steps:
    - {name: ok, command: 'true'}`), t.namespace);
      await waitFor(() => t.stack.emulator.requests.some((r) => r.operation === "vms.release" && r.status === 503), { description: "a release refused" });
      expect((await finished("stranded")).status).toMatchObject({ phase: "Succeeded" });
      // The Connection's credentials go, and the operator restarts: it has no client of the
      // Connection to retry the release with (ConnectionNotReady at every pass).
      await kubectlOk(["delete", "secret", "fragile-credentials"], { namespace: t.namespace });
      await waitForReady(t.stack, "connections", "fragile", { status: "False" });
      const from = t.stack.logs.length;
      await t.stack.restartOperator();
      await waitFor(() => t.stack.logs.slice(from).some((l) => l.includes("cannot give back the run's VM") && l.includes("stranded") && l.includes("fragile")), {
        description: "a pass of the run that found no client of its Connection",
      });
      expect((await run("stranded")).metadata.finalizers).toContain("agentcompute.dev/finalizer"); // the give-back is still owed
      expect(await eventReasons(t.stack, "stranded")).toContain("VMNotReleased"); // where the run's owner looks
      const r = await run("stranded");
      expect(r.status?.phase).toBe("Succeeded");
      expect(condition(r, "Ready")?.status).toBe("True");
      expect(condition(r, "Complete")?.status).toBe("True");
      expect(r.status?.completionTime).toBeTruthy();
      // Credentials back, the service answering: the VM is given back.
      t.stack.emulator.clearFaults();
      await apply(connectionManifest(t.namespace, t.stack.emulator, { name: "fragile", secretName: "fragile-credentials" }), t.namespace);
      const done = await waitFor(
        async () => {
          const x = await run("stranded");
          return x.status?.vmReleased === true ? x : undefined;
        },
        { timeoutMs: 60_000, description: "the run's VM released" },
      );
      expect(done.status?.phase).toBe("Succeeded");
    } finally {
      t.stack.emulator.clearFaults();
    }
  }, 120_000);

  it("is deleted ttlSecondsAfterFinished after it ends", async () => {
    await apply(runManifest("short-lived", `
  ttlSecondsAfterFinished: 2
  steps:
    - {name: quick, command: 'echo done'}`), t.namespace);
    const done = await finished("short-lived");
    expect(done.status?.phase).toBe("Succeeded");
    await waitFor(async () => (await kubectl(["get", "sandboxrun", "short-lived"], { namespace: t.namespace })).stderr.includes("NotFound") || undefined, {
      timeoutMs: 30_000,
      description: "sandboxrun/short-lived deleted",
    });
  }, 60_000);
});

/** A run in the Sandbox `box` (of its own, made with readySandbox). */
const runInManifest = (box: string, name: string, spec: string) => runManifest(name, spec).replace("sandboxRef: {name: box}", `sandboxRef: {name: ${box}}`);

/** Bytes that are not UTF-8 (as in a DER certificate or a PKCS#12 keystore): as text, 0x82, 0xff, ... would become EF BF BD. */
const BINARY = Buffer.from([0x30, 0x82, 0x01, 0x0a, 0x00, 0xff, 0xfe, 0x80, 0xc3, 0x28]);

describe("SandboxRun: what reaches the VM", () => {
  it("writes a Secret's file with its bytes as they are, at a relative spec.files path under /workspace", async () => {
    const vmId = await readySandbox("files-box");
    await apply(`
apiVersion: v1
kind: Secret
metadata: {name: binary-keys}
data: {keystore.p12: ${BINARY.toString("base64")}}
---${runInManifest("files-box", "binary-file", `
  files: [{path: keys/keystore.p12, secretKeyRef: {name: binary-keys, key: keystore.p12}}]
  steps:
    - {name: hex, command: 'od -An -tx1 keys/keystore.p12'}`)}`, t.namespace);
    const r = await finished("binary-file");
    expect(r.status?.phase).toBe("Succeeded");
    // What the step read, by its path relative to its working directory, is the Secret's bytes.
    const hex = (steps(r)[0]?.output ?? "").trim().split(/\s+/);
    expect(hex).toEqual([...BINARY].map((b) => b.toString(16).padStart(2, "0")));
    // And that is what the VM's disk holds, under /workspace.
    const workspace = t.stack.emulator.runtimes.get(vmId)!.workspace;
    expect(readFileSync(join(workspace, "keys", "keystore.p12")).equals(BINARY)).toBe(true);
  }, 90_000);

  it("goes on when its files' ConfigMap is deleted once the first step started (a generator's prune): only the first step uploads them", async () => {
    await readySandbox("files-box");
    await apply(`
apiVersion: v1
kind: ConfigMap
metadata: {name: inputs-v1}
data: {cfg.txt: from-v1}
---${runInManifest("files-box", "pruned-inputs", `
  files: [{path: cfg.txt, configMapKeyRef: {name: inputs-v1, key: cfg.txt}}]
  steps:
    - {name: read, command: 'sleep 2; cat cfg.txt'}
    - {name: after, command: 'echo second'}`)}`, t.namespace);
    await firstStepStarted("pruned-inputs");
    await kubectlOk(["delete", "configmap", "inputs-v1"], { namespace: t.namespace });
    const r = await finished("pruned-inputs");
    expect(r.status?.phase).toBe("Succeeded");
    expect(steps(r).map((s) => [s.name, s.exitCode, s.output?.trim()])).toEqual([
      ["read", 0, "from-v1"],
      ["after", 0, "second"],
    ]);
  }, 90_000);

  it("ends a step whose env Secret was deleted while it ran, keeping none of its output (its values could not be masked)", async () => {
    await readySandbox("files-box");
    await apply(`
apiVersion: v1
kind: Secret
metadata: {name: short-lived}
stringData: {TOKEN: ${SECRET_VALUE}}
---${runInManifest("files-box", "secret-gone", `
  envFrom: [{secretRef: {name: short-lived}}]
  steps:
    - {name: print, command: 'sleep 2; echo "token=$TOKEN"'}`)}`, t.namespace);
    await firstStepStarted("secret-gone");
    await kubectlOk(["delete", "secret", "short-lived"], { namespace: t.namespace });
    const r = await finished("secret-gone");
    expect(r.status?.phase).toBe("Succeeded");
    expect(steps(r)[0]).toMatchObject({ exitCode: 0, output: expect.stringContaining('the Secret "short-lived" the run reads is gone') });
    expect(JSON.stringify(r)).not.toContain(SECRET_VALUE);
    expect(JSON.stringify((await configMap(r.status?.outputConfigMap as string)).data)).not.toContain(SECRET_VALUE);
  }, 90_000);

  it("leaves no directory of its own in its Sandbox's VM when its deadline passes while its next step waits for a Secret", async () => {
    const workspace = t.stack.emulator.runtimes.get(await readySandbox("files-box"))!.workspace;
    await apply(`
apiVersion: v1
kind: Secret
metadata: {name: gone-before-second}
stringData: {TOKEN: ${SECRET_VALUE}}
---${runInManifest("files-box", "deadline-between", `
  activeDeadlineSeconds: 8
  envFrom: [{secretRef: {name: gone-before-second}}]
  steps:
    - {name: first, command: 'while [ ! -e go-deadline-between ]; do sleep 0.1; done'}
    - {name: second, command: 'echo two'}`)}`, t.namespace);
    const started = await firstStepStarted("deadline-between");
    await kubectlOk(["delete", "secret", "gone-before-second"], { namespace: t.namespace });
    await new Promise((resolve) => setTimeout(resolve, 1_000)); // the operator's cache sees it gone
    writeFileSync(join(workspace, "go-deadline-between"), "");
    const r = await finished("deadline-between");
    expect(condition(r, "Ready")).toMatchObject({ reason: "DeadlineExceeded" });
    expect(steps(r).map((s) => s.name)).toEqual(["first"]);
    // Removed once status says the run is over (just after that write).
    const runDir = join(workspace, ".agent-operator", "runs", started.metadata.uid as string);
    await waitFor(() => !existsSync(runDir), { timeoutMs: 10_000, description: "the run's directory removed from the VM" });
  }, 90_000);

  it("masks a Secret's old value in a step started before the Secret was rotated (its env holds the old one)", async () => {
    const workspace = t.stack.emulator.runtimes.get(await readySandbox("files-box"))!.workspace;
    const old = `${SECRET_VALUE}-before-rotation`;
    await apply(`
apiVersion: v1
kind: Secret
metadata: {name: rotated}
stringData: {TOKEN: ${old}}
---${runInManifest("files-box", "secret-rotated", `
  envFrom: [{secretRef: {name: rotated}}]
  steps:
    - {name: print, command: 'while [ ! -e go-secret-rotated ]; do sleep 0.1; done; echo "token=$TOKEN"'}`)}`, t.namespace);
    await firstStepStarted("secret-rotated");
    await kubectlOk(["patch", "secret", "rotated", "--type=merge", "-p", JSON.stringify({ stringData: { TOKEN: "the-rotated-value" } })], { namespace: t.namespace });
    // The operator's cache has the new value by the time the step ends (its watch is well under a second behind).
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    writeFileSync(join(workspace, "go-secret-rotated"), "");
    const r = await finished("secret-rotated");
    expect(steps(r)[0]).toMatchObject({ exitCode: 0, output: "token=***\n" });
    expect(JSON.stringify(r)).not.toContain(old);
    expect(JSON.stringify((await configMap(r.status?.outputConfigMap as string)).data)).not.toContain(old);
  }, 90_000);

  it("does not start in its Sandbox's VM while that holds a value of an envFrom Secret rotated since: it runs in the next VM, the value masked", async () => {
    const before = `${SECRET_VALUE}-vm-before`;
    await apply(`
apiVersion: v1
kind: Secret
metadata: {name: vm-rotating}
stringData: {TOKEN: ${before}}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: rotating-box}
spec: {tier: standard, ttlSeconds: 3600, envFrom: [{secretRef: {name: vm-rotating}}]}`, t.namespace);
    const first = await sandboxVM("rotating-box");
    const uid = (await getResource(t.stack.kube, "sandboxes", t.namespace, "rotating-box")).metadata.uid;
    // The replacement's allocation is held: the Sandbox still names the old VM, Ready, while the
    // operator knows the new value (its allocation asked for it).
    t.stack.emulator.injectFault({ method: "POST", path: "/compute/v1/vms/allocate", times: 1, action: { delayMs: 5_000 } });
    await kubectlOk(["patch", "secret", "vm-rotating", "--type=merge", "-p", JSON.stringify({ stringData: { TOKEN: "the-vm-rotated-value" } })], { namespace: t.namespace });
    await waitFor(() => [...t.stack.emulator.state.vms.values()].some((v) => v.metadata["agentcompute.dev/uid"] === uid && v.id !== first), {
      timeoutMs: 30_000,
      intervalMs: 50,
      description: "the replacement's allocation to reach the service",
    });
    await apply(runInManifest("rotating-box", "after-rotation", `
  steps:
    - {name: print, command: 'echo "token=$TOKEN"'}`), t.namespace);
    // It says why it waits while the replacement is held.
    const waiting = await waitFor(
      async () => {
        const ready = condition(await run("after-rotation"), "Ready");
        return ready?.reason === "WaitingForSandbox" ? ready : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 100, description: "sandboxrun/after-rotation to wait for the Sandbox's next VM" },
    );
    expect(waiting.message).toContain(`the VM ${first} of Sandbox "rotating-box" holds values of its envFrom Secrets from before they changed`);
    const r = await finished("after-rotation");
    expect(r.status?.phase).toBe("Succeeded");
    expect(r.status?.vmId).not.toBe(first);
    expect(steps(r)[0]).toMatchObject({ exitCode: 0, output: "token=***\n" });
    expect(JSON.stringify(r)).not.toContain(before);
    expect(JSON.stringify((await configMap(r.status?.outputConfigMap as string)).data)).not.toContain(before);
  }, 90_000);

  it("ends all the same when its output ConfigMap cannot be written (both of its names another's), saying so, with each step's tail in status", async () => {
    await readySandbox("files-box");
    await apply(runInManifest("files-box", "output-blocked", `
  steps:
    - {name: wait, command: 'sleep 2; echo one'}
    - {name: last, command: 'echo two'}`), t.namespace);
    const started = await firstStepStarted("output-blocked");
    // Both names the output may have are taken by ConfigMaps of the user's.
    await apply(`
apiVersion: v1
kind: ConfigMap
metadata: {name: output-blocked-output}
data: {mine: keep}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: output-blocked-output-${started.metadata.uid.slice(0, 8)}}
data: {mine: keep}`, t.namespace);
    const r = await finished("output-blocked");
    expect(r.status?.phase).toBe("Succeeded");
    expect(steps(r).map((s) => [s.name, s.exitCode, s.output])).toEqual([
      ["wait", 0, "one\n"],
      ["last", 0, "two\n"],
    ]);
    expect(r.status?.outputConfigMap).toBeUndefined();
    expect(condition(r, "Ready")?.message).toContain("the output ConfigMap could not be written");
    expect((await configMap("output-blocked-output")).data).toEqual({ mine: "keep" });
  }, 90_000);

  it("does not upload its files again under a first step whose start's answer was lost: the step's changes to them stand", async () => {
    const vmId = await readySandbox("files-box");
    const workspace = t.stack.emulator.runtimes.get(vmId)!.workspace;
    // The start is done in the VM, and its answer lost: the next pass starts the step again.
    t.stack.emulator.injectFault({ method: "POST", path: `/compute/v1/vms/${vmId}/r/v1/commands/run`, times: 1, action: { drop: "after" } });
    try {
      await apply(`
apiVersion: v1
kind: ConfigMap
metadata: {name: seed}
data: {state.txt: original}
---${runInManifest("files-box", "changes-files", `
  files: [{path: state.txt, configMapKeyRef: {name: seed, key: state.txt}}]
  steps:
    - {name: change, command: 'echo changed > state.txt; while [ ! -e go-changes-files ]; do sleep 0.1; done; cat state.txt'}`)}`, t.namespace);
      // Started again (its command id in status), and changed the file.
      await waitFor(async () => steps(await run("changes-files"))[0]?.commandId !== undefined, { timeoutMs: 60_000, description: "the step's second start in status" });
      writeFileSync(join(workspace, "go-changes-files"), "");
      const r = await finished("changes-files");
      expect(r.status?.phase).toBe("Succeeded");
      expect(steps(r)[0]?.output).toBe("changed\n");
    } finally {
      t.stack.emulator.clearFaults();
    }
  }, 90_000);

  it("stops the step of a run deleted while no operator ran whose start status never recorded (its answer lost)", async () => {
    const vmId = await readySandbox("unrecorded-box");
    const rt = t.stack.emulator.runtimes.get(vmId)!;
    const running = () => [...rt.commands.values()].some((c) => c.running);
    // Every start is done in the VM and its answer lost: status never says the step started.
    t.stack.emulator.injectFault({ method: "POST", path: `/compute/v1/vms/${vmId}/r/v1/commands/run`, times: Infinity, action: { drop: "after" } });
    try {
      await apply(runInManifest("unrecorded-box", "unrecorded", `
  steps:
    - {name: forever, command: 'sleep 300'}`), t.namespace);
      await waitFor(() => running(), { timeoutMs: 60_000, description: "the step running in the VM" });
      await t.stack.restartOperator(async () => {
        t.stack.emulator.clearFaults();
        const r = await run("unrecorded");
        expect(steps(r)).toEqual([]);
        expect(r.metadata.finalizers).toContain("agentcompute.dev/finalizer");
        await kubectlOk(["delete", "sandboxrun", "unrecorded", "--wait=false"], { namespace: t.namespace });
      });
      await waitFor(() => !running(), { description: "the deleted run's step stopped" });
      await waitFor(async () => (await kubectl(["get", "sandboxrun", "unrecorded"], { namespace: t.namespace })).exitCode !== 0, {
        description: "sandboxrun/unrecorded gone",
      });
    } finally {
      t.stack.emulator.clearFaults();
    }
  }, 90_000);

  it("starts its steps in /workspace and names every file to the VM's file API by its absolute path", async () => {
    const vmId = await readySandbox("files-box");
    const from = t.stack.emulator.requests.length;
    await apply(`
apiVersion: v1
kind: ConfigMap
metadata: {name: eval-settings}
data: {settings.json: '{"rounds": 10}'}
---${runInManifest("files-box", "absolute-paths", `
  files: [{path: eval/settings.json, configMapKeyRef: {name: eval-settings, key: settings.json}}]
  steps:
    - {name: read, command: 'cat eval/settings.json'}
    - {name: where, command: 'pwd'}`)}`, t.namespace);
    const r = await finished("absolute-paths");
    expect(r.status?.phase).toBe("Succeeded");
    expect(steps(r).map((s) => [s.name, s.exitCode])).toEqual([
      ["read", 0],
      ["where", 0],
    ]);
    expect(steps(r)[0]?.output).toBe('{"rounds": 10}');
    // The emulator runs a VM's /workspace in a host directory: the step's cwd is that one.
    const workspace = t.stack.emulator.runtimes.get(vmId)!.workspace;
    expect(realpathSync((steps(r)[1]?.output ?? "").trim())).toBe(realpathSync(workspace));

    // What went to the VM's agentd (/compute/v1/vms/{id}/r/v1/...): the log keeps no bodies
    // (commands/run's cwd, the upload's path), but a download names its file in the query.
    const forwarded = t.stack.emulator.requests.slice(from).filter((q) => q.operation === "vms.forward" && q.path.startsWith(`/compute/v1/vms/${vmId}/r/`));
    expect(forwarded.filter((q) => q.method === "POST" && q.path.endsWith("/r/v1/commands/run"))).toHaveLength(2);
    expect(forwarded.filter((q) => q.method === "POST" && q.path.endsWith("/r/v1/files/upload"))).toHaveLength(1);
    const downloaded = forwarded.filter((q) => q.path.endsWith("/r/v1/files/download")).map((q) => new URLSearchParams(q.query).get("path") ?? "");
    expect(downloaded.filter((p) => p.includes(r.metadata.uid)).length).toBeGreaterThanOrEqual(2); // each step's exit (and output)
    for (const p of downloaded) expect(p).toMatch(/^\/workspace\//);
  }, 90_000);
});

describe("SandboxRun: a step that cannot be set up in the VM", () => {
  /** A run whose spec.files puts a file where the steps' directories go (/workspace/.agent-operator). */
  const blockedRun = (name: string, extra = "") =>
    runInManifest("blocked-box", name, `
  files: [{path: ".agent-operator", configMapKeyRef: {name: in-the-way, key: file}}]${extra}
  steps:
    - {name: s, command: 'echo ran > ran.txt'}`);
  const stepDirOf = (r: Resource, attempt: number) => `/workspace/.agent-operator/runs/${r.metadata.uid}/${attempt}/0`;

  it("fails the run with StepFailed, naming the directory, without an exit code and without hanging in Running", async () => {
    // A Sandbox of its own: the file in the way would stop every step of any other run in its VM.
    const vmId = await readySandbox("blocked-box");
    await apply(`
apiVersion: v1
kind: ConfigMap
metadata: {name: in-the-way}
data: {file: "not a directory"}
---${blockedRun("blocked")}`, t.namespace);
    const r = await finished("blocked", 30_000);
    const dir = stepDirOf(r, 1);
    expect(r.status?.phase).toBe("Failed");
    expect(r.status?.attempts).toBe(1);
    expect(condition(r, "Failed")).toMatchObject({ status: "True", reason: "StepFailed" });
    expect(condition(r, "Ready")).toMatchObject({ status: "False", reason: "StepFailed" });
    const message = condition(r, "Failed")?.message ?? "";
    expect(message).toContain(`step "s" failed: the step's directory ${dir}`);
    expect(message).toContain("could not be created in the VM");
    expect(steps(r)).toEqual([expect.objectContaining({ name: "s", finishedAt: expect.any(String) })]);
    expect(steps(r)[0]).not.toHaveProperty("exitCode");
    // Nothing ran, and the file is still there.
    const workspace = t.stack.emulator.runtimes.get(vmId)!.workspace;
    expect(existsSync(join(workspace, "ran.txt"))).toBe(false);
    expect(readFileSync(join(workspace, ".agent-operator"), "utf8")).toBe("not a directory");
    const events = await kubectlOk(["get", "events", "--field-selector", "involvedObject.name=blocked,reason=StepFailed", "-o", "json"], { namespace: t.namespace });
    expect(events).toContain(dir);
  }, 90_000);

  it("with backoffLimit: 1 is tried once more (one Retrying Warning), then fails with BackoffLimitExceeded", async () => {
    await readySandbox("blocked-box");
    await apply(blockedRun("blocked-twice", `
  backoffLimit: 1`), t.namespace);
    const r = await finished("blocked-twice", 45_000);
    expect(r.status?.phase).toBe("Failed");
    expect(r.status?.attempts).toBe(2);
    expect(condition(r, "Failed")).toMatchObject({ status: "True", reason: "BackoffLimitExceeded" });
    expect(condition(r, "Failed")?.message).toContain(`the step's directory ${stepDirOf(r, 2)} (or the marker file in it) could not be created in the VM`);
    expect(r.status?.lastFailedAttempt).toMatchObject({ attempt: 1, reason: "StepFailed", step: { name: "s" }, message: expect.stringContaining(stepDirOf(r, 1)) });
    expect(steps(r)[0]).not.toHaveProperty("exitCode");
    const reasons = await eventReasons(t.stack, "blocked-twice");
    expect(reasons.filter((x) => x === "Retrying")).toHaveLength(1);
    expect(reasons).toContain("BackoffLimitExceeded");
    const retrying = await kubectlOk(["get", "events", "--field-selector", "involvedObject.name=blocked-twice,reason=Retrying", "-o", "json"], { namespace: t.namespace });
    const { items } = JSON.parse(retrying) as { items: Array<{ type: string; message: string }> };
    expect(items).toEqual([expect.objectContaining({ type: "Warning", message: expect.stringContaining(`attempt 1 failed: step "s" failed: the step's directory ${stepDirOf(r, 1)}`) })]);
  }, 90_000);
});

describe("SandboxRun on an agentd that names no command id (emulator knob agentdNoStartEvent)", () => {
  // The published description names no event that carries a command's id: the steps are
  // followed and stopped by their files in the VM (src/runs/script.ts).
  const noIdRun = (name: string, stepsYaml: string) => `
apiVersion: agentcompute.dev/v1alpha1
kind: SandboxRun
metadata: {name: ${name}}
spec:
  sandboxRef: {name: noid-box}
  steps:
${stepsYaml}`;
  /** The step's directory in the VM's workspace on this host. */
  const stepFiles = (workspace: string, r: Resource, index: number): string => join(workspace, ".agent-operator/runs", r.metadata.uid as string, "1", String(index));

  beforeEach(() => t.stack.emulator.setOptions({ agentdNoStartEvent: true }));
  afterEach(() => t.stack.emulator.setOptions({ agentdNoStartEvent: false }));

  /** The VM runtime of the tests' Sandbox (Ready). */
  const box = async () => t.stack.emulator.runtimes.get(await readySandbox("noid-box"))!;

  /** The run once its first step has started, with no command id in status. */
  async function startedWithoutId(name: string): Promise<Resource> {
    const r = await waitFor(async () => {
      const got = await run(name);
      return steps(got)[0]?.startedAt !== undefined ? got : undefined;
    }, { description: `sandboxrun/${name}'s first step started` });
    expect(steps(r)[0]?.commandId).toBeUndefined();
    return r;
  }

  /** Its first step's directory in the VM, once the step's watcher has beaten there. */
  async function beating(workspace: string, r: Resource): Promise<string> {
    const dir = stepFiles(workspace, r, 0);
    await waitFor(() => existsSync(join(dir, "alive")), { description: "the step's heartbeat" });
    return dir;
  }

  it("runs its steps to the end, followed by their files, and across an operator restart without running one twice", async () => {
    const rt = await box();
    const before = rt.executions;
    await apply(noIdRun("no-id", `    - {name: long, command: 'echo started >> no-id.txt; sleep 3; echo finished; exit 0'}
    - {name: last, command: 'echo last >> no-id.txt; exit 4'}`), t.namespace);
    await startedWithoutId("no-id");
    await t.stack.restartOperator();
    const r = await finished("no-id");
    expect(r.status?.phase).toBe("Failed");
    expect(steps(r).map((s) => [s.name, s.exitCode, s.output, s.commandId])).toEqual([
      ["long", 0, "finished\n", undefined],
      ["last", 4, "", undefined],
    ]);
    expect(condition(r, "Ready")).toMatchObject({ reason: "StepFailed", message: expect.stringContaining('step "last" failed with exit code 4') });
    expect(readFileSync(join(rt.workspace, "no-id.txt"), "utf8")).toBe("started\nlast\n");
    expect(rt.executions - before).toBe(2);
  }, 90_000);

  it("starts each step once on an agentd whose background answer streams the whole run (emulator knob agentdBackgroundStreams)", async () => {
    const rt = await box();
    const before = rt.executions;
    t.stack.emulator.setOptions({ agentdBackgroundStreams: true });
    try {
      await apply(noIdRun("no-id-streamed", `    - {name: wait, command: 'while [ ! -e go-no-id-streamed ]; do sleep 0.1; done; echo waited'}
    - {name: next, command: 'echo next'}`), t.namespace);
      await startedWithoutId("no-id-streamed");
      writeFileSync(join(rt.workspace, "go-no-id-streamed"), "");
      const r = await finished("no-id-streamed");
      expect(r.status?.phase).toBe("Succeeded");
      expect(steps(r).map((s) => [s.name, s.exitCode, s.output])).toEqual([
        ["wait", 0, "waited\n"],
        ["next", 0, "next\n"],
      ]);
      // Each step started once: its start's answer, open until the step ended, was not waited out
      // and the step started again.
      expect(rt.executions - before).toBe(2);
    } finally {
      t.stack.emulator.setOptions({ agentdBackgroundStreams: false });
    }
  }, 90_000);

  it("stops its running step through the step's cancel file when it is deleted", async () => {
    const rt = await box();
    await apply(noIdRun("no-id-deleted", "    - {name: forever, command: 'echo begun; sleep 300'}"), t.namespace);
    const dir = await beating(rt.workspace, await startedWithoutId("no-id-deleted"));
    await kubectlOk(["delete", "sandboxrun", "no-id-deleted", "--wait=true", "--timeout=30s"], { namespace: t.namespace });
    // The step's shell got SIGTERM from its watcher: the step ended, and said so in its exit file.
    const code = await waitFor(() => (existsSync(join(dir, "exit")) ? readFileSync(join(dir, "exit"), "utf8").trim() : undefined), { description: "the deleted run's step stopped" });
    expect(code).toBe("143");
    expect(existsSync(join(dir, "cancel"))).toBe(true);
  }, 90_000);

  it("is deleted all the same, with a Warning, when the VM refuses its step's cancel file (a full disk)", async () => {
    const rt = await box();
    let dir: string | undefined;
    try {
      await apply(noIdRun("no-id-full-disk", "    - {name: forever, command: 'sleep 300'}"), t.namespace);
      dir = await beating(rt.workspace, await startedWithoutId("no-id-full-disk"));
      t.stack.emulator.injectFault({
        method: "POST",
        path: new RegExp(`^/compute/v1/vms/${rt.vmId}/r/v1/files/upload$`),
        times: Infinity,
        action: { status: 507, body: { code: 507, message: "no space left on device" } },
      });
      await kubectlOk(["delete", "sandboxrun", "no-id-full-disk", "--wait=true", "--timeout=30s"], { namespace: t.namespace });
      expect(await eventReasons(t.stack, "no-id-full-disk")).toContain("StepNotStopped");
      expect(existsSync(join(dir, "exit"))).toBe(false); // it runs on, as the Warning says
    } finally {
      t.stack.emulator.clearFaults();
      // Not left running for the tests after (its directory went with the run: made again).
      if (dir !== undefined) {
        mkdirSync(dir, { recursive: true });
        writeFileSync(join(dir, "cancel"), "");
      }
    }
  }, 90_000);
});
