import { describe, expect, it } from "vitest";
import { API_KEY, FakeClock, client, emulator, raw, token } from "./helpers.js";

describe("emulator token service", () => {
  it("issues a bearer token for the API key", async () => {
    const emu = await emulator({ tokenTTLSeconds: 600 });
    const res = await raw<Record<string, unknown>>(`${emu.authURL}/token`, { method: "POST", headers: { "X-API-Key": API_KEY } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ access_token: expect.any(String), token_type: "Bearer", expires_in: 600 });
    expect(emu.requests.at(-1)).toMatchObject({ operation: "token", status: 200, path: "/auth/token", method: "POST" });
  });

  it("issues tokens for client credentials and lists the clients without the API key", async () => {
    const emu = await emulator({ clients: [{ clientId: "ci", clientSecret: "s3cret" }] });
    const res = await raw<{ access_token: string }>(`${emu.authURL}/token`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ grant_type: "client_credentials", client_id: "ci", client_secret: "s3cret" }),
    });
    expect(res.status).toBe(200);
    const clients = await raw<unknown[]>(`${emu.baseURL}/compute/v1/access/clients`, { headers: { authorization: `Bearer ${res.body.access_token}` } });
    expect(clients.status).toBe(200);
    expect(clients.body).toEqual([{ client_id: "ci", name: "ci", is_active: true, created_at: expect.any(String) }]);
    expect(clients.text).not.toContain(API_KEY);
  });

  it("answers 401 invalid_client for a wrong key, wrong secret or no credentials", async () => {
    const emu = await emulator({ clients: [{ clientId: "ci", clientSecret: "s3cret" }] });
    const post = (headers: Record<string, string>, body?: unknown) =>
      raw(`${emu.authURL}/token`, { method: "POST", headers, ...(body !== undefined && { body: JSON.stringify(body) }) });
    for (const res of [
      await post({ "X-API-Key": "wrong" }),
      await post({}, { grant_type: "client_credentials", client_id: "ci", client_secret: "nope" }),
      await post({}, { grant_type: "client_credentials", client_id: "who", client_secret: "s3cret" }),
      await post({}),
    ]) {
      expect(res.status).toBe(401);
      expect(res.body).toEqual({ error: "invalid_client", message: expect.any(String) });
    }
    const grant = await post({}, { grant_type: "password", client_id: "ci", client_secret: "s3cret" });
    expect(grant.status).toBe(400);
    expect(grant.body).toMatchObject({ error: "unsupported_grant_type" });
    const malformed = await post({}, undefined);
    expect(malformed.status).toBe(401);
    const bad = await raw(`${emu.authURL}/token`, { method: "POST", body: "{nope" });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ error: "bad_request", message: expect.stringContaining("malformed JSON") });
  });

  it("omits expires_in when asked to", async () => {
    const emu = await emulator({ omitExpiresIn: true });
    const res = await raw<Record<string, unknown>>(`${emu.authURL}/token`, { method: "POST", headers: { "X-API-Key": API_KEY } });
    expect(res.status).toBe(200);
    expect(res.body).not.toHaveProperty("expires_in");
    expect(res.body["access_token"]).toEqual(expect.any(String));
  });

  it("answers 401 in each dialect without, with an unknown, or with an expired token", async () => {
    const clock = new FakeClock();
    const emu = await emulator({ now: clock.now, tokenTTLSeconds: 900 });
    const none = await raw(`${emu.baseURL}/compute/v1/vms`);
    expect(none.status).toBe(401);
    expect(none.body).toEqual({ code: 401, error_code: "unauthorized", message: "missing bearer token" });
    const unknown = await raw(`${emu.baseURL}/registry/v1/agents`, { headers: { authorization: "Bearer forged" } });
    expect(unknown.status).toBe(401);
    expect(unknown.body).toEqual({ error: "unauthorized", message: "invalid token" });

    const c = await client(emu);
    expect((await c.get("/compute/v1/vms")).status).toBe(200);
    clock.advance(899);
    expect((await c.get("/compute/v1/vms")).status).toBe(200);
    clock.advance(1);
    const expired = await c.get("/compute/v1/vms");
    expect(expired.status).toBe(401);
    expect(expired.body).toMatchObject({ code: 401, message: "token expired" });
    expect(expired.headers.get("www-authenticate")).toContain("Bearer");
  });

  it("revokes every token at once", async () => {
    const emu = await emulator();
    const c = await client(emu);
    emu.revokeTokens();
    expect((await c.get("/compute/v1/skills")).status).toBe(401);
    const fresh = await token(emu);
    const res = await raw(`${emu.baseURL}/compute/v1/skills`, { headers: { authorization: `Bearer ${fresh}` } });
    expect(res.status).toBe(200);
  });

  it("accepts a new API key set at run time; tokens already issued stay valid", async () => {
    const emu = await emulator();
    const c = await client(emu);
    emu.setOptions({ apiKey: "rotated" });
    await expect(token(emu)).rejects.toThrow("401");
    await expect(token(emu, "rotated")).resolves.toEqual(expect.any(String));
    expect((await c.get("/compute/v1/skills")).status).toBe(200);
  });

  it("answers 405 for a GET on the token endpoint", async () => {
    const emu = await emulator();
    const res = await raw(`${emu.authURL}/token`);
    expect(res.status).toBe(405);
    expect(res.headers.get("allow")).toBe("POST");
    expect(res.body).toMatchObject({ error: "method_not_allowed" });
  });
});
