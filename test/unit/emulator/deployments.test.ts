import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import type { Agent, AgentResponse, Deployment } from "../../../src/emulator/wire.js";
import { FakeClock, T0, agentBody, client, emulator, type Client } from "./helpers.js";

async function newAgent(c: Client, name = "agent", extra: Record<string, unknown> = {}): Promise<Agent> {
  return (await c.post<AgentResponse>("/registry/v1/agents", agentBody(name, extra))).body.agent;
}

/** An independent statement of the documented rule: hex SHA-256 of canonical (sorted-key) JSON. */
function expectedHash(options: unknown): string {
  const canon = (v: unknown): string => {
    if (Array.isArray(v)) return `[${v.map(canon).join(",")}]`;
    if (v !== null && typeof v === "object") {
      const o = v as Record<string, unknown>;
      return `{${Object.keys(o)
        .sort()
        .map((k) => `${JSON.stringify(k)}:${canon(o[k])}`)
        .join(",")}}`;
    }
    return JSON.stringify(v);
  };
  return createHash("sha256").update(canon(options)).digest("hex");
}

const RECORD_KEYS = [
  "config_hash",
  "created_at",
  "endpoint",
  "endpoint_name",
  "id",
  "image",
  "manifest",
  "metadata",
  "name",
  "registry_id",
  "skills",
  "state",
  "tier",
  "token",
  "updated_at",
];

