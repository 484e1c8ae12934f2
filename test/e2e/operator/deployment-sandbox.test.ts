// AgentDeployment and Sandbox end to end: the real API server, the emulator, the operator.
import { afterEach, describe, expect, it } from "vitest";
import { kubectlOk, waitFor } from "../support/kube.js";
import { API_KEY, apply, condition, everythingSaid, getResource, useStack, waitForReady } from "../support/operator.js";

const SYNC_MS = 4_000;
const t = useStack("deploy-sbx", { syncPeriodMs: SYNC_MS });

async function secretData(name: string): Promise<Record<string, string>> {
  const out = JSON.parse(await kubectlOk(["get", "secret", name, "-o", "json"], { namespace: t.namespace })) as {
    data?: Record<string, string>;
  };
  return Object.fromEntries(Object.entries(out.data ?? {}).map(([k, v]) => [k, Buffer.from(v, "base64").toString("utf8")]));
}

const deployment = (id: string) => t.stack.emulator.state.deployments.get(id);

/** Every token the service issued in these tests (the emulator forgets those of deployments deleted and VMs ended). */
const issued = { vms: new Set<string>(), deployments: new Set<string>() };
function noteTokens(): void {
  for (const vm of t.stack.emulator.state.vms.values()) if (vm.token) issued.vms.add(vm.token);
  for (const d of t.stack.emulator.state.deployments.values()) if (d.token) issued.deployments.add(d.token);
}
afterEach(noteTokens);

