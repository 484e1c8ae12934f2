import { describe, expect, it } from "vitest";
import type { Agent, AgentsListResponse as AgentList } from "../../../src/emulator/wire.js";
import { FakeClock, agentBody, client, emulator } from "./helpers.js";

type One = { agent: Agent };

describe("emulator registry", () => {
  it("creates an agent with service-set fields and never echoes the pull secret's password", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const secret = { registry: "ghcr.io", username: "bot", password: "hunter2" };
    const res = await c.post<One>("/registry/v1/agents", agentBody("alpha", { image_pull_secret: secret, capabilities: ["x"], metadata: { "agentcompute.dev/uid": "u1" } }));
    expect(res.status).toBe(201);
    const a = res.body.agent;
    expect(a).toMatchObject({
      id: expect.any(String),
      name: "alpha",
      org_id: "org-a",
      image: "registry.example/agent:1",
      state: "registered",
      visibility: "private",
      allowed_org_ids: [],
      capabilities: ["x"],
      metadata: { "agentcompute.dev/uid": "u1" },
      image_pull_secret: { registry: "ghcr.io", username: "bot" },
    });
    expect(a.created_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
    expect(a.updated_at).toBe(a.created_at);
    for (const text of [res.text, (await c.get(`/registry/v1/agents/${a.id}`)).text, (await c.get("/registry/v1/agents")).text, (await c.get("/registry/v1/agents/search?capabilities=x")).text]) {
      expect(text).not.toContain("hunter2");
    }
    // Stored, though: the service keeps it.
    expect(emu.state.agents.get(a.id)?.image_pull_secret?.password).toBe("hunter2");
  });

  it("names the missing or bad field in a 400", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const cases: [Record<string, unknown>, string][] = [
      [{ name: "n", org_id: "o" }, "image is required"],
      [{ image: "i", org_id: "o" }, "name is required"],
      [{ image: "i", name: "n" }, "org_id is required"],
      [agentBody("n", { capabilities: "x" }), "capabilities must be an array of strings"],
      [agentBody("n", { metadata: { k: 1 } }), "metadata.k must be a string"],
      [agentBody("n", { visibility: "public" }), "visibility cannot be set"],
      [agentBody("n", { orgId: "o" }), "unknown field: orgId"],
      [agentBody("n", { image_pull_secret: { registry: "r", password: 7 } }), "image_pull_secret.password must be a string"],
      [agentBody("n", { image_pull_secret: { registry: "r", user: "u" } }), "unknown field: image_pull_secret.user"],
    ];
    for (const [body, message] of cases) {
      const res = await c.post("/registry/v1/agents", body);
      expect(res.status, message).toBe(400);
      expect(res.body).toEqual({ error: "bad_request", message });
    }
    const malformed = await c.post("/registry/v1/agents", "{not json");
    expect(malformed.status).toBe(400);
    expect(malformed.body).toMatchObject({ error: "bad_request", message: expect.stringContaining("malformed JSON") });
    expect((await c.post("/registry/v1/agents", "[1]")).body).toMatchObject({ message: "request body must be a JSON object" });
    expect(emu.state.agents.size).toBe(0);
    // models.ImagePullSecret requires none of its fields.
    expect((await c.post("/registry/v1/agents", agentBody("partial", { image_pull_secret: { registry: "r", username: "u" } }))).status).toBe(201);
  });

  it("by default drops request fields the published models lack, as the service does: what a client read it can send back", async () => {
    const emu = await emulator({ strictBodies: false });
    const c = await client(emu);
    const created = (await c.post<{ agent: Record<string, unknown> }>("/registry/v1/agents", agentBody("round", { visibility: "public", orgId: "typo" }))).body.agent;
    expect(created).toMatchObject({ name: "round", visibility: "private" });
    const read = (await c.get<{ agent: Record<string, unknown> }>(`/registry/v1/agents/${created["id"] as string}`)).body.agent;
    const updated = await c.put<{ agent: Record<string, unknown> }>(`/registry/v1/agents/${created["id"] as string}`, { ...read, description: "sent back" });
    expect(updated.status).toBe(200);
    expect(updated.body.agent).toMatchObject({ id: created["id"], description: "sent back", org_id: read["org_id"] });
    const skill = (await c.post<Record<string, unknown>>("/compute/v1/skills", { name: "s", content: "c" })).body;
    expect((await c.put("/compute/v1/skills/s", { ...skill, content: "c2" })).status).toBe(200);
  });

  it("answers 409 conflict for a name taken in the same org, not in another", async () => {
    const emu = await emulator();
    const c = await client(emu);
    expect((await c.post("/registry/v1/agents", agentBody("dup"))).status).toBe(201);
    const again = await c.post("/registry/v1/agents", agentBody("dup"));
    expect(again.status).toBe(409);
    expect(again.body).toEqual({ error: "conflict", message: expect.stringContaining("dup") });
    expect((await c.post("/registry/v1/agents", agentBody("dup", { org_id: "org-b" }))).status).toBe(201);
  });

  it("lists in creation order with total, filters, default limit 20 and a capped limit", async () => {
    const emu = await emulator({ maxPageSize: 30 });
    const c = await client(emu);
    for (let i = 0; i < 45; i++) {
      await c.post("/registry/v1/agents", agentBody(`a${i}`, { author: i % 3 === 0 ? "ann" : "bob" }));
    }
    const first = await c.get<AgentList>("/registry/v1/agents");
    expect(first.status).toBe(200);
    expect(first.body.total).toBe(45);
    expect(first.body.agents.map((a) => a.name)).toEqual(Array.from({ length: 20 }, (_, i) => `a${i}`));
    const capped = await c.get<AgentList>("/registry/v1/agents?limit=1000&offset=40");
    expect(capped.body.agents.map((a) => a.name)).toEqual(["a40", "a41", "a42", "a43", "a44"]);
    expect((await c.get<AgentList>("/registry/v1/agents?limit=1000")).body.agents).toHaveLength(30);
    const ann = await c.get<AgentList>("/registry/v1/agents?author=ann&limit=5&offset=5");
    expect(ann.body.total).toBe(15);
    expect(ann.body.agents.map((a) => a.name)).toEqual(["a15", "a18", "a21", "a24", "a27"]);
    const id = first.body.agents[0]!.id;
    await c.put(`/registry/v1/agents/${id}`, { state: "running" });
    const running = await c.get<AgentList>("/registry/v1/agents?status=running");
    expect(running.body).toMatchObject({ total: 1, agents: [{ id }] });
    const bad = await c.get("/registry/v1/agents?limit=-1");
    expect(bad.status).toBe(400);
    expect(bad.body).toEqual({ error: "bad_request", message: "limit must be a positive integer" });
    expect((await c.get("/registry/v1/agents?offset=x")).body).toMatchObject({ message: "offset must be a non-negative integer" });
  });

  it("updates any subset of updatable fields and moves updated_at", async () => {
    const clock = new FakeClock();
    const emu = await emulator({ now: clock.now });
    const c = await client(emu);
    const { agent } = (await c.post<One>("/registry/v1/agents", agentBody("u", { description: "d", metadata: { m: "1" } }))).body;
    clock.advance(10);
    const res = await c.put<One>(`/registry/v1/agents/${agent.id}`, { image: "img:2", public_key: "pk", manifest: { name: "m" }, name: "u2" });
    expect(res.status).toBe(200);
    expect(res.body.agent).toMatchObject({ id: agent.id, image: "img:2", public_key: "pk", manifest: { name: "m" }, name: "u2", description: "d", metadata: { m: "1" } });
    expect(Date.parse(res.body.agent.updated_at!) - Date.parse(agent.updated_at!)).toBe(10_000);
    expect(res.body.agent.created_at).toBe(agent.created_at);
    // The old name is free again, the new one is taken.
    expect((await c.post("/registry/v1/agents", agentBody("u"))).status).toBe(201);
    expect((await c.post("/registry/v1/agents", agentBody("u2"))).status).toBe(409);
  });

  it("treats a null name or image on update as not given (every UpdateAgentRequest field is optional); an empty one is refused naming it", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const { agent } = (await c.post<One>("/registry/v1/agents", agentBody("keep"))).body;
    const res = await c.put<One>(`/registry/v1/agents/${agent.id}`, { name: null, image: null, description: "d" });
    expect(res.status).toBe(200);
    expect(res.body.agent).toMatchObject({ id: agent.id, name: "keep", image: agent.image, description: "d" });
    for (const [body, message] of [
      [{ name: "" }, "name must not be empty"],
      [{ image: " " }, "image must not be empty"],
      [{ name: 7 }, "name must be a string"],
    ] as const) {
      const bad = await c.put(`/registry/v1/agents/${agent.id}`, body);
      expect(bad.status, message).toBe(400);
      expect(bad.body).toEqual({ error: "bad_request", message });
    }
    expect(emu.state.agents.get(agent.id)).toMatchObject({ name: "keep", image: agent.image });
  });

  it("rejects create-only, service-owned and unknown fields on update, naming them", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const { agent } = (await c.post<One>("/registry/v1/agents", agentBody("u"))).body;
    const cases: [Record<string, unknown>, string][] = [
      [{ org_id: "x" }, "org_id is create-only and cannot be updated"],
      [{ author: "x" }, "author is create-only and cannot be updated"],
      [{ image_pull_secret: {} }, "image_pull_secret is create-only and cannot be updated"],
      [{ visibility: "public" }, "visibility cannot be set"],
      [{ allowed_org_ids: [] }, "allowed_org_ids cannot be set"],
      [{ colour: "red" }, "unknown field: colour"],
      [{ state: "dancing" }, "state must be one of registered, deploying, running, active, idle, sleeping, stopped, failed"],
      [{ image: "" }, "image must not be empty"],
    ];
    for (const [body, message] of cases) {
      const res = await c.put(`/registry/v1/agents/${agent.id}`, body);
      expect(res.status, message).toBe(400);
      expect(res.body).toEqual({ error: "bad_request", message });
    }
  });

  it("answers 404 for unknown ids and 204 on delete", async () => {
    const emu = await emulator();
    const c = await client(emu);
    for (const res of [await c.get("/registry/v1/agents/nope"), await c.put("/registry/v1/agents/nope", { description: "x" }), await c.del("/registry/v1/agents/nope")]) {
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ error: "not_found", message: "agent nope not found" });
    }
    const { agent } = (await c.post<One>("/registry/v1/agents", agentBody("gone"))).body;
    const del = await c.del(`/registry/v1/agents/${agent.id}`);
    expect(del.status).toBe(204);
    expect(del.text).toBe("");
    expect((await c.get(`/registry/v1/agents/${agent.id}`)).status).toBe(404);
    expect((await c.post("/registry/v1/agents", agentBody("gone"))).status).toBe(201);
  });

  it("searches by capabilities: agents having all of them", async () => {
    const emu = await emulator();
    const c = await client(emu);
    await c.post("/registry/v1/agents", agentBody("ab", { capabilities: ["a", "b"] }));
    await c.post("/registry/v1/agents", agentBody("a", { capabilities: ["a"] }));
    await c.post("/registry/v1/agents", agentBody("none"));
    const both = await c.get<AgentList>("/registry/v1/agents/search?capabilities=a,b");
    expect(both.status).toBe(200);
    expect(both.body.total).toBe(1);
    expect(both.body.agents.map((x) => x.name)).toEqual(["ab"]);
    expect((await c.get<AgentList>("/registry/v1/agents/search?capabilities=a")).body.agents.map((x) => x.name)).toEqual(["ab", "a"]);
    const missing = await c.get("/registry/v1/agents/search");
    expect(missing.status).toBe(400);
    expect(missing.body).toMatchObject({ message: "capabilities is required" });
    // No paging is published for search: every match, whatever limit a client adds.
    for (let i = 0; i < 25; i++) await c.post("/registry/v1/agents", agentBody(`many-${i}`, { capabilities: ["many"] }));
    for (const query of ["capabilities=many", "capabilities=many&limit=5&offset=20"]) {
      const all = await c.get<AgentList>(`/registry/v1/agents/search?${query}`);
      expect(all.body.agents).toHaveLength(25);
      expect(all.body.total).toBe(25);
    }
  });

  it("stores and answers only the published manifest keys, type-checking each", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const manifest = {
      name: "summariser",
      description: "summarises",
      url: "https://agent.example",
      version: "1.2.0",
      authentication: { schemes: ["bearer"] },
      capabilities: { streaming: true },
      input_schema: { type: "object" },
      output_schema: { type: "string" },
      runtime: { python: "3.12" },
      skills: [{ id: "summarise", inputModes: ["text"], outputModes: ["text"], extra: 1 }],
      // Outside models.AgentManifest: dropped, as the (Go) service drops it.
      x_custom: { kept: false },
      tags: ["a"],
    };
    const res = await c.post<One>("/registry/v1/agents", agentBody("m", { manifest }));
    expect(res.status).toBe(201);
    const { x_custom: _x, tags: _t, ...published } = manifest;
    const want = { ...published, skills: [{ id: "summarise", inputModes: ["text"], outputModes: ["text"] }] };
    expect(res.body.agent.manifest).toEqual(want);
    expect((await c.get<One>(`/registry/v1/agents/${res.body.agent.id}`)).body.agent.manifest).toEqual(want);
    expect(emu.state.agents.get(res.body.agent.id)?.manifest).toEqual(want);
    // Only unknown keys: an empty manifest is stored.
    const bare = await c.put<One>(`/registry/v1/agents/${res.body.agent.id}`, { manifest: { anything: 1 } });
    expect(bare.body.agent.manifest).toEqual({});

    const cases: [unknown, string][] = [
      ["text", "manifest must be an object"],
      [{ name: 1 }, "manifest.name must be a string"],
      [{ url: true }, "manifest.url must be a string"],
      [{ runtime: "py" }, "manifest.runtime must be an object"],
      [{ input_schema: [1] }, "manifest.input_schema must be an object"],
      [{ skills: {} }, "manifest.skills must be an array"],
      [{ skills: ["s"] }, "manifest.skills[0] must be an object"],
      [{ skills: [{ id: "a" }, { id: 7 }] }, "manifest.skills[1].id must be a string"],
      [{ skills: [{ id: "a", inputModes: "text" }] }, "manifest.skills[0].inputModes must be an array of strings"],
      [{ skills: [{ id: "a", outputModes: [1] }] }, "manifest.skills[0].outputModes[0] must be a string"],
    ];
    for (const [bad, message] of cases) {
      const created = await c.post("/registry/v1/agents", agentBody("bad", { manifest: bad }));
      expect(created.status, message).toBe(400);
      expect(created.body).toEqual({ error: "bad_request", message });
      const updated = await c.put(`/registry/v1/agents/${res.body.agent.id}`, { manifest: bad });
      expect(updated.body).toEqual({ error: "bad_request", message });
    }
  });

  it("answers the public key as a map of strings; 404 when the agent is unknown or has none", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const { agent } = (await c.post<One>("/registry/v1/agents", agentBody("k"))).body;
    const none = await c.get(`/registry/v1/agents/${agent.id}/public-key`);
    expect(none.status).toBe(404);
    expect(none.body).toEqual({ error: "not_found", message: `agent ${agent.id} has no public key` });
    await c.put(`/registry/v1/agents/${agent.id}`, { public_key: "ed25519-pub" });
    const key = await c.get(`/registry/v1/agents/${agent.id}/public-key`);
    expect(key.status).toBe(200);
    expect(key.body).toEqual({ agent_id: agent.id, public_key: "ed25519-pub" });
    const unknown = await c.get("/registry/v1/agents/nope/public-key");
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({ error: "not_found", message: "agent nope not found" });
    expect(emu.requests.at(-1)?.operation).toBe("agents.public_key");
  });

  it("requires a bearer token on registry routes too (the description declares the scheme)", async () => {
    const emu = await emulator();
    for (const [method, path] of [
      ["GET", "/registry/v1/agents"],
      ["POST", "/registry/v1/agents"],
      ["GET", "/registry/v1/agents/x/public-key"],
      ["GET", "/registry/v1/tools"],
      ["POST", "/registry/v1/tools"],
      ["GET", "/registry/v1/tools/x"],
    ] as const) {
      const res = await fetch(`${emu.baseURL}${path}`, { method });
      expect(res.status, `${method} ${path}`).toBe(401);
      expect(await res.json()).toEqual({ error: "unauthorized", message: "missing bearer token" });
    }
  });

  it("answers unknown routes with 404 and wrong methods with 405 in the registry dialect", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const r404 = await c.get("/registry/v1/things");
    expect(r404.status).toBe(404);
    expect(r404.body).toMatchObject({ error: "not_found" });
    const r405 = await c.call("PATCH", "/registry/v1/agents/x");
    expect(r405.status).toBe(405);
    expect(r405.headers.get("allow")).toBe("GET, PUT, DELETE");
    expect(r405.body).toMatchObject({ error: "method_not_allowed" });
    expect(emu.requests.at(-1)?.operation).toBe("route.method_not_allowed");
  });
});
