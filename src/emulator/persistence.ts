// The state file: loaded once at start, written after changes (debounced, so a burst of
// thousands of creates costs one write) and on close. Writes go to a temp file that is then
// renamed, so a crash mid-write never leaves a torn file behind.
import { readFile, rename, writeFile } from "node:fs/promises";
import type { StoredToken } from "./auth.js";
import { defaultPoolConfig } from "./pool.js";
import type { StoredAccessClient, StoredAgent, StoredDeployment, StoredSkill, StoredTool, StoredUsage, StoredVM } from "./records.js";
import type { PoolConfig, UsageRecord } from "./wire.js";

/**
 * 2: VMs keyed by `id` with `skills`, deployments with `registry_id`/`config_hash`/`options`,
 * tools, access clients and the pool config. A file of another version is refused, not
 * migrated: it is test and development state, and a half-understood file would mislead.
 */
export const STATE_FILE_VERSION = 2;

/** What the domain state saves and restores. */
export interface StateSnapshot {
  agents: StoredAgent[];
  deployments: StoredDeployment[];
  vms: StoredVM[];
  skills: StoredSkill[];
  tools: StoredTool[];
  /** A record saved before usage was org-scoped has no org_id: it is restored as the caller's org's. */
  usage: (UsageRecord & Partial<Pick<StoredUsage, "org_id">>)[];
  poolConfig: PoolConfig;
  /** Clients created through the API. */
  accessClients: StoredAccessClient[];
  /** Configured clients (the `clients` option) revoked through the API. */
  revokedClientIds: string[];
}

/** Everything a state file holds. */
export interface PersistedState extends StateSnapshot {
  version: typeof STATE_FILE_VERSION;
  tokens: StoredToken[];
}

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
  if (p === null || typeof p !== "object" || typeof p.version !== "number") {
    throw new Error(`emulator state file ${file} has an unknown format (expected version ${STATE_FILE_VERSION})`);
  }
  if (p.version !== STATE_FILE_VERSION) {
    const why = p.version < STATE_FILE_VERSION ? "an older emulator" : "a newer emulator";
    throw new Error(
      `emulator state file ${file} was written by ${why} (format version ${p.version}; this emulator reads version ${STATE_FILE_VERSION}): ` +
        "delete it or point the emulator at another file",
    );
  }
  return {
    version: STATE_FILE_VERSION,
    agents: p.agents ?? [],
    deployments: p.deployments ?? [],
    vms: p.vms ?? [],
    skills: p.skills ?? [],
    tools: p.tools ?? [],
    usage: p.usage ?? [],
    poolConfig: { ...defaultPoolConfig(), ...p.poolConfig },
    accessClients: p.accessClients ?? [],
    revokedClientIds: p.revokedClientIds ?? [],
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
