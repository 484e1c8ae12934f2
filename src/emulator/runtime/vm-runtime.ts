// The local runtime of one VM: what agentd manages inside a real VM. A workspace directory (the
// VM's /workspace) with the VM's skills written under skills/<name>/, the commands run and the
// code contexts created in it, and the count of executions started. Created when the VM is
// allocated; closed (every process group killed, the directory removed) when it is released,
// deleted or expires.
import { randomUUID } from "node:crypto";
import { mkdirSync, readdirSync, realpathSync, writeFileSync } from "node:fs";
import { rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { ServiceError, badRequest, notFound } from "../errors.js";
import { Command } from "./commands.js";
import { driverFor, SUPPORTED_LANGUAGES } from "./drivers.js";
import { Kernel } from "./kernel.js";
import { hostPath, isPlainSegment, unsafeSegment, VM_WORKSPACE } from "./paths.js";
import { killCarrying } from "./process-group.js";

/** The file a skill's `content` is written to, in /workspace/skills/<name>/. */
export const SKILL_CONTENT_FILE = "SKILL.md";
/** Where sessions/init puts a session's directory. */
export const SESSIONS_DIR = "sessions";
/** The session id of the contexts the VM creates itself (ws_url connections, execute). */
export const DEFAULT_SESSION = "default";

/**
 * Variables of the emulator's own environment that child processes keep (so that `python3`,
 * `node` and the like are found); everything else of it (credentials included) stays out.
 */
const PASSED_ENV = ["PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "PYENV_ROOT", "PYENV_VERSION"];

export interface SkillFiles {
  name: string;
  content: string;
  resources: Readonly<Record<string, string>>;
}

/** agentd's models.SkillInfo. */
export interface SkillInfo {
  name: string;
  loaded: boolean;
  path: string;
}

export interface RunCommandRequest {
  command: string;
  /** A host directory inside the workspace; default the workspace. */
  cwd?: string;
  envs?: Record<string, string>;
  timeoutMs?: number;
}

export interface VMRuntimeOptions {
  vmId: string;
  /** The VM's own directory; the workspace is `<dir>/workspace`. */
  dir: string;
  /** The allocation's env. */
  env: Readonly<Record<string, string>>;
  skills: readonly SkillFiles[];
  /** Output kept per execution (bytes). */
  limitBytes: () => number;
  now: () => number;
  /** Called once per execution started (the manager's global count). */
  onExecution: () => void;
}

export class VMRuntime {
  readonly vmId: string;
  /** The VM's directory on the host (removed on close). */
  readonly dir: string;
  /** The host directory that is the VM's /workspace (a real path). */
  readonly workspace: string;
  private _executions = 0;
  private _closed = false;
  private readonly _commands = new Map<string, Command>();
  private readonly _contexts = new Map<string, Kernel>();
  private readonly defaults = new Map<string, Kernel>();
  private readonly loaded = new Map<string, SkillInfo>();
  private readonly closeHooks = new Set<() => void>();
  private readonly env: Record<string, string>;
  /** Carried by every process the VM starts, so that its end finds those that left their group. */
  private readonly cookie = randomUUID();
  private spawned = false;

  constructor(private readonly opts: VMRuntimeOptions) {
    this.vmId = opts.vmId;
    this.dir = opts.dir;
    const ws = join(opts.dir, "workspace");
    mkdirSync(ws, { recursive: true, mode: 0o700 });
    this.workspace = realpathSync(ws);
    const base: Record<string, string> = {};
    for (const k of PASSED_ENV) {
      const v = process.env[k];
      if (v !== undefined) base[k] = v;
    }
    this.env = { ...base, ...opts.env };
    for (const skill of opts.skills) this.loadSkill(skill);
  }

  /** Executions started in this VM: commands run plus code blocks handed to an interpreter. */
  get executions(): number {
    return this._executions;
  }
  get closed(): boolean {
    return this._closed;
  }
  get commands(): ReadonlyMap<string, Command> {
    return this._commands;
  }
  get contexts(): ReadonlyMap<string, Kernel> {
    return this._contexts;
  }

  /** The host path of a VM path (400 naming `field` if it leaves /workspace). */
  hostPath(vmPath: unknown, field: string): string {
    return hostPath(this.workspace, vmPath, field);
  }

  // ---------------------------------------------------------------------------------------
  // Commands

  /** Runs `/bin/sh -c command` now; env = the allocation's env plus `envs`. */
  runCommand(req: RunCommandRequest): Command {
    this.check();
    this.spawned = true;
    const cmd = new Command(
      { command: req.command, cwd: req.cwd ?? this.workspace, env: { ...this.env, ...req.envs }, cookie: this.cookie, ...(req.timeoutMs !== undefined && { timeoutMs: req.timeoutMs }) },
      this.opts.limitBytes(),
      this.opts.now,
    );
    this._commands.set(cmd.id, cmd);
    this.counted();
    return cmd;
  }

  command(id: string): Command | undefined {
    return this._commands.get(id);
  }

  // ---------------------------------------------------------------------------------------
  // Code contexts

  /**
   * A new context (interpreter) for `language`; 400 for a language without a driver. A
   * client's runs in its session's directory, whatever the id (`default` too); the VM's own
   * (`own`: defaultContext) in the workspace.
   */
  createContext(language: string, sessionId: string, own = false): Kernel {
    this.check();
    const driver = driverFor(language);
    if (!driver) throw badRequest(`language ${JSON.stringify(language)} is not supported (supported: ${SUPPORTED_LANGUAGES.join(", ")})`);
    const cwd = own ? this.workspace : this.sessionDir(sessionId);
    try {
      mkdirSync(cwd, { recursive: true });
    } catch (err) {
      // sessions/ made a regular file by a command (ENOTDIR), ...: only the errno code, no host path.
      throw badRequest(`session_id ${JSON.stringify(sessionId)}: its directory cannot be created: ${(err as NodeJS.ErrnoException).code ?? "unexpected error"}`);
    }
    this.spawned = true;
    const kernel = new Kernel(driver, sessionId, {
      cwd,
      env: this.env,
      cookie: this.cookie,
      limitBytes: this.opts.limitBytes(),
      now: this.opts.now,
      onDispatch: () => this.counted(),
    });
    this._contexts.set(kernel.id, kernel);
    return kernel;
  }

  /**
   * The VM's own context for `language` (session "default"), created on first use: ws_url
   * connections and execute run code there when no context_id is given, so state carries
   * between them.
   */
  defaultContext(language: string): Kernel {
    const driver = driverFor(language);
    const existing = driver && this.defaults.get(driver.language);
    if (existing && this._contexts.has(existing.id)) return existing;
    const kernel = this.createContext(language, DEFAULT_SESSION, true);
    this.defaults.set(kernel.language, kernel);
    return kernel;
  }

  context(id: string): Kernel | undefined {
    return this._contexts.get(id);
  }

  deleteContext(id: string): boolean {
    const kernel = this._contexts.get(id);
    if (!kernel) return false;
    this._contexts.delete(id);
    kernel.close("the code context was deleted");
    return true;
  }

  // ---------------------------------------------------------------------------------------
  // Skills

  /** Writes content to skills/<name>/SKILL.md and each resource beside it. */
  loadSkill(skill: SkillFiles): SkillInfo {
    if (!isPlainSegment(skill.name)) throw badRequest(`skill name ${JSON.stringify(skill.name)} is not a plain name`);
    const dir = this.hostPath(`${VM_WORKSPACE}/skills/${skill.name}`, "skills");
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, SKILL_CONTENT_FILE), skill.content);
    for (const [name, content] of Object.entries(skill.resources)) {
      const file = this.hostPath(`${VM_WORKSPACE}/skills/${skill.name}/${name}`, `resources.${name}`);
      mkdirSync(dirname(file), { recursive: true });
      writeFileSync(file, content);
    }
    const info: SkillInfo = { name: skill.name, loaded: true, path: `${VM_WORKSPACE}/skills/${skill.name}` };
    this.loaded.set(skill.name, info);
    return info;
  }

  skills(): SkillInfo[] {
    return [...this.loaded.values()].map((s) => ({ ...s }));
  }

  skill(name: string): SkillInfo | undefined {
    const s = this.loaded.get(name);
    return s ? { ...s } : undefined;
  }

  // ---------------------------------------------------------------------------------------
  // Sessions and the workspace

  /**
   * The host directory of a session (/workspace/sessions/<id>, the id as it is). 400 naming
   * `field` only for an id that is unsafe as one path segment (see unsafeSegment), or whose
   * directory a symbolic link would lead out of the workspace.
   */
  sessionDir(id: string, field = "session_id"): string {
    const why = unsafeSegment(id);
    if (why !== undefined) throw badRequest(`${field} ${JSON.stringify(id)} ${why}`);
    return this.hostPath(`${VM_WORKSPACE}/${SESSIONS_DIR}/${id}`, field);
  }

  /**
   * Removes a session's directory and closes its code contexts: a client's, never the VM's own
   * (listed with session `default`, which a client may name its session too).
   */
  async deleteSession(id: string): Promise<void> {
    const dir = this.sessionDir(id, "session id");
    const own = new Set(this.defaults.values());
    for (const [cid, k] of this._contexts) if (k.sessionId === id && !own.has(k)) this.deleteContext(cid);
    await rm(dir, { recursive: true, force: true, maxRetries: 3 }).catch((err: NodeJS.ErrnoException) => {
      // The published answers of this route are 204 and 500 only.
      throw new ServiceError(500, "internal_error", `session ${JSON.stringify(id)}: its directory cannot be removed: ${err.code ?? "unexpected error"}`);
    });
  }

  /** Kills every command and context, then empties the workspace but for skills/. */
  async resetWorkspace(): Promise<void> {
    this.check();
    await this.stopAll("the workspace was reset");
    for (const name of readdirSync(this.workspace)) {
      if (name === "skills") continue;
      await rm(join(this.workspace, name), { recursive: true, force: true, maxRetries: 3 });
    }
  }

  // ---------------------------------------------------------------------------------------
  // Life cycle

  /** Called once when the runtime closes (e.g. to end a WebSocket); returns the remover. */
  onClose(fn: () => void): () => void {
    if (this._closed) {
      fn();
      return () => {};
    }
    this.closeHooks.add(fn);
    return () => this.closeHooks.delete(fn);
  }

  /** Kills every process group the VM has running and removes its directory. */
  async close(): Promise<void> {
    if (this._closed) return;
    this._closed = true;
    const strays = this.stopAll("the VM is gone");
    for (const fn of this.closeHooks) fn();
    this.closeHooks.clear();
    await strays;
    await rm(this.dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 50 });
  }

  /** Returns when what left its group (setsid, a daemon) is killed too: a scan of the processes, only if any ran here. */
  private stopAll(reason: string): Promise<void> {
    for (const cmd of this._commands.values()) cmd.kill();
    for (const k of this._contexts.values()) k.close(reason);
    const strays = this.spawned ? killCarrying(this.cookie) : Promise.resolve();
    this._contexts.clear();
    this.defaults.clear();
    return strays;
  }

  private counted(): void {
    this._executions++;
    this.opts.onExecution();
  }

  private check(): void {
    if (this._closed) throw notFound(`vm ${this.vmId} not found`);
  }
}
