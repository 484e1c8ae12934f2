// A running step's output as it is written, for `logs`: read from the step's output file in
// the VM (src/runs/script.ts writes it), through the service, as `exec` reaches a VM
// (./vm-access.ts), and masked with the values of the Secrets the run reads, as the operator
// masks what it keeps (src/runs/output.ts). The caller needs to read those Secrets and the
// Connection's; where it cannot, or the VM cannot be reached, nothing is printed live (never
// unmasked output) and each step's output comes from the cluster once it has ended.
//
// agentd publishes no Range for downloads: each look reads the whole file and keeps its last
// LOOK_BYTES. A step that prints more than that between two looks has the rest skipped (a
// line says how much); one whose file passes MAX_FOLLOWED_BYTES is not followed further.
import type { Sandbox, SandboxRun } from "../api/index.js";
import { GROUP, VERSION, kindNames } from "../api/names.js";
import { errorMessage } from "../lib/errors.js";
import type { SecretObject } from "../managed/connection-secret.js";
import { GrowingOutput, maskingSecretNames } from "../runs/output.js";
import { outputFile, stepPath } from "../runs/script.js";
import { resourcePath, secretsPath } from "../runtime/kube-client.js";
import { connectVM, readObject, type Reader, type VMAccess } from "./vm-access.js";

/** The most of a step's output one look prints; more between two looks is skipped. */
export const LOOK_BYTES = 1024 * 1024;
/** A step's output file this large is no longer read at each look (each read is all of it). */
export const MAX_FOLLOWED_BYTES = 64 * 1024 * 1024;
/** The text printed live that is kept to match with the output kept in the cluster at the step's end. */
const MATCHED_BYTES = 1024 * 1024;

export interface LiveIO {
  out(text: string): void;
  err(text: string): void;
}

/** One step followed: where its file is, how far it has been printed, and what was printed. */
interface Followed {
  vmId: string;
  path: string;
  label: string;
  /** Bytes of the file read so far (pushed to `output`). */
  offset: number;
  output: GrowingOutput;
  /** What was printed, while it is short enough to match the kept output with (else undefined). */
  printed: string | undefined;
  /** Not read at each look any more (too large); said once. */
  stopped: boolean;
  /** A failed read was said (once each step). */
  failed: boolean;
}

export class LiveOutput {
  /** The VM of the run's current attempt, and the values its output is masked with. */
  private access: { vmId: string; vm: VMAccess; secrets: string[] } | undefined;
  /** Why there is no live output for the run, once found (said once). */
  private off: string | undefined;
  private readonly followed = new Map<string, Followed>();

  constructor(
    private readonly reader: Reader,
    private readonly namespace: string,
    private readonly io: LiveIO,
  ) {}

  /**
   * Whether the run's running step can be followed live: its VM reached and the Secrets its
   * output is masked with read (as they are now). The first time it cannot, says why (once).
   */
  async ready(run: SandboxRun): Promise<boolean> {
    if (this.off !== undefined) return false;
    const vmId = run.status?.vmId;
    if (vmId === undefined || vmId === "") return false;
    if (this.access?.vmId === vmId) return true;
    await this.close();
    try {
      const ref = run.spec.sandboxRef;
      const sandbox = ref === undefined ? undefined : await this.read<Sandbox>(resourcePath({ group: GROUP, version: VERSION, plural: kindNames.sandbox.plural, namespace: this.namespace, name: ref.name }), `Sandbox "${ref.name}"`);
      if (ref !== undefined && sandbox === undefined) throw new Error(`Sandbox "${ref.name}" is not found`);
      const secrets: string[] = [];
      for (const name of maskingSecretNames(run.spec, sandbox).all) {
        const secret = await this.read<SecretObject>(secretsPath(this.namespace, name), `Secret "${name}"`);
        if (secret === undefined) throw new Error(`Secret "${name}", which the run reads, is not found, so its values could not be masked`);
        secrets.push(...Object.values(secret.data ?? {}).map((v) => Buffer.from(v, "base64").toString("utf8")));
      }
      const connectionRef = sandbox?.spec.connectionRef ?? run.spec.sandboxTemplate?.connectionRef;
      const vm = await connectVM(this.reader, this.namespace, connectionRef, vmId, `SandboxRun "${run.metadata.name}"`);
      this.access = { vmId, vm, secrets };
      return true;
    } catch (err) {
      this.off = errorMessage(err);
      this.io.err(`--- live output is off (${this.off}); each step's output is printed once it has ended ---\n`);
      return false;
    }
  }

