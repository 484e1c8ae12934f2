// A step's output as the run reports it: the last few KiB in status, and all of it (capped,
// with a marker where it was cut) in the run's output ConfigMap. Values of the Secrets the run
// reads (envFrom, files) are masked first, as CI systems mask their secrets in logs.
//
// A step may print gigabytes, so its output file is never read whole: only the two ends the
// ConfigMap keeps (outputWindow), each with room for a secret that crosses the cut, so that
// the cut never leaves part of a secret in clear (boundedOutput).
import type { SandboxRunSpec, SandboxSpec } from "../api/index.js";
import { mergeRanges, type Range } from "../lib/ranges.js";
import { writtenForms } from "../lib/written-forms.js";
import type { FileEnds } from "../service/agentd.js";

/** Bytes of a step's output kept in status (its tail). */
export const STATUS_TAIL_BYTES = 2048;
/** Bytes of all the steps' output kept in the ConfigMap (its limit is 1 MiB, metadata included). */
export const CONFIGMAP_BUDGET_BYTES = 768 * 1024;
/** Secret values shorter than this are not masked (they would mask ordinary words). */
const MIN_MASKED = 4;
/**
 * Nor lines of a value of several shorter than this: a YAML or JSON Secret's lines ("true",
 * "name: x", "{") would mask ordinary output. A PEM line is 64 characters.
 */
const MIN_MASKED_LINE = 16;
export const MASK = "***";

/** The last `bytes` of text, on a UTF-8 character boundary. */
export function tail(text: string, bytes = STATUS_TAIL_BYTES): string {
  const buf = Buffer.from(text, "utf8");
  if (buf.length <= bytes) return text;
  let start = buf.length - bytes;
  while (start < buf.length && (buf[start]! & 0xc0) === 0x80) start++; // not in the middle of a character
  return buf.subarray(start).toString("utf8");
}

/**
 * Output bytes as text. A byte that is not UTF-8 (a step printing binary) becomes "?", not the
 * 3-byte U+FFFD: the text is then never longer than the bytes it stands for, so what is cut to
 * fit the ConfigMap still fits once decoded.
 */
function decode(bytes: Buffer): string {
  return bytes.toString("utf8").replaceAll("\uFFFD", "?");
}

/** Bytes of each end that `cap` keeps, leaving room for the marker line between them. */
const capHalf = (bytes: number): number => Math.max(0, Math.floor((bytes - 80) / 2));

const cutMarker = (cut: number): string => `\n[... ${cut} bytes of output cut here ...]\n`;
/** The line cutMarker makes. */
const CUT_MARKER_LINE = /^\[\.\.\. \d+ bytes of output cut here \.\.\.\]$/;

/** The text after the cut of output that `cap` cut (its kept tail); undefined if it was not cut. */
export function afterCut(text: string): string | undefined {
  const cut = /\n\[\.\.\. \d+ bytes of output cut here \.\.\.\]\n/.exec(text);
  return cut === null ? undefined : text.slice(cut.index + cut[0].length);
}

/** At most `bytes`: the head and the tail, with a line saying how much was cut between them. */
export function cap(text: string, bytes: number): string {
  const buf = Buffer.from(text, "utf8");
  if (buf.length <= bytes) return text;
  const half = capHalf(bytes);
  let end = half;
  while (end > 0 && (buf[end]! & 0xc0) === 0x80) end--;
  const head = buf.subarray(0, end).toString("utf8");
  const rest = tail(buf.subarray(end).toString("utf8"), half);
  const cut = buf.length - Buffer.byteLength(head) - Buffer.byteLength(rest);
  return `${head}${cutMarker(cut)}${rest}`;
}

/**
 * What `mask` masks of each secret value: the value, the value without the line break it ends
 * with (a Secret made with `kubectl create secret --from-file` keeps the file's last newline,
 * and a step prints the value without it), each of those in every form the service clients
 * scrub from error text (writtenForms: a JSON string as JavaScript and Go write it, a URL's
 * path and query as JavaScript and Go encode them), and each line of a value of several (a PEM
 * key, printed a line at a time) long enough not to be ordinary text, as CI systems mask theirs.
 */