describe("AgentDeployment", () => {
  it("applied before its Agent waits, then runs it, with the token in its Secret", async () => {
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: AgentDeployment
metadata: {name: web}
spec: {agentRef: {name: web-agent}, tier: standard, env: {LOG: info}}`, t.namespace);
    await waitForReady(t.stack, "agentdeployments", "web", { status: "False", reason: "WaitingForAgent" });
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: web-agent}
spec: {image: "example/web:1"}`, t.namespace);
    const agd = await waitForReady(t.stack, "agentdeployments", "web");
    const id = agd.status?.deploymentId as string;
    expect(deployment(id)?.state).toBe("running");
    expect(agd.status?.endpoint).toBe(deployment(id)?.endpoint);
    const secret = await secretData("web-agentcompute");
    expect(secret.token).toBe(deployment(id)?.token);
    expect(JSON.stringify(agd.status)).not.toContain(deployment(id)?.token as string);
  });

  it("stops on suspend, starts again on resume, and restores an out-of-band stop", async () => {
    const id = (await waitForReady(t.stack, "agentdeployments", "web")).status?.deploymentId as string;
    await kubectlOk(["patch", "agentdeployment", "web", "--type=merge", "-p", '{"spec":{"suspend":true}}'], { namespace: t.namespace });
    await waitFor(() => deployment(id)?.state === "stopped", { description: "deployment stopped" });
    await kubectlOk(["patch", "agentdeployment", "web", "--type=merge", "-p", '{"spec":{"suspend":false}}'], { namespace: t.namespace });
    await waitFor(() => deployment(id)?.state === "running", { description: "deployment running again" });

    t.stack.emulator.state.stopDeployment(id);
    await waitFor(() => deployment(id)?.state === "running", { timeoutMs: SYNC_MS * 3, description: "out-of-band stop restored" });
  });

  it("redeploys once per new redeploy-at value, and once when the Agent's image changes", async () => {
    const id = (await waitForReady(t.stack, "agentdeployments", "web")).status?.deploymentId as string;
    const revision = deployment(id)?.revision ?? 0;
    await kubectlOk(["annotate", "agentdeployment", "web", "agentcompute.dev/redeploy-at=one", "--overwrite"], { namespace: t.namespace });
    await waitFor(() => (deployment(id)?.revision ?? 0) === revision + 1, { description: "one redeploy" });
    await waitFor(async () => (await getResource(t.stack.kube, "agentdeployments", t.namespace, "web")).status?.redeployAt === "one");
    await new Promise((r) => setTimeout(r, 1_000));
    expect(deployment(id)?.revision).toBe(revision + 1);

    await kubectlOk(["patch", "agent", "web-agent", "--type=merge", "-p", '{"spec":{"image":"example/web:2"}}'], { namespace: t.namespace });
    await waitFor(() => deployment(id)?.image === "example/web:2", { description: "rollout of the new image" });
    expect(deployment(id)?.revision).toBe(revision + 2);
  });

  it("reports a deployment the service says failed, with a Warning, and redeploys it on a new redeploy-at value", async () => {
    const id = (await waitForReady(t.stack, "agentdeployments", "web")).status?.deploymentId as string;
    const revision = deployment(id)?.revision ?? 0;
    t.stack.emulator.state.setDeploymentState(id, "failed");
    const failed = await waitForReady(t.stack, "agentdeployments", "web", { status: "False", reason: "DeploymentFailed", timeoutMs: SYNC_MS * 3 });
    expect(failed.status?.state).toBe("failed");
    expect(condition(failed, "Ready")?.message).toContain("agentcompute.dev/redeploy-at");
    expect(condition(failed, "Stalled")).toMatchObject({ status: "True", reason: "DeploymentFailed" });
    const events = await kubectlOk(["get", "events", "--field-selector", "reason=DeploymentFailed,type=Warning", "-o", "name"], { namespace: t.namespace });
    expect(events.trim().split("\n")).toHaveLength(1);
    expect(deployment(id)?.revision).toBe(revision); // not redeployed on the operator's own account

    await kubectlOk(["annotate", "agentdeployment", "web", "agentcompute.dev/redeploy-at=after-failure", "--overwrite"], { namespace: t.namespace });
    await waitForReady(t.stack, "agentdeployments", "web");
    expect(deployment(id)).toMatchObject({ state: "running", revision: revision + 1 });
  });

  it("replaces the deployment when its options change, with an Event saying the endpoint may change", async () => {
    const before = (await waitForReady(t.stack, "agentdeployments", "web")).status?.deploymentId as string;
    await kubectlOk(["patch", "agentdeployment", "web", "--type=merge", "-p", '{"spec":{"tier":"large"}}'], { namespace: t.namespace });
    const after = await waitFor(async () => {
      const r = await waitForReady(t.stack, "agentdeployments", "web");
      return r.status?.deploymentId !== before ? r : undefined;
    });
    expect(deployment(before)).toBeUndefined();
    expect(deployment(after.status?.deploymentId as string)?.tier).toBe("large");
    const events = await kubectlOk(["get", "events", "--field-selector", "reason=Replaced", "-o", "json"], { namespace: t.namespace });
    expect(events).toContain("endpoint may have changed");
  });

  it("is deleted from the service with the resource", async () => {
    const id = (await waitForReady(t.stack, "agentdeployments", "web")).status?.deploymentId as string;
    await kubectlOk(["delete", "agentdeployment", "web", "--wait=true", "--timeout=30s"], { namespace: t.namespace });
    expect(deployment(id)).toBeUndefined();
  });
});

