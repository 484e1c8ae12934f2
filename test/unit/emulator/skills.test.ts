import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import type { Skill } from "../../../src/emulator/wire.js";
import { FakeClock, client, emulator } from "./helpers.js";

function expectedHash(content: string, resources: Record<string, string>): string {
  const h = createHash("sha256").update(content);
  for (const k of Object.keys(resources).sort()) h.update(`\0${k}\0${resources[k]}`);
  return h.digest("hex");
}

describe("emulator skills", () => {
  it("creates, gets and lists skills with a content hash over content and resources", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const body = { name: "pdf", content: "# PDF skill", description: "reads PDFs", resources: { "requirements.txt": "pypdf\n", "run.py": "print(1)" } };
    const res = await c.post<Skill>("/compute/v1/skills", body);
    expect(res.status).toBe(201);
    expect(res.body).toEqual({ ...body, content_hash: expectedHash(body.content, body.resources), created_at: expect.any(String), updated_at: res.body.created_at });
    expect((await c.get<Skill>("/compute/v1/skills/pdf")).body).toEqual(res.body);
    await c.post("/compute/v1/skills", { name: "web", content: "w" });
    const list = await c.get<Skill[]>("/compute/v1/skills");
    expect(list.body.map((s) => s.name)).toEqual(["pdf", "web"]);
    expect(list.body[1]).toMatchObject({ resources: {}, content_hash: expectedHash("w", {}) });
    // No query parameters are published for the list: limit/offset are ignored.
    expect((await c.get<Skill[]>("/compute/v1/skills?limit=1&offset=1")).body.map((s) => s.name)).toEqual(["pdf", "web"]);
  });

  it("answers 409 (compute dialect) for an existing name and 400 naming bad fields", async () => {
    const emu = await emulator();
    const c = await client(emu);
    await c.post("/compute/v1/skills", { name: "s", content: "c" });
    const dup = await c.post("/compute/v1/skills", { name: "s", content: "other" });
    expect(dup.status).toBe(409);
    expect(dup.body).toEqual({ code: 409, error_code: "conflict", message: 'a skill named "s" already exists' });
    const cases: [Record<string, unknown>, string][] = [
      [{ content: "c" }, "name is required"],
      [{ name: "t" }, "content is required"],
      [{ name: "t", content: "c", resources: { "a.py": 1 } }, "resources.a.py must be a string"],
      [{ name: "t", content: "c", resources: { "../x": "y" } }, 'resources: invalid file name "../x"'],
      [{ name: "a/b", content: "c" }, "name must start with a letter or digit and contain only letters, digits, '.', '_' and '-'"],
      [{ name: "t", content: "c", files: {} }, "unknown field: files"],
    ];
    for (const [body, message] of cases) {
      const res = await c.post("/compute/v1/skills", body);
      expect(res.status, message).toBe(400);
      expect(res.body).toEqual({ code: 400, error_code: "bad_request", message });
    }
  });

  it("replaces a skill on PUT, recomputing the hash and moving updated_at", async () => {
    const clock = new FakeClock();
    const emu = await emulator({ now: clock.now });
    const c = await client(emu);
    const created = (await c.post<Skill>("/compute/v1/skills", { name: "s", content: "v1", description: "old", resources: { a: "1" } })).body;
    clock.advance(60);
    const res = await c.put<Skill>("/compute/v1/skills/s", { name: "s", content: "v2", resources: { b: "2" } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      name: "s",
      content: "v2",
      resources: { b: "2" },
      content_hash: expectedHash("v2", { b: "2" }),
      created_at: created.created_at,
      updated_at: new Date(Date.parse(created.updated_at!) + 60_000).toISOString(),
    });
    expect((await c.put("/compute/v1/skills/s", { name: "s", content: "v3" })).status).toBe(200);
    const rename = await c.put("/compute/v1/skills/s", { name: "t", content: "v3" });
    expect(rename.status).toBe(400);
    expect(rename.body).toMatchObject({ message: "name must match the skill name in the path" });
    expect((await c.put("/compute/v1/skills/s", { name: "s", description: "no content" })).body).toMatchObject({ message: "content is required" });
    // The body is models.CreateSkillRequest: name is required there too.
    expect((await c.put("/compute/v1/skills/s", { content: "v4" })).body).toMatchObject({ message: "name is required" });
  });

  it("deletes with 204 and answers 404 for unknown names", async () => {
    const emu = await emulator();
    const c = await client(emu);
    await c.post("/compute/v1/skills", { name: "s", content: "c" });
    expect((await c.del("/compute/v1/skills/s")).status).toBe(204);
    for (const res of [await c.get("/compute/v1/skills/s"), await c.put("/compute/v1/skills/s", { name: "s", content: "c" }), await c.del("/compute/v1/skills/s")]) {
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ code: 404, error_code: "not_found", message: "skill s not found" });
    }
  });
});
