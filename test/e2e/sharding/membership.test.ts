// Membership on a real API server: timing is not trusted alone to keep two replicas off one
// object. The sharder fences an expired member Lease before it counts the member gone (a
// renewal it had not seen makes the fence fail); a fenced member stops at its next renewal; a
// member does no work once a renewal is overdue (a stalled process); and a restarted process of
// the same identity takes a fenced Lease back only once nothing carries its owner label.
import { pino, type Logger } from "pino";
import { beforeAll, describe, expect, it } from "vitest";
import { GROUP, VERSION, kindNames } from "../../../src/api/names.js";
import { leasesPath, resourcePath, type KubeClient } from "../../../src/runtime/kube-client.js";
import type { Lease } from "../../../src/runtime/leader-election.js";
import { OWNER_LABEL, ownerSelector } from "../../../src/sharding/labels.js";
import { MemberLease, MemberSet, type MemberSetOptions } from "../../../src/sharding/membership.js";
import { OPERATOR_CONTAINER, killedContainer, kubeletTime, podForReplica, reportContainer } from "../../../dev/kubelet.js";
import { CrashReports } from "../../../src/sharding/crash-report.js";
import { FENCED_BECAUSE_ANNOTATION, FENCED_MEMBER_ANNOTATION, HEIRS_ANNOTATION, INHERITS_ANNOTATION, STOPPING_ANNOTATION, type SuccessionView } from "../../../src/sharding/succession.js";
import { clientFor, clusterFor, poll, proxiedClient, testLogger } from "../runtime/support.js";
import { adminAndNamespaces, fenceMemberLease } from "./support.js";

const RING = "ring-test";
/** Short timings, in the ratios of the defaults (15 s / 10 s / 2 s). */
const TIMINGS = { leaseDurationMs: 3_000, renewDeadlineMs: 2_000, retryPeriodMs: 400 };

const suite = adminAndNamespaces("membership");
const namespace = (): Promise<string> => suite.namespace();
let admin: KubeClient;
beforeAll(() => {
  admin = suite.admin();
});

/** `ownsChecks` counts the times it asked whether objects still carry its owner label. */
function member(ns: string, identity: string, lost: string[] = [], ownsChecks = { count: 0 }): MemberLease {
  return new MemberLease({
    client: admin,
    namespace: ns,
    name: `m-${identity}`,
    identity,
    ring: RING,
    logger: testLogger(),
    ...TIMINGS,
    onLost: (reason) => lost.push(reason),
    ownsObjects: async (signal) => {
      ownsChecks.count++;
      return (await admin.list(sandboxesPath(ns), { labelSelector: ownerSelector(identity), limit: 1, signal })).items.length > 0;
    },
  });
}

/**
 * Member "pod-a", whose identity is its Pod's name (POD_NAME, as in manifests/) and whose
 * Lease records its process (Pod `uid`, as crash-report.ts reads it), and member "b".
 */
function podMemberAndAnother(ns: string, uid: string, timings: typeof TIMINGS): { a: MemberLease; b: MemberLease } {
  const common = { client: admin, namespace: ns, ring: RING, logger: testLogger(), ...timings, onLost: () => undefined };
  return {
    a: new MemberLease({ ...common, name: "m-a", identity: "pod-a", process: { namespace: ns, pod: "pod-a", uid, container: OPERATOR_CONTAINER, since: new Date().toISOString() } }),
    b: new MemberLease({ ...common, name: "m-b", identity: "b" }),
  };
}

/** A logger keeping each message with the performance.now() it was logged at. */
function recordingLogger(logged: Array<{ msg: string; at: number }>): Logger {
  return pino({ level: "debug" }, { write: (line: string) => logged.push({ msg: (JSON.parse(line) as { msg: string }).msg, at: performance.now() }) });
}

function memberSet(ns: string, client: KubeClient, seen: string[][], overrides: Partial<MemberSetOptions> = {}): MemberSet {
  return new MemberSet({ client, namespace: ns, ring: RING, logger: testLogger(), leaseDurationMs: TIMINGS.leaseDurationMs, fencing: () => true, onChange: (m) => seen.push(m), ...overrides });
}

/** Fences member `identity`'s Lease as the sharder does (naming `heirs`). */
const fence = (ns: string, identity: string, heirs: string[] = []): Promise<void> => fenceMemberLease(admin, ns, `m-${identity}`, heirs);

