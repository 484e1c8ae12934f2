import { describe, expect, it } from "vitest";
import type { Allocation } from "../../../src/emulator/wire.js";
import { agentBody, client, emulator, raw, token } from "./helpers.js";

describe("emulator knobs", () => {
  it("rate limits service calls with 429 and Retry-After, but not /token", async () => {
    const emu = await emulator({ rateLimit: 2 });
    const c = await client(emu);
    const results = await Promise.all(Array.from({ length: 10 }, () => c.get("/compute/v1/skills")));
    const ok = results.filter((r) => r.status === 200);
    const limited = results.filter((r) => r.status === 429);
    // Burst = 1 s worth; a token may refill while the burst is in flight.
    expect(ok.length).toBeGreaterThanOrEqual(2);
    expect(ok.length).toBeLessThanOrEqual(3);
    expect(ok.length + limited.length).toBe(10);
    expect(limited[0]!.headers.get("retry-after")).toBe("1");
    expect(limited[0]!.body).toEqual({ code: 429, error_code: "rate_limited", message: expect.stringContaining("2 requests/s") });
    const reg = await c.get("/registry/v1/agents");
    expect(reg.status).toBe(429);
    expect(reg.body).toMatchObject({ error: "rate_limited" });
    await expect(token(emu)).resolves.toEqual(expect.any(String));
    expect(emu.stats().byStatus["429"]).toBeGreaterThanOrEqual(8);
    // Lifting the limit at run time takes effect at once.
    emu.setOptions({ rateLimit: undefined });
    expect((await c.get("/compute/v1/skills")).status).toBe(200);
  });

  it("answers an injected status in the path's dialect, `times` times, with Retry-After", async () => {
    const emu = await emulator();
    const c = await client(emu);
    emu.injectFault({ method: "get", path: "/registry/v1/agents", times: 2, action: { status: 503, retryAfterSeconds: 7 } });
    const first = await c.get("/registry/v1/agents");
    expect(first.status).toBe(503);
    expect(first.headers.get("retry-after")).toBe("7");
    expect(first.body).toEqual({ error: "service_unavailable", message: "injected fault: 503" });
    expect((await c.post("/registry/v1/agents", agentBody("a"))).status).toBe(201); // other method: no match
    expect((await c.get("/registry/v1/agents")).status).toBe(503);
    expect((await c.get("/registry/v1/agents")).status).toBe(200);

    emu.injectFault({ path: /^\/compute\/v1\/vms/, action: { status: 502 } });
    expect((await c.get("/compute/v1/vms")).body).toEqual({ code: 502, error_code: "bad_gateway", message: "injected fault: 502" });
    emu.injectFault({ path: "/compute/v1/skills", action: { status: 500, body: "<html>oops</html>" } });
    const html = await c.get("/compute/v1/skills");
    expect(html.status).toBe(500);
    expect(html.text).toBe("<html>oops</html>");
    emu.injectFault({ path: "/compute/v1/skills", action: { status: 418, body: { custom: true } } });
    expect((await c.get("/compute/v1/skills")).body).toEqual({ custom: true });
  });

  it("applies faults to /token too, and clearFaults removes pending rules", async () => {
    const emu = await emulator();
    emu.injectFault({ path: "/auth/token", action: { status: 500 } });
    const res = await raw(`${emu.authURL}/token`, { method: "POST", headers: { "X-API-Key": "test-key" } });
    expect(res.status).toBe(500);
    expect(res.body).toEqual({ error: "internal_error", message: "injected fault: 500" });
    emu.injectFault({ path: "/auth/token", times: Infinity, action: { status: 500 } });
    emu.clearFaults();
    await expect(token(emu)).resolves.toEqual(expect.any(String));
  });

  it("drops the connection before handling: no response, no state change", async () => {
    const emu = await emulator();
    const c = await client(emu);
    emu.injectFault({ method: "POST", path: "/registry/v1/agents", action: { drop: "before" } });
    await expect(c.post("/registry/v1/agents", agentBody("a"))).rejects.toThrow();
    expect(emu.state.agents.size).toBe(0);
    expect(emu.requests.at(-1)).toMatchObject({ operation: "agents.create", status: "dropped" });
  });

  it("drops the connection after handling: the create's outcome is unknown to the client but it happened", async () => {
    const emu = await emulator();
    const c = await client(emu);
    emu.injectFault({ method: "POST", path: "/registry/v1/agents", action: { drop: "after" } });
    await expect(c.post("/registry/v1/agents", agentBody("a", { metadata: { "agentcompute.dev/uid": "cr-1" } }))).rejects.toThrow();
    expect(emu.state.agents.size).toBe(1);
    const listed = await c.get<{ agents: { metadata: Record<string, string> }[] }>("/registry/v1/agents");
    expect(listed.body.agents[0]!.metadata["agentcompute.dev/uid"]).toBe("cr-1");
    expect((await c.post("/registry/v1/agents", agentBody("a"))).status).toBe(409);
  });

  it("delays the answer past a client timeout after handling the request", async () => {
    const emu = await emulator();
    const c = await client(emu);
    emu.injectFault({ path: "/compute/v1/vms/allocate", action: { delayMs: 1000 } });
    const timedOut = fetch(`${emu.baseURL}/compute/v1/vms/allocate`, {
      method: "POST",
      headers: { authorization: `Bearer ${c.token}` },
      body: JSON.stringify({ tier: "standard" }),
      signal: AbortSignal.timeout(100),
    });
    await expect(timedOut).rejects.toThrow();
    expect(emu.state.vms.size).toBe(1);
  });

  it("fails a fraction of service calls: half 500, half dropped, and never /token", async () => {
    const emu = await emulator();
    const c = await client(emu);
    emu.setOptions({ errorRate: 1 });
    const outcomes = await Promise.all(
      Array.from({ length: 40 }, () =>
        c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard" }).then(
          (r) => r,
          () => "dropped" as const,
        ),
      ),
    );
    const errors = outcomes.filter((o) => o !== "dropped");
    expect(errors.length).toBeGreaterThan(0);
    expect(errors.length).toBeLessThan(40);
    for (const r of errors) expect(r).toMatchObject({ status: 500, body: { code: 500, error_code: "internal_error" } });
    expect(emu.state.vms.size).toBe(0);
    await expect(token(emu)).resolves.toEqual(expect.any(String));
    emu.setOptions({ errorRate: 0 });
    expect((await c.get("/compute/v1/vms")).status).toBe(200);
  });

  it("answers 413 for a body over 1 MiB and keeps serving", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const res = await c.post("/compute/v1/skills", { name: "big", content: "x".repeat(1 << 20) });
    expect(res.status).toBe(413);
    expect(res.body).toEqual({ code: 413, error_code: "payload_too_large", message: "request body too large" });
    expect((await c.get("/compute/v1/skills")).status).toBe(200);
  });

  it("adds latency to every response", async () => {
    const emu = await emulator({ latencyMs: 150, jitterMs: 20 });
    const started = performance.now();
    await token(emu);
    expect(performance.now() - started).toBeGreaterThanOrEqual(145);
  });

  it("checks the rate limit before fault rules: a 429 does not use up a rule", async () => {
    const emu = await emulator({ rateLimit: 1 });
    const c = await client(emu);
    expect((await c.get("/compute/v1/skills")).status).toBe(200); // the only token in the bucket
    emu.injectFault({ path: "/compute/v1/skills", action: { status: 500 } });
    expect((await c.get("/compute/v1/skills")).status).toBe(429);
    emu.setOptions({ rateLimit: undefined });
    expect((await c.get("/compute/v1/skills")).status).toBe(500);
  });

  it("keeps a bounded request log and counters that survive trimming until clearRequests", async () => {
    const emu = await emulator({ requestLogLimit: 10 });
    const c = await client(emu);
    for (let i = 0; i < 30; i++) await c.get(`/compute/v1/skills?i=${i}`);
    expect(emu.requests.length).toBeLessThanOrEqual(10);
    expect(emu.requests.at(-1)).toMatchObject({ method: "GET", path: "/compute/v1/skills", query: "i=29", status: 200, operation: "skills.list" });
    expect(emu.stats()).toEqual({ total: 31, byOperation: { token: 1, "skills.list": 30 }, byStatus: { "200": 31 } });
    emu.clearRequests();
    expect(emu.requests).toEqual([]);
    expect(emu.stats().total).toBe(0);
  });

  it("validates options at start and at run time", async () => {
    const emu = await emulator();
    expect(() => emu.setOptions({ errorRate: 2 })).toThrow(/errorRate/);
    expect(() => emu.setOptions({ port: 1 })).toThrow(/port cannot be changed/);
    expect(() => emu.setOptions({ maxPageSize: 0 })).toThrow(/maxPageSize/);
    await expect(emulator({ rateLimit: -1 })).rejects.toThrow(/rateLimit/);
    expect(() => emu.injectFault({ action: { status: 99 } })).toThrow(/status/);
  });
});
