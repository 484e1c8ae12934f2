// A consistent-hash ring with virtual nodes (Karger et al.; the ring of
// timebertt/kubernetes-controller-sharding): each member is placed on a 64-bit circle at
// `vnodes` points, and an object belongs to the member of the first point at or after the
// object's own hash. Adding or removing a member moves only the objects between its points
// and their predecessors (about 1/n of them), and the virtual nodes keep the shares even.
//
// Pure: the same members always give the same ring, on every replica and after a restart.
import { createHash } from "node:crypto";

/** Points per member: enough for shares within a few percent at 3 to 10 members. */
export const DEFAULT_VNODES = 100;

/** The first 8 bytes of SHA-1: well spread, and the same in every process (no seed). */
export function hash64(s: string): bigint {
  return createHash("sha1").update(s).digest().readBigUInt64BE(0);
}

export class Ring {
  readonly members: readonly string[];
  private readonly points: bigint[];
  private readonly owners: string[];

  constructor(members: Iterable<string>, vnodes = DEFAULT_VNODES) {
    if (!(vnodes >= 1)) throw new Error("vnodes must be at least 1");
    this.members = [...new Set(members)].sort();
    const placed: Array<[bigint, string]> = [];
    for (const m of this.members) for (let i = 0; i < vnodes; i++) placed.push([hash64(`${m}#${i}`), m]);
    // Ties (astronomically unlikely) are broken by member name, so every process agrees.
    placed.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
    this.points = placed.map((p) => p[0]);
    this.owners = placed.map((p) => p[1]);
  }

  /** The member a key belongs to; undefined when the ring is empty. */
  owner(key: string): string | undefined {
    if (this.points.length === 0) return undefined;
    const h = hash64(key);
    // Binary search for the first point >= h; past the last point wraps to the first.
    let lo = 0;
    let hi = this.points.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((this.points[mid] as bigint) < h) lo = mid + 1;
      else hi = mid;
    }
    return this.owners[lo === this.points.length ? 0 : lo];
  }
}

/** The ring key of an object: kind, namespace and name (the uid would move a re-created object). */
export function objectKey(plural: string, namespace: string, name: string): string {
  return `${plural}/${namespace}/${name}`;
}
