import { describe, expect, it } from "vitest";
import type { Lease } from "../../../src/runtime/leader-election.js";
import { PROCESS_ANNOTATION, holderEnded, processOf, reportsEnded, thisProcess, type PodReport, type ProcessRecord } from "../../../src/sharding/crash-report.js";

// The process wrote its Lease at 10:00:05.400 (node clock); the kubelet's times are whole seconds.
const proc: ProcessRecord = { namespace: "ops", pod: "op-1", uid: "uid-1", container: "operator", since: "2026-11-28T10:00:05.400Z" };
type Status = NonNullable<NonNullable<PodReport["status"]>["containerStatuses"]>[number];
const pod = (status: Omit<Status, "name">, opts: { uid?: string; container?: string } = {}): PodReport => ({
  metadata: { name: "op-1", namespace: "ops", uid: opts.uid ?? "uid-1" },
  status: { containerStatuses: [{ name: "sidecar", state: { terminated: { finishedAt: "2026-11-28T10:09:00Z" } } }, { name: opts.container ?? "operator", ...status }] },
});

describe("the kubelet's report that a member's process ended", () => {
  it("proves it when the container ended after the process wrote its Lease, or restarted since", () => {
    // Killed: the current run ended (rounded down to the second, still after the write).
    expect(reportsEnded(proc, pod({ state: { terminated: { finishedAt: "2026-11-28T10:00:09Z" } } }))).toBe(true);
    // Restarted, the report seen late: a new run, started after the write.
    expect(reportsEnded(proc, pod({ state: { running: { startedAt: "2026-11-28T10:00:10Z" } } }))).toBe(true);
    // Crash-looping: waiting, its last run ended after the write.
    expect(reportsEnded(proc, pod({ state: {}, lastState: { terminated: { finishedAt: "2026-11-28T10:00:30Z" } } }))).toBe(true);
  });

  it("does not when the report is of a run before the process (a new process took the Lease since), or is not about it", () => {
    // The run the process is in (started before the write, in the same second: rounded down).
    expect(reportsEnded(proc, pod({ state: { running: { startedAt: "2026-11-28T10:00:05Z" } } }))).toBe(false);
    expect(reportsEnded(proc, pod({ state: { running: { startedAt: "2026-11-28T10:00:03Z" } }, lastState: { terminated: { finishedAt: "2026-11-28T10:00:02Z" } } }))).toBe(false);
    // A run that ended in the second the process wrote its Lease, rounded down to before it: not proof.
    expect(reportsEnded(proc, pod({ state: { terminated: { finishedAt: "2026-11-28T10:00:05Z" } } }))).toBe(false);
    // Another Pod of the same name (a StatefulSet's next), another container (a sidecar that died), no Pod, no status.
    expect(reportsEnded(proc, pod({ state: { terminated: { finishedAt: "2026-11-28T10:00:09Z" } } }, { uid: "uid-2" }))).toBe(false);
    expect(reportsEnded(proc, pod({ state: { terminated: { finishedAt: "2026-11-28T10:00:09Z" } } }, { container: "other" }))).toBe(false);
    expect(reportsEnded(proc, undefined)).toBe(false);
    expect(reportsEnded(proc, { metadata: { name: "op-1", uid: "uid-1" } })).toBe(false);
    // Waiting to start for the first time (no run ended).
    expect(reportsEnded(proc, pod({ state: {} }))).toBe(false);
  });

  it("judges a Lease's holder by the record on the Lease, only where that record is the holder's", () => {
    const killed = pod({ state: { terminated: { finishedAt: "2026-11-28T10:00:09Z" } } });
    const lease = (holder: string, record: ProcessRecord | undefined): Lease => ({
      metadata: { annotations: record === undefined ? {} : { [PROCESS_ANNOTATION]: JSON.stringify(record) } },
      spec: { holderIdentity: holder },
    });
    const podOf = (namespace: string, name: string): PodReport | undefined => (namespace === "ops" && name === "op-1" ? killed : undefined);
    expect(holderEnded(lease("op-1", proc), podOf)).toBe(true);
    // Taken by another replica that wrote no record of its own (an older version keeps the annotations).
    expect(holderEnded(lease("op-2", proc), podOf)).toBe(false);
    // Released or fenced: nobody holds it; no record at all.
    expect(holderEnded(lease("", proc), podOf)).toBe(false);
    expect(holderEnded(lease("op-1", undefined), podOf)).toBe(false);
  });

  it("reads the process from the downward API, all four variables or none, and from the Lease", () => {
    const env = { POD_NAMESPACE: "ops", POD_NAME: "op-1", POD_UID: "uid-1", CONTAINER_NAME: "operator" };
    expect(thisProcess(env, Date.parse(proc.since))).toEqual(proc);
    expect(thisProcess({ ...env, CONTAINER_NAME: "" })).toBeUndefined();
    expect(thisProcess({ POD_NAME: "op-1" })).toBeUndefined();
    const lease = (value: string | undefined): Lease => ({ metadata: { annotations: value === undefined ? {} : { [PROCESS_ANNOTATION]: value } } });
    expect(processOf(lease(JSON.stringify(proc)))).toEqual(proc);
    expect(processOf(lease(undefined))).toBeUndefined();
    expect(processOf(lease("not json"))).toBeUndefined();
    expect(processOf(lease(JSON.stringify({ ...proc, since: "yesterday" })))).toBeUndefined();
    expect(processOf(lease(JSON.stringify({ ...proc, uid: "" })))).toBeUndefined();
  });
});
