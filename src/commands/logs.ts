// `agent-operator logs [-n ns] [-f] <sandboxrun>` (also `kubectl agentcompute logs`): the output
// of a SandboxRun's steps, as `kubectl logs` prints a pod's. Each ended step's whole output
// comes from the run's output ConfigMap (status holds only its tail); a running step's output
// so far is read from its file in the VM (./live-output.ts), masked as the operator masks it,
// where the caller may read the Secrets that takes (else it comes once the step has ended).
// With -f, follows the run while it runs, printing a running step's output as it is written,
// until the run has succeeded or failed. The steps' output goes to stdout as it is; a line
// naming each step (and its exit code), and one when a step starts running, the run waits or a
// new attempt starts, go to stderr, so that stdout can be piped.
//
// Exit codes: 0 printed (with -f: the run succeeded); 1 the run could not be read, or (with
// -f) it failed; 2 usage error; 141 (128 + SIGPIPE) its output closed early (`| head`).
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { GROUP, VERSION, kindNames } from "../api/names.js";
import type { SandboxRun, SandboxRunStatus } from "../api/index.js";
import { errorMessage } from "../lib/errors.js";
import { configMapsPath, isNotFound, resourcePath, type KubeClient } from "../runtime/kube-client.js";
import { goBooleans } from "./booleans.js";
import { explainKubeError, kubeClientOf, kubeFlagOptions, kubeFlagsHelp, kubeFlagsOf, namespaceOf, type KubeFlags } from "./kube-flags.js";
import { LiveOutput, type LiveIO } from "./live-output.js";
import { exitOnClosedOutput } from "./output.js";
import { usageError } from "./usage.js";

const help = (prog: string) => `usage: ${prog} [flags] <sandboxrun>

Prints the output of a SandboxRun's steps (stdout and stderr of each, in order); a line naming
each step and its exit code goes to stderr, and so does one when a step is running, when the
run waits or cannot go on (and why), and when a new attempt starts. A running step's output is
read from the VM as it is written, with the values of the run's Secrets masked; that needs get
on sandboxes, connections and secrets (without it, a step's output is printed once it has ended).

flags:
  -f, --follow              follow the run while it runs; exit when it has ended
${kubeFlagsHelp("namespace of the SandboxRun", 28)}

exit codes: 0 printed (with -f: the run succeeded); 1 error (with -f: the run failed); 2 usage error;
141 output closed early (e.g. | head)
`;

export interface LogsFlags extends KubeFlags {
  run: string;
  follow: boolean;
}

