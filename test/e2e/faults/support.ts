// Helpers shared by the fault suites: a mixed batch of resources, "everything Ready" and
// "every service object exactly once" checks, a private kube-apiserver, the operator
// in-process against any kubeconfig, and scans for secrets.
import { appendFileSync } from "node:fs";
import { rm } from "node:fs/promises";
import { Writable } from "node:stream";
import { KubeConfig } from "@kubernetes/client-node";
import { expect } from "vitest";
import { installCrds } from "../../../dev/crds.js";
import { kubeDown, kubeUp, makeTempStateDir, type KubeUpOptions } from "../../../dev/kube-apiserver.js";
import { createAll as createObjects, type Creatable } from "../../../dev/objects.js";
import { MARKER_KEY } from "../../../src/api/index.js";
import { setupOperator, type Operator } from "../../../src/controllers/index.js";
import type { Emulator } from "../../../src/emulator/index.js";
import { KubeClient } from "../../../src/runtime/kube-client.js";
import { createLogger } from "../../../src/runtime/logging.js";
import { Manager, type ManagerOptions } from "../../../src/runtime/manager.js";
import { parseAllDocuments } from "yaml";
import { kubectlOk, testKubeconfig, waitFor } from "../support/kube.js";
import type { Resource } from "../support/operator.js";
import { sumMetric } from "../../../dev/prometheus.js";

export const PLURALS = ["skills", "agents", "agentdeployments", "sandboxes"] as const;
export type Plural = (typeof PLURALS)[number];

export interface ListedResource extends Resource {
  kind: string;
}

// ---------------------------------------------------------------------------------------
// A mixed batch

export interface MixOptions {
  /** Name prefix, so that several batches can live in one namespace. */
  prefix: string;
  skills: number;
  agents: number;
  /** Each deploys agent i % agents (needs agents > 0). */
  deployments: number;
  /** Sandbox i loads skill i % skills when skills > 0 and withSkills. */
  sandboxes: number;
  withSkills?: boolean;
  tier?: string;
  connection?: string;
}

/** YAML for a mix of all four managed kinds, deployments referencing agents, sandboxes skills. */
export function mixedManifests(o: MixOptions): string {
  const docs: string[] = [];
  const conn = o.connection !== undefined ? `\n  connectionRef: {name: ${o.connection}}` : "";
  for (let i = 0; i < o.skills; i++) {
    docs.push(`apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: ${o.prefix}-skill-${i}}
spec:${conn}
  description: skill ${i}
  content: "instructions ${i}"
  resources: {"notes.txt": "file ${i}"}`);
  }
  for (let i = 0; i < o.agents; i++) {
    docs.push(`apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: ${o.prefix}-agent-${i}}
spec:${conn}
  image: "example/agent-${i}:1"
  capabilities: [c${i % 5}]`);
  }
  for (let i = 0; i < o.deployments; i++) {
    docs.push(`apiVersion: agentcompute.dev/v1alpha1
kind: AgentDeployment
metadata: {name: ${o.prefix}-deploy-${i}}
spec:${conn}
  agentRef: {name: ${o.prefix}-agent-${i % Math.max(1, o.agents)}}
  tier: ${o.tier ?? "standard"}
  env: {INDEX: "${i}"}`);
  }
  for (let i = 0; i < o.sandboxes; i++) {
    const skills = o.withSkills && o.skills > 0 ? `\n  skills: [${o.prefix}-skill-${i % o.skills}]` : "";
    docs.push(`apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: ${o.prefix}-sandbox-${i}}
spec:${conn}
  tier: ${o.tier ?? "standard"}
  ttlSeconds: 3600${skills}`);
  }
  return docs.join("\n---\n");
}

/** A KubeClient for a kubeconfig file (default: the shared test API server). */
export function kubeClient(kubeconfig: string = testKubeconfig()): KubeClient {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfig);
  return new KubeClient({ kubeConfig: kc, requestTimeoutMs: 60_000 });
}

