// Short watches and a compacting etcd: no event is missed. The suite runs its OWN
// kube-apiserver with the watch cache off and etcd compacted every second, so a watch that
// resumes from a resourceVersion a couple of seconds old is answered 410 Gone; and the
// operator (in-process, for the informer option the CLI does not expose) asks for watches of
// 2-4 s, so its seven informers end and resume their watches all the time. Changes are made in
// waves, spread out, while that goes on: creates, spec updates, ConfigMap and Secret changes,
// deletes. Every one of them must reach the service.
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startEmulator, type Emulator } from "../../../src/emulator/index.js";
import { createTestNamespace, kubectlOk, usingExistingCluster, waitFor } from "../support/kube.js";
import { API_KEY, connectionManifest } from "../support/operator.js";
import { deleteAllManaged,
  createAll,
  expectExactlyOnce,
  mixedManifests,
  startInProcessOperator,
  startPrivateApiserver,
  waitAllReady,
  type InProcessOperator,
  type PrivateApiserver,
} from "./support.js";

let api: PrivateApiserver;
let ns: string;
let emulator: Emulator;
let op: InProcessOperator;
const kube = (args: string[], input?: string) => kubectlOk(args, { kubeconfig: api.kubeconfig, namespace: ns, input });
const patch = (kind: string, name: string, body: unknown) => kube(["patch", kind, name, "--type=merge", "-p", JSON.stringify(body)]);
/** One change every `gapMs`: each lands at a different point of the watches' short lives. */
async function spread(changes: Array<() => Promise<unknown>>, gapMs = 400): Promise<void> {
  for (const change of changes) {
    await change();
    await sleep(gapMs);
  }
}