function maskedValues(secrets: Iterable<string>): string[] {
  const forms = new Set<string>();
  for (const value of secrets) {
    // Short by what it holds, not by a line break it ends with ("dev\n" would mask every line
    // ending in "dev", and the break with it).
    if (value.trim().length < MIN_MASKED) continue;
    // A value that is not text (its bytes decoded as U+FFFD) is never printed as those escapes.
    const text = !value.includes("\uFFFD");
    for (const whole of new Set([value, value.trim()])) {
      forms.add(whole);
      // As a step that prints its env as JSON (a string's escapes: a PEM key's line breaks) or
      // puts a value in a URL would write it, or an error from a Go service quoting it.
      if (text) for (const form of writtenForms(whole)) forms.add(form);
    }
    const lines = value.trim().split(/\r?\n/);
    if (lines.length > 1) for (const line of lines) if (line.trim().length >= MIN_MASKED_LINE) forms.add(line.trim());
  }
  return [...forms];
}

/**
 * How much of each end of an output file to read for `boundedOutput`: the ends the cap keeps,
 * each with room for a secret across its cut, and all of a file the budget holds.
 */
export function outputWindow(budget: number, secrets: Iterable<string>): { headBytes: number; tailBytes: number } {
  const longest = Math.max(0, ...maskedValues(secrets).map((s) => Buffer.byteLength(s)));
  const bytes = capHalf(budget) + longest;
  return { headBytes: Math.max(bytes, budget), tailBytes: bytes };
}

/**
 * The output `cap(mask(whole file), budget)` would give, from the file's two ends as read with
 * `outputWindow(budget, secrets)`. A secret that crosses a cut is masked whole; a secret that
 * starts beyond the head's cut (or ends before the tail's) is cut off with the bytes around it.
 */
export function boundedOutput(ends: FileEnds, secrets: Iterable<string>, budget: number): string {
  if (ends.head.length + ends.tail.length >= ends.size) {
    return cap(mask(decode(Buffer.concat([ends.head, ends.tail])), secrets), budget);
  }
  const values = maskedValues(secrets).map((s) => Buffer.from(s, "utf8"));
  const half = capHalf(budget);
  const head = maskedSpan(ends.head, values, 0, Math.min(half, ends.head.length));
  const tail = maskedSpan(ends.tail, values, Math.max(0, ends.tail.length - half), ends.tail.length);
  const cut = ends.size - head.end - (ends.tail.length - tail.start);
  return `${head.text}${cutMarker(cut)}${tail.text}`;
}

/**
 * The text of buf[from, to) with every occurrence of a value masked, on character boundaries.
 * An occurrence that crosses `from` or `to` is masked whole, so the span read may be wider:
 * `start` and `end` say which bytes of `buf` the text stands for.
 */
function maskedSpan(buf: Buffer, values: Buffer[], from: number, to: number): { text: string; start: number; end: number } {
  const found: Range[] = [];
  for (const v of values) {
    for (let i = buf.indexOf(v); i >= 0; i = buf.indexOf(v, i + 1)) found.push([i, i + v.length]);
  }
  const merged = mergeRanges(found);
  const covering = (at: number) => merged.find(([s, e]) => s < at && at < e);
  let start = covering(from)?.[0] ?? from;
  let end = covering(to)?.[1] ?? to;
  // Not in the middle of a character:
  if (start === from) while (start < end && (buf[start]! & 0xc0) === 0x80) start++;
  if (end === to) while (end > start && end < buf.length && (buf[end]! & 0xc0) === 0x80) end--;
  let text = "";
  let at = start;
  for (const [s, e] of merged) {
    if (e <= start || s >= end) continue;
    text += decode(buf.subarray(at, s)) + MASK;
    at = e;
  }
  return { text: text + decode(buf.subarray(at, end)), start, end };
}

/**
 * Replaces every occurrence of each secret value (long enough to matter) with ***; where two
 * occurrences overlap (`password1` and `1234abcd` in `password1234abcd`), both go under one.
 */
export function mask(text: string, secrets: Iterable<string>): string {
  const values = maskedValues(secrets);
  if (values.length === 0) return text;
  const buf = Buffer.from(text, "utf8");
  return maskedSpan(buf, values.map((v) => Buffer.from(v, "utf8")), 0, buf.length).text;
}

/**
 * The Secrets whose values a run's output is masked with: `own`, those the run reads (its
 * envFrom and secret files), and in `all` its VM's envFrom too (its template's, or its
 * Sandbox's: the VM's env holds those values, and a step may print them).
 */
