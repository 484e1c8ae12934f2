import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, truncateSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { afterAll, describe, expect, it, vi } from "vitest";
import { serveAgentd } from "../../../src/emulator/handlers/agentd.js";
import { send } from "../../../src/emulator/http.js";
import type { VMRuntime } from "../../../src/emulator/runtime/vm-runtime.js";
import { FileBody } from "../../../src/emulator/runtime/streams.js";
import { client, emulator } from "./helpers.js";
import { agentd, allocate, streamText, upload, uploadForm } from "./runtime-helpers.js";

describe("emulator agentd: files, directories, sessions, workspace (r/v1/...)", () => {
  it("uploads (multipart path + file), downloads the same bytes, tells the file's info, deletes it", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const bytes = new Uint8Array([0, 1, 2, 250, 255, 10, 13]);
    const up = await upload(emu, c, vm.vm_id, uploadForm("/workspace/data/in.bin", bytes));
    expect(up.status).toBe(201);
    expect(up.body).toEqual({ path: "/workspace/data/in.bin", size: "7" });
    // It is in the workspace, where commands see it.
    const ws = emu.runtimes.get(vm.vm_id)!.workspace;
    expect(new Uint8Array(readFileSync(join(ws, "data", "in.bin")))).toEqual(bytes);
    const { events } = await a.run({ command: "wc -c < data/in.bin" });
    expect(streamText(events, "stdout").trim()).toBe("7");

    const down = await fetch(`${emu.baseURL}${a.base}/v1/files/download?path=${encodeURIComponent("/workspace/data/in.bin")}`, { headers: { authorization: `Bearer ${c.token}` } });
    expect(down.status).toBe(200);
    expect(down.headers.get("content-type")).toBe("application/octet-stream");
    expect(new Uint8Array(await down.arrayBuffer())).toEqual(bytes);

    const info = await a.call("GET", "v1/files/info?path=data/in.bin");
    expect(info.status).toBe(200);
    expect(info.body).toEqual({
      path: "/workspace/data/in.bin",
      size: 7,
      is_dir: false,
      mode: expect.stringMatching(/^-[rwx-]{9}$/),
      mod_time: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      owner: expect.any(String),
      group: expect.any(String),
    });
    expect((await a.call("GET", "v1/files/info?path=/workspace/data")).body).toMatchObject({ path: "/workspace/data", is_dir: true, mode: expect.stringMatching(/^d/) });

    expect((await a.call("DELETE", "v1/files", ["/workspace/data/in.bin"])).status).toBe(204);
    expect((await a.call("GET", "v1/files/info?path=/workspace/data/in.bin")).status).toBe(404);
    const gone = await a.call("GET", "v1/files/download?path=/workspace/data/in.bin");
    expect(gone.status).toBe(404);
    expect(gone.body).toEqual({ code: 404, message: "/workspace/data/in.bin not found" });
  });

  it("uploading to a directory keeps the file's name", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const up = await upload(emu, c, vm.vm_id, uploadForm("/workspace/inbox/", "hello", "greeting.txt"));
    expect(up.body).toEqual({ path: "/workspace/inbox/greeting.txt", size: "5" });
  });

  it("refuses a path outside /workspace with 400 naming the field, and touches nothing", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const ws = emu.runtimes.get(vm.vm_id)!.workspace;
    const escapes = ["/etc/passwd", "../../etc/passwd", "/workspace/../etc/passwd", "/workspace2/x"];
    for (const p of escapes) {
      const q = encodeURIComponent(p);
      for (const [method, path, body, field] of [
        ["GET", `v1/files/download?path=${q}`, undefined, "path"],
        ["GET", `v1/files/info?path=${q}`, undefined, "path"],
        ["DELETE", "v1/files", [p], "paths[0]"],
        ["POST", "v1/directories", ["/workspace/ok", p], "paths[1]"],
        ["DELETE", "v1/directories", [p], "paths[0]"],
        ["POST", "v1/files/mv", [{ src: p, dst: "/workspace/x" }], "moves[0].src"],
        ["GET", `v1/files/search?pattern=*&dir=${q}`, undefined, "dir"],
      ] as const) {
        const res = await a.call(method, path, body);
        expect(res.status, `${method} ${path}`).toBe(400);
        expect(res.body).toEqual({ code: 400, message: `${field} ${JSON.stringify(p)} is outside /workspace` });
      }
      const up = await upload(emu, c, vm.vm_id, uploadForm(p, "x"));
      expect(up.status).toBe(400);
      expect(up.body).toEqual({ code: 400, message: `path ${JSON.stringify(p)} is outside /workspace` });
    }
    expect(existsSync(join(ws, "ok")), "a refused batch does nothing").toBe(false);
    // A symbolic link inside the workspace that leads out is refused too.
    symlinkSync("/etc", join(ws, "link"));
    const viaLink = await a.call("GET", "v1/files/download?path=/workspace/link/passwd");
    expect(viaLink.status).toBe(400);
    expect(viaLink.body).toEqual({ code: 400, message: 'path "/workspace/link/passwd" is outside /workspace' });
    // So is a dangling one: writing through it would create its target, outside.
    const outsideFile = join(mkdtempSync(join(tmpdir(), "agentd-outside-")), "made.txt");
    symlinkSync(outsideFile, join(ws, "dangling"));
    const throughDangling = await upload(emu, c, vm.vm_id, uploadForm("/workspace/dangling", "x"));
    expect(throughDangling.status).toBe(400);
    expect(throughDangling.body).toEqual({ code: 400, message: 'path "/workspace/dangling" is outside /workspace' });
    expect(existsSync(outsideFile)).toBe(false);
    // Also when the dangling link is reached through a link to a directory elsewhere in the
    // workspace: its relative target counts from where the link really is.
    mkdirSync(join(ws, "deep", "d1", "d2"), { recursive: true });
    symlinkSync(ws, join(ws, "deep", "d1", "d2", "up"));
    const escaped = join(ws, "..", "..", `escaped-${Date.now()}.txt`);
    symlinkSync(relative(ws, escaped), join(ws, "rel"));
    const throughBoth = await upload(emu, c, vm.vm_id, uploadForm("/workspace/deep/d1/d2/up/rel", "x"));
    expect(throughBoth.status).toBe(400);
    expect(existsSync(escaped)).toBe(false);
    // A dangling link to a place inside the workspace is written through, as a VM would.
    symlinkSync(join(ws, "later.txt"), join(ws, "to-later"));
    expect((await upload(emu, c, vm.vm_id, uploadForm("/workspace/to-later", "y"))).status).toBe(201);
    expect(readFileSync(join(ws, "later.txt"), "utf8")).toBe("y");
    // A link loop reached through a link that leads out: the loop itself cannot be resolved,
    // and its directory (outside) decides. A delete or a move acts on the loop link itself.
    const out = mkdtempSync(join(tmpdir(), "agentd-outside-"));
    symlinkSync("loop", join(out, "loop"));
    symlinkSync(out, join(ws, "out-link"));
    expect(await a.call("DELETE", "v1/files", ["/workspace/out-link/loop"])).toMatchObject({ status: 400, body: { code: 400, message: 'paths[0] "/workspace/out-link/loop" is outside /workspace' } });
    expect(await a.call("POST", "v1/files/mv", [{ src: "/workspace/later.txt", dst: "/workspace/out-link/loop" }])).toMatchObject({ status: 400 });
    expect(existsSync(join(ws, "later.txt"))).toBe(true);
    expect(readdirSync(out)).toEqual(["loop"]);
  });

  it("a path under a regular file (ENOTDIR) or through a symbolic link loop (ELOOP) is not there: reads 404, writes 400 naming the path as given, never a host path", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const ws = emu.runtimes.get(vm.vm_id)!.workspace;
    expect((await upload(emu, c, vm.vm_id, uploadForm("/workspace/plain.txt", "p"))).status).toBe(201);
    symlinkSync("loop2", join(ws, "loop1"));
    symlinkSync("loop1", join(ws, "loop2"));
    const answers: { what: string; status: number; text: string }[] = [];
    const call = async (method: string, path: string, body?: unknown): Promise<{ status: number; body: unknown }> => {
      const res = await a.call(method, path, body);
      answers.push({ what: `${method} ${path} ${JSON.stringify(body)}`, status: res.status, text: res.text });
      return { status: res.status, body: res.body };
    };
    for (const [p, code] of [
      ["/workspace/plain.txt/child", "ENOTDIR"],
      ["plain.txt/child/deeper", "ENOTDIR"],
      ["/workspace/loop1/x", "ELOOP"],
    ] as const) {
      const q = encodeURIComponent(p);
      expect(await call("GET", `v1/files/download?path=${q}`), p).toEqual({ status: 404, body: { code: 404, message: `${p} not found` } });
      expect(await call("GET", `v1/files/info?path=${q}`), p).toEqual({ status: 404, body: { code: 404, message: `${p} not found` } });
      expect(await call("GET", `v1/files/search?pattern=*&dir=${q}`), p).toMatchObject({ status: 400, body: { code: 400, message: "dir is not an existing directory" } });
      expect(await call("POST", "v1/commands/run", { command: "true", cwd: p }), p).toMatchObject({ status: 400, body: { code: 400, message: "cwd is not an existing directory" } });
      expect(await call("POST", "v1/directories", [p]), p).toMatchObject({ status: 400, body: { code: 400, message: `paths[0] cannot be created: ${code}` } });
      expect(await call("DELETE", "v1/directories", [p]), p).toMatchObject({ status: 400, body: { code: 400, message: `paths[0] cannot be removed: ${code}` } });
      expect(await call("DELETE", "v1/files", [p]), p).toMatchObject({ status: 400, body: { code: 400, message: `paths[0] ${JSON.stringify(p)} cannot be deleted: ${code}` } });
      expect(await call("POST", "v1/files/mv", [{ src: p, dst: "/workspace/y" }]), p).toMatchObject({ status: 400, body: { code: 400, message: "moves[0].src does not exist" } });
      const up = await upload(emu, c, vm.vm_id, uploadForm(p, "x"));
      answers.push({ what: `upload ${p}`, status: up.status, text: up.text });
      expect(up.body, p).toEqual({ code: 400, message: `path ${JSON.stringify(p)} cannot be written: ${code}` });
    }
    // A destination under a regular file: its parent cannot be made.
    expect(await call("POST", "v1/files/mv", [{ src: "/workspace/plain.txt", dst: "/workspace/plain.txt/moved" }])).toEqual({ status: 400, body: { code: 400, message: "moves[0] failed: ENOTDIR" } });
    // Sessions under a sessions/ that a command made a regular file.
    expect((await a.run({ command: "echo s > sessions" })).res.status).toBe(200);
    expect(await call("POST", "v1/sessions/init", { session_id: "s1" })).toEqual({ status: 400, body: { code: 400, message: 'session_id "s1": /workspace/sessions/s1 cannot be created: ENOTDIR' } });
    expect(await call("POST", "v1/code/contexts", { language: "python", session_id: "s1" })).toEqual({ status: 400, body: { code: 400, message: 'session_id "s1": its directory cannot be created: ENOTDIR' } });
    // The route's published answers are 204 and 500.
    expect(await call("DELETE", "v1/sessions/s1")).toEqual({ status: 500, body: { code: 500, message: 'session "s1": its directory cannot be removed: ENOTDIR' } });
    // A name or a path too long for the file system: 400 naming the field, not a 500.
    const tooLong = { code: 400, message: "path is too long (a name over 255 bytes or a path over 4096)" };
    expect(await call("GET", `v1/files/info?path=${"n".repeat(300)}`)).toEqual({ status: 400, body: tooLong });
    expect(await call("GET", `v1/files/download?path=${"d/".repeat(3000)}`)).toEqual({ status: 400, body: tooLong });
    expect((await upload(emu, c, vm.vm_id, uploadForm("n".repeat(300), "x"))).body).toEqual(tooLong);
    // Nothing was written, nothing leaked: agentd's dialect, and no host path in any answer.
    expect(readFileSync(join(ws, "plain.txt"), "utf8")).toBe("p");
    for (const { what, status, text } of answers) {
      // A 500 only where the route publishes no other error (a session's delete).
      if (!what.startsWith("DELETE v1/sessions/")) expect(status, what).toBeLessThan(500);
      expect(text, what).not.toContain(ws);
      expect(text, what).not.toContain(tmpdir());
      expect(text, what).not.toContain("error_code");
    }
  });

  it("creates and deletes directories, moves files, searches by glob", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    expect((await a.call("POST", "v1/directories", ["/workspace/a/b", "c"])).status).toBe(201);
    await upload(emu, c, vm.vm_id, uploadForm("/workspace/a/b/one.txt", "1"));
    await upload(emu, c, vm.vm_id, uploadForm("/workspace/c/two.md", "2"));
    expect((await a.call("POST", "v1/files/mv", [{ src: "/workspace/c/two.md", dst: "/workspace/a/two.txt" }])).status).toBe(204);
    const found = await a.call<{ path: string }[]>("GET", "v1/files/search?pattern=*.txt");
    expect(found.status).toBe(200);
    expect(found.body.map((f) => f.path).sort()).toEqual(["/workspace/a/b/one.txt", "/workspace/a/two.txt"]);
    const inB = await a.call<{ path: string }[]>("GET", "v1/files/search?dir=/workspace/a/b&pattern=*");
    expect(inB.body.map((f) => f.path)).toEqual(["/workspace/a/b/one.txt"]);
    expect((await a.call("GET", "v1/files/search")).status).toBe(400);
    expect((await a.call("POST", "v1/files/mv", [{ src: "/workspace/nope", dst: "/workspace/x" }])).body).toEqual({ code: 400, message: "moves[0].src does not exist" });
    expect((await a.call("DELETE", "v1/files", ["/workspace/a"])).status, "a directory is not a file").toBe(400);
    expect((await a.call("DELETE", "v1/directories", ["/workspace/a"])).status).toBe(204);
    expect((await a.call("GET", "v1/files/info?path=/workspace/a")).status).toBe(404);
    expect((await a.call("DELETE", "v1/directories", ["/workspace"])).status, "not the workspace itself").toBe(400);
    expect((await a.call("POST", "v1/directories", {})).status).toBe(400);
  });

  it("an empty JSON array is a no-op success: DELETE v1/files 204, POST 201 and DELETE 204 v1/directories, POST v1/files/mv 204 (no minItems is published)", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    await upload(emu, c, vm.vm_id, uploadForm("/workspace/kept.txt", "k"));
    const cases: [string, string, number][] = [
      ["DELETE", "v1/files", 204],
      ["POST", "v1/directories", 201],
      ["DELETE", "v1/directories", 204],
      ["POST", "v1/files/mv", 204],
    ];
    for (const [method, path, status] of cases) {
      const res = await a.call(method, path, []);
      expect(res.status, `${method} ${path} []`).toBe(status);
      expect(res.text).toBe("");
    }
    expect(readFileSync(join(emu.runtimes.get(vm.vm_id)!.workspace, "kept.txt"), "utf8")).toBe("k");
    // Still an array: anything else is refused, naming what is expected.
    expect((await a.call("DELETE", "v1/files", { paths: [] })).body).toEqual({ code: 400, message: "request body must be a JSON array of file paths" });
    expect((await a.call("POST", "v1/files/mv", {})).body).toEqual({ code: 400, message: "request body must be a JSON array of {src, dst}" });
  });

  it("session ids: anything safe as one path segment is taken as it is (user:42); only /, \\, ., .., NUL and empty are refused", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const ws = emu.runtimes.get(vm.vm_id)!.workspace;
    for (const id of ["user:42", "a b", "émile@home", "-x", "..x", "x.."]) {
      const init = await a.call("POST", "v1/sessions/init", { session_id: id });
      expect(init.status, id).toBe(201);
      expect(init.body).toEqual({ session_id: id, path: `/workspace/sessions/${id}` });
      expect(existsSync(join(ws, "sessions", id)), id).toBe(true);
      // A code context of that session runs in its directory.
      const ctx = await a.call<{ id: string; session_id: string }>("POST", "v1/code/contexts", { language: "python", session_id: id });
      expect(ctx.status, id).toBe(201);
      const del = await a.call("DELETE", `v1/sessions/${encodeURIComponent(id)}`);
      expect(del.status, id).toBe(204);
      expect(existsSync(join(ws, "sessions", id)), id).toBe(false);
      expect((await a.call("GET", `v1/code/contexts/${ctx.body.id}`)).status, "the session's contexts go with it").toBe(404);
    }
    const refused: [string, string][] = [
      ["a/b", 'session_id "a/b" must not contain /, \\ or a NUL character'],
      ["a\\b", 'session_id "a\\\\b" must not contain /, \\ or a NUL character'],
      ["a\u0000b", 'session_id "a\\u0000b" must not contain /, \\ or a NUL character'],
      [".", 'session_id "." must not be . or ..'],
      ["..", 'session_id ".." must not be . or ..'],
      ["x".repeat(256), `session_id "${"x".repeat(256)}" must be at most 255 bytes long`],
    ];
    for (const [id, message] of refused) {
      expect((await a.call("POST", "v1/sessions/init", { session_id: id })).body, JSON.stringify(id)).toEqual({ code: 400, message });
      expect((await a.call("POST", "v1/code/contexts", { language: "python", session_id: id })).body, JSON.stringify(id)).toEqual({ code: 400, message });
    }
    expect((await a.call("POST", "v1/sessions/init", { session_id: "" })).body).toEqual({ code: 400, message: "session_id must not be empty" });
    // (A URL's "." and ".." segments, even %2E-escaped, are resolved by the client's URL parser.)
    for (const id of ["a\\b", "a\u0000b"]) {
      const del = await a.call("DELETE", `v1/sessions/${encodeURIComponent(id)}`);
      expect(del.status, JSON.stringify(id)).toBe(400);
      expect(del.body).toMatchObject({ code: 400, message: expect.stringMatching(/^session id /) });
    }
    expect(readdirSync(join(ws, "sessions")), "every session made was removed, none refused was made").toEqual([]);
  });

  it("sessions: init makes /workspace/sessions/<id>; delete removes it", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const init = await a.call("POST", "v1/sessions/init", { session_id: "s1" });
    expect(init.status).toBe(201);
    expect(init.body).toEqual({ session_id: "s1", path: "/workspace/sessions/s1" });
    expect((await a.call("GET", "v1/files/info?path=/workspace/sessions/s1")).body).toMatchObject({ is_dir: true });
    expect((await a.call("POST", "v1/sessions/init", {})).body).toEqual({ code: 400, message: "session_id is required" });
    expect((await a.call("POST", "v1/sessions/init", { session_id: "../x" })).status).toBe(400);
    expect((await a.call("DELETE", "v1/sessions/s1")).status).toBe(204);
    expect((await a.call("GET", "v1/files/info?path=/workspace/sessions/s1")).status).toBe(404);
  });

  it("workspace reset empties the workspace but for skills, and stops what runs", async () => {
    const emu = await emulator();
    const c = await client(emu);
    await c.post("/compute/v1/skills", { name: "keep", content: "# keep" });
    const vm = await allocate(c, { skills: ["keep"] });
    const a = agentd(c, vm.vm_id);
    await upload(emu, c, vm.vm_id, uploadForm("/workspace/junk.txt", "x"));
    const { events } = await a.run({ command: "sleep 30", background: true });
    const id = JSON.parse(events[0]!.data).id as string;
    expect((await a.call("POST", "v1/workspace/reset")).status).toBe(204);
    expect((await a.call("GET", "v1/files/info?path=/workspace/junk.txt")).status).toBe(404);
    expect((await a.call("GET", "v1/files/info?path=/workspace/skills/keep/SKILL.md")).status).toBe(200);
    await emu.runtimes.get(vm.vm_id)!.command(id)!.execution.wait();
    expect((await a.call("GET", `v1/commands/${id}/status`)).body).toMatchObject({ running: false, exit_code: 137 });
  });

  it("metrics: a snapshot, and a stream of them; agents: none run", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const a = agentd(c, vm.vm_id);
    const m = await a.call<Record<string, number>>("GET", "v1/metrics");
    expect(m.status).toBe(200);
    expect(m.body).toEqual({ cpu_percent: expect.any(Number), mem_total_bytes: expect.any(Number), mem_used_bytes: expect.any(Number), tokens_total: 0 });
    const ac = new AbortController();
    const res = await fetch(`${emu.baseURL}${a.base}/v1/metrics/watch`, { headers: { authorization: `Bearer ${c.token}` }, signal: ac.signal });
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const reader = res.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    expect(first).toMatch(/^event: metrics\ndata: \{"cpu_percent":/);
    ac.abort();
    expect((await a.call("GET", "v1/agents")).body).toEqual([]);
    expect((await a.call("GET", "v1/agents/x")).status).toBe(404);
    expect((await a.call("POST", "v1/agents/execute", {})).status).toBe(501);
    expect((await a.call("GET", "v1/nothing/here")).body).toEqual({ code: 404, message: "agentd has no route for GET v1/nothing/here" });
    expect((await a.call("DELETE", "v1/metrics")).status).toBe(405);
  });
});

