import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { startEmulator } from "../../../src/emulator/index.js";
import type { AccessClient, Agent, AgentVM, Allocation, CreatedAccessClient, Deployment, PoolConfig, Skill, Tool } from "../../../src/emulator/wire.js";
import { API_KEY, FakeClock, T0, agentBody, client, emulator, raw } from "./helpers.js";

describe("emulator state file", () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "emulator-state-"));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("survives a restart: objects, their secrets, VM expiry, usage and issued tokens", async () => {
    const clock = new FakeClock();
    const stateFile = join(dir, "state.json");
    const first = await startEmulator({ apiKey: API_KEY, stateFile, now: clock.now });
    const c = await client(first);
    const { agent } = (await c.post<{ agent: Agent }>("/registry/v1/agents", agentBody("keep", { image_pull_secret: { registry: "r", username: "u", password: "pw" } }))).body;
    const dep = (await c.post<Deployment>(`/compute/v1/agents/${agent.id}/deploy`, { tier: "standard" })).body;
    await c.post<Skill>("/compute/v1/skills", { name: "s", content: "c" });
    const vm = (await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard", ttl_seconds: 60 })).body;
    const gone = (await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard" })).body;
    await c.post(`/compute/v1/vms/${gone.vm_id}/release`, {});
    const tool = (await c.post<{ tool: Tool }>("/registry/v1/tools", { id: "t", name: "T" })).body.tool;
    const pool = (await c.put<PoolConfig>("/compute/v1/pool/config", { max_total: 50 })).body;
    const made = (await c.post<CreatedAccessClient>("/compute/v1/access/clients", { name: "kept" })).body;
    const dropped = (await c.post<CreatedAccessClient>("/compute/v1/access/clients", { name: "revoked" })).body;
    await c.del(`/compute/v1/access/clients/${dropped.client_id}`);
    const clients = (await c.get<AccessClient[]>("/compute/v1/access/clients")).body;
    await first.close();

    const second = await startEmulator({ apiKey: API_KEY, stateFile, now: clock.now });
    try {
      // The old token still works: a restart of the service does not log clients out.
      const get = (path: string) => raw(`${second.baseURL}${path}`, { headers: { authorization: `Bearer ${c.token}` } });
      expect((await get(`/registry/v1/agents/${agent.id}`)).body).toEqual({ agent });
      expect((await get(`/compute/v1/deployments/${dep.id}`)).body).toEqual(dep);
      expect((await get("/compute/v1/skills/s")).status).toBe(200);
      expect(((await get(`/compute/v1/vms/${vm.vm_id}`)).body as AgentVM).expires_at).toBe(vm.expires_at);
      expect(second.state.agents.get(agent.id)?.image_pull_secret?.password).toBe("pw");
      expect(second.state.usage).toHaveLength(1);
      expect(second.state.deployments.get(dep.id)?.options).toEqual({ tier: "standard" });
      expect((await get("/registry/v1/tools/t")).body).toEqual({ tool });
      expect((await get("/compute/v1/pool/config")).body).toEqual(pool);
      expect((await get("/compute/v1/access/clients")).body).toEqual(clients);
      const clientToken = (id: string, secret: string) =>
        raw(`${second.authURL}/token`, { method: "POST", body: JSON.stringify({ grant_type: "client_credentials", client_id: id, client_secret: secret }) });
      expect((await clientToken(made.client_id, made.client_secret)).status).toBe(200);
      expect((await clientToken(dropped.client_id, dropped.client_secret)).status).toBe(401);
      // Names stay unique across the restart, and expiry still runs.
      expect((await raw(`${second.baseURL}/registry/v1/agents`, { method: "POST", headers: { authorization: `Bearer ${c.token}` }, body: JSON.stringify(agentBody("keep")) })).status).toBe(409);
      clock.advance(60);
      expect((await get(`/compute/v1/vms/${vm.vm_id}`)).status).toBe(404);
    } finally {
      await second.close();
    }
  });

  it("saves after a change without waiting for close", async () => {
    const stateFile = join(dir, "state.json");
    const emu = await emulator({ stateFile });
    const c = await client(emu);
    await c.post("/compute/v1/skills", { name: "early", content: "c" });
    await expect
      .poll(async () => {
        try {
          return JSON.parse(await readFile(stateFile, "utf8")) as { skills: { name: string }[] };
        } catch {
          return undefined;
        }
      })
      .toMatchObject({ version: 2, skills: [{ name: "early" }] });
    await emu.close(); // before the directory goes: close saves once more
  });

  it("keeps each usage record's org across a restart; a record saved without one counts as the caller's org's", async () => {
    const stateFile = join(dir, "state.json");
    const record = (vm_id: string, extra: Record<string, unknown> = {}) => ({
      vm_id,
      tier: "standard",
      started_at: new Date(T0).toISOString(),
      ended_at: new Date(T0 + 10_000).toISOString(),
      duration_seconds: 10,
      reason: "released",
      ...extra,
    });
    const usage = [record("old-format"), record("mine", { org_id: "org-mine" }), record("theirs", { org_id: "org-other" })];
    await writeFile(stateFile, JSON.stringify({ version: 2, usage }));
    const emu = await emulator({ stateFile, orgId: "org-mine", now: () => T0 + 60_000 });
    const c = await client(emu);
    const list = await c.get<{ vm_id: string }[]>("/compute/v1/usage", { "X-Workspace-Id": "ws", "X-Environment-Id": "env" });
    expect(list.body.map((u) => u.vm_id)).toEqual(["old-format", "mine"]);
    expect(emu.state.usage.map((u) => u.org_id)).toEqual(["org-mine", "org-mine", "org-other"]);
    await emu.close(); // before the directory goes: close saves once more
    const saved = JSON.parse(await readFile(stateFile, "utf8")) as { usage: { vm_id: string; org_id: string }[] };
    expect(saved.usage.map((u) => [u.vm_id, u.org_id])).toEqual([
      ["old-format", "org-mine"],
      ["mine", "org-mine"],
      ["theirs", "org-other"],
    ]);
  });

  it("refuses a corrupt or foreign state file with a clear error", async () => {
    const stateFile = join(dir, "state.json");
    await writeFile(stateFile, "{oops");
    await expect(startEmulator({ stateFile })).rejects.toThrow(/not valid JSON/);
    await writeFile(stateFile, JSON.stringify([1]));
    await expect(startEmulator({ stateFile })).rejects.toThrow(/unknown format/);
    await writeFile(stateFile, JSON.stringify({ version: 9 }));
    await expect(startEmulator({ stateFile })).rejects.toThrow(/written by a newer emulator \(format version 9; this emulator reads version 2\)/);
  });

  it("refuses a state file of the previous format (version 1: vm_id, agent_id) instead of misreading it", async () => {
    const stateFile = join(dir, "state.json");
    const v1 = { version: 1, agents: [], deployments: [{ id: "d", agent_id: "a", env: {} }], vms: [{ vm_id: "v", skills_loaded: [] }], skills: [], usage: [], tokens: [] };
    await writeFile(stateFile, JSON.stringify(v1));
    await expect(startEmulator({ stateFile })).rejects.toThrow(
      `emulator state file ${stateFile} was written by an older emulator (format version 1; this emulator reads version 2): delete it or point the emulator at another file`,
    );
    // Left as it was: nothing overwrote it.
    expect(JSON.parse(await readFile(stateFile, "utf8"))).toEqual(v1);
  });
});

