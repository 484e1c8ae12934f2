// The allocation's ws_url, driven by a client written from SERVICE.md's description of the
// official SDK's protocol (the `ws` package's client).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import WebSocket from "ws";
import type { Emulator } from "../../../src/emulator/index.js";
import { client, emulator } from "./helpers.js";
import { allocate } from "./runtime-helpers.js";

interface Msg {
  type: string;
  data: string;
  exit_code?: number;
}

/** A connected client: the first message, and a way to run one request to its end. */
class SdkClient {
  private readonly queue: Msg[] = [];
  private waiter: (() => void) | undefined;
  first!: Msg;

  private constructor(readonly ws: WebSocket) {
    ws.on("message", (d) => {
      this.queue.push(JSON.parse(d.toString()) as Msg);
      this.waiter?.();
    });
  }

  static async connect(url: string, token: string): Promise<SdkClient> {
    const ws = new WebSocket(url, { headers: { Authorization: `Bearer ${token}` } });
    const c = new SdkClient(ws);
    await new Promise<void>((resolve, reject) => {
      ws.once("open", () => resolve());
      ws.once("error", reject);
    });
    c.first = await c.next();
    return c;
  }

  async next(): Promise<Msg> {
    while (this.queue.length === 0) await new Promise<void>((r) => (this.waiter = r));
    return this.queue.shift()!;
  }

  /** Sends a message and collects the answer up to done / execution_complete / error. */
  async request(msg: Record<string, unknown>): Promise<{ messages: Msg[]; output: string; errors: string; status: "ok" | "error"; last: Msg }> {
    this.ws.send(JSON.stringify(msg));
    const messages: Msg[] = [];
    for (;;) {
      const m = await this.next();
      messages.push(m);
      if (m.type === "done" || m.type === "execution_complete" || m.type === "error") {
        const lines = (t: string[]): string => messages.filter((x) => t.includes(x.type)).map((x) => x.data).join("\n");
        return { messages, output: lines(["stdout", "output"]), errors: lines(["stderr"]), status: m.type === "error" ? "error" : "ok", last: m };
      }
    }
  }

  close(): void {
    this.ws.close();
  }
}

async function vmWithToken(emu: Emulator): Promise<{ wsURL: string; token: string; vmId: string }> {
  const c = await client(emu);
  const vm = await allocate(c, { env: { GREETING: "hello" } });
  return { wsURL: vm.ws_url, token: c.token, vmId: vm.vm_id };
}

