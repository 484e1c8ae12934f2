// The kubelet's word that a replica crashed. A SIGKILLed (or OOM-killed) replica's member Lease
// runs out a lease duration after its last renewal, but the kubelet reports the exit of its
// container on its Pod within a second or two. The replicas read that report, and a member
// Lease whose process the report proves ended counts as expired: the leader fences it at once
// (membership.ts) and its heirs take its share on (succession.ts). The Lease stays the proof
// for all the kubelet cannot report: a lost node, a partition, a frozen process.
//
// Only proof that *the process that wrote the Lease* ended counts. Its Lease says which it was
// (PROCESS_ANNOTATION: Pod, uid, container, a moment it was running at, taken as it starts on
// its node's clock, and the Lease's acquireTime of the write). The Pod's status proves that
// process ended when a run of the container that ended (its current state, or its last one
// once it restarted) ended CLOCK_MARGIN_MS or more after that moment: runs of one container do
// not overlap, and the kubelet starts a run only once it has seen the one before end, so that
// run was the process's or a later one. The kubelet's times are whole seconds rounded down, so
// the comparison holds for the true time too.
//
// That takes the process's clock to be the container runtime's (one kernel), within the margin:
//  - a step back of the node's clock between two runs (a node rebooted with its clock ahead)
//    shows as a last run that ended after the current one started: no proof then;
//  - a run's start is never compared with the process's moment: the runtime takes it after the
//    process is already running (late under load, or once the runtime restarts);
//  - a runtime that runs each Pod in a VM of its own keeps the guest's clock close to the
//    host's, but not promised within the margin: leave CONTAINER_NAME unset there.
// And the report is only ever a second opinion: a holder counts as ended only once its Lease
// has also gone unrenewed for SILENCE_MS, longer than a renewal period, so a live process
// judged ended by a clock gone wrong would have to have stalled as well.
//
// A deleted Pod proves nothing (a forced deletion does not wait for the containers), nor does a
// Pod of another uid (a StatefulSet's new Pod of the same name), nor a record of another holder
// or of another acquisition of the Lease (an older version that takes a Lease keeps the
// annotations it finds, but writes its own acquireTime). The Lease the proof was read from is
// the one the fence is written on: if a new process of the identity took the Lease since, the
// fence is refused.
import type { Logger } from "pino";
import { errorMessage } from "../lib/errors.js";
import { Informer } from "../runtime/informer.js";
import { isForbidden, type KubeClient, type KubeObject } from "../runtime/kube-client.js";
import type { Lease } from "../runtime/leader-election.js";
import type { Metrics } from "../runtime/metrics.js";
import { labelValue } from "./labels.js";

/** On a member Lease: the process that wrote it (ProcessRecord, JSON). */
export const PROCESS_ANNOTATION = "shard.agentcompute.dev/process";

/**
 * A node's clocks (the process's, the container runtime's) may disagree, or step back between
 * two runs of a container, by this much without a live process being judged ended. A process
 * that crashes sooner after it started is found by its Lease running out.
 */
export const CLOCK_MARGIN_MS = 2_000;

/**
 * How long a Lease must also have gone unrenewed, as its holder's watchers see it, for the report
 * to count: longer than a renewal period (2 s) and the look after it, so a live holder renewed.
 */
export const SILENCE_MS = 3_000;

/** The process holding a Lease (its member Lease, and the leader Lease while it leads), as it writes it there. */
export interface ProcessRecord {
  namespace: string;
  pod: string;
  uid: string;
  container: string;
  /** A moment the process was running at (as it started), RFC 3339 on its own clock, which is its node's. */
  since: string;
  /** The Lease's `spec.acquireTime` in the write that carried this record (written by acquiringProcess). */
  acquired?: string;
}

/** `proc` as written on a Lease acquired at `acquireTime`. */
export const acquiringProcess = (proc: ProcessRecord, acquireTime: string): string => JSON.stringify({ ...proc, acquired: acquireTime });

/**
 * This process, where the downward API says which Pod and container it runs in (POD_NAME,
 * POD_NAMESPACE, POD_UID, CONTAINER_NAME: manifests/ and the chart set them in sharded mode),
 * with `now` as its moment; undefined otherwise, and its crashes are known by its Leases
 * running out only.
 */
export function thisProcess(env: NodeJS.ProcessEnv = process.env, now: number = Date.now()): ProcessRecord | undefined {
  const [namespace, pod, uid, container] = [env.POD_NAMESPACE, env.POD_NAME, env.POD_UID, env.CONTAINER_NAME].map((v) => v?.trim() ?? "");
  if (!namespace || !pod || !uid || !container) return undefined;
  return { namespace, pod, uid, container, since: new Date(now).toISOString() };
}

export function processOf(lease: Lease): ProcessRecord | undefined {
  const raw = lease.metadata.annotations?.[PROCESS_ANNOTATION];
  if (raw === undefined) return undefined;
  try {
    const p = JSON.parse(raw) as Partial<ProcessRecord>;
    const fields = [p.namespace, p.pod, p.uid, p.container, p.since, p.acquired];
    if (fields.some((f) => typeof f !== "string" || f === "") || !Number.isFinite(Date.parse(p.since!))) return undefined;
    return p as ProcessRecord;
  } catch {
    return undefined;
  }
}

