import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it, vi } from "vitest";
import { KubeApiError, type KubeClient } from "../../../src/runtime/kube-client.js";
import type { Lease } from "../../../src/runtime/leader-election.js";
import { silentLogger } from "../../../src/runtime/logging.js";
import { MEMBER_LABEL, labelValue, memberLeaseName, replicaIdentity } from "../../../src/sharding/labels.js";
import { MemberLease, MemberSet, liveMembers, observeLease } from "../../../src/sharding/membership.js";

const lease = (holder: string, renewTime: string, durationS = 15): Lease => ({
  metadata: { name: `l-${holder}` },
  spec: { holderIdentity: holder, renewTime, leaseDurationSeconds: durationS },
});

describe("member liveness", () => {
  const t0 = Date.parse("2026-01-01T00:00:00Z");

  it("counts a lease duration from the renewal the sharder saw, on its own clock", () => {
    const first = observeLease(undefined, lease("a", new Date(t0).toISOString()), t0, 15_000)!;
    expect(liveMembers([first], t0 + 14_000)).toEqual(["a"]);
    expect(liveMembers([first], t0 + 15_000)).toEqual([]);
    // A renewal seen later (whatever its renewTime says) extends from when it was seen.
    const renewed = observeLease(first, lease("a", "1999-01-01T00:00:00Z"), t0 + 10_000, 15_000)!;
    expect(liveMembers([renewed], t0 + 24_000)).toEqual(["a"]);
    // Seeing the same record again does not extend it.
    expect(observeLease(renewed, lease("a", "1999-01-01T00:00:00Z"), t0 + 20_000, 15_000)).toBe(renewed);
  });

  it("believes an old renewTime of a lease in the watch's initial list (a sharder that just started)", () => {
    const stale = observeLease(undefined, lease("dead", new Date(t0 - 20_000).toISOString()), t0, 15_000, { wallNow: t0 })!;
    expect(liveMembers([stale], t0)).toEqual([]);
    // ...but never a renewTime in its future.
    const ahead = observeLease(undefined, lease("b", new Date(t0 + 60_000).toISOString()), t0, 15_000, { wallNow: t0 })!;
    expect(ahead.expiresAt).toBe(t0 + 15_000);
  });

  it("counts a lease first seen after the initial list from when it is seen, whatever its renewTime (a member joining with its clock behind)", () => {
    const joined = observeLease(undefined, lease("b", new Date(t0 - 20_000).toISOString()), t0, 15_000)!;
    expect(joined.expiresAt).toBe(t0 + 15_000);
    expect(liveMembers([joined], t0 + 14_000)).toEqual(["b"]);
  });

  it("ignores a lease without a holder", () => {
    expect(observeLease(undefined, { metadata: {}, spec: { holderIdentity: null } }, t0, 15_000)).toBeUndefined();
  });
});

describe("replica identity", () => {
  it("is POD_NAME, else hostname and pid", () => {
    expect(replicaIdentity({ POD_NAME: "agent-operator-7c9f-abcde" }, "h", 1)).toBe("agent-operator-7c9f-abcde");
    expect(replicaIdentity({}, "build-box", 4242)).toBe("build-box-4242");
    expect(replicaIdentity({}, "build-box", 4242)).not.toBe(replicaIdentity({}, "build-box", 4243));
  });

  it("is always a valid label value, distinct inputs staying distinct", () => {
    const valid = /^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$/;
    const long = "x".repeat(80);
    for (const s of ["host.example.com-1", "_odd_", "a/b:c", long, `${long}y`, "---"]) expect(labelValue(s)).toMatch(valid);
    expect(labelValue(long)).not.toBe(labelValue(`${long}y`));
    expect(labelValue("a/b")).not.toBe(labelValue("a:b"));
  });

  it("names a Lease per replica, lower case", () => {
    expect(memberLeaseName("op-shard", "Pod-A")).toMatch(/^op-shard-pod-a-[0-9a-f]{6}$/);
    expect(memberLeaseName("op-shard", "pod-a")).toBe("op-shard-pod-a");
  });
});

