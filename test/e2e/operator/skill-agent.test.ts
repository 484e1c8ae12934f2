// Skill and Agent end to end: the real API server, the emulator, the operator in-process.
import { describe, expect, it } from "vitest";
import { kubectl, kubectlOk, waitFor } from "../support/kube.js";
import { API_KEY, apply, condition, everythingSaid, getResource, useStack, waitForReady } from "../support/operator.js";

const SYNC_MS = 4_000;
const t = useStack("skill-agent", { syncPeriodMs: SYNC_MS });

const serviceSkill = (name: string) => t.stack.emulator.state.skills.get(name);
const agentsNamed = (name: string) => [...t.stack.emulator.state.agents.values()].filter((a) => a.name === name);

describe("Skill", () => {
  it("is created, updated on a spec change, put back after drift, and deleted", async () => {
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: summarise}
spec: {description: Summarise text, content: "v1 content"}`, t.namespace);
    let sk = await waitForReady(t.stack, "skills", "summarise");
    expect(serviceSkill("summarise")?.content).toBe("v1 content");
    expect(sk.status?.contentHash).toBe(serviceSkill("summarise")?.content_hash);

    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: summarise}
spec: {description: Summarise text, content: "v2 content"}`, t.namespace);
    sk = await waitFor(async () => {
      const r = await waitForReady(t.stack, "skills", "summarise");
      return r.metadata.generation === 2 ? r : undefined;
    });
    expect(sk.status?.observedGeneration).toBe(2);
    expect(condition(sk, "Ready")?.observedGeneration).toBe(2);
    expect(serviceSkill("summarise")?.content).toBe("v2 content");

    // Someone edits the skill in the service: within one sync period it is put back.
    t.stack.emulator.state.updateSkill("summarise", { content: "tampered" });
    await waitFor(() => serviceSkill("summarise")?.content === "v2 content", {
      timeoutMs: SYNC_MS * 3,
      description: "drift to be corrected",
    });

    await kubectlOk(["delete", "skill", "summarise", "--wait=true", "--timeout=30s"], { namespace: t.namespace });
    expect(serviceSkill("summarise")).toBeUndefined();
  });

  it("reads content from a ConfigMap and re-syncs when the ConfigMap changes", async () => {
    await apply(`
apiVersion: v1
kind: ConfigMap
metadata: {name: review-md}
data: {SKILL.md: "review v1"}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: review}
spec:
  contentFrom: {configMapKeyRef: {name: review-md, key: SKILL.md}}`, t.namespace);
    await waitForReady(t.stack, "skills", "review");
    expect(serviceSkill("review")?.content).toBe("review v1");
    await kubectlOk(["patch", "configmap", "review-md", "--type=merge", "-p", '{"data":{"SKILL.md":"review v2"}}'], { namespace: t.namespace });
    await waitFor(() => serviceSkill("review")?.content === "review v2", { description: "ConfigMap change to reach the service" });
  });

  it("waits for a missing ConfigMap with a reason that names it", async () => {
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: pending-cm}
spec:
  contentFrom: {configMapKeyRef: {name: not-there-yet, key: SKILL.md}}`, t.namespace);
    const r = await waitForReady(t.stack, "skills", "pending-cm", { status: "False", reason: "ConfigMapNotFound" });
    expect(condition(r, "Ready")?.message).toContain("not-there-yet");
    await apply(`
apiVersion: v1
kind: ConfigMap
metadata: {name: not-there-yet}
data: {SKILL.md: "arrived"}`, t.namespace);
    await waitForReady(t.stack, "skills", "pending-cm");
    expect(serviceSkill("pending-cm")?.content).toBe("arrived");
  });

  it("keeps the service object with deletionPolicy Orphan", async () => {
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: keep-me}
spec: {content: "kept", deletionPolicy: Orphan}`, t.namespace);
    await waitForReady(t.stack, "skills", "keep-me");
    await kubectlOk(["delete", "skill", "keep-me", "--wait=true", "--timeout=30s"], { namespace: t.namespace });
    expect(serviceSkill("keep-me")?.content).toBe("kept");
  });

  it("refuses an invalid spec at the API server, naming the field", async () => {
    const both = await kubectl(["apply", "-f", "-"], {
      namespace: t.namespace,
      input: `
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: bad}
spec: {content: x, contentFrom: {configMapKeyRef: {name: a, key: b}}}`,
    });
    expect(both.exitCode).not.toBe(0);
    expect(both.stderr).toContain("set at most one of spec.content and spec.contentFrom");
    const none = await kubectl(["apply", "-f", "-"], {
      namespace: t.namespace,
      input: `
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: bad}
spec: {description: no content}`,
    });
    expect(none.exitCode).not.toBe(0);
    expect(none.stderr).toMatch(/spec: Required value: set one of spec\.content and spec\.contentFrom .*leaves out Create/);
  });
});

