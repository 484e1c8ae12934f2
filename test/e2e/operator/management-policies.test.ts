// spec.managementPolicies end to end: the real API server (its CEL rules), the emulator, the
// operator. What the service saw is counted from the emulator's request log: an [Observe]
// Agent imported by id gets no write and reports the registry's fields, an AgentDeployment
// deploys it; without Delete the object outlives its resource; without Update drift is
// reported, not put back; an [Observe] Sandbox is never renewed; contradictions are refused.
import { describe, expect, it } from "vitest";
import { kubectl as runKubectl, kubectlOk, waitFor } from "../support/kube.js";
import { apply, condition, eventReasons, getResource, useStack, waitForReady } from "../support/operator.js";

const SYNC_MS = 3_000;
const t = useStack("policies", { syncPeriodMs: SYNC_MS });

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const mark = () => t.stack.emulator.requests.length;
/** Writes (non-GET operations) the service answered since `from` whose path names `id`. */
const writesTo = (id: string, from: number) =>
  t.stack.emulator.requests.slice(from).filter((r) => r.method !== "GET" && r.operation !== "token" && r.path.includes(id)).map((r) => r.operation);
const kubectl = (...args: string[]) => kubectlOk(args, { namespace: t.namespace });

describe("managementPolicies: [Observe]", () => {
  it("imports an agent by id read-only: its fields in status, no write, and an AgentDeployment deploys it", async () => {
    const shared = t.stack.emulator.state.createAgent({ name: "shared-triage", org_id: "org-other-team", image: "other/triage:7", version: "7.0.1" });
    const from = mark();
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata:
  name: shared-triage
  annotations: {agentcompute.dev/external-id: "${shared.id}"}
spec:
  managementPolicies: [Observe]
---
apiVersion: agentcompute.dev/v1alpha1
kind: AgentDeployment
metadata: {name: our-triage}
spec:
  agentRef: {name: shared-triage}
  tier: standard`, t.namespace);
    const agent = await waitForReady(t.stack, "agents", "shared-triage", { reason: "Available" });
    expect(agent.status).toMatchObject({ agentId: shared.id, name: "shared-triage", orgId: "org-other-team", image: "other/triage:7", version: "7.0.1" });
    expect(condition(agent, "Ready")?.message).toContain("nothing is written");
    const deployment = await waitForReady(t.stack, "agentdeployments", "our-triage");
    const stored = t.stack.emulator.state.deployments.get(deployment.status?.deploymentId as string);
    expect(stored).toMatchObject({ registry_id: shared.id, image: "other/triage:7" });

    await sleep(SYNC_MS * 2); // several resyncs: still nothing written to the agent
    expect(writesTo(shared.id, from).filter((op) => op.startsWith("agents."))).toEqual([]);
    const after = t.stack.emulator.state.agents.get(shared.id);
    expect(after).toMatchObject({ image: "other/triage:7", updated_at: shared.updated_at });
    expect(after?.metadata ?? {}).not.toHaveProperty(["agentcompute.dev/uid"]);

    // Deleting the deployment first, then the imported agent: the agent stays in the registry.
    await kubectl("delete", "agentdeployment", "our-triage", "--wait=true", "--timeout=30s");
    await kubectl("delete", "agent", "shared-triage", "--wait=true", "--timeout=30s");
    expect(t.stack.emulator.state.agents.get(shared.id)).toBeDefined();
    expect(writesTo(shared.id, from).filter((op) => op.startsWith("agents."))).toEqual([]);
    // Recorded once the finalizer is off, so it may land just after the delete returns.
    await waitFor(async () => (await eventReasons(t.stack, "shared-triage")).includes("Orphaned"), { description: "the Orphaned Event" });
  }, 90_000);

  it("imports a skill by name without its content: Ready, not drifted, nothing written", async () => {
    const theirs = t.stack.emulator.state.createSkill({ name: "shared-skill", content: "theirs", resources: { "a.md": "a" } });
    const from = mark();
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata:
  name: shared-skill
  annotations: {agentcompute.dev/external-id: shared-skill}
spec:
  managementPolicies: [Observe]`, t.namespace);
    const skill = await waitForReady(t.stack, "skills", "shared-skill", { reason: "Available" });
    expect(skill.status).toMatchObject({ skillName: "shared-skill", contentHash: theirs.content_hash });
    expect(condition(skill, "Drifted")).toMatchObject({ status: "False" });
    await sleep(SYNC_MS * 2);
    expect(writesTo("shared-skill", from)).toEqual([]);
    expect(await eventReasons(t.stack, "shared-skill")).not.toContain("DriftNotCorrected");
  }, 60_000);

  it("is Stalled, with the fix named, when there is nothing to observe; and creates nothing", async () => {
    const from = mark();
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: nowhere}
spec:
  managementPolicies: [Observe]`, t.namespace);
    const agent = await waitForReady(t.stack, "agents", "nowhere", { status: "False", reason: "ExternalNotFound" });
    expect(condition(agent, "Stalled")?.status).toBe("True");
    expect(condition(agent, "Ready")?.message).toContain("agentcompute.dev/external-id");
    const writes = t.stack.emulator.requests.slice(from).filter((r) => r.method !== "GET" && r.operation !== "token");
    expect(writes).toEqual([]);
  });

  it("does not renew an imported VM", async () => {
    const vm = t.stack.emulator.state.allocateVM({ tier: "standard", ttl_seconds: 4 });
    const from = mark();
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata:
  name: watched
  annotations: {agentcompute.dev/external-id: "${vm.vm_id}"}
spec: {tier: standard, ttlSeconds: 4, renewBeforeSeconds: 2, managementPolicies: [Observe]}`, t.namespace);
    await waitForReady(t.stack, "sandboxes", "watched", { reason: "Available" });
    // Past its TTL: nobody renewed it, so it ran out, and nothing was allocated in its place.
    await waitForReady(t.stack, "sandboxes", "watched", { status: "False", reason: "ExternalNotFound", timeoutMs: 30_000 });
    expect(writesTo(vm.vm_id, from)).toEqual([]);
    expect(t.stack.emulator.requests.slice(from).map((r) => r.operation)).not.toContain("vms.allocate");
  }, 60_000);
});