const sandboxesPath = (ns: string): string => resourcePath({ group: GROUP, version: VERSION, plural: kindNames.sandbox.plural, namespace: ns });

/**
 * A client of the test API server acting as ServiceAccount `name` of `ns` (impersonated), which
 * a Role of `rules` in `ns` binds: RBAC decides its requests, as a replica's in a cluster.
 */
async function actingAs(ns: string, name: string, rules: unknown[]): Promise<KubeClient> {
  await admin.create(`/api/v1/namespaces/${ns}/serviceaccounts`, { apiVersion: "v1", kind: "ServiceAccount", metadata: { name } });
  await admin.create(`/apis/rbac.authorization.k8s.io/v1/namespaces/${ns}/roles`, { apiVersion: "rbac.authorization.k8s.io/v1", kind: "Role", metadata: { name }, rules });
  await admin.create(`/apis/rbac.authorization.k8s.io/v1/namespaces/${ns}/rolebindings`, {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "RoleBinding",
    metadata: { name },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name },
    subjects: [{ kind: "ServiceAccount", name, namespace: ns }],
  });
  const cluster = clusterFor();
  return clientFor({
    ...cluster,
    credentials: async (force) => {
      const c = await cluster.credentials(force);
      return { ...c, headers: { ...c.headers, "impersonate-user": `system:serviceaccount:${ns}:${name}` } };
    },
  });
}

const holderOf = async (ns: string, identity: string): Promise<string> =>
  (await admin.get<Lease>(leasesPath(ns, `m-${identity}`))).spec?.holderIdentity ?? "";

/**
 * A Sandbox still labelled for "a" (its share not moved yet): a restarted process of "a" waits,
 * the Lease as `whileWaiting` checks it, and joins once the Sandbox has moved to "b".
 */
async function joinsOnceItsShareMoved(ns: string, whileWaiting: () => Promise<void>): Promise<void> {
  const sandboxes = sandboxesPath(ns);
  await admin.create(sandboxes, {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "Sandbox",
    metadata: { name: "left-behind", labels: { [OWNER_LABEL]: "a" } },
    spec: { tier: "standard" },
  });
  const ownsChecks = { count: 0 };
  const restarted = member(ns, "a", [], ownsChecks);
  const joined = restarted.start();
  try {
    // It looked, found the object, and looked again: it waits rather than joins.
    await poll(() => ownsChecks.count >= 3, 10_000, "the restarted process looking again");
    expect(restarted.mayWork()).toBe(false);
    await whileWaiting();

    await admin.patch(`${sandboxes}/left-behind`, { metadata: { labels: { [OWNER_LABEL]: "b" } } }, "merge"); // moved
    await joined;
    expect(restarted.mayWork()).toBe(true);
    expect(await holderOf(ns, "a")).toBe("a");
    // A fence of the process before, and the heirs it named, are not on the Lease taken back.
    expect((await admin.get<Lease>(leasesPath(ns, "m-a"))).metadata.annotations ?? {}).toEqual({});
  } finally {
    await restarted.stop();
  }
}

