// Helpers for the VM runtime tests: allocate, call agentd through /r/, read event streams.
import type { Emulator } from "../../../src/emulator/index.js";
import type { Allocation } from "../../../src/emulator/wire.js";
import type { Client, Res } from "./helpers.js";

export interface SSEEvent {
  event: string;
  data: string;
}

/** Parses a text/event-stream body (event and data fields; comments skipped). */
export function parseSSE(text: string): SSEEvent[] {
  const out: SSEEvent[] = [];
  for (const block of text.split(/\n\n/)) {
    let event = "message";
    const data: string[] = [];
    let any = false;
    for (const line of block.split("\n")) {
      if (line === "" || line.startsWith(":")) continue;
      const i = line.indexOf(":");
      const field = i < 0 ? line : line.slice(0, i);
      const value = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
      if (field === "event") event = value;
      if (field === "data") data.push(value);
      any = true;
    }
    if (any) out.push({ event, data: data.join("\n") });
  }
  return out;
}

/** stdout (or stderr) of an event list, joined. */
export const streamText = (events: readonly SSEEvent[], stream: "stdout" | "stderr"): string =>
  events
    .filter((e) => e.event === stream)
    .map((e) => e.data)
    .join("");

/** The `end` event's data. */
export function endOf(events: readonly SSEEvent[]): Record<string, unknown> {
  const last = events.at(-1);
  if (last?.event !== "end") throw new Error(`the stream does not end with an end event: ${JSON.stringify(events)}`);
  return JSON.parse(last.data) as Record<string, unknown>;
}

export async function allocate(c: Client, body: Record<string, unknown> = {}): Promise<Allocation> {
  const res = await c.post<Allocation>("/compute/v1/vms/allocate", { tier: "standard", ...body });
  if (res.status !== 201) throw new Error(`allocate: ${res.status} ${res.text}`);
  return res.body;
}

/** agentd of one VM, through /compute/v1/vms/{id}/r/. */
export function agentd(c: Client, vmId: string) {
  const base = `/compute/v1/vms/${vmId}/r`;
  return {
    base,
    call: <T = unknown>(method: string, path: string, body?: unknown): Promise<Res<T>> => c.call<T>(method, `${base}/${path}`, body),
    /** POST v1/commands/run, the stream read to its end. */
    async run(body: Record<string, unknown>): Promise<{ res: Res; events: SSEEvent[] }> {
      const res = await c.post(`${base}/v1/commands/run`, body);
      return { res, events: parseSSE(res.text) };
    },
    async execute(contextId: string, code: string): Promise<SSEEvent[]> {
      const res = await c.post(`${base}/v1/code/execute`, { code, context_id: contextId });
      if (res.status !== 200) throw new Error(`execute: ${res.status} ${res.text}`);
      return parseSSE(res.text);
    },
  };
}

/** The id in a stream's start event. */
export function startId(events: readonly SSEEvent[]): string {
  const start = events.find((e) => e.event === "start");
  if (!start) throw new Error(`no start event in ${JSON.stringify(events)}`);
  const d = JSON.parse(start.data) as { id?: string; context_id?: string };
  return d.id ?? d.context_id ?? "";
}

/** Polls `check` until it is true (or throws after `ms`). */
export async function eventually(check: () => boolean | Promise<boolean>, ms = 5000, what = "condition"): Promise<void> {
  const until = Date.now() + ms;
  for (;;) {
    if (await check()) return;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** True while a process with this pid exists. */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** A form with path and file, as an SDK uploads. */
export function uploadForm(path: string, content: string | Uint8Array, name = "file.bin"): FormData {
  const form = new FormData();
  form.append("path", path);
  form.append("file", new Blob([content]), name);
  return form;
}

export async function upload(emu: Emulator, c: Client, vmId: string, form: FormData): Promise<Res> {
  const res = await fetch(`${emu.baseURL}/compute/v1/vms/${vmId}/r/v1/files/upload`, { method: "POST", headers: { authorization: `Bearer ${c.token}` }, body: form });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, body: text === "" ? undefined : (JSON.parse(text) as unknown) };
}
