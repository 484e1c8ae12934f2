// What `agent-operator plan` found: one entry per resource, and the summary. This is also the
// shape of `-o json` (documented in docs/plan.md); add fields, never rename them.

export type Action = "create" | "update" | "replace" | "delete" | "none" | "unknown";

/** One field that changes. Values are JSON values, or "(sensitive)". */
export interface Change {
  /** e.g. "spec.image", "content". */
  path: string;
  /** Absent when the field is added. */
  old?: unknown;
  /** Absent when the field is removed. */
  new?: unknown;
}

export interface ResourcePlan {
  kind: string;
  namespace: string;
  name: string;
  action: Action;
  /** Why (a replace's cause, what an update does, why it cannot be planned). */
  reason?: string;
  /** The service object it concerns, when one exists. */
  serviceId?: string;
  changes: Change[];
  /** Conditions of the action: "after Agent x is created", "paused", ... */
  notes: string[];
  /** Where the resource's manifest is (absent for a delete). */
  source?: string;
  /**
   * `none` only: nothing changes in the service now, but applying changes the resource's spec
   * (a new TTL, keepAlive false, a deletion policy...; or a paused one's): a change all the same.
   */
  specChanged?: true;
}

export interface PlanResult {
  formatVersion: 1;
  resources: ResourcePlan[];
  summary: { create: number; update: number; replace: number; delete: number; unchanged: number; unknown: number };
  /** true when applying would change something, in the service or in a resource's spec (or something could not be planned). */
  changes: boolean;
}

export const SENSITIVE = "(sensitive)";

export function summarize(resources: ResourcePlan[]): PlanResult {
  const summary = { create: 0, update: 0, replace: 0, delete: 0, unchanged: 0, unknown: 0 };
  for (const r of resources) {
    if (r.action === "none") summary.unchanged++;
    else summary[r.action]++;
  }
  const changes = summary.create + summary.update + summary.replace + summary.delete + summary.unknown > 0 || resources.some((r) => r.specChanged === true);
  return { formatVersion: 1, resources, summary, changes };
}

/** Exit code as `terraform plan -detailed-exitcode`: 0 no changes, 2 changes (a spec-only change too). */
export function exitCodeOf(plan: PlanResult): 0 | 2 {
  return plan.changes ? 2 : 0;
}