const notFound = new KubeApiError({ status: 404, reason: "NotFound", message: "not found", method: "GET", path: "/lease" });
/** Short timings, in the ratios of the defaults (15 s / 10 s / 2 s). */
const SHORT = { leaseDurationMs: 1_500, renewDeadlineMs: 1_000, retryPeriodMs: 200 };

/**
 * Replica "a"'s MemberLease on a stub client: no Lease at first, created when asked, renewals
 * answered by `patch`; what it reports goes to `seen`.
 */
function stubMember(patch: (path: string, body: unknown, type: string, opts: { signal: AbortSignal }) => Promise<unknown>) {
  const client = { get: () => Promise.reject(notFound), create: () => Promise.resolve({ metadata: { resourceVersion: "1" } }), patch } as unknown as KubeClient;
  const seen = { lost: [] as string[], joined: 0 };
  const member = new MemberLease({
    client,
    namespace: "ns",
    name: "m-a",
    identity: "a",
    ring: "ring",
    logger: silentLogger(),
    ...SHORT,
    onLost: (reason) => seen.lost.push(reason),
    onJoined: () => seen.joined++,
  });
  return { member, seen };
}

describe("MemberLease: a renewal answered past the renew deadline", () => {
  it("works again, and looks at what it set aside meanwhile (onJoined), rather than waiting for a resync", async () => {
    // The client's answers, in order: no Lease yet; created; two renewals that fail; then one
    // sent before the deadline and answered after it (its abort timer ran late on a busy loop).
    // The two failures (at 200 and 400 ms) stay well inside the deadline on a loaded machine;
    // the third renewal, sent at 600 ms, is answered at 2.6 s, past it whatever the timers do.
    let renewals = 0;
    const { member, seen } = stubMember(async () => {
      renewals++;
      if (renewals <= 2) throw new Error("the API server is slow");
      if (renewals === 3) await sleep(2_000); // past the deadline, the abort ignored
      return { metadata: { resourceVersion: String(renewals) } };
    });
    await member.start();
    try {
      expect(seen.joined).toBe(1);
      // Past the deadline, before the late answer: a work queue's timer finds the membership in doubt.
      await vi.waitFor(() => expect(member.mayWork()).toBe(false), { timeout: 10_000, interval: 20 });
      await vi.waitFor(() => expect(renewals).toBeGreaterThanOrEqual(4), { timeout: 10_000 });
      expect(seen.lost).toEqual([]);
      // At least once more (a loaded machine may make a later renewal late too).
      expect(seen.joined).toBeGreaterThanOrEqual(2);
      expect(member.mayWork()).toBe(true);
    } finally {
      await member.stop({ leave: false });
    }
  });
});

describe("MemberLease: a machine that was suspended", () => {
  it("stops working when the wall clock says the renew deadline passed, though the monotonic clock did not, until its next renewal", async () => {
    // Answered in 5 ms, unless its signal aborts first (as the real client).
    const { member, seen } = stubMember(
      (_path, _body, _type, opts) =>
        new Promise((resolve, reject) => {
          const timer = setTimeout(() => resolve({ metadata: { resourceVersion: "2" } }), 5);
          opts.signal.addEventListener("abort", () => {
            clearTimeout(timer);
            reject(opts.signal.reason as Error);
          });
        }),
    );
    await member.start();
    // Only Date is faked: performance.now() goes on as if the machine never slept.
    vi.useFakeTimers({ toFake: ["Date"] });
    try {
      expect(member.mayWork()).toBe(true);
      // Suspended for an hour (or the wall clock stepped forward): CLOCK_MONOTONIC stood still.
      vi.setSystemTime(Date.now() + 3_600_000);
      expect(member.mayWork()).toBe(false);
      // Not fenced meanwhile: the next renewal succeeds, and the replica works again; the
      // membership is not given up for it.
      await vi.waitFor(() => expect(member.mayWork()).toBe(true), { timeout: 5_000 });
      expect(seen.joined).toBe(2);
      expect(seen.lost).toEqual([]);
    } finally {
      vi.useRealTimers();
      await member.stop({ leave: false });
    }
  });
});

