// The sharder's order of placement: an object whose running VM nobody renews (its owner let it
// go, or is gone) is placed ahead of a backlog of placements, whatever its kind holds the VM.
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it, vi } from "vitest";
import type { SandboxRun } from "../../../src/api/index.js";
import type { KubeClient } from "../../../src/runtime/kube-client.js";
import { silentLogger } from "../../../src/runtime/logging.js";
import { Metrics } from "../../../src/runtime/metrics.js";
import { SHARDED_CONTROLLERS } from "../../../src/sharding/index.js";
import { OWNER_LABEL } from "../../../src/sharding/labels.js";
import { Ring, objectKey } from "../../../src/sharding/ring.js";
import { Sharder } from "../../../src/sharding/sharder.js";

const NS = "team-a";

/** A stub API server of one collection per path: its list, a watch the test pushes to, and the PATCHes (answered in `patchMs`). */
function stubServer(items: Record<string, unknown[]>, patchMs: number) {
  const pushes = new Map<string, (event: unknown) => void>();
  const patched: string[] = [];
  const client = {
    list: (path: string) => Promise.resolve({ metadata: { resourceVersion: "1" }, items: items[path] ?? [] }),
    async *watch(path: string, _opts: unknown, signal?: AbortSignal) {
      const queue: unknown[] = [];
      let wake: (() => void) | undefined;
      pushes.set(path, (event) => {
        queue.push(event);
        wake?.();
      });
      while (!signal?.aborted) {
        if (queue.length === 0) await new Promise<void>((resolve) => ((wake = resolve), signal?.addEventListener("abort", () => resolve(), { once: true })));
        while (queue.length > 0) yield queue.shift() as never;
      }
    },
    patch: async (path: string) => {
      const name = path.split("/").pop() ?? "";
      patched.push(name);
      const sentAt = performance.now();
      await sleep(patchMs);
      answered.set(name, { sentAt, answeredAt: performance.now() });
      return {};
    },
  } as unknown as KubeClient;
  const answered = new Map<string, { sentAt: number; answeredAt: number }>();
  return { client, patched, answered, push: (path: string, event: unknown) => pushes.get(path)?.(event) };
}

describe("the sharder: a run whose template VM nobody renews", () => {
  const runs = SHARDED_CONTROLLERS.get("sandboxrun")!;
  const template = { connectionRef: { name: "svc" }, tier: "small" };
  const run = (name: string, rv: string, labels: Record<string, string>, spec: object, status: object = {}): SandboxRun =>
    ({
      apiVersion: "agentcompute.dev/v1alpha1",
      kind: "SandboxRun",
      metadata: { name, namespace: NS, uid: `uid-${name}`, resourceVersion: rv, labels },
      spec: { ...spec, steps: [{ name: "s", command: ["true"] }] },
      status,
    }) as unknown as SandboxRun;

  it("is placed ahead of the backlog when its owner lets it go: unlike a released VM's, or a sandboxRef run's (its Sandbox's VM)", async () => {
    const owned = { [OWNER_LABEL]: "x" };
    const lettingGo = [
      run("released", "10", owned, { sandboxTemplate: template }, { vmId: "vm-r", vmReleased: true }),
      run("by-ref", "11", owned, { sandboxRef: { name: "box" } }, { vmId: "vm-box" }),
      run("with-vm", "12", owned, { sandboxTemplate: template }, { vmId: "vm-1" }),
    ];
    // New runs to place, one PATCH at a time: a backlog the let-go runs arrive behind.
    const backlog = Array.from({ length: 6 }, (_, i) => run(`new-${i}`, String(20 + i), {}, { sandboxTemplate: template }));
    const server = stubServer({ [runs.path]: [...backlog, ...lettingGo] }, 50);
    const sharder = new Sharder({ client: server.client, logger: silentLogger(), metrics: new Metrics({ defaultMetrics: false }), namespaces: [], kinds: [runs], concurrency: 1 });
    sharder.setMembers(["x"]);
    await sharder.start();
    try {
      await vi.waitFor(() => expect(server.patched).toHaveLength(1), { timeout: 2_000, interval: 5 });
      // Their owner acknowledges a drain of each (both labels removed): nobody works on them now.
      for (const r of lettingGo) {
        const released = { ...r, metadata: { ...r.metadata, labels: {}, resourceVersion: `${r.metadata.resourceVersion}0` } };
        server.push(runs.path, { type: "MODIFIED", object: released });
      }
      await vi.waitFor(() => expect(server.patched).toHaveLength(backlog.length + lettingGo.length), { timeout: 5_000, interval: 5 });
      // The running VM's right after the PATCH in flight; the others in their turn, after the backlog.
      expect(server.patched[1]).toBe("with-vm");
      expect(server.patched.slice(-2)).toEqual(["released", "by-ref"]);
    } finally {
      await sharder.stop();
    }
  });

  it("moves before any other kind's objects when its owner is gone (fenced with no heirs)", async () => {
    const agents = SHARDED_CONTROLLERS.get("agent")!;
    const sandboxes = SHARDED_CONTROLLERS.get("sandbox")!;
    // Names the ring of x and gone gives to gone: nothing moves until gone goes.
    const ring = new Ring(["x", "gone"]);
    const onGone = (plural: string, prefix: string) => Array.from({ length: 100 }, (_, i) => `${prefix}-${i}`).find((n) => ring.owner(objectKey(plural, NS, n)) === "gone")!;
    const runName = onGone(runs.plural, "run");
    const agentName = onGone(agents.plural, "agent");
    const owned = { [OWNER_LABEL]: "gone" };
    const agent = { apiVersion: "agentcompute.dev/v1alpha1", kind: "Agent", metadata: { name: agentName, namespace: NS, uid: "uid-agent", resourceVersion: "5", labels: owned }, spec: {} };
    const server = stubServer({ [runs.path]: [run(runName, "6", owned, { sandboxTemplate: template }, { vmId: "vm-1" })], [agents.path]: [agent] }, 100);
    const sharder = new Sharder({
      client: server.client,
      logger: silentLogger(),
      metrics: new Metrics({ defaultMetrics: false }),
      namespaces: [],
      kinds: [sandboxes, runs, agents],
      urgentMaxWaitMs: 60_000,
    });
    sharder.setMembers(["x", "gone"]);
    await sharder.start();
    try {
      await sleep(100);
      expect(server.patched).toEqual([]);
      sharder.setMembers(["x"]);
      await vi.waitFor(() => expect(server.answered.size).toBe(2), { timeout: 5_000, interval: 5 });
      expect(server.patched).toEqual([runName, agentName]);
      expect(server.answered.get(agentName)!.sentAt).toBeGreaterThanOrEqual(server.answered.get(runName)!.answeredAt);
    } finally {
      await sharder.stop();
    }
  });
});
