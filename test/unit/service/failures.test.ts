// Contract: error bodies, retries and the outcome-unknown policy, against the emulator's
// fault injection over real HTTP. Timing assertions are lower bounds only, and loose.

import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { isConflict, isOutcomeUnknown, isTransient, ServiceError } from "../../../src/service/index.js";
import type { ServiceClientHooks } from "../../../src/service/index.js";
import { count, newClient, ORG, rejection, start, waitFor } from "./helpers.js";
import type { Harness } from "./helpers.js";

let h: Harness;
beforeAll(async () => {
  h = await start();
});
afterAll(async () => {
  await h.close();
});
afterEach(() => {
  h.emu.clearFaults();
  h.emu.clearRequests();
});

const AGENTS = "/registry/v1/agents";
const ALLOCATE = "/compute/v1/vms/allocate";

async function serviceError(p: Promise<unknown>): Promise<ServiceError> {
  const e = await rejection(p);
  expect(e).toBeInstanceOf(ServiceError);
  return e as ServiceError;
}

describe("error bodies", () => {
  it("reads the compute shape {code, error_code, message}", async () => {
    h.emu.injectFault({ method: "GET", path: /^\/compute\/v1\/vms\/vm-x$/, action: { status: 404, body: { code: 404, error_code: "vm_not_found", message: "vm vm-x does not exist" } } });
    const e = await serviceError(h.client.vms.get("vm-x"));
    expect(e).toMatchObject({ operation: "vms.get", status: 404, code: 404, errorCode: "vm_not_found", serviceMessage: "vm vm-x does not exist", retryable: false, outcomeUnknown: false });
    expect(e.message).toBe("vms.get: vm_not_found: vm vm-x does not exist (HTTP 404)");
  });

  it("reads the registry shape {error, message}", async () => {
    const e = await serviceError(h.client.agents.get("no-such-agent"));
    expect(e.status).toBe(404);
    expect(e.serviceError).toBe("not_found");
    expect(e.serviceMessage).toEqual(expect.any(String));
    expect(e.message).toBe(`agents.get: not_found: ${e.serviceMessage} (HTTP 404)`);
  });

  it("tolerates an empty body", async () => {
    h.emu.injectFault({ method: "GET", path: `${AGENTS}/a1`, action: { status: 404, body: "" } });
    const e = await serviceError(h.client.agents.get("a1"));
    expect(e.status).toBe(404);
    expect(e.serviceMessage).toBeUndefined();
    expect(e.message).toBe("agents.get: Not Found (HTTP 404)");
  });

  it("tolerates a non-JSON body: status text plus a short, truncated snippet", async () => {
    const html = `<html><body><h1>400 Bad Request</h1>${"x".repeat(5000)}</body></html>`;
    h.emu.injectFault({ method: "GET", path: `${AGENTS}/a2`, action: { status: 400, body: html } });
    const e = await serviceError(h.client.agents.get("a2"));
    expect(e.status).toBe(400);
    expect(e.message.startsWith("agents.get: Bad Request: <html><body><h1>400 Bad Request</h1>")).toBe(true);
    expect(e.message.length).toBeLessThan(300);
    expect(e.message).toContain("…");
  });

  it("tolerates JSON that is neither error shape", async () => {
    h.emu.injectFault({ method: "GET", path: `${AGENTS}/a3`, action: { status: 422, body: { detail: [1, 2] } } });
    const e = await serviceError(h.client.agents.get("a3"));
    expect(e.message).toBe('agents.get: Unprocessable Entity: {"detail":[1,2]} (HTTP 422)');
  });
});

