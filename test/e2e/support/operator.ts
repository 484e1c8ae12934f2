// The operator under test: the CRDs installed on the real API server, an in-process emulator
// of the service, and the operator itself (in-process, restricted to the test's namespace),
// with every log line kept so tests can assert on them (and scan them for secrets).
import { appendFileSync } from "node:fs";
import { Writable } from "node:stream";
import { KubeConfig } from "@kubernetes/client-node";
import { startEmulator, type Emulator, type EmulatorOptions } from "../../../src/emulator/index.js";
import { setupOperator, type Operator } from "../../../src/controllers/index.js";
import type { ShardingOptions } from "../../../src/controllers/kind.js";
import { KubeClient, resourcePath } from "../../../src/runtime/kube-client.js";
import { createLogger } from "../../../src/runtime/logging.js";
import { Manager } from "../../../src/runtime/manager.js";
import { afterAll, beforeAll } from "vitest";
import { installCrds } from "../../../dev/crds.js";
import { kubectl, kubectlOk, testKubeconfig, useTestNamespace, waitFor } from "./kube.js";

export const API_KEY = "e2e-secret-api-key-3f9c1a7d";

let crdsInstalled: Promise<void> | undefined;

/** Applies crds/ once per test run and waits until the API server serves them. */
export function installCRDs(): Promise<void> {
  crdsInstalled ??= installCrds({ kubeconfig: testKubeconfig() });
  return crdsInstalled;
}

export interface OperatorProcess {
  manager: Manager;
  operator: Operator;
  stop(): Promise<void>;
}

/** Starts the operator in-process over `namespace`, logging into `logs`. */
export async function startOperator(opts: {
  namespace: string;
  logs: string[];
  syncPeriodMs?: number;
  concurrency?: number;
  /** --sandbox-status-interval; absent: status reports every renewal. */
  sandboxStatusIntervalMs?: number;
  /** Sharded mode as the controllers see it (the replica's side stood in for by the test). */
  sharding?: ShardingOptions;
}): Promise<OperatorProcess> {
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromFile(testKubeconfig());
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      const text = chunk.toString("utf8");
      for (const line of text.split("\n")) if (line) opts.logs.push(line);
      // E2E_LOG_FILE=path keeps the operator's log for debugging a failed run.
      if (process.env.E2E_LOG_FILE) appendFileSync(process.env.E2E_LOG_FILE, text);
      done();
    },
  });
  const logger = createLogger({ level: process.env.E2E_LOG_LEVEL ?? "debug", destination: sink });
  const manager = new Manager({
    client: new KubeClient({ kubeConfig }),
    logger,
    namespaces: [opts.namespace],
    metricsBindAddress: "127.0.0.1:0",
    healthProbeBindAddress: "127.0.0.1:0",
    handleSignals: false,
    gracefulShutdownTimeoutMs: 5_000,
  });
  const operator = setupOperator(manager, {
    syncPeriodMs: opts.syncPeriodMs ?? 600_000,
    concurrency: opts.concurrency ?? 4,
    ...(opts.sandboxStatusIntervalMs !== undefined && { sandboxStatusIntervalMs: opts.sandboxStatusIntervalMs }),
    ...(opts.sharding !== undefined && { sharding: opts.sharding }),
  });
  await manager.start();
  return {
    manager,
    operator,
    async stop() {
      await manager.stop();
      await operator.pool.close();
    },
  };
}

export interface Stack {
  namespace: string;
  emulator: Emulator;
  operator: OperatorProcess;
  logs: string[];
  kube: KubeClient;
  /** Restarts the operator (a new process over the same resources); `meanwhile` runs while none runs. */
  restartOperator(meanwhile?: () => Promise<void>): Promise<void>;
  stop(): Promise<void>;
}

export async function startStack(opts: {
  namespace: string;
  syncPeriodMs?: number;
  /** --sandbox-status-interval of the operator; absent: status reports every renewal. */
  sandboxStatusIntervalMs?: number;
  emulator?: EmulatorOptions;
  /** Create the Secret + Connection "default" pointing at the emulator (default true). */
  connection?: boolean;
  sharding?: ShardingOptions;
}): Promise<Stack> {
  await installCRDs();
  // strictBodies: a field of the operator's the service would drop unread is an error here.
  const emulator = await startEmulator({ apiKey: API_KEY, orgId: "org-e2e", strictBodies: true, ...opts.emulator });
  const logs: string[] = [];
  if (opts.connection ?? true) await applyConnection(opts.namespace, emulator);
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromFile(testKubeconfig());
  const { syncPeriodMs, sandboxStatusIntervalMs, sharding } = opts;
  const operatorOpts = { namespace: opts.namespace, logs, syncPeriodMs, sandboxStatusIntervalMs, sharding };
  const stack: Stack = {
    namespace: opts.namespace,
    emulator,
    logs,
    kube: new KubeClient({ kubeConfig }),
    operator: await startOperator(operatorOpts),
    async restartOperator(meanwhile) {
      await stack.operator.stop();
      await meanwhile?.();
      stack.operator = await startOperator(operatorOpts);
    },
    async stop() {
      await stack.operator.stop();
      await emulator.close();
    },
  };
  return stack;
}

