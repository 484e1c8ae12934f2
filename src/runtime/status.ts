// kstatus condition helpers and "write status only when it changed".
//
// Mirrors k8s.io/apimachinery/pkg/api/meta.SetStatusCondition: a condition's
// lastTransitionTime moves only when its status changes; reason, message and
// observedGeneration are updated in place. Steady state must produce byte-identical status so
// that the operator makes zero writes to the API server when nothing changes.

export type ConditionStatus = "True" | "False" | "Unknown";

export interface Condition {
  type: string;
  status: ConditionStatus;
  reason?: string;
  message?: string;
  observedGeneration?: number;
  /** RFC 3339, second precision (metav1.Time's wire format). */
  lastTransitionTime: string;
}

export type ConditionInput = Omit<Condition, "lastTransitionTime"> & { lastTransitionTime?: string };

/** metav1.Time serialises with second precision; keep the same so round-trips compare equal. */
export function formatTime(d: Date): string {
  return d.toISOString().replace(/\.\d{3}Z$/, "Z");
}

/**
 * Returns the conditions with `cond` set. The input is not modified. When nothing changes the
 * SAME array is returned, so callers can compare by reference.
 */
/**
 * Longest condition message written. The CRDs allow 32,768 characters (as metav1.Condition);
 * a longer one (a service echoing a large body) would make every status write fail with 422
 * and leave the resource's status stale, so it is cut well before that, saying so.
 */
export const MAX_CONDITION_MESSAGE = 4096;

/** The message as a condition holds it: cut (on a character boundary) past MAX_CONDITION_MESSAGE. */
export function boundedMessage(message: string): string {
  if (message.length <= MAX_CONDITION_MESSAGE) return message;
  const note = ` … (${message.length - MAX_CONDITION_MESSAGE} more characters cut)`;
  let end = MAX_CONDITION_MESSAGE - note.length;
  // Not between the two halves of a surrogate pair (the API server would store U+FFFD, and the
  // status would never equal what is computed again).
  const last = message.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end--;
  return message.slice(0, end) + note;
}

export function setCondition<C extends Condition>(
  conditions: readonly C[] | undefined,
  cond: ConditionInput,
  now: Date = new Date(),
): Condition[] {
  const list: readonly Condition[] = conditions ?? [];
  const i = list.findIndex((c) => c.type === cond.type);
  const existing = i >= 0 ? list[i] : undefined;
  const transition =
    existing && existing.status === cond.status
      ? existing.lastTransitionTime
      : (cond.lastTransitionTime ?? formatTime(now));
  const next: Condition = { type: cond.type, status: cond.status, lastTransitionTime: transition };
  if (cond.reason !== undefined) next.reason = cond.reason;
  if (cond.message !== undefined) next.message = boundedMessage(cond.message);
  if (cond.observedGeneration !== undefined) next.observedGeneration = cond.observedGeneration;
  if (existing && deepEqual(existing, next)) return list as Condition[];
  if (i < 0) return [...list, next];
  const out = list.slice();
  out[i] = next;
  return out;
}

export function getCondition<C extends Condition>(conditions: readonly C[] | undefined, type: string): C | undefined {
  return conditions?.find((c) => c.type === type);
}

export function isConditionTrue(conditions: readonly Condition[] | undefined, type: string): boolean {
  return getCondition(conditions, type)?.status === "True";
}

export function removeCondition<C extends Condition>(conditions: readonly C[] | undefined, type: string): C[] {
  return (conditions ?? []).filter((c) => c.type !== type);
}

/** Same conditions regardless of order. */
export function conditionsEqual(
  a: readonly Condition[] | undefined,
  b: readonly Condition[] | undefined,
  opts: { ignoreLastTransitionTime?: boolean } = {},
): boolean {
  const x = a ?? [];
  const y = b ?? [];
  if (x.length !== y.length) return false;
  for (const c of x) {
    const d = y.find((e) => e.type === c.type);
    if (!d) return false;
    if (opts.ignoreLastTransitionTime) {
      if (!deepEqual({ ...c, lastTransitionTime: "" }, { ...d, lastTransitionTime: "" })) return false;
    } else if (!deepEqual(c, d)) {
      return false;
    }
  }
  return true;
}

/**
 * Structural equality with JSON semantics: a key whose value is `undefined` equals a missing
 * key (JSON.stringify drops both), arrays compare in order, numbers by value.
 */
export function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== typeof b) return false;
  if (a === null || b === null || typeof a !== "object" || typeof b !== "object") {
    return typeof a === "number" && Number.isNaN(a) && Number.isNaN(b);
  }
  const aIsArray = Array.isArray(a);
  if (aIsArray !== Array.isArray(b)) return false;
  if (aIsArray) {
    const bb = b as unknown[];
    if (a.length !== bb.length) return false;
    for (let i = 0; i < a.length; i++) if (!deepEqual(a[i], bb[i])) return false;
    return true;
  }
  const ao = a as Record<string, unknown>;
  const bo = b as Record<string, unknown>;
  let na = 0;
  for (const k in ao) {
    if (!Object.hasOwn(ao, k) || ao[k] === undefined) continue;
    na++;
    if (!deepEqual(ao[k], bo[k])) return false;
  }
  let nb = 0;
  for (const k in bo) {
    if (Object.hasOwn(bo, k) && bo[k] !== undefined) nb++;
  }
  return na === nb;
}
