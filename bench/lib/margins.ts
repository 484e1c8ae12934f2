// How close to expiry each VM's renewals landed, read from the emulator's request log: the
// allocation or a renewal at t keeps the VM until t + ttl, and the next successful renewal at
// t2 leaves t + ttl − t2 seconds. A margin at or under zero is an expiration; a small one is a
// near miss the expiration count does not show (a takeover that ends just in time, say).
import type { RequestLogEntry } from "../../src/emulator/index.js";
import { percentile, round } from "./util.js";

export interface Margin {
  /** When the renewal landed (the emulator's clock, ms). */
  at: number;
  vm: string;
  seconds: number;
}

export interface MarginSummary {
  renewals: number;
  min: number | null;
  p1: number | null;
  p50: number | null;
}

/** The VM a renewal call was for: /compute/v1/vms/{id}/renew. */
export function renewedVm(entry: RequestLogEntry): string {
  return entry.path.split("/")[4] ?? "";
}

/**
 * The margin of every successful renewal in `entries`. `start` gives each VM's allocation time,
 * so that a VM's first renewal has a margin too; without it the first renewal only starts the count.
 */
export function renewalMargins(entries: readonly RequestLogEntry[], ttlSeconds: number, start: ReadonlyMap<string, number> = new Map()): Margin[] {
  const last = new Map(start);
  const out: Margin[] = [];
  const sorted = entries.filter((e) => e.operation === "vms.renew" && e.status === 200).sort((a, b) => a.time - b.time);
  for (const e of sorted) {
    const vm = renewedVm(e);
    const previous = last.get(vm);
    if (previous !== undefined) out.push({ at: e.time, vm, seconds: (previous + ttlSeconds * 1000 - e.time) / 1000 });
    last.set(vm, e.time);
  }
  return out;
}

export function summarize(margins: readonly Margin[]): MarginSummary {
  const s = margins.map((m) => m.seconds);
  if (s.length === 0) return { renewals: 0, min: null, p1: null, p50: null };
  return { renewals: s.length, min: round(Math.min(...s), 1), p1: round(percentile(s, 1), 1), p50: round(percentile(s, 50), 1) };
}
