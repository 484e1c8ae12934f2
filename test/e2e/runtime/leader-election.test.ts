// Leader election on a real Lease: two electors, one leads; the other takes over when the
// first releases on shutdown, and when the first silently stops renewing.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type KubeClient, leasesPath } from "../../../src/runtime/kube-client.js";
import { LeaderElector, type HolderRecord, type Lease } from "../../../src/runtime/leader-election.js";
import { Metrics } from "../../../src/runtime/metrics.js";
import { clientFor, createNamespace, deleteNamespace, poll, proxiedClient, testLogger } from "./support.js";

// Short timings for the test; the defaults (15/10/2 s) only make it slower.
const TIMINGS = { leaseDurationMs: 3_000, renewDeadlineMs: 2_000, retryPeriodMs: 500 };

interface Candidate {
  elector: LeaderElector;
  abort: AbortController;
  run: Promise<void>;
  leading: boolean;
  started: number;
  stopped: number;
  metrics: Metrics;
}

function candidate(client: KubeClient, namespace: string, name: string, identity: string, releaseOnCancel = true, timings = TIMINGS, holder?: HolderRecord): Candidate {
  const metrics = new Metrics({ defaultMetrics: false });
  const c = { leading: false, started: 0, stopped: 0, metrics } as Candidate;
  c.abort = new AbortController();
  c.elector = new LeaderElector({
    client,
    namespace,
    name,
    identity,
    ...timings,
    releaseOnCancel,
    logger: testLogger(),
    metrics,
    holder,
    onStartedLeading: () => {
      c.leading = true;
      c.started++;
    },
    onStoppedLeading: () => {
      c.leading = false;
      c.stopped++;
    },
  });
  c.run = c.elector.run(c.abort.signal);
  return c;
}

