// spec.managementPolicies, with Crossplane's meaning: which of observe, create, update and
// delete the operator may do for one resource. The reconciler asks this module and nothing
// else, so the rules below are the whole behaviour (docs/design.md "Management policies").
//
// - `*` (the default) is all of them, and deletionPolicy decides deletion as before.
// - Without Create, a missing service object is reported (Stalled, ExternalNotFound), never made.
// - Without Update, drift is reported (the Drifted condition names the fields) and not put back.
//   A Sandbox's TTL renewal is upkeep, not an update: it goes on whenever Create or Update is
//   allowed (as it does while paused). An [Observe]-only Sandbox is never renewed.
// - Without Delete, deleting the resource leaves the service object, as deletionPolicy:
//   Orphan does. The CRDs refuse the one contradiction (deletionPolicy: Orphan with Delete
//   listed explicitly), so either field alone is enough to read what happens.
// - LateInitialize is accepted for Crossplane compatibility; no field of ours is late-initialized.
import type { ManagedSpecBase } from "./external.js";

export const MANAGEMENT_ACTIONS = ["Observe", "Create", "Update", "Delete", "LateInitialize"] as const;
export type ManagementAction = (typeof MANAGEMENT_ACTIONS)[number];

export interface Management {
  create: boolean;
  update: boolean;
  delete: boolean;
  /** [Observe] alone (or with LateInitialize only): nothing is ever written to the service object. */
  observeOnly: boolean;
  /** Upkeep that keeps what exists alive (a VM's renewal): allowed with Create or Update. */
  upkeep: boolean;
  /** The policies as the spec states them, for messages. */
  stated: string;
}

export function managementOf(spec: Pick<ManagedSpecBase, "managementPolicies" | "deletionPolicy">): Management {
  const policies = spec.managementPolicies ?? ["*"];
  const all = policies.includes("*");
  const has = (a: ManagementAction) => all || policies.includes(a);
  const create = has("Create");
  const update = has("Update");
  return {
    create,
    update,
    // `*` leaves deletion to deletionPolicy (the default's meaning before management policies).
    delete: has("Delete") && (spec.deletionPolicy ?? "Delete") === "Delete",
    observeOnly: !create && !update && !has("Delete"),
    upkeep: create || update,
    stated: `[${policies.join(", ")}]`,
  };
}
