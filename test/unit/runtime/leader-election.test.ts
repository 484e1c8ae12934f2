// The leader's write gate (LeaderElector.mayLead): a leader whose process stalled past its
// renew deadline (a VM frozen, a CPU starved) wakes up still "leading" until its renew loop
// looks again, while another may have taken the Lease; its writes are refused meanwhile. The
// API server here is an in-memory Lease store (resourceVersion checked, as the real one does):
// the elector's reads and writes of one Lease, nothing more. The election against a real API
// server is in test/e2e/runtime/leader-election.test.ts.
import { describe, expect, it } from "vitest";
import { KubeApiError, type KubeClient } from "../../../src/runtime/kube-client.js";
import { LeaderElector } from "../../../src/runtime/leader-election.js";
import { silentLogger } from "../../../src/runtime/logging.js";

interface Lease {
  metadata: { name: string; namespace: string; resourceVersion?: string };
  spec?: Record<string, unknown>;
}

function leaseStore(): KubeClient {
  let lease: Lease | undefined;
  let version = 0;
  const stored = (l: Lease): Lease => {
    lease = structuredClone({ ...l, metadata: { ...l.metadata, resourceVersion: String(++version) } });
    return structuredClone(lease);
  };
  return {
    get: async (path: string) => {
      if (lease === undefined) throw new KubeApiError({ status: 404, reason: "NotFound", message: "not found", method: "GET", path });
      return structuredClone(lease);
    },
    create: async (_path: string, l: Lease) => stored(l),
    replace: async (path: string, l: Lease) => {
      if (l.metadata.resourceVersion !== lease?.metadata.resourceVersion) throw new KubeApiError({ status: 409, reason: "Conflict", message: "conflict", method: "PUT", path });
      return stored(l);
    },
  } as unknown as KubeClient;
}

const busyWait = (ms: number) => {
  const end = performance.now() + ms;
  while (performance.now() < end);
};

describe("LeaderElector.mayLead", () => {
  it("is true while renewals come, and false, though still leading, once the process stalled past the renew deadline", async () => {
    const abort = new AbortController();
    let leading!: () => void;
    const started = new Promise<void>((r) => (leading = r));
    const elector = new LeaderElector({
      client: leaseStore(),
      namespace: "ns",
      name: "lease",
      identity: "a",
      leaseDurationMs: 1_500,
      renewDeadlineMs: 1_000,
      retryPeriodMs: 200,
      logger: silentLogger(),
      onStartedLeading: () => leading(),
    });
    const running = elector.run(abort.signal);
    try {
      await started;
      expect(elector.mayLead()).toBe(true);
      await new Promise((r) => setTimeout(r, 700)); // renewals every 200 ms keep it fresh
      expect(elector.mayLead()).toBe(true);
      busyWait(1_200); // stalled: no renewal could run
      expect(elector.isLeader()).toBe(true); // the renew loop has not looked yet
      expect(elector.mayLead()).toBe(false);
    } finally {
      abort.abort();
      await running;
    }
    expect(elector.mayLead()).toBe(false);
  });
});
