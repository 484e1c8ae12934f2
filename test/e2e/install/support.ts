// Helpers for the install suites: apply manifests/ as a user would, act as the operator's
// ServiceAccount (a real token from the TokenRequest API, so RBAC decides every request),
// and run the operator in-process under that identity.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { KubeConfig } from "@kubernetes/client-node";
import { afterAll } from "vitest";
import { setupOperator, type Operator } from "../../../src/controllers/index.js";
import { KubeClient } from "../../../src/runtime/kube-client.js";
import { createLogger } from "../../../src/runtime/logging.js";
import { Manager } from "../../../src/runtime/manager.js";
import { waitCrdsEstablished } from "../../../dev/crds.js";
import { kustomize as kustomizeObjects, parseObjects as parseYamlObjects } from "../../../dev/kubectl.js";
import { REPO_ROOT } from "../../../dev/paths.js";
import { writeServiceAccountKubeconfig } from "../../../dev/service-account.js";
import { kubectl, kubectlOk, testKubeconfig, uniqueName, waitFor } from "../support/kube.js";

export { REPO_ROOT };
export const MANIFESTS_DIR = join(REPO_ROOT, "manifests");
export const OPERATOR_NAMESPACE = "agent-operator-system";
export const SERVICE_ACCOUNT = "agent-operator";
export const SERVICE_ACCOUNT_USER = `system:serviceaccount:${OPERATOR_NAMESPACE}:${SERVICE_ACCOUNT}`;

export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [key: string]: unknown;
}

export interface PolicyRule {
  apiGroups?: string[];
  resources?: string[];
  resourceNames?: string[];
  nonResourceURLs?: string[];
  verbs: string[];
}

/** `kubectl kustomize <dir>` parsed into objects (what `kubectl apply -k <dir>` would send). */
export async function kustomize(dir: string): Promise<KubeObject[]> {
  return kustomizeObjects<KubeObject>(dir, { kubeconfig: testKubeconfig() });
}

export function parseObjects(yamlText: string): KubeObject[] {
  return parseYamlObjects<KubeObject>(yamlText);
}

export function findObject(objects: KubeObject[], kind: string, name: string, namespace?: string): KubeObject {
  const found = objects.find(
    (o) => o.kind === kind && o.metadata.name === name && (namespace === undefined || o.metadata.namespace === namespace),
  );
  if (!found) throw new Error(`no ${kind} ${namespace ? `${namespace}/` : ""}${name} in the manifests`);
  return found;
}

/**
 * `kubectl apply -k <dir>`, for real (not a dry run). Returns kubectl's stderr, which carries
 * the API server's warnings (e.g. a pod template that would violate the namespace's Pod
 * Security level).
 */
export async function applyKustomization(dir: string = MANIFESTS_DIR): Promise<{ stdout: string; stderr: string }> {
  const res = await kubectl(["apply", "-k", dir], { timeoutMs: 120_000 });
  if (res.exitCode !== 0) throw new Error(`kubectl apply -k ${dir} exited ${res.exitCode}: ${res.stderr.trim()}`);
  await waitCrdsEstablished({ kubeconfig: testKubeconfig() });
  return { stdout: res.stdout, stderr: res.stderr };
}

