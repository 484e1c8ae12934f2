// Adding and removing the operator's finalizer with optimistic concurrency: the patch carries
// the resourceVersion it was computed from, so another writer's finalizer is never lost (a
// 409 sends the object back to the queue to try again on the fresh copy).
import type { ObjectMeta } from "../api/index.js";
import { isConflict, isNotFound, type KubeClient } from "../runtime/kube-client.js";

/**
 * Writes `finalizers` (and `annotations`, merged, when given: a claim riding on the same write);
 * returns the object as the API server answered, or undefined if it is gone.
 */
export async function patchFinalizers<T extends { metadata: ObjectMeta }>(
  kube: KubeClient,
  path: string,
  obj: T,
  finalizers: string[] | undefined,
  annotations?: Record<string, string>,
): Promise<T | undefined> {
  try {
    const metadata = { resourceVersion: obj.metadata.resourceVersion, ...(finalizers !== undefined && { finalizers }), ...(annotations !== undefined && { annotations }) };
    const updated = await kube.patch<T>(path, { metadata }, "merge");
    delete (updated.metadata as { managedFields?: unknown }).managedFields;
    return updated;
  } catch (err) {
    if (isNotFound(err)) return undefined;
    if (isConflict(err)) throw new Error("the resource changed while its finalizer was being updated; retrying", { cause: err });
    throw err;
  }
}