describe.skipIf(usingExistingCluster())("short watch timeouts and etcd compaction (410 Gone on resume)", () => {
  beforeAll(async () => {
    api = await startPrivateApiserver("gone", {
      controllers: false,
      minRequestTimeout: 5,
      etcdCompactionInterval: "1s",
      apiserverArgs: ["--watch-cache=false"],
    });
    ns = await createTestNamespace("gone", api.kubeconfig);
    emulator = await startEmulator({ apiKey: API_KEY, strictBodies: true, orgId: "org-e2e" });
    await kube(["apply", "-f", "-"], connectionManifest(ns, emulator));
    op = await startInProcessOperator({
      kubeconfig: api.kubeconfig,
      namespace: ns,
      informerDefaults: { minWatchTimeoutSeconds: 2, watchdogGraceMs: 5_000 },
    });
  });

  afterAll(async () => {
    if (op) {
      await deleteAllManaged(ns, { kubeconfig: api.kubeconfig });
      await op.stop();
    }
    await emulator?.close();
    await api?.destroy();
  });

  it("misses no create, update, ConfigMap or Secret change, or delete", async () => {
    await kube(
      ["apply", "-f", "-"],
      `apiVersion: v1
kind: ConfigMap
metadata: {name: skill-md}
data: {SKILL.md: "from the ConfigMap, v1"}
---
apiVersion: v1
kind: Secret
metadata: {name: sandbox-env}
stringData: {TOKEN_A: "env-v1"}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: from-cm}
spec:
  contentFrom: {configMapKeyRef: {name: skill-md, key: SKILL.md}}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: with-env}
spec:
  tier: standard
  envFrom: [{secretRef: {name: sandbox-env}}]`,
    );
    const w1 = { prefix: "w1", skills: 4, agents: 4, deployments: 4, sandboxes: 4, withSkills: true };
    await createAll(mixedManifests(w1), ns, { kubeconfig: api.kubeconfig });
    const first = new Map((await waitAllReady(ns, 18, { kubeconfig: api.kubeconfig, timeoutMs: 120_000 })).map((r) => [r.metadata.name, r]));
    await sleep(6_000); // quiet: the watches' resourceVersions go stale and are compacted away

    // Wave 2, spread over the watches' lives.
    const w2 = { prefix: "w2", skills: 2, agents: 2, deployments: 2, sandboxes: 2, withSkills: true };
    await spread([
      ...[0, 1, 2, 3].map((i) => () => patch("agent", `w1-agent-${i}`, { spec: { image: `example/agent-${i}:2` } })),
      () => kube(["patch", "configmap", "skill-md", "--type=merge", "-p", JSON.stringify({ data: { "SKILL.md": "from the ConfigMap, v2" } })]),
      () => kube(["delete", "sandbox", "w1-sandbox-0", "--wait=false"]),
      () => createAll(mixedManifests(w2), ns, { kubeconfig: api.kubeconfig }),
      () => patch("skill", "w1-skill-1", { spec: { content: "instructions 1, v2" } }),
    ]);
    await sleep(6_000);

    // Wave 3.
    await spread([
      () => kube(["patch", "secret", "sandbox-env", "--type=merge", "-p", JSON.stringify({ stringData: { TOKEN_A: "env-v2" } })]),
      () => patch("agentdeployment", "w1-deploy-2", { spec: { env: { INDEX: "2", EXTRA: "v3" } } }),
      () => kube(["delete", "agentdeployment", "w1-deploy-3", "--wait=false"]),
      () => patch("agent", "w2-agent-0", { spec: { description: "changed in wave 3" } }),
    ]);

    // All of it reached the service.
    const all = await waitAllReady(ns, 18 - 2 + 8, { kubeconfig: api.kubeconfig, timeoutMs: 120_000 });
    const byName = new Map(all.map((r) => [r.metadata.name, r]));
    const agentOf = (name: string) => emulator.state.agents.get(byName.get(name)?.status?.agentId as string);
    const pending = (): string[] => {
      const checks: Record<string, boolean> = {
        "agent images": [0, 1, 2, 3].every((i) => agentOf(`w1-agent-${i}`)?.image === `example/agent-${i}:2`),
        "agent description": agentOf("w2-agent-0")?.description === "changed in wave 3",
        "ConfigMap content": emulator.state.skills.get("from-cm")?.content === "from the ConfigMap, v2",
        "skill content": emulator.state.skills.get("w1-skill-1")?.content === "instructions 1, v2",
        "Secret env": emulator.state.vms.get(byName.get("with-env")?.status?.vmId as string)?.env["TOKEN_A"] === "env-v2",
        "deployment env": emulator.state.deployments.get(byName.get("w1-deploy-2")?.status?.deploymentId as string)?.options["env"]?.["EXTRA"] === "v3",
      };
      return Object.entries(checks).filter(([, ok]) => !ok).map(([what]) => what);
    };
    try {
      await waitFor(() => pending().length === 0, { timeoutMs: 60_000 });
    } catch {
      throw new Error(`changes that never reached the service: ${pending().join(", ")}`);
    }
    const markers = (uid: string) =>
      [...emulator.state.vms.values(), ...emulator.state.deployments.values()].filter(
        (o) => (o.metadata as Record<string, string> | undefined)?.["agentcompute.dev/uid"] === uid,
      );
    // The deletes too: the resources are gone, and so are their service objects.
    for (const name of ["w1-sandbox-0", "w1-deploy-3"]) {
      expect(byName.has(name)).toBe(false);
      expect(markers(first.get(name)!.metadata.uid)).toEqual([]);
    }
    expectExactlyOnce(emulator, all);

    // The watches did end and were answered 410 Gone, again and again, and the informers relisted.
    const gone = await op.metric("agentcompute_informer_watch_restarts_total", { reason: "gone" });
    const closed = await op.metric("agentcompute_informer_watch_restarts_total", { reason: "closed" });
    const relists = await op.metric("agentcompute_informer_relists_total");
    console.log(`watch-gone: ${closed} watches timed out, ${gone} resumes answered 410, ${relists} lists`);
    expect(closed).toBeGreaterThan(7);
    expect(gone).toBeGreaterThan(7);
    expect(relists).toBeGreaterThan(7 + 7);
  }, 300_000);
});
