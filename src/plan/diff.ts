// Field-level differences between two specs, as the plan shows them: leaf paths, arrays as one
// value, secret-looking fields as "(sensitive)" wherever they are (in objects, in arrays, at
// any depth).
import { SENSITIVE, type Change } from "./model.js";

/**
 * Keys whose values are never shown, at any depth (docs/plan.md, "Secrets"): compared without
 * case, "_" and "-", a key that ends in token, password, passwd, passphrase, pass, pwd,
 * secret, key (but publicKey), pat or credential(s): `githubToken`, `db_password`,
 * `client_secret`, `api-key`, `credentials`, `STRIPE_KEY`, `AWS_SECRET_ACCESS_KEY`, `GH_PAT`,
 * `DB_PASS`. Not `PWD` alone (the shell's working directory).
 */
const SENSITIVE_ENDING = /(token|password|passwd|passphrase|pass|pwd|secret|key|pat|credentials?)$/;
const NOT_SENSITIVE = /^pwd$|publickey$/;
const isSensitiveKey = (key: string): boolean => {
  const k = key.toLowerCase().replace(/[_-]/g, "");
  return SENSITIVE_ENDING.test(k) && !NOT_SENSITIVE.test(k);
};

/**
 * A URL's password (`postgres://user:pw@db/x`), wherever a string holds one: up to the last
 * `@` before the path, since a password may hold one unescaped.
 */
const URL_PASSWORD = /\b([a-z][a-z0-9+.-]*:\/\/[^/\s:@]*):[^/\s]*@/gi;
const withoutURLPasswords = (text: string): string => text.replace(URL_PASSWORD, `$1:${SENSITIVE}@`);

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

/**
 * `value` with every secret-looking field (isSensitiveKey) at any depth, in objects and in
 * arrays, shown as "(sensitive)"; the whole value when `path` itself names such a field at any
 * of its segments (`spec.manifest.auth.password.value`).
 */
export function redact(path: string, value: unknown): unknown {
  if (value === undefined) return value;
  const segments = path.split(".");
  // A reference names an object and is no secret: a Connection's spec.credentials.secretRef.name.
  if (isReference(segments)) return value;
  if (segments.some((segment) => isSensitiveKey(segment))) return SENSITIVE;
  return redactDeep(value);
}

/** `...<something>Ref.name` (or `.key`, `.namespace`): a reference to a Secret or ConfigMap, by name. */
function isReference(segments: readonly string[]): boolean {
  const [ref, field] = segments.slice(-2);
  return ref !== undefined && /Ref$/.test(ref) && (field === "name" || field === "key" || field === "namespace");
}

function redactDeep(value: unknown): unknown {
  if (typeof value === "string") return withoutURLPasswords(value);
  if (Array.isArray(value)) return value.map(redactDeep);
  if (!isRecord(value)) return value;
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, isSensitiveKey(k) && v !== undefined ? SENSITIVE : redactDeep(v)]));
}

/** A change with its values redacted (every output passes its changes through this). */
export function redactChange(c: Change): Change {
  const out: Change = { path: c.path };
  if (c.old !== undefined) out.old = redact(c.path, c.old);
  if (c.new !== undefined) out.new = redact(c.path, c.new);
  return out;
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
