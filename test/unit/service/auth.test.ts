// Contract: the token cache against the emulator's token service. Time is a fake clock shared
// by the client (token expiry) and the emulator (token validity), so "15 minutes later" is
// one assignment, and nothing here depends on the machine's speed.

import { afterEach, describe, expect, it } from "vitest";
import { isAuthError, ServiceClient, ServiceError } from "../../../src/service/index.js";
import { TOKEN_REFRESHES_PER_CALL } from "../../../src/service/token.js";
import { count, FakeClock, newClient, rejection, start } from "./helpers.js";
import type { Harness } from "./helpers.js";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

describe("token cache", () => {
  it("reuses one token for many calls", async () => {
    h = await start();
    await Promise.all(Array.from({ length: 30 }, () => h!.client.skills.list()));
    for (let i = 0; i < 10; i++) await h.client.skills.list();
    expect(count(h.emu, "token")).toBe(1);
  });

  it("N=20 concurrent calls right after expiry cause exactly one token request", async () => {
    const clock = new FakeClock();
    h = await start({ now: clock.now, tokenTTLSeconds: 900 }, { now: clock.now });
    await h.client.skills.list();
    expect(count(h.emu, "token")).toBe(1);
    clock.advance(900_000 + 1);
    const results = await Promise.all(Array.from({ length: 20 }, () => h!.client.skills.list()));
    expect(results).toHaveLength(20);
    expect(count(h.emu, "token")).toBe(2);
    // The expired token was never sent: the refresh happened before the calls.
    expect(count(h.emu, "skills.list", 401)).toBe(0);
  });

  it("refreshes 30 s before expiry, not later", async () => {
    const clock = new FakeClock();
    h = await start({ now: clock.now, tokenTTLSeconds: 900 }, { now: clock.now });
    const first = await h.client.authenticate();
    expect(first.expiresAt.getTime()).toBe(clock.ms + 900_000);
    clock.advance(869_000);
    await h.client.skills.list();
    expect(count(h.emu, "token")).toBe(1);
    clock.advance(2_000); // 871 s: inside the 30 s margin
    await h.client.skills.list();
    expect(count(h.emu, "token")).toBe(2);
  });

  it("assumes 900 s when expires_in is absent", async () => {
    const clock = new FakeClock();
    // The emulator's tokens live an hour but it does not say so: the client must assume 900 s.
    h = await start({ now: clock.now, tokenTTLSeconds: 3600, omitExpiresIn: true }, { now: clock.now });
    const { expiresAt } = await h.client.authenticate();
    expect(expiresAt.getTime() - clock.ms).toBe(900_000);
    clock.advance(869_000);
    await h.client.skills.list();
    expect(count(h.emu, "token")).toBe(1);
    clock.advance(2_000);
    await h.client.skills.list();
    expect(count(h.emu, "token")).toBe(2);
  });

  it("authenticate reuses a valid token", async () => {
    h = await start();
    const a = await h.client.authenticate();
    const b = await h.client.authenticate();
    expect(b.expiresAt.getTime()).toBe(a.expiresAt.getTime());
    expect(count(h.emu, "token")).toBe(1);
  });
});

describe("401 recovery", () => {
  it("after revokeTokens, concurrent calls refresh exactly once and all succeed", async () => {
    h = await start();
    await h.client.skills.list();
    h.emu.revokeTokens();
    h.emu.clearRequests();
    const results = await Promise.all(Array.from({ length: 20 }, () => h!.client.skills.list()));
    expect(results).toHaveLength(20);
    expect(count(h.emu, "token")).toBe(1);
    expect(count(h.emu, "skills.list", 200)).toBe(20);
    // Each call retried at most once after its 401.
    expect(count(h.emu, "skills.list", 401)).toBeLessThanOrEqual(20);
  });

  it("a single call after revocation: one 401, one refresh, one retry", async () => {
    h = await start();
    await h.client.skills.list();
    h.emu.revokeTokens();
    h.emu.clearRequests();
    await h.client.skills.list();
    expect(h.emu.requests.map((r) => `${r.operation} ${r.status}`)).toEqual(["skills.list 401", "token 200", "skills.list 200"]);
  });

  it("a 401 after a retried 429 is refreshed again: the wait may outlast a short-lived token", async () => {
    h = await start();
    await h.client.skills.list();
    h.emu.clearRequests();
    for (const action of [{ status: 401 }, { status: 429, retryAfterSeconds: 0 }, { status: 401 }]) {
      h.emu.injectFault({ method: "GET", path: "/compute/v1/skills", times: 1, action });
    }
    await h.client.skills.list();
    expect(h.emu.requests.map((r) => `${r.operation} ${r.status}`)).toEqual([
      "skills.list 401",
      "token 200",
      "skills.list 429",
      "skills.list 401",
      "token 200",
      "skills.list 200",
    ]);
  });

  it("a new token refused too (fetched while the service revoked) earns another: the call succeeds", async () => {
    h = await start();
    await h.client.skills.list();
    h.emu.clearRequests();
    h.emu.injectFault({ method: "GET", path: "/compute/v1/skills", times: 2, action: { status: 401 } });
    await h.client.skills.list();
    expect(h.emu.requests.map((r) => `${r.operation} ${r.status}`)).toEqual([
      "skills.list 401",
      "token 200",
      "skills.list 401",
      "token 200",
      "skills.list 200",
    ]);
  });

  it("three tokens refused in a row end the call with the refusal", async () => {
    h = await start();
    h.emu.injectFault({ method: "GET", path: "/compute/v1/skills", times: Infinity, action: { status: 401 } });
    const e = (await rejection(h.client.skills.list())) as ServiceError;
    expect(e).toBeInstanceOf(ServiceError);
    expect(e).toMatchObject({ operation: "skills.list", status: 401, retryable: false });
    expect(isAuthError(e)).toBe(true);
    expect(count(h.emu, "skills.list")).toBe(TOKEN_REFRESHES_PER_CALL + 1);
    expect(count(h.emu, "token")).toBe(TOKEN_REFRESHES_PER_CALL + 1);
  });
});

