// All VM runtimes of one emulator, under one root directory: the `runtimeDir` option, or a fresh
// directory under the system's temp dir (made when the first VM needs it) that is removed on
// close. Each VM gets `<root>/<vm id>/`, removed when the VM ends.
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { VMRuntime, type SkillFiles } from "./vm-runtime.js";

/** Temp roots of emulators not closed yet: removed if the process exits first (a forgotten close). */
const ownedRoots = new Set<string>();
let exitHookInstalled = false;

function ownRoot(dir: string): void {
  ownedRoots.add(dir);
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on("exit", () => {
    for (const d of ownedRoots) rmSync(d, { recursive: true, force: true });
  });
}

export interface RuntimeManagerOptions {
  /** Root directory; default a fresh one under os.tmpdir(), removed on close. */
  root?: string | undefined;
  /** Output kept per execution (bytes). */
  outputLimitBytes: () => number;
  /** The emulator's clock (timestamps in statuses). */
  now: () => number;
}

export class RuntimeManager {
  private _root: string | undefined;
  private readonly ownsRoot: boolean;
  private readonly runtimes = new Map<string, VMRuntime>();
  private readonly closing = new Set<Promise<void>>();
  private total = 0;
  private closed = false;

  constructor(private readonly opts: RuntimeManagerOptions) {
    this.ownsRoot = opts.root === undefined;
  }

  /** The directory the VMs' directories live in (created on first use). */
  get root(): string {
    if (this._root === undefined) {
      if (this.opts.root !== undefined) {
        mkdirSync(this.opts.root, { recursive: true });
        this._root = this.opts.root;
      } else {
        this._root = mkdtempSync(join(tmpdir(), "agent-emulator-"));
        ownRoot(this._root);
      }
    }
    return this._root;
  }

  /** Executions started in every VM since the emulator started (released VMs included). */
  get executions(): number {
    return this.total;
  }

  /** Live runtimes by VM id. */
  get all(): ReadonlyMap<string, VMRuntime> {
    return this.runtimes;
  }

  /** The VM's runtime; undefined once the VM is gone. */
  get(vmId: string): VMRuntime | undefined {
    return this.runtimes.get(vmId);
  }

  /** A fresh runtime for a VM (an earlier one of the same id is closed first). */
  create(vm: { id: string; env: Readonly<Record<string, string>> }, skills: readonly SkillFiles[]): VMRuntime {
    if (this.closed) throw new Error("emulator runtimes are closed");
    this.destroy(vm.id);
    const rt = new VMRuntime({
      vmId: vm.id,
      dir: join(this.root, vm.id),
      env: vm.env,
      skills,
      limitBytes: this.opts.outputLimitBytes,
      now: this.opts.now,
      onExecution: () => this.total++,
    });
    this.runtimes.set(vm.id, rt);
    return rt;
  }

  /** Kills the VM's processes and removes its directory (in the background; close() waits). */
  destroy(vmId: string): void {
    const rt = this.runtimes.get(vmId);
    if (!rt) return;
    this.runtimes.delete(vmId);
    const p = rt.close().catch((err: unknown) => console.error(`emulator: cleaning up vm ${vmId} failed:`, err));
    this.closing.add(p);
    void p.finally(() => this.closing.delete(p));
  }

  /** Closes every runtime and, if the manager created it, removes the root. */
  async close(): Promise<void> {
    this.closed = true;
    for (const id of [...this.runtimes.keys()]) this.destroy(id);
    await Promise.all(this.closing);
    if (this.ownsRoot && this._root !== undefined) {
      await rm(this._root, { recursive: true, force: true, maxRetries: 5, retryDelay: 50 });
      ownedRoots.delete(this._root);
    }
  }
}