describe("managementPolicies without Delete or Update", () => {
  it("without Delete: the agent outlives its resource", async () => {
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: keeper}
spec:
  image: "example/keeper:1"
  managementPolicies: [Observe, Create, Update]`, t.namespace);
    const id = (await waitForReady(t.stack, "agents", "keeper")).status?.agentId as string;
    const from = mark();
    await kubectl("delete", "agent", "keeper", "--wait=true", "--timeout=30s");
    expect(t.stack.emulator.state.agents.get(id)).toBeDefined();
    expect(writesTo(id, from)).toEqual([]);
  });

  it("without Update: drift is reported with the fields that differ, and not put back", async () => {
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: frozen}
spec:
  image: "example/frozen:1"
  description: "first"
  managementPolicies: [Observe, Create, Delete]`, t.namespace);
    const ready = await waitForReady(t.stack, "agents", "frozen");
    const id = ready.status?.agentId as string;
    expect(condition(ready, "Drifted")).toMatchObject({ status: "False", reason: "InSync" });
    const from = mark();
    await kubectl("patch", "agent", "frozen", "--type=merge", "-p", '{"spec":{"image":"example/frozen:2","description":"second"}}');
    const drifted = await waitFor(
      async () => {
        const r = await getResource(t.stack.kube, "agents", t.namespace, "frozen");
        return condition(r, "Drifted")?.status === "True" && r.status?.observedGeneration === r.metadata.generation ? r : undefined;
      },
      { timeoutMs: 20_000, description: "Drifted=True" },
    );
    expect(condition(drifted, "Drifted")?.reason).toBe("UpdateNotAllowed");
    expect(condition(drifted, "Drifted")?.message).toContain("spec.image");
    expect(condition(drifted, "Drifted")?.message).toContain("spec.description");
    expect(condition(drifted, "Ready")?.status).toBe("True");
    await sleep(SYNC_MS * 2);
    expect(writesTo(id, from)).toEqual([]);
    expect(t.stack.emulator.state.agents.get(id)).toMatchObject({ image: "example/frozen:1", description: "first" });
    expect((await eventReasons(t.stack, "frozen")).filter((r) => r === "DriftNotCorrected")).toHaveLength(1);

    // Deletion is still allowed: the agent goes with the resource.
    await kubectl("delete", "agent", "frozen", "--wait=true", "--timeout=30s");
    expect(t.stack.emulator.state.agents.get(id)).toBeUndefined();
  }, 60_000);

  it("a Sandbox without Update is still renewed: keeping the VM alive is not an update", async () => {
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: kept}
spec: {tier: standard, ttlSeconds: 5, renewBeforeSeconds: 2, managementPolicies: [Observe, Create, Delete]}`, t.namespace);
    const vmId = (await waitForReady(t.stack, "sandboxes", "kept")).status?.vmId as string;
    const from = mark();
    await kubectl("patch", "sandbox", "kept", "--type=merge", "-p", '{"spec":{"tier":"large"}}');
    await sleep(10_000); // two TTL windows
    expect(new Set(writesTo(vmId, from))).toEqual(new Set(["vms.renew"]));
    expect(t.stack.emulator.state.vms.get(vmId)).toMatchObject({ state: "allocated", tier: "standard" });
    const r = await getResource(t.stack.kube, "sandboxes", t.namespace, "kept");
    expect(condition(r, "Drifted")).toMatchObject({ status: "True", reason: "UpdateNotAllowed" });
  }, 60_000);
});

describe("managementPolicies: what the API server refuses", () => {
  const refused = async (spec: string) => {
    const res = await runKubectl(["apply", "-f", "-"], {
      namespace: t.namespace,
      input: `apiVersion: agentcompute.dev/v1alpha1\nkind: Agent\nmetadata: {name: refused}\nspec: ${spec}`,
    });
    expect(res.exitCode).not.toBe(0);
    return res.stderr;
  };

  it("refuses contradictions and lists without Observe, naming the field and the fix", async () => {
    expect(await refused('{image: "x:1", deletionPolicy: Orphan, managementPolicies: [Observe, Create, Update, Delete]}')).toMatch(
      /spec\.deletionPolicy: .*contradicts spec\.managementPolicies listing Delete/,
    );
    expect(await refused('{image: "x:1", managementPolicies: [Create, Update]}')).toMatch(/spec\.managementPolicies: .*must include Observe/);
    expect(await refused('{image: "x:1", managementPolicies: ["*", Observe]}')).toMatch(/stands alone/);
    expect(await refused('{image: "x:1", managementPolicies: [Observe, Fetch]}')).toMatch(/managementPolicies/);
    expect(await refused("{description: no image}")).toMatch(/spec\.image: Required value/);
  });
});
