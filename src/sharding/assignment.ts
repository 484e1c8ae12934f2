// What the sharder does with one object, as a pure function of its labels, the owner the ring
// wants and the live members (the sharder in src/sharding/sharder.ts applies it).
//
//   no owner                                -> assign the ring's owner
//   owner not a live member (died, left)    -> assign the ring's owner at once: the old owner
//                                              stopped working before its Lease expired
//   owner is the ring's owner               -> nothing (or wait, if a drain is pending)
//   owner live, but not the ring's owner    -> drain: ask the owner to let go; it removes both
//                                              labels once no reconcile of the object runs,
//                                              and the object is then unowned (first case)
//   drain pending, owner live               -> wait for the owner's acknowledgement
//
// So an object is never owned by two replicas, and a live owner always finishes (and lets
// go) before anyone else starts.
import { DRAIN_LABEL, OWNER_LABEL } from "./labels.js";

export type Decision =
  | { action: "none" }
  | { action: "wait"; owner: string }
  | { action: "drain"; owner: string; to: string }
  | { action: "assign"; to: string; from?: string };

export function decide(
  labels: Readonly<Record<string, string>> | undefined,
  desired: string | undefined,
  live: ReadonlySet<string>,
  takingOn: ReadonlySet<string> = live,
): Decision {
  if (desired === undefined) return { action: "none" }; // no members: nobody to give it to
  const owner = labels?.[OWNER_LABEL] ?? "";
  const draining = labels?.[DRAIN_LABEL] !== undefined;
  if (owner === "") return { action: "assign", to: desired };
  if (!live.has(owner)) return { action: "assign", to: desired, from: owner };
  if (draining) return { action: "wait", owner };
  if (owner === desired) return { action: "none" };
  // An owner that is stopping, or gone awaiting its fence, cannot acknowledge a drain: its
  // objects move once it has left (to its heirs), not through a drain now.
  if (!takingOn.has(owner)) return { action: "wait", owner };
  return { action: "drain", owner, to: desired };
}

/**
 * The merge patch that carries out a decision, with the resourceVersion it was made on as a
 * precondition: if the object changed meanwhile (the owner acknowledged a drain, say), the
 * patch fails with 409 and the decision is made again on the newer object.
 */
export function patchFor(decision: Decision, resourceVersion: string | undefined): object | undefined {
  const meta = (labels: Record<string, string | null>) => ({ metadata: { resourceVersion, labels } });
  switch (decision.action) {
    case "assign":
      return meta({ [OWNER_LABEL]: decision.to, [DRAIN_LABEL]: null });
    case "drain":
      return meta({ [DRAIN_LABEL]: "true" });
    default:
      return undefined;
  }
}

/** What the order of placement needs to know of an object. */
export interface Placeable {
  labels: Readonly<Record<string, string>> | undefined;
  /** It has something in the service that stops without its owner: a VM, whose renewals are due. */
  running: boolean;
}

/**
 * The order in which objects are looked at after a membership change, and which go on the
 * priority lane: the objects of an owner that is gone first (nobody works on them until they
 * move, while a cold start may have thousands of new objects waiting to be placed), and among
 * them those with a running VM (a VM's renewals stop until it moves; one not allocated yet
 * can wait), then everything else, in the given order. A running VM with no owner at all (let
 * go by its owner for a move, or made before sharding was turned on) is as urgent as one whose
 * owner is gone: nobody renews it either.
 */
export function placementOrder<T extends Placeable>(objects: Iterable<T>, live: ReadonlySet<string>): Array<{ obj: T; priority: boolean }> {
  const running: T[] = [];
  const orphaned: T[] = [];
  const rest: T[] = [];
  for (const obj of objects) {
    if (unrenewed(obj, live)) running.push(obj);
    else if (ownerGone(obj.labels, live)) orphaned.push(obj);
    else rest.push(obj);
  }
  return [...running.map((obj) => ({ obj, priority: true })), ...orphaned.map((obj) => ({ obj, priority: true })), ...rest.map((obj) => ({ obj, priority: false }))];
}

function ownerGone(labels: Placeable["labels"], live: ReadonlySet<string>): boolean {
  const owner = labels?.[OWNER_LABEL] ?? "";
  return owner !== "" && !live.has(owner);
}

/** A running VM whose renewals wait for a move: its object has no owner, or a gone one. */
export function unrenewed(obj: Placeable, live: ReadonlySet<string>): boolean {
  return obj.running && ((obj.labels?.[OWNER_LABEL] ?? "") === "" || ownerGone(obj.labels, live));
}

/** The owner's acknowledgement of a drain: both labels removed, on the version it saw. */
export function releasePatch(resourceVersion: string | undefined): object {
  return { metadata: { resourceVersion, labels: { [OWNER_LABEL]: null, [DRAIN_LABEL]: null } } };
}