/** Folders of kubeconfigs a test file wrote (they hold tokens): removed after its tests. */
const ownDirs: string[] = [];
afterAll(() => {
  for (const dir of ownDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

export interface ServiceAccountCredentials {
  /** A KubeConfig whose only credential is the ServiceAccount's token. */
  kubeConfig: KubeConfig;
  /** The same, written to a file (for kubectl and child processes). */
  path: string;
  token: string;
}

/**
 * Credentials of a ServiceAccount: a token from `kubectl create token` (TokenRequest API) and
 * the API server address and CA of the admin kubeconfig. No client certificate, so requests
 * are authorized as the ServiceAccount and nothing else.
 */
export async function serviceAccountCredentials(
  /** dir: where to write the kubeconfig (default: a temporary folder, removed at exit); duration: of the token. */
  opts: { namespace?: string; name?: string; dir?: string; duration?: string } = {},
): Promise<ServiceAccountCredentials> {
  const namespace = opts.namespace ?? OPERATOR_NAMESPACE;
  const name = opts.name ?? SERVICE_ACCOUNT;
  let dir = opts.dir;
  if (dir === undefined) {
    dir = mkdtempSync(join(tmpdir(), "agent-operator-sa-"));
    ownDirs.push(dir);
  }
  const path = join(dir, `${name}.kubeconfig`);
  // 0644: the image suite, run as root, runs the operator as the image's own user.
  const { token } = await writeServiceAccountKubeconfig({
    adminKubeconfig: testKubeconfig(),
    namespace,
    name,
    duration: opts.duration ?? "10m",
    file: path,
    mode: 0o644,
  });
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromFile(path);
  return { kubeConfig, path, token };
}

/** `kubectl auth can-i` as the given kubeconfig's user: true for "yes". */
export async function canI(kubeconfig: string, args: string[]): Promise<boolean> {
  const res = await kubectl(["auth", "can-i", ...args], { kubeconfig });
  const answer = res.stdout.trim();
  if (answer !== "yes" && answer !== "no") throw new Error(`kubectl auth can-i ${args.join(" ")}: ${res.stderr.trim()}`);
  return answer === "yes";
}

export interface OperatorUnderTest {
  manager: Manager;
  operator: Operator;
  logs: string[];
  leaseName: string;
  stop(): Promise<void>;
}

/**
 * Teardown of an install suite: while the operator still leads, the resources of `namespace`
 * are deleted (so their finalizers let go), then the operator, the emulator and the admin
 * client stop. Every part may be missing if the suite's set-up failed early.
 */
export async function tearDownInstalled(parts: {
  op: OperatorUnderTest | undefined;
  namespace: string;
  emulator: { close(): Promise<void> } | undefined;
  admin: { close(): Promise<void> };
}): Promise<void> {
  if (parts.op?.manager.isLeader()) {
    await kubectl(["delete", "agentcompute", "--all", "--wait=true", "--timeout=30s"], { namespace: parts.namespace });
  }
  await parts.op?.stop();
  await parts.emulator?.close();
  await parts.admin.close();
}

/**
 * The operator in-process, as `agent-operator run --leader-elect` runs it, but with the given
 * KubeConfig (the ServiceAccount's), over `namespaces` only (so that it never touches the
 * resources of other suites sharing the API server). Resolves once it leads.
 */
export async function startOperatorAs(opts: {
  kubeConfig: KubeConfig;
  namespaces: string[];
  logs?: string[];
  leaseName?: string;
  /** Namespace of the Lease (the operator's own); default OPERATOR_NAMESPACE. */
  leaseNamespace?: string;
  syncPeriodMs?: number;
}): Promise<OperatorUnderTest> {
  const logs = opts.logs ?? [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString("utf8").split("\n")) if (line) logs.push(line);
      done();
    },
  });
  const logger = createLogger({ level: process.env.E2E_LOG_LEVEL ?? "debug", destination: sink });
  // A Lease of its own per run: a Lease left held by an earlier run (killed before it could
  // release it) would otherwise delay this one by a lease duration.
  const leaseName = opts.leaseName ?? uniqueName("agent-operator-e2e");
  const leaseNamespace = opts.leaseNamespace ?? OPERATOR_NAMESPACE;
  const manager = new Manager({
    client: new KubeClient({ kubeConfig: opts.kubeConfig }),
    logger,
    namespaces: opts.namespaces,
    metricsBindAddress: "127.0.0.1:0",
    healthProbeBindAddress: "127.0.0.1:0",
    handleSignals: false,
    gracefulShutdownTimeoutMs: 5_000,
    // The timings are client-go's defaults, which LeaderElector also defaults to. They are
    // spelled out because Manager passes `undefined` for each one it is not given, and those
    // undefineds override the elector's defaults (NaN deadlines: see the install report).
    // `agent-operator run` itself is exercised as is by image.test.ts.
    leaderElection: { namespace: leaseNamespace, name: leaseName, leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 },
  });
  const operator = setupOperator(manager, { syncPeriodMs: opts.syncPeriodMs ?? 600_000, concurrency: 4 });
  await manager.start();
  await waitFor(() => manager.isLeader(), { timeoutMs: 30_000, description: `leadership of Lease ${leaseNamespace}/${leaseName}` });
  return {
    manager,
    operator,
    logs,
    leaseName,
    async stop() {
      await manager.stop();
      await operator.pool.close();
    },
  };
}

/** Log lines that show the API server refused the operator something. */
export function refusedLines(logs: readonly string[]): string[] {
  return logs.filter((l) => /forbidden|\b403\b|could not write event/i.test(l));
}

export interface Lease {
  spec?: { holderIdentity?: string | null; leaseDurationSeconds?: number };
}

export async function getLease(name: string): Promise<Lease> {
  return JSON.parse(await kubectlOk(["get", "lease", name, "-o", "json"], { namespace: OPERATOR_NAMESPACE })) as Lease;
}
