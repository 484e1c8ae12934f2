// Adding and removing the operator's finalizer with optimistic concurrency: the patch carries
// the resourceVersion it was computed from, so another writer's finalizer is never lost (a
// 409 sends the object back to the queue to try again on the fresh copy).
import type { ObjectMeta } from "../api/index.js";
import { isConflict, isInvalid, isNotFound, type KubeClient } from "../runtime/kube-client.js";

/**
 * Writes `finalizers` (and `annotations`, merged, when given: a claim riding on the same write);
 * returns the object as the API server answered, or undefined if it is gone.
 */
export async function patchFinalizers<T extends { metadata: ObjectMeta }>(
  kube: KubeClient,
  path: string,
  obj: T,
  finalizers: string[] | undefined,
  /** Annotations to set; null removes one. */
  annotations?: Record<string, string | null>,
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

/**
 * Removes `finalizer` with a JSON patch that first tests it is still at the index `obj` shows:
 * no resourceVersion, so a status written since `obj` was read (a run's last status, in the
 * same pass) does not make it a 409, and another writer's finalizers are still never lost (a
 * list changed since fails the test). Nothing to do if `obj` does not carry it; a gone object is
 * fine.
 */
export async function removeFinalizer(kube: KubeClient, path: string, obj: { metadata: ObjectMeta }, finalizer: string): Promise<void> {
  const at = (obj.metadata.finalizers ?? []).indexOf(finalizer);
  if (at < 0) return;
  const entry = `/metadata/finalizers/${at}`;
  try {
    await kube.patch(path, [{ op: "test", path: entry, value: finalizer }, { op: "remove", path: entry }], "json", { discardResult: true });
  } catch (err) {
    if (isNotFound(err)) return;
    if (isInvalid(err)) throw new Error("the resource's finalizers changed while its finalizer was being removed; retrying", { cause: err });
    throw err;
  }
}
