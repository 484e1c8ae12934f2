// What a kind reads of another kind's resources it refers to: a Sandbox of its Skills, an
// AgentDeployment of its Agent, a SandboxRun of its Sandbox. In sharded mode each replica
// needs every such resource (the referrer and the referred may be on different replicas) but
// reconciles only its share, so these lookups get a cache of their own that keeps only what
// they read: the metadata, the status, and of the spec the connectionRef, a Skill's name and
// a Sandbox's env and envFrom (a run's output is masked with its VM's Secrets, and a run does
// not start in a VM holding values of them rotated since: the keys env sets it does not hold).
// The rest of the spec (an Agent's instructions and tools) and kubectl's last-applied-configuration annotation (a
// copy of the spec) are most of an object's size. A lookup that reads another spec field must
// add it here: the view of a field it drops is undefined, with no error.
import type { KubeObject } from "../runtime/kube-client.js";

const LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration";

interface Referable extends KubeObject {
  metadata: KubeObject["metadata"] & { annotations?: Record<string, string> };
  spec?: { connectionRef?: unknown; name?: unknown; env?: unknown; envFrom?: unknown };
  status?: unknown;
}

function referenceView(obj: KubeObject): KubeObject {
  const o = obj as Referable;
  const { annotations, ...metadata } = o.metadata;
  const kept = annotations === undefined ? undefined : Object.fromEntries(Object.entries(annotations).filter(([k]) => k !== LAST_APPLIED));
  const spec =
    o.spec === undefined
      ? undefined
      : {
          ...(o.spec.connectionRef !== undefined && { connectionRef: o.spec.connectionRef }),
          ...(o.spec.name !== undefined && { name: o.spec.name }),
          ...(o.spec.env !== undefined && { env: o.spec.env }),
          ...(o.spec.envFrom !== undefined && { envFrom: o.spec.envFrom }),
        };
  return {
    apiVersion: o.apiVersion,
    kind: o.kind,
    metadata: { ...metadata, ...(kept !== undefined && Object.keys(kept).length > 0 && { annotations: kept }) },
    ...(spec !== undefined && { spec }),
    ...(o.status !== undefined && { status: o.status }),
  } as KubeObject;
}

/** The manager's informer view (src/runtime/manager.ts InformerForOptions.view) for lookups. */
export const REFERENCE_VIEW = { name: "reference", transform: referenceView } as const;
