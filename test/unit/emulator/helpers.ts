// Test helpers: start an emulator, get a token, call it over real HTTP with fetch.
import { afterEach } from "vitest";
import { startEmulator, type Emulator, type EmulatorOptions } from "../../../src/emulator/index.js";

export const API_KEY = "test-key";
export const T0 = Date.UTC(2026, 4, 15, 12, 0, 0); // mid-month, so month-boundary math is visible

/** A settable clock for the emulator's `now` option. */
export class FakeClock {
  constructor(public ms = T0) {}
  readonly now = (): number => this.ms;
  advance(seconds: number): void {
    this.ms += seconds * 1000;
  }
}

const started: Emulator[] = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map((e) => e.close()));
});

/** Started emulators are closed after each test. Strict about request fields unless told otherwise. */
export async function emulator(opts: EmulatorOptions = {}): Promise<Emulator> {
  const emu = await startEmulator({ apiKey: API_KEY, sweepIntervalMs: 60_000, strictBodies: true, ...opts });
  started.push(emu);
  return emu;
}

export interface Res<T = unknown> {
  status: number;
  headers: Headers;
  body: T;
  text: string;
}

export async function token(emu: Emulator, key = API_KEY): Promise<string> {
  const res = await fetch(`${emu.authURL}/token`, { method: "POST", headers: { "X-API-Key": key } });
  const body = (await res.json()) as { access_token: string };
  if (res.status !== 200) throw new Error(`token: ${res.status}`);
  return body.access_token;
}

export interface Client {
  call<T = unknown>(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<Res<T>>;
  get<T = unknown>(path: string, headers?: Record<string, string>): Promise<Res<T>>;
  post<T = unknown>(path: string, body?: unknown): Promise<Res<T>>;
  put<T = unknown>(path: string, body?: unknown): Promise<Res<T>>;
  del<T = unknown>(path: string): Promise<Res<T>>;
  token: string;
}

export async function raw<T = unknown>(url: string, init: RequestInit = {}): Promise<Res<T>> {
  const res = await fetch(url, init);
  const text = await res.text();
  let body: unknown = undefined;
  if (text !== "") {
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
  }
  return { status: res.status, headers: res.headers, body: body as T, text };
}

/** A client with a valid token; paths are relative to baseURL. */
export async function client(emu: Emulator): Promise<Client> {
  const tok = await token(emu);
  const call = <T>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Res<T>> =>
    raw<T>(`${emu.baseURL}${path}`, {
      method,
      headers: { authorization: `Bearer ${tok}`, ...(body !== undefined && { "content-type": "application/json" }), ...headers },
      ...(body !== undefined && { body: typeof body === "string" ? body : JSON.stringify(body) }),
    });
  return {
    call,
    get: (path, headers) => call("GET", path, undefined, headers),
    post: (path, body) => call("POST", path, body),
    put: (path, body) => call("PUT", path, body),
    del: (path) => call("DELETE", path),
    token: tok,
  };
}

export const agentBody = (name: string, extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  name,
  org_id: "org-a",
  image: "registry.example/agent:1",
  ...extra,
});
