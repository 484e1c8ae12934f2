// Installing into a cluster, proven on the real API server: `kubectl apply -k manifests/`
// (really applied, not a dry run), then the operator running with nothing but its
// ServiceAccount's token, leader election on, through the whole life of every kind.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { Emulator } from "../../../src/emulator/index.js";
import { startEmulator } from "../../../src/emulator/index.js";
import { KubeClient, configMapsPath, resourcePath, secretsPath } from "../../../src/runtime/kube-client.js";
import { kubectl, kubectlOk, loadKubeConfig, useTestNamespace, waitFor } from "../support/kube.js";
import { API_KEY, apply, connectionManifest, getResource, waitForReady } from "../support/operator.js";
import {
  MANIFESTS_DIR,
  OPERATOR_NAMESPACE,
  applyKustomization,
  canI,
  getLease,
  kustomize,
  refusedLines,
  serviceAccountCredentials,
  startOperatorAs,
  tearDownInstalled,
  type KubeObject,
  type OperatorUnderTest,
  type ServiceAccountCredentials,
} from "./support.js";

const ns = useTestNamespace("install-rbac");
let applied: { stdout: string; stderr: string };
let sa: ServiceAccountCredentials;

beforeAll(async () => {
  applied = await applyKustomization();
  sa = await serviceAccountCredentials();
});