describe("Agent", () => {
  it("is created with the marker, updated with only the fields that differ, and put back after drift", async () => {
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: triage}
spec: {image: "example/triage:1", description: "first", capabilities: [triage]}`, t.namespace);
    const ag = await waitForReady(t.stack, "agents", "triage");
    const id = ag.status?.agentId as string;
    const stored = t.stack.emulator.state.agents.get(id);
    expect(stored?.image).toBe("example/triage:1");
    expect(stored?.org_id).toBe("org-e2e");
    expect(stored?.metadata?.["agentcompute.dev/uid"]).toBe(ag.metadata.uid);

    t.stack.emulator.clearRequests();
    await kubectlOk(["patch", "agent", "triage", "--type=merge", "-p", '{"spec":{"image":"example/triage:2"}}'], { namespace: t.namespace });
    await waitFor(() => t.stack.emulator.state.agents.get(id)?.image === "example/triage:2");
    const updates = t.stack.emulator.requests.filter((r) => r.operation === "agents.update");
    expect(updates).toHaveLength(1);
    expect(t.stack.emulator.requests.filter((r) => r.operation === "agents.create")).toHaveLength(0);
    await waitFor(async () => (await getResource(t.stack.kube, "agents", t.namespace, "triage")).status?.observedGeneration === 2);

    t.stack.emulator.state.updateAgent(id, { description: "changed by hand" });
    await waitFor(() => t.stack.emulator.state.agents.get(id)?.description === "first", {
      timeoutMs: SYNC_MS * 3,
      description: "agent drift to be corrected",
    });
  });

  it("refuses metadata keys the operator marks service objects with, for every kind that has metadata", async () => {
    for (const [kind, spec, key] of [
      ["Agent", '{image: "example/x:1", metadata: {team: a, "agentcompute.dev/uid": forged}}', "agentcompute.dev/uid"],
      ["AgentDeployment", '{agentRef: {name: x}, tier: standard, metadata: {"agentcompute.dev/options-hash": forged}}', "agentcompute.dev/options-hash"],
      ["Sandbox", '{tier: standard, metadata: {"agentcompute.dev/config-hash": forged}}', "agentcompute.dev/config-hash"],
    ] as const) {
      const res = await kubectl(["apply", "-f", "-"], { namespace: t.namespace, input: `apiVersion: agentcompute.dev/v1alpha1\nkind: ${kind}\nmetadata: {name: forged-marker}\nspec: ${spec}` });
      expect(res.exitCode, `${kind}: ${res.stdout}`).not.toBe(0);
      expect(res.stderr).toContain("spec.metadata");
      expect(res.stderr).toContain(`${key}`);
      expect(res.stderr).toMatch(/(is|are) the operator's/);
    }
  });

  it("refuses a change of a create-only field, naming it", async () => {
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: fixed-name}
spec: {image: "example/a:1", name: "first-name"}`, t.namespace);
    const res = await kubectl(["patch", "agent", "fixed-name", "--type=merge", "-p", '{"spec":{"name":"second-name"}}'], { namespace: t.namespace });
    expect(res.exitCode).not.toBe(0);
    expect(res.stderr).toContain("spec.name is immutable");
  });

  it("refuses a spec without the required image", async () => {
    const res = await kubectl(["apply", "-f", "-"], {
      namespace: t.namespace,
      input: `
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: no-image}
spec: {description: "no image"}`,
    });
    expect(res.exitCode).not.toBe(0);
    expect(res.stderr).toMatch(/spec\.image: Required value/);
  });

  it("adopts an existing agent named by the external-id annotation instead of creating one", async () => {
    const existing = t.stack.emulator.state.createAgent({ name: "legacy", org_id: "org-e2e", image: "example/legacy:1" });
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata:
  name: legacy
  annotations: {agentcompute.dev/external-id: "${existing.id}"}
spec: {image: "example/legacy:2"}`, t.namespace);
    const ag = await waitForReady(t.stack, "agents", "legacy");
    expect(ag.status?.agentId).toBe(existing.id);
    expect(agentsNamed("legacy")).toHaveLength(1);
    expect(t.stack.emulator.state.agents.get(existing.id)?.image).toBe("example/legacy:2");
  });

  it("is Stalled with a clear reason when its name is taken by an agent it does not manage", async () => {
    t.stack.emulator.state.createAgent({ name: "taken", org_id: "org-e2e", image: "someone/else:1" });
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: taken}
spec: {image: "example/taken:1"}`, t.namespace);
    const ag = await waitForReady(t.stack, "agents", "taken", { status: "False", reason: "NameTaken" });
    expect(condition(ag, "Stalled")?.status).toBe("True");
    expect(condition(ag, "Ready")?.message).toContain('"taken" is already taken');
    expect(agentsNamed("taken")).toHaveLength(1);
  });

  it("deletes the agent from the registry when the resource is deleted", async () => {
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: short-lived}
spec: {image: "example/short:1"}`, t.namespace);
    const ag = await waitForReady(t.stack, "agents", "short-lived");
    await kubectlOk(["delete", "agent", "short-lived", "--wait=true", "--timeout=30s"], { namespace: t.namespace });
    expect(t.stack.emulator.state.agents.has(ag.status?.agentId as string)).toBe(false);
  });
});

describe("a new operator process over existing resources", () => {
  it("makes no writes to the service", async () => {
    await waitForReady(t.stack, "agents", "triage");
    await t.stack.restartOperator();
    t.stack.emulator.clearRequests();
    // Everything comes back Ready from the new process; give it a moment to look at all of it.
    await waitForReady(t.stack, "agents", "triage");
    await new Promise((r) => setTimeout(r, 2_000));
    const writes = t.stack.emulator.requests.filter((r) => r.method !== "GET" && r.operation !== "token");
    expect(writes.map((w) => `${w.method} ${w.path}`)).toEqual([]);
  });
});

describe("secrets", () => {
  it("never shows the API key in logs, events or status", async () => {
    const said = await everythingSaid(t.stack);
    expect(said.length).toBeGreaterThan(1000);
    expect(said).not.toContain(API_KEY);
  });
});