describe("emulator agentd: skills", () => {
  it("writes each allocated skill under /workspace/skills/<name>/ (content as SKILL.md, resources beside it) and lists it", async () => {
    const emu = await emulator();
    const c = await client(emu);
    await c.post("/compute/v1/skills", { name: "pdf", content: "# PDF skill\n", resources: { "requirements.txt": "pypdf\n", "scripts/run.py": "print('run')\n" } });
    await c.post("/compute/v1/skills", { name: "later", content: "# later" });
    const vm = await allocate(c, { skills: ["pdf"] });
    const a = agentd(c, vm.vm_id);
    const ws = emu.runtimes.get(vm.vm_id)!.workspace;
    expect(readFileSync(join(ws, "skills", "pdf", "SKILL.md"), "utf8")).toBe("# PDF skill\n");
    expect(readFileSync(join(ws, "skills", "pdf", "requirements.txt"), "utf8")).toBe("pypdf\n");
    const { events } = await a.run({ command: "python3 skills/pdf/scripts/run.py" });
    expect(streamText(events, "stdout")).toBe("run\n");

    expect((await a.call("GET", "v1/skills")).body).toEqual([{ name: "pdf", loaded: true, path: "/workspace/skills/pdf" }]);
    expect((await a.call("GET", "v1/skills/pdf")).body).toEqual({ name: "pdf", loaded: true, path: "/workspace/skills/pdf" });
    expect((await a.call("GET", "v1/skills/later")).status).toBe(404);

    const load = await a.call("POST", "v1/skills/load", { skills: ["later"] });
    expect(load.status).toBe(200);
    expect(load.body).toEqual([{ name: "later", loaded: true, path: "/workspace/skills/later" }]);
    expect(readFileSync(join(ws, "skills", "later", "SKILL.md"), "utf8")).toBe("# later");
    expect((await a.call("GET", "v1/skills")).body).toHaveLength(2);
    expect((await a.call("POST", "v1/skills/load", { skills: ["missing"] })).body).toEqual({ code: 400, message: 'skills[0]: skill "missing" does not exist' });
    expect((await a.call("POST", "v1/skills/load", {})).body).toEqual({ code: 400, message: "skills is required" });
  });
});