describe("MemberLease: work refused meanwhile", () => {
  it("is looked at again after the next renewal even when the wall clock stepped back before it", async () => {
    const { member, seen } = stubMember(() => Promise.resolve({ metadata: { resourceVersion: "2" } }));
    await member.start();
    vi.useFakeTimers({ toFake: ["Date"] });
    try {
      const now = Date.now();
      vi.setSystemTime(now + 3_600_000);
      expect(member.mayWork()).toBe(false); // an object set aside
      vi.setSystemTime(now); // stepped back before the renewal
      expect(member.mayWork()).toBe(true);
      await vi.waitFor(() => expect(seen.joined).toBe(2), { timeout: 5_000 });
    } finally {
      vi.useRealTimers();
      await member.stop({ leave: false });
    }
  });

  it("does not give the membership up when stopped while it reads the Lease after a refused renewal", async () => {
    const conflict = new KubeApiError({ status: 409, reason: "Conflict", message: "modified", method: "PATCH", path: "/lease" });
    let created = false;
    let reading = false;
    const client = {
      // Before it joins: no Lease. After a refused renewal: the read is held until aborted.
      get: (_path: string, opts: { signal: AbortSignal }) => {
        if (!created) return Promise.reject(notFound);
        reading = true;
        return new Promise((_resolve, reject) => opts.signal.addEventListener("abort", () => reject(opts.signal.reason as Error)));
      },
      create: () => {
        created = true;
        return Promise.resolve({ metadata: { resourceVersion: "1" } });
      },
      patch: () => Promise.reject(conflict),
      delete: () => Promise.resolve(undefined),
    } as unknown as KubeClient;
    const lost: string[] = [];
    const member = new MemberLease({ client, namespace: "ns", name: "m-a", identity: "a", ring: "ring", logger: silentLogger(), ...SHORT, onLost: (reason) => lost.push(reason) });
    await member.start();
    await vi.waitFor(() => expect(reading).toBe(true), { timeout: 5_000 });
    await member.stop();
    expect(lost).toEqual([]);
  });
});