describe("Sandbox", () => {
  it("keeps one VM alive through several short TTL windows and counts the renewals", async () => {
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: short-ttl}
spec: {tier: standard, ttlSeconds: 6, renewBeforeSeconds: 2}`, t.namespace);
    const first = await waitForReady(t.stack, "sandboxes", "short-ttl");
    const vmId = first.status?.vmId as string;
    // Five windows of 6 s: the VM must live through all of them.
    const done = await waitFor(
      async () => {
        const r = await getResource(t.stack.kube, "sandboxes", t.namespace, "short-ttl");
        return ((r.status?.renewals as number | undefined) ?? 0) >= 5 ? r : undefined;
      },
      { timeoutMs: 60_000, description: "five renewals" },
    );
    expect(done.status?.vmId).toBe(vmId);
    expect(t.stack.emulator.state.vms.get(vmId)?.state).toBe("allocated");
    expect(t.stack.emulator.state.usage.filter((u) => u.vm_id === vmId)).toEqual([]);
    const secret = await secretData("short-ttl-agentcompute");
    expect(secret.token).toBeTruthy();
    expect(secret.wsURL).toBe(done.status?.wsURL);
    // Renewals are routine: status counts them; the Sandbox's Events are its allocation only.
    const events = JSON.parse(
      await kubectlOk(["get", "events", "--field-selector", "involvedObject.name=short-ttl", "-o", "json"], { namespace: t.namespace }),
    ) as { items: Array<{ reason: string }> };
    expect(events.items.map((e) => e.reason)).toEqual(["Created"]);
  }, 90_000);

  it("replaces a VM deleted out of band, with an Event", async () => {
    const before = (await waitForReady(t.stack, "sandboxes", "short-ttl")).status?.vmId as string;
    t.stack.emulator.state.deleteVM(before);
    const after = await waitFor(async () => {
      const r = await getResource(t.stack.kube, "sandboxes", t.namespace, "short-ttl");
      return r.status?.vmId !== before && condition(r, "Ready")?.status === "True" ? r : undefined;
    }, { timeoutMs: 20_000, description: "a new VM" });
    expect(t.stack.emulator.state.vms.get(after.status?.vmId as string)?.state).toBe("allocated");
    const events = await kubectlOk(["get", "events", "--field-selector", "reason=VMReplaced", "-o", "json"], { namespace: t.namespace });
    expect(events).toContain(before);
  });

  it("reports Expired and does not replace the VM when keepAlive is false", async () => {
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: one-shot}
spec: {tier: standard, ttlSeconds: 3, keepAlive: false}`, t.namespace);
    const first = await waitForReady(t.stack, "sandboxes", "one-shot");
    const r = await waitForReady(t.stack, "sandboxes", "one-shot", { status: "False", reason: "Expired", timeoutMs: 20_000 });
    expect(r.status?.vmId).toBe(first.status?.vmId);
    const allocations = t.stack.emulator.requests.filter((q) => q.operation === "vms.allocate" && q.status === 201).length;
    await new Promise((res) => setTimeout(res, 2_000));
    expect(t.stack.emulator.requests.filter((q) => q.operation === "vms.allocate" && q.status === 201).length).toBe(allocations);
  });

  it("waits for its Skills to be Ready, then loads them", async () => {
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: with-skill}
spec: {tier: standard, skills: [late-skill]}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: late-skill}
spec: {content: "later", connectionRef: {name: not-yet}}`, t.namespace);
    await waitForReady(t.stack, "sandboxes", "with-skill", { status: "False", reason: "WaitingForSkill" });
    await kubectlOk(["patch", "skill", "late-skill", "--type=merge", "-p", '{"spec":{"connectionRef":{"name":"default"}}}'], { namespace: t.namespace });
    const r = await waitForReady(t.stack, "sandboxes", "with-skill");
    expect(r.status?.skillsLoaded).toEqual(["late-skill"]);
  });

  it("releases the VM on delete, and also a VM a crash left behind for it", async () => {
    const sb = await waitForReady(t.stack, "sandboxes", "with-skill");
    // What a crash between allocate and the status write leaves: a VM with this resource's marker.
    const stray = t.stack.emulator.state.allocateVM({
      tier: "standard",
      ttl_seconds: 600,
      org_id: "org-e2e",
      metadata: { "agentcompute.dev/uid": sb.metadata.uid },
    });
    await kubectlOk(["delete", "sandbox", "with-skill", "--wait=true", "--timeout=30s"], { namespace: t.namespace });
    const gone = (id: string) => t.stack.emulator.state.vms.get(id) === undefined || t.stack.emulator.state.vms.get(id)?.state !== "allocated";
    expect(gone(sb.status?.vmId as string)).toBe(true);
    expect(gone(stray.vm_id)).toBe(true);
    expect(t.stack.emulator.state.usage.some((u) => u.vm_id === sb.status?.vmId && u.reason === "released")).toBe(true);
  });

  it("never shows tokens or the API key in logs, events or status", async () => {
    noteTokens();
    const said = await everythingSaid(t.stack);
    expect(said.length).toBeGreaterThan(1000);
    // The deployments and VMs of the tests above, each with its own token.
    expect(issued.deployments.size).toBeGreaterThanOrEqual(2);
    expect(issued.vms.size).toBeGreaterThanOrEqual(3);
    for (const token of [...issued.vms, ...issued.deployments]) expect(said).not.toContain(token);
    expect(said).not.toContain(API_KEY);
  });
});