describe("emulator agentd: a download's body is exactly its Content-Length", () => {
  const dir = mkdtempSync(join(tmpdir(), "agentd-download-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  /**
   * Serves one FileBody of `file` sized as stat says now, after `change` altered the file (as a
   * command writing to it between the handler's stat and the stream would), and reads the answer
   * off a raw kept-alive connection for up to `waitMs`.
   */
  async function download(file: string, change: () => void, waitMs = 1000): Promise<{ contentLength: number; body: Buffer; closed: boolean }> {
    const server = createServer((_req, res) => {
      const body = new FileBody(file, statSync(file).size, "f.bin");
      change();
      send(res, 200, body);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      return await new Promise((resolve) => {
        const sock = connect((server.address() as AddressInfo).port, "127.0.0.1");
        const chunks: Buffer[] = [];
        let closed = false;
        let done = false;
        const finish = (): void => {
          if (done) return;
          done = true;
          clearTimeout(timer);
          sock.destroy();
          const all = Buffer.concat(chunks);
          const i = all.indexOf("\r\n\r\n");
          const head = all.subarray(0, i).toString();
          resolve({ contentLength: Number(/content-length: (\d+)/i.exec(head)?.[1]), body: all.subarray(i + 4), closed });
        };
        const timer = setTimeout(finish, waitMs);
        sock.on("data", (b: Buffer) => chunks.push(b));
        sock.on("error", () => {});
        sock.on("close", () => {
          closed = true;
          finish();
        });
        sock.write("GET /f HTTP/1.1\r\nhost: x\r\n\r\n"); // keep-alive: the next answer would follow
      });
    } finally {
      server.closeAllConnections();
      server.close();
    }
  }

  it("a file that grows meanwhile sends the bytes stat counted, no more (extra bytes would poison a kept-alive connection)", async () => {
    const file = join(dir, "grows.bin");
    writeFileSync(file, "a".repeat(10));
    const got = await download(file, () => appendFileSync(file, "b".repeat(200_000)), 500);
    expect(got.contentLength).toBe(10);
    expect(got.body.toString()).toBe("a".repeat(10));
    expect(got.closed, "the connection stays usable").toBe(false);
  });

  it("an empty file sends nothing, even if it grew meanwhile", async () => {
    const file = join(dir, "empty.bin");
    writeFileSync(file, "");
    const got = await download(file, () => appendFileSync(file, "zzz"), 500);
    expect(got.contentLength).toBe(0);
    expect(got.body.length).toBe(0);
    expect(got.closed).toBe(false);
  });

  it("a file that shrinks meanwhile cuts the connection at once rather than leave the client waiting for bytes that never come", async () => {
    const file = join(dir, "shrinks.bin");
    writeFileSync(file, "c".repeat(100_000));
    const started = Date.now();
    const got = await download(file, () => truncateSync(file, 10), 3000);
    expect(got.contentLength).toBe(100_000);
    expect(got.body.toString()).toBe("c".repeat(10));
    expect(got.closed).toBe(true);
    expect(Date.now() - started).toBeLessThan(2000);
  });
});

describe("emulator agentd: an unexpected error", () => {
  it("answers agentd's 500 {code, message}, without the error's message (a file system error's names the emulator's host path)", async () => {
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const hostPathLeak = "/tmp/agent-emulator-XYZ/vm-1/workspace/a";
      const fsError = Object.assign(new Error(`EACCES: permission denied, lstat '${hostPathLeak}'`), { code: "EACCES" });
      const runtime = {
        hostPath: () => {
          throw fsError;
        },
        command: () => {
          throw new TypeError(`cannot read ${hostPathLeak}`);
        },
      } as unknown as VMRuntime;
      const req = (method: string, path: string, query = ""): Parameters<typeof serveAgentd>[0] => ({
        method,
        path,
        query: new URLSearchParams(query),
        headers: {},
        raw: Buffer.alloc(0),
        runtime,
        skill: () => undefined,
      });
      expect(await serveAgentd(req("GET", "v1/files/info", "path=a"))).toEqual({ status: 500, body: { code: 500, message: "internal error: EACCES" } });
      expect(await serveAgentd(req("GET", "v1/commands/c1/status"))).toEqual({ status: 500, body: { code: 500, message: "internal error" } });
      // Said loudly where the emulator runs, in full.
      expect(logged).toHaveBeenCalledTimes(2);
      expect(String(logged.mock.calls[0]![0])).toContain("GET v1/files/info");
    } finally {
      logged.mockRestore();
    }
  });
});
