// The client commands run as a user runs them: child processes of the real CLI, and a
// kubectl-agentcompute shim for the real kubectl to find on PATH.
import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** src/cli.ts: `agent-operator`. */
export const CLI = fileURLToPath(new URL("../../../src/cli.ts", import.meta.url));
const PLUGIN = fileURLToPath(new URL("../../../src/kubectl-plugin.ts", import.meta.url));
const TSX = fileURLToPath(new URL("../../../node_modules/tsx/dist/loader.mjs", import.meta.url));

export interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  /** Added to this process's environment. */
  env?: NodeJS.ProcessEnv;
  /** $KUBECONFIG left out (the command is given --kubeconfig), unless `env` sets it. */
  noKubeconfigEnv?: boolean;
  onStart?: (child: ChildProcess) => void;
  /** Each chunk of stdout as it arrives. */
  onStdout?: (text: string, child: ChildProcess) => void;
  /** Each chunk of stderr as it arrives. */
  onStderr?: (text: string, child: ChildProcess) => void;
}

/** Runs `cmd args` to its end. */
export function runProcess(cmd: string, args: string[], opts: RunOptions = {}): Promise<Result> {
  return new Promise((resolve, reject) => {
    const env = { ...process.env };
    if (opts.noKubeconfigEnv) delete env.KUBECONFIG;
    const child = spawn(cmd, args, { env: { ...env, ...opts.env }, stdio: ["ignore", "pipe", "pipe"] });
    const out: string[] = [];
    const err: string[] = [];
    child.stdout.setEncoding("utf8").on("data", (s: string) => {
      out.push(s);
      opts.onStdout?.(s, child);
    });
    child.stderr.setEncoding("utf8").on("data", (s: string) => {
      err.push(s);
      opts.onStderr?.(s, child);
    });
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout: out.join(""), stderr: err.join("") }));
    opts.onStart?.(child);
  });
}

/** `agent-operator <args>` */
export const runCLI = (args: string[], opts: RunOptions = {}): Promise<Result> => runProcess(process.execPath, ["--import", "tsx", CLI, ...args], opts);

/** What `npm install -g` or a krew install leaves on PATH: an executable kubectl-agentcompute, in `dir`. */
export function installPluginShim(dir: string): void {
  const shim = join(dir, "kubectl-agentcompute");
  writeFileSync(shim, `#!/bin/sh\nexec "${process.execPath}" --import "${TSX}" "${PLUGIN}" "$@"\n`);
  chmodSync(shim, 0o755);
}
