// Every endpoint the operator uses, through the typed client, against the emulator over
// real HTTP. Each call is checked both by its typed answer and by the emulator's request log
// (so the operation names and methods line up with what the service sees).

import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { isNotFound, ServiceError } from "../../../src/service/index.js";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { count, newClient, ORG, rejection, start } from "./helpers.js";
import type { Harness } from "./helpers.js";

let h: Harness;
beforeAll(async () => {
  h = await start();
});
afterAll(async () => {
  await h.close();
});
beforeEach(() => {
  h.emu.clearFaults();
});

describe("registry", () => {
  it("creates, gets, updates, lists, searches and deletes an agent", async () => {
    const { client, emu } = h;
    const created = await client.agents.create({
      name: "alpha",
      org_id: ORG,
      image: "registry.example/alpha:1",
      capabilities: ["search", "summarise"],
      metadata: { "agentcompute.dev/uid": "uid-1" },
    });
    expect(created.id).toEqual(expect.any(String));
    expect(created.name).toBe("alpha");
    expect(emu.state.agents.has(created.id)).toBe(true);

    const got = await client.agents.get(created.id);
    expect(got).toMatchObject({ id: created.id, name: "alpha", image: "registry.example/alpha:1" });
    expect(got.metadata?.["agentcompute.dev/uid"]).toBe("uid-1");

    const updated = await client.agents.update(created.id, { image: "registry.example/alpha:2", description: "d" });
    expect(updated).toMatchObject({ id: created.id, image: "registry.example/alpha:2", description: "d" });

    const list = await client.agents.list({ limit: 10 });
    expect(list.total).toBeGreaterThanOrEqual(1);
    expect(list.agents.map((a) => a.id)).toContain(created.id);

    const found = await client.agents.search(["summarise"]);
    expect(found.agents.map((a) => a.id)).toContain(created.id);
    const none = await client.agents.search(["no-such-capability"]);
    expect(none.agents).toEqual([]);

    await client.agents.delete(created.id);
    expect(isNotFound(await rejection(client.agents.get(created.id)))).toBe(true);

    for (const op of ["agents.create", "agents.get", "agents.update", "agents.list", "agents.search", "agents.delete"]) {
      expect(count(emu, op), op).toBeGreaterThanOrEqual(1);
    }
  });

  it("listAll pages through every agent with limit 100", async () => {
    const { client, emu } = h;
    for (let i = 0; i < 230; i++) {
      emu.state.createAgent({ name: `bulk-${i}`, org_id: ORG, image: "img", author: "bulk" });
    }
    emu.clearRequests();
    const all = await client.agents.listAll({ author: "bulk" });
    expect(all).toHaveLength(230);
    expect(new Set(all.map((a) => a.id)).size).toBe(230);
    const pages = emu.requests.filter((r) => r.operation === "agents.list");
    expect(pages).toHaveLength(3);
    expect(pages.every((r) => r.query.includes("limit=100"))).toBe(true);
  });

  it("listAll still gets everything when the server caps the page below 100", async () => {
    const { client, emu } = h;
    emu.setOptions({ maxPageSize: 40 });
    try {
      const expected = (await client.agents.list({ author: "bulk", limit: 1 })).total;
      const all = await client.agents.listAll({ author: "bulk" });
      expect(all).toHaveLength(expected);
    } finally {
      emu.setOptions({ maxPageSize: Infinity });
    }
  });

  it("passes a 409 on a duplicate name through as a conflict", async () => {
    await h.client.agents.create({ name: "dup", org_id: ORG, image: "img" });
    const e = await rejection(h.client.agents.create({ name: "dup", org_id: ORG, image: "img" }));
    expect(e).toBeInstanceOf(ServiceError);
    const se = e as ServiceError;
    expect(se.status).toBe(409);
    expect(se.operation).toBe("agents.create");
    expect(se.outcomeUnknown).toBe(false);
    expect(se.retryable).toBe(false);
    expect(se.message).toMatch(/^agents\.create: conflict: .* \(HTTP 409\)$/);
  });
});

