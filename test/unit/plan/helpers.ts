// What the planner's unit tests share: a cluster read from memory (lists of objects by plural,
// the planner's ClusterReader), resources as the API server would hold them, and lookups.
import { parseSources } from "../../../src/plan/manifests.js";
import { LAST_APPLIED, type ClusterReader } from "../../../src/plan/planner.js";
import type { PlanResult, ResourcePlan } from "../../../src/plan/model.js";

export const NS = "team";
export const ORG = "org-unit";

/** A status that says Ready for `generation`. */
export const ready = (generation = 1) => ({
  observedGeneration: generation,
  conditions: [{ type: "Ready", status: "True", reason: "Available", observedGeneration: generation, lastTransitionTime: "2030-01-01T00:00:00Z" }],
});

/** A ClusterReader over `cluster()`: the objects of a plural, in the namespace the path names. */
export function memoryCluster(cluster: () => Map<string, unknown[]>): ClusterReader {
  return {
    async list<T>(path: string): Promise<T[]> {
      const plural = path.split("/").pop() ?? "";
      const ns = /\/namespaces\/([^/]+)\//.exec(path)?.[1] ?? "";
      return (cluster().get(plural) ?? []).filter((o) => (o as { metadata: { namespace: string } }).metadata.namespace === ns) as T[];
    },
  };
}

/** A resource of the namespace as applied with kubectl (its last-applied annotation) and reported Ready. */
export const live = (name: string, spec: Record<string, unknown>, status: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
  metadata: { name, namespace: NS, uid: `uid-${name}`, generation: 1, annotations: { [LAST_APPLIED]: "{}" }, ...extra },
  spec: { connectionRef: { name: "default" }, deletionPolicy: "Delete", ...spec },
  status: { ...ready(), ...status },
});

export function find(p: PlanResult, kind: string, name: string): ResourcePlan {
  const r = p.resources.find((x) => x.kind === kind && x.name === name);
  if (r === undefined) throw new Error(`${kind}/${name} not planned`);
  return r;
}

export const manifests = (yaml: string) => parseSources([{ name: "m.yaml", text: yaml }], NS);
