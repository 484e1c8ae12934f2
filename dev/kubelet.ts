// What the kubelet would write, for the tests and the benchmark: no kubelet runs beside the test
// API server, so a replica "in a Pod" is a child process with the downward API's variables of
// a Pod object, and its container's state is written on that Pod's status by the harness
// (src/sharding/crash-report.ts reads it).
import type { KubeClient } from "../src/runtime/kube-client.js";
import type { PodReport } from "../src/sharding/crash-report.js";

/** The operator's container name, as in manifests/ and the chart. */
export const OPERATOR_CONTAINER = "operator";

/** A restricted Pod Security level's container (the operator's namespace enforces it, as manifests/ label it). */
const RESTRICTED = { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] }, runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } };

/** An RFC 3339 time in whole seconds, rounded down, as the kubelet writes container times. */
export const kubeletTime = (ms: number = Date.now()): string => new Date(ms).toISOString().replace(/\.\d+Z$/, "Z");

/** Writes the operator container's state on `pod`'s status, as the kubelet does. */
export async function reportContainer(kube: KubeClient, namespace: string, pod: string, status: Record<string, unknown>): Promise<void> {
  await kube.patch(
    `/api/v1/namespaces/${namespace}/pods/${pod}/status`,
    { status: { containerStatuses: [{ name: OPERATOR_CONTAINER, image: "agent-operator", imageID: "", ready: true, restartCount: 0, ...status }] } },
    "merge",
  );
}

/**
 * A Pod for a replica about to start, its container reported running since now; returns the
 * downward API's variables for the process (with POD_NAME, which names the replica).
 */
export async function podForReplica(kube: KubeClient, namespace: string, name: string): Promise<Record<string, string>> {
  const pod = await kube.create<PodReport>(`/api/v1/namespaces/${namespace}/pods`, {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name },
    spec: { containers: [{ name: OPERATOR_CONTAINER, image: "agent-operator", securityContext: RESTRICTED }] },
  });
  await reportContainer(kube, namespace, name, { state: { running: { startedAt: kubeletTime() } } });
  return { POD_NAME: name, POD_NAMESPACE: namespace, POD_UID: pod.metadata.uid ?? "", CONTAINER_NAME: OPERATOR_CONTAINER };
}

/** The report of a SIGKILLed container: terminated now, exit code 137. */
export const killedContainer = (): Record<string, unknown> => ({ ready: false, state: { terminated: { exitCode: 137, reason: "Error", finishedAt: kubeletTime() } } });