describe("retries of idempotent calls", () => {
  it("retries 500, 502, 503, 504 on a GET and succeeds", async () => {
    const a = await h.client.agents.create({ name: "retry-get", org_id: ORG, image: "img" });
    h.emu.clearRequests();
    for (const status of [500, 502, 503]) h.emu.injectFault({ method: "GET", path: `${AGENTS}/${a.id}`, action: { status } });
    expect((await h.client.agents.get(a.id)).id).toBe(a.id);
    expect(count(h.emu, "agents.get")).toBe(4);
    h.emu.injectFault({ method: "GET", path: `${AGENTS}/${a.id}`, action: { status: 504 } });
    expect((await h.client.agents.get(a.id)).id).toBe(a.id);
  });

  it("retries a dropped connection on a GET", async () => {
    h.emu.injectFault({ method: "GET", path: AGENTS, action: { drop: "before" } });
    await h.client.agents.list();
    expect(count(h.emu, "agents.list", "dropped")).toBe(1);
    expect(count(h.emu, "agents.list", 200)).toBe(1);
  });

  it("gives up after maxAttempts with a transient error", async () => {
    h.emu.injectFault({ method: "GET", path: AGENTS, times: Infinity, action: { status: 502 } });
    const e = await serviceError(h.client.agents.list());
    expect(count(h.emu, "agents.list")).toBe(4);
    expect(e).toMatchObject({ status: 502, retryable: true, outcomeUnknown: false, attempts: 4 });
    expect(e.message).toMatch(/gave up after 4 attempts/);
    expect(isTransient(e)).toBe(true);
  });

  it("does not retry 400, 404, 409", async () => {
    h.emu.injectFault({ method: "GET", path: AGENTS, action: { status: 400 } });
    await serviceError(h.client.agents.list());
    expect(count(h.emu, "agents.list")).toBe(1);
  });

  it("retries PUT, DELETE and the idempotent POSTs (renew, release, stop, redeploy)", async () => {
    const { client, emu } = h;
    const agent = await client.agents.create({ name: "idem", org_id: ORG, image: "img" });
    const dep = await client.deployments.deploy(agent.id, { tier: "standard" });
    const vm = await client.vms.allocate({ tier: "standard" });
    emu.clearRequests();
    emu.injectFault({ method: "PUT", action: { status: 500 } });
    await client.agents.update(agent.id, { description: "x" });
    emu.injectFault({ path: `/compute/v1/vms/${vm.vm_id}/renew`, action: { drop: "after" } });
    await client.vms.renew(vm.vm_id, 600);
    emu.injectFault({ path: `/compute/v1/deployments/${dep.id}/stop`, action: { status: 502 } });
    await client.deployments.stop(dep.id);
    emu.injectFault({ path: `/compute/v1/deployments/${dep.id}/redeploy`, action: { status: 503 } });
    await client.deployments.redeploy(dep.id);
    emu.injectFault({ path: `/compute/v1/vms/${vm.vm_id}/release`, action: { status: 500 } });
    await client.vms.release(vm.vm_id);
    emu.injectFault({ method: "DELETE", action: { status: 503 } });
    await client.deployments.delete(dep.id);
    for (const op of ["agents.update", "vms.renew", "deployments.stop", "deployments.redeploy", "vms.release", "deployments.delete"]) {
      expect(count(emu, op), op).toBe(2);
    }
  });

  it("honours Retry-After on a 429 and pauses the whole client meanwhile", async () => {
    const { emu } = h;
    let saw429: () => void = () => {};
    const got429 = new Promise<void>((resolve) => (saw429 = resolve));
    // The hook fires synchronously just before the client pauses itself, so once this
    // promise settles the pause is in force.
    const client = newClient(emu, { hooks: { onRequest: (e) => e.status === 429 && saw429() } });
    try {
      emu.injectFault({ method: "GET", path: AGENTS, action: { status: 429, retryAfterSeconds: 1 } });
      const first = client.agents.list();
      await got429;
      const other = client.skills.list();
      await Promise.all([first, other]);
      const t429 = emu.requests.find((r) => r.operation === "agents.list" && r.status === 429)?.time ?? 0;
      const retry = emu.requests.find((r) => r.operation === "agents.list" && r.status === 200);
      const otherReq = emu.requests.find((r) => r.operation === "skills.list");
      // Loose lower bounds: Retry-After is 1 s; allow generous scheduling slack below it.
      expect((retry?.time ?? 0) - t429).toBeGreaterThanOrEqual(900);
      expect((otherReq?.time ?? 0) - t429).toBeGreaterThanOrEqual(900);
    } finally {
      await client.close();
    }
  });

  it("holds the other calls no longer than maxDelayMs for a Retry-After longer than that", async () => {
    const client = newClient(h.emu, { retry: { maxDelayMs: 300 } });
    try {
      h.emu.injectFault({ method: "GET", path: AGENTS, action: { status: 429, retryAfterSeconds: 3600 } });
      const e = await serviceError(client.agents.list());
      expect(e).toMatchObject({ status: 429, retryAfterMs: 3_600_000 });
      // An hour's pause would leave this call waiting: the test's own timeout would end it.
      await client.skills.list();
      expect(count(h.emu, "skills.list")).toBe(1);
    } finally {
      await client.close();
    }
  });

  it("does not sleep for a Retry-After longer than maxDelayMs: fails with retryAfterMs", async () => {
    h.emu.injectFault({ method: "GET", path: AGENTS, action: { status: 503, retryAfterSeconds: 120 } });
    const e = await serviceError(h.client.agents.list());
    expect(count(h.emu, "agents.list")).toBe(1);
    expect(e).toMatchObject({ status: 503, retryable: true, retryAfterMs: 120_000 });
  });
});