  /** Prints what step `index` of the current attempt has written since the last look. */
  async look(run: SandboxRun, index: number): Promise<void> {
    const f = this.follow(run, index);
    if (f === undefined || f.stopped) return;
    await this.readOn(f, false);
  }

  /**
   * Step `index` has ended, and `kept` is its output as the run keeps it. Prints the rest of
   * it after what was printed live, and answers true; false if it was not followed live (the
   * caller prints `kept` whole).
   */
  async end(run: SandboxRun, index: number, kept: string): Promise<boolean> {
    const f = this.followed.get(stepKey(run, index));
    if (f === undefined) return false;
    this.followed.delete(stepKey(run, index));
    // Its end from the file (read once more, however large), unless the file is gone (the run
    // has ended and its directory was removed): then from what the run keeps, when that starts
    // with what was printed.
    if (await this.readOn(f, true)) return true;
    if (f.printed !== undefined && kept.startsWith(f.printed)) {
      this.io.out(kept.slice(f.printed.length));
      return true;
    }
    this.io.err(`--- ${f.label}: the end of its output could not be read live; all of it, as the run keeps it: ---\n`);
    this.io.out(kept);
    return true;
  }

  async close(): Promise<void> {
    const access = this.access;
    this.access = undefined;
    await access?.vm.close();
  }

  /** The step's follow state, made at its first look. */
  private follow(run: SandboxRun, index: number): Followed | undefined {
    const key = stepKey(run, index);
    const known = this.followed.get(key);
    if (known !== undefined || this.access === undefined) return known;
    const attempt = Math.max(1, run.status?.attempts ?? 1);
    const f: Followed = {
      vmId: this.access.vmId,
      path: outputFile(stepPath(run.metadata.uid, attempt, index)),
      label: `step "${run.spec.steps[index]?.name ?? index}" (attempt ${attempt})`,
      offset: 0,
      output: new GrowingOutput(this.access.secrets),
      printed: "",
      stopped: false,
      failed: false,
    };
    this.followed.set(key, f);
    return f;
  }

  /**
   * Reads the step's file on from where it was left and prints what it may; `ended`: the
   * step has ended, so print all. False if the file could not be read (gone, or the VM not
   * reached: said once).
   */
  private async readOn(f: Followed, ended: boolean): Promise<boolean> {
    const vm = this.access?.vmId === f.vmId ? this.access.vm.vm : undefined; // a new attempt's VM since: not this step's
    if (vm === undefined) return false;
    const lead = f.output.holdBack + 1;
    let ends;
    try {
      ends = await vm.downloadFileEnds(f.path, 0, LOOK_BYTES + lead);
    } catch (err) {
      if (!f.failed) this.io.err(`--- ${f.label}: its output could not be read live (${errorMessage(err)}); trying again ---\n`);
      f.failed = true;
      return false;
    }
    if (ends === undefined) return false;
    const fresh = ends.size - f.offset;
    if (fresh > 0) {
      let text: string;
      if (fresh <= LOOK_BYTES) {
        text = f.output.push(ends.tail.subarray(ends.tail.length - fresh), { ended });
      } else {
        // The bytes before the last LOOK_BYTES are read only as a lead-in (a value across the cut).
        const skipped = fresh - LOOK_BYTES + f.output.held;
        text = `\n[... ${skipped} bytes of output skipped here (more came between two looks than is read at once) ...]\n` + f.output.push(ends.tail, { ended, from: ends.tail.length - LOOK_BYTES });
        f.printed = undefined;
      }
      f.offset = ends.size;
      this.print(f, text);
    } else if (ended) {
      this.print(f, f.output.push(Buffer.alloc(0), { ended }));
    }
    if (!ended && ends.size > MAX_FOLLOWED_BYTES) {
      f.stopped = true;
      this.io.err(`--- ${f.label}: its output is over ${MAX_FOLLOWED_BYTES / (1024 * 1024)} MiB and is no longer followed live; the rest comes once it has ended ---\n`);
    }
    return true;
  }

  private print(f: Followed, text: string): void {
    if (text === "") return;
    this.io.out(text);
    if (f.printed !== undefined) f.printed = f.printed.length + text.length > MATCHED_BYTES ? undefined : f.printed + text;
  }

  private read<T>(path: string, what: string): Promise<T | undefined> {
    return readObject<T>(this.reader, path, `${what} in namespace "${this.namespace}"`);
  }
}

const stepKey = (run: SandboxRun, index: number): string => `${run.status?.attempts ?? 1}/${index}`;
