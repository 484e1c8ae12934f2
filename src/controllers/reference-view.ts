// What a kind reads of another kind's resources it refers to: a Sandbox of its Skills, an
// AgentDeployment of its Agent, a SandboxRun of its Sandbox. In sharded mode each replica
// needs every such resource (the referrer and the referred may be on different replicas) but
// reconciles only its share, so these lookups get a cache of their own that keeps only what
// they read: the metadata, the spec's connectionRef and name, and the status. The spec (an
// Agent's instructions and tools) and kubectl's last-applied-configuration annotation (a copy
// of the spec) are most of an object's size.
import type { KubeObject } from "../runtime/kube-client.js";

const LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration";

interface Referable extends KubeObject {
  metadata: KubeObject["metadata"] & { annotations?: Record<string, string> };
  spec?: { connectionRef?: unknown; name?: unknown };
  status?: unknown;
}

function referenceView(obj: KubeObject): KubeObject {
  const o = obj as Referable;
  const { annotations, ...metadata } = o.metadata;
  const kept = annotations === undefined ? undefined : Object.fromEntries(Object.entries(annotations).filter(([k]) => k !== LAST_APPLIED));
  const spec = o.spec === undefined ? undefined : { ...(o.spec.connectionRef !== undefined && { connectionRef: o.spec.connectionRef }), ...(o.spec.name !== undefined && { name: o.spec.name }) };
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