/**
 * Creates every object of a multi-document manifest of our kinds, `parallel` at a time (a
 * `kubectl apply` of 200 objects takes a minute on a busy machine: one GET and one write each,
 * in sequence).
 */
export async function createAll(manifest: string, namespace: string, opts: { kubeconfig?: string; parallel?: number } = {}): Promise<void> {
  const client = kubeClient(opts.kubeconfig);
  const docs = parseAllDocuments(manifest).map((d) => d.toJS() as Creatable);
  try {
    await createObjects(client, docs, { namespace, concurrency: opts.parallel ?? 8 });
  } finally {
    await client.close();
  }
}

// ---------------------------------------------------------------------------------------
// Reading resources

/** Every managed resource of the namespace (kubectl get agentcompute), optionally of one prefix. */
export async function listManaged(namespace: string, opts: { kubeconfig?: string; prefix?: string } = {}): Promise<ListedResource[]> {
  const out = await kubectlOk(["get", PLURALS.join(","), "-o", "json"], {
    namespace,
    kubeconfig: opts.kubeconfig,
    timeoutMs: 120_000,
  });
  const items = (JSON.parse(out) as { items: ListedResource[] }).items;
  return opts.prefix === undefined ? items : items.filter((r) => r.metadata.name.startsWith(`${opts.prefix}-`));
}

/**
 * Deletes every resource of ours in the namespace (Connections included) and waits until they
 * are gone, polling one list a second: `kubectl delete --wait` waits for one object after the
 * other, which takes minutes for hundreds on a busy machine. Returns false on timeout.
 */
export async function deleteAllManaged(namespace: string, opts: { kubeconfig?: string; timeoutMs?: number } = {}): Promise<boolean> {
  await kubectlOk(["delete", "agentcompute", "--all", "--wait=false"], { namespace, kubeconfig: opts.kubeconfig, timeoutMs: 120_000 });
  try {
    await waitFor(
      async () => {
        const out = await kubectlOk(["get", "agentcompute", "-o", "name"], { namespace, kubeconfig: opts.kubeconfig });
        return out.trim() === "";
      },
      { timeoutMs: opts.timeoutMs ?? 90_000, intervalMs: 1_000, description: `every resource of ${namespace} to be deleted` },
    );
    return true;
  } catch {
    return false;
  }
}

export function readyCondition(r: Resource) {
  return r.status?.conditions?.find((c) => c.type === "Ready");
}

/** Ready=True for the current generation. */
export function isReady(r: Resource): boolean {
  return r.status?.observedGeneration === r.metadata.generation && readyCondition(r)?.status === "True";
}

/** Waits until `expected` resources (of the prefix) exist and every one is Ready; returns them. */
export async function waitAllReady(
  namespace: string,
  expected: number,
  opts: { kubeconfig?: string; prefix?: string; timeoutMs?: number } = {},
): Promise<ListedResource[]> {
  let last: ListedResource[] = [];
  try {
    return await waitFor(
      async () => {
        last = await listManaged(namespace, opts);
        return last.length === expected && last.every(isReady) ? last : undefined;
      },
      { timeoutMs: opts.timeoutMs ?? 180_000, intervalMs: 1_000, description: `${expected} resources Ready` },
    );
  } catch (err) {
    const notReady = last.filter((r) => !isReady(r)).slice(0, 10);
    const why = notReady.map((r) => `${r.kind}/${r.metadata.name}: ${readyCondition(r)?.reason ?? "-"} ${readyCondition(r)?.message ?? ""}`);
    throw new Error(`${err instanceof Error ? err.message : String(err)}; ${last.length} found, not Ready: ${why.join("; ")}`, { cause: err });
  }
}

// ---------------------------------------------------------------------------------------
// "Exactly once" in the service

export interface ExactlyOnceReport {
  agents: number;
  deployments: number;
  skills: number;
  liveVMs: number;
  /** VMs carrying a Sandbox's marker that were given back (duplicates left by crashes). */
  releasedOrphans: number;
}

