// A step's output as the run reports it: the last few KiB in status, and all of it (capped,
// with a marker where it was cut) in the run's output ConfigMap. Values of the Secrets the run
// reads (envFrom, files) are masked first, as CI systems mask their secrets in logs.

/** Bytes of a step's output kept in status (its tail). */
export const STATUS_TAIL_BYTES = 2048;
/** Bytes of all the steps' output kept in the ConfigMap (its limit is 1 MiB, metadata included). */
export const CONFIGMAP_BUDGET_BYTES = 768 * 1024;
/** Secret values shorter than this are not masked (they would mask ordinary words). */
const MIN_MASKED = 4;
export const MASK = "***";

/** The last `bytes` of text, on a UTF-8 character boundary. */
export function tail(text: string, bytes = STATUS_TAIL_BYTES): string {
  const buf = Buffer.from(text, "utf8");
  if (buf.length <= bytes) return text;
  let start = buf.length - bytes;
  while (start < buf.length && (buf[start]! & 0xc0) === 0x80) start++; // not in the middle of a character
  return buf.subarray(start).toString("utf8");
}

/** At most `bytes`: the head and the tail, with a line saying how much was cut between them. */
export function cap(text: string, bytes: number): string {
  const buf = Buffer.from(text, "utf8");
  if (buf.length <= bytes) return text;
  const half = Math.max(0, Math.floor((bytes - 80) / 2));
  let end = half;
  while (end > 0 && (buf[end]! & 0xc0) === 0x80) end--;
  const head = buf.subarray(0, end).toString("utf8");
  const rest = tail(buf.subarray(end).toString("utf8"), half);
  const cut = buf.length - Buffer.byteLength(head) - Buffer.byteLength(rest);
  return `${head}\n[... ${cut} bytes of output cut here ...]\n${rest}`;
}

/** Replaces every occurrence of each secret value (long enough to matter) with ***. */
export function mask(text: string, secrets: Iterable<string>): string {
  let out = text;
  const values = [...new Set(secrets)].filter((s) => s.length >= MIN_MASKED).sort((a, b) => b.length - a.length);
  for (const v of values) out = out.replaceAll(v, MASK);
  return out;
}

/** The ConfigMap's share of each step when `steps` steps share the budget. */
export function perStepBudget(steps: number): number {
  return Math.floor(CONFIGMAP_BUDGET_BYTES / Math.max(1, steps));
}

/** A short message from a failed step's output: its last non-empty line, at most 200 characters. */
export function lastLine(text: string): string | undefined {
  const lines = text.split("\n").map((l) => l.trim()).filter((l) => l !== "");
  const l = lines[lines.length - 1];
  if (l === undefined) return undefined;
  return l.length > 200 ? `${l.slice(0, 197)}...` : l;
}