describe("non-idempotent creates", () => {
  it("a create whose connection drops after the service acted is NOT repeated: outcome unknown", async () => {
    const { client, emu } = h;
    emu.injectFault({ method: "POST", path: AGENTS, action: { drop: "after" } });
    const e = await serviceError(client.agents.create({ name: "dropped-after", org_id: ORG, image: "img", metadata: { "agentcompute.dev/uid": "u-1" } }));
    expect(count(emu, "agents.create")).toBe(1);
    expect(e.outcomeUnknown).toBe(true);
    expect(isOutcomeUnknown(e)).toBe(true);
    expect(e.retryable).toBe(true);
    expect(e.status).toBeUndefined();
    expect(e.message).toMatch(/^agents\.create: connection lost.*outcome unknown/);
    const stored = [...emu.state.agents.values()].filter((a) => a.name === "dropped-after");
    expect(stored).toHaveLength(1);
    // The caller's recovery: look it up (here by name: a second create answers 409).
    expect(isConflict(await rejection(client.agents.create({ name: "dropped-after", org_id: ORG, image: "img" })))).toBe(true);
  });

  it("a drop before the service acted is indistinguishable, so it is also outcome unknown", async () => {
    h.emu.injectFault({ method: "POST", path: "/compute/v1/skills", action: { drop: "before" } });
    const e = await serviceError(h.client.skills.create({ name: "dropped-before", content: "c" }));
    expect(count(h.emu, "skills.create")).toBe(1);
    expect(e.outcomeUnknown).toBe(true);
    expect(h.emu.state.skills.has("dropped-before")).toBe(false);
  });

  it("500, 502 and 504 on a create are not retried and make the outcome unknown", async () => {
    for (const status of [500, 502, 504]) {
      h.emu.clearRequests();
      h.emu.injectFault({ method: "POST", path: ALLOCATE, action: { status } });
      const e = await serviceError(h.client.vms.allocate({ tier: "standard" }));
      expect(count(h.emu, "vms.allocate")).toBe(1);
      expect(e).toMatchObject({ status, outcomeUnknown: true, retryable: true });
    }
  });

  it("a proxy's 503 (not the service's error body) and a CDN's 524 on a create are not retried and make the outcome unknown", async () => {
    for (const [status, body] of [
      [503, "upstream connect error or disconnect/reset before headers. reset reason: connection termination"],
      // A gateway that writes JSON (ESPv2, API Gateway): its shape is compute's, less error_code.
      [503, { code: 503, message: "upstream connect error or disconnect/reset before headers" }],
      // A Spring gateway's: the registry's error field, on a compute call.
      [503, { status: 503, error: "Service Unavailable" }],
      [524, "<html>A timeout occurred</html>"],
    ] as const) {
      h.emu.clearRequests();
      h.emu.injectFault({ method: "POST", path: ALLOCATE, action: { status, body } });
      const e = await serviceError(h.client.vms.allocate({ tier: "standard" }));
      expect(count(h.emu, "vms.allocate")).toBe(1);
      expect(e).toMatchObject({ status, outcomeUnknown: true, retryable: true });
    }
  });

  it("a create answered 2xx with a body that cannot be read is outcome unknown, not a refusal", async () => {
    h.emu.injectFault({ method: "POST", path: "/compute/v1/skills", action: { status: 201, body: "" } });
    const e = await serviceError(h.client.skills.create({ name: "unreadable-answer", content: "c" }));
    expect(e).toMatchObject({ outcomeUnknown: true, retryable: true });
    expect(e.message).toContain("look it up before creating again");
  });

  it("429 on a create is retried (nothing happened)", async () => {
    h.emu.injectFault({ method: "POST", path: AGENTS, action: { status: 429, retryAfterSeconds: 0 } });
    const a = await h.client.agents.create({ name: "after-429", org_id: ORG, image: "img" });
    expect(a.name).toBe("after-429");
    expect(count(h.emu, "agents.create")).toBe(2);
  });

  it("503 on allocate (pool empty) is retried and then succeeds", async () => {
    h.emu.injectFault({ method: "POST", path: ALLOCATE, times: 2, action: { status: 503, body: { code: 503, error_code: "pool_exhausted", message: "no VMs available, retry shortly" } } });
    const vm = await h.client.vms.allocate({ tier: "standard" });
    expect(vm.state).toBe("allocated");
    expect(count(h.emu, "vms.allocate", 503)).toBe(2);
    expect(count(h.emu, "vms.allocate", 201)).toBe(1);
  });

  it("an exhausted pool gives a transient error that is not outcome-unknown", async () => {
    const { emu } = h;
    emu.setOptions({ poolSize: emu.state.vms.size });
    try {
      const e = await serviceError(h.client.vms.allocate({ tier: "standard" }));
      expect(e).toMatchObject({ status: 503, retryable: true, outcomeUnknown: false, attempts: 4 });
      expect(count(emu, "vms.allocate", 503)).toBe(4);
    } finally {
      emu.setOptions({ poolSize: undefined });
    }
  });

  it("a timeout on a create is outcome unknown and not repeated; on a GET it is retried", async () => {
    const client = newClient(h.emu, { timeoutMs: 500 });
    try {
      h.emu.injectFault({ method: "POST", path: "/compute/v1/skills", action: { delayMs: 1500 } });
      const e = await serviceError(client.skills.create({ name: "slow-skill", content: "c" }));
      expect(e.outcomeUnknown).toBe(true);
      expect(e.message).toMatch(/^skills\.create: no answer within 500 ms/);
      // The emulator logs the request when its delayed answer goes out (to a closed socket).
      await waitFor(() => count(h.emu, "skills.create") > 0);
      expect(count(h.emu, "skills.create")).toBe(1);
      expect(h.emu.state.skills.has("slow-skill")).toBe(true);

      h.emu.injectFault({ method: "GET", path: "/compute/v1/skills", action: { delayMs: 1500 } });
      await client.skills.list();
      await waitFor(() => count(h.emu, "skills.list") >= 2);
    } finally {
      await client.close();
    }
  });
});