/**
 * Every resource's service object exists exactly once and is the one its status names:
 * agents and skills by name, deployments and live VMs by the crash-safety marker. Objects the
 * test did not ask for (other prefixes) are ignored; nothing of ours may be left over either.
 */
export function expectExactlyOnce(emulator: Emulator, resources: ListedResource[]): ExactlyOnceReport {
  const state = emulator.state;
  const byKind = (kind: string) => resources.filter((r) => r.kind === kind);
  const uids = new Set(resources.map((r) => r.metadata.uid));

  // Agents: one per name, the status's id, carrying the CR's marker.
  for (const cr of byKind("Agent")) {
    const name = (cr.spec.name as string | undefined) ?? cr.metadata.name;
    const named = [...state.agents.values()].filter((a) => a.name === name);
    expect(named, `agents named ${name}`).toHaveLength(1);
    expect(named[0]!.id).toBe(cr.status?.agentId);
    expect(named[0]!.metadata[MARKER_KEY]).toBe(cr.metadata.uid);
  }
  // Skills: keyed by name in the service, so the check is "there, and the content we asked for".
  for (const cr of byKind("Skill")) {
    const name = (cr.spec.name as string | undefined) ?? cr.metadata.name;
    const skill = state.skills.get(name);
    expect(skill, `skill ${name}`).toBeDefined();
    if (typeof cr.spec.content === "string") expect(skill?.content, `skill ${name}`).toBe(cr.spec.content);
  }
  // Deployments: exactly one live deployment per CR marker, the one in status.
  const deploymentsByMarker = new Map<string, string[]>();
  for (const d of state.deployments.values()) {
    const uid = (d.metadata as Record<string, string> | undefined)?.[MARKER_KEY];
    if (uid === undefined || !uids.has(uid)) continue;
    deploymentsByMarker.set(uid, [...(deploymentsByMarker.get(uid) ?? []), d.id]);
  }
  for (const cr of byKind("AgentDeployment")) {
    const ids = deploymentsByMarker.get(cr.metadata.uid) ?? [];
    expect(ids, `deployments of ${cr.metadata.name}`).toEqual([cr.status?.deploymentId]);
  }
  // VMs: exactly one live VM per Sandbox marker, the one in status; other VMs with its marker
  // were given back (they are in the usage log as released, not live).
  const vmsByMarker = new Map<string, string[]>();
  for (const vm of state.vms.values()) {
    const uid = vm.metadata[MARKER_KEY];
    if (uid === undefined || !uids.has(uid)) continue;
    vmsByMarker.set(uid, [...(vmsByMarker.get(uid) ?? []), vm.id]);
  }
  for (const cr of byKind("Sandbox")) {
    const ids = vmsByMarker.get(cr.metadata.uid) ?? [];
    expect(ids, `live VMs of ${cr.metadata.name}`).toEqual([cr.status?.vmId]);
  }
  const liveIds = new Set([...vmsByMarker.values()].flat());
  const released = state.usage.filter((u) => u.reason === "released" && !liveIds.has(u.vm_id)).length;
  return {
    agents: byKind("Agent").length,
    deployments: [...deploymentsByMarker.values()].flat().length,
    skills: byKind("Skill").length,
    liveVMs: liveIds.size,
    releasedOrphans: released,
  };
}

// ---------------------------------------------------------------------------------------
// A private kube-apiserver

export interface PrivateApiserver {
  stateDir: string;
  kubeconfig: string;
  server: string;
  /** Stops it keeping its data, and starts it again on that data (same port, certificates, etcd). */
  restart(during?: () => Promise<void>): Promise<void>;
  down(opts?: { keepData?: boolean }): Promise<void>;
  up(): Promise<void>;
  /** Stops it and removes its state directory. */
  destroy(): Promise<void>;
}

