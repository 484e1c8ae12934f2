// Writes a resource's status through the status subresource, and only when it differs from
// what the operator last saw: with nothing changing, the operator makes no writes at all.
//
// The informer cache lags behind our own writes. Computing the next status from a stale
// cached copy would silently undo the previous write (a renewal counter going back to 0), so
// the writer remembers what it wrote, per object, until the cache has caught up.
import type { ManagedStatusBase, ObjectMeta } from "../api/index.js";
import { isNotFound, type KubeClient } from "../runtime/kube-client.js";
import { deepEqual, setCondition, type ConditionInput } from "../runtime/status.js";

export interface StatusTarget<S extends ManagedStatusBase> {
  metadata: ObjectMeta;
  status?: S;
}

interface Written {
  /** The cached resourceVersion the write was computed from. */
  basedOn: string | undefined;
  status: ManagedStatusBase;
}

export class StatusWriter {
  private readonly written = new Map<string, Written>();

  constructor(
    private readonly kube: KubeClient,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /**
   * The object with the status the operator last wrote, if the cache still shows the version
   * that write was computed from; otherwise the object as cached (and the memory is dropped:
   * the cache has caught up, or someone else changed the object).
   */
  fresh<T extends StatusTarget<ManagedStatusBase>>(obj: T): T {
    const w = this.written.get(obj.metadata.uid);
    if (w === undefined) return obj;
    if (w.basedOn === obj.metadata.resourceVersion) return { ...obj, status: w.status };
    this.written.delete(obj.metadata.uid);
    return obj;
  }

  forget(uid: string): void {
    this.written.delete(uid);
  }

  /**
   * For the informer's update handler: a version other than the one the last write was
   * computed from has reached the cache, so the cache has caught up (as in fresh()). Without
   * this the memory of every write stays until the object's next reconcile, a sync period
   * later: after a cold start, one status object per resource.
   */
  seen(obj: { metadata: ObjectMeta }): void {
    const uid = obj.metadata.uid;
    if (uid === undefined) return;
    const w = this.written.get(uid);
    if (w !== undefined && w.basedOn !== obj.metadata.resourceVersion) this.written.delete(uid);
  }

  /** Entries held (for tests and metrics). */
  get size(): number {
    return this.written.size;
  }

  /**
   * Merges `observed` over the current status (pass the object through fresh() first), sets
   * `conditions` (each stamped with the generation they were computed for), and patches the
   * status subresource if anything changed.
   */
  async write<S extends ManagedStatusBase>(
    statusPath: string,
    target: StatusTarget<S>,
    observed: NoInfer<{ [K in keyof S]?: S[K] | null }>,
    conditions: Array<Omit<ConditionInput, "observedGeneration">>,
  ): Promise<void> {
    const generation = target.metadata.generation ?? 0;
    const current = target.status ?? ({} as S);
    let nextConditions = current.conditions ?? [];
    for (const c of conditions) {
      nextConditions = setCondition(nextConditions, { ...c, observedGeneration: generation }, this.now());
    }
    const next = { ...current, observedGeneration: generation, conditions: nextConditions } as S;
    // A field given as null is removed; a field given is replaced whole, nested objects too.
    for (const [k, v] of Object.entries(observed)) {
      if (v === null) delete (next as Record<string, unknown>)[k];
      else if (v !== undefined) (next as Record<string, unknown>)[k] = v;
    }
    if (deepEqual(next, current)) return;
    try {
      // A merge patch without resourceVersion: the operator is the only writer of status, and
      // the base it merged over is the freshest it knows (see fresh()). A merge patch merges
      // nested objects key by key and removes a key only when told to with null: what the base
      // has and `next` does not is sent as null, at every depth.
      await this.kube.patch(statusPath, { status: replacing(current, next) }, "merge", { discardResult: true });
      this.written.set(target.metadata.uid, { basedOn: target.metadata.resourceVersion, status: next });
    } catch (err) {
      if (!isNotFound(err)) throw err; // deleted meanwhile: nothing to report on
    }
  }
}

/** `next` as a JSON merge patch (RFC 7386) over `base`: every key `base` has and `next` does not, null, in nested objects too. */
function replacing(base: unknown, next: unknown): unknown {
  if (!isPlainObject(base) || !isPlainObject(next)) return next;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(next)) if (v !== undefined) out[k] = replacing(base[k], v);
  for (const [k, v] of Object.entries(base)) if (v !== undefined && (next[k] === undefined)) out[k] = null;
  return out;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
