// agentcompute.dev/paused: "true" end to end: the real API server, the emulator, the operator.
// What the service saw is counted from the emulator's request log: a paused resource gets no
// write while its spec changes, gets exactly the one write the change needs when resumed, a
// paused Sandbox's VM is still renewed (the only write allowed), and deleting a paused resource
// waits, finalizer and service object kept, until it is resumed.
import { describe, expect, it } from "vitest";
import { kubectlOk, waitFor } from "../support/kube.js";
import { apply, condition, eventReasons, getResource, useStack, waitForReady } from "../support/operator.js";

// Short, so that several resyncs happen while paused: they must not write either.
const SYNC_MS = 3_000;
const t = useStack("pause", { syncPeriodMs: SYNC_MS });

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const mark = () => t.stack.emulator.requests.length;
/** Operations (e.g. "agents.update") the service answered since `from`, token requests aside. */
const opsSince = (from: number) => t.stack.emulator.requests.slice(from).filter((r) => r.operation !== "token");
const writesSince = (from: number) => opsSince(from).filter((r) => r.method !== "GET").map((r) => r.operation);
const kubectl = (...args: string[]) => kubectlOk(args, { namespace: t.namespace });

async function waitPaused(plural: string, name: string) {
  return waitFor(
    async () => {
      const r = await getResource(t.stack.kube, plural, t.namespace, name);
      const current = r.status?.observedGeneration === r.metadata.generation;
      return current && condition(r, "Ready")?.reason === "ReconcilePaused" ? r : undefined;
    },
    { timeoutMs: 20_000, description: `${plural}/${name} paused` },
  );
}

describe("paused Agent and Skill", () => {
  it("get no write while their specs change, and exactly one update each once resumed", async () => {
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: still}
spec: {image: "example/still:1"}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: still-skill}
spec: {content: "v1"}`, t.namespace);
    const agentId = (await waitForReady(t.stack, "agents", "still")).status?.agentId as string;
    await waitForReady(t.stack, "skills", "still-skill");

    await kubectl("annotate", "agent/still", "skill/still-skill", "agentcompute.dev/paused=true");
    await waitPaused("agents", "still");
    await waitPaused("skills", "still-skill");
    const from = mark();
    await kubectl("patch", "agent", "still", "--type=merge", "-p", '{"spec":{"image":"example/still:2"}}');
    await kubectl("patch", "skill", "still-skill", "--type=merge", "-p", '{"spec":{"content":"v2"}}');
    const agent = await waitPaused("agents", "still");
    await waitPaused("skills", "still-skill");
    await sleep(SYNC_MS * 2.5); // several sync periods
    expect(writesSince(from)).toEqual([]);
    expect(t.stack.emulator.state.agents.get(agentId)?.image).toBe("example/still:1");
    expect(t.stack.emulator.state.skills.get("still-skill")?.content).toBe("v1");
    // The change is not applied: not Ready; but nothing is in progress, so no tool waits on it.
    expect(condition(agent, "Ready")).toMatchObject({ status: "False", reason: "ReconcilePaused" });
    expect(condition(agent, "Reconciling")?.status).toBe("False");
    expect(condition(agent, "Stalled")?.status).toBe("False");

    await kubectl("annotate", "agent/still", "skill/still-skill", "agentcompute.dev/paused-");
    await waitForReady(t.stack, "agents", "still", { reason: "Available" });
    await waitForReady(t.stack, "skills", "still-skill", { reason: "Available" });
    await sleep(SYNC_MS * 1.5);
    expect(writesSince(from).sort()).toEqual(["agents.update", "skills.update"]);
    expect(t.stack.emulator.state.agents.get(agentId)?.image).toBe("example/still:2");
    expect(t.stack.emulator.state.skills.get("still-skill")?.content).toBe("v2");
    for (const name of ["still", "still-skill"]) {
      const reasons = await eventReasons(t.stack, name);
      expect(reasons.filter((r) => r === "Paused"), name).toHaveLength(1);
      expect(reasons.filter((r) => r === "Resumed"), name).toHaveLength(1);
    }
  }, 90_000);

  it("deleting a paused resource keeps its finalizer and service object until it is resumed", async () => {
    const agentId = (await waitForReady(t.stack, "agents", "still")).status?.agentId as string;
    await kubectl("annotate", "agent/still", "agentcompute.dev/paused=true");
    await waitPaused("agents", "still");
    const from = mark();
    await kubectl("delete", "agent", "still", "--wait=false");
    await sleep(SYNC_MS * 1.5);
    const r = await getResource(t.stack.kube, "agents", t.namespace, "still");
    expect(r.metadata).toMatchObject({ finalizers: ["agentcompute.dev/finalizer"] });
    expect((r.metadata as { deletionTimestamp?: string }).deletionTimestamp).toBeDefined();
    expect(condition(r, "Ready")?.message).toContain("deletion waits");
    expect(t.stack.emulator.state.agents.get(agentId)).toBeDefined();
    expect(writesSince(from)).toEqual([]);

    await kubectl("annotate", "agent/still", "agentcompute.dev/paused-");
    await kubectl("wait", "--for=delete", "agent/still", "--timeout=30s");
    expect(t.stack.emulator.state.agents.get(agentId)).toBeUndefined();
    expect(writesSince(from)).toEqual(["agents.delete"]);
  });
});

describe("paused Sandbox", () => {
  it("keeps its VM alive and renewed through several short TTL windows, replaced only once resumed", async () => {
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: held}
spec: {tier: standard, ttlSeconds: 6, renewBeforeSeconds: 2}`, t.namespace);
    const vmId = (await waitForReady(t.stack, "sandboxes", "held")).status?.vmId as string;
    await kubectl("annotate", "sandbox/held", "agentcompute.dev/paused=true");
    await waitPaused("sandboxes", "held");
    const from = mark();
    // A change that replaces the VM: it must wait for the resume, the VM must not.
    await kubectl("patch", "sandbox", "held", "--type=merge", "-p", '{"spec":{"tier":"large"}}');
    const renewals = (await getResource(t.stack.kube, "sandboxes", t.namespace, "held")).status?.renewals as number;
    await sleep(15_000); // two and a half TTL windows
    const writes = writesSince(from);
    expect(new Set(writes)).toEqual(new Set(["vms.renew"]));
    expect(writes.length).toBeGreaterThanOrEqual(2); // one every ~4 s; 2 leaves room for a loaded CI machine
    expect(t.stack.emulator.state.vms.get(vmId)).toMatchObject({ state: "allocated", tier: "standard" });
    expect(t.stack.emulator.state.usage.filter((u) => u.vm_id === vmId)).toEqual([]);
    const paused = await waitPaused("sandboxes", "held");
    expect(paused.status?.vmId).toBe(vmId);
    expect(paused.status?.renewals as number).toBeGreaterThanOrEqual(renewals + 2);

    await kubectl("annotate", "sandbox/held", "agentcompute.dev/paused-");
    const after = await waitFor(async () => {
      const r = await waitForReady(t.stack, "sandboxes", "held", { reason: "Available" });
      return r.status?.vmId !== vmId ? r : undefined;
    }, { timeoutMs: 20_000, description: "replaced after the resume" });
    expect(t.stack.emulator.state.vms.get(after.status?.vmId as string)?.tier).toBe("large");
    expect(writesSince(from).filter((op) => op !== "vms.renew")).toEqual(["vms.allocate", "vms.release"]);
    const reasons = await eventReasons(t.stack, "held");
    expect(reasons.filter((r) => r === "Paused")).toHaveLength(1);
    expect(reasons.filter((r) => r === "Resumed")).toHaveLength(1);
  }, 90_000);
});