describe("LeaderElector (real Lease)", () => {
  let client: KubeClient;
  let ns: string;

  beforeAll(async () => {
    client = clientFor();
    ns = await createNamespace(client, "rt-lease");
  });
  afterAll(async () => {
    await deleteNamespace(client, ns);
    await client.close();
  });

  it("exactly one of two candidates leads; the other takes over at once after a release", async () => {
    const a = candidate(client, ns, "le-release", "cand-a");
    const b = candidate(client, ns, "le-release", "cand-b");
    try {
      await poll(() => a.leading || b.leading, 60_000, "a leader");
      // Observe for a while: never two leaders.
      for (let i = 0; i < 20; i++) {
        expect(a.leading && b.leading).toBe(false);
        await new Promise((r) => setTimeout(r, 100));
      }
      const [leader, follower] = a.leading ? [a, b] : [b, a];
      const lease = await client.get<Lease>(leasesPath(ns, "le-release"));
      expect(lease.spec?.holderIdentity).toBe(leader.elector.identity);
      expect(follower.elector.getLeader()).toBe(leader.elector.identity);
      expect(await leader.metrics.registry.metrics()).toMatch(/leader_election_master_status\{name="le-release"\} 1/);
      expect(await follower.metrics.registry.metrics()).toMatch(/leader_election_master_status\{name="le-release"\} 0/);
      const transitionsBefore = lease.spec?.leaseTransitions ?? 0;

      leader.abort.abort();
      await leader.run;
      expect(leader.stopped).toBe(1);
      const released = await client.get<Lease>(leasesPath(ns, "le-release"));
      // Either still released or already taken by the follower.
      expect([null, undefined, "", follower.elector.identity]).toContain(released.spec?.holderIdentity);

      await poll(() => follower.leading, 30_000, "follower to take over");
      const after = await client.get<Lease>(leasesPath(ns, "le-release"));
      expect(after.spec?.holderIdentity).toBe(follower.elector.identity);
      expect(after.spec?.leaseTransitions).toBe(transitionsBefore + 1);
    } finally {
      a.abort.abort();
      b.abort.abort();
      await Promise.all([a.run, b.run]);
    }
  });

  it("a leader that stops renewing loses the lease to the other after it expires", async () => {
    const { proxy, client: throughProxy } = await proxiedClient(undefined, 1_000);
    // a talks through the proxy and acquires first; b talks directly.
    const a = candidate(throughProxy, ns, "le-expire", "cand-a", false);
    try {
      await poll(() => a.leading, 60_000, "a to lead");
      const b = candidate(client, ns, "le-expire", "cand-b");
      try {
        await new Promise((r) => setTimeout(r, 1_000));
        expect(b.leading).toBe(false);
        // Cut a off from the API server: it can no longer renew.
        proxy.freezeAll();
        await proxy.close();
        await poll(() => b.leading, 60_000, "b to take over the expired lease");
        // a noticed it could not renew within renewDeadline and stepped down on its own.
        await poll(() => !a.leading, 60_000, "a to step down");
        expect(a.stopped).toBe(1);
        const lease = await client.get<Lease>(leasesPath(ns, "le-expire"));
        expect(lease.spec?.holderIdentity).toBe("cand-b");
      } finally {
        b.abort.abort();
        await b.run;
      }
    } finally {
      a.abort.abort();
      await a.run;
      await throughProxy.close();
    }
  });

  it("a candidate takes the Lease at once from a holder it knows has ended (its crash reported) and that renews no more, and not before", async () => {
    const name = "holder-ended";
    // Ten minutes: only the holder's end can change hands within this test.
    const LONG = { leaseDurationMs: 600_000, renewDeadlineMs: 400_000, retryPeriodMs: 300 };
    const endedProcesses = new Set<string>();
    const record = (proc: string): HolderRecord => ({
      annotations: () => ({ "test.agentcompute.dev/process": proc }),
      ended: (lease) => endedProcesses.has(lease.metadata.annotations?.["test.agentcompute.dev/process"] ?? ""),
      silenceMs: 1_000,
    });
    const a = candidate(client, ns, name, "a", false, LONG, record("a-1"));
    await poll(() => a.leading, 10_000, "a to lead");
    const b = candidate(client, ns, name, "b", true, LONG, record("b-1"));
    try {
      await new Promise((resolve) => setTimeout(resolve, 1_500)); // several looks at a held Lease
      expect(b.leading).toBe(false);
      expect((await client.get<Lease>(leasesPath(ns, name))).metadata.annotations?.["test.agentcompute.dev/process"]).toBe("a-1");
      // Judged ended (a clock gone wrong) while it still renews: the report alone takes nothing.
      endedProcesses.add("a-1");
      await new Promise((resolve) => setTimeout(resolve, 2_500));
      expect(b.leading).toBe(false);
      expect(a.leading).toBe(true);

      // a's process ends without releasing the Lease (a crash): b leads once the Lease is silent too.
      a.abort.abort();
      await a.run;
      await poll(() => b.leading, 10_000, "b to take the Lease over");
      const lease = await client.get<Lease>(leasesPath(ns, name));
      expect(lease.spec?.holderIdentity).toBe("b");
      expect(lease.metadata.annotations?.["test.agentcompute.dev/process"]).toBe("b-1"); // its own record, not a's
    } finally {
      b.abort.abort();
      await b.run;
    }
  });

  it("a candidate looks again the moment the lease it watches runs out, not a retry period later", async () => {
    // The Lease of a leader that died: 2 s, never renewed again.
    await client.create<Lease>(leasesPath(ns), {
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: { name: "le-dead", namespace: ns },
      spec: { holderIdentity: "cand-dead", leaseDurationSeconds: 2, renewTime: new Date().toISOString().replace("Z", "000Z") },
    });
    // A retry period of 8 s: a candidate that only looked every retry period would take the
    // lease 8 s after its first look at the earliest.
    const b = candidate(client, ns, "le-dead", "cand-b", true, { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 8_000 });
    try {
      const firstLook = Date.now();
      await poll(() => b.leading, 60_000, "b to take the lease");
      expect(Date.now() - firstLook).toBeLessThan(6_000);
      const lease = await client.get<Lease>(leasesPath(ns, "le-dead"));
      expect(lease.spec).toMatchObject({ holderIdentity: "cand-b", leaseTransitions: 1 });
    } finally {
      b.abort.abort();
      await b.run;
    }
  });
});
