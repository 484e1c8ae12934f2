import { describe, expect, it } from "vitest";
import type { Lease } from "../../../src/runtime/leader-election.js";
import {
  CLOCK_MARGIN_MS,
  PROCESS_ANNOTATION,
  acquiringProcess,
  holderEnded,
  processOf,
  reportsEnded,
  thisProcess,
  type PodReport,
  type ProcessRecord,
} from "../../../src/sharding/crash-report.js";

// The process was running at 10:00:05.400 (node clock); the kubelet's times are whole seconds.
const ACQUIRED = "2026-11-28T10:00:06.000000Z";
const proc: ProcessRecord = { namespace: "ops", pod: "op-1", uid: "uid-1", container: "operator", since: "2026-11-28T10:00:05.400Z", acquired: ACQUIRED };
type Status = NonNullable<NonNullable<PodReport["status"]>["containerStatuses"]>[number];
const pod = (status: Omit<Status, "name">, opts: { uid?: string; container?: string } = {}): PodReport => ({
  metadata: { name: "op-1", namespace: "ops", uid: opts.uid ?? "uid-1" },
  status: { containerStatuses: [{ name: "sidecar", state: { terminated: { finishedAt: "2026-11-28T10:09:00Z" } } }, { name: opts.container ?? "operator", ...status }] },
});

describe("the kubelet's report that a member's process ended", () => {
  it("proves it when a run of the container ended after the process was running (by the clock margin)", () => {
    expect(CLOCK_MARGIN_MS).toBe(2_000);
    // Killed: the current run ended (rounded down to the second, still 2 s or more after).
    expect(reportsEnded(proc, pod({ state: { terminated: { finishedAt: "2026-11-28T10:00:08Z" } } }))).toBe(true);
    // Restarted since: running again, its last run (the process's) ended after it.
    expect(reportsEnded(proc, pod({ state: { running: { startedAt: "2026-11-28T10:00:31Z" } }, lastState: { terminated: { finishedAt: "2026-11-28T10:00:30Z" } } }))).toBe(true);
    // Crash-looping: waiting, its last run ended after it.
    expect(reportsEnded(proc, pod({ state: {}, lastState: { terminated: { finishedAt: "2026-11-28T10:00:30Z" } } }))).toBe(true);
  });

  it("does not for a run that may have been before the process, a run's start, or a report not about it", () => {
    // A last run that ended after the current one started: the clock stepped back between them
    // (a node rebooted with its clock ahead), and the current run may be the process's.
    expect(reportsEnded(proc, pod({ state: { running: { startedAt: "2026-11-28T10:00:04Z" } }, lastState: { terminated: { finishedAt: "2026-11-28T10:00:20Z" } } }))).toBe(false);
    // Within the margin of the moment (a step of the clock back between two runs looks like this).
    expect(reportsEnded(proc, pod({ state: { terminated: { finishedAt: "2026-11-28T10:00:07Z" } } }))).toBe(false);
    expect(reportsEnded(proc, pod({ state: { running: { startedAt: "2026-11-28T10:00:03Z" } }, lastState: { terminated: { finishedAt: "2026-11-28T10:00:02Z" } } }))).toBe(false);
    // A run that started later than the process was running proves nothing: the runtime takes
    // a run's start once the process already runs (late, under load or after it restarted).
    expect(reportsEnded(proc, pod({ state: { running: { startedAt: "2026-11-28T10:05:00Z" } } }))).toBe(false);
    // Another Pod of the same name (a StatefulSet's next), another container (a sidecar that died), no Pod, no status.
    expect(reportsEnded(proc, pod({ state: { terminated: { finishedAt: "2026-11-28T10:00:09Z" } } }, { uid: "uid-2" }))).toBe(false);
    expect(reportsEnded(proc, pod({ state: { terminated: { finishedAt: "2026-11-28T10:00:09Z" } } }, { container: "other" }))).toBe(false);
    expect(reportsEnded(proc, undefined)).toBe(false);
    expect(reportsEnded(proc, { metadata: { name: "op-1", uid: "uid-1" } })).toBe(false);
    // Waiting to start for the first time (no run ended).
    expect(reportsEnded(proc, pod({ state: {} }))).toBe(false);
  });

  it("judges a Lease's holder by the record on the Lease, only where that record is the holder's, in the Lease's acquisition", () => {
    const killed = pod({ state: { terminated: { finishedAt: "2026-11-28T10:00:09Z" } } });
    const lease = (holder: string, record: string | undefined, acquireTime = ACQUIRED): Lease => ({
      metadata: { annotations: record === undefined ? {} : { [PROCESS_ANNOTATION]: record } },
      spec: { holderIdentity: holder, acquireTime },
    });
    const written = acquiringProcess({ ...proc, acquired: undefined }, ACQUIRED);
    const podOf = (namespace: string, name: string): PodReport | undefined => (namespace === "ops" && name === "op-1" ? killed : undefined);
    expect(holderEnded(lease("op-1", written), podOf)).toBe(true);
    // Taken by another replica that wrote no record of its own (an older version keeps the annotations).
    expect(holderEnded(lease("op-2", written), podOf)).toBe(false);
    // Taken again by the same identity, by an older version in the same Pod: its own acquisition, not the record's.
    expect(holderEnded(lease("op-1", written, "2026-11-28T10:03:00.000000Z"), podOf)).toBe(false);
    // Released or fenced: nobody holds it; no record at all.
    expect(holderEnded(lease("", written), podOf)).toBe(false);
    expect(holderEnded(lease("op-1", undefined), podOf)).toBe(false);
  });

  it("reads the process from the downward API, all four variables or none, and from the Lease", () => {
    const env = { POD_NAMESPACE: "ops", POD_NAME: "op-1", POD_UID: "uid-1", CONTAINER_NAME: "operator" };
    const { acquired: _acquired, ...started } = proc;
    expect(thisProcess(env, Date.parse(proc.since))).toEqual(started);
    expect(thisProcess({ ...env, CONTAINER_NAME: "" })).toBeUndefined();
    expect(thisProcess({ POD_NAME: "op-1" })).toBeUndefined();
    const lease = (value: string | undefined): Lease => ({ metadata: { annotations: value === undefined ? {} : { [PROCESS_ANNOTATION]: value } } });
    expect(processOf(lease(JSON.stringify(proc)))).toEqual(proc);
    expect(processOf(lease(undefined))).toBeUndefined();
    expect(processOf(lease("not json"))).toBeUndefined();
    expect(processOf(lease(JSON.stringify({ ...proc, since: "yesterday" })))).toBeUndefined();
    expect(processOf(lease(JSON.stringify({ ...proc, uid: "" })))).toBeUndefined();
    expect(processOf(lease(JSON.stringify(started)))).toBeUndefined(); // no acquisition: not a record this version writes
  });
});