describe("MemberLease: a renewal whose answer never came", () => {
  const conflict = new KubeApiError({ status: 409, reason: "Conflict", message: "the object has been modified", method: "PATCH", path: "/lease" });
  const unavailable = new KubeApiError({ status: 503, reason: "ServiceUnavailable", message: "etcd is slow", method: "PATCH", path: "/lease" });
  /** Three times SHORT: wide enough margins between the renew deadlines compared below on a loaded machine. */
  const SLOWER = { leaseDurationMs: 4_500, renewDeadlineMs: 3_000, retryPeriodMs: 600 };
  /** What the API server does with the n-th renewal sent on the right version. */
  type Fate = "ok" | "landed-unanswered" | "unanswered" | "fails";

  /**
   * Replica "a"'s MemberLease on a stub API server that keeps the Lease (version, holder,
   * renewTime) and answers in 20 ms unless the request's signal aborts first, as the real
   * client; `fate` decides each renewal sent on the current version (others get a 409).
   */
  function slowServer(fate: (n: number) => Fate) {
    const lease = { version: 0, renewTime: "", holder: "" };
    const renewals: Array<{ at: number; fate: Fate | "conflict" }> = [];
    let reads = 0;
    const answer = <T>(signal: AbortSignal, value: () => T, fail?: Error) =>
      new Promise<T>((resolve, reject) => {
        const timer = setTimeout(() => (fail ? reject(fail) : resolve(value())), 20);
        signal.addEventListener("abort", () => {
          clearTimeout(timer);
          reject(signal.reason as Error);
        });
      });
    const read = (): Lease => ({ metadata: { name: "m-a", resourceVersion: String(lease.version) }, spec: { holderIdentity: lease.holder, renewTime: lease.renewTime } });
    const client = {
      get: (_path: string, opts: { signal: AbortSignal }) => (lease.version === 0 ? Promise.reject(notFound) : (reads++, answer(opts.signal, read))),
      create: (_path: string, body: Lease) => {
        Object.assign(lease, { version: 1, holder: body.spec?.holderIdentity ?? "", renewTime: body.spec?.renewTime ?? "" });
        return Promise.resolve(read());
      },
      patch: (_path: string, body: { metadata: { resourceVersion?: string }; spec: { renewTime: string } }, _type: string, opts: { signal: AbortSignal }) => {
        const at = performance.now();
        if (body.metadata.resourceVersion !== String(lease.version)) {
          renewals.push({ at, fate: "conflict" });
          return Promise.reject(conflict);
        }
        const f = fate(renewals.filter((r) => r.fate !== "conflict").length + 1);
        renewals.push({ at, fate: f });
        const apply = () => (lease.version++, (lease.renewTime = body.spec.renewTime), read());
        if (f === "fails") return answer(opts.signal, read, unavailable);
        if (f === "ok") return answer(opts.signal, apply);
        if (f === "landed-unanswered") apply();
        return new Promise((_resolve, reject) => opts.signal.addEventListener("abort", () => reject(opts.signal.reason as Error)));
      },
    } as unknown as KubeClient;
    const lost: string[] = [];
    const member = new MemberLease({ client, namespace: "ns", name: "m-a", identity: "a", ring: "ring", logger: silentLogger(), ...SLOWER, onLost: (reason) => lost.push(reason) });
    /** Someone else writes the Lease without renewing it (kubectl annotate, a GitOps tool's label). */
    const annotate = () => lease.version++;
    return { member, lost, renewals, reads: () => reads, annotate };
  }

  it("counts it from when it was sent, if the Lease read after the next renewal's 409 carries its renewTime; never from the read", async () => {
    // Renewal 2 is applied but its answer never comes (the API server's write was slow); the
    // next one, on the version before it, gets a 409 with little time left; every renewal
    // after that fails (the API server still struggling). The write that landed holds the
    // membership for a renew deadline from its sending, and no longer.
    const s = slowServer((n) => (n === 1 ? "ok" : n === 2 ? "landed-unanswered" : "fails"));
    await s.member.start();
    try {
      await vi.waitFor(() => expect(s.reads()).toBe(1), { timeout: 10_000, interval: 10 });
      const landed = s.renewals.find((r) => r.fate === "landed-unanswered")!;
      expect(s.lost).toEqual([]);
      // Past the deadline of renewal 1 (sent at least a retry period before renewal 2), before renewal 2's.
      await sleep(landed.at + SLOWER.renewDeadlineMs - 300 - performance.now());
      expect(s.member.mayWork()).toBe(true);
      // Past renewal 2's deadline: counted from the read, it would still allow work here.
      await sleep(landed.at + SLOWER.renewDeadlineMs + 50 - performance.now());
      expect(s.member.mayWork()).toBe(false);
      await vi.waitFor(() => expect(s.lost).toEqual([`the member Lease was not renewed for ${SLOWER.renewDeadlineMs} ms`]), { timeout: 5_000 });
      // After the 409, the next renewal went at once on the version read, not a retry period later.
      const conflictAt = s.renewals.findIndex((r) => r.fate === "conflict");
      expect(s.renewals[conflictAt + 1]!.at - s.renewals[conflictAt]!.at).toBeLessThan(SLOWER.retryPeriodMs / 2);
    } finally {
      await s.member.stop({ leave: false });
    }
  });

  it("renews at once on the version read after a 409 that shows the Lease still its own, not a retry period later, past the deadline", async () => {
    // Renewal 2 never lands; meanwhile someone annotates the Lease, so renewal 3 (sent with
    // little time left) gets a 409 on a Lease that still names this replica. Waiting a retry
    // period before renewing on the version read would pass the renew deadline.
    const s = slowServer((n) => (n === 2 ? "unanswered" : "ok"));
    await s.member.start();
    try {
      await vi.waitFor(() => expect(s.renewals.some((r) => r.fate === "unanswered")).toBe(true), { timeout: 10_000, interval: 10 });
      s.annotate();
      // Two renewals on the version read, or the membership given up.
      await vi.waitFor(() => expect(s.renewals.filter((r) => r.fate === "ok").length >= 3 || s.lost.length > 0).toBe(true), { timeout: 10_000, interval: 10 });
      expect(s.lost).toEqual([]);
      expect(s.member.mayWork()).toBe(true);
    } finally {
      await s.member.stop({ leave: false });
    }
  });
});

