// Request body and query validation. Every message names the field at fault, because the
// operator passes the service's 400 message through to the user (SERVICE.md, gaps).
import type { JsonObject, JsonValue } from "./wire.js";
import { badRequest } from "./errors.js";

export function isObject(v: unknown): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * Fields outside a documented field list, or ones a client may not set: with `strict`
 * (EmulatorOptions.strictBodies) refused, since a misspelt or camelCase key is a client bug;
 * without, left for the handler to ignore, as the service does.
 */
export function rejectUnknown(strict: boolean, body: JsonObject, allowed: ReadonlySet<string>, notSettable: ReadonlyMap<string, string> = new Map(), within = ""): void {
  if (!strict) return; // dropped: the handlers read only the fields they know
  for (const key of Object.keys(body)) {
    const why = notSettable.get(key);
    if (why !== undefined) throw badRequest(`${within}${key} ${why}`);
    if (!allowed.has(key)) throw badRequest(`unknown field: ${within}${key}`);
  }
}

export function requiredString(body: JsonObject, field: string): string {
  const v = body[field];
  if (v === undefined || v === null) throw badRequest(`${field} is required`);
  if (typeof v !== "string") throw badRequest(`${field} must be a string`);
  if (v.trim() === "") throw badRequest(`${field} must not be empty`);
  return v;
}

/** `label`: the field's name in a message, when it is nested (e.g. image_pull_secret.password). */
export function optionalString(body: JsonObject, field: string, label = field): string | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw badRequest(`${label} must be a string`);
  return v;
}

export function optionalBoolean(body: JsonObject, field: string): boolean | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "boolean") throw badRequest(`${field} must be a boolean`);
  return v;
}

export function optionalStringArray(body: JsonObject, field: string): string[] | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) throw badRequest(`${field} must be an array of strings`);
  return v.map((item, i) => {
    if (typeof item !== "string") throw badRequest(`${field}[${i}] must be a string`);
    return item;
  });
}

export function optionalStringMap(body: JsonObject, field: string): Record<string, string> | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (!isObject(v)) throw badRequest(`${field} must be an object of strings`);
  const out: Record<string, string> = {};
  for (const [k, item] of Object.entries(v)) {
    if (typeof item !== "string") throw badRequest(`${field}.${k} must be a string`);
    out[k] = item;
  }
  return out;
}

export function optionalObject(body: JsonObject, field: string): JsonObject | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (!isObject(v)) throw badRequest(`${field} must be an object`);
  return v;
}

function isPositiveInteger(v: JsonValue | undefined): v is number {
  return typeof v === "number" && Number.isSafeInteger(v) && v > 0;
}

export function requiredPositiveInt(body: JsonObject, field: string): number {
  const v = body[field];
  if (v === undefined || v === null) throw badRequest(`${field} is required`);
  if (!isPositiveInteger(v)) throw badRequest(`${field} must be a positive integer`);
  return v;
}

export function optionalPositiveInt(body: JsonObject, field: string): number | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (!isPositiveInteger(v)) throw badRequest(`${field} must be a positive integer`);
  return v;
}

export interface Page {
  limit: number;
  offset: number;
}

/** limit/offset from a query; `limit` above maxPageSize (when set) is silently capped (D). */
export function pageParams(query: URLSearchParams, defaultLimit: number, maxPageSize: number): Page {
  const parse = (name: string, min: number): number | undefined => {
    const raw = query.get(name);
    if (raw === null || raw === "") return undefined;
    const n = /^\d+$/.test(raw) ? Number(raw) : NaN;
    if (!Number.isSafeInteger(n) || n < min) {
      throw badRequest(`${name} must be a ${min === 0 ? "non-negative" : "positive"} integer`);
    }
    return n;
  };
  const limit = Math.min(parse("limit", 1) ?? defaultLimit, maxPageSize);
  const offset = parse("offset", 0) ?? 0;
  return { limit, offset };
}

/** One page of an iterable, walking it once and stopping at the end of the page. */
export function paginate<T>(items: Iterable<T>, page: Page, keep: (item: T) => boolean = () => true): { items: T[]; total: number } {
  const out: T[] = [];
  let total = 0;
  for (const item of items) {
    if (!keep(item)) continue;
    if (total >= page.offset && out.length < page.limit) out.push(item);
    total++;
  }
  return { items: out, total };
}