/**
 * A kube-apiserver of the test's own (dev/kube-apiserver.ts, a separate state dir), with the CRDs
 * installed. Restarting it, or running it with aggressive flags, cannot disturb the shared
 * server other suites (and other people's `npm run kube:up`) use.
 */
export async function startPrivateApiserver(prefix: string, opts: Omit<KubeUpOptions, "stateDir" | "log"> = {}): Promise<PrivateApiserver> {
  const stateDir = await makeTempStateDir(`${prefix}-`);
  const log = (line: string): void => {
    if (process.env.E2E_KUBE_LOG) console.log(`[${prefix} kube] ${line}`);
  };
  let up = await kubeUp({ ...opts, stateDir, log });
  await installCrds({ kubeconfig: up.kubeconfig });
  const api: PrivateApiserver = {
    stateDir,
    kubeconfig: up.kubeconfig,
    server: up.server,
    async down(o = {}) {
      await kubeDown({ stateDir, keepData: o.keepData ?? true, log });
    },
    async up() {
      // Same options, same data dir: same port and certificates, so clients reconnect as is.
      up = await kubeUp({ ...opts, stateDir, log });
      if (up.server !== api.server) throw new Error(`the restarted API server moved from ${api.server} to ${up.server}`);
    },
    async restart(during) {
      await api.down({ keepData: true });
      await during?.();
      await api.up();
    },
    async destroy() {
      await kubeDown({ stateDir, log });
      await rm(stateDir, { recursive: true, force: true });
    },
  };
  return api;
}

// ---------------------------------------------------------------------------------------
// The operator in-process, against any kubeconfig, with manager options the CLI does not expose

export interface InProcessOperator {
  manager: Manager;
  operator: Operator;
  logs: string[];
  metric(name: string, labels?: Record<string, string>): Promise<number>;
  stop(): Promise<void>;
}

export async function startInProcessOperator(opts: {
  kubeconfig: string;
  namespace: string;
  logs?: string[];
  syncPeriodMs?: number;
  concurrency?: number;
  informerDefaults?: ManagerOptions["informerDefaults"];
}): Promise<InProcessOperator> {
  const logs = opts.logs ?? [];
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromFile(opts.kubeconfig);
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      const text = chunk.toString("utf8");
      for (const line of text.split("\n")) if (line) logs.push(line);
      // E2E_LOG_FILE=path keeps the operator's log for debugging a failed run.
      if (process.env.E2E_LOG_FILE) appendFileSync(process.env.E2E_LOG_FILE, text);
      done();
    },
  });
  const manager = new Manager({
    client: new KubeClient({ kubeConfig }),
    logger: createLogger({ level: process.env.E2E_LOG_LEVEL ?? "debug", destination: sink }),
    namespaces: [opts.namespace],
    metricsBindAddress: "0",
    healthProbeBindAddress: "0",
    handleSignals: false,
    gracefulShutdownTimeoutMs: 5_000,
    informerDefaults: opts.informerDefaults,
  });
  const operator = setupOperator(manager, { syncPeriodMs: opts.syncPeriodMs ?? 600_000, concurrency: opts.concurrency ?? 8 });
  await manager.start();
  return {
    manager,
    operator,
    logs,
    async metric(name, labels = {}) {
      return sumMetric(await manager.metrics.registry.metrics(), name, labels);
    },
    async stop() {
      await manager.stop();
      await operator.pool.close();
    },
  };
}

// ---------------------------------------------------------------------------------------
// Secrets

/** The secrets (at least 6 characters) that occur in `text`, each reported once. */
export function leakedSecrets(text: string, secrets: Iterable<string>): string[] {
  const found = new Set<string>();
  for (const s of secrets) if (s.length >= 6 && text.includes(s)) found.add(s);
  return [...found];
}

/** Also the base64 forms (a Secret's data, a leaked object dump). */
export function withBase64(secrets: Iterable<string>): string[] {
  const out: string[] = [];
  for (const s of secrets) out.push(s, Buffer.from(s, "utf8").toString("base64"));
  return out;
}
