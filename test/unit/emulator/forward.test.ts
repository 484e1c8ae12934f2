import { describe, expect, it } from "vitest";
import type { Allocation } from "../../../src/emulator/wire.js";
import { client, emulator, raw } from "./helpers.js";

describe("emulator forwarding to a VM's runtime (/vms/{id}/r/{path})", () => {
  it("hands the request to the VM's agentd, whatever the depth of the path, for GET, POST and DELETE", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = (await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard" })).body;
    const base = `/compute/v1/vms/${vm.vm_id}/r`;
    const run = await c.post(`${base}/v1/commands/run`, { command: "echo hi" });
    expect(run.status).toBe(200);
    expect(run.headers.get("content-type")).toMatch(/^text\/event-stream/);
    expect(run.text).toContain("event: stdout\ndata: hi\n");
    const metrics = await c.get(`${base}/v1/metrics`);
    expect(metrics.status).toBe(200);
    // agentd's own errors come back as agentd answers them: models.ErrorResponse {code, message}.
    const cases: [string, string, number, string][] = [
      ["GET", "v1/commands/abc/status", 404, "command abc not found"],
      ["DELETE", "v1/commands/abc", 404, "command abc not found"],
      ["GET", "health", 404, "agentd has no route for GET health"],
    ];
    for (const [method, path, status, message] of cases) {
      const res = await c.call(method, `${base}/${path}`);
      expect(res.status, `${method} ${path}`).toBe(status);
      expect(res.body).toEqual({ code: status, message });
    }
    // The body is passed raw: a multipart upload is not parsed as JSON (here: malformed multipart).
    const upload = await c.call("POST", `${base}/v1/files/upload`, "--boundary\r\nnot json", { "content-type": "multipart/form-data; boundary=boundary" });
    expect(upload.status).toBe(400);
    expect((upload.body as { message: string }).message).toMatch(/multipart|path is required/);
    expect(emu.requests.filter((r) => r.operation === "vms.forward")).toHaveLength(cases.length + 3);
  });

  it("takes bodies larger than the service's 1 MiB (file uploads), up to 64 MiB", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = (await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard" })).body;
    const form = new FormData();
    form.append("path", "/workspace/big.bin");
    form.append("file", new Blob([new Uint8Array(3 << 20)]), "big.bin");
    const res = await fetch(`${emu.baseURL}/compute/v1/vms/${vm.vm_id}/r/v1/files/upload`, { method: "POST", headers: { authorization: `Bearer ${c.token}` }, body: form });
    expect(res.status).toBe(201);
    expect(await res.json()).toEqual({ path: "/workspace/big.bin", size: String(3 << 20) });
  });

  it("answers 404 in the compute dialect for an unknown or released VM", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const unknown = await c.get("/compute/v1/vms/nope/r/v1/metrics");
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({ code: 404, error_code: "not_found", message: "vm nope not found" });
    const vm = (await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard" })).body;
    await c.post(`/compute/v1/vms/${vm.vm_id}/release`, {});
    const released = await c.post(`/compute/v1/vms/${vm.vm_id}/r/v1/commands/run`, { command: "ls" });
    expect(released.status).toBe(404);
    expect(released.body).toEqual({ code: 404, error_code: "not_found", message: `vm ${vm.vm_id} not found` });
  });

  it("needs a bearer token, has no path-less form, and answers 405 for other methods", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = (await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard" })).body;
    const anon = await raw(`${emu.baseURL}/compute/v1/vms/${vm.vm_id}/r/v1/metrics`);
    expect(anon.status).toBe(401);
    expect(anon.body).toEqual({ code: 401, error_code: "unauthorized", message: "missing bearer token" });
    const empty = await c.get(`/compute/v1/vms/${vm.vm_id}/r/`);
    expect(empty.status).toBe(404);
    expect(emu.requests.at(-1)?.operation).toBe("route.not_found");
    const put = await c.put(`/compute/v1/vms/${vm.vm_id}/r/v1/files`, {});
    expect(put.status).toBe(405);
    expect(put.headers.get("allow")).toBe("GET, POST, DELETE");
  });
});
