import { describe, expect, it } from "vitest";
import type { Allocation } from "../../../src/emulator/wire.js";
import { client, emulator, raw } from "./helpers.js";

describe("emulator forwarding to a VM's runtime (/vms/{id}/r/{path})", () => {
  it("answers 502 bad_gateway for a live VM, whatever the depth of the path, for GET, POST and DELETE", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = (await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard" })).body;
    const base = `/compute/v1/vms/${vm.vm_id}/r`;
    const cases: [string, string][] = [
      ["POST", "v1/commands/run"],
      ["GET", "v1/commands/abc/status"],
      ["DELETE", "v1/commands/abc"],
      ["GET", "v1/metrics"],
      ["GET", "health"],
    ];
    for (const [method, path] of cases) {
      const res = await c.call(method, `${base}/${path}`, method === "POST" ? { command: "echo hi" } : undefined);
      expect(res.status, `${method} ${path}`).toBe(502);
      expect(res.body).toEqual({
        code: 502,
        error_code: "bad_gateway",
        message: `cannot forward ${method} ${path} to vm ${vm.vm_id}: the VM runtime (agentd) is not emulated yet`,
      });
    }
    // The body is never parsed: a multipart upload is not a 400.
    const upload = await c.call("POST", `${base}/v1/files/upload`, "--boundary\r\nnot json", { "content-type": "multipart/form-data; boundary=boundary" });
    expect(upload.status).toBe(502);
    expect(emu.requests.filter((r) => r.operation === "vms.forward")).toHaveLength(cases.length + 1);
  });

  it("answers 404 in the compute dialect for an unknown or released VM", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const unknown = await c.get("/compute/v1/vms/nope/r/v1/metrics");
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({ code: 404, error_code: "not_found", message: "vm nope not found" });
    const vm = (await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard" })).body;
    await c.post(`/compute/v1/vms/${vm.vm_id}/release`);
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
