// `agent-operator exec <sandbox> -- <command...>` (also `kubectl agentcompute exec`): runs a
// command in a Sandbox's VM, streams its stdout and stderr as they come, and exits with its exit
// code, as `kubectl exec` does for a pod. The Sandbox (status.vmId), its Connection and the
// Connection's credentials Secret are read from the cluster with the caller's kubeconfig; the
// command goes to the VM's agentd through the service (src/service/agentd.ts).
//
// Exit codes (kubectl's habits): the command's own; 1 when it could not be run (Sandbox not
// found or not Ready, Connection missing, credentials refused, service unreachable); 2 for a
// usage error; 128+n after signal n (Ctrl-C: 130), once the remote command has been killed; 141
// (128 + SIGPIPE) when its output was closed (`| head`), once the remote command has been killed.
// Where it could not be killed (the VM named no id for it, or the kill failed), stderr says it
// may still be running, and in which VM.
import { parseArgs } from "node:util";
import { Annotations, ConditionType, GROUP, VERSION, kindNames } from "../api/names.js";
import type { Sandbox } from "../api/index.js";
import { vmStateIsLive } from "../api/vm-state.js";
import { durationMs } from "../lib/duration.js";
import { errorMessage } from "../lib/errors.js";
import { WORKSPACE } from "../runs/script.js";
import { resourcePath, type KubeClient } from "../runtime/kube-client.js";
import type { CommandOptions, ExecStream } from "../service/agentd.js";
import { ServiceError, isNotFound } from "../service/index.js";
import { goBooleans } from "./booleans.js";
import { explainKubeError, kubeClientOf, kubeFlagOptions, kubeFlagsHelp, kubeFlagsOf, namespaceOf, type KubeFlags } from "./kube-flags.js";
import { CLOSED_OUTPUT_EXIT_CODE, exitOnClosedOutput, whenOutputClosed, writeOut } from "./output.js";
import { VMAccessError, connectVM, readObject, type Explain, type VMAccess } from "./vm-access.js";
import { usageError } from "./usage.js";

const help = (prog: string) => `usage: ${prog} [flags] <sandbox> -- <command> [args...]

Runs a command in the VM of a Sandbox, streams its stdout and stderr, and exits with its exit
code. One argument after -- is a shell command line (sh -c); several are a command and its
arguments, passed as they are. Ctrl-C kills the command in the VM (where it cannot, it says
so). There is no stdin or tty.

examples:
  ${prog} box -- ls -la skills         # in /workspace, where commands run
  ${prog} -n team-a box -- 'make test 2>&1 | tail -n 20'

flags:
${kubeFlagsHelp("namespace of the Sandbox", 28)}
      --cwd <dir>           working directory in the VM (default /workspace)
  -e, --env <KEY=VALUE>     environment variable for the command; repeatable
      --timeout <duration>  kill the command after this long, e.g. 30s, 10m (exit code 124);
                            at least 1ms (leave it out for no timeout)

exit codes: the command's; 1 if it could not be run; 2 usage error; 130 interrupted (Ctrl-C);
141 output closed (e.g. | head), the command killed
`;

export interface ExecFlags extends KubeFlags {
  sandbox: string;
  /** The command line given to sh -c in the VM. */
  command: string;
  options: CommandOptions;
}

/** A mistake in the command line: exit 2. */
export class UsageError extends Error {
  override readonly name = "UsageError";
}