describe("emulator deployments", () => {
  it("answers exactly the Deployment record: options shape it but are never echoed", async () => {
    const clock = new FakeClock();
    const emu = await emulator({ now: clock.now });
    const c = await client(emu);
    const agent = await newAgent(c, "agent", { manifest: { name: "agent", version: "1" } });
    const options = {
      name: "web",
      tier: "large",
      skills: ["s1"],
      env: { A: "1" },
      metadata: { "agentcompute.dev/uid": "uid-1" },
      endpoint_name: "web-ep",
      replicas: 3,
      nested: { k: [true] },
      // Keys naming the record's service-set fields are options like any other: not echoed.
      id: "mine",
      state: "paused",
      token: "mine",
    };
    const res = await c.post<Deployment>(`/compute/v1/agents/${agent.id}/deploy`, options);
    expect(res.status).toBe(200);
    const d = res.body;
    expect(Object.keys(d).sort()).toEqual(RECORD_KEYS);
    expect(d).toEqual({
      id: expect.any(String),
      name: "web",
      registry_id: agent.id,
      image: "registry.example/agent:1",
      endpoint: "https://web-ep.agents.emulator.local",
      endpoint_name: "web-ep",
      config_hash: expectedHash(options),
      manifest: { name: "agent", version: "1" },
      metadata: { "agentcompute.dev/uid": "uid-1" },
      skills: ["s1"],
      state: "running",
      tier: "large",
      token: expect.any(String),
      created_at: new Date(T0).toISOString(),
      updated_at: new Date(T0).toISOString(),
    });
    expect(d.id).not.toBe("mine");
    expect(d.token).not.toBe("mine");
    expect(res.text).not.toContain("replicas");
    expect((await c.get<Deployment>(`/compute/v1/deployments/${d.id}`)).body).toEqual(d);
    expect((await c.get<Deployment[]>("/compute/v1/deployments")).body).toEqual([d]);
    // Kept as received, env included.
    expect(emu.state.deployments.get(d.id)?.options).toEqual(options);
  });

  it("fills the record's fields when the options do not give them", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const agent = await newAgent(c, "plain");
    const d = (await c.post<Deployment>(`/compute/v1/agents/${agent.id}/deploy`)).body; // no body at all
    expect(d).toMatchObject({ name: "plain", tier: "standard", skills: [], metadata: {}, endpoint_name: `agent-${d.id.slice(0, 8)}`, config_hash: expectedHash({}) });
    expect(d.manifest).toEqual({}); // every field is always sent; an agent without a manifest has an empty one
    // The tier default is the pool's default_tier.
    await c.put("/compute/v1/pool/config", { default_tier: "small" });
    expect((await c.post<Deployment>(`/compute/v1/agents/${agent.id}/deploy`, {})).body.tier).toBe("small");
  });

  it("computes config_hash from the whole options object: key order does not matter, any value does", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const agent = await newAgent(c);
    const deploy = async (o: unknown): Promise<string> => (await c.post<Deployment>(`/compute/v1/agents/${agent.id}/deploy`, o)).body.config_hash;
    const a = await deploy({ name: "x", env: { A: "1", B: "2" } });
    expect(await deploy({ env: { B: "2", A: "1" }, name: "x" })).toBe(a);
    expect(await deploy({ name: "x", env: { A: "1", B: "3" } })).not.toBe(a);
    expect(await deploy({ name: "x", env: { A: "1", B: "2" }, extra: null })).not.toBe(a);
  });

  it("answers 404 when the agent does not exist and 400 naming a mistyped option", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const missing = await c.post("/compute/v1/agents/nope/deploy", {});
    expect(missing.status).toBe(404);
    expect(missing.body).toEqual({ code: 404, error_code: "not_found", message: "agent nope not found" });
    const agent = await newAgent(c);
    const cases: [Record<string, unknown>, string][] = [
      [{ env: { A: 1 } }, "env.A must be a string"],
      [{ name: 1 }, "name must be a string"],
      [{ tier: false }, "tier must be a string"],
      [{ endpoint_name: {} }, "endpoint_name must be a string"],
      [{ skills: "s" }, "skills must be an array of strings"],
      [{ skills: [1] }, "skills[0] must be a string"],
      [{ metadata: { k: 2 } }, "metadata.k must be a string"],
    ];
    for (const [body, message] of cases) {
      const bad = await c.post(`/compute/v1/agents/${agent.id}/deploy`, body);
      expect(bad.status, message).toBe(400);
      expect(bad.body).toEqual({ code: 400, error_code: "bad_request", message });
    }
    expect(emu.state.deployments.size).toBe(0);
  });

  it("lists every deployment as a bare array and ignores limit/offset (none are published)", async () => {
    const emu = await emulator({ maxPageSize: 4 });
    const c = await client(emu);
    const agent = await newAgent(c);
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) ids.push((await c.post<Deployment>(`/compute/v1/agents/${agent.id}/deploy`, { name: `d${i}` })).body.id);
    const all = await c.get<Deployment[]>("/compute/v1/deployments");
    expect(Array.isArray(all.body)).toBe(true);
    expect(all.body.map((d) => d.id)).toEqual(ids);
    expect((await c.get<Deployment[]>("/compute/v1/deployments?limit=2&offset=3")).body.map((d) => d.id)).toEqual(ids);
    expect((await c.get<Deployment[]>("/compute/v1/deployments?limit=-1&offset=x")).status).toBe(200);
  });

  it("stops, redeploys (picking up the agent's new image and manifest, keeping config_hash) and deletes", async () => {
    const clock = new FakeClock();
    const emu = await emulator({ now: clock.now });
    const c = await client(emu);
    const agent = await newAgent(c);
    const d = (await c.post<Deployment>(`/compute/v1/agents/${agent.id}/deploy`, { env: { A: "1" } })).body;
    clock.advance(5);
    const stopped = await c.post<Deployment>(`/compute/v1/deployments/${d.id}/stop`);
    expect(stopped.status).toBe(200);
    expect(stopped.body).toEqual({ ...d, state: "stopped", updated_at: new Date(T0 + 5000).toISOString() });

    await c.put(`/registry/v1/agents/${agent.id}`, { image: "registry.example/agent:2", manifest: { version: "2" } });
    clock.advance(5);
    const re = await c.post<Deployment>(`/compute/v1/deployments/${d.id}/redeploy`);
    expect(re.status).toBe(200);
    expect(re.body).toEqual({ ...d, image: "registry.example/agent:2", manifest: { version: "2" }, updated_at: new Date(T0 + 10_000).toISOString() });
    expect(emu.state.deployments.get(d.id)?.revision).toBe(2);

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

  it("reconfigureDeployment drifts the options behind the client's back: config_hash and fields follow", async () => {
    const clock = new FakeClock();
    const emu = await emulator({ now: clock.now });
    const c = await client(emu);
    const agent = await newAgent(c, "svc");
    const d = (await c.post<Deployment>(`/compute/v1/agents/${agent.id}/deploy`, { name: "web", env: { A: "1" }, metadata: { m: "1" } })).body;
    clock.advance(7);
    const next = { name: "web2", tier: "large", env: { A: "2" }, skills: ["s"], endpoint_name: "web2-ep" };
    const returned = emu.state.reconfigureDeployment(d.id, next);
    const got = (await c.get<Deployment>(`/compute/v1/deployments/${d.id}`)).body;
    expect(returned).toEqual(got);
    expect(got).toEqual({
      ...d,
      name: "web2",
      tier: "large",
      skills: ["s"],
      metadata: {},
      endpoint_name: "web2-ep",
      endpoint: "https://web2-ep.agents.emulator.local",
      config_hash: expectedHash(next),
      updated_at: new Date(T0 + 7000).toISOString(),
    });
    expect(got.config_hash).not.toBe(d.config_hash);
    expect(emu.state.deployments.get(d.id)?.options).toEqual(next);
    // Only env changed: the record looks the same except for config_hash and updated_at.
    emu.state.reconfigureDeployment(d.id, { ...next, env: { A: "3" } });
    const envOnly = (await c.get<Deployment>(`/compute/v1/deployments/${d.id}`)).body;
    expect(envOnly).toEqual({ ...got, config_hash: expectedHash({ ...next, env: { A: "3" } }) });
    expect(() => emu.state.reconfigureDeployment(d.id, { tier: 5 })).toThrow("tier must be a string");
    expect(() => emu.state.reconfigureDeployment("nope", {})).toThrow("deployment nope not found");
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
