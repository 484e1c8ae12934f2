// Field-level differences between two specs, as the plan shows them: leaf paths, arrays as one
// value, secret-looking fields as "(sensitive)".
import { SENSITIVE, type Change } from "./model.js";

/** Leaf keys whose values are never shown. */
const SENSITIVE_KEY = /^(token|password|apikey|clientsecret|image_pull_secret)$/i;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function flatten(value: unknown, prefix: string, out: Map<string, unknown>): void {
  if (isRecord(value) && Object.keys(value).length > 0) {
    for (const [k, v] of Object.entries(value)) flatten(v, prefix === "" ? k : `${prefix}.${k}`, out);
    return;
  }
  out.set(prefix, value);
}

/**
 * Whether two JSON values are the same, whatever the order of their objects' keys: the API
 * server answers with a custom resource's keys sorted, a manifest keeps its author's order.
 */
export function sameJSON(a: unknown, b: unknown): boolean {
  return canonicalJSON(a) === canonicalJSON(b);
}

function canonicalJSON(value: unknown): string | undefined {
  return JSON.stringify(value, (_key, v: unknown) => (isRecord(v) ? Object.fromEntries(Object.entries(v).sort(([p], [q]) => (p < q ? -1 : p > q ? 1 : 0))) : v));
}

export function redact(path: string, value: unknown): unknown {
  const last = path.split(".").pop() ?? "";
  return SENSITIVE_KEY.test(last) && value !== undefined ? SENSITIVE : value;
}

/** The leaves that differ between `before` and `after` (undefined = absent), under `prefix`. */
export function diffFields(before: unknown, after: unknown, prefix: string): Change[] {
  const a = new Map<string, unknown>();
  const b = new Map<string, unknown>();
  if (before !== undefined) flatten(before, prefix, a);
  if (after !== undefined) flatten(after, prefix, b);
  const keys = [...new Set([...a.keys(), ...b.keys()])].sort();
  const out: Change[] = [];
  for (const k of keys) {
    const old = a.get(k);
    const next = b.get(k);
    if (sameJSON(old, next)) continue;
    const c: Change = { path: k };
    if (old !== undefined) c.old = redact(k, old);
    if (next !== undefined) c.new = redact(k, next);
    out.push(c);
  }
  return out;
}

/** One field's change, redacted. */
export function change(path: string, old: unknown, next: unknown): Change {
  const c: Change = { path };
  if (old !== undefined) c.old = redact(path, old);
  if (next !== undefined) c.new = redact(path, next);
  return c;
}
