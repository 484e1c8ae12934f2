// Writes a resource's status through the status subresource, and only when it differs from
// what the cache holds: with nothing changing, the operator makes no writes at all.
import type { ManagedStatusBase, ObjectMeta } from "../api/index.js";
import { isNotFound, type KubeClient } from "../runtime/kube-client.js";
import { deepEqual, setCondition, type ConditionInput } from "../runtime/status.js";

export interface StatusTarget<S extends ManagedStatusBase> {
  metadata: ObjectMeta;
  status?: S;
}

/**
 * Merges `observed` over the current status, sets `conditions` (each stamped with the
 * generation they were computed for), and patches the status subresource if anything changed.
 * Returns the status as written (or as it already was).
 */
export async function writeStatus<S extends ManagedStatusBase>(
  kube: KubeClient,
  statusPath: string,
  target: StatusTarget<S>,
  observed: Partial<S>,
  conditions: Array<Omit<ConditionInput, "observedGeneration">>,
  now: Date,
): Promise<S> {
  const generation = target.metadata.generation ?? 0;
  const current = target.status ?? ({} as S);
  let nextConditions = current.conditions ?? [];
  for (const c of conditions) {
    nextConditions = setCondition(nextConditions, { ...c, observedGeneration: generation }, now);
  }
  const next = { ...current, observedGeneration: generation, conditions: nextConditions } as S;
  for (const [k, v] of Object.entries(observed)) {
    if (v !== undefined) (next as Record<string, unknown>)[k] = v;
  }
  if (deepEqual(next, current)) return current;
  try {
    // A merge patch without resourceVersion: the operator is the only writer of status, and
    // a conflict retry here would only re-send the same content.
    await kube.patch(statusPath, { status: next }, "merge");
  } catch (err) {
    if (!isNotFound(err)) throw err; // deleted meanwhile: nothing to report on
  }
  return next;
}
