// A shell command run in a VM: `/bin/sh -c <command>` in its own process group, output kept in
// its Execution, status kept after it ends (agentd's CommandStatus), killed on request, on its
// timeout, and with its VM. When the shell exits, whatever it left running in its group (a
// `server &`) is killed too: a command does not leave processes behind, and a process group is
// never signalled after it may have been reused.
import type { ChildProcess } from "node:child_process";
import { StringDecoder } from "node:string_decoder";
import { newId, rfc3339 } from "../util.js";
import { Execution } from "./execution.js";
import { exitCodeOf, killGroup, spawnGroup } from "./process-group.js";
import { unrefTimeout } from "../../lib/long-timer.js";

/** The exit code reported for a command killed by its timeout (as coreutils `timeout` does). */
export const TIMEOUT_EXIT_CODE = 124;
/** After the shell exits, how long to wait for its output pipes to close (a `cmd &` keeps them open). */
const DRAIN_MS = 200;

export interface CommandSpec {
  command: string;
  /** Host directory to run in. */
  cwd: string;
  env: Record<string, string>;
  /** The VM's cookie (process-group.ts: killCarrying). */
  cookie: string;
  /** Kill after this long; 0 or undefined: no limit. */
  timeoutMs?: number;
}

/** agentd's models.CommandStatus; exit_code and finished_at only once it has ended. */
export interface CommandStatus {
  id: string;
  running: boolean;
  exit_code?: number;
  started_at: string;
  finished_at?: string;
}

export class Command {
  readonly id = newId();
  readonly execution: Execution;
  readonly startedAt: number;
  private finishedAt: number | undefined;
  private exitCode: number | undefined;
  private child: ChildProcess | undefined;
  private cancelTimeout: (() => void) | undefined;
  private timedOut: number | undefined;
  private failure: string | undefined;

  /** Spawns at once. */
  constructor(
    readonly spec: CommandSpec,
    limitBytes: number,
    private readonly now: () => number,
  ) {
    this.execution = new Execution("command", this.id, limitBytes);
    this.startedAt = now();
    this.execution.emit("start", { id: this.id });
    let child: ChildProcess;
    try {
      child = spawnGroup("/bin/sh", ["-c", spec.command], { cwd: spec.cwd, env: spec.env, cookie: spec.cookie });
    } catch (err) {
      this.fail(err);
      return;
    }
    this.child = child;
    const out = new StringDecoder("utf8");
    const errs = new StringDecoder("utf8");
    child.stdout?.on("data", (b: Buffer) => this.execution.output("stdout", out.write(b)));
    child.stderr?.on("data", (b: Buffer) => this.execution.output("stderr", errs.write(b)));
    let closed = false;
    child.once("close", () => (closed = true));
    child.once("error", (err) => this.fail(err));
    child.once("exit", (code, signal) => {
      const exitCode = this.timedOut !== undefined ? TIMEOUT_EXIT_CODE : exitCodeOf(code, signal);
      const finish = (): void => {
        this.execution.output("stdout", out.end());
        this.execution.output("stderr", errs.end());
        this.finish(exitCode);
      };
      if (closed) return finish();
      // Background children may hold the pipes open: stop reading them after a moment.
      const t = setTimeout(() => {
        child.stdout?.destroy();
        child.stderr?.destroy();
        finish();
      }, DRAIN_MS);
      t.unref();
      child.once("close", () => {
        clearTimeout(t);
        finish();
      });
    });
    if (spec.timeoutMs !== undefined && spec.timeoutMs > 0) {
      const ms = spec.timeoutMs;
      this.cancelTimeout = unrefTimeout(() => {
        if (!this.running) return;
        this.timedOut = ms;
        this.execution.emit("timeout", { timeout_ms: ms });
        this.kill();
      }, ms);
    }
  }

  get running(): boolean {
    return this.exitCode === undefined;
  }

  status(): CommandStatus {
    return {
      id: this.id,
      running: this.running,
      ...(this.exitCode !== undefined && { exit_code: this.exitCode }),
      started_at: rfc3339(this.startedAt),
      ...(this.finishedAt !== undefined && { finished_at: rfc3339(this.finishedAt) }),
    };
  }

  /** Kills the command's whole process group (SIGKILL); a no-op once it has ended. */
  kill(): void {
    if (!this.running) return;
    const pid = this.child?.pid;
    if (pid !== undefined) killGroup(pid);
  }

  private finish(exitCode: number): void {
    if (!this.running) return;
    this.cancelTimeout?.();
    const pid = this.child?.pid;
    if (pid !== undefined) killGroup(pid); // leftovers of the shell
    this.exitCode = exitCode;
    this.finishedAt = this.now();
    this.execution.end(commandEnd(exitCode, this.timedOut, this.failure));
  }

  private fail(err: unknown): void {
    this.failure = `cannot run the command: ${(err as Error).message}`;
    this.execution.output("stderr", `${this.failure}\n`);
    this.finish(127);
  }
}

/** A command's end event data: see commandEnd. */
export interface CommandEnd {
  exit_code: number;
  status: "ok" | "error";
  error?: string;
}

/**
 * The data of a command's `end` event: `exit_code` (agentd's), plus `status` ("ok" for exit
 * code 0, else "error") and, on failure, `error` (why, as the ws_url's `error` message says it),
 * the keys the official SDK's parser reads, so that a failed command never reads as ok.
 */
export function commandEnd(exitCode: number, timedOutMs?: number, failure?: string): CommandEnd {
  if (timedOutMs !== undefined) return { exit_code: exitCode, status: "error", error: `command timed out after ${timedOutMs} ms` };
  if (failure !== undefined) return { exit_code: exitCode, status: "error", error: failure };
  if (exitCode !== 0) return { exit_code: exitCode, status: "error", error: `command exited with code ${exitCode}` };
  return { exit_code: 0, status: "ok" };
}