describe("deployments", () => {
  it("deploys, gets, stops, redeploys, lists and deletes", async () => {
    const { client, emu } = h;
    const agent = await client.agents.create({ name: "dep-agent", org_id: ORG, image: "img" });
    const d = await client.deployments.deploy(agent.id, {
      tier: "standard",
      env: { A: "1" },
      metadata: { "agentcompute.dev/uid": "uid-d" },
      custom_option: "passed-through",
    });
    expect(d.id).toEqual(expect.any(String));
    expect(d.registry_id).toBe(agent.id);
    expect(d.config_hash).toEqual(expect.any(String));
    expect(d.token).toEqual(expect.any(String));
    // The record does not echo deploy options: the operator must remember what it applied.
    expect(d).not.toHaveProperty("env");
    expect(d).not.toHaveProperty("custom_option");

    expect((await client.deployments.get(d.id)).id).toBe(d.id);
    const stopped = await client.deployments.stop(d.id);
    expect(stopped.id).toBe(d.id);
    const again = await client.deployments.redeploy(d.id);
    expect(again.id).toBe(d.id);

    const all = await client.deployments.list();
    expect(all.map((x) => x.id)).toContain(d.id);

    await client.deployments.delete(d.id);
    expect(isNotFound(await rejection(client.deployments.get(d.id)))).toBe(true);
    for (const op of ["deployments.deploy", "deployments.get", "deployments.stop", "deployments.redeploy", "deployments.list", "deployments.delete"]) {
      expect(count(emu, op), op).toBeGreaterThanOrEqual(1);
    }
  });

  it("lists every deployment in one call (the endpoint publishes no paging)", async () => {
    const { client, emu } = h;
    const agent = await client.agents.create({ name: "many-deps", org_id: ORG, image: "img" });
    for (let i = 0; i < 150; i++) emu.state.deploy(agent.id, { name: `d-${i}` });
    const total = emu.state.deployments.size;
    emu.clearRequests();
    const all = await client.deployments.list();
    expect(all).toHaveLength(total);
    expect(count(emu, "deployments.list")).toBe(1);
    expect(emu.requests.find((r) => r.operation === "deployments.list")?.query).toBe("");
  });
});

describe("VMs", () => {
  it("allocates, gets, renews, reads the endpoint, executes, releases and deletes", async () => {
    const { client, emu } = h;
    const a = await client.vms.allocate({ tier: "standard", ttl_seconds: 600, metadata: { k: "v" } });
    expect(a.vm_id).toEqual(expect.any(String));
    expect(a.state).toBe("allocated");
    expect(a.token).toEqual(expect.any(String));

    // The record names its id `id`; only the allocation says `vm_id`.
    const vm = await client.vms.get(a.vm_id);
    expect(vm).toMatchObject({ id: a.vm_id, tier: "standard", metadata: { k: "v" } });

    const renewed = await client.vms.renew(a.vm_id, 1200);
    expect(renewed.id).toBe(a.vm_id);
    expect(renewed.ttl_seconds).toBe(1200);

    const ep = await client.vms.endpoint(a.vm_id);
    expect(Object.values(ep).every((v) => typeof v === "string")).toBe(true);

    // Execute runs the command in the VM and answers a server-sent event stream: its output,
    // then its end with the exit code. It ran exactly once.
    const events = await client.vms.execute(a.vm_id, { command: "echo hi; exit 3" });
    expect(events.filter((x) => x.event === "stdout").map((x) => x.data).join("")).toContain("hi");
    const end = events.at(-1);
    expect(end?.event).toBe("end");
    expect(JSON.parse(end?.data ?? "{}")).toMatchObject({ exit_code: 3 });
    expect(count(emu, "vms.execute")).toBe(1);
    expect(emu.runtimes.get(a.vm_id)?.executions).toBe(1);

    const listed = await client.vms.list({ tier: "standard" });
    expect(listed.map((v) => v.id)).toContain(a.vm_id);

    const released = await client.vms.release(a.vm_id, true);
    expect(released.id).toBe(a.vm_id);

    const b = await client.vms.allocate({ tier: "standard" });
    await client.vms.delete(b.vm_id);
    for (const op of ["vms.allocate", "vms.get", "vms.renew", "vms.endpoint", "vms.execute", "vms.list", "vms.release", "vms.delete"]) {
      expect(count(emu, op), op).toBeGreaterThanOrEqual(1);
    }
  });

  it("passes the service's 400 message through", async () => {
    const e = (await rejection(h.client.vms.allocate({ tier: "unknown-tier" }))) as ServiceError;
    expect(e.status).toBe(400);
    expect(e.serviceMessage).toEqual(expect.any(String));
    expect(e.message).toContain(e.serviceMessage);
    expect(e.retryable).toBe(false);
  });

  it("listAll pages VMs", async () => {
    const { client, emu } = h;
    for (let i = 0; i < 120; i++) emu.state.allocateVM({ tier: "bulk" });
    emu.clearRequests();
    const all = await client.vms.listAll({ tier: "bulk" });
    expect(all).toHaveLength(120);
    expect(count(emu, "vms.list")).toBe(2);
  });
});