describe("emulator out-of-band state access", () => {
  it("lets tests drift objects behind the client's back", async () => {
    const clock = new FakeClock();
    const emu = await emulator({ now: clock.now });
    const c = await client(emu);
    const { agent } = (await c.post<{ agent: Agent }>("/registry/v1/agents", agentBody("drift"))).body;
    const dep = (await c.post<Deployment>(`/compute/v1/agents/${agent.id}/deploy`, {})).body;
    await c.post("/compute/v1/skills", { name: "s", content: "v1" });
    const vm = (await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard" })).body;

    clock.advance(1);
    emu.state.updateAgent(agent.id, { image: "drifted:9", visibility: "public" });
    const got = (await c.get<{ agent: Agent }>(`/registry/v1/agents/${agent.id}`)).body.agent;
    expect(got).toMatchObject({ image: "drifted:9", visibility: "public" });
    expect(got.updated_at).not.toBe(agent.updated_at);

    emu.state.stopDeployment(dep.id);
    expect((await c.get<Deployment>(`/compute/v1/deployments/${dep.id}`)).body.state).toBe("stopped");
    emu.state.deleteDeployment(dep.id);
    expect((await c.get(`/compute/v1/deployments/${dep.id}`)).status).toBe(404);

    const before = emu.state.skills.get("s")!.content_hash;
    emu.state.updateSkill("s", { content: "v2" });
    const skill = (await c.get<Skill>("/compute/v1/skills/s")).body;
    expect(skill.content).toBe("v2");
    expect(skill.content_hash).not.toBe(before);
    emu.state.deleteSkill("s");
    expect((await c.get("/compute/v1/skills/s")).status).toBe(404);

    emu.state.expireVM(vm.vm_id);
    expect((await c.get(`/compute/v1/vms/${vm.vm_id}`)).status).toBe(404);
    expect(emu.state.usage.at(-1)).toMatchObject({ vm_id: vm.vm_id, reason: "expired" });

    // Reading vms/usage out of band runs the expiry check, sweep timer or not.
    const short = (await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard", ttl_seconds: 5 })).body;
    clock.advance(5);
    expect(emu.state.vms.has(short.vm_id)).toBe(false);
    expect(emu.state.usage.at(-1)).toMatchObject({ vm_id: short.vm_id, reason: "expired", duration_seconds: 5 });

    emu.state.deleteAgent(agent.id);
    expect(emu.state.agents.size).toBe(0);
    expect(() => emu.state.deleteAgent(agent.id)).toThrow(/not found/);
  });
});