export function maskingSecretNames(spec: SandboxRunSpec, sandbox: { spec: Pick<SandboxSpec, "envFrom"> } | undefined): { own: string[]; all: string[] } {
  const own = [...(spec.envFrom ?? []).map((f) => f.secretRef.name), ...(spec.files ?? []).flatMap((f) => (f.secretKeyRef === undefined ? [] : [f.secretKeyRef.name]))];
  const vm = (spec.sandboxTemplate?.envFrom ?? sandbox?.spec.envFrom ?? []).map((f) => f.secretRef.name);
  return { own, all: [...new Set([...own, ...vm])] };
}

/**
 * Masks output that is still being written (a running step's file, read as it grows): each
 * push gives the text that can be printed now. What may be the start of a secret value not yet
 * arrived whole (the longest end of what has come that begins some value), and a character
 * not yet arrived whole, are held back until more comes or the output has ended, so that no
 * value is ever printed in part. The last bytes printed are kept as context, so that a value
 * that begins inside one already masked is found too.
 */
export class GrowingOutput {
  private readonly values: Buffer[];
  /** Bytes of the longest masked value: a read after a gap takes this many before it (push's `from`). */
  readonly longest: number;
  /** The last bytes printed (at most `longest` - 1). */
  private context = Buffer.alloc(0);
  /** Bytes come and not printed yet (held back). */
  private pending = Buffer.alloc(0);

  constructor(secrets: Iterable<string>) {
    this.values = maskedValues(secrets).map((v) => Buffer.from(v, "utf8"));
    this.longest = Math.max(0, ...this.values.map((v) => v.length));
  }

  /** Bytes come and not printed yet. */
  get held(): number {
    return this.pending.length;
  }

  /**
   * The bytes that came after those pushed before; `ended`: the output has ended, print all.
   * `from`: the bytes before that offset are not new, but read again after a gap (more came
   * than is read at once) so that a value across the gap's end is masked whole: what was held
   * back is dropped, and the text starts at `from`, or before it where a value crosses it.
   */
  push(bytes: Buffer, { ended = false, from }: { ended?: boolean; from?: number } = {}): string {
    const buf = from === undefined ? Buffer.concat([this.context, this.pending, bytes]) : bytes;
    const start = from ?? this.context.length;
    const to = ended ? buf.length : Math.max(start, buf.length - Math.max(this.partialValueAtEnd(buf), incompleteCharAtEnd(buf)));
    const span = maskedSpan(buf, this.values, start, to);
    this.context = Buffer.from(buf.subarray(Math.max(0, span.end - Math.max(0, this.longest - 1)), span.end));
    this.pending = Buffer.from(buf.subarray(span.end));
    return span.text;
  }

  /**
   * The length of the longest end of `buf` that is the beginning (not all) of a masked value. It
   * may begin in the context, inside a value already masked (`password1` then `23`, with values
   * `password1` and `1234abcd`): what follows it is then held back too.
   */
  private partialValueAtEnd(buf: Buffer): number {
    let longest = 0;
    for (const v of this.values) {
      for (let k = Math.min(v.length - 1, buf.length); k > longest; k--) {
        if (buf[buf.length - k] === v[0] && buf.subarray(buf.length - k).equals(v.subarray(0, k))) {
          longest = k;
          break;
        }
      }
    }
    return longest;
  }
}

/** Bytes at the end of `buf` that begin a UTF-8 character not all there. */
function incompleteCharAtEnd(buf: Buffer): number {
  for (let i = buf.length - 1; i >= Math.max(0, buf.length - 4); i--) {
    const b = buf[i]!;
    if ((b & 0xc0) === 0x80) continue; // a continuation byte: its lead is before it
    const size = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    return buf.length - i < size ? buf.length - i : 0;
  }
  return 0;
}

/** The ConfigMap's share of each step when `steps` steps share the budget. */
export function perStepBudget(steps: number): number {
  return Math.floor(CONFIGMAP_BUDGET_BYTES / Math.max(1, steps));
}

/** A short message from a failed step's output: its last non-empty line (not the cut's marker), at most 200 characters. */
export function lastLine(text: string): string | undefined {
  const lines = text
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "" && !CUT_MARKER_LINE.test(l));
  const l = lines[lines.length - 1];
  if (l === undefined) return undefined;
  return l.length > 200 ? `${l.slice(0, 197)}...` : l;
}