/** Parses `[flags] <sandbox> -- <command...>`; throws UsageError. */
export function parseExecFlags(argv: string[]): ExecFlags | "help" {
  const dash = argv.indexOf("--");
  const before = dash < 0 ? argv : argv.slice(0, dash);
  const after = dash < 0 ? [] : argv.slice(dash + 1);
  // kubectl exec's flags, said plainly (parseArgs would advise putting them after --, which
  // would hand them to the command).
  for (const arg of before) {
    const flag = arg.replace(/=.*$/, "");
    if (/^-[it]{1,2}$/.test(flag) || flag === "--stdin" || flag === "--tty") {
      throw new UsageError(`${flag}: exec has no stdin nor terminal: it runs the command and prints its output; leave ${flag} out`);
    }
    if (flag === "-c" || flag === "--container") throw new UsageError(`${flag}: a Sandbox has one VM, with no containers to choose; leave ${flag} out`);
  }
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(before);
  } catch (err) {
    throw new UsageError(errorMessage(err));
  }
  const { values, positionals } = parsed;
  if (values.help) return "help";
  if (positionals.length === 0) throw new UsageError("name the Sandbox: <sandbox> -- <command>");
  if (positionals.length > 1) throw new UsageError(`unexpected argument "${positionals[1] ?? ""}" (the command goes after --)`);
  if (dash < 0) throw new UsageError(`give the command after --, e.g. ${positionals[0] ?? "box"} -- ls`);
  if (after.length === 0 || (after.length === 1 && after[0]!.trim() === "")) throw new UsageError("the command after -- is empty");
  const sandbox = positionals[0]!.replace(/^(sandbox|sandboxes|sbx)(\.agentcompute\.dev)?\//, "");
  // The published agentd API gives no default working directory: the workspace, as a
  // SandboxRun's steps are given it, so that `ls` and relative paths mean the same in both.
  const options: CommandOptions = { cwd: values.cwd ?? WORKSPACE };
  if (values.env !== undefined) {
    const envs: Record<string, string> = {};
    for (const [i, kv] of values.env.entries()) {
      const eq = kv.indexOf("=");
      // Not quoted: what was given may be the value alone, and a value is often a secret.
      if (eq <= 0) throw new UsageError(`--env (the ${ordinal(i + 1)}): ${eq === 0 ? "no name before the =" : "no ="}; give KEY=VALUE`);
      envs[kv.slice(0, eq)] = kv.slice(eq + 1);
    }
    options.envs = envs;
  }
  if (values.timeout !== undefined) {
    let ms: number;
    try {
      ms = durationMs(values.timeout, "--timeout");
    } catch (err) {
      throw new UsageError(errorMessage(err));
    }
    // 0 (or 100us, 0 once in whole milliseconds) would reach the VM as no timeout at all.
    if (ms < 1) throw new UsageError(`--timeout: "${values.timeout}" is less than 1ms; give a longer one (e.g. 30s), or leave --timeout out for no timeout`);
    options.timeoutMs = Math.round(ms);
  }
  return {
    sandbox,
    command: after.length === 1 ? after[0]! : after.map(shellQuote).join(" "),
    ...kubeFlagsOf(values),
    options,
  };
}

function parse(args: string[]) {
  const options = {
    help: { type: "boolean", short: "h" },
    ...kubeFlagOptions,
    cwd: { type: "string" },
    env: { type: "string", short: "e", multiple: true },
    timeout: { type: "string" },
  } as const;
  return parseArgs({ args: goBooleans(args, options), strict: true, allowPositionals: true, options });
}