describe("kubectl apply -k manifests/", () => {
  it("creates every object of the kustomization, each labelled app.kubernetes.io/name=agent-operator", async () => {
    const wanted = await kustomize(MANIFESTS_DIR);
    const live = JSON.parse(await kubectlOk(["get", "-k", MANIFESTS_DIR, "-o", "json"])) as { items: KubeObject[] };
    const key = (o: KubeObject) => `${o.kind}/${o.metadata.namespace ?? ""}/${o.metadata.name}`;
    expect(live.items.map(key).sort()).toEqual(wanted.map(key).sort());
    for (const o of live.items) expect(o.metadata.labels?.["app.kubernetes.io/name"], key(o)).toBe("agent-operator");
    expect(live.items.map((o) => o.kind)).toEqual(
      expect.arrayContaining(["Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "Service", "PodDisruptionBudget"]),
    );
  });

  it("draws no Pod Security warning from the namespace's restricted level", () => {
    expect(applied.stderr).not.toMatch(/PodSecurity|would violate/i);
    expect(applied.stdout).toMatch(/deployment\.apps\/agent-operator (created|configured|unchanged)/);
  });

  it("is idempotent: applying it again changes no object", async () => {
    // resourceVersion moves on any write that changes an object. (kubectl may still print
    // "configured" for the PodDisruptionBudget: its selector is patched with strategy
    // "replace", so kubectl always sends it, and the server finds nothing to change.)
    const versions = async () => {
      const live = JSON.parse(await kubectlOk(["get", "-k", MANIFESTS_DIR, "-o", "json"])) as {
        items: Array<KubeObject & { metadata: { resourceVersion: string } }>;
      };
      return Object.fromEntries(live.items.map((o) => [`${o.kind}/${o.metadata.name}`, o.metadata.resourceVersion]));
    };
    const before = await versions();
    await applyKustomization();
    expect(await versions()).toEqual(before);
  });
});

describe("the operator's ServiceAccount", () => {
  it("can list and watch everything it caches in every namespace, with its own token", async () => {
    const client = new KubeClient({ kubeConfig: sa.kubeConfig });
    const crd = (plural: string) => resourcePath({ group: "agentcompute.dev", version: "v1alpha1", plural });
    const collections = [
      ...["connections", "skills", "agents", "agentdeployments", "sandboxes"].map(crd),
      secretsPath(),
      configMapsPath(),
    ];
    try {
      for (const path of collections) {
        const list = await client.list(path, { limit: 1 });
        // A watch that the server ends after one second: the request itself is what RBAC checks.
        for await (const ev of client.watch(path, { resourceVersion: list.metadata.resourceVersion, timeoutSeconds: 1 })) {
          void ev;
        }
      }
    } finally {
      await client.close();
    }
  });

  it("is refused what the operator never does", async () => {
    const refused: string[][] = [
      ["get", "secrets", "-n", "default"],
      ["update", "secrets", "-n", "default"],
      ["get", "connections.agentcompute.dev", "-n", "default"],
      ["update", "agents.agentcompute.dev", "-n", "default"],
      ["create", "agents.agentcompute.dev", "-n", "default"],
      ["delete", "sandboxes.agentcompute.dev", "-n", "default"],
      ["update", "connections.agentcompute.dev", "-n", "default"],
      ["update", "configmaps", "-n", "default"],
      ["list", "pods", "-A"],
      ["create", "pods", "-n", OPERATOR_NAMESPACE],
      ["create", "leases.coordination.k8s.io", "-n", "default"],
      ["delete", "leases.coordination.k8s.io", "-n", OPERATOR_NAMESPACE],
      ["list", "customresourcedefinitions.apiextensions.k8s.io"],
      ["escalate", "clusterroles.rbac.authorization.k8s.io"],
    ];
    const granted: string[][] = [
      ["list", "secrets", "-A"],
      ["patch", "connections.agentcompute.dev", "-n", "default"],
      ["delete", "secrets", "-n", "default"],
      ["patch", "sandboxes.agentcompute.dev", "--subresource=status", "-n", "default"],
      ["update", "agentdeployments.agentcompute.dev", "--subresource=finalizers", "-n", "default"],
      ["update", "sandboxes.agentcompute.dev", "--subresource=finalizers", "-n", "default"],
      ["create", "events", "-n", "default"],
      ["update", "leases.coordination.k8s.io", "-n", OPERATOR_NAMESPACE],
    ];
    for (const args of refused) expect(await canI(sa.path, args), `can-i ${args.join(" ")}`).toBe(false);
    for (const args of granted) expect(await canI(sa.path, args), `can-i ${args.join(" ")}`).toBe(true);
  });
});

describe("the operator running as its ServiceAccount, with leader election", () => {
  let emulator: Emulator;
  let op: OperatorUnderTest;
  const admin = new KubeClient({ kubeConfig: loadKubeConfig() });
  const stack = { kube: admin, get namespace() { return ns.name; } };

  beforeAll(async () => {
    emulator = await startEmulator({ apiKey: API_KEY, strictBodies: true });
    op = await startOperatorAs({ kubeConfig: sa.kubeConfig, namespaces: [ns.name] });
  });

  afterEach(async ({ task }) => {
    if (task.result?.state !== "fail" || !op) return;
    // What a person would look at first: the resources' conditions and the operator's complaints.
    const resources = await kubectl(["get", "agentcompute", "-o", "wide"], { namespace: ns.name });
    const complaints = op.logs.filter((l) => /"level":"(warn|error|fatal)"/.test(l)).slice(-40);
    console.log(`--- ${task.name}\n${resources.stdout}${resources.stderr}\n${complaints.join("\n")}`);
  });

  afterAll(async () => {
    await tearDownInstalled({ op, namespace: ns.name, emulator, admin });
  });

  it("holds the leader Lease in agent-operator-system", async () => {
    const lease = await getLease(op.leaseName);
    expect(lease.spec?.holderIdentity).toBe(op.manager.identity);
  });

  it("brings a Connection, Skill, Agent, AgentDeployment and Sandbox to Ready", async () => {
    // Everything at once, dependants first: order must not matter.
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: sbx}
spec:
  tier: standard
  skills: [review]
  envFrom: [{secretRef: {name: sandbox-env}}]
  ttlSeconds: 600
---
apiVersion: agentcompute.dev/v1alpha1
kind: AgentDeployment
metadata: {name: bot-prod}
spec: {agentRef: {name: bot}, tier: standard, skills: [review]}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: bot}
spec: {image: "example/bot:1", capabilities: [triage]}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: review}
spec:
  description: Review code
  contentFrom: {configMapKeyRef: {name: review-skill, key: SKILL.md}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: review-skill}
data: {SKILL.md: "# Review\\nCorrectness first."}
---
apiVersion: v1
kind: Secret
metadata: {name: sandbox-env}
stringData: {GITHUB_TOKEN: not-a-real-token}
---
${connectionManifest(ns.name, emulator)}`, ns.name);

    const conn = await waitForReady(stack, "connections", "default");
    await waitForReady(stack, "skills", "review");
    const agent = await waitForReady(stack, "agents", "bot");
    const agd = await waitForReady(stack, "agentdeployments", "bot-prod");
    const sbx = await waitForReady(stack, "sandboxes", "sbx");

    expect(conn.status?.tokenExpiresAt).toBeTruthy();
    expect(emulator.state.skills.get("review")?.content).toBe("# Review\nCorrectness first.");
    expect(emulator.state.agents.get(agent.status?.agentId as string)?.image).toBe("example/bot:1");
    expect(emulator.state.deployments.get(agd.status?.deploymentId as string)?.state).toBe("running");
    expect(emulator.state.vms.get(sbx.status?.vmId as string)?.state).toBe("allocated");

    // Finalizers (patch on the resource) and connection Secrets (create) are in place.
    for (const [plural, name] of [["skills", "review"], ["agents", "bot"], ["agentdeployments", "bot-prod"], ["sandboxes", "sbx"]] as const) {
      const r = JSON.parse(await kubectlOk(["get", plural, name, "-o", "json"], { namespace: ns.name })) as {
        metadata: { finalizers?: string[] };
      };
      expect(r.metadata.finalizers, `${plural}/${name}`).toContain("agentcompute.dev/finalizer");
    }
    for (const secret of ["bot-prod-agentcompute", "sbx-agentcompute"]) {
      const s = JSON.parse(await kubectlOk(["get", "secret", secret, "-o", "json"], { namespace: ns.name })) as {
        metadata: { ownerReferences?: Array<{ blockOwnerDeletion?: boolean }> };
        data?: Record<string, string>;
      };
      expect(s.metadata.ownerReferences?.[0]?.blockOwnerDeletion).toBe(true);
      expect(s.data?.token).toBeTruthy();
    }
  });

  it("records Events about them in their namespace", async () => {
    const events = await waitFor(async () => {
      const list = JSON.parse(await kubectlOk(["get", "events", "-o", "json"], { namespace: ns.name })) as {
        items: Array<{ reason: string; involvedObject: { kind: string } }>;
      };
      const kinds = new Set(list.items.filter((e) => e.reason === "Created").map((e) => e.involvedObject.kind));
      return ["Skill", "Agent", "AgentDeployment", "Sandbox"].every((k) => kinds.has(k)) ? list.items : undefined;
    }, { description: "a Created Event for each managed kind" });
    expect(events.some((e) => e.involvedObject.kind === "Connection" && e.reason === "Authenticated")).toBe(true);
  });

  it("deletes them all cleanly: the service objects and the connection Secrets go with them", async () => {
    const skill = "review";
    const agentId = (await getResource(admin, "agents", ns.name, "bot")).status?.agentId as string;
    const deploymentId = (await getResource(admin, "agentdeployments", ns.name, "bot-prod")).status?.deploymentId as string;
    const vmId = (await getResource(admin, "sandboxes", ns.name, "sbx")).status?.vmId as string;

    for (const kind of ["sandbox/sbx", "agentdeployment/bot-prod", "agent/bot", "skill/review", "connection/default"]) {
      await kubectlOk(["delete", kind, "--wait=true", "--timeout=30s"], { namespace: ns.name });
    }
    expect(await kubectlOk(["get", "agentcompute", "-o", "name"], { namespace: ns.name })).toBe("");
    expect(emulator.state.skills.get(skill)).toBeUndefined();
    expect(emulator.state.agents.get(agentId)).toBeUndefined();
    expect(emulator.state.deployments.get(deploymentId)).toBeUndefined();
    expect(emulator.state.vms.get(vmId)).toBeUndefined();
    expect(emulator.state.usage.find((u) => u.vm_id === vmId)?.reason).toBe("released");
    const secrets = await kubectlOk(["get", "secrets", "-o", "name"], { namespace: ns.name });
    expect(secrets).not.toContain("bot-prod-agentcompute");
    expect(secrets).not.toContain("sbx-agentcompute");
  });

  it("was never refused anything by the API server", () => {
    expect(op.logs.length).toBeGreaterThan(0);
    expect(refusedLines(op.logs)).toEqual([]);
  });

  it("releases the Lease when it stops", async () => {
    await op.stop();
    const lease = await getLease(op.leaseName);
    expect(lease.spec?.holderIdentity ?? "").toBe("");
    expect(refusedLines(op.logs)).toEqual([]);
  });
});
