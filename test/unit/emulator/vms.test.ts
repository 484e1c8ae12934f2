import { describe, expect, it } from "vitest";
import type { AgentVM, Allocation, UsageRecord, UsageSummary } from "../../../src/emulator/wire.js";
import { FakeClock, T0, client, emulator } from "./helpers.js";

const USAGE_HEADERS = { "X-Workspace-Id": "ws", "X-Environment-Id": "env" };

describe("emulator agent VMs", () => {
  it("allocates with defaults: state allocated, TTL 3600 s, credentials and endpoints", async () => {
    const clock = new FakeClock();
    const emu = await emulator({ now: clock.now });
    const c = await client(emu);
    await c.post("/compute/v1/skills", { name: "pdf", content: "c" });
    const res = await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard", skills: ["pdf"], metadata: { "agentcompute.dev/uid": "u" }, env: { SECRET: "v" } });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      vm_id: expect.any(String),
      state: "allocated",
      tier: "standard",
      skills_loaded: ["pdf"],
      endpoint: expect.stringMatching(/^https:\/\//),
      ws_url: expect.stringMatching(/^ws:\/\/127\.0\.0\.1:\d+\/compute\/v1\/vms\/[0-9a-f-]{36}\/ws$/),
      token: expect.any(String),
      expires_at: new Date(T0 + 3600_000).toISOString(),
    });
    // The VM record is another shape: `id`, `skills`, and the token; never env, org_id,
    // secure_runtime or the connection details.
    const vm = await c.get<AgentVM>(`/compute/v1/vms/${res.body.vm_id}`);
    expect(vm.body).toEqual({
      id: res.body.vm_id,
      state: "allocated",
      tier: "standard",
      skills: ["pdf"],
      metadata: { "agentcompute.dev/uid": "u" },
      token: res.body.token,
      ttl_seconds: 3600,
      allocated_at: new Date(T0).toISOString(),
      created_at: new Date(T0).toISOString(),
      expires_at: res.body.expires_at,
    });
    expect(vm.text).not.toContain("SECRET");
    expect((await c.get<AgentVM[]>("/compute/v1/vms")).body).toEqual([vm.body]);
    const ep = await c.get(`/compute/v1/vms/${res.body.vm_id}/endpoint`);
    expect(ep.body).toEqual({ endpoint: res.body.endpoint, ws_url: res.body.ws_url });
    expect(res.body.ws_url).toBe(`${emu.baseURL.replace(/^http/, "ws")}/compute/v1/vms/${res.body.vm_id}/ws`);
    // The VM runs what it is sent (see execute.test.ts, ws.test.ts, agentd-*.test.ts).
    const ex = await c.post(`/compute/v1/vms/${res.body.vm_id}/execute`, { command: "ls" });
    expect(ex.status).toBe(200);
    expect(ex.headers.get("content-type")).toMatch(/^text\/event-stream/);
    // Stored, though: the service keeps what it was sent.
    expect(emu.state.vms.get(res.body.vm_id)).toMatchObject({ id: res.body.vm_id, skills: ["pdf"], env: { SECRET: "v" }, org_id: "org-emulator" });
  });

  it("takes secure_runtime as a runtime's name and passes it through", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const res = await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard", secure_runtime: "gvisor" });
    expect(res.status).toBe(201);
    expect(emu.state.vms.get(res.body.vm_id)?.secure_runtime).toBe("gvisor");
    const bad = await c.post("/compute/v1/vms/allocate", { tier: "standard", secure_runtime: true });
    expect(bad.status).toBe(400);
    expect(bad.body).toEqual({ code: 400, error_code: "bad_request", message: "secure_runtime must be a string" });
  });

  it("answers 400 naming the field, the unknown skill, or the rejected tier", async () => {
    const emu = await emulator({ rejectTiers: ["unknown-tier", "gpu-xxl"] });
    const c = await client(emu);
    const cases: [Record<string, unknown>, string, string][] = [
      [{}, "bad_request", "tier is required"],
      [{ tier: 5 }, "bad_request", "tier must be a string"],
      [{ tier: "standard", ttl_seconds: 0 }, "bad_request", "ttl_seconds must be a positive integer"],
      [{ tier: "standard", ttl_seconds: 1.5 }, "bad_request", "ttl_seconds must be a positive integer"],
      [{ tier: "standard", ttl_seconds: "60" }, "bad_request", "ttl_seconds must be a positive integer"],
      [{ tier: "standard", skills: ["ghost"] }, "skill_not_found", 'skill "ghost" does not exist'],
      [{ tier: "standard", secure_runtime: 1 }, "bad_request", "secure_runtime must be a string"],
      [{ tier: "standard", metadata: { k: 1 } }, "bad_request", "metadata.k must be a string"],
      [{ tier: "standard", ttl: 5 }, "bad_request", "unknown field: ttl"],
      [{ tier: "unknown-tier" }, "invalid_tier", 'tier "unknown-tier" is not available'],
      [{ tier: "gpu-xxl" }, "invalid_tier", 'tier "gpu-xxl" is not available'],
    ];
    for (const [body, code, message] of cases) {
      const res = await c.post("/compute/v1/vms/allocate", body);
      expect(res.status, message).toBe(400);
      expect(res.body).toEqual({ code: 400, error_code: code, message });
    }
    expect(emu.state.vms.size).toBe(0);
    expect((await c.post("/compute/v1/vms/allocate", { tier: "any-free-string" })).status).toBe(201);
  });

  it("answers 503 pool_exhausted when the pool is full, until a VM is released", async () => {
    const emu = await emulator({ poolSize: 2 });
    const c = await client(emu);
    const a = (await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard" })).body;
    await c.post("/compute/v1/vms/allocate", { tier: "standard" });
    const full = await c.post("/compute/v1/vms/allocate", { tier: "standard" });
    expect(full.status).toBe(503);
    expect(full.body).toEqual({ code: 503, error_code: "pool_exhausted", message: "no VMs available, retry shortly" });
    await c.post(`/compute/v1/vms/${a.vm_id}/release`, { recycle: true });
    expect((await c.post("/compute/v1/vms/allocate", { tier: "standard" })).status).toBe(201);
    emu.setOptions({ poolSize: undefined });
    expect((await c.post("/compute/v1/vms/allocate", { tier: "standard" })).status).toBe(201);
  });

  it("frees pool slots when VMs expire, without any call touching those VMs", async () => {
    const clock = new FakeClock();
    const emu = await emulator({ now: clock.now, poolSize: 1 });
    const c = await client(emu);
    expect((await c.post("/compute/v1/vms/allocate", { tier: "standard", ttl_seconds: 30 })).status).toBe(201);
    expect((await c.post("/compute/v1/vms/allocate", { tier: "standard" })).status).toBe(503);
    clock.advance(30);
    expect((await c.post("/compute/v1/vms/allocate", { tier: "standard" })).status).toBe(201);
    expect(emu.state.usage.map((u) => u.reason)).toEqual(["expired"]);
  });

  it("answers a limit above its default page in full: a client paging until a short page (SERVICE.md) reads everything in one page", async () => {
    const emu = await emulator();
    for (let i = 0; i < 150; i++) emu.state.allocateVM({ tier: "standard" });
    const c = await client(emu);
    expect((await c.get<AgentVM[]>("/compute/v1/vms")).body).toHaveLength(100);
    expect((await c.get<AgentVM[]>("/compute/v1/vms?limit=500")).body).toHaveLength(150);
  });

  it("lists the caller's org only, with state/tier filters and paging", async () => {
    const emu = await emulator({ orgId: "mine" });
    const c = await client(emu);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await c.post<Allocation>("/compute/v1/vms/allocate", { tier: i % 2 === 0 ? "standard" : "large" })).body.vm_id);
    const other = (await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard", org_id: "theirs" })).body.vm_id;
    const all = await c.get<AgentVM[]>("/compute/v1/vms");
    expect(all.body.map((v) => v.id)).toEqual(ids);
    expect((await c.get<AgentVM[]>("/compute/v1/vms?tier=large")).body.map((v) => v.id)).toEqual([ids[1], ids[3]]);
    expect((await c.get<AgentVM[]>("/compute/v1/vms?state=allocated&limit=2&offset=1")).body.map((v) => v.id)).toEqual([ids[1], ids[2]]);
    expect((await c.get<AgentVM[]>("/compute/v1/vms?state=released")).body).toEqual([]);
    // Another org's VM is reachable by id, just not listed.
    expect((await c.get<AgentVM>(`/compute/v1/vms/${other}`)).body.id).toBe(other);
    expect(emu.state.vms.get(other)?.org_id).toBe("theirs");
  });

  it("renews: expires_at = now + ttl; ttl_seconds is required", async () => {
    const clock = new FakeClock();
    const emu = await emulator({ now: clock.now });
    const c = await client(emu);
    const a = (await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard", ttl_seconds: 60 })).body;
    clock.advance(50);
    const res = await c.post<AgentVM>(`/compute/v1/vms/${a.vm_id}/renew`, { ttl_seconds: 120 });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: a.vm_id, ttl_seconds: 120, expires_at: new Date(T0 + 170_000).toISOString() });
    expect(res.body).not.toHaveProperty("vm_id");
    const missing = await c.post(`/compute/v1/vms/${a.vm_id}/renew`, {});
    expect(missing.status).toBe(400);
    expect(missing.body).toEqual({ code: 400, error_code: "bad_request", message: "ttl_seconds is required" });
    // The old expiry passing does not expire a renewed VM.
    clock.advance(100);
    expect((await c.get(`/compute/v1/vms/${a.vm_id}`)).status).toBe(200);
    clock.advance(20);
    expect((await c.get(`/compute/v1/vms/${a.vm_id}`)).status).toBe(404);
  });

  it("releases: 200 with released_at, then the VM is gone and a usage record exists", async () => {
    const clock = new FakeClock();
    const emu = await emulator({ now: clock.now });
    const c = await client(emu);
    const a = (await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard" })).body;
    clock.advance(90);
    const res = await c.post<AgentVM>(`/compute/v1/vms/${a.vm_id}/release`, { recycle: false });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      id: a.vm_id,
      state: "released",
      tier: "standard",
      skills: [],
      metadata: {},
      token: a.token,
      ttl_seconds: 3600,
      allocated_at: new Date(T0).toISOString(),
      created_at: new Date(T0).toISOString(),
      expires_at: a.expires_at,
      released_at: new Date(T0 + 90_000).toISOString(),
    });
    for (const r of [
      await c.get(`/compute/v1/vms/${a.vm_id}`),
      await c.post(`/compute/v1/vms/${a.vm_id}/renew`, { ttl_seconds: 60 }),
      await c.post(`/compute/v1/vms/${a.vm_id}/release`, {}),
      await c.get(`/compute/v1/vms/${a.vm_id}/endpoint`),
      await c.post(`/compute/v1/vms/${a.vm_id}/execute`, { command: "ls" }),
    ]) {
      expect(r.status).toBe(404);
      expect(r.body).toEqual({ code: 404, error_code: "not_found", message: `vm ${a.vm_id} not found` });
    }
    expect(emu.state.usage).toEqual([
      { org_id: "org-emulator", vm_id: a.vm_id, tier: "standard", started_at: new Date(T0).toISOString(), ended_at: new Date(T0 + 90_000).toISOString(), duration_seconds: 90, reason: "released" },
    ]);
    expect((await c.post(`/compute/v1/vms/${a.vm_id}/release`, { recycle: "yes" })).status).toBe(400);
  });

  it("deletes with 204 and records usage with reason deleted", async () => {
    const clock = new FakeClock();
    const emu = await emulator({ now: clock.now });
    const c = await client(emu);
    const a = (await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "large" })).body;
    clock.advance(30);
    expect((await c.del(`/compute/v1/vms/${a.vm_id}`)).status).toBe(204);
    expect((await c.del(`/compute/v1/vms/${a.vm_id}`)).status).toBe(404);
    expect(emu.state.usage).toMatchObject([{ vm_id: a.vm_id, tier: "large", duration_seconds: 30, reason: "deleted" }]);
  });

  it("expires VMs on the clock: lazily on access and by the periodic sweep", async () => {
    const clock = new FakeClock();
    const emu = await emulator({ now: clock.now, sweepIntervalMs: 20 });
    const c = await client(emu);
    const a = (await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard", ttl_seconds: 60 })).body;
    const b = (await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard", ttl_seconds: 600 })).body;
    clock.advance(59);
    expect((await c.get(`/compute/v1/vms/${a.vm_id}`)).status).toBe(200);
    clock.advance(1);
    // Lazily: the very next call sees it gone, sweep or not.
    expect((await c.get(`/compute/v1/vms/${a.vm_id}`)).status).toBe(404);
    expect((await c.post(`/compute/v1/vms/${a.vm_id}/renew`, { ttl_seconds: 60 })).status).toBe(404);
    expect((await c.get<AgentVM[]>("/compute/v1/vms")).body.map((v) => v.id)).toEqual([b.vm_id]);
    expect(emu.state.usage).toEqual([
      { org_id: "org-emulator", vm_id: a.vm_id, tier: "standard", started_at: new Date(T0).toISOString(), ended_at: new Date(T0 + 60_000).toISOString(), duration_seconds: 60, reason: "expired" },
    ]);
    // By the sweep: no request needed for the record to appear; ended_at is the expiry time.
    clock.advance(1000);
    await expect.poll(() => emu.state.usage.length).toBe(2);
    expect(emu.state.usage[1]).toMatchObject({ vm_id: b.vm_id, ended_at: new Date(T0 + 600_000).toISOString(), duration_seconds: 600, reason: "expired" });
    expect(emu.state.vms.size).toBe(0);
  });

  it("lists usage records with required headers, from/to days, tier filter and paging", async () => {
    const clock = new FakeClock();
    // The test moves the clock by a month: keep the token alive across it.
    const emu = await emulator({ now: clock.now, tokenTTLSeconds: 90 * 86_400 });
    const c = await client(emu);
    const run = async (tier: string, seconds: number): Promise<string> => {
      const a = (await c.post<Allocation>("/compute/v1/vms/allocate", { tier })).body;
      clock.advance(seconds);
      await c.post(`/compute/v1/vms/${a.vm_id}/release`, {});
      return a.vm_id;
    };
    const old = await run("standard", 10); // 2026-05-15
    clock.ms = Date.UTC(2026, 5, 20, 8); // 2026-06-20
    const s1 = await run("standard", 100);
    const l1 = await run("large", 200);
    const s2 = await run("standard", 300);

    const missing = await c.get("/compute/v1/usage", { "X-Workspace-Id": "ws" });
    expect(missing.status).toBe(400);
    expect(missing.body).toEqual({ code: 400, error_code: "bad_request", message: "X-Environment-Id header is required" });
    expect((await c.get("/compute/v1/usage", { "X-Environment-Id": "e" })).body).toMatchObject({ message: "X-Workspace-Id header is required" });

    // Default window: the last 30 days, so May 15 is out.
    const recent = await c.get<UsageRecord[]>("/compute/v1/usage", USAGE_HEADERS);
    expect(recent.status).toBe(200);
    expect(recent.body.map((u) => u.vm_id)).toEqual([s1, l1, s2]);
    const all = await c.get<UsageRecord[]>("/compute/v1/usage?from=2026-05-01&to=2026-06-30", USAGE_HEADERS);
    expect(all.body.map((u) => u.vm_id)).toEqual([old, s1, l1, s2]);
    expect((await c.get<UsageRecord[]>("/compute/v1/usage?from=2026-05-15&to=2026-05-15", USAGE_HEADERS)).body.map((u) => u.vm_id)).toEqual([old]);
    expect((await c.get<UsageRecord[]>("/compute/v1/usage?tier=standard&limit=1&offset=1", USAGE_HEADERS)).body.map((u) => u.vm_id)).toEqual([s2]);
    const bad = await c.get("/compute/v1/usage?from=2026-02-30", USAGE_HEADERS);
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ message: "from must be a date in the form YYYY-MM-DD" });
    expect((await c.get("/compute/v1/usage?to=20260601", USAGE_HEADERS)).body).toMatchObject({ message: "to must be a date in the form YYYY-MM-DD" });

    const summary = await c.get<UsageSummary>("/compute/v1/usage/summary");
    expect(summary.status).toBe(200);
    expect(summary.body).toEqual({ period_start: "2026-06-01", period_end: "2026-06-30", total_seconds: 600, vm_count: 3, by_tier: { standard: 400, large: 200 } });
  });

  it("answers 400 naming the missing body on operations whose requestBody is published as required; {} is a body", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = (await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard" })).body;
    const { agent } = (await c.post<{ agent: { id: string } }>("/registry/v1/agents", { name: "a", org_id: "o", image: "i" })).body;
    await c.post("/compute/v1/skills", { name: "s", content: "c" });
    const compute: [string, string, string][] = [
      ["POST", `/compute/v1/vms/${vm.vm_id}/release`, "models.ReleaseRequest"],
      ["PUT", "/compute/v1/pool/config", "models.PoolConfig"],
      ["POST", "/compute/v1/vms/allocate", "models.AllocateRequest"],
      ["POST", `/compute/v1/vms/${vm.vm_id}/renew`, "models.RenewRequest"],
      ["POST", "/compute/v1/skills", "models.CreateSkillRequest"],
      ["PUT", "/compute/v1/skills/s", "models.CreateSkillRequest"],
      ["POST", "/compute/v1/access/clients", "{name}"],
    ];
    for (const [method, path, model] of compute) {
      for (const empty of [undefined, "", " \n"]) {
        const res = await c.call(method, path, empty);
        expect(res.status, `${method} ${path} ${JSON.stringify(empty)}`).toBe(400);
        expect(res.body).toEqual({ code: 400, error_code: "bad_request", message: `request body is required: a JSON object (${model})` });
      }
    }
    const registry: [string, string, string][] = [
      ["POST", "/registry/v1/agents", "models.CreateAgentRequest"],
      ["PUT", `/registry/v1/agents/${agent.id}`, "models.UpdateAgentRequest"],
      ["POST", "/registry/v1/tools", "models.CreateToolRequest"],
    ];
    for (const [method, path, model] of registry) {
      const res = await c.call(method, path);
      expect(res.status, `${method} ${path}`).toBe(400);
      expect(res.body).toEqual({ error: "bad_request", message: `request body is required: a JSON object (${model})` });
    }
    // Nothing changed: the VM is still there, and the pool config is the default.
    expect((await c.get(`/compute/v1/vms/${vm.vm_id}`)).status).toBe(200);
    expect(emu.state.vms.size).toBe(1);
    // An empty object is a body: every field of ReleaseRequest and PoolConfig is optional.
    expect((await c.put("/compute/v1/pool/config", {})).status).toBe(200);
    expect((await c.post(`/compute/v1/vms/${vm.vm_id}/release`, {})).status).toBe(200);
    // The deploy body is not published as required: none still means no options.
    expect((await c.post(`/compute/v1/agents/${agent.id}/deploy`)).status).toBe(200);
  });

  it("answers usage and its summary for the caller's org only, as the VM list (records never show the org)", async () => {
    const clock = new FakeClock();
    const emu = await emulator({ now: clock.now, orgId: "org-mine", tokenTTLSeconds: 86_400 });
    const c = await client(emu);
    const run = async (body: Record<string, unknown>, seconds: number): Promise<string> => {
      const a = (await c.post<Allocation>("/compute/v1/vms/allocate", body)).body;
      clock.advance(seconds);
      await c.post(`/compute/v1/vms/${a.vm_id}/release`, {});
      return a.vm_id;
    };
    const mine = await run({ tier: "standard" }, 100);
    const named = await run({ tier: "large", org_id: "org-mine" }, 50);
    await run({ tier: "standard", org_id: "org-other" }, 1000);
    await run({ tier: "gpu", org_id: "org-other" }, 7);
    const list = await c.get<UsageRecord[]>("/compute/v1/usage", USAGE_HEADERS);
    expect(list.status).toBe(200);
    expect(list.body.map((u) => u.vm_id)).toEqual([mine, named]);
    for (const u of list.body) expect(Object.keys(u).sort()).toEqual(["duration_seconds", "ended_at", "reason", "started_at", "tier", "vm_id"]);
    const summary = await c.get<UsageSummary>("/compute/v1/usage/summary");
    expect(summary.body).toEqual({ period_start: "2026-05-01", period_end: "2026-05-31", total_seconds: 150, vm_count: 2, by_tier: { standard: 100, large: 50 } });
    // The other org's records are kept (out of band), only not answered.
    expect(emu.state.usage).toHaveLength(4);
  });
});