describe("emulator ws_url (the SDK's WebSocket protocol)", () => {
  it("is a ws:// URL on the emulator's own server, in the allocation and the endpoint map", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    expect(vm.ws_url).toBe(`${emu.baseURL.replace(/^http/, "ws")}/compute/v1/vms/${vm.vm_id}/ws`);
    expect((await c.get(`/compute/v1/vms/${vm.vm_id}/endpoint`)).body).toMatchObject({ ws_url: vm.ws_url });
  });

  it("runs code: the first message names a context; state carries between executes", async () => {
    const emu = await emulator();
    const { wsURL, token, vmId } = await vmWithToken(emu);
    const sdk = await SdkClient.connect(wsURL, token);
    try {
      expect(sdk.first.type).toBe("connected");
      const contextId = sdk.first.data;
      expect(emu.runtimes.get(vmId)!.context(contextId)?.language).toBe("python");
      const set = await sdk.request({ type: "execute", code: "x = 41", language: "python", context_id: contextId });
      expect(set.messages[0]).toEqual({ type: "started", data: contextId });
      expect(set.status).toBe("ok");
      const get = await sdk.request({ type: "execute", code: "print(x + 1)", language: "python", context_id: contextId });
      expect(get.output).toBe("42");
      expect(get.last).toEqual({ type: "done", data: "" });
      const many = await sdk.request({ type: "execute", code: "for i in range(3): print(i)" });
      expect(many.messages.filter((m) => m.type === "stdout").map((m) => m.data)).toEqual(["0", "1", "2"]);
      const bad = await sdk.request({ type: "execute", code: "1/0", context_id: contextId });
      expect(bad.status).toBe("error");
      expect(bad.last).toEqual({ type: "error", data: "ZeroDivisionError: division by zero" });
      expect(bad.errors).toContain("ZeroDivisionError");
    } finally {
      sdk.close();
    }
    // Another connection gets the same (VM-wide) context: state survives the connection.
    const again = await SdkClient.connect(wsURL, token);
    try {
      expect((await again.request({ type: "execute", code: "print(x)", context_id: again.first.data })).output).toBe("41");
    } finally {
      again.close();
    }
  });

  it("runs commands: stdout, stderr, the allocation's env, a failing exit code, a timeout", async () => {
    const emu = await emulator();
    const { wsURL, token, vmId } = await vmWithToken(emu);
    const sdk = await SdkClient.connect(wsURL, token);
    try {
      const ok = await sdk.request({ type: "command", command: 'echo "$GREETING"; echo warn >&2' });
      const started = ok.messages[0]!;
      expect(started.type).toBe("started");
      expect(emu.runtimes.get(vmId)!.command(started.data)?.status()).toMatchObject({ running: false, exit_code: 0 });
      expect(ok.output).toBe("hello");
      expect(ok.errors).toBe("warn");
      expect(ok.last).toEqual({ type: "done", data: "", exit_code: 0 });
      const failed = await sdk.request({ type: "command", command: "echo partial; exit 5" });
      expect(failed.output).toBe("partial");
      expect(failed.last).toEqual({ type: "error", data: "command exited with code 5", exit_code: 5 });
      const slow = await sdk.request({ type: "command", command: "sleep 10", timeout_ms: 200 });
      expect(slow.last).toEqual({ type: "error", data: "command timed out after 200 ms", exit_code: 124 });
      const junk = await sdk.request({ type: "dance" });
      expect(junk.last).toEqual({ type: "error", data: 'unknown message type "dance" (expected "execute" or "command")' });
      const noCode = await sdk.request({ type: "command" });
      expect(noCode.last).toEqual({ type: "error", data: "command is required" });
      const emptyCode = await sdk.request({ type: "execute", code: "" });
      expect(emptyCode.last).toEqual({ type: "error", data: "code must not be empty" });
      expect(emu.runtimes.get(vmId)!.executions).toBe(3);
    } finally {
      sdk.close();
    }
  });

  it("refuses a connection without a valid token with 401, an unknown VM with 404, before upgrading", async () => {
    const emu = await emulator();
    const { wsURL, token } = await vmWithToken(emu);
    const statusOf = (url: string, headers: Record<string, string>): Promise<number> =>
      new Promise((resolve, reject) => {
        const ws = new WebSocket(url, { headers });
        ws.once("unexpected-response", (_req, res) => {
          resolve(res.statusCode ?? 0);
          ws.terminate();
        });
        ws.once("open", () => {
          ws.close();
          reject(new Error("upgraded"));
        });
        ws.once("error", () => {});
      });
    expect(await statusOf(wsURL, { "User-Agent": "agent-operator/0.1.0 replica-1" })).toBe(401);
    expect(await statusOf(wsURL, { Authorization: "Bearer not-a-token" })).toBe(401);
    expect(await statusOf(wsURL.replace(/vms\/[^/]+/, "vms/nope"), { Authorization: `Bearer ${token}` })).toBe(404);
    expect(emu.requests.filter((r) => r.operation === "vms.ws").map((r) => r.status)).toEqual([401, 401, 404]);
    // Told apart by User-Agent as any request is (which replica, which client made it).
    expect(emu.requests.find((r) => r.operation === "vms.ws")?.userAgent).toBe("agent-operator/0.1.0 replica-1");
  });

  it("is rate limited and fault-injected like any request, and logged as vms.ws (101)", async () => {
    const emu = await emulator();
    const { wsURL, token, vmId } = await vmWithToken(emu);
    emu.injectFault({ path: `/compute/v1/vms/${vmId}/ws`, action: { status: 503 } });
    const refused = await new Promise<number>((resolve) => {
      const ws = new WebSocket(wsURL, { headers: { Authorization: `Bearer ${token}` } });
      ws.once("unexpected-response", (_req, res) => resolve(res.statusCode ?? 0));
      ws.once("error", () => {});
    });
    expect(refused).toBe(503);
    const sdk = await SdkClient.connect(wsURL, token);
    sdk.close();
    expect(emu.requests.filter((r) => r.operation === "vms.ws").map((r) => r.status)).toEqual([503, 101]);
  });

  it("closes the connection when the VM is released", async () => {
    const emu = await emulator();
    const c = await client(emu);
    const vm = await allocate(c);
    const sdk = await SdkClient.connect(vm.ws_url, c.token);
    const closed = new Promise<number>((resolve) => sdk.ws.once("close", (code) => resolve(code)));
    await c.post(`/compute/v1/vms/${vm.vm_id}/release`, {});
    expect(await closed).toBe(1001);
  });

  it("a VM restored from a state file gets a fresh runtime, and its ws_url follows the new port", async () => {
    const dir = mkdtempSync(join(tmpdir(), "emu-ws-state-"));
    let second: Emulator | undefined;
    try {
      const stateFile = join(dir, "state.json");
      const first = await emulator({ stateFile });
      const c = await client(first);
      const vm = await allocate(c);
      await first.close();
      second = await emulator({ stateFile });
      expect(second.runtimes.get(vm.vm_id)?.workspace).toEqual(expect.any(String));
      const ep = await (await client(second)).get<{ ws_url: string }>(`/compute/v1/vms/${vm.vm_id}/endpoint`);
      expect(ep.body.ws_url).toBe(`${second.baseURL.replace(/^http/, "ws")}/compute/v1/vms/${vm.vm_id}/ws`);
      const sdk = await SdkClient.connect(ep.body.ws_url, c.token); // tokens survive the restart
      try {
        expect((await sdk.request({ type: "command", command: "echo back" })).output).toBe("back");
      } finally {
        sdk.close();
      }
    } finally {
      await second?.close(); // it saves the state file on close: before the directory goes
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