describe("a renewal of use only until the VM's expiry (neededBy)", () => {
  it("a hung attempt is cut short, so that another is made before the VM runs out", async () => {
    const seen: (number | "error")[] = [];
    // The client's own timeout (30 s) is longer than the VM has left: one hung attempt would
    // outlast it.
    const client = newClient(h.emu, { timeoutMs: 30_000, hooks: { onRequest: (ev) => ev.operation === "vms.renew" && seen.push(ev.status) } });
    try {
      const vm = await client.vms.allocate({ tier: "standard", ttl_seconds: 60 });
      h.emu.injectFault({ method: "POST", path: `/compute/v1/vms/${vm.vm_id}/renew`, action: { delayMs: 8_000 } });
      const started = Date.now();
      const renewed = await client.vms.renew(vm.vm_id, 60, { neededBy: started + 6_000 });
      expect(renewed.id).toBe(vm.vm_id);
      // The first attempt gave up at half the time left (3 s), the second was answered.
      expect(seen).toEqual(["error", 200]);
      expect(Date.now() - started).toBeLessThan(6_000);
    } finally {
      await client.close();
    }
  });
});

describe("network failures", () => {
  it("connection refused is retried for any call, even a create, and is not outcome-unknown", async () => {
    // A port that was just open and is now closed: nothing listens there.
    const { startEmulator } = await import("../../../src/emulator/index.js");
    const gone = await startEmulator({});
    const baseURL = gone.baseURL;
    await gone.close();
    const seen: (number | "error")[] = [];
    const retries: string[] = [];
    const hooks: ServiceClientHooks = {
      onRequest: (ev) => {
        if (ev.operation === "agents.create") seen.push(ev.status);
      },
      onRetry: (ev) => retries.push(ev.reason),
    };
    const client = newClient(h.emu, { baseURL, hooks });
    try {
      const e = await serviceError(client.agents.create({ name: "nowhere", org_id: ORG, image: "img" }));
      expect(seen).toEqual(["error", "error", "error", "error"]);
      expect(retries).toEqual(["ECONNREFUSED", "ECONNREFUSED", "ECONNREFUSED"]);
      expect(e).toMatchObject({ operation: "agents.create", retryable: true, outcomeUnknown: false, status: undefined });
      expect(e.message).toMatch(/^agents\.create: connection refused \(ECONNREFUSED\); gave up after 4 attempts$/);
    } finally {
      await client.close();
    }
  });
});

