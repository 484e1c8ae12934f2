// The labels of sharded mode, and a replica's identity.
//
//  - OWNER_LABEL on every sharded object names the replica that reconciles it; each replica's
//    informers select `OWNER_LABEL=<itself>`, so its caches hold only its share (and, after a
//    member died, the owner labels of what it inherited: src/sharding/succession.ts).
//  - DRAIN_LABEL asks the owner to let go of an object (the handshake of a move): the owner
//    removes both labels once no reconcile of the object is running, and only then does the
//    sharder name the new owner.
//  - MEMBER_LABEL marks the replicas' own Leases, which the sharder watches for membership.
import { createHash } from "node:crypto";
import { hostname } from "node:os";

export const OWNER_LABEL = "shard.agentcompute.dev/owner";
export const DRAIN_LABEL = "shard.agentcompute.dev/drain";
/** On member Leases; its value names the ring (the leader election id: one ring per Deployment). */
export const MEMBER_LABEL = "shard.agentcompute.dev/member";

/** The label selector of a replica's own share. */
export function ownerSelector(identity: string): string {
  return `${OWNER_LABEL}=${identity}`;
}

/** The label selector of objects owned by any of `identities` (a replica's own share and what it inherited). */
export function ownersSelector(identities: readonly string[]): string {
  return identities.length === 1 ? ownerSelector(identities[0]!) : `${OWNER_LABEL} in (${[...identities].sort().join(",")})`;
}

/**
 * A replica's identity: `POD_NAME` (from the downward API), else hostname and process id, so
 * that several replicas on one machine (the tests) are distinct members. It is a label value,
 * so it is made one: at most 63 characters of [A-Za-z0-9._-], starting and ending alphanumeric.
 */
export function replicaIdentity(env: NodeJS.ProcessEnv = process.env, host = hostname(), pid = process.pid): string {
  const raw = env.POD_NAME?.trim() || `${host}-${pid}`;
  return labelValue(raw);
}

/** `s` as a valid label value; a changed or shortened value keeps a hash of the original, so distinct inputs stay distinct. */
export function labelValue(s: string): string {
  const cleaned = s.replace(/[^A-Za-z0-9._-]/g, "-").replace(/^[^A-Za-z0-9]+/, "").replace(/[^A-Za-z0-9]+$/, "");
  if (cleaned === s && s.length > 0 && s.length <= 63) return s;
  const suffix = createHash("sha1").update(s).digest("hex").slice(0, 8);
  const head = cleaned.slice(0, 63 - 9).replace(/[^A-Za-z0-9]+$/, "");
  return head.length > 0 ? `${head}-${suffix}` : `r${suffix}`;
}

/** The name of a replica's Lease (a DNS subdomain: lower case). */
export function memberLeaseName(prefix: string, identity: string): string {
  const lower = identity.toLowerCase();
  // Two identities differing only in case must not share a Lease.
  const base = lower === identity ? lower : `${lower}-${createHash("sha1").update(identity).digest("hex").slice(0, 6)}`;
  return `${prefix}-${base}`.replace(/[^a-z0-9.-]/g, "-").slice(0, 253);
}
