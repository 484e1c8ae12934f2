import { describe, expect, it } from "vitest";
import type { Allocation, PoolConfig, PoolStatus } from "../../../src/emulator/wire.js";
import { FakeClock, T0, client, emulator } from "./helpers.js";

const DEFAULTS: PoolConfig = {
  default_skills: [],
  default_tier: "standard",
  idle_ttl_seconds: 600,
  max_total: 0,
  max_vm_ttl_seconds: 2_592_000,
  max_warm: 10,
  min_warm: 2,
  recycle: false,
  scale_up_threshold: 0.7,
};

describe("emulator VM pool", () => {
  it("answers the default config, and a status counting live VMs per tier plus min_warm warm ones", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const config = await c.get<PoolConfig>("/compute/v1/pool/config");
    expect(config.status).toBe(200);
    expect(config.body).toEqual(DEFAULTS);
    expect((await c.get<PoolStatus>("/compute/v1/pool/status")).body).toEqual({ allocated: 0, by_tier: {}, total: 2, warm: 2 });
    await c.post("/compute/v1/vms/allocate", { tier: "standard" });
    await c.post("/compute/v1/vms/allocate", { tier: "standard" });
    const gone = (await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "large" })).body;
    await c.post("/compute/v1/vms/allocate", { tier: "large", org_id: "another-org" }); // the pool is shared
    expect((await c.get<PoolStatus>("/compute/v1/pool/status")).body).toEqual({ allocated: 4, by_tier: { standard: 2, large: 2 }, total: 6, warm: 2 });
    await c.post(`/compute/v1/vms/${gone.vm_id}/release`, {});
    expect((await c.get<PoolStatus>("/compute/v1/pool/status")).body).toEqual({ allocated: 3, by_tier: { standard: 2, large: 1 }, total: 5, warm: 2 });
    expect(emu.requests.map((r) => r.operation).filter((o) => o.startsWith("pool."))).toEqual(["pool.config.get", "pool.status", "pool.status", "pool.status"]);
  });

  it("updates any subset and answers the whole config; the change is kept", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const res = await c.put<PoolConfig>("/compute/v1/pool/config", { min_warm: 0, scale_up_threshold: 0.5, default_skills: ["pdf"], recycle: true });
    expect(res.status).toBe(200);
    const want = { ...DEFAULTS, min_warm: 0, scale_up_threshold: 0.5, default_skills: ["pdf"], recycle: true };
    expect(res.body).toEqual(want);
    expect((await c.get<PoolConfig>("/compute/v1/pool/config")).body).toEqual(want);
    expect(emu.state.poolConfig).toEqual(want);
    expect((await c.get<PoolStatus>("/compute/v1/pool/status")).body).toMatchObject({ warm: 0, total: 0 });
    expect(emu.requests.at(-2)?.operation).toBe("pool.config.get");
    expect(emu.requests.find((r) => r.method === "PUT")?.operation).toBe("pool.config.update");
  });

  it("answers 400 naming the field for a wrong type, a negative number, a ratio outside 0..1 or min_warm > max_warm", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const cases: [Record<string, unknown>, string][] = [
      [{ max_total: -1 }, "max_total must be a non-negative integer"],
      [{ max_total: 1.5 }, "max_total must be a non-negative integer"],
      [{ min_warm: "2" }, "min_warm must be a non-negative integer"],
      [{ idle_ttl_seconds: -5 }, "idle_ttl_seconds must be a non-negative integer"],
      [{ max_warm: true }, "max_warm must be a non-negative integer"],
      [{ max_vm_ttl_seconds: 0 }, "max_vm_ttl_seconds must be a positive integer"],
      [{ scale_up_threshold: 1.2 }, "scale_up_threshold must be a number within 0..1"],
      [{ scale_up_threshold: -0.1 }, "scale_up_threshold must be a number within 0..1"],
      [{ scale_up_threshold: "0.5" }, "scale_up_threshold must be a number within 0..1"],
      [{ recycle: "yes" }, "recycle must be a boolean"],
      [{ default_tier: 3 }, "default_tier must be a string"],
      [{ default_skills: [1] }, "default_skills[0] must be a string"],
      [{ min_warm: 11 }, "min_warm must not exceed max_warm (min_warm 11, max_warm 10)"],
      [{ max_warm: 1 }, "min_warm must not exceed max_warm (min_warm 2, max_warm 1)"],
      [{ maxTotal: 3 }, "unknown field: maxTotal"],
    ];
    for (const [body, message] of cases) {
      const res = await c.put("/compute/v1/pool/config", body);
      expect(res.status, message).toBe(400);
      expect(res.body).toEqual({ code: 400, error_code: "bad_request", message });
    }
    // Nothing half-applied.
    expect((await c.get<PoolConfig>("/compute/v1/pool/config")).body).toEqual(DEFAULTS);
    // Both at once is fine when the result is consistent.
    expect((await c.put<PoolConfig>("/compute/v1/pool/config", { min_warm: 20, max_warm: 30 })).body).toMatchObject({ min_warm: 20, max_warm: 30 });
  });

  it("limits allocation by max_total (0 = unlimited) together with poolSize: the smaller wins", async () => {
    const emu = await emulator({ poolSize: 3 });
    const c = await client(emu);
    await c.put("/compute/v1/pool/config", { max_total: 1 });
    expect((await c.post("/compute/v1/vms/allocate", { tier: "standard" })).status).toBe(201);
    const full = await c.post("/compute/v1/vms/allocate", { tier: "standard" });
    expect(full.status).toBe(503);
    expect(full.body).toEqual({ code: 503, error_code: "pool_exhausted", message: "no VMs available, retry shortly" });
    expect((await c.get<PoolStatus>("/compute/v1/pool/status")).body).toEqual({ allocated: 1, by_tier: { standard: 1 }, total: 1, warm: 0 });
    await c.put("/compute/v1/pool/config", { max_total: 10 });
    expect((await c.post("/compute/v1/vms/allocate", { tier: "standard" })).status).toBe(201);
    expect((await c.post("/compute/v1/vms/allocate", { tier: "standard" })).status).toBe(201);
    expect((await c.post("/compute/v1/vms/allocate", { tier: "standard" })).status).toBe(503); // poolSize 3
    expect((await c.get<PoolStatus>("/compute/v1/pool/status")).body).toMatchObject({ allocated: 3, warm: 0, total: 3 });
    emu.setOptions({ poolSize: undefined });
    await c.put("/compute/v1/pool/config", { max_total: 0 });
    expect((await c.post("/compute/v1/vms/allocate", { tier: "standard" })).status).toBe(201);
  });

  it("bounds ttl_seconds by max_vm_ttl_seconds on allocate and on renew", async () => {
    const clock = new FakeClock();
    const emu = await emulator({ now: clock.now });
    const c = await client(emu);
    // The default bound allows a TTL of a day and more.
    const day = await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard", ttl_seconds: 86_400 });
    expect(day.status).toBe(201);
    expect(day.body.expires_at).toBe(new Date(T0 + 86_400_000).toISOString());
    await c.put("/compute/v1/pool/config", { max_vm_ttl_seconds: 600 });
    const long = await c.post("/compute/v1/vms/allocate", { tier: "standard", ttl_seconds: 601 });
    expect(long.status).toBe(400);
    expect(long.body).toEqual({ code: 400, error_code: "bad_request", message: "ttl_seconds must be at most 600 (the pool's max_vm_ttl_seconds)" });
    // The default TTL (3600) is bounded too.
    expect((await c.post("/compute/v1/vms/allocate", { tier: "standard" })).body).toMatchObject({ message: "ttl_seconds must be at most 600 (the pool's max_vm_ttl_seconds)" });
    expect((await c.post("/compute/v1/vms/allocate", { tier: "standard", ttl_seconds: 600 })).status).toBe(201);
    const renew = await c.post(`/compute/v1/vms/${day.body.vm_id}/renew`, { ttl_seconds: 700 });
    expect(renew.status).toBe(400);
    expect(renew.body).toMatchObject({ message: "ttl_seconds must be at most 600 (the pool's max_vm_ttl_seconds)" });
    expect((await c.post(`/compute/v1/vms/${day.body.vm_id}/renew`, { ttl_seconds: 600 })).status).toBe(200);
  });
});
