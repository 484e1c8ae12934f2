// agentcompute.dev/paused: "true": no create, update, replace or delete in the service while it
// holds (deletion waits with the finalizer), one Paused and one Resumed Event, what changed
// meanwhile applied once on resume, and a paused Sandbox's VM still renewed.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Annotations, CONFIG_HASH_KEY, FINALIZER, MARKER_KEY } from "../../../src/api/names.js";
import type { Agent, Connection, Sandbox, Skill } from "../../../src/api/index.js";
import { agents } from "../../../src/controllers/agent.js";
import { allocationHash, sandboxes } from "../../../src/controllers/sandbox.js";
import { skills } from "../../../src/controllers/skill.js";
import { RetryNoLaterThan } from "../../../src/runtime/controller.js";
import { condition, NS, ORG, World, secretOf } from "./helpers.js";

let w: World;
beforeEach(async () => {
  w = await World.start();
});
afterEach(async () => {
  await w.close();
});

const PAUSED = { [Annotations.paused]: "true" };
const reasons = () => w.events.map((e) => e.reason);

describe("paused Agent", () => {
  const kind = () => agents(w.ctx);
  const apply = (image: string, annotations: Record<string, string> = {}) =>
    w.apply<Agent>("agents", { metadata: { name: "ag", annotations }, spec: { image } });
  const agent = () => w.get<Agent>("agents", "ag");

  it("sends nothing while paused, says so once, and applies the change made meanwhile exactly once on resume", async () => {
    apply("registry.example/a:1");
    await w.reconcile(kind(), "ag");
    const id = agent().status?.agentId as string;
    w.calls();
    w.events.length = 0;

    apply("registry.example/a:1", PAUSED);
    expect(await w.reconcile(kind(), "ag")).toBeUndefined(); // no requeue: the annotation's removal brings it back
    expect(condition(agent(), "Ready")).toMatchObject({ status: "True", reason: "ReconcilePaused" });
    expect(condition(agent(), "Reconciling")).toMatchObject({ status: "False", reason: "ReconcilePaused" });
    expect(condition(agent(), "Stalled")).toMatchObject({ status: "False" });

    apply("registry.example/a:2", PAUSED);
    await w.reconcile(kind(), "ag");
    await w.reconcile(kind(), "ag");
    expect(w.calls()).toEqual([]); // not even a read
    expect(w.emu.state.agents.get(id)?.image).toBe("registry.example/a:1");
    // The spec changed and was not applied: not Ready, but nothing in progress either.
    expect(condition(agent(), "Ready")).toMatchObject({ status: "False", reason: "ReconcilePaused" });
    expect(condition(agent(), "Ready")?.message).toContain(Annotations.paused);
    expect(condition(agent(), "Reconciling")?.status).toBe("False");
    expect(agent().status?.observedGeneration).toBe(agent().metadata.generation);
    expect(reasons()).toEqual(["Paused"]);

    apply("registry.example/a:2", {});
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual(["agents.update"]);
    expect(w.emu.state.agents.get(id)?.image).toBe("registry.example/a:2");
    expect(condition(agent(), "Ready")).toMatchObject({ status: "True", reason: "Available" });
    expect(reasons()).toEqual(["Paused", "Updated", "Resumed"]);
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual([]);
    expect(reasons()).toEqual(["Paused", "Updated", "Resumed"]);
  });

  it("a paused resource being deleted keeps its finalizer and its service object until resumed", async () => {
    apply("registry.example/a:1");
    await w.reconcile(kind(), "ag");
    const id = agent().status?.agentId as string;
    w.calls();

    w.apply<Agent>("agents", { metadata: { name: "ag", annotations: PAUSED, deletionTimestamp: "2030-01-01T00:00:00Z" }, spec: agent().spec });
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual([]);
    expect(agent().metadata.finalizers).toContain(FINALIZER);
    expect(w.emu.state.agents.get(id)).toBeDefined();
    expect(condition(agent(), "Ready")).toMatchObject({ status: "False", reason: "ReconcilePaused" });
    expect(condition(agent(), "Ready")?.message).toContain("deletion waits");

    w.apply<Agent>("agents", { metadata: { name: "ag", annotations: {} }, spec: agent().spec });
    // The finalizer's removal fails once: its retry says Resumed, once.
    w.writeFault = { path: /\/agents\/ag$/, error: new Error("the API server answered 503") };
    await expect(w.reconcile(kind(), "ag")).rejects.toThrow();
    expect(w.writes()).toEqual(["agents.delete"]);
    expect(reasons()).not.toContain("Resumed");
    w.writeFault = undefined;
    await w.reconcile(kind(), "ag");
    expect(agent().metadata.finalizers ?? []).not.toContain(FINALIZER);
    expect(w.emu.state.agents.get(id)).toBeUndefined();
    expect(reasons()).toEqual(["Created", "Paused", "Deleted", "Resumed"]);
  });
});