export function parseLogsFlags(argv: string[]): LogsFlags | "help" {
  const options = {
    help: { type: "boolean", short: "h" },
    follow: { type: "boolean", short: "f", default: false },
    ...kubeFlagOptions,
  } as const;
  const { values, positionals } = parseArgs({ args: goBooleans(argv, options), strict: true, allowPositionals: true, options });
  if (values.help) return "help";
  if (positionals.length !== 1) throw new Error(positionals.length === 0 ? "name the SandboxRun" : `unexpected argument "${positionals[1] ?? ""}"`);
  return {
    run: positionals[0]!.replace(/^(sandboxrun|sandboxruns|sbxr|sbxrun)(\.agentcompute\.dev)?\//, ""),
    follow: values.follow ?? false,
    ...kubeFlagsOf(values),
  };
}

export interface LogsIO extends LiveIO {
  /** Between two looks at a followed run (default 1 s). */
  intervalMs?: number;
}

const defaultIO: LogsIO = {
  out: (t) => process.stdout.write(t),
  err: (t) => process.stderr.write(t),
};

export async function main(argv: string[], prog = "agent-operator logs", io: LogsIO = defaultIO): Promise<number> {
  // Writing to the process's own stdout and stderr (not a caller's io): a closed one ends it.
  if (io === defaultIO) exitOnClosedOutput();
  let flags: LogsFlags | "help";
  try {
    flags = parseLogsFlags(argv);
  } catch (err) {
    io.err(`${usageError(prog, err)}\n`);
    return 2;
  }
  if (flags === "help") {
    io.out(help(prog));
    return 0;
  }
  let kube: KubeClient | undefined;
  let live: LiveOutput | undefined;
  try {
    kube = kubeClientOf(flags);
    const k = kube;
    const namespace = namespaceOf(flags, k);
    live = new LiveOutput({ kube: k, explain: (err) => explainKubeError(err, k), needs: "get on sandboxes, connections and secrets" }, namespace, io, flags.follow);
    return await printLogs(kube, namespace, flags.run, flags.follow, io, live);
  } catch (err) {
    io.err(`${prog}: ${errorMessage(explainKubeError(err, kube))}\n`);
    return 1;
  } finally {
    await live?.close();
    await kube?.close();
  }
}

/**
 * Prints the run's ended steps, and what its running step has printed so far (`live`, where
 * it can be read); with `follow`, until the run ends. What the run is doing meanwhile (waiting,
 * and why; a step running) is said once on stderr, so that a long step does not look like a
 * hung command.
 */
export async function printLogs(kube: KubeClient, namespace: string, name: string, follow: boolean, io: LogsIO, live?: LiveOutput): Promise<number> {
  const printed = new Set<string>();
  const said = new Set<string>();
  const sayOnce = (key: string, line: string) => {
    if (said.has(key)) return;
    said.add(key);
    io.err(line);
  };
  let seen: SandboxRun | undefined;
  for (;;) {
    const run = await readRun(kube, namespace, name);
    if (run === undefined) {
      if (seen === undefined) throw new Error(`SandboxRun "${name}" not found in namespace "${namespace}" (kubectl get sandboxruns -n ${namespace})`);
      // Followed, then gone: deleted by hand, or by its TTL as it ended (0: at once, and its
      // output ConfigMap with it), between two looks.
      const ttl = seen.spec.ttlSecondsAfterFinished;
      io.err(
        `sandboxrun/${name} was deleted before its end could be read${ttl === 0 ? ": its spec.ttlSecondsAfterFinished is 0, which deletes it, and its output, as it ends; give it a few seconds (e.g. 60) to be followed to its end" : ""}\n`,
      );
      return 1;
    }
    seen = run;
    const st = run.status ?? {};
    const attempt = st.attempts ?? 1;
    const steps = st.steps ?? [];
    // An attempt that failed before this one: the end of its step followed live, or where it
    // failed; then the new attempt, before any step of it.
    if (live !== undefined) await endEarlierAttempts(live, run, printed, io);
    sayFailedAttempt(st, printed, sayOnce, io);
    const ended = steps.filter((s) => s.finishedAt !== undefined);
    if (ended.some((s) => !printed.has(`${attempt}/${s.name}`))) {
      const data = st.outputConfigMap === undefined ? {} : await readData(kube, namespace, st.outputConfigMap);
      for (const s of ended) {
        const key = `${attempt}/${s.name}`;
        if (printed.has(key)) continue;
        printed.add(key);
        const code = exitCodeOf(s);
        const kept = data[s.name] ?? s.output ?? "";
        // Followed live: the rest of it, then how it ended.
        if (live !== undefined && (await live.end(run, steps.indexOf(s), kept))) {
          io.err(`--- step "${s.name}" (attempt ${attempt}) ended, ${code} ---\n`);
          continue;
        }
        io.err(`--- step "${s.name}" (attempt ${attempt}, ${code}) ---\n`);
        io.out(kept);
      }
    }
    const done = st.phase === "Succeeded" || st.phase === "Failed";
    if (!done) {
      const running = steps.findIndex((s) => s.finishedAt === undefined);
      const followed = running >= 0 && live !== undefined && (await live.ready(run));
      sayProgress(st, name, sayOnce, follow, followed);
      if (followed) await live.look(run, running);
    }
    if (!follow) return 0;
    if (done) {
      if (st.phase === "Succeeded") return 0;
      const ready = st.conditions?.find((c) => c.type === "Ready");
      io.err(`sandboxrun/${name} failed: ${ready?.reason ?? "Failed"}${ready?.message ? `: ${ready.message}` : ""}\n`);
      return 1;
    }
    await sleep(io.intervalMs ?? 1_000);
  }
}

/**
 * The steps followed live of an attempt before the run's current one: the end of each read
 * whole is followed by how it ended (and counts as printed, so its last output is not said
 * again); one whose end could not be read is said, unless it is the failing step, whose last
 * output sayFailedAttempt says.
 */
async function endEarlierAttempts(live: LiveOutput, run: SandboxRun, printed: Set<string>, io: LogsIO): Promise<void> {
  const failedAttempt = run.status?.lastFailedAttempt;
  for (const s of await live.endEarlier(run)) {
    const failed = failedAttempt?.attempt === s.attempt && failedAttempt.step?.name === s.name ? failedAttempt.step : undefined;
    if (s.whole) {
      printed.add(`${s.attempt}/${s.name}`);
      io.err(`--- step "${s.name}" (attempt ${s.attempt}) ended${failed === undefined ? "" : `, ${exitCodeOf(failed)}`} ---\n`);
    } else if (failed === undefined) {
      io.err(`--- step "${s.name}" (attempt ${s.attempt}): the end of its output could not be read live ---\n`);
    }
  }
}

/**
 * Where a run that has not ended stands, each thing said once: a new attempt (the one before
 * failed), a step running, or why it waits or cannot go on (its Ready reason, when it is not
 * Running: a Sandbox not Ready, a Secret missing, the service failing). `follow`: whether the
 * run is followed (-f); `live`: whether the running step's output is read as it is written
 * (else it is printed once the step has ended, or, without -f, not now).
 */
export function sayProgress(st: SandboxRunStatus, name: string, sayOnce: (key: string, line: string) => void, follow: boolean, live = false): void {
  const attempt = st.attempts ?? 1;
  if (attempt > 1) sayOnce(`attempt/${attempt}`, attemptBanner(st));
  const ready = st.conditions?.find((c) => c.type === "Ready");
  if (ready?.reason !== undefined && ready.reason !== "Running") {
    sayOnce(`${attempt}/${ready.reason}/${ready.message ?? ""}`, `sandboxrun/${name}: ${ready.reason}${ready.message ? `: ${ready.message}` : ""}\n`);
    return;
  }
  const running = (st.steps ?? []).find((s) => s.finishedAt === undefined);
  if (running !== undefined) {
    const step = `--- step "${running.name}" (attempt ${attempt})`;
    const line = live
      ? follow
        ? `${step} is running ---\n`
        : `${step} is still running; its output so far: ---\n`
      : follow
        ? `${step} is running; its output is printed once it has ended ---\n`
        : `${step} is still running; its output is not printed yet (-f follows the run and prints it once the step has ended) ---\n`;
    sayOnce(`${attempt}/${running.name}/running`, line);
  }
}

/**
 * The attempt that failed last (status.lastFailedAttempt): its failing step, with the last of
 * its output (the ConfigMap holds the next attempt's), on stderr, unless printed when it ended;
 * then the banner of the attempt after it.
 */
export function sayFailedAttempt(st: SandboxRunStatus, printed: Set<string>, sayOnce: (key: string, line: string) => void, io: Pick<LogsIO, "out" | "err">): void {
  const attempt = st.attempts ?? 1;
  const failed = st.lastFailedAttempt;
  const step = failed?.step;
  if (failed !== undefined && step !== undefined && step.finishedAt !== undefined && !printed.has(`${failed.attempt}/${step.name}`)) {
    printed.add(`${failed.attempt}/${step.name}`);
    const code = exitCodeOf(step);
    // On stderr, as what is said about the run: stdout is the output of the attempt that counts.
    const tail = step.output ?? "";
    io.err(`--- step "${step.name}" (attempt ${failed.attempt}, ${code}; the last of its output) ---\n${tail}${tail === "" || tail.endsWith("\n") ? "" : "\n"}`);
  }
  if (attempt > 1) sayOnce(`attempt/${attempt}`, attemptBanner(st));
}

const exitCodeOf = (step: { exitCode?: number }): string => (step.exitCode === undefined ? "no exit code" : `exit code ${step.exitCode}`);

/** `--- attempt 2 (attempt 1 failed: <why>) ---` */
function attemptBanner(st: SandboxRunStatus): string {
  const attempt = st.attempts ?? 1;
  const failed = st.lastFailedAttempt;
  const why = failed?.attempt === attempt - 1 ? failed.message.replace(new RegExp(`^attempt ${attempt - 1} failed: `), "") : undefined;
  return `--- attempt ${attempt} (attempt ${attempt - 1} failed${why === undefined ? "" : `: ${why}`}) ---\n`;
}

/** The run, or undefined if there is none. */
async function readRun(kube: KubeClient, namespace: string, name: string): Promise<SandboxRun | undefined> {
  try {
    return await kube.get<SandboxRun>(resourcePath({ group: GROUP, version: VERSION, plural: kindNames.sandboxRun.plural, namespace, name }));
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

async function readData(kube: KubeClient, namespace: string, name: string): Promise<Record<string, string>> {
  try {
    return (await kube.get<{ data?: Record<string, string> }>(configMapsPath(namespace, name))).data ?? {};
  } catch (err) {
    if (isNotFound(err)) return {};
    throw err;
  }
}