export function connectionManifest(namespace: string, emulator: Emulator, extra: { name?: string; secretName?: string; apiKey?: string } = {}): string {
  const secretName = extra.secretName ?? "agentcompute-credentials";
  return `
apiVersion: v1
kind: Secret
metadata: {name: ${secretName}, namespace: ${namespace}}
stringData: {apiKey: ${JSON.stringify(extra.apiKey ?? API_KEY)}}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Connection
metadata: {name: ${extra.name ?? "default"}, namespace: ${namespace}}
spec:
  baseURL: ${emulator.baseURL}
  authURL: ${emulator.authURL}
  orgId: org-e2e
  workspaceId: ws-e2e
  environmentId: env-e2e
  credentials: {secretRef: {name: ${secretName}}}
`;
}

export async function applyConnection(namespace: string, emulator: Emulator): Promise<void> {
  await apply(connectionManifest(namespace, emulator));
}

export async function apply(manifest: string, namespace?: string): Promise<string> {
  return kubectlOk(["apply", "-f", "-"], { input: manifest, namespace });
}

export interface Resource {
  metadata: { name: string; namespace: string; uid: string; generation?: number; annotations?: Record<string, string>; finalizers?: string[]; deletionTimestamp?: string };
  spec: Record<string, unknown>;
  status?: {
    observedGeneration?: number;
    conditions?: Array<{ type: string; status: string; reason?: string; message?: string; observedGeneration?: number }>;
    [key: string]: unknown;
  };
}

/** Reads a resource of ours (plural: "skills", "agents", ...) straight from the API server. */
export async function getResource(kube: KubeClient, plural: string, namespace: string, name: string): Promise<Resource> {
  return kube.get<Resource>(resourcePath({ group: "agentcompute.dev", version: "v1alpha1", plural, namespace, name }));
}

export function condition(r: Resource, type: string) {
  return r.status?.conditions?.find((c) => c.type === type);
}

/** Waits until Ready has `status` for the current generation; returns the resource. */
export async function waitForReady(
  stack: Pick<Stack, "kube" | "namespace">,
  plural: string,
  name: string,
  opts: { status?: "True" | "False"; reason?: string; timeoutMs?: number } = {},
): Promise<Resource> {
  const want = opts.status ?? "True";
  return waitFor(
    async () => {
      const r = await getResource(stack.kube, plural, stack.namespace, name);
      const ready = condition(r, "Ready");
      const current = r.status?.observedGeneration === r.metadata.generation;
      const ok = current && ready?.status === want && (opts.reason === undefined || ready.reason === opts.reason);
      return ok ? r : undefined;
    },
    {
      timeoutMs: opts.timeoutMs ?? 30_000,
      description: `${plural}/${name} Ready=${want}${opts.reason ? ` (${opts.reason})` : ""}`,
    },
  );
}

/**
 * The reasons of the Events recorded for the object `name` in the stack's namespace, each as
 * many times as its count, once the operator's pending Event writes are done.
 */
export async function eventReasons(stack: Stack, name: string): Promise<string[]> {
  await stack.operator.manager.events.flush();
  const out = await kubectlOk(["get", "events", "--field-selector", `involvedObject.name=${name}`, "-o", "json"], { namespace: stack.namespace });
  const { items } = JSON.parse(out) as { items: Array<{ reason?: string; count?: number }> };
  return items.flatMap((e) => Array<string>(e.count ?? 1).fill(e.reason ?? ""));
}

/** Everything the operator said: logs, Events and status of every resource in the namespace. */
export async function everythingSaid(stack: Stack): Promise<string> {
  const events = await kubectlOk(["get", "events", "-o", "json"], { namespace: stack.namespace });
  const resources = await kubectlOk(["get", "agentcompute", "-o", "json"], { namespace: stack.namespace });
  return [stack.logs.join("\n"), events, resources].join("\n");
}

export interface StackFixture {
  /** The stack; only valid inside tests and hooks. */
  readonly stack: Stack;
  readonly namespace: string;
}

/**
 * Call at the top of a test file: a fresh namespace and a stack over it for the whole file.
 * Before stopping, everything is deleted while the operator still runs, so its finalizers let
 * go and the namespace can be removed.
 */
export function useStack(prefix: string, opts: Omit<Parameters<typeof startStack>[0], "namespace"> = {}): StackFixture {
  const ns = useTestNamespace(prefix);
  let stack: Stack | undefined;
  beforeAll(async () => {
    stack = await startStack({ ...opts, namespace: ns.name });
    if (opts.connection ?? true) await waitForReady(stack, "connections", "default");
  });
  afterAll(async () => {
    await kubectl(["delete", "agentcompute", "--all", "--wait=true", "--timeout=60s"], { namespace: ns.name });
    await stack?.stop();
  });
  return {
    get stack(): Stack {
      if (stack === undefined) throw new Error("useStack: the stack exists only once beforeAll has run");
      return stack;
    },
    get namespace(): string {
      return ns.name;
    },
  };
}