describe("paused Skill", () => {
  const kind = () => skills(w.ctx);

  it("created paused: nothing is created (and no finalizer added) until resumed", async () => {
    w.apply<Skill>("skills", { metadata: { name: "sk", annotations: PAUSED }, spec: { content: "v1" } });
    await w.reconcile(kind(), "sk");
    expect(w.calls()).toEqual([]);
    expect(w.get<Skill>("skills", "sk").metadata.finalizers ?? []).toEqual([]);
    expect(condition(w.get<Skill>("skills", "sk"), "Ready")).toMatchObject({ status: "False", reason: "ReconcilePaused" });

    w.apply<Skill>("skills", { metadata: { name: "sk", annotations: { [Annotations.paused]: "false" } }, spec: { content: "v1" } });
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual(["skills.create"]);
    expect(reasons()).toEqual(["Paused", "Created", "Resumed"]);
  });
});

describe("paused Sandbox", () => {
  const kind = () => sandboxes(w.ctx);
  const apply = (spec: Partial<Sandbox["spec"]>, annotations: Record<string, string> = {}) =>
    w.apply<Sandbox>("sandboxes", { metadata: { name: "sb", annotations }, spec: { tier: "standard", ttlSeconds: 600, ...spec } });
  const sandbox = () => w.get<Sandbox>("sandboxes", "sb");

  it("keeps renewing its VM (the only write), leaves a replacement for the resume", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    w.calls();

    apply({ tier: "large" }, PAUSED); // a change that would replace the VM
    const result = await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(result).toMatchObject({ priority: true });
    expect((result as { requeueAfterMs: number }).requeueAfterMs).toBeLessThanOrEqual(480_000);
    expect(condition(sandbox(), "Ready")?.message).toContain("still renewed");

    w.advance(481_000);
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.renew"]);
    expect(sandbox().status).toMatchObject({ vmId, renewals: 1 });
    expect(w.emu.state.vms.get(vmId)?.tier).toBe("standard");
    expect(Date.parse(sandbox().status?.expiresAt ?? "")).toBe(w.clock.ms + 600_000);

    apply({ tier: "large" });
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.allocate", "vms.release"]);
    expect(reasons()).toEqual(["Created", "Paused", "Replaced", "Resumed"]);
  });

  it("a change made while paused and undone before the resume leaves it Ready, with its VM", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    apply({ tier: "large" }, PAUSED);
    await w.reconcile(kind(), "sb");
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "False", reason: "ReconcilePaused" });

    apply({ tier: "standard" }, PAUSED);
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "True", reason: "ReconcilePaused", observedGeneration: sandbox().metadata.generation });

    apply({});
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(sandbox().status?.vmId).toBe(vmId);
    expect(condition(sandbox(), "Ready")?.status).toBe("True");
  });

  it("is not said Ready for a VM found by its marker that was allocated for another spec (a replacement whose status write was lost)", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const first = sandbox().status?.vmId as string;
    apply({ tier: "large" }, PAUSED);
    await w.reconcile(kind(), "sb");
    expect(condition(sandbox(), "Ready")?.status).toBe("False");
    // The VM status names is gone; one allocated for yet another spec carries the marker.
    w.emu.state.releaseVM(first);
    const request = { tier: "xlarge", ttl_seconds: 600, org_id: ORG };
    const other = w.emu.state.allocateVM({ ...request, metadata: { [MARKER_KEY]: sandbox().metadata.uid, [CONFIG_HASH_KEY]: allocationHash(sandbox(), request) } }).vm_id;
    w.handle().vms.invalidate();
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(sandbox().status?.vmId).toBe(other);
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "False", reason: "ReconcilePaused" });
  });

  it("is not Ready once an envFrom Secret is rotated while paused (its VM keeps the old values), and is Ready again with a new VM on resume", async () => {
    const secret = (value: string) => w.secrets.set(secretOf("env", { TOKEN: value }));
    secret("first-value-aa11");
    apply({ envFrom: [{ secretRef: { name: "env" } }] });
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    apply({ envFrom: [{ secretRef: { name: "env" } }] }, PAUSED);
    await w.reconcile(kind(), "sb");
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "True", reason: "ReconcilePaused" });

    secret("rotated-value-bb22");
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    const ready = condition(sandbox(), "Ready");
    expect(ready).toMatchObject({ status: "False", reason: "ReconcilePaused" });
    expect(ready?.message).toContain("not applied yet: tier, skills, env");
    expect(JSON.stringify(sandbox())).not.toMatch(/first-value|rotated-value/);
    expect(sandbox().status?.vmId).toBe(vmId);

    // Put back while still paused: the VM holds the values again, and is Ready again.
    secret("first-value-aa11");
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "True", reason: "ReconcilePaused" });
    expect(condition(sandbox(), "Ready")?.message).not.toContain("not applied yet");

    secret("rotated-value-bb22");
    await w.reconcile(kind(), "sb");
    expect(condition(sandbox(), "Ready")?.status).toBe("False");
    apply({ envFrom: [{ secretRef: { name: "env" } }] });
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.allocate", "vms.release"]);
    expect(condition(sandbox(), "Ready")?.status).toBe("True");
    expect(sandbox().status?.vmId).not.toBe(vmId);
  });

  it("keeps renewing its VM while its Connection is not Ready and its Secret is gone", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    apply({}, PAUSED);
    w.connectionNotReady("ServiceUnavailable", "usage: 503");
    w.secrets.delete(NS, "creds");
    w.advance(481_000);
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.renew"]);
    expect(sandbox().status?.renewals).toBe(1);
    expect(condition(sandbox(), "Ready")?.message).not.toContain("cannot keep it alive");
  });

  it("retries a status write that failed no later than the next renewal, however long the backoff has grown, and says Paused once", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    apply({}, PAUSED);
    w.writeFault = { path: /\/status$/, error: new Error("the API server answered 503") };
    const failed = await w.reconcile(kind(), "sb").then(() => undefined, (err: unknown) => err);
    expect(failed).toBeInstanceOf(RetryNoLaterThan);
    expect(failed).toMatchObject({ priority: true });
    expect((failed as RetryNoLaterThan).ms).toBeLessThanOrEqual(480_000);
    // The pause is said once it is in status: not by the failed write, once by its retry.
    expect(reasons().filter((r) => r === "Paused")).toEqual([]);
    w.writeFault = undefined;
    await w.reconcile(kind(), "sb");
    await w.reconcile(kind(), "sb");
    expect(reasons().filter((r) => r === "Paused")).toEqual(["Paused"]);
  });

  it("says Resumed once the status says so: not by a status write that failed, once by its retry", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    apply({}, PAUSED);
    await w.reconcile(kind(), "sb");
    apply({});
    w.writeFault = { path: /\/status$/, error: new Error("the API server answered 503") };
    await expect(w.reconcile(kind(), "sb")).rejects.toThrow();
    expect(reasons().filter((r) => r === "Resumed")).toEqual([]);
    w.writeFault = undefined;
    await w.reconcile(kind(), "sb");
    await w.reconcile(kind(), "sb");
    expect(reasons().filter((r) => r === "Resumed")).toEqual(["Resumed"]);
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "True", reason: "Available" });
  });

  it("asks nothing of the service with credentials it refused, none accepted before, and says its VM cannot be kept alive", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    apply({}, PAUSED);
    // A process that never had a client accepted (restarted since): the Secret's key is refused,
    // and the Connection still says Ready (its controller has not looked since).
    w.pool.forget(NS, "default");
    w.secrets.set({ metadata: { name: "creds", namespace: NS }, data: { apiKey: Buffer.from("a-mistyped-key").toString("base64") } });
    await expect(w.pool.clientFor(w.get<Connection>("connections", "default")).client.authenticate()).rejects.toThrow(/credentials refused/);
    w.advance(481_000);
    const before = w.emu.requests.length;
    await expect(w.reconcile(kind(), "sb")).resolves.toMatchObject({ requeue: true });
    expect(w.emu.requests.slice(before)).toEqual([]); // not one more refused token request
    expect(condition(sandbox(), "Ready")?.message).toMatch(/cannot keep its VM alive: CredentialsRefused: the token service refuses/);
  });

  it("says neither that a VM with keepAlive false is renewed nor that it cannot be, when its Connection is gone", async () => {
    apply({ keepAlive: false });
    await w.reconcile(kind(), "sb");
    apply({ keepAlive: false }, PAUSED);
    w.informer({ kind: "connections", plural: "connections" }).delete(NS, "default");
    const result = await w.reconcile(kind(), "sb");
    expect(condition(sandbox(), "Ready")?.message).not.toMatch(/renewed|keep its VM alive/);
    expect(result).toBeUndefined();
  });

  it("does not replace a VM that is gone while paused, and does once resumed", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    apply({}, PAUSED);
    await w.reconcile(kind(), "sb");
    w.emu.state.deleteVM(vmId);
    w.handle().vms.invalidate();
    w.calls();
    await w.reconcile(kind(), "sb");
    // Not Ready, and says why: the VM it names is gone.
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "False", reason: "ReconcilePaused", message: expect.stringContaining("its VM is gone") });
    w.advance(481_000);
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);

    apply({});
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.allocate"]);
    expect(sandbox().status?.vmId).not.toBe(vmId);
  });

  it("imported read-only ([Observe]) and paused: still looked at, so a VM that ran out is not Ready, and no replacement is promised", async () => {
    const vm = w.emu.state.allocateVM({ tier: "standard", ttl_seconds: 600, org_id: ORG, metadata: {} });
    const imported = (annotations: Record<string, string>) =>
      w.apply<Sandbox>("sandboxes", {
        metadata: { name: "sb", annotations: { [Annotations.externalId]: vm.vm_id, ...annotations } },
        spec: { tier: "standard", ttlSeconds: 600, managementPolicies: ["Observe"] },
      });
    imported({});
    await w.reconcile(kind(), "sb");
    imported(PAUSED);
    await w.reconcile(kind(), "sb");
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "True", reason: "ReconcilePaused" });
    w.advance(601_000); // it runs out: nothing renews an imported VM
    w.handle().vms.invalidate();
    w.calls();
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual([]);
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "False", reason: "ReconcilePaused", message: expect.stringContaining("its VM is gone") });
    expect(condition(sandbox(), "Ready")?.message).not.toContain("a new one is allocated");
  });

  it("a paused Sandbox being deleted keeps its VM, renewed, and its finalizer", async () => {
    apply({});
    await w.reconcile(kind(), "sb");
    const vmId = sandbox().status?.vmId as string;
    w.apply<Sandbox>("sandboxes", { metadata: { name: "sb", annotations: PAUSED, deletionTimestamp: "2030-01-01T00:00:00Z" }, spec: sandbox().spec });
    w.calls();
    w.advance(481_000);
    await w.reconcile(kind(), "sb");
    expect(w.writes()).toEqual(["vms.renew"]);
    expect(sandbox().metadata.finalizers).toContain(FINALIZER);
    expect(w.emu.state.vms.get(vmId)?.state).toBe("allocated");
  });
});
