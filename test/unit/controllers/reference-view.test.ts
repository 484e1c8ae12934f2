// The cache sharded replicas look referenced resources up in keeps what the lookups read
// (a Sandbox's Skills, a deployment's Agent, a run's Sandbox) and drops the rest.
import { describe, expect, it } from "vitest";
import { REFERENCE_VIEW } from "../../../src/controllers/reference-view.js";
import type { KubeObject } from "../../../src/runtime/kube-client.js";

const agent = {
  apiVersion: "agentcompute.dev/v1alpha1",
  kind: "Agent",
  metadata: {
    name: "a",
    namespace: "ns",
    uid: "u1",
    resourceVersion: "7",
    generation: 3,
    labels: { "shard.agentcompute.dev/owner": "r1" },
    annotations: { "kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{\"instructions\":\"...\"}}", "agentcompute.dev/external-id": "ag-1" },
    finalizers: ["agentcompute.dev/finalizer"],
  },
  spec: { connectionRef: { name: "prod" }, instructions: "x".repeat(10_000), tools: [{ name: "t" }] },
  status: { agentId: "ag-1", revision: "r3", observedGeneration: 3, conditions: [{ type: "Ready", status: "True", reason: "Available" }] },
} as KubeObject;

describe("the reference view", () => {
  it("keeps metadata, the connectionRef and the status; drops the rest of the spec and kubectl's copy of it", () => {
    const view = REFERENCE_VIEW.transform(structuredClone(agent)) as KubeObject & { spec?: Record<string, unknown>; status?: unknown };
    expect(view.metadata).toEqual({ ...agent.metadata, annotations: { "agentcompute.dev/external-id": "ag-1" } });
    expect(view.spec).toEqual({ connectionRef: { name: "prod" } });
    expect(view.status).toEqual((agent as { status?: unknown }).status);
    expect(JSON.stringify(view).length).toBeLessThan(JSON.stringify(agent).length / 10);
  });

  it("keeps a Skill's name in the service, by which Sandboxes find it", () => {
    const skill = { apiVersion: "agentcompute.dev/v1alpha1", kind: "Skill", metadata: { name: "s", namespace: "ns" }, spec: { name: "web-search", description: "d", files: { "a.md": "b" } } } as KubeObject;
    expect((REFERENCE_VIEW.transform(skill) as { spec?: unknown }).spec).toEqual({ name: "web-search" });
  });

  it("keeps a Sandbox's env and envFrom, by which a run tells the Secret values its VM holds", () => {
    const sandbox = {
      apiVersion: "agentcompute.dev/v1alpha1",
      kind: "Sandbox",
      metadata: { name: "b", namespace: "ns" },
      spec: { tier: "standard", skills: ["web-search"], env: { MODE: "fast" }, envFrom: [{ secretRef: { name: "keys" }, prefix: "K_" }] },
    } as KubeObject;
    expect((REFERENCE_VIEW.transform(sandbox) as { spec?: unknown }).spec).toEqual({ env: { MODE: "fast" }, envFrom: [{ secretRef: { name: "keys" }, prefix: "K_" }] });
  });
});
