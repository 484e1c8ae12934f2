// Small helpers shared by the emulator's modules: ids, tokens, timestamps, dates.
import { createHash, randomBytes, randomUUID, timingSafeEqual } from "node:crypto";

export const newId = (): string => randomUUID();

/** Opaque random credential (tokens for access, deployments and VMs). */
export const newToken = (bytes = 24): string => randomBytes(bytes).toString("base64url");

/** RFC 3339 in UTC, as the service sends timestamps. */
export const rfc3339 = (ms: number): string => new Date(ms).toISOString();

/** YYYY-MM-DD of an instant, in UTC. */
export const utcDate = (ms: number): string => new Date(ms).toISOString().slice(0, 10);

const DATE_RE = /^(\d{4})-(\d{2})-(\d{2})$/;

/** Start of a YYYY-MM-DD day in UTC (ms), or undefined when the string is not a real date. */
export function parseUTCDate(s: string): number | undefined {
  const m = DATE_RE.exec(s);
  if (!m) return undefined;
  const ms = Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]));
  // Date.UTC rolls 2024-02-31 over to March; a round trip catches such dates.
  return utcDate(ms) === s ? ms : undefined;
}

export const DAY_MS = 86_400_000;

/** Compare secrets in constant time; hashing first makes the lengths equal. */
export function secretEquals(a: string, b: string): boolean {
  const ha = createHash("sha256").update(a).digest();
  const hb = createHash("sha256").update(b).digest();
  return timingSafeEqual(ha, hb);
}
