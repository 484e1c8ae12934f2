// Succession: who works on a gone replica's objects before any of them has moved.
//
// When the sharder fences the Lease of a member that stopped renewing, it writes on that Lease
// (in the same write) who the live members were: the member's heirs. From the moment a replica
// sees that fence, each object still labelled with the gone member belongs to the heir that
// the ring of those heirs names, and that heir works on it at once. The sharder's relabelling
// (one write per object, thousands for a large share, on an API server that may be busy) is
// no longer on the failover's path: it names the same heir, so the heir goes on, and only a
// later rebalance moves the object with the usual drain.
//
// Everyone reads the same fence, so everyone names the same heir: no object has two workers.
// A chain is followed when an heir died too (its own fence names its heirs); it ends at a
// member that holds its Lease (that member works on the object, or nobody does while its Lease
// is held and not fenced), or at none: a member whose Lease is gone (it left, having stopped
// everything, or its fenced Lease was collected) or was fenced by a sharder that wrote no heirs.
// Then nobody works on the object until the sharder labels it, as before this existed.
import type { Lease } from "../runtime/leader-election.js";
import { Ring } from "./ring.js";

/** Logged once a replica works on what it inherited: said on its Lease, and in its caches (the benchmark reads it). */
export const AT_WORK_ON_INHERITED = "shard succession: at work on what it inherits";

/** On a fenced member Lease: the identity it was held by (the holder is written empty). */
export const FENCED_MEMBER_ANNOTATION = "shard.agentcompute.dev/fenced-member";
/**
 * On a fenced member Lease: why its member was counted gone, `lease-expired` (it renewed no
 * more) or `crash-reported` (its Pod's status proves its process ended: crash-report.ts).
 */
export const FENCED_BECAUSE_ANNOTATION = "shard.agentcompute.dev/fenced-because";
export type FenceReason = "lease-expired" | "crash-reported";
/** On a fenced member Lease: the live members when it was fenced, comma-separated. */
export const HEIRS_ANNOTATION = "shard.agentcompute.dev/heirs";

/**
 * On a fenced member Lease: its `spec.renewTime` when fenced. The fence is that Lease's only
 * while the two agree: a Lease taken back and fenced again by a sharder that writes no heirs
 * (an older version, in a rollout or a rollback) keeps the annotations it did not remove.
 */
export const FENCED_RENEWAL_ANNOTATION = "shard.agentcompute.dev/fenced-renewal";

/**
 * On a member's own Lease: the fenced members whose objects it works on (written before it
 * starts on them, removed once it has stopped). A restarted process of one of them joins only
 * once no live member's Lease names it: another replica's view of the fences may lag.
 */
export const INHERITS_ANNOTATION = "shard.agentcompute.dev/inherits";

/**
 * On a member's own Lease: it is stopping (SIGTERM). Written without renewing it, so the Lease
 * runs out as it would have; a fence written meanwhile does not name it an heir (it works on
 * nothing new while its controllers drain).
 */
export const STOPPING_ANNOTATION = "shard.agentcompute.dev/stopping";
/**
 * STOPPING_ANNOTATION's value once the replica's work has ended, written just before it deletes
 * its Lease: only a Lease deleted with it moves its share at once. Any other deletion (`kubectl
 * delete lease`, also while a stopping replica still drains) is waited out (MemberSet).
 */
export const STOPPING_LEFT = "left";

/** The fenced members a held Lease says its replica works for. */
export function inheritsOf(lease: Lease): string[] {
  return (lease.metadata.annotations?.[INHERITS_ANNOTATION] ?? "").split(",").filter((m) => m !== "");
}

/** What the fence writes on the Lease besides the empty holder. */
export function fenceAnnotations(member: string, heirs: readonly string[], renewTime: string | null | undefined, because: FenceReason = "lease-expired"): Record<string, string> {
  return { [FENCED_MEMBER_ANNOTATION]: member, [HEIRS_ANNOTATION]: [...heirs].sort().join(","), [FENCED_RENEWAL_ANNOTATION]: renewTime ?? "", [FENCED_BECAUSE_ANNOTATION]: because };
}

/** A fenced Lease's member and heirs; undefined for a held Lease, or a fence that named none or is not this Lease's. */
export function fenceOf(lease: Lease): { member: string; heirs: string[] } | undefined {
  if ((lease.spec?.holderIdentity ?? "") !== "") return undefined;
  const annotations = lease.metadata.annotations ?? {};
  if ((annotations[FENCED_RENEWAL_ANNOTATION] ?? "") !== (lease.spec?.renewTime ?? "")) return undefined;
  const member = annotations[FENCED_MEMBER_ANNOTATION] ?? "";
  const heirs = (annotations[HEIRS_ANNOTATION] ?? "").split(",").filter((h) => h !== "" && h !== member).sort();
  return member === "" || heirs.length === 0 ? undefined : { member, heirs };
}

/** The member Leases as one replica sees them. */
export interface SuccessionView {
  /** Identities whose member Lease is held (renewed or not, but not fenced). */
  readonly holders: ReadonlySet<string>;
  /** Fenced members and their heirs. */
  readonly heirs: ReadonlyMap<string, readonly string[]>;
}

const NO_SUCCESSION: SuccessionView = { holders: new Set(), heirs: new Map() };

export class Succession {
  /** Rings of heirs, by their sorted list: one per fence, built once. */
  private readonly rings = new Map<string, Ring>();
  private current: SuccessionView = NO_SUCCESSION;

  /** The member Leases as seen now; the rings of fences no longer there are dropped. */
  set(view: SuccessionView): void {
    this.current = view;
    const used = new Set([...view.heirs.values()].map((h) => h.join(",")));
    for (const id of this.rings.keys()) if (!used.has(id)) this.rings.delete(id);
  }

  /**
   * Who works on an object labelled `owner`: the owner while it holds its Lease; else, if its
   * Lease was fenced with heirs, the heir the ring of those heirs names for `key`, followed on
   * the same way; undefined if the chain ends at nobody.
   */
  worker(owner: string | undefined, key: string): string | undefined {
    const last = this.chain(owner, key).at(-1);
    return last !== undefined && this.current.holders.has(last) ? last : undefined;
  }

  /**
   * The fenced members whose objects may have `identity` as their worker (directly, or through
   * the heirs of heirs): a replica's caches select their owner labels besides its own.
   */
  inheritedBy(identity: string): string[] {
    const reach = new Set([identity]);
    for (let grew = true; grew; ) {
      grew = false;
      for (const [member, heirs] of this.current.heirs) {
        if (!reach.has(member) && !this.current.holders.has(member) && heirs.some((h) => reach.has(h))) {
          reach.add(member);
          grew = true;
        }
      }
    }
    reach.delete(identity);
    return [...reach].sort();
  }

  /** The members an object's chain passes through, its owner first (the fenced Leases it still needs). */
  chain(owner: string | undefined, key: string): string[] {
    const out: string[] = [];
    for (let m = owner; m !== undefined && m !== "" && !out.includes(m); ) {
      out.push(m);
      if (this.current.holders.has(m)) break;
      const heirs = this.current.heirs.get(m);
      if (heirs === undefined) break;
      m = this.ring(heirs).owner(key);
    }
    return out;
  }

  private ring(heirs: readonly string[]): Ring {
    const id = heirs.join(",");
    let ring = this.rings.get(id);
    if (ring === undefined) this.rings.set(id, (ring = new Ring(heirs)));
    return ring;
  }
}
