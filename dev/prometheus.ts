// Reading the Prometheus text format (what the operator's /metrics serves) into flat samples,
// and the sums, deltas and histogram quantiles the benchmark and the e2e suites compute on them.
//
// Our own reader rather than an npm package: the one in wide use, parse-prometheus-text-format
// (1.1.1, a 2019 build, no releases or type declarations since), groups histograms and summaries
// into per-family objects with string values, while every caller here wants flat series
// (`x_bucket{le=...}`, `x_count`) to sum, diff and take quantiles of, so adapting its output
// back would take more code than reading the format, which for prom-client's output is one
// sample per line. prom-client itself only writes the format.

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Label filter: a label's value, or a test of it; a label absent from the filter is summed over. */
export type Where = Record<string, string | ((v: string) => boolean)>;

const UNESCAPE: Record<string, string> = { n: "\n", "\\": "\\", '"': '"' };

/** The samples of a /metrics text (comments, HELP and TYPE lines and timestamps are skipped). */
export function parseMetrics(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    if (m[3]) {
      for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
        labels[l[1] as string] = (l[2] as string).replace(/\\(.)/g, (_, c: string) => UNESCAPE[c] ?? c);
      }
    }
    out.push({ name: m[1] as string, labels, value: Number(m[4]) });
  }
  return out;
}

function matches(s: Sample, where: Where): boolean {
  for (const [k, want] of Object.entries(where)) {
    const v = s.labels[k] ?? "";
    if (typeof want === "function" ? !want(v) : v !== want) return false;
  }
  return true;
}

/** Sum of the samples of `name` whose labels match `where` (a label absent from `where` is summed over). */
export function sum(samples: readonly Sample[], name: string, where: Where = {}): number {
  let total = 0;
  for (const s of samples) if (s.name === name && matches(s, where)) total += s.value;
  return total;
}

/** Values of `name` grouped by the given label (summing the rest). */
export function by(samples: readonly Sample[], name: string, label: string, where: Where = {}): Record<string, number> {
  const out: Record<string, number> = {};
  for (const s of samples) {
    if (s.name !== name || !matches(s, where)) continue;
    const key = s.labels[label] ?? "";
    out[key] = (out[key] ?? 0) + s.value;
  }
  return out;
}

/** Counter differences between two scrapes, per series (series absent before count from 0). */
export function delta(before: readonly Sample[], after: readonly Sample[]): Sample[] {
  const key = (s: Sample) => `${s.name}${JSON.stringify(s.labels)}`;
  const prev = new Map(before.map((s) => [key(s), s.value]));
  return after.map((s) => ({ ...s, value: s.value - (prev.get(key(s)) ?? 0) }));
}

/**
 * A quantile (0..1) of a histogram, from its cumulative buckets (summed over the series that
 * match `where`), interpolated linearly inside the bucket as Prometheus' histogram_quantile().
 */
export function histogramQuantile(samples: readonly Sample[], name: string, q: number, where: Where = {}): number {
  const buckets = by(samples, `${name}_bucket`, "le", where);
  const bounds = Object.keys(buckets)
    .map((le) => ({ le: le === "+Inf" ? Infinity : Number(le), count: buckets[le] ?? 0 }))
    .sort((a, b) => a.le - b.le);
  const total = bounds[bounds.length - 1]?.count ?? 0;
  if (total === 0) return Number.NaN;
  const rank = q * total;
  let prevLe = 0;
  let prevCount = 0;
  for (const b of bounds) {
    if (b.count >= rank) {
      if (b.le === Infinity) return prevLe;
      return prevLe + ((b.le - prevLe) * (rank - prevCount)) / Math.max(1, b.count - prevCount);
    }
    prevLe = b.le;
    prevCount = b.count;
  }
  return prevLe;
}

/** Sum of the samples of `name` in a /metrics text whose labels include `labels` (0 when absent). */
export function sumMetric(text: string, name: string, labels: Record<string, string> = {}): number {
  return sum(parseMetrics(text), name, labels);
}
