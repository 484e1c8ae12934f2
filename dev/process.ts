// Process and file-system helpers the developer tooling shares: running a command-line tool
// (kubectl, helm) with a deadline, a cross-process lock, a liveness check that sees through
// zombies, and small file reads for build logs.
import { spawn } from "node:child_process";
import { readFileSync, statSync } from "node:fs";
import { mkdir, rm, stat, writeFile } from "node:fs/promises";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

export interface ToolResult {
  stdout: string;
  stderr: string;
  /** The tool's exit code; -1 if it was killed (deadline) or could not be started. */
  exitCode: number;
}

export interface RunToolOptions {
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Written to the tool's stdin. */
  input?: string;
  /** Kill the tool (SIGKILL) after this long; the result then has exitCode -1. */
  timeoutMs: number;
}

/** Runs `bin args`, collecting its output. Never throws for a non-zero exit: check exitCode. */
export function runTool(bin: string, args: readonly string[], opts: RunToolOptions): Promise<ToolResult> {
  const name = path.basename(bin);
  return new Promise<ToolResult>((resolve) => {
    const child = spawn(bin, args, { env: opts.env ?? process.env, cwd: opts.cwd, stdio: ["pipe", "pipe", "pipe"] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let killed = false;
    const timer = setTimeout(() => {
      killed = true;
      child.kill("SIGKILL");
    }, opts.timeoutMs);
    child.stdout.on("data", (b: Buffer) => out.push(b));
    child.stderr.on("data", (b: Buffer) => err.push(b));
    child.on("error", (e) => {
      clearTimeout(timer);
      resolve({ stdout: "", stderr: `could not run ${bin}: ${e.message}`, exitCode: -1 });
    });
    child.on("close", (code) => {
      clearTimeout(timer);
      const stderr = Buffer.concat(err).toString("utf8");
      resolve({
        stdout: Buffer.concat(out).toString("utf8"),
        stderr: killed ? `${stderr}\n${name} killed after ${opts.timeoutMs} ms` : stderr,
        exitCode: killed ? -1 : (code ?? -1),
      });
    });
    child.stdin.on("error", () => undefined); // the tool may exit before reading stdin
    child.stdin.end(opts.input ?? "");
  });
}

/** A tool's stdout, or an Error with its stderr unless it exited 0. */
export function okOrThrow(bin: string, args: readonly string[], res: ToolResult): string {
  if (res.exitCode !== 0) throw new Error(`${path.basename(bin)} ${args.join(" ")} exited ${res.exitCode}: ${res.stderr.trim()}`);
  return res.stdout;
}

export function readText(file: string): string | undefined {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return undefined;
  }
}

/** The last `lines` lines of a file (a build or server log). */
export function tail(file: string, lines: number): string {
  return (readText(file) ?? "").split("\n").slice(-lines - 1).join("\n");
}

/** `go build -v` prints one line per package it compiles (after "go: downloading" lines). */
export function countPackages(buildLog: string): number {
  try {
    if (statSync(buildLog).size === 0) return 0;
    return (readText(buildLog) ?? "").split("\n").filter((l) => l !== "" && !l.startsWith("go: ")).length;
  } catch {
    return 0;
  }
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
  // A zombie (exited, not yet reaped by its parent) still answers kill(0).
  const st = readText(`/proc/${pid}/stat`);
  if (st !== undefined) {
    const state = st.slice(st.lastIndexOf(")") + 2, st.lastIndexOf(")") + 3);
    if (state === "Z" || state === "X") return false;
  }
  return true;
}

/**
 * A cross-process lock: mkdir is atomic. A lock whose owner died is taken over; one held
 * for more than `staleMs` by a live process is an error.
 */
export async function withLock<T>(lockDir: string, fn: () => Promise<T>, staleMs = 60 * 60_000): Promise<T> {
  const ownerFile = path.join(lockDir, "owner");
  const start = Date.now();
  for (;;) {
    try {
      await mkdir(lockDir);
      await writeFile(ownerFile, `${process.pid}\n`);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      const owner = Number.parseInt(readText(ownerFile)?.trim() ?? "", 10);
      const age = Date.now() - (await stat(lockDir).catch(() => ({ mtimeMs: Date.now() }))).mtimeMs;
      if ((Number.isInteger(owner) && !isAlive(owner)) || (!Number.isInteger(owner) && age > 10_000)) {
        await rm(lockDir, { recursive: true, force: true });
        continue;
      }
      if (Date.now() - start > staleMs) {
        throw new Error(`timed out waiting for lock ${lockDir} (held by pid ${owner})`, { cause: err });
      }
      await sleep(500);
    }
  }
  try {
    return await fn();
  } finally {
    await rm(lockDir, { recursive: true, force: true });
  }
}