/** One argument for sh, quoted so that it arrives as it was given. */
export function shellQuote(arg: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`;
}

/** The command's exit code as a process exit code (0-255; a nonzero code never becomes 0). */
export function processExitCode(code: number): number {
  if (code >= 0 && code <= 255) return code;
  const low = code & 0xff;
  return low === 0 ? 1 : low;
}

/** What exec exits with after --timeout killed the command (as coreutils timeout does). */
export const TIMEOUT_EXIT_CODE = 124;

/**
 * How exec ends for a command that ended: 124 once the VM said it killed the command for
 * --timeout, whatever code the end then carries (a killed process's -1 from a Go agentd would
 * be 255, no code at all 0: a script would read a timeout as success); else the command's code,
 * none being 0 (a Go server's omitempty).
 */
export function commandExitCode(end: { timedOut: boolean; exitCode?: number }): number {
  if (end.timedOut) return TIMEOUT_EXIT_CODE;
  return end.exitCode === undefined ? 0 : processExitCode(end.exitCode);
}

/** How the command ended cannot be told (exit 1), for a reason the message says. */
class ExecError extends Error {
  override readonly name = "ExecError";
}

export async function main(argv: string[], prog = "agent-operator exec"): Promise<number> {
  exitOnClosedOutput();
  let flags: ExecFlags | "help";
  try {
    flags = parseExecFlags(argv);
  } catch (err) {
    console.error(usageError(prog, err));
    return 2;
  }
  if (flags === "help") {
    console.log(help(prog));
    return 0;
  }
  let kube: KubeClient | undefined;
  let target: VMAccess | undefined;
  try {
    kube = kubeClientOf(flags);
    const [k, f] = [kube, flags];
    target = await resolve(k, namespaceOf(f, k), f.sandbox, (err) => explainKubeError(err, k), (note) => console.error(`${prog}: ${note}`));
    return await runStreaming(target, flags.command, flags.options, prog);
  } catch (err) {
    console.error(`${prog}: ${errorMessage(err)}`);
    return 1;
  } finally {
    await target?.close();
    await kube?.close();
  }
}

// ---------------------------------------------------------------------------------------
// Where the command goes: the Sandbox's VM, through its Connection

/**
 * The Sandbox's VM, as kubectl exec takes a Pod's container: running is enough, Ready is not
 * needed. A VM is kept and renewed while its Sandbox is not Ready for reasons of its own (the
 * service's VM list failing, an endpoint not known yet, a change held back by the pause or
 * being made): the command runs there all the same, and `note` says why it is not Ready.
 */
async function resolve(kube: KubeClient, namespace: string, name: string, explain: Explain, note: (line: string) => void): Promise<VMAccess> {
  const what = `Sandbox "${name}" in namespace "${namespace}"`;
  const reader = { kube, explain, needs: "get on sandboxes, connections and the Connection's Secret" };
  const sandbox = await readObject<Sandbox>(reader, resourcePath({ group: GROUP, version: VERSION, plural: kindNames.sandbox.plural, namespace, name }), what);
  if (sandbox === undefined) throw new VMAccessError(`${what} not found (kubectl get sandboxes -n ${namespace})`);
  const vmId = sandbox.status?.vmId;
  const ready = sandbox.status?.conditions?.find((c) => c.type === ConditionType.Ready);
  const why = ready === undefined ? "no Ready condition yet" : `Ready=${ready.status}${ready.reason ? ` (${ready.reason}${ready.message ? `: ${ready.message}` : ""})` : ""}`;
  // Not the VM of the Sandbox for long, or no more: one it is replacing, or one status still
  // names while the adoption annotation names another.
  const adopting = sandbox.metadata.annotations?.[Annotations.externalId];
  const leaving = ready?.reason === "Replacing" || (adopting !== undefined && adopting !== "" && adopting !== vmId);
  if (vmId === undefined || vmId === "" || !vmStateIsLive(sandbox.status?.state) || leaving) {
    throw new VMAccessError(`${what} has no running VM${leaving ? " it keeps" : ""}: ${why}; wait for it: kubectl wait --for=condition=Ready sandbox/${name} -n ${namespace}`);
  }
  if (ready?.status !== "True") note(`${what} is not Ready: ${why}; running in its VM ${vmId} all the same`);
  return connectVM(reader, namespace, sandbox.spec.connectionRef, vmId, what);
}

// ---------------------------------------------------------------------------------------
// Running: output as it comes, the exit code at the end, Ctrl-C kills the remote command

const SIGNALS = { SIGINT: 2, SIGTERM: 15, SIGHUP: 1 } as const;
/** What ends the command early: a signal, or the output found closed (as SIGPIPE would). */
type Signal = keyof typeof SIGNALS | "SIGPIPE";
const exitCodeAfter = (s: Signal) => (s === "SIGPIPE" ? CLOSED_OUTPUT_EXIT_CODE : 128 + SIGNALS[s]);
/** After Ctrl-C, how long to wait for the command's id (not once its output has begun) before giving up on killing it. */
const KILL_WAIT_MS = 5_000;
/** How often to ask how the command ended when its stream broke off. */
const STATUS_POLL_MS = 1_000;

/** Runs the command, its output to this process's stdout and stderr; how exec exits. */
export async function runStreaming(target: VMAccess, command: string, options: CommandOptions, prog: string): Promise<number> {
  const stream: ExecStream = target.vm.runCommand(command, options);
  let id: string | undefined;
  /** Output came: an id that has not come by then never will (it is the stream's first event). */
  let begun = false;
  let signal: Signal | undefined;
  let giveUp: NodeJS.Timeout | undefined;
  let exitCode: number | undefined;
  let ended = false;
  const mayStillRun = (what: string) => `${prog}: ${what}; it may still be running in VM ${target.vmId}\n`;
  const onSignal = (s: Signal) => {
    // A second Ctrl-C: leave now, whatever the remote command does. (Not the pipe found closed
    // meanwhile: the kill under way goes on.)
    if (signal !== undefined) {
      if (s === "SIGPIPE") return;
      // Synchronous (a pipe's or a terminal's write is, on Linux and macOS): the exit is next.
      if (!ended) process.stderr.write(mayStillRun("left before the command was stopped"));
      process.exit(exitCodeAfter(s));
    }
    signal = s;
    if (id !== undefined || begun) stream.close();
    else giveUp = setTimeout(() => stream.close(), KILL_WAIT_MS);
  };
  /**
   * How exec ends after `s`: the command killed first, unless it has ended. One that cannot be
   * (no id to kill it by, or the kill failed) is said to be running still: an exit code that
   * reads as "killed" would leave a build or a server at work in the VM unseen.
   */
  const stopped = async (s: Signal): Promise<number> => {
    if (!ended) {
      const failure =
        id === undefined
          ? "the command could not be stopped: the VM named no id to kill it by"
          : await target.vm.killCommand(id).then(() => undefined, (err: unknown) => `command ${id} could not be stopped: ${errorMessage(err)}`);
      if (failure !== undefined) await writeOut(process.stderr, mayStillRun(failure));
    }
    return exitCodeAfter(s);
  };
  const handlers = (Object.keys(SIGNALS) as Array<keyof typeof SIGNALS>).map((s) => [s, () => onSignal(s)] as const);
  for (const [s, h] of handlers) process.on(s, h);
  // Output closed (`| head`): the command is killed as on Ctrl-C, and nothing more is written.
  const undoClosed = whenOutputClosed(() => onSignal("SIGPIPE"));
  let timedOut = false;
  try {
    try {
      for await (const e of stream) {
        if (e.type === "start") {
          id = e.id;
          if (signal !== undefined) break;
        } else if (e.type === "stdout" || e.type === "stderr") {
          begun = true;
          if (signal !== undefined && id === undefined) break;
          await writeOut(e.type === "stdout" ? process.stdout : process.stderr, e.text);
        } else if (e.type === "timeout") {
          timedOut = true;
          await writeOut(process.stderr, `${prog}: the command ran out of time (--timeout) and was killed\n`);
        }
        else if (e.type === "error") await writeOut(process.stderr, `${prog}: the VM reported an error${e.name !== undefined ? ` (${e.name})` : ""}${e.value !== undefined ? `: ${e.value}` : ""}\n`);
        else if (e.type === "end") {
          ended = true;
          exitCode = e.exitCode;
          // The end is the last event: a server that keeps the stream open after it is not waited on.
          break;
        }
      }
    } catch (err) {
      // Cut mid-stream (a network blip, a proxy's timeout): the command runs on in the VM, and
      // how it ends is asked below.
      if (signal === undefined && !(id !== undefined && isTransportFailure(err))) throw err;
    }
    if (signal !== undefined) return await stopped(signal);
    if (exitCode !== undefined || (ended && timedOut)) return commandExitCode({ timedOut, exitCode });
    if (id === undefined) {
      // No id to ask about (the published stream format names none): the end without an exit
      // code is all there is, and it means 0 (a Go server's omitempty); no end, nothing known.
      if (ended) return commandExitCode({ timedOut });
      throw new ExecError("the VM's answer ended without the command's id or its end: how the command ended is unknown");
    }
    // The stream broke off: the command may still run. (An end without an exit code, as a Go
    // server's omitempty sends for 0, is asked about the same way: its status says.)
    if (!ended) await writeOut(process.stderr, `${prog}: the output stream of command ${id} ended early; waiting for it to finish\n`);
    for (;;) {
      if (signal !== undefined) return await stopped(signal);
      const st = await target.vm.commandStatus(id).catch((err: unknown) => {
        // Still cut off, or the way to the VM failing for now (a proxy's 502/503/504, a 429):
        // asked again, until Ctrl-C.
        if (isTransportFailure(err) || (err instanceof ServiceError && err.retryable)) return undefined;
        // Ended, and how is no longer known (agentd forgot the command, or the VM is gone since):
        // the end without an exit code is all there is, and it means 0.
        if (ended && isNotFound(err)) return { id, running: false, exitCode: 0 };
        throw err;
      });
      if (st === undefined) {
        await new Promise((r) => setTimeout(r, STATUS_POLL_MS));
        continue;
      }
      if (!st.running) {
        if (st.exitCode === undefined && !timedOut) throw new ExecError(`command ${id} ended without an exit code`);
        return commandExitCode({ timedOut, exitCode: st.exitCode });
      }
      await new Promise((r) => setTimeout(r, STATUS_POLL_MS));
    }
  } finally {
    clearTimeout(giveUp);
    stream.close();
    for (const [s, h] of handlers) process.off(s, h);
    undoClosed();
  }
}

/** A failure below HTTP (no answer, a connection cut): the service may still be at work. */
function isTransportFailure(err: unknown): boolean {
  return err instanceof ServiceError && err.status === undefined;
}

/** 1st, 2nd, 3rd, 4th... */
function ordinal(n: number): string {
  const tens = n % 100;
  const suffix = tens >= 11 && tens <= 13 ? "th" : (["th", "st", "nd", "rd"][n % 10] ?? "th");
  return `${n}${suffix}`;
}