describe("a service that ignores offset", () => {
  // offset is optional in the published descriptions: a service without it answers every page
  // with its first. Paging it would never end (bare arrays) or stop at the total with the first
  // page counted over and over (the registry): either way the operator, missing a VM it looks
  // for by its marker, would allocate it again.
  it("ends the listing with an error naming the operation, rather than paging forever or passing off the first page as the whole list", async () => {
    const agents = Array.from({ length: 250 }, (_, i) => ({ id: `a-${i}`, name: `n-${i}`, org_id: ORG, image: "img" }));
    const vms = Array.from({ length: 150 }, (_, i) => ({ id: `vm-${i}`, state: "allocated", tier: "standard" }));
    const pages: string[] = [];
    const server = createServer((req, res) => {
      const url = new URL(req.url ?? "/", "http://x");
      pages.push(`${url.pathname}?${url.searchParams.toString()}`);
      const limit = Number(url.searchParams.get("limit") ?? "20");
      res.writeHead(200, { "content-type": "application/json" });
      if (url.pathname.endsWith("/registry/v1/agents")) res.end(JSON.stringify({ agents: agents.slice(0, limit), total: agents.length }));
      else res.end(JSON.stringify(vms.slice(0, limit)));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    const base = `http://127.0.0.1:${port}/`;
    const client = newClient(h.emu, { baseURL: base, registryURL: base });
    try {
      const agentsErr = await rejection(client.agents.listAll());
      expect(agentsErr).toBeInstanceOf(ServiceError);
      expect((agentsErr as ServiceError).message).toBe("agents.list: the page at offset 100 holds only items already listed: the service seems to ignore offset, so the list cannot be read whole");
      const vmsErr = await rejection(client.vms.listAll());
      expect((vmsErr as ServiceError).operation).toBe("vms.list");
      expect((vmsErr as ServiceError).retryable).toBe(true);
      expect(pages.filter((p) => p.includes("/vms"))).toEqual(["/compute/v1/vms?limit=100&offset=0", "/compute/v1/vms?limit=100&offset=100"]);
    } finally {
      await client.close();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  it.each([100, 150])("still reads a list of %i whose items shift by one between two pages (an insertion ahead of the offset) without an error, each once", async (length) => {
    const vms = Array.from({ length }, (_, i) => ({ id: `vm-${i}`, state: "allocated", tier: "standard" }));
    let listed = vms;
    const server = createServer((req, res) => {
      const url = new URL(req.url ?? "/", "http://x");
      const limit = Number(url.searchParams.get("limit"));
      const offset = Number(url.searchParams.get("offset"));
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(listed.slice(offset, offset + limit)));
      // A VM allocated meanwhile, listed first (newest first).
      listed = [{ id: "vm-new", state: "allocated", tier: "standard" }, ...vms];
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    const client = newClient(h.emu, { baseURL: `http://127.0.0.1:${port}/` });
    try {
      const all = await client.vms.listAll();
      expect(all.map((v) => v.id)).toEqual(vms.map((v) => v.id));
    } finally {
      await client.close();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});

describe("skills", () => {
  it("creates, lists, gets, updates and deletes a skill", async () => {
    const { client, emu } = h;
    const s = await client.skills.create({ name: "web-search", content: "# search", resources: { "requirements.txt": "requests\n" } });
    expect(s.name).toBe("web-search");
    expect(s.content_hash).toEqual(expect.any(String));
    expect((await client.skills.list()).map((x) => x.name)).toContain("web-search");
    expect((await client.skills.get("web-search")).content).toBe("# search");
    const u = await client.skills.update("web-search", { name: "web-search", content: "# search v2" });
    expect(u.content_hash).not.toBe(s.content_hash);
    await client.skills.delete("web-search");
    expect(isNotFound(await rejection(client.skills.get("web-search")))).toBe(true);
    for (const op of ["skills.create", "skills.list", "skills.get", "skills.update", "skills.delete"]) {
      expect(count(emu, op), op).toBeGreaterThanOrEqual(1);
    }
  });
});

describe("registryURL", () => {
  it("sends registry calls to the registry's own base URL, with the same bearer token", async () => {
    const seen: { path: string; auth: string | undefined }[] = [];
    const registry = createServer((req, res) => {
      seen.push({ path: req.url ?? "", auth: req.headers.authorization });
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ agents: [], total: 0 }));
    });
    await new Promise<void>((resolve) => registry.listen(0, "127.0.0.1", resolve));
    const { port } = registry.address() as AddressInfo;
    const client = newClient(h.emu, { registryURL: `http://127.0.0.1:${port}/prefix/` });
    try {
      h.emu.clearRequests();
      expect((await client.agents.list()).agents).toEqual([]);
      await client.skills.list();
      expect(seen).toHaveLength(1);
      expect(seen[0]?.path).toBe("/prefix/registry/v1/agents");
      expect(seen[0]?.auth).toMatch(/^Bearer \S+$/);
      expect(count(h.emu, "agents.list")).toBe(0);
      expect(count(h.emu, "skills.list")).toBe(1);
    } finally {
      await client.close();
      await new Promise<void>((resolve) => registry.close(() => resolve()));
    }
  });
});

describe("usage and access clients", () => {
  it("lists usage records across pages with the workspace headers, and the summary", async () => {
    const { client, emu } = h;
    for (let i = 0; i < 130; i++) emu.state.releaseVM(emu.state.allocateVM({ tier: "usage" }).vm_id);
    emu.clearRequests();
    const records = await client.usage.list({ workspaceId: "ws-1", environmentId: "env-1" });
    expect(records.length).toBeGreaterThanOrEqual(130);
    expect(records.filter((r) => r.tier === "usage")).toHaveLength(130);
    expect(count(emu, "usage.list", 200)).toBeGreaterThanOrEqual(2);

    const summary = await client.usage.summary();
    expect(summary.vm_count).toBeGreaterThanOrEqual(0);
    expect(typeof summary.by_tier).toBe("object");
  });

  it("lists access clients", async () => {
    h.emu.state.createAccessClient("listed");
    const clients = await h.client.accessClients();
    expect(clients.find((c) => c.name === "listed")).toMatchObject({ client_id: expect.any(String), is_active: true });
  });

  it("authenticate reports the token's expiry", async () => {
    const { expiresAt } = await h.client.authenticate();
    expect(expiresAt.getTime()).toBeGreaterThan(Date.now());
  });
});
