// Helpers for e2e suites that run against the test API server started by
// test/e2e/global-setup.ts (or an existing cluster with USE_EXISTING_CLUSTER=true).
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { ApiException, CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { afterAll, beforeAll, inject } from "vitest";
import "./context.js";

/** Label put on every namespace these helpers create, to find leftovers. */
export const E2E_NAMESPACE_LABEL = "agentcompute.dev/e2e";

/**
 * The kubeconfig the tests use: what the global setup provided, else $KUBECONFIG.
 * A path, a ':'-separated list (existing clusters only), or "" for kubectl's default.
 */
export function testKubeconfig(): string {
  let provided: string | undefined;
  try {
    provided = inject("kubeconfig");
  } catch {
    provided = undefined; // not inside a vitest worker
  }
  return provided ?? process.env.KUBECONFIG ?? "";
}

/** true when the tests run against a cluster they did not start (USE_EXISTING_CLUSTER=true). */
export function usingExistingCluster(): boolean {
  try {
    return inject("useExistingCluster");
  } catch {
    return process.env.USE_EXISTING_CLUSTER === "true";
  }
}

/** A fresh KubeConfig for the test API server (each call reads the file again). */
export function loadKubeConfig(kubeconfig: string = testKubeconfig()): KubeConfig {
  const kc = new KubeConfig();
  if (kubeconfig !== "" && !kubeconfig.includes(":")) {
    kc.loadFromFile(kubeconfig);
  } else {
    // loadFromDefault reads $KUBECONFIG (merging a list) or ~/.kube/config.
    const saved = process.env.KUBECONFIG;
    try {
      if (kubeconfig !== "") process.env.KUBECONFIG = kubeconfig;
      kc.loadFromDefault();
    } finally {
      if (saved === undefined) delete process.env.KUBECONFIG;
      else process.env.KUBECONFIG = saved;
    }
  }
  return kc;
}

export interface KubectlOptions {
  /** Written to kubectl's stdin (e.g. a manifest for `apply -f -`). */
  input?: string;
  /** Adds `--namespace`. */
  namespace?: string;
  /** Default: testKubeconfig(). */
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

/** Runs kubectl against the test API server. Never throws for a non-zero exit: check exitCode. */
export async function kubectl(args: readonly string[], opts: KubectlOptions = {}): Promise<KubectlResult> {
  const kubeconfig = opts.kubeconfig ?? testKubeconfig();
  const fullArgs = [...(opts.namespace !== undefined ? ["--namespace", opts.namespace] : []), ...args];
  const env: NodeJS.ProcessEnv = { ...process.env, ...opts.env };
  if (kubeconfig !== "") env.KUBECONFIG = kubeconfig;
  const bin = process.env.KUBECTL ?? "kubectl";
  return new Promise<KubectlResult>((resolve) => {
    const child = spawn(bin, fullArgs, { env, stdio: ["pipe", "pipe", "pipe"] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let killed = false;
    const timer = setTimeout(() => {
      killed = true;
      child.kill("SIGKILL");
    }, opts.timeoutMs ?? 60_000);
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
        stderr: killed ? `${stderr}\nkubectl killed after ${opts.timeoutMs ?? 60_000} ms` : stderr,
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

export interface WaitOptions {
  /** Default 30 s. */
  timeoutMs?: number;
  /** Default 200 ms. */
  intervalMs?: number;
  /** What is awaited, for the timeout message. */
  description?: string;
}

/**
 * Polls `probe` until it returns a value other than undefined, null or false, and returns
 * that value. A probe that throws counts as "not yet"; its last error is in the timeout message.
 */
export async function waitFor<T>(
  probe: () => Promise<T | undefined | null | false> | T | undefined | null | false,
  opts: WaitOptions = {},
): Promise<T> {
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined && v !== null && v !== false) return v;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const why = lastError === undefined ? "" : `; last error: ${lastError instanceof Error ? lastError.message : String(lastError)}`;
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${opts.description ?? "condition"}${why}`);
    }
    await sleep(opts.intervalMs ?? 200);
  }
}

/** A DNS-1123 name: `${prefix}-` plus 6 random hex characters (prefix trimmed to fit 63). */
export function uniqueName(prefix: string): string {
  const clean = prefix.toLowerCase().replace(/[^a-z0-9-]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 55) || "e2e";
  return `${clean}-${randomBytes(3).toString("hex")}`;
}

/** The HTTP status of a client-node API error, or undefined for other errors. */
export function apiErrorCode(err: unknown): number | undefined {
  return err instanceof ApiException ? err.code : undefined;
}

/** Creates a uniquely named namespace (labelled E2E_NAMESPACE_LABEL=true); returns its name. */
export async function createTestNamespace(prefix = "e2e", kc: KubeConfig = loadKubeConfig()): Promise<string> {
  const core = kc.makeApiClient(CoreV1Api);
  const name = uniqueName(prefix);
  await core.createNamespace({ body: { metadata: { name, labels: { [E2E_NAMESPACE_LABEL]: "true" } } } });
  return name;
}

/**
 * Deletes a namespace (404 is fine). With wait, polls until it is gone: that needs the
 * namespace controller (on by default in the test API server).
 */
export async function deleteTestNamespace(
  name: string,
  opts: { wait?: boolean; timeoutMs?: number } = {},
  kc: KubeConfig = loadKubeConfig(),
): Promise<void> {
  const core = kc.makeApiClient(CoreV1Api);
  try {
    await core.deleteNamespace({ name, propagationPolicy: "Background" });
  } catch (err) {
    if (apiErrorCode(err) !== 404) throw err;
  }
  if (opts.wait) {
    await waitFor(
      async () => {
        try {
          await core.readNamespace({ name });
          return false;
        } catch (err) {
          if (apiErrorCode(err) === 404) return true;
          throw err;
        }
      },
      { timeoutMs: opts.timeoutMs ?? 60_000, description: `namespace ${name} to be deleted` },
    );
  }
}

export interface TestNamespace {
  /** The namespace's name; only valid inside tests/hooks (after beforeAll ran). */
  readonly name: string;
}

/**
 * Call at the top of a test file (or describe block): creates a unique namespace in
 * beforeAll and deletes it in afterAll (without waiting for the namespace controller).
 */
export function useTestNamespace(prefix = "e2e"): TestNamespace {
  let name: string | undefined;
  beforeAll(async () => {
    name = await createTestNamespace(prefix);
  });
  afterAll(async () => {
    if (name !== undefined) await deleteTestNamespace(name);
  });
  return {
    get name(): string {
      if (name === undefined) throw new Error("useTestNamespace: the namespace exists only once beforeAll has run");
      return name;
    },
  };
}
