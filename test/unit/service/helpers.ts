// Shared set-up for the service client's contract tests: a real in-process emulator over
// real HTTP, and a client tuned for tests (short backoffs so retries do not slow the suite).

import { startEmulator } from "../../../src/emulator/index.js";
import type { Emulator, EmulatorOptions } from "../../../src/emulator/index.js";
import { AgentdClient } from "../../../src/service/agentd.js";
import { ServiceClient } from "../../../src/service/index.js";
import type { ServiceClientOptions } from "../../../src/service/index.js";

export const API_KEY = "test-api-key-3f9c2a71d0e84b56";

export interface Harness {
  emu: Emulator;
  client: ServiceClient;
  close(): Promise<void>;
}

export async function start(
  emuOpts: EmulatorOptions = {},
  clientOpts: Partial<ServiceClientOptions> = {},
): Promise<Harness> {
  // strictBodies: a field of the client's the service would drop unread is an error here.
  const emu = await startEmulator({ apiKey: API_KEY, strictBodies: true, ...emuOpts });
  const client = newClient(emu, clientOpts);
  return {
    emu,
    client,
    close: async () => {
      await client.close();
      await emu.close();
    },
  };
}

export function newClient(emu: Emulator, clientOpts: Partial<ServiceClientOptions> = {}): ServiceClient {
  return new ServiceClient({
    baseURL: emu.baseURL,
    authURL: emu.authURL,
    credentials: { apiKey: API_KEY },
    retry: { baseDelayMs: 5, maxDelayMs: 3_000 },
    ...clientOpts,
  });
}

/** A client of VM `vmId`'s agentd, through the harness's emulator, with its client's token. */
export function agentdOf(h: Harness, vmId: string, opts: Partial<ConstructorParameters<typeof AgentdClient>[0]> = {}): AgentdClient {
  return new AgentdClient({ baseURL: h.emu.baseURL, vmId, accessToken: (refused) => h.client.accessToken(refused), ...opts });
}

/** How many requests of this operation the emulator logged (optionally with this status). */
export function count(emu: Emulator, operation: string, status?: number | "dropped"): number {
  let n = 0;
  for (const r of emu.requests) if (r.operation === operation && (status === undefined || r.status === status)) n++;
  return n;
}

/** Awaits a promise expected to reject and returns the rejection. */
export async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  throw new Error("expected the call to fail, but it succeeded");
}

/** A fake clock for token expiry (and the emulator's own clock, so both agree). */
export class FakeClock {
  constructor(public ms = Date.UTC(2030, 0, 1)) {}
  readonly now = (): number => this.ms;
  advance(ms: number): void {
    this.ms += ms;
  }
}

export const ORG = "org-emulator";

/** Polls until `cond` holds (for effects the emulator logs only when it finishes a request). */
export async function waitFor(cond: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error("waitFor: condition not met in time");
    await new Promise((r) => setTimeout(r, 10));
  }
}