describe("hooks", () => {
  it("reports every attempt with operation, method, status, duration and attempt number", async () => {
    const events: { operation: string; method: string; status: number | "error"; attempt: number; durationSeconds: number }[] = [];
    const client = newClient(h.emu, { hooks: { onRequest: (e) => events.push(e) } });
    try {
      h.emu.injectFault({ method: "GET", path: "/compute/v1/skills", action: { status: 500 } });
      await client.skills.list();
      const skillEvents = events.filter((e) => e.operation === "skills.list");
      expect(skillEvents.map((e) => [e.method, e.status, e.attempt])).toEqual([
        ["GET", 500, 1],
        ["GET", 200, 2],
      ]);
      expect(skillEvents.every((e) => e.durationSeconds >= 0)).toBe(true);
      expect(events.filter((e) => e.operation === "token")).toHaveLength(1);
    } finally {
      await client.close();
    }
  });

  it("a throwing hook does not break the call", async () => {
    const client = newClient(h.emu, {
      hooks: {
        onRequest: () => {
          throw new Error("metrics exploded");
        },
      },
    });
    try {
      await expect(client.skills.list()).resolves.toEqual(expect.any(Array));
    } finally {
      await client.close();
    }
  });
});

describe("the write gate (sharded mode: a replica whose membership lapsed)", () => {
  class Lapsed extends Error {}

  it("refuses a call that changes something unsent, lets reads and the token through, and asks again before each retry", async () => {
    let open = true;
    const client = newClient(h.emu, {
      writeGate: () => {
        if (!open) throw new Lapsed("membership lapsed");
      },
    });
    try {
      const vm = await client.vms.allocate({ tier: "standard" });
      open = false;
      h.emu.clearRequests();
      // Reads (and the token request behind them) are not writes.
      await expect(client.vms.get(vm.vm_id)).resolves.toMatchObject({ id: vm.vm_id });
      for (const write of [() => client.vms.allocate({ tier: "standard" }), () => client.vms.renew(vm.vm_id, 600), () => client.vms.delete(vm.vm_id)]) {
        expect(await rejection(write())).toBeInstanceOf(Lapsed);
      }
      expect(h.emu.requests.map((r) => r.operation)).toEqual(["vms.get"]);

      // Open when the call began, closed by the time its retry is due: the retry is not sent.
      open = true;
      h.emu.clearRequests();
      h.emu.injectFault({ path: `/compute/v1/vms/${vm.vm_id}/renew`, action: { status: 503, retryAfterSeconds: 1 } });
      const renewal = client.vms.renew(vm.vm_id, 600);
      await waitFor(() => count(h.emu, "vms.renew") === 1);
      open = false;
      expect(await rejection(renewal)).toBeInstanceOf(Lapsed);
      expect(count(h.emu, "vms.renew")).toBe(1);
    } finally {
      await client.close();
    }
  });
});
