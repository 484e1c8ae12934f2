// A replica that does not lead (sharded mode: the Connection controller runs on the leader
// only) still holds clients of each Connection its resources use, and their metric series: a
// deleted Connection's go on that replica too, not only on the leader.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KubeConfig } from "@kubernetes/client-node";
import { startEmulator, type Emulator } from "../../../src/emulator/index.js";
import { setupOperator, type Operator } from "../../../src/controllers/index.js";
import { KubeClient, leasesPath, resourcePath } from "../../../src/runtime/kube-client.js";
import { Manager } from "../../../src/runtime/manager.js";
import { LEADER_ONLY_CONTROLLERS } from "../../../src/sharding/index.js";
import { testKubeconfig, useTestNamespace, waitFor } from "../support/kube.js";
import { API_KEY, applyConnection, installCRDs } from "../support/operator.js";
import { testLogger } from "../runtime/support.js";

const ns = useTestNamespace("conn-follower");
const LEASE = "follower-test-leader";

describe("a replica that is not the leader", () => {
  let emulator: Emulator;
  let kube: KubeClient;
  let manager: Manager;
  let operator: Operator;

  beforeAll(async () => {
    await installCRDs();
    emulator = await startEmulator({ apiKey: API_KEY, orgId: "org-e2e", strictBodies: true });
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromFile(testKubeconfig());
    kube = new KubeClient({ kubeConfig });
    // The leader is another replica, for the whole test.
    await kube.create(leasesPath(ns.name), {
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: { name: LEASE, namespace: ns.name },
      spec: { holderIdentity: "the-leader", leaseDurationSeconds: 3600, renewTime: new Date().toISOString().replace(/Z$/, "000Z") },
    });
    await applyConnection(ns.name, emulator);
    manager = new Manager({
      client: new KubeClient({ kubeConfig }),
      logger: testLogger(),
      namespaces: [ns.name],
      metricsBindAddress: "",
      healthProbeBindAddress: "",
      handleSignals: false,
      leaderElection: { namespace: ns.name, name: LEASE, leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 },
      leaderOnlyControllers: LEADER_ONLY_CONTROLLERS,
    });
    operator = setupOperator(manager, { syncPeriodMs: 600_000, concurrency: 2 });
    await manager.start();
  }, 60_000);

  afterAll(async () => {
    await manager?.stop();
    await operator?.pool.close();
    await kube?.close();
    await emulator?.close();
  });

  it("drops a deleted Connection's clients and its agentcompute_service_* series", async () => {
    const key = `${ns.name}/default`;
    const series = async () => (await manager.metrics.registry.metrics()).split("\n").filter((l) => l.includes(`connection="${key}"`));
    // A client of the Connection, as a resource's upkeep takes one (no leader has reported the
    // Connection Ready), and a call through it.
    const handle = await waitFor(() => {
      try {
        return operator.pool.forUpkeep(ns.name, { name: "default" });
      } catch {
        return undefined;
      }
    }, { description: "the Connection in this replica's cache" });
    await handle.client.skills.list();
    expect(manager.isLeader()).toBe(false);
    expect((await series()).some((l) => l.startsWith("agentcompute_service_requests_total"))).toBe(true);

    // No finalizer: the leader's controller never ran here, so the delete is at once.
    await kube.delete(resourcePath({ group: "agentcompute.dev", version: "v1alpha1", plural: "connections", namespace: ns.name, name: "default" }));
    await waitFor(async () => (await series()).length === 0, { timeoutMs: 30_000, description: "the Connection's series to go" });
    // Its client is closed: nothing more is sent with the deleted Connection's credentials.
    await expect(handle.client.skills.list()).rejects.toThrow(/closed/);
  });
});