describe("MemberLease: a replica that is stopping", () => {
  function stoppingMember(timings = SHORT) {
    let renewals = 0;
    const deleted: string[] = [];
    const client = {
      get: () => Promise.reject(notFound),
      create: () => Promise.resolve({ metadata: { resourceVersion: "1" } }),
      patch: () => Promise.resolve({ metadata: { resourceVersion: String(1 + ++renewals) } }),
      delete: (path: string) => (deleted.push(path), Promise.resolve(undefined)),
    } as unknown as KubeClient;
    const lost: string[] = [];
    const member = new MemberLease({ client, namespace: "ns", name: "m-a", identity: "a", ring: "ring", logger: silentLogger(), ...timings, onLost: (reason) => lost.push(reason) });
    return { member, lost, deleted, renewals: () => renewals };
  }

  it("renews no more, and deletes the Lease once its reconciles have ended within the renew deadline", async () => {
    // A renew deadline long enough that a loaded machine cannot overshoot it in this test.
    const m = stoppingMember({ leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 200 });
    await m.member.start();
    await vi.waitFor(() => expect(m.renewals()).toBeGreaterThanOrEqual(1), { timeout: 5_000 });
    m.member.stopRenewing();
    const stoppedAt = m.renewals();
    // Still allowed right after: a reconcile in flight finishes its writes.
    expect(m.member.mayWork()).toBe(true);
    await sleep(2 * SHORT.retryPeriodMs);
    expect(m.renewals()).toBe(stoppedAt);
    // The reconciles ended: the Lease is deleted, so the share moves without waiting for it to run out.
    await m.member.stop({ leave: true });
    expect(m.deleted).toEqual(["/apis/coordination.k8s.io/v1/namespaces/ns/leases/m-a"]);
    expect(m.lost).toEqual([]);
  });

  it("loses the membership at the renew deadline of its last renewal if they have not: writes refused, the Lease left to run out", async () => {
    const m = stoppingMember();
    await m.member.start();
    await vi.waitFor(() => expect(m.renewals()).toBeGreaterThanOrEqual(1), { timeout: 5_000 });
    m.member.stopRenewing();
    const stoppedAt = m.renewals();
    // No write may land after the sharder could count the Lease expired; the process must not
    // outlive the membership with a request open (onLost ends it).
    await vi.waitFor(() => expect(m.lost).toHaveLength(1), { timeout: 5_000, interval: 20 });
    expect(m.lost[0]).toMatch(/^stopping, with reconciles still in flight/);
    expect(m.member.mayWork()).toBe(false);
    expect(m.renewals()).toBe(stoppedAt);
    // Ended late: the Lease stays, to run out and be fenced as a killed replica's.
    await m.member.stop({ leave: true });
    expect(m.deleted).toEqual([]);
    expect(m.lost).toHaveLength(1);
  });
});

