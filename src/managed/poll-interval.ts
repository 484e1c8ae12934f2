// agentcompute.dev/poll-interval: a duration (30s, 5m, 1h: what --sync-period takes) that
// replaces --sync-period for one resource. The reconciler requeues it at that period
// (jittered), and observe reads its service object at least that often: when the shared
// inventory snapshot may be older than the interval, the one object is read with a GET
// (docs/design.md, "Poll interval per resource", says why a GET and not a list).
import { Annotations } from "../api/names.js";
import { parseDuration } from "../lib/duration.js";
import type { ManagedResource } from "./external.js";

/** Below this, a poll interval is refused (as --sync-period is). */
export const MIN_POLL_INTERVAL_MS = 1_000;

export type PollInterval =
  | { kind: "default" }
  | { kind: "set"; ms: number }
  /** A value that is not a duration (or too short): the message names the annotation and the format. */
  | { kind: "invalid"; message: string };

export function pollIntervalOf(cr: Pick<ManagedResource, "metadata">): PollInterval {
  const text = cr.metadata.annotations?.[Annotations.pollInterval];
  if (text === undefined) return { kind: "default" };
  const what = `annotation ${Annotations.pollInterval}`;
  let ms: number;
  try {
    ms = parseDuration(text.trim(), what);
  } catch (err) {
    return { kind: "invalid", message: err instanceof Error ? err.message : String(err) };
  }
  if (ms < MIN_POLL_INTERVAL_MS) {
    return { kind: "invalid", message: `${what}: "${text}" is shorter than 1s (examples: 30s, 10m, 1h30m)` };
  }
  return { kind: "set", ms };
}

/** The resource's own poll interval in ms, if it sets a valid one. */
export function pollIntervalMs(cr: Pick<ManagedResource, "metadata">): number | undefined {
  const p = pollIntervalOf(cr);
  return p.kind === "set" ? p.ms : undefined;
}
