// Small helpers shared by the benchmark scenarios.
import { setTimeout as sleep } from "node:timers/promises";

export { sleep };

const t0 = Date.now();

/** Progress line on stderr, prefixed with the seconds since the benchmark started. */
export function log(line: string): void {
  process.stderr.write(`[bench ${((Date.now() - t0) / 1000).toFixed(1).padStart(7)} s] ${line}\n`);
}

/** Nearest-rank percentile of an unsorted list (p in 0..100); NaN when empty. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1] as number;
}

export function round(v: number, digits = 2): number {
  const f = 10 ** digits;
  return Math.round(v * f) / f;
}

/** Polls `probe` until it returns something other than undefined/false, or throws after timeoutMs. */
export async function waitUntil<T>(
  probe: () => T | undefined | false | Promise<T | undefined | false>,
  opts: { timeoutMs: number; intervalMs?: number; what: string },
): Promise<T> {
  const deadline = Date.now() + opts.timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${Math.round(opts.timeoutMs / 1000)} s waiting for ${opts.what}`);
    await sleep(opts.intervalMs ?? 250);
  }
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
