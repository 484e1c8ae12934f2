import { describe, expect, it } from "vitest";
import { client, emulator, type Client } from "./helpers.js";
import { agentd, allocate, endOf, parseSSE, streamText } from "./runtime-helpers.js";

async function context(c: Client, vmId: string, language = "python"): Promise<{ id: string }> {
  const res = await agentd(c, vmId).call<{ id: string }>("POST", "v1/code/contexts", { language, session_id: "s1" });
  if (res.status !== 201) throw new Error(`create context: ${res.status} ${res.text}`);
  return res.body;
}

describe("emulator agentd: code contexts (r/v1/code)", () => {
  it("creates, lists, gets and deletes contexts (models.CodeContext)", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const created = await a.call("POST", "v1/code/contexts", { language: "python", session_id: "s1" });
    expect(created.status).toBe(201);
    const ctx = created.body as { id: string };
    expect(ctx).toEqual({ id: expect.any(String), kernel_id: expect.any(String), language: "python", session_id: "s1", created_at: expect.any(String) });
    expect((await a.call("GET", "v1/code/contexts")).body).toEqual([ctx]);
    expect((await a.call("GET", `v1/code/contexts/${ctx.id}`)).body).toEqual(ctx);
    expect((await a.call("DELETE", `v1/code/contexts/${ctx.id}`)).status).toBe(204);
    expect((await a.call("GET", `v1/code/contexts/${ctx.id}`)).status).toBe(404);
    expect((await a.call("DELETE", `v1/code/contexts/${ctx.id}`)).status).toBe(404);
    expect((await a.call("POST", "v1/code/contexts", { session_id: "s1" })).body).toEqual({ code: 400, message: "language is required" });
    expect((await a.call("POST", "v1/code/contexts", { language: "python" })).body).toEqual({ code: 400, message: "session_id is required" });
    expect((await a.call("POST", "v1/code/contexts", { language: "cobol", session_id: "s1" })).body).toEqual({
      code: 400,
      message: 'language "cobol" is not supported (supported: python, javascript)',
    });
  });

  it("keeps state between executions in one context, as a kernel does, and not across contexts", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const ctx = await context(c, vm.vm_id);
    const first = await a.execute(ctx.id, "x = 41");
    expect(first.map((e) => e.event)).toEqual(["start", "end"]);
    expect(JSON.parse(first[0]!.data)).toEqual({ context_id: ctx.id });
    const second = await a.execute(ctx.id, "print(x + 1)");
    expect(streamText(second, "stdout")).toBe("42\n");
    expect(endOf(second)).toEqual({ status: "ok" });
    // A last expression's value is shown, as the interactive interpreter shows it.
    expect(streamText(await a.execute(ctx.id, "x * 2"), "stdout")).toBe("82\n");
    const other = await context(c, vm.vm_id);
    const err = await a.execute(other.id, "print(x)");
    expect(streamText(err, "stderr")).toContain("NameError: name 'x' is not defined");
    expect(err.find((e) => e.event === "error")?.data).toBe(JSON.stringify({ name: "NameError", value: "name 'x' is not defined" }));
    expect(endOf(err)).toEqual({ status: "error", error: "NameError: name 'x' is not defined" });
    // The context runs in its session's directory, in the workspace.
    expect(streamText(await a.execute(ctx.id, "import os; print(os.getcwd())"), "stdout")).toBe(`${emu.runtimes.get(vm.vm_id)!.workspace}/sessions/s1\n`);
    const missing = await a.call("POST", "v1/code/execute", { code: "1", context_id: "nope" });
    expect(missing.status).toBe(404);
    expect(missing.body).toEqual({ code: 404, message: "code context nope not found" });
    expect((await a.call("POST", "v1/code/execute", { context_id: ctx.id })).body).toEqual({ code: 400, message: "code is required" });
  });

  it("runs blocks one after another, reads no command channel from stdin, survives sys.exit and a dead interpreter", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const ctx = await context(c, vm.vm_id);
    const [one, two] = await Promise.all([
      c.post(`${a.base}/v1/code/execute`, { code: "import time; time.sleep(0.2); y = 1; print('one')", context_id: ctx.id }),
      c.post(`${a.base}/v1/code/execute`, { code: "print('two', y)", context_id: ctx.id }),
    ]);
    expect(streamText(parseSSE(one.text), "stdout")).toBe("one\n");
    expect(streamText(parseSSE(two.text), "stdout")).toBe("two 1\n");
    expect(streamText(await a.execute(ctx.id, "import sys; print(repr(sys.stdin.read()))"), "stdout")).toBe("''\n");
    expect(endOf(await a.execute(ctx.id, "raise SystemExit(3)"))).toEqual({ status: "error", error: "SystemExit: 3" });
    expect(streamText(await a.execute(ctx.id, "print(y)"), "stdout"), "sys.exit does not end the context").toBe("1\n");
    const died = await a.execute(ctx.id, "import os; os._exit(1)");
    expect(died.find((e) => e.event === "error")?.data).toMatch(/KernelDied/);
    const fresh = await a.execute(ctx.id, "print('again')");
    expect(streamText(fresh, "stdout"), "a fresh interpreter takes the next block").toBe("again\n");
  });

  it("DELETE v1/code/execute/{context id} interrupts the running block; the context lives on", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const ctx = await context(c, vm.vm_id);
    await a.execute(ctx.id, "z = 'kept'");
    const res = await fetch(`${emu.baseURL}${a.base}/v1/code/execute`, {
      method: "POST",
      headers: { authorization: `Bearer ${c.token}`, "content-type": "application/json" },
      // One write (print writes its text and its newline apart: an interrupt could fall between).
      body: JSON.stringify({ code: "import sys, time\nsys.stdout.write('sleeping\\n')\ntime.sleep(30)", context_id: ctx.id }),
    });
    // Read the stream as it comes: interrupt once the block is surely running.
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = "";
    while (!text.includes("sleeping")) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
    }
    expect((await a.call("DELETE", `v1/code/execute/${ctx.id}`)).status).toBe(204);
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
    }
    const events = parseSSE(text);
    expect(streamText(events, "stdout")).toBe("sleeping\n");
    expect(endOf(events)).toMatchObject({ status: "error", error: expect.stringMatching(/^KeyboardInterrupt/) });
    expect(streamText(await a.execute(ctx.id, "print(z)"), "stdout")).toBe("kept\n");
    expect((await a.call("DELETE", "v1/code/execute/nope")).status).toBe(404);
  });

  it("ends a failed block's stream with status error and an error message (the keys the official SDK reads)", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const ctx = await context(c, vm.vm_id);
    expect(endOf(await a.execute(ctx.id, "1 / 0"))).toEqual({ status: "error", error: "ZeroDivisionError: division by zero" });
    expect(endOf(await a.execute(ctx.id, "print(1)"))).toEqual({ status: "ok" });
    const viaExecute = await c.post(`/compute/v1/vms/${vm.vm_id}/execute`, { code: "1 / 0" });
    expect(endOf(parseSSE(viaExecute.text))).toEqual({ status: "error", error: "ZeroDivisionError: division by zero" });
  });

  it("refuses empty code with 400 naming the field, as an empty command (models.ExecuteCodeRequest requires code)", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const ctx = await context(c, vm.vm_id);
    // models.ExecuteCodeRequest requires code: an empty one is refused as an empty command is.
    for (const code of ["", "  \n"]) {
      const empty = await a.call("POST", "v1/code/execute", { code, context_id: ctx.id });
      expect(empty.status).toBe(400);
      expect(empty.body).toEqual({ code: 400, message: "code must not be empty" });
      const emptyExecute = await c.post(`/compute/v1/vms/${vm.vm_id}/execute`, { code });
      expect(emptyExecute.status).toBe(400);
      expect(emptyExecute.body).toEqual({ code: 400, error_code: "bad_request", message: "code must not be empty" });
    }
    expect((await a.call("POST", "v1/commands/run", { command: "" })).body).toEqual({ code: 400, message: "command must not be empty" });
    expect((await a.call("POST", "v1/code/execute", { code: 7, context_id: ctx.id })).body).toEqual({ code: 400, message: "code must be a string" });
    expect(emu.runtimes.executions).toBe(0);
  });

  it("reads a Python block as a Jupyter (IPython) kernel reads the commonest notebook syntax: !shell, %pip/%cd/%pwd, top-level await, display()", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const ctx = await context(c, vm.vm_id);
    const shell = await a.execute(ctx.id, "print('before')\n!echo from the shell\nprint('after')");
    expect(streamText(shell, "stdout")).toBe("before\nfrom the shell\nafter\n");
    expect(endOf(shell)).toEqual({ status: "ok" });
    expect(streamText(await a.execute(ctx.id, "%cd ..\n%pwd"), "stdout")).toBe(`${emu.runtimes.get(vm.vm_id)!.workspace}/sessions\n`.repeat(2));
    const awaited = await a.execute(ctx.id, "import asyncio\nasync def twice(x):\n    await asyncio.sleep(0)\n    return 2 * x\nv = await twice(21)\nawait twice(v)");
    expect(streamText(awaited, "stdout")).toBe("84\n");
    expect(streamText(await a.execute(ctx.id, "display({'v': v}, 'x')"), "stdout")).toBe("{'v': 42}\n'x'\n");
    // Plain Python is not read as notebook syntax: a line starting with != or %, or ! in a string.
    const plain = await a.execute(ctx.id, 'a, b = 1, 2\nif (\n    a\n    != b\n):\n    print("differ")\ntext = """\n%s items\n![alt](img.png)\n"""\nprint(text.strip().splitlines()[1])');
    expect(streamText(plain, "stdout")).toBe("differ\n![alt](img.png)\n");
    expect(endOf(plain)).toEqual({ status: "ok" });
    const unknown = await a.execute(ctx.id, "%timeit 1");
    expect(endOf(unknown)).toEqual({ status: "error", error: expect.stringContaining("Line magic function %timeit not found") });
  });

  it("runs javascript too, with state carried between blocks", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const ctx = await context(c, vm.vm_id, "javascript");
    await a.execute(ctx.id, "var n = 20; const m = 1;");
    expect(streamText(await a.execute(ctx.id, "console.log(n * 2 + m + 1)"), "stdout")).toBe("42\n");
    expect(streamText(await a.execute(ctx.id, "Promise.resolve(n + 1)"), "stdout")).toBe("21\n");
    const err = await a.execute(ctx.id, "throw new TypeError('bad')");
    expect(err.find((e) => e.event === "error")?.data).toBe(JSON.stringify({ name: "TypeError", value: "bad" }));
  });

  it("counts code blocks handed to an interpreter as executions", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const ctx = await context(c, vm.vm_id);
    await agentd(c, vm.vm_id).execute(ctx.id, "1");
    await agentd(c, vm.vm_id).execute(ctx.id, "2");
    expect(emu.runtimes.get(vm.vm_id)!.executions).toBe(2);
    expect(emu.runtimes.executions).toBe(2);
  });
});
