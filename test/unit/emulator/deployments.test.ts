import { describe, expect, it } from "vitest";
import type { Agent, Deployment } from "../../../src/service/types.js";
import { FakeClock, agentBody, client, emulator, type Client } from "./helpers.js";

async function newAgent(c: Client, name = "agent"): Promise<Agent> {
  return (await c.post<{ agent: Agent }>("/registry/v1/agents", agentBody(name))).body.agent;
}

describe("emulator deployments", () => {
  it("deploys with known options, passes unknown ones through, and adds the service's fields", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const agent = await newAgent(c);
    const options = {
      name: "web",
      tier: "standard",
      skills: ["s1"],
      env: { A: "1" },
      metadata: { "agentcompute.dev/uid": "uid-1" },
      endpoint_name: "web-ep",
      replicas: 3,
      nested: { k: [true] },
      // A client cannot set what the service owns.
      id: "mine",
      state: "paused",
      token: "mine",
    };
    const res = await c.post<Deployment>(`/compute/v1/agents/${agent.id}/deploy`, options);
    expect(res.status).toBe(200);
    const d = res.body;
    expect(d).toMatchObject({
      agent_id: agent.id,
      state: "running",
      name: "web",
      tier: "standard",
      skills: ["s1"],
      env: { A: "1" },
      metadata: { "agentcompute.dev/uid": "uid-1" },
      endpoint_name: "web-ep",
      endpoint: "https://web-ep.agents.emulator.local",
      replicas: 3,
      nested: { k: [true] },
      revision: 1,
      agent_image: "registry.example/agent:1",
    });
    expect(d.id).not.toBe("mine");
    expect(d.token).not.toBe("mine");
    expect(d.token).toEqual(expect.any(String));
    expect(d.created_at).toEqual(expect.any(String));
    expect(d.updated_at).toBe(d.created_at);
    expect((await c.get<Deployment>(`/compute/v1/deployments/${d.id}`)).body).toEqual(d);
  });

  it("answers 404 when the agent does not exist and 400 naming a mistyped option", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const missing = await c.post("/compute/v1/agents/nope/deploy", {});
    expect(missing.status).toBe(404);
    expect(missing.body).toEqual({ code: 404, error_code: "not_found", message: "agent nope not found" });
    const agent = await newAgent(c);
    const bad = await c.post(`/compute/v1/agents/${agent.id}/deploy`, { env: { A: 1 } });
    expect(bad.status).toBe(400);
    expect(bad.body).toEqual({ code: 400, error_code: "bad_request", message: "env.A must be a string" });
    expect((await c.post(`/compute/v1/agents/${agent.id}/deploy`)).status).toBe(200); // no body at all
  });

  it("lists a bare array with limit/offset paging", async () => {
    const emu = await emulator({ maxPageSize: 4 });
    const c = await client(emu);
    const agent = await newAgent(c);
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) ids.push((await c.post<Deployment>(`/compute/v1/agents/${agent.id}/deploy`, { name: `d${i}` })).body.id);
    const all = await c.get<Deployment[]>("/compute/v1/deployments");
    expect(Array.isArray(all.body)).toBe(true);
    expect(all.body.map((d) => d.id)).toEqual(ids.slice(0, 4));
    expect((await c.get<Deployment[]>("/compute/v1/deployments?limit=2&offset=3")).body.map((d) => d.id)).toEqual(ids.slice(3, 5));
    expect((await c.get<Deployment[]>("/compute/v1/deployments?offset=6")).body).toEqual([]);
  });

  it("stops, redeploys (picking up the agent's new image) and deletes", async () => {
    const clock = new FakeClock();
    const emu = await emulator({ now: clock.now });
    const c = await client(emu);
    const agent = await newAgent(c);
    const d = (await c.post<Deployment>(`/compute/v1/agents/${agent.id}/deploy`, {})).body;
    clock.advance(5);
    const stopped = await c.post<Deployment>(`/compute/v1/deployments/${d.id}/stop`);
    expect(stopped.status).toBe(200);
    expect(stopped.body).toMatchObject({ id: d.id, state: "stopped", revision: 1 });
    expect(stopped.body.updated_at).not.toBe(d.updated_at);

    await c.put(`/registry/v1/agents/${agent.id}`, { image: "registry.example/agent:2" });
    clock.advance(5);
    const re = await c.post<Deployment>(`/compute/v1/deployments/${d.id}/redeploy`);
    expect(re.status).toBe(200);
    expect(re.body).toMatchObject({ id: d.id, state: "running", revision: 2, agent_image: "registry.example/agent:2", token: d.token, endpoint: d.endpoint });
    expect(Date.parse(re.body.updated_at!) - Date.parse(d.updated_at!)).toBe(10_000);

    expect((await c.del(`/compute/v1/deployments/${d.id}`)).status).toBe(204);
    for (const res of [
      await c.get(`/compute/v1/deployments/${d.id}`),
      await c.post(`/compute/v1/deployments/${d.id}/stop`),
      await c.post(`/compute/v1/deployments/${d.id}/redeploy`),
      await c.del(`/compute/v1/deployments/${d.id}`),
    ]) {
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ code: 404, error_code: "not_found", message: `deployment ${d.id} not found` });
    }
  });

  it("refuses to redeploy a deployment whose agent is gone, with a distinct error code", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const agent = await newAgent(c);
    const d = (await c.post<Deployment>(`/compute/v1/agents/${agent.id}/deploy`, {})).body;
    await c.del(`/registry/v1/agents/${agent.id}`);
    expect((await c.get(`/compute/v1/deployments/${d.id}`)).status).toBe(200);
    const re = await c.post(`/compute/v1/deployments/${d.id}/redeploy`);
    expect(re.status).toBe(404);
    expect(re.body).toMatchObject({ code: 404, error_code: "agent_not_found" });
  });

  it("logs stable operation names", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const agent = await newAgent(c);
    const d = (await c.post<Deployment>(`/compute/v1/agents/${agent.id}/deploy`, {})).body;
    await c.get("/compute/v1/deployments");
    await c.get(`/compute/v1/deployments/${d.id}`);
    await c.post(`/compute/v1/deployments/${d.id}/stop`);
    await c.post(`/compute/v1/deployments/${d.id}/redeploy`);
    await c.del(`/compute/v1/deployments/${d.id}`);
    expect(emu.requests.map((r) => r.operation)).toEqual([
      "token",
      "agents.create",
      "deployments.deploy",
      "deployments.list",
      "deployments.get",
      "deployments.stop",
      "deployments.redeploy",
      "deployments.delete",
    ]);
  });
});