describe("shard membership (real API server)", () => {
  it("a sharder that stopped seeing a member's renewals (its watch stalled) does not count it gone: the fence fails on the renewal", async () => {
    const ns = await namespace();
    const lost: string[] = [];
    const a = member(ns, "a", lost);
    await a.start();
    // Requests time out in 2 s (a write sent on a stalled connection is retried on a new one);
    // the watch does not.
    const proxied = await proxiedClient(clusterFor(), 2_000);
    const seen: string[][] = [];
    const logged: Array<{ msg: string; at: number }> = [];
    const set = memberSet(ns, proxied.client, seen, { logger: recordingLogger(logged) });
    try {
      await set.start();
      await poll(() => set.members().includes("a"), 10_000, "the member seen");
      // Its watch, opened after the list, is open (a stall before would only hold up the list).
      await poll(() => proxied.proxy.connections >= 2, 10_000, "the watch open");
      await new Promise((r) => setTimeout(r, 2 * TIMINGS.retryPeriodMs));
      // The sharder's connections stall: no event reaches it for three lease durations, while
      // the member renews every 400 ms.
      proxied.proxy.freezeAll();
      await new Promise((r) => setTimeout(r, 3 * TIMINGS.leaseDurationMs));
      // It did try to fence, and the API server refused: the Lease had been renewed since.
      await poll(
        () => logged.some((l) => l.msg === "a member Lease counted gone changed since it was seen: renewed (or taken by a new process of its identity), not gone"),
        10_000,
        "the fence refused",
      );
      expect(seen.filter((m) => !m.includes("a")), "a membership without the live member").toEqual([]);
      expect(await holderOf(ns, "a")).toBe("a");
      expect(lost).toEqual([]);
      expect(a.mayWork()).toBe(true);
    } finally {
      await set.stop();
      await proxied.close();
      await a.stop();
    }
  });

  it("fences the Lease of a member that stopped renewing, then counts it gone; a fenced member stops at its next renewal", async () => {
    const ns = await namespace();
    const seen: string[][] = [];
    const set = memberSet(ns, admin, seen);
    const lostA: string[] = [];
    const a = member(ns, "a", lostA);
    const b = member(ns, "b");
    await Promise.all([a.start(), b.start()]);
    await set.start();
    try {
      await poll(() => set.members().length === 2, 10_000, "both members seen");
      // a's process stops without leaving (reconciles still in flight): its Lease expires and is fenced.
      await a.stop({ leave: false });
      await poll(() => set.members().join() === "b", 10_000, "a counted gone");
      expect(await holderOf(ns, "a")).toBe("");
      // The fence names a's heirs, the members live then: another replica's view (no fencing) reads them.
      const fenced = await admin.get<Lease>(leasesPath(ns, "m-a"));
      expect(fenced.metadata.annotations).toMatchObject({ [FENCED_MEMBER_ANNOTATION]: "a", [HEIRS_ANNOTATION]: "b" });
      const views: SuccessionView[] = [];
      const other = memberSet(ns, admin, [], { fencing: () => false, onSuccession: (v) => views.push(v) });
      await other.start();
      try {
        expect(views.at(-1)).toEqual({ holders: new Set(["b"]), heirs: new Map([["a", ["b"]]]) });
      } finally {
        await other.stop();
      }

      // b's Lease is fenced while b still runs (as by a sharder whose view of it ran out): b's
      // next renewal fails on it, and b stops working.
      const lostB: string[] = [];
      const b2 = member(ns, "b2", lostB);
      await b2.start();
      await fence(ns, "b2");
      await poll(() => lostB.length > 0, 5_000, "b2 to lose its membership");
      expect(lostB[0]).toMatch(/fenced/);
      expect(b2.mayWork()).toBe(false);
      await b2.stop();
      expect(await holderOf(ns, "b2")).toBe(""); // a fenced Lease is not deleted on the way out
    } finally {
      await set.stop();
      await b.stop();
    }
  });

  it("a member Lease deleted by hand counts until it would have run out (its replica stops meanwhile), also while its replica drains after SIGTERM; one deleted by its replica leaving counts gone at once", async () => {
    const ns = await namespace();
    // Twice the short timings: "not before the lease" must hold with room on a slow machine.
    const timings = { leaseDurationMs: 6_000, renewDeadlineMs: 4_000, retryPeriodMs: 800 };
    const common = { client: admin, namespace: ns, ring: RING, logger: testLogger(), ...timings };
    const lostA: string[] = [];
    const a = new MemberLease({ ...common, name: "m-a", identity: "a", onLost: (reason) => lostA.push(reason) });
    const b = new MemberLease({ ...common, name: "m-b", identity: "b", onLost: () => undefined });
    const c = new MemberLease({ ...common, name: "m-c", identity: "c", onLost: () => undefined });
    const set = memberSet(ns, admin, [], { leaseDurationMs: timings.leaseDurationMs });
    await Promise.all([a.start(), b.start(), c.start()]);
    await set.start();
    /** kubectl delete lease, on the version read (so no renewal lands between): when that version was renewed. */
    const deleteByHand = async (identity: string): Promise<number> => {
      for (;;) {
        const held = await admin.get<Lease>(leasesPath(ns, `m-${identity}`));
        try {
          await admin.delete(leasesPath(ns, `m-${identity}`), { preconditions: { resourceVersion: held.metadata.resourceVersion } });
          return Date.parse(held.spec?.renewTime ?? "");
        } catch (err) {
          if ((err as { status?: number }).status !== 409) throw err;
        }
      }
    };
    try {
      await poll(() => set.members().length === 3, 10_000, "the members seen");
      // A replica at work: it stops once it notices, and its share moves only once its Lease
      // would have run out (a lease duration after its last renewal), not as the deletion is seen.
      const renewedA = await deleteByHand("a");
      await poll(() => lostA.length > 0, 5_000, "a to lose its membership");
      expect(lostA[0]).toMatch(/deleted/);
      expect(a.mayWork()).toBe(false);
      await poll(() => !set.members().includes("a"), 15_000, "a counted gone");
      expect(Date.now() - renewedA).toBeGreaterThanOrEqual(timings.leaseDurationMs - 100);

      // A replica draining after SIGTERM (its Lease says it is stopping, its reconciles still run):
      // deleted by hand, it is waited out the same way.
      b.stopRenewing();
      await poll(async () => (await admin.get<Lease>(leasesPath(ns, "m-b"))).metadata.annotations?.[STOPPING_ANNOTATION] === "true", 5_000, "b's stop said");
      // Still a member (what it owns stays its own until it leaves), but placed nothing new on.
      await poll(() => set.members().join() === "b,c" && set.eligible().join() === "c", 5_000, "b live, taking nothing on");
      const renewedB = await deleteByHand("b");
      await poll(() => !set.members().includes("b"), 15_000, "b counted gone");
      expect(Date.now() - renewedB).toBeGreaterThanOrEqual(timings.leaseDurationMs - 100);

      // c leaves (its reconciles over): its Lease says so before it is deleted, and c counts
      // gone at once, well inside a lease duration.
      await c.stop();
      await poll(() => set.members().length === 0, timings.leaseDurationMs - 2_000, "c counted gone as it left");
    } finally {
      await set.stop();
      await a.stop();
      await b.stop();
      await c.stop();
    }
  });

  it("a member fenced while it runs stops as soon as the watch of the member Leases shows the fence, not at its next renewal", async () => {
    const ns = await namespace();
    // Renewals two minutes apart: only the watch can tell it within the poll below.
    const lost: string[] = [];
    const c = new MemberLease({
      client: admin,
      namespace: ns,
      name: "m-c",
      identity: "c",
      ring: RING,
      logger: testLogger(),
      leaseDurationMs: 600_000,
      renewDeadlineMs: 300_000,
      retryPeriodMs: 120_000,
      onLost: (reason) => lost.push(reason),
    });
    const set = memberSet(ns, admin, [], { fencing: () => false, self: "c", ownLease: { name: "m-c", taken: () => c.checkHeld() } });
    await c.start();
    await set.start();
    try {
      await poll(() => set.members().includes("c"), 10_000, "the member seen");
      // A look while the Lease is still held costs a renewal, not the membership.
      c.checkHeld();
      await poll(
        async () => {
          const spec = (await admin.get<Lease>(leasesPath(ns, "m-c"))).spec;
          return spec?.renewTime !== spec?.acquireTime;
        },
        10_000,
        "the early renewal",
      );
      expect(lost).toEqual([]);
      expect(c.mayWork()).toBe(true);

      await fence(ns, "c");
      await poll(() => lost.length > 0, 30_000, "c to lose its membership");
      expect(lost[0]).toMatch(/fenced/);
      expect(c.mayWork()).toBe(false);
    } finally {
      await set.stop();
      await c.stop();
    }
  });

  it("counts a member gone, and fences it, once its Pod's status proves its process ended, long before its Lease runs out; an earlier run's end proves nothing", async () => {
    const ns = await namespace();
    // Leases of ten minutes: only the kubelet's report can end a membership within this test.
    const LONG = { leaseDurationMs: 600_000, renewDeadlineMs: 400_000, retryPeriodMs: 400 };
    // The Pod's container restarted before the process (no kubelet runs here: the test writes what it would).
    const { POD_UID: uid = "" } = await podForReplica(admin, ns, "pod-a");
    await reportContainer(admin, ns, "pod-a", {
      restartCount: 1,
      state: { running: { startedAt: kubeletTime(Date.now() - 5_000) } },
      lastState: { terminated: { exitCode: 137, reason: "Error", startedAt: kubeletTime(Date.now() - 20_000), finishedAt: kubeletTime(Date.now() - 10_000) } },
    });
    const { a, b } = podMemberAndAnother(ns, uid, LONG);
    await Promise.all([a.start(), b.start()]);
    const seen: string[][] = [];
    const crashReports = new CrashReports({ client: admin, namespace: ns, logger: testLogger() });
    const set = memberSet(ns, admin, seen, { leaseDurationMs: LONG.leaseDurationMs, crashReports });
    await set.start();
    try {
      await poll(() => set.members().length === 2 && crashReports.hasSynced(), 10_000, "both members seen, and the Pods");
      // The report is of runs before a's process (its container restarted before it started): a stays.
      await new Promise((resolve) => setTimeout(resolve, 3_000));
      expect(seen.filter((m) => !m.includes("pod-a")), "a membership without a").toEqual([]);
      expect(await holderOf(ns, "a")).toBe("pod-a");

      // a is killed (its Lease left to run out in ten minutes), and the kubelet reports its container's end.
      await a.stop({ leave: false });
      await reportContainer(admin, ns, "pod-a", killedContainer());
      await poll(() => set.members().join() === "b", 10_000, "a counted gone on the kubelet's report");
      const fenced = await admin.get<Lease>(leasesPath(ns, "m-a"));
      expect(fenced.spec?.holderIdentity).toBe("");
      expect(fenced.metadata.annotations).toMatchObject({ [FENCED_MEMBER_ANNOTATION]: "pod-a", [HEIRS_ANNOTATION]: "b", [FENCED_BECAUSE_ANNOTATION]: "crash-reported" });
    } finally {
      await set.stop();
      await b.stop();
    }
  });

  it("without leave to list Pods, says so once and goes by the Leases: a member whose crash its Pod reports counts gone when its Lease runs out", async () => {
    const ns = await namespace();
    // A replica whose Role predates the Pods rule: its Leases, nothing else.
    const replica = await actingAs(ns, "replica", [{ apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["get", "list", "watch", "create", "update", "patch", "delete"] }]);
    const MEDIUM = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 400 };
    const { POD_UID: uid = "" } = await podForReplica(admin, ns, "pod-a");
    const { a, b } = podMemberAndAnother(ns, uid, MEDIUM);
    await Promise.all([a.start(), b.start()]);
    const logged: Array<{ msg: string; at: number }> = [];
    const crashReports = new CrashReports({ client: replica, namespace: ns, logger: recordingLogger(logged) });
    const set = memberSet(ns, replica, [], { leaseDurationMs: MEDIUM.leaseDurationMs, crashReports });
    await set.start();
    try {
      await poll(() => set.members().length === 2, 10_000, "both members seen");
      expect(logged.filter((l) => l.msg.startsWith("crash reports off")).length).toBe(1);
      expect(crashReports.hasSynced()).toBe(false);

      await a.stop({ leave: false });
      await reportContainer(admin, ns, "pod-a", killedContainer());
      // With the report read, a would be gone within about 3 s (the test above); here its Lease decides.
      await new Promise((resolve) => setTimeout(resolve, 6_000));
      expect(set.members()).toEqual(["b", "pod-a"]);
      await poll(() => set.members().join() === "b", 30_000, "a counted gone when its Lease ran out");
      const fenced = await admin.get<Lease>(leasesPath(ns, "m-a"));
      expect(fenced.metadata.annotations).toMatchObject({ [FENCED_MEMBER_ANNOTATION]: "pod-a", [FENCED_BECAUSE_ANNOTATION]: "lease-expired" });
      expect(logged.filter((l) => l.msg.startsWith("crash reports off")).length).toBe(1);
    } finally {
      await set.stop();
      await b.stop();
      await replica.close();
    }
  });

  it("a restarted process of a fenced identity whose view of the members went stale does not join while another member renews", async () => {
    const ns = await namespace();
    const h = member(ns, "h");
    const a = member(ns, "a");
    await Promise.all([h.start(), a.start()]);
    // a's process dies; the sharder fences its Lease, naming h, who works on a's objects.
    await a.stop({ leave: false });
    await fence(ns, "a", ["h"]);
    // The restarted process's view of the members, through a proxy whose connections then stall.
    const proxied = await proxiedClient(clusterFor(), 2_000);
    const set = memberSet(ns, proxied.client, [], { fencing: () => false, self: "a" });
    const looks = { count: 0 };
    const restarted = new MemberLease({
      client: admin,
      namespace: ns,
      name: "m-a",
      identity: "a",
      ring: RING,
      logger: testLogger(),
      ...TIMINGS,
      onLost: () => undefined,
      // Its caches still hold objects labelled for it: h has not relabelled them yet.
      ownsObjects: (signal) => {
        looks.count++;
        return set.shareStillMoving("a", () => true, signal);
      },
    });
    let joined: Promise<void> | undefined;
    try {
      await set.start();
      await poll(() => set.members().includes("h"), 10_000, "h seen");
      await poll(() => proxied.proxy.connections >= 2, 10_000, "the watch open");
      proxied.proxy.freezeAll();
      joined = restarted.start();
      // No event for a lease duration: the view counts h gone, though h renews all along.
      await poll(() => set.members().length === 0, 10_000, "the stale view showing no member");
      const then = looks.count;
      await poll(() => looks.count >= then + 3, 20_000, "the restarted process looking again");
      expect(restarted.mayWork()).toBe(false);
      expect(await holderOf(ns, "a")).toBe("");

      // h leaves: a list of the Leases shows nobody to take the share, and a joins.
      await h.stop();
      await joined;
      expect(restarted.mayWork()).toBe(true);
      expect(await holderOf(ns, "a")).toBe("a");
    } finally {
      await restarted.stop();
      await set.stop();
      await proxied.close();
      await h.stop();
    }
  });

  it("names as heirs only the members that are not stopping (a stopping one says so on its Lease, without renewing it)", async () => {
    const ns = await namespace();
    const set = memberSet(ns, admin, []);
    const [a, b, c] = [member(ns, "a"), member(ns, "b"), member(ns, "c")];
    await Promise.all([a.start(), b.start(), c.start()]);
    await set.start();
    try {
      await poll(() => set.members().length === 3, 10_000, "three members seen");
      await a.stop({ leave: false }); // dies: fenced a lease duration (3 s) after its last renewal
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const before = (await admin.get<Lease>(leasesPath(ns, "m-b"))).spec?.renewTime;
      b.stopRenewing(); // SIGTERM: its Lease runs on for up to a lease duration
      await poll(async () => (await admin.get<Lease>(leasesPath(ns, "m-b"))).metadata.annotations?.[STOPPING_ANNOTATION] === "true", 5_000, "b's stop said");
      expect((await admin.get<Lease>(leasesPath(ns, "m-b"))).spec?.renewTime).toBe(before); // not renewed by saying it
      await poll(async () => (await holderOf(ns, "a")) === "", 10_000, "a fenced");
      expect((await admin.get<Lease>(leasesPath(ns, "m-a"))).metadata.annotations?.[HEIRS_ANNOTATION]).toBe("c");
    } finally {
      await set.stop();
      await b.stop();
      await c.stop();
    }
  });

  it("never fences the Lease of its own replica (its own renewals govern it)", async () => {
    const ns = await namespace();
    const a = member(ns, "a");
    await a.start();
    await a.stop({ leave: false }); // its Lease runs out
    const seen: string[][] = [];
    const set = memberSet(ns, admin, seen, { self: "a" });
    try {
      await set.start();
      await new Promise((r) => setTimeout(r, TIMINGS.leaseDurationMs + 1_500));
      expect(await holderOf(ns, "a")).toBe("a");
      expect(set.members()).toEqual(["a"]);
    } finally {
      await set.stop();
    }
  });

  it("does no work once a renewal is overdue (a process that was stalled), and gives its membership up", async () => {
    const ns = await namespace();
    const lost: string[] = [];
    const a = member(ns, "a", lost);
    await a.start();
    try {
      expect(a.mayWork()).toBe(true);
      // The event loop is held past the renew deadline: the first thing that runs afterwards
      // (a work queue's timer) must find the membership in doubt.
      const until = performance.now() + TIMINGS.renewDeadlineMs + 200;
      while (performance.now() < until) {
        // busy: a stopped process
      }
      expect(a.mayWork()).toBe(false);
      // Past the renew deadline the sharder may have counted it gone: it does not come back.
      await poll(() => lost.length > 0, 5_000, "the membership given up");
      expect(lost[0]).toMatch(/not renewed/);
      expect(a.mayWork()).toBe(false);
    } finally {
      await a.stop();
    }
  });

  it("a restarted process of a fenced member's identity joins only once nothing carries its owner label", async () => {
    const ns = await namespace();
    const a = member(ns, "a");
    await a.start();
    await a.stop({ leave: false });
    // The sharder fenced it (naming an heir), and has not moved this Sandbox off it yet.
    await fence(ns, "a", ["b"]);
    await joinsOnceItsShareMoved(ns, async () => expect(await holderOf(ns, "a")).toBe(""));
  });

  it("nor while another member's Lease says it works on that identity's objects (inherited from the fence)", async () => {
    const ns = await namespace();
    const a = member(ns, "a");
    const b = member(ns, "b");
    await Promise.all([a.start(), b.start()]);
    await a.stop({ leave: false });
    await fence(ns, "a", ["b"]);
    await b.publishInherits(["a"]);
    expect((await admin.get<Lease>(leasesPath(ns, "m-b"))).metadata.annotations?.[INHERITS_ANNOTATION]).toBe("a");
    const view = memberSet(ns, admin, [], { fencing: () => false });
    await view.start();
    const checks = { count: 0 };
    const restarted = new MemberLease({
      client: admin,
      namespace: ns,
      name: "m-a",
      identity: "a",
      ring: RING,
      logger: testLogger(),
      ...TIMINGS,
      onLost: () => undefined,
      ownsObjects: () => {
        checks.count++;
        return Promise.resolve(view.inheritsFrom("a"));
      },
    });
    const joined = restarted.start();
    try {
      await poll(() => checks.count >= 3, 10_000, "the restarted process looking again");
      expect(restarted.mayWork()).toBe(false);
      expect(await holderOf(ns, "a")).toBe("");
      // b has stopped working on a's objects (they all moved), and says so.
      await b.publishInherits([]);
      await joined;
      expect(restarted.mayWork()).toBe(true);
      expect((await admin.get<Lease>(leasesPath(ns, "m-b"))).metadata.annotations?.[INHERITS_ANNOTATION]).toBeUndefined();
    } finally {
      await restarted.stop();
      await view.stop();
      await b.stop();
    }
  });

  it("so does one whose earlier process left (its Lease deleted) while its share was still being moved", async () => {
    const ns = await namespace();
    const a = member(ns, "a");
    await a.start();
    await a.stop(); // left the ring: the Lease is deleted, and the sharder moves the share
    const noLease = async (): Promise<void> => {
      await expect(admin.get(leasesPath(ns, "m-a"))).rejects.toMatchObject({ status: 404 });
    };
    await noLease();
    await joinsOnceItsShareMoved(ns, noLease);
  });

  it("the leader deletes a fenced Lease once nothing carries its member's owner label, and not before four lease durations", async () => {
    const ns = await namespace();
    // Two replicas crash: their Leases run out and are fenced. An object still carries a's label.
    const a = member(ns, "a");
    const c = member(ns, "c");
    await Promise.all([a.start(), c.start()]);
    await Promise.all([a.stop({ leave: false }), c.stop({ leave: false })]);
    let inUse = new Set(["m-a"]);
    const logged: Array<{ msg: string; at: number }> = [];
    const set = memberSet(ns, admin, [], { logger: recordingLogger(logged), leasesInUse: () => inUse });
    const exists = (name: string): Promise<boolean> => admin.get(leasesPath(ns, name)).then(
      () => true,
      () => false,
    );
    try {
      await set.start();
      await poll(async () => (await holderOf(ns, "a")) === "" && (await holderOf(ns, "c")) === "", 10_000, "both fenced");
      await poll(() => logged.filter((l) => l.msg.startsWith("a fenced member Lease")).length === 2, 10_000, "both fences seen");
      // When the MemberSet saw the fences: the four lease durations count from there.
      const fencedAt = Math.max(...logged.filter((l) => l.msg.startsWith("a fenced member Lease")).map((l) => l.at));
      // Three lease durations after the fence, neither is deleted, though nothing carries c's label.
      await new Promise((r) => setTimeout(r, 3 * TIMINGS.leaseDurationMs));
      expect(await exists("m-c")).toBe(true);
      expect(await exists("m-a")).toBe(true);

      await poll(async () => !(await exists("m-c")), 3 * TIMINGS.leaseDurationMs, "c's fenced Lease deleted");
      // A slow machine only makes this longer.
      expect(performance.now() - fencedAt).toBeGreaterThanOrEqual(4 * TIMINGS.leaseDurationMs);
      // a's share is still being moved: its Lease stays until nothing carries its label.
      await new Promise((r) => setTimeout(r, 2 * TIMINGS.leaseDurationMs));
      expect(await exists("m-a")).toBe(true);
      inUse = new Set();
      await poll(async () => !(await exists("m-a")), 3 * TIMINGS.leaseDurationMs, "a's fenced Lease deleted");
    } finally {
      await set.stop();
    }
  });
});
