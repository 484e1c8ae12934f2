import { describe, expect, it } from "vitest";
import type { Tool, ToolResponse, ToolsListResponse } from "../../../src/emulator/wire.js";
import { FakeClock, T0, client, emulator } from "./helpers.js";

describe("emulator registry tools", () => {
  it("creates, gets and lists tools, filtering by category", async () => {
    const clock = new FakeClock();
    const emu = await emulator({ now: clock.now });
    const c = await client(emu);
    const res = await c.post<ToolResponse>("/registry/v1/tools", { id: "web-search", name: "Web search", category: "web", description: "searches" });
    expect(res.status).toBe(201);
    const search: Tool = { id: "web-search", name: "Web search", category: "web", description: "searches", created_at: new Date(T0).toISOString() };
    expect(res.body).toEqual({ tool: search });
    // category and description are always in the record; "" when not given.
    const calc = (await c.post<ToolResponse>("/registry/v1/tools", { id: "calc", name: "Calculator" })).body.tool;
    expect(calc).toEqual({ id: "calc", name: "Calculator", category: "", description: "", created_at: new Date(T0).toISOString() });
    await c.post("/registry/v1/tools", { id: "fetch", name: "Fetch", category: "web" });

    expect((await c.get<ToolResponse>("/registry/v1/tools/web-search")).body).toEqual({ tool: search });
    const all = await c.get<ToolsListResponse>("/registry/v1/tools");
    expect(all.status).toBe(200);
    expect(all.body.total).toBe(3);
    expect(all.body.tools.map((t) => t.id)).toEqual(["web-search", "calc", "fetch"]);
    const web = await c.get<ToolsListResponse>("/registry/v1/tools?category=web");
    expect(web.body).toEqual({ tools: [search, expect.objectContaining({ id: "fetch" })], total: 2 });
    expect((await c.get<ToolsListResponse>("/registry/v1/tools?category=none")).body).toEqual({ tools: [], total: 0 });
    expect(emu.requests.map((r) => r.operation).filter((o) => o.startsWith("tools."))).toEqual([
      "tools.create",
      "tools.create",
      "tools.create",
      "tools.get",
      "tools.list",
      "tools.list",
      "tools.list",
    ]);
  });

  it("answers 409 for a taken id, 404 for an unknown one and 400 naming the field (registry dialect)", async () => {
    const emu = await emulator();
    const c = await client(emu);
    await c.post("/registry/v1/tools", { id: "t", name: "T" });
    const dup = await c.post("/registry/v1/tools", { id: "t", name: "Other" });
    expect(dup.status).toBe(409);
    expect(dup.body).toEqual({ error: "conflict", message: 'a tool with id "t" already exists' });
    const missing = await c.get("/registry/v1/tools/nope");
    expect(missing.status).toBe(404);
    expect(missing.body).toEqual({ error: "not_found", message: "tool nope not found" });
    const cases: [Record<string, unknown>, string][] = [
      [{ name: "n" }, "id is required"],
      [{ id: "x" }, "name is required"],
      [{ id: 1, name: "n" }, "id must be a string"],
      [{ id: "x", name: "n", category: 2 }, "category must be a string"],
      [{ id: "x", name: "n", description: [] }, "description must be a string"],
      [{ id: "x", name: "n", tags: [] }, "unknown field: tags"],
    ];
    for (const [body, message] of cases) {
      const res = await c.post("/registry/v1/tools", body);
      expect(res.status, message).toBe(400);
      expect(res.body).toEqual({ error: "bad_request", message });
    }
    expect(emu.state.tools.size).toBe(1);
  });
});