describe("another member that may be live, by a list of the Leases (not the watch)", () => {
  /** Member Leases as a list answers them, changed by the test. */
  const held = (name: string, holder: string, version: string): Lease => ({
    metadata: { name, resourceVersion: version },
    spec: { holderIdentity: holder, renewTime: "2000-01-01T00:00:00.000000Z", leaseDurationSeconds: 1 },
  });

  it("is one whose Lease changed, or was first seen, less than its lease duration ago: never judged by its renewTime (another machine's clock)", async () => {
    let items: Lease[] = [held("m-h", "h", "10"), held("m-p", "", "11"), held("m-me", "me", "12")];
    const client = { list: () => Promise.resolve({ items }) } as unknown as KubeClient;
    const set = new MemberSet({ client, namespace: "ns", ring: "r", logger: silentLogger(), self: "me", onChange: () => undefined });
    // h's renewTime is years old, as a clock far ahead would see it: seen now, it may be live.
    expect(await set.othersMayBeLive()).toBe(true);
    await sleep(1_100);
    // Unchanged for its lease duration: not renewed. p is fenced (no holder); "me" is this replica.
    expect(await set.othersMayBeLive()).toBe(false);
    items = [held("m-h", "h", "13"), ...items.slice(1)]; // renewed
    expect(await set.othersMayBeLive()).toBe(true);
    items = items.slice(1); // h's Lease gone (it left)
    expect(await set.othersMayBeLive()).toBe(false);
  });
});

describe("the leader's view of a member that joins with its clock behind the leader's", () => {
  it("counts its new Lease from when the watch shows it, not from its renewTime; a Lease of the initial list by its renewTime still", async () => {
    // The leader's watch of the member Leases: an initial list, then what the test pushes.
    const stale = (name: string, holder: string, version: string): Lease => ({
      metadata: { name, namespace: "ns", resourceVersion: version, labels: { [MEMBER_LABEL]: "r" } },
      // 20 s old by the leader's clock: a replica that died long ago, or one whose clock is 20 s behind.
      spec: { holderIdentity: holder, leaseDurationSeconds: 15, acquireTime: new Date(Date.now() - 20_000).toISOString(), renewTime: new Date(Date.now() - 20_000).toISOString() },
    });
    let push: ((event: unknown) => void) | undefined;
    const fenced: string[] = [];
    const client = {
      list: () => Promise.resolve({ kind: "LeaseList", apiVersion: "coordination.k8s.io/v1", metadata: { resourceVersion: "1" }, items: [stale("r-shard-dead", "dead", "1")] }),
      async *watch(_path: string, _opts: unknown, signal?: AbortSignal) {
        const queue: unknown[] = [];
        let wake: (() => void) | undefined;
        push = (event) => {
          queue.push(event);
          wake?.();
        };
        while (!signal?.aborted) {
          if (queue.length === 0) await new Promise<void>((resolve) => ((wake = resolve), signal?.addEventListener("abort", () => resolve(), { once: true })));
          while (queue.length > 0) yield queue.shift() as never;
        }
      },
      patch: (path: string) => (fenced.push(path.split("/").pop() ?? ""), Promise.resolve({})),
    } as unknown as KubeClient;
    const set = new MemberSet({ client, namespace: "ns", ring: "r", logger: silentLogger(), self: "leader", fencing: () => true, onChange: () => undefined });
    await set.start();
    try {
      // A sharder that just started does not give the long-dead replica another lease.
      await vi.waitFor(() => expect(fenced).toEqual(["r-shard-dead"]), { timeout: 2_000 });
      await vi.waitFor(() => expect(push).toBeDefined());
      // Replica b, its node's clock 20 s behind the leader's, creates its Lease now.
      push!({ type: "ADDED", object: stale("r-shard-b", "b", "2") });
      await vi.waitFor(() => expect(set.members()).toContain("b"), { timeout: 2_000 });
      // Looked at every 500 ms: b is not counted expired, so not fenced.
      await sleep(1_200);
      expect(fenced).toEqual(["r-shard-dead"]);
      expect(set.members()).toContain("b");
    } finally {
      await set.stop();
    }
  });
});
