// Finding a resource's service object by id or by the crash-safety marker (agentcompute.dev/uid
// in the object's metadata), the duplicates a crash or a lost answer left next to it, and
// removing one.
import { Annotations, MARKER_KEY } from "../api/names.js";
import { NotReadyError } from "../managed/errors.js";
import type { ManagedResource } from "../managed/external.js";
import type { Inventory } from "../managed/inventory.js";
import { pollIntervalMs } from "../managed/poll-interval.js";
import { ServiceError, goneIndeed, isNotFound, isServiceNotFound } from "../service/index.js";

interface Dated {
  created_at?: string;
  allocated_at?: string;
}

/**
 * Of several service objects carrying one resource's marker (a crash left a duplicate), the
 * one to keep: the newest, as the service dates them.
 */
export function newest<T extends Dated>(items: T[]): T | undefined {
  const at = (x: T) => x.created_at ?? x.allocated_at ?? "";
  return [...items].sort((a, b) => at(b).localeCompare(at(a)))[0];
}

export interface Found<T> {
  /** The object the resource uses; undefined when there is none. */
  found: T | undefined;
  /** Ids of the other usable objects carrying the resource's marker, to be given back. */
  leftovers: string[];
  /**
   * With `byIdWhenListFails`: the list could not be read, so `found` came from a GET of the id
   * status names, and nothing else is known (no leftovers). Plan nothing that a marker lookup
   * must guard (a create, a replacement): only the upkeep of `found`.
   */
  listFailed?: boolean;
}

export interface FindOptions<T> {
  inventory: Inventory<T>;
  /**
   * Reads one object; the service's own 404 means it is gone. A bare 404 (a gateway's) says
   * nothing of it, and is thrown as the failure it is.
   */
  get(id: string): Promise<T>;
  /** Whether an object can still serve (a released or expired VM cannot); default: any can. */
  usable?(obj: T): boolean;
  /**
   * When the object the resource names is gone, use the newest one carrying its marker: a
   * create made since then whose status write never landed (API server unreachable, process
   * killed) left it, and creating yet another on every retry would be worse. Never when the
   * adoption annotation names the object: that names one.
   */
  adoptAfterLoss: boolean;
  /**
   * When the list cannot be read, GET the object status names rather than fail, so that it is
   * still kept alive (a VM's renewal must not wait for a list of thousands). Only for a caller
   * that then plans nothing but upkeep when `listFailed` (see Found).
   */
  byIdWhenListFails?: boolean;
}

/**
 * The resource's object, by `id` (status or adoption annotation; one GET confirms an id the
 * snapshot does not hold) or else by marker, and the leftovers next to it. Changes nothing in
 * the service: observe only reads, and the leftovers are given back by the kind's cleanup.
 */
export async function findOwn<T extends Dated & { id: string }>(
  cr: ManagedResource,
  id: string | undefined,
  opts: FindOptions<T>,
): Promise<Found<T>> {
  const { inventory } = opts;
  const usable = (obj: T | undefined): obj is T => obj !== undefined && (opts.usable?.(obj) ?? true);
  const annotated = cr.metadata.annotations?.[Annotations.externalId] !== undefined;
  const marked = () => inventory.findByMarker(cr.metadata.uid).filter(usable);
  const keeping = (keep: T): Found<T> => ({
    found: keep,
    leftovers: annotated ? [] : marked().filter((o) => o.id !== keep.id).map((o) => o.id),
  });
  const newestMarked = (): Found<T> => {
    const candidates = marked();
    const keep = newest(candidates);
    return { found: keep, leftovers: candidates.filter((o) => o !== keep).map((o) => o.id) };
  };

  try {
    await inventory.ensureFresh();
  } catch (err) {
    // A list that cannot be read (a service struggling with thousands of objects) must not stop
    // the upkeep of the one status names: that one is asked for by itself. Nothing else: on the
    // old snapshot a marker lookup would miss what a lost create made, and make a second.
    if (id === undefined || !opts.byIdWhenListFails) throw err;
    const got = await opts.get(id).catch((e: unknown) => {
      throw isNotFound(e) ? err : e;
    });
    if (!usable(got)) throw err;
    inventory.put(got);
    return { found: got, leftovers: [], listFailed: true };
  }
  const uid = cr.metadata.uid;
  // A resource moved in from another owner (sharding) is looked up by marker, or missed, only
  // on a snapshot read since: its previous owner may have created the object just before it let go.
  if (id === undefined) {
    await inventory.readSinceArrival(uid);
    return newestMarked();
  }
  let cached = inventory.get(id);
  if (cached === undefined && (await inventory.readSinceArrival(uid))) cached = inventory.get(id);
  if (usable(cached) && !staleFor(cr, inventory, id)) return keeping(cached);
  try {
    const got = await opts.get(id);
    inventory.put(got);
    if (usable(got)) return keeping(got);
  } catch (err) {
    // Only the service's own 404 is gone: a bare one taken for it had a VM that runs replaced
    // (a second allocated), then released as a leftover. Thrown, the read is tried again.
    if (!isServiceNotFound(err)) throw err;
    inventory.remove(id);
  }
  if (annotated || !opts.adoptAfterLoss) return { found: undefined, leftovers: [] };
  await inventory.readSinceArrival(uid);
  return newestMarked();
}

