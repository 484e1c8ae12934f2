// The contract between the generic managed-resource reconciler and one kind (the shape of
// crossplane-runtime's ExternalConnecter / ExternalClient): a kind says how to reach its
// service object and how to observe, create, update and delete it (and give back the
// leftovers observe found). Finalizers, conditions, events, deletion policy, adoption and
// status writes are the reconciler's business.
import type { Connection, ManagedStatusBase, Resource } from "../api/index.js";
import type { ReconcileContext } from "../runtime/controller.js";

export interface ManagedSpecBase {
  connectionRef?: { name: string };
  deletionPolicy?: "Delete" | "Orphan";
  managementPolicies?: string[];
  writeConnectionSecretTo?: { name: string };
}

export type ManagedResource<Spec extends ManagedSpecBase = ManagedSpecBase, Status extends ManagedStatusBase = ManagedStatusBase> =
  Resource<Spec, Status>;

/** Values written to the resource's connection Secret (tokens, endpoints). Never to status. */
export type ConnectionDetails = Record<string, string>;

export interface Observation<Status, Plan = unknown> {
  /** false: there is no service object for this resource (create one). */
  exists: boolean;
  /** true: the service object matches the spec (nothing to update). */
  upToDate: boolean;
  /** What the service says, merged into status. */
  status?: Partial<Status>;
  connectionDetails?: ConnectionDetails;
  /** Fields that differ from the spec; named in the drift Event. */
  differences?: string[];
  /**
   * The object exists but cannot be used and the operator will not fix it (e.g. an expired VM
   * with keepAlive false). `stalled`: a change by the user would (a failed deployment, which a
   * new Agent revision or redeploy-at redeploys): Stalled=True, which GitOps tools report as
   * failed, rather than a state nobody needs to act on.
   */
  notReady?: { reason: string; message: string; stalled?: boolean };
  /**
   * The object exists and is kept (a VM renewed), but whether it is what the spec asks for
   * cannot be told yet (a dependency of the spec not Ready, the service's list unreadable):
   * reported as Reconciling with this reason, never as Ready "matches the spec".
   */
  unconfirmed?: { reason: string; message: string };
  /**
   * For kinds with upkeep: the object is one the client keeps alive (a VM renewed before it
   * runs out; not one with keepAlive false, nor one that ran out). Default: `exists`. What a
   * resource that cannot be reconciled says it still does.
   */
  keptAlive?: boolean;
  /** Come back sooner than the sync period (e.g. the next TTL renewal), on the priority lane if `priority`. */
  requeueAfterMs?: number;
  priority?: boolean;
  /**
   * What update is to do (renew, replace, which fields to send...), worked out while observing
   * and handed to update as it is: a client keeps nothing between calls. Set whenever the
   * object exists and is not up to date.
   */
  plan?: Plan;
  /**
   * Ids of other service objects carrying this resource's crash-safety marker next to the one
   * it uses (a create whose answer was lost, landing after its retry). Observe only reads
   * (crossplane-runtime's rule), so it reports them; the reconciler has the client give them
   * back (`cleanup`) on every reconcile that finds them, up to date or not.
   */
  leftovers?: string[];
}

export interface ActionResult<Status> {
  status?: Partial<Status>;
  connectionDetails?: ConnectionDetails;
  /**
   * Event to record (reason + message), in place of the reconciler's generic one; null for a
   * routine action that deserves none (a TTL renewal: the status counts them, and an Event
   * each would spend the Event budget that warnings need).
   */
  event?: { reason: string; message: string; warning?: boolean } | null;
  requeueAfterMs?: number;
  priority?: boolean;
}

export interface ExternalClient<R extends ManagedResource, Plan = unknown> {
  /** Reads the service object and compares it with the spec; changes nothing in the service. */
  observe(cr: R): Promise<Observation<StatusOf<R>, Plan>>;
  /**
   * `first`: the resource got its finalizer in this very pass, so no create of it can have been
   * made before (creates come after the finalizer): an object found in the way (a 409) is not
   * one a lost create of its own made, whatever it holds. `claimedNow`: the claim annotations
   * this very pass wrote (new, or changed): what they claim, no create before it can have made.
   */
  create(cr: R, opts?: { first?: boolean; claimedNow?: readonly string[] }): Promise<ActionResult<StatusOf<R>>>;
  update(cr: R, observed: Planned<StatusOf<R>, Plan>): Promise<ActionResult<StatusOf<R>>>;
  /**
   * For kinds whose service objects die unless written to (a VM's TTL): what to do after
   * observing when nothing else may be done (paused, `managementPolicies` without Update, the
   * Connection not Ready). Only upkeep that keeps what exists alive (a renewal); never a create,
   * update, replace or delete. Needed when the kind sets `needsUpkeep`.
   */
  upkeep?(cr: R, observed: Observation<StatusOf<R>, Plan>): Promise<ActionResult<StatusOf<R>> | undefined>;
  /**
   * After the service refused a write of this very spec (Stalled with `reason`): whether it
   * would be refused again as things stand, so that it is not sent (a refusal of the spec
   * itself stands until the spec or its inputs change). A refusal over something outside the
   * spec that can go away (NameTaken: another object holds the name) is over once the latest
   * observation no longer sees it. Absent: it stands.
   */
  refusalStands?(cr: R, reason: string): boolean;
  /** Gives back the leftovers observe reported (a 404 is success); needed if observe reports any. */
  cleanup?(cr: R, leftovers: string[]): Promise<void>;
  /**
   * Deletes (or releases) the service object, and whatever else carries this resource's marker
   * (or its claim); a 404 is success. `uncertainCreate`: a create of this resource's had an
   * unknown outcome; delete is called again LANDING_MS after it, to delete what it made if it
   * landed since the call before, which only a read made now shows (not a snapshot kept for
   * observe).
   */
  delete(cr: R, opts?: { uncertainCreate?: boolean }): Promise<void>;
}

/** An observation that found something to change, with the plan for it. */
export type Planned<Status, Plan> = Observation<Status, Plan> & { plan: Plan };

export type StatusOf<R> = R extends Resource<unknown, infer S> ? S : never;

/** What a kind needs to reach the service for one resource. */
export interface Connector<R extends ManagedResource, Plan = unknown> {
  /** Resolves the resource's Connection; throws NotReadyError while it is missing or not Ready. */
  connect(cr: R, ctx: ReconcileContext): Promise<ExternalClient<R, Plan>>;
  /**
   * A client for the client's `upkeep` only (a VM's renewal), also when `connect` refuses
   * because the Connection is not Ready; throws NotReadyError saying why there is none.
   */
  connectForUpkeep?(cr: R): ExternalClient<R, Plan>;
  /**
   * What the resource's Connection holds, as an opaque fingerprint (see
   * ManagedReconcilerOptions.inputs): a refusal may be the Connection's doing (its orgId).
   */
  inputs?(cr: R): string | undefined;
}

export type { Connection };
