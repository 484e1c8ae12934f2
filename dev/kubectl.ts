// The one kubectl runner of the developer tooling: tests, the benchmark and `npm start` run
// kubectl through it. `$KUBECTL` names another binary.
import { spawn } from "node:child_process";

export interface KubectlOptions {
  /** Written to kubectl's stdin (e.g. a manifest for `apply -f -`). */
  input?: string;
  /** Adds `--namespace`. */
  namespace?: string;
  /**
   * Sets `$KUBECONFIG`: a path, or a ':'-separated list. Undefined or "": kubectl's default
   * (this process's `$KUBECONFIG`, else ~/.kube/config).
   */
  kubeconfig?: string;
  /** Kill kubectl after this long (default 60 s); the result then has exitCode -1. */
  timeoutMs?: number;
  /** Extra environment variables. */
  env?: NodeJS.ProcessEnv;
}

export interface KubectlResult {
  stdout: string;
  stderr: string;
  /** kubectl's exit code; -1 if it was killed (timeout) or could not be started. */
  exitCode: number;
}

/** Runs kubectl. Never throws for a non-zero exit: check exitCode. */
export async function kubectl(args: readonly string[], opts: KubectlOptions = {}): Promise<KubectlResult> {
  const fullArgs = [...(opts.namespace !== undefined ? ["--namespace", opts.namespace] : []), ...args];
  const env: NodeJS.ProcessEnv = { ...process.env, ...opts.env };
  if (opts.kubeconfig !== undefined && opts.kubeconfig !== "") env.KUBECONFIG = opts.kubeconfig;
  const bin = process.env.KUBECTL ?? "kubectl";
  const timeoutMs = opts.timeoutMs ?? 60_000;
  return new Promise<KubectlResult>((resolve) => {
    const child = spawn(bin, fullArgs, { env, stdio: ["pipe", "pipe", "pipe"] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let killed = false;
    const timer = setTimeout(() => {
      killed = true;
      child.kill("SIGKILL");
    }, timeoutMs);
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
        stderr: killed ? `${stderr}\nkubectl killed after ${timeoutMs} ms` : stderr,
        exitCode: killed ? -1 : (code ?? -1),
      });
    });
    child.stdin.on("error", () => undefined); // kubectl may exit before reading stdin
    child.stdin.end(opts.input ?? "");
  });
}

/** Like kubectl() but throws (with stderr) unless the exit code is 0; returns stdout. */
export async function kubectlOk(args: readonly string[], opts: KubectlOptions = {}): Promise<string> {
  const res = await kubectl(args, opts);
  if (res.exitCode !== 0) {
    throw new Error(`kubectl ${args.join(" ")} exited ${res.exitCode}: ${res.stderr.trim()}`);
  }
  return res.stdout;
}

/** `kubectl apply -f -` of a manifest (YAML or JSON, one or more documents); returns stdout. */
export async function apply(manifest: string, opts: Omit<KubectlOptions, "input"> = {}): Promise<string> {
  return kubectlOk(["apply", "-f", "-"], { ...opts, input: manifest });
}
