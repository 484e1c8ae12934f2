// agentcompute.dev/poll-interval: the resource comes back at its own period, its service object
// is read again (one GET, not the list) once the snapshot is older than that period, and a bad
// value is reported once (a Warning Event) and in the Ready message, the default period kept.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Annotations } from "../../../src/api/names.js";
import type { Agent, Skill } from "../../../src/api/index.js";
import { agents } from "../../../src/controllers/agent.js";
import { skills } from "../../../src/controllers/skill.js";
import type { Result } from "../../../src/runtime/controller.js";
import { condition, World } from "./helpers.js";

let w: World;
beforeEach(async () => {
  w = await World.start();
});
afterEach(async () => {
  await w.close();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const kind = () => agents(w.ctx);
const apply = (name: string, annotations: Record<string, string> = {}) =>
  w.apply<Agent>("agents", { metadata: { name, annotations }, spec: { image: "registry.example/a:1" } });
const requeue = (r: Result | void) => (r as { requeueAfterMs: number }).requeueAfterMs;

describe("poll interval", () => {
  it("requeues at the resource's own period, jittered, instead of the sync period", async () => {
    apply("fast", { [Annotations.pollInterval]: "30s" });
    apply("default");
    const fast = requeue(await w.reconcile(kind(), "fast"));
    expect(fast).toBeGreaterThanOrEqual(27_000);
    expect(fast).toBeLessThanOrEqual(33_000);
    expect(requeue(await w.reconcile(kind(), "default"))).toBeGreaterThanOrEqual(540_000);
  });

  it("reads its object with one GET once the snapshot is older than its period; others are served from the snapshot", async () => {
    apply("fast", { [Annotations.pollInterval]: "1s" });
    apply("default");
    await w.reconcile(kind(), "fast");
    await w.reconcile(kind(), "default");
    w.calls();
    await w.reconcile(kind(), "fast");
    expect(w.calls()).toEqual([]); // just written: its answer is as good as a read

    await sleep(1_000);
    const id = w.get<Agent>("agents", "fast").status?.agentId as string;
    w.emu.state.updateAgent(id, { image: "changed/out-of-band" });
    await w.reconcile(kind(), "default");
    expect(w.calls()).toEqual([]);
    await w.reconcile(kind(), "fast");
    // The drift is seen at the resource's own period and put back.
    expect(w.calls()).toEqual(["agents.get", "agents.update"]);
    expect(w.emu.state.agents.get(id)?.image).toBe("registry.example/a:1");
  });

  it("a Skill's too", async () => {
    w.apply<Skill>("skills", { metadata: { name: "sk", annotations: { [Annotations.pollInterval]: "1s" } }, spec: { content: "v1" } });
    await w.reconcile(skills(w.ctx), "sk");
    w.calls();
    await sleep(1_000);
    w.emu.state.updateSkill("sk", { content: "theirs" });
    await w.reconcile(skills(w.ctx), "sk");
    expect(w.calls()).toEqual(["skills.get", "skills.update"]);
    expect(w.emu.state.skills.get("sk")?.content).toBe("v1");
  });

  it("takes a bare 404 (a gateway's) to that GET for a failed read, not for an object gone: nothing is created again", async () => {
    apply("fast", { [Annotations.pollInterval]: "1s" });
    w.apply<Skill>("skills", { metadata: { name: "sk", annotations: { [Annotations.pollInterval]: "1s" } }, spec: { content: "v1" } });
    await w.reconcile(kind(), "fast");
    await w.reconcile(skills(w.ctx), "sk");
    const id = w.get<Agent>("agents", "fast").status?.agentId as string;
    await sleep(1_000);
    w.emu.injectFault({ method: "GET", path: `/registry/v1/agents/${id}`, times: 1, action: { status: 404, body: "404 page not found" } });
    w.emu.injectFault({ method: "GET", path: "/compute/v1/skills/sk", times: 1, action: { status: 404, body: "404 page not found" } });
    w.calls();
    await expect(w.reconcile(kind(), "fast")).rejects.toMatchObject({ status: 404 });
    await expect(w.reconcile(skills(w.ctx), "sk")).rejects.toMatchObject({ status: 404 });
    expect(w.calls()).toEqual(["agents.get", "skills.get"]);
    // Read again: there, as it was.
    await w.reconcile(kind(), "fast");
    await w.reconcile(skills(w.ctx), "sk");
    expect(w.calls()).toEqual(["agents.get", "skills.get"]);
    expect(w.get<Agent>("agents", "fast").status?.agentId).toBe(id);
    expect([...w.emu.state.agents.values()].filter((a) => a.name === "fast")).toHaveLength(1);
  });

  it("a bad value: one Warning Event, said in the Ready message, and the sync period kept", async () => {
    apply("bad", { [Annotations.pollInterval]: "every minute" });
    const first = requeue(await w.reconcile(kind(), "bad"));
    expect(first).toBeGreaterThanOrEqual(540_000);
    await w.reconcile(kind(), "bad");
    const warnings = w.events.filter((e) => e.type === "Warning");
    expect(warnings.map((e) => e.reason)).toEqual(["InvalidPollInterval"]);
    expect(warnings[0]?.message).toContain(Annotations.pollInterval);
    const ready = condition(w.get<Agent>("agents", "bad"), "Ready");
    expect(ready).toMatchObject({ status: "True", reason: "Available" });
    expect(ready?.message).toContain(`${Annotations.pollInterval}: "every minute" is not a duration (examples: 30s, 10m, 1h30m)`);

    apply("bad", { [Annotations.pollInterval]: "2m" });
    const fixed = requeue(await w.reconcile(kind(), "bad"));
    expect(fixed).toBeLessThanOrEqual(132_000);
    expect(condition(w.get<Agent>("agents", "bad"), "Ready")?.message).toBe("the service object matches the spec");
  });
});
