import { describe, expect, it } from "vitest";
import type { AccessClient, CreatedAccessClient } from "../../../src/emulator/wire.js";
import { FakeClock, T0, client, emulator, raw, type Res } from "./helpers.js";

async function clientToken(url: string, clientId: string, secret: string): Promise<Res<{ access_token: string }>> {
  return raw(`${url}/token`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ grant_type: "client_credentials", client_id: clientId, client_secret: secret }),
  });
}

describe("emulator access clients", () => {
  it("creates a client whose credentials really work, lists it, and revokes it", async () => {
    const clock = new FakeClock();
    const emu = await emulator({ now: clock.now });
    const c = await client(emu);
    clock.advance(60);
    const created = await c.post<CreatedAccessClient>("/compute/v1/access/clients", { name: "ci" });
    expect(created.status).toBe(201);
    expect(created.body).toEqual({ client_id: expect.any(String), client_secret: expect.any(String), name: "ci" });
    const { client_id, client_secret } = created.body;

    const tok = await clientToken(emu.authURL, client_id, client_secret);
    expect(tok.status).toBe(200);
    const asClient = { authorization: `Bearer ${tok.body.access_token}` };
    expect((await raw(`${emu.baseURL}/compute/v1/skills`, { headers: asClient })).status).toBe(200);

    const listed = await c.get<AccessClient[]>("/compute/v1/access/clients");
    expect(listed.status).toBe(200);
    // The API key is not an OAuth client (the list's model): not listed.
    expect(listed.body).toEqual([{ client_id, name: "ci", is_active: true, created_at: new Date(T0 + 60_000).toISOString() }]);
    // The secret is shown once, at creation.
    expect(listed.text).not.toContain(client_secret);

    const revoked = await c.del(`/compute/v1/access/clients/${client_id}`);
    expect(revoked.status).toBe(204);
    expect(revoked.text).toBe("");
    expect((await c.get<AccessClient[]>("/compute/v1/access/clients")).body[0]).toMatchObject({ client_id, is_active: false });
    const refused = await clientToken(emu.authURL, client_id, client_secret);
    expect(refused.status).toBe(401);
    expect(refused.body).toEqual({ error: "invalid_client", message: "invalid client credentials" });
    // Tokens already issued to it end with it.
    expect((await raw(`${emu.baseURL}/compute/v1/skills`, { headers: asClient })).status).toBe(401);
    // Revoking again is a no-op; other callers are unaffected.
    expect((await c.del(`/compute/v1/access/clients/${client_id}`)).status).toBe(204);
    expect((await c.get("/compute/v1/skills")).status).toBe(200);
    expect(emu.requests.map((r) => r.operation).filter((o) => o.startsWith("access."))).toEqual([
      "access.clients.create",
      "access.clients",
      "access.clients.revoke",
      "access.clients",
      "access.clients.revoke",
    ]);
  });

  it("refuses a wrong secret for a created client", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const { client_id } = (await c.post<CreatedAccessClient>("/compute/v1/access/clients", { name: "x" })).body;
    expect((await clientToken(emu.authURL, client_id, "guess")).status).toBe(401);
  });

  it("revokes a configured client too; a client listing and revoking every client it lists meets no refusal", async () => {
    const emu = await emulator({ clients: [{ clientId: "cfg", clientSecret: "s3cret" }] });
    const c = await client(emu);
    expect((await clientToken(emu.authURL, "cfg", "s3cret")).status).toBe(200);
    expect((await c.del("/compute/v1/access/clients/cfg")).status).toBe(204);
    expect((await clientToken(emu.authURL, "cfg", "s3cret")).status).toBe(401);
    expect((await c.get<AccessClient[]>("/compute/v1/access/clients")).body).toEqual([{ client_id: "cfg", name: "cfg", is_active: false, created_at: expect.any(String) }]);
    await c.post<CreatedAccessClient>("/compute/v1/access/clients", { name: "ci" });
    for (const { client_id } of (await c.get<AccessClient[]>("/compute/v1/access/clients")).body) {
      expect((await c.del(`/compute/v1/access/clients/${client_id}`)).status).toBe(204);
    }
    // The API key still works: it is no client of the list.
    expect((await c.get("/compute/v1/skills")).status).toBe(200);
  });

  it("answers 404 for an unknown client and 400 naming the field of a bad create", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const unknown = await c.del("/compute/v1/access/clients/nope");
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({ code: 404, error_code: "not_found", message: "access client nope not found" });
    const cases: [unknown, string][] = [
      [{}, "name is required"],
      [{ name: 5 }, "name must be a string"],
      [{ name: "" }, "name must not be empty"],
      [{ name: "n", scopes: [] }, "unknown field: scopes"],
    ];
    for (const [body, message] of cases) {
      const res = await c.post("/compute/v1/access/clients", body);
      expect(res.status, message).toBe(400);
      expect(res.body).toEqual({ code: 400, error_code: "bad_request", message });
    }
  });
});