/**
 * The hash of the spec a service object was made for (`key` in its metadata:
 * agentcompute.dev/config-hash, options-hash), when this very resource made it (its marker).
 * An object made for another resource (imported with the adoption annotation) says nothing
 * about this one's spec: undefined.
 */
export function madeFor(cr: ManagedResource, obj: { metadata?: Record<string, string> }, key: string): string | undefined {
  return obj.metadata?.[MARKER_KEY] === cr.metadata.uid ? obj.metadata[key] : undefined;
}

/** A service object observed and gone since (deleted outside the operator): waited for, not an error. */
export function goneSinceObserved(what: string): NotReadyError {
  return new NotReadyError("ExternalGone", `${what} is gone from the service since it was observed; it is looked for again`);
}

/**
 * Changes service object `key` with `call`. The service's own 404 means it went since it was
 * observed: the inventory forgets it and the pass waits (ExternalGone), so that the next one
 * finds it gone and makes it again, rather than send the same call, on the same snapshot, until
 * the next list. A bare 404 (a gateway's) says nothing of the object: a failure, tried again.
 */
export async function changeObserved<T>(inventory: Inventory<unknown>, key: string, what: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (!isServiceNotFound(err)) throw err;
    inventory.remove(key);
    throw goneSinceObserved(what);
  }
}

/**
 * Deletes (or releases) a service object with `call`. A 404 is success when it says the object
 * is gone (goneIndeed: the service's own, or a bare one that a GET of it by `gone.get`
 * confirms): gone is what was asked, and a retry after a lost answer must not fail on it. Any
 * other 404 (a gateway's, the object still there) is thrown: taken for success, it let the
 * finalizer go while the object ran on. The inventory forgets it.
 */
export async function removeObject<T>(
  inventory: Inventory<unknown>,
  key: string,
  call: (key: string) => Promise<unknown>,
  gone: { get(key: string): Promise<T>; ended?(obj: T): boolean },
): Promise<void> {
  try {
    await call(key);
  } catch (err) {
    if (await goneIndeed(err, () => gone.get(key), (obj) => gone.ended?.(obj) ?? false)) {
      inventory.remove(key);
      return;
    }
    // Said so: "HTTP 404" alone, in a deletion that never ends, reads as a bug of ours.
    if (err instanceof ServiceError && err.status === 404) {
      throw new ServiceError({
        ...err,
        message: `${err.message}, without the service's error body (a gateway's?), and a GET of ${key} did not say it is gone either: tried again, the finalizer kept (behind a gateway that rewrites every 404, an object that is gone stays so: remove the finalizer by hand once you have checked)`,
        retryable: true,
      });
    }
    throw err;
  }
  inventory.remove(key);
}

/**
 * The resource polls more often (agentcompute.dev/poll-interval) than the snapshot was last
 * read for this key: its object is read again with one GET (not the whole list). 90 % of the
 * interval: the requeue is jittered as early as that, and a pass that found the object "not
 * yet stale" would put the next read off by a whole interval.
 */
export function staleFor(cr: ManagedResource, inventory: Inventory<unknown>, key: string): boolean {
  const ms = pollIntervalMs(cr);
  return ms !== undefined && inventory.ageOf(key) >= ms * 0.9;
}