describe("credentials", () => {
  const CLIENT = { clientId: "operator-ci", clientSecret: "s3cr3t-client-secret-0b1d" };

  it("client credentials flow obtains a token and works", async () => {
    h = await start({ clients: [CLIENT] }, { credentials: CLIENT });
    await h.client.skills.list();
    expect(count(h.emu, "token", 200)).toBe(1);
  });

  it("a refused API key is a non-retryable token error with a clear message and no key in it", async () => {
    h = await start();
    const bad = newClient(h.emu, { credentials: { apiKey: "wrong-key-9e8d7c6b5a" } });
    try {
      const e = (await rejection(bad.skills.list())) as ServiceError;
      expect(e).toBeInstanceOf(ServiceError);
      expect(e).toMatchObject({ operation: "token", status: 401, retryable: false, outcomeUnknown: false });
      expect(e.message).toMatch(/^token: credentials refused by the token service.*\(HTTP 401\)$/);
      expect(e.message).not.toContain("wrong-key-9e8d7c6b5a");
      expect(isAuthError(e)).toBe(true);
      expect(count(h.emu, "token")).toBe(1);
      expect(count(h.emu, "skills.list")).toBe(0);
      await expect(bad.authenticate()).rejects.toBeInstanceOf(ServiceError);
    } finally {
      await bad.close();
    }
  });

  it("a refused client secret is reported the same way", async () => {
    h = await start({ clients: [CLIENT] });
    const bad = newClient(h.emu, { credentials: { clientId: CLIENT.clientId, clientSecret: "not-the-secret-123" } });
    try {
      const e = (await rejection(bad.authenticate())) as ServiceError;
      expect(e.message).toMatch(/^token: credentials refused by the token service/);
      expect(e.message).not.toContain("not-the-secret-123");
    } finally {
      await bad.close();
    }
  });

  it("revoked credentials: the refusal is answered again without asking for 30 s, and said once", async () => {
    const clock = new FakeClock();
    let refusals = 0;
    h = await start({ clients: [CLIENT], now: clock.now, tokenTTLSeconds: 60 }, { credentials: CLIENT, now: clock.now, hooks: { onCredentialsRefused: () => refusals++ } });
    await h.client.skills.list();
    expect(h.client.credentials()).toBe("accepted");
    h.emu.state.revokeAccessClient(CLIENT.clientId);
    // Every resource's next call, many times over: one token request.
    const failures = await Promise.all(Array.from({ length: 20 }, () => rejection(h!.client.skills.list())));
    for (let i = 0; i < 20; i++) failures.push(await rejection(h.client.skills.list()));
    expect(failures.every((e) => isAuthError(e))).toBe(true);
    expect(count(h.emu, "token", 401)).toBe(1);
    expect(h.client.credentials()).toBe("refused");
    expect(refusals).toBe(1);
    // Past the hold: asked again (the credentials may be back), and still refused: not news.
    clock.advance(30_000);
    await rejection(h.client.skills.list());
    expect(count(h.emu, "token", 401)).toBe(2);
    expect(refusals).toBe(1);
  });

  it("a token service that is briefly down is retried", async () => {
    h = await start();
    h.emu.injectFault({ method: "POST", path: "/auth/token", times: 2, action: { status: 503 } });
    await h.client.skills.list();
    expect(count(h.emu, "token", 503)).toBe(2);
    expect(count(h.emu, "token", 200)).toBe(1);
  });

  it("a failed proactive refresh keeps using the still-valid token", async () => {
    const clock = new FakeClock();
    h = await start({ now: clock.now }, { now: clock.now });
    await h.client.skills.list();
    clock.advance(880_000); // inside the refresh margin, before expiry
    h.emu.injectFault({ method: "POST", path: "/auth/token", times: Infinity, action: { status: 400 } });
    await h.client.skills.list();
    expect(count(h.emu, "token", 400)).toBe(1);
    expect(count(h.emu, "skills.list", 200)).toBe(2);
    clock.advance(30_000); // now really expired: the failure surfaces
    const e = (await rejection(h.client.skills.list())) as ServiceError;
    expect(e.operation).toBe("token");
  });

  it("rejects empty credentials and bad URLs at construction", () => {
    expect(() => new ServiceClient({ baseURL: "http://x", authURL: "http://x", credentials: { apiKey: "" } })).toThrow(/empty credentials/);
    expect(() => new ServiceClient({ baseURL: "not a url", authURL: "http://x", credentials: { apiKey: "k" } })).toThrow(/baseURL/);
  });
});
