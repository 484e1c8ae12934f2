// The contract between the generic managed-resource reconciler and one kind (the shape of
// crossplane-runtime's ExternalConnecter / ExternalClient): a kind says how to reach its
// service object and how to observe, create, update and delete it. Finalizers, conditions,
// events, deletion policy, adoption and status writes are the reconciler's business.
import type { Connection, ManagedStatusBase, Resource } from "../api/index.js";
import type { ReconcileContext } from "../runtime/controller.js";

export interface ManagedSpecBase {
  connectionRef?: { name: string };
  deletionPolicy?: "Delete" | "Orphan";
  writeConnectionSecretTo?: { name: string };
}

export type ManagedResource<Spec extends ManagedSpecBase = ManagedSpecBase, Status extends ManagedStatusBase = ManagedStatusBase> =
  Resource<Spec, Status>;

/** Values written to the resource's connection Secret (tokens, endpoints). Never to status. */
export type ConnectionDetails = Record<string, string>;

export interface Observation<Status> {
  /** false: there is no service object for this resource (create one). */
  exists: boolean;
  /** true: the service object matches the spec (nothing to update). */
  upToDate: boolean;
  /** What the service says, merged into status. */
  status?: Partial<Status>;
  connectionDetails?: ConnectionDetails;
  /** Fields that differ from the spec; named in the drift Event. */
  differences?: string[];
  /** The object exists but cannot be used and the operator will not fix it (e.g. an expired VM with keepAlive false). */
  notReady?: { reason: string; message: string };
  /** Come back sooner than the sync period (e.g. the next TTL renewal), on the priority lane if `priority`. */
  requeueAfterMs?: number;
  priority?: boolean;
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

export interface ExternalClient<R extends ManagedResource> {
  observe(cr: R): Promise<Observation<StatusOf<R>>>;
  /**
   * Status to record BEFORE create, for kinds whose service objects carry no crash-safety
   * marker (skills): it claims the name, so that after a crash between create and the status
   * write the object is recognised as this resource's own.
   */
  claim?(cr: R): Partial<StatusOf<R>> | undefined;
  create(cr: R): Promise<ActionResult<StatusOf<R>>>;
  update(cr: R, observed: Observation<StatusOf<R>>): Promise<ActionResult<StatusOf<R>>>;
  /** Deletes (or releases) the service object; a 404 is success. */
  delete(cr: R): Promise<void>;
}

export type StatusOf<R> = R extends Resource<unknown, infer S> ? S : never;

/** What a kind needs to reach the service for one resource. */
export interface Connector<R extends ManagedResource> {
  /** Resolves the Connection and every dependency; throws NotReadyError while one is missing. */
  connect(cr: R, ctx: ReconcileContext): Promise<ExternalClient<R>>;
}

export type { Connection };