/** The part of a container's status the proof reads. */
interface ContainerState {
  running?: { startedAt?: string };
  terminated?: { finishedAt?: string };
}

/** What is kept of a Pod: who it is and its containers' states. */
export interface PodReport extends KubeObject {
  metadata: KubeObject["metadata"] & { uid?: string };
  status?: { containerStatuses?: Array<{ name: string; state?: ContainerState; lastState?: ContainerState }> };
}

const slim = (p: PodReport): PodReport => ({
  apiVersion: p.apiVersion,
  kind: p.kind,
  metadata: { name: p.metadata.name, namespace: p.metadata.namespace, uid: p.metadata.uid, resourceVersion: p.metadata.resourceVersion },
  status: { containerStatuses: (p.status?.containerStatuses ?? []).map(({ name, state, lastState }) => ({ name, state, lastState })) },
});

/** Whether `pod`'s status proves that the process `proc` ended (see the top of this file). */
export function reportsEnded(proc: ProcessRecord, pod: PodReport | undefined): boolean {
  if (pod === undefined || pod.metadata.uid !== proc.uid || pod.metadata.name !== proc.pod) return false;
  const status = pod.status?.containerStatuses?.find((c) => c.name === proc.container);
  if (status === undefined) return false;
  const after = Date.parse(proc.since) + CLOCK_MARGIN_MS;
  // The last run ended after the current one started: the clock stepped back between them.
  if (Date.parse(status.lastState?.terminated?.finishedAt ?? "") > Date.parse(status.state?.running?.startedAt ?? "")) return false;
  return [status.state?.terminated, status.lastState?.terminated].some((t) => Date.parse(t?.finishedAt ?? "") >= after);
}

/**
 * Whether the kubelet's report (`podOf`: the Pods as cached) proves that the process holding
 * `lease` ended: the one that wrote its record there, of the holder's identity, in the
 * acquisition the Lease records (an older version, which keeps the annotations of a Lease it
 * takes, must not be judged by its predecessor's record).
 */
export function holderEnded(lease: Lease, podOf: (namespace: string, name: string) => PodReport | undefined): boolean {
  const proc = processOf(lease);
  if (proc === undefined || labelValue(proc.pod) !== (lease.spec?.holderIdentity ?? "") || proc.acquired !== (lease.spec?.acquireTime ?? "")) return false;
  return reportsEnded(proc, podOf(proc.namespace, proc.pod));
}

export interface CrashReportsOptions {
  client: KubeClient;
  /** The replicas' namespace (their Pods and member Leases). */
  namespace: string;
  logger: Logger;
  metrics?: Metrics;
}

/**
 * A cache of the Pods of the replicas' namespace, slimmed to their containers' states. Off (and
 * saying why, once) where the operator may not list Pods there: crashes are then known by the
 * Leases running out only.
 */
export class CrashReports {
  private readonly informer: Informer<PodReport>;
  private on = false;
  private stopped = false;

  constructor(private readonly o: CrashReportsOptions) {
    this.informer = new Informer<PodReport>(o.client, {
      path: `/api/v1/namespaces/${encodeURIComponent(o.namespace)}/pods`,
      logger: o.logger,
      metrics: o.metrics,
      view: { name: "crash-reports", transform: slim },
    });
  }

  /** Calls `changed` whenever a Pod's report changes. */
  onChange(changed: () => void): void {
    this.informer.on("add", changed);
    this.informer.on("update", changed);
  }

  /**
   * Asks once whether it may list the Pods: refused (RBAC), it stays off and says so. Any other
   * error is the informer's to retry. Not awaited: until the Pods are in, the Leases decide.
   */
  async start(): Promise<void> {
    try {
      await this.o.client.list(`/api/v1/namespaces/${encodeURIComponent(this.o.namespace)}/pods`, { limit: 1 });
    } catch (err) {
      if (isForbidden(err)) {
        this.o.logger.warn(
          { err: `may not list Pods in namespace ${this.o.namespace} (RBAC: list and watch pods there)` },
          "crash reports off: a crashed replica's share moves when its Leases run out, not when the kubelet reports the crash",
        );
        return;
      }
      this.o.logger.warn({ err: errorMessage(err) }, "could not list the replicas' Pods; retrying in the background");
    }
    if (this.stopped) return;
    this.on = true;
    void this.informer.start().catch(() => undefined);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.on) await this.informer.stop();
  }

  /** Whether the Pods are in (their first list). */
  hasSynced(): boolean {
    return this.informer.hasSynced();
  }

  /** Whether the kubelet's report proves that the process holding `lease` ended (holderEnded; Pods of this namespace only). */
  ended(lease: Lease): boolean {
    return this.on && holderEnded(lease, (namespace, name) => (namespace === this.o.namespace ? this.informer.get(namespace, name) : undefined));
  }
}
