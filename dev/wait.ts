// Polling until something holds, for the developer tooling (tests, namespaces, `npm start`).
import { setTimeout as sleep } from "node:timers/promises";

export interface WaitOptions {
  /** Default 30 s. */
  timeoutMs?: number;
  /** Default 200 ms. */
  intervalMs?: number;
  /** What is awaited, for the timeout message. */
  description?: string;
}

/**
 * Polls `probe` until it returns a value other than undefined, null or false, and returns
 * that value. A probe that throws counts as "not yet"; its last error is in the timeout message.
 */
export async function waitFor<T>(
  probe: () => Promise<T | undefined | null | false> | T | undefined | null | false,
  opts: WaitOptions = {},
): Promise<T> {
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined && v !== null && v !== false) return v;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const why = lastError === undefined ? "" : `; last error: ${lastError instanceof Error ? lastError.message : String(lastError)}`;
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${opts.description ?? "condition"}${why}`);
    }
    await sleep(opts.intervalMs ?? 200);
  }
}
