// The state file: loaded once at start, written after changes (debounced, so a burst of
// thousands of creates costs one write) and on close. Writes go to a temp file that is then
// renamed, so a crash mid-write never leaves a torn file behind.
import { readFile, rename, writeFile } from "node:fs/promises";
import type { PersistedState } from "./records.js";

export async function loadState(file: string): Promise<PersistedState | undefined> {
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new Error(`emulator state file ${file} is not valid JSON: ${(err as Error).message}`, { cause: err });
  }
  const p = parsed as Partial<PersistedState> | null;
  if (p === null || typeof p !== "object" || p.version !== 1) {
    throw new Error(`emulator state file ${file} has an unknown format (expected version 1)`);
  }
  return {
    version: 1,
    agents: p.agents ?? [],
    deployments: p.deployments ?? [],
    vms: p.vms ?? [],
    skills: p.skills ?? [],
    usage: p.usage ?? [],
    tokens: p.tokens ?? [],
  };
}

export class StateSaver {
  private timer: NodeJS.Timeout | undefined;
  private writing: Promise<void> = Promise.resolve();
  private dirty = false;

  constructor(
    private readonly file: string,
    private readonly snapshot: () => PersistedState,
    private readonly debounceMs = 100,
    private readonly onError: (err: unknown) => void = (err) => console.error(`emulator: saving state failed: ${String(err)}`),
  ) {}

  /** Note a change; the write happens debounceMs later. */
  changed(): void {
    this.dirty = true;
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.flush().catch(this.onError);
    }, this.debounceMs);
    // A pending save must not keep a test process alive; close() flushes explicitly.
    this.timer.unref();
  }

  /** Write now if anything changed; writes never overlap. */
  async flush(): Promise<void> {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    const run = async (): Promise<void> => {
      if (!this.dirty) return;
      this.dirty = false;
      const tmp = `${this.file}.${process.pid}.tmp`;
      // 0600: the file holds what the service keeps secret (pull-secret passwords, tokens).
      await writeFile(tmp, JSON.stringify(this.snapshot()), { mode: 0o600 });
      await rename(tmp, this.file);
    };
    this.writing = this.writing.then(run, run);
    return this.writing;
  }
}
