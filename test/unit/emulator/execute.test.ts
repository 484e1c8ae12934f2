import { describe, expect, it } from "vitest";
import { client, emulator } from "./helpers.js";
import { allocate, endOf, parseSSE, streamText } from "./runtime-helpers.js";

describe("emulator POST /compute/v1/vms/{id}/execute (older SDKs)", () => {
  it("runs code in the VM's default context (state carries between calls) and answers server-sent events", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const path = `/compute/v1/vms/${vm.vm_id}/execute`;
    const first = await c.post(path, { code: "x = 41", language: "python" });
    expect(first.status).toBe(200);
    expect(first.headers.get("content-type")).toMatch(/^text\/event-stream/);
    expect(endOf(parseSSE(first.text))).toEqual({ status: "ok" });
    const second = parseSSE((await c.post(path, { code: "print(x + 1)" })).text);
    expect(streamText(second, "stdout")).toBe("42\n");
    // The same context the VM lists, and that its ws_url names.
    const contextId = (JSON.parse(second[0]!.data) as { context_id: string }).context_id;
    expect((await c.get<{ id: string; session_id: string }[]>(`/compute/v1/vms/${vm.vm_id}/r/v1/code/contexts`)).body).toEqual([
      expect.objectContaining({ id: contextId, language: "python", session_id: "default" }),
    ]);
    const js = parseSSE((await c.post(path, { code: "6 * 7", language: "javascript" })).text);
    expect(streamText(js, "stdout")).toBe("42\n");
  });

  it("keeps the VM's own context apart from a client's session named \"default\": its own directory, and not deleted with it", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const path = `/compute/v1/vms/${vm.vm_id}/execute`;
    expect(endOf(parseSSE((await c.post(path, { code: "kept = 1", language: "python" })).text))).toEqual({ status: "ok" });
    const r = `/compute/v1/vms/${vm.vm_id}/r/v1`;
    const mine = await c.post<{ id: string }>(`${r}/code/contexts`, { language: "python", session_id: "default" });
    expect(mine.status).toBe(201);
    const cwd = parseSSE((await c.post(`${r}/code/execute`, { context_id: mine.body.id, code: "import os; print(os.getcwd())" })).text);
    expect(streamText(cwd, "stdout")).toBe(`${emu.runtimes.get(vm.vm_id)!.workspace}/sessions/default\n`);
    expect((await c.del(`${r}/sessions/default`)).status).toBe(204);
    expect((await c.get(`${r}/code/contexts/${mine.body.id}`)).status).toBe(404);
    // The VM's own context, and its state, live on.
    expect(streamText(parseSSE((await c.post(path, { code: "print(kept)" })).text), "stdout")).toBe("1\n");
  });

  it("runs a command", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c, { env: { WHO: "vm" } });
    const res = await c.post(`/compute/v1/vms/${vm.vm_id}/execute`, { command: 'echo "hi $WHO"; exit 2', timeout_ms: 5000 });
    expect(res.status).toBe(200);
    const events = parseSSE(res.text);
    expect(streamText(events, "stdout")).toBe("hi vm\n");
    expect(endOf(events)).toEqual({ exit_code: 2, status: "error", error: "command exited with code 2" });
  });

  it("answers 400 without exactly one of code and command, 404 for an unknown context or VM", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const path = `/compute/v1/vms/${vm.vm_id}/execute`;
    expect((await c.post(path, {})).body).toEqual({ code: 400, error_code: "bad_request", message: "exactly one of code and command is required" });
    expect((await c.post(path, { code: "1", command: "true" })).status).toBe(400);
    expect((await c.post(path, { code: "1", language: "cobol" })).status).toBe(400);
    expect((await c.post(path, { code: "1", context_id: "nope" })).status).toBe(404);
    expect((await c.post("/compute/v1/vms/nope/execute", { code: "1" })).status).toBe(404);
    expect(emu.runtimes.executions).toBe(0);
  });

  it("counts executions exactly once: execute, r/ and ws_url all add to the same counters", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    await c.post(`/compute/v1/vms/${vm.vm_id}/execute`, { code: "1" });
    await c.post(`/compute/v1/vms/${vm.vm_id}/execute`, { command: "true" });
    await c.post(`/compute/v1/vms/${vm.vm_id}/r/v1/commands/run`, { command: "true" });
    expect(emu.runtimes.get(vm.vm_id)!.executions).toBe(3);
    expect(emu.runtimes.executions).toBe(3);
    expect(emu.stats().byOperation).toMatchObject({ "vms.execute": 2, "vms.forward": 1 });
  });
});
