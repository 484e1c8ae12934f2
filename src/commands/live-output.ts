// A running step's output as it is written, for `logs`: read from the step's files in the VM
// (src/runs/follow.ts), through the service as `exec` reaches a VM (./vm-access.ts), and masked
// with the values of the Secrets the run reads, as the operator masks what it keeps. The caller
// needs to read those Secrets and the Connection's; where it may not, nothing is printed live
// (never unmasked output) and each step's output comes from the cluster once it has ended.
//
// The Secrets are read when the run is first seen and again at each step's first look, and
// every value seen is masked: a step started after an edit prints the new value, and one
// started before it the old.
import type { Sandbox, SandboxRun } from "../api/index.js";
import { GROUP, VERSION, kindNames } from "../api/names.js";
import { errorMessage } from "../lib/errors.js";
import type { SecretObject } from "../managed/connection-secret.js";
import { StepFollower } from "../runs/follow.js";
import { maskingSecretNames } from "../runs/output.js";
import { stepPath } from "../runs/script.js";
import { resourcePath, secretsPath } from "../runtime/kube-client.js";
import { VMAccessError, connectVM, readObject, type Reader, type VMAccess } from "./vm-access.js";

export interface LiveIO {
  out(text: string): void;
  err(text: string): void;
}

/** A step followed live. */
interface Followed {
  attempt: number;
  name: string;
  vmId: string;
  follower: StepFollower;
}

export class LiveOutput {
  /** The VM of the run's current attempt, and its Sandbox (whose envFrom is masked too). */
  private access: { vmId: string; vm: VMAccess; sandbox: Sandbox | undefined } | undefined;
  /** Why there is no live output for the run (said once): a refusal, or something missing. */
  private off: string | undefined;
  /** Every Secret value seen in the run's Secrets since it has been followed. */
  private readonly secrets = new Set<string>();
  private readonly followed = new Map<string, Followed>();
  private readonly said = new Set<string>();

  constructor(
    private readonly reader: Reader,
    private readonly namespace: string,
    private readonly io: LiveIO,
    /** Whether the run is followed (-f): a failure that may pass is tried again at the next look. */
    private readonly following: boolean,
  ) {}

  /**
   * Whether the run's running step can be followed live: its VM reached. The first time it
   * cannot, says why (once): for good (a refusal, something missing), or for now (tried again
   * at the next look).
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
      if (ref !== undefined && sandbox === undefined) throw new VMAccessError(`Sandbox "${ref.name}" is not found`);
      await this.readSecrets(run, sandbox);
      const connectionRef = sandbox?.spec.connectionRef ?? run.spec.sandboxTemplate?.connectionRef;
      const vm = await connectVM(this.reader, this.namespace, connectionRef, vmId, `SandboxRun "${run.metadata.name}"`);
      this.access = { vmId, vm, sandbox };
      return true;
    } catch (err) {
      this.failed(err);
      return false;
    }
  }

  /** Prints what step `index` of the current attempt has written since the last look. */
  async look(run: SandboxRun, index: number): Promise<void> {
    const f = await this.follow(run, index);
    if (f !== undefined) await this.lookAt(f);
  }

  /**
   * Step `index` of the current attempt has ended, and `kept` is its output as the run keeps
   * it. Prints the rest of it after what was printed live, and answers true; false if it was
   * not followed live (the caller prints `kept` whole).
   */
  async end(run: SandboxRun, index: number, kept: string): Promise<boolean> {
    const key = stepKey(currentAttempt(run), index);
    const f = this.followed.get(key);
    if (f === undefined) return false;
    this.followed.delete(key);
    // Its end from its file, while that is there (the run's directory is removed when it ends).
    if (!f.follower.done) await this.lookAt(f, true);
    if (!f.follower.done) this.printKept(f, kept);
    return true;
  }

  /**
   * The steps followed live of attempts before the current one (a new attempt started): each
   * is read to its end where its file still is. Answers each, and whether it was printed whole
   * (the ConfigMap holds the new attempt's output, so the rest of one that was not is lost).
   */
  async endEarlier(run: SandboxRun): Promise<Array<{ attempt: number; name: string; whole: boolean }>> {
    const ended: Array<{ attempt: number; name: string; whole: boolean }> = [];
    for (const [key, f] of this.followed) {
      if (f.attempt >= currentAttempt(run)) continue;
      this.followed.delete(key);
      if (!f.follower.done) await this.lookAt(f, true);
      ended.push({ attempt: f.attempt, name: f.name, whole: f.follower.done });
    }
    return ended;
  }

  async close(): Promise<void> {
    const access = this.access;
    this.access = undefined;
    await access?.vm.close();
  }

  /** The step's follower, made at its first look, with the run's Secrets as they are now. */
  private async follow(run: SandboxRun, index: number): Promise<Followed | undefined> {
    const attempt = currentAttempt(run);
    const key = stepKey(attempt, index);
    const known = this.followed.get(key);
    if (known !== undefined || this.access === undefined) return known;
    try {
      await this.readSecrets(run, this.access.sandbox);
    } catch (err) {
      this.failed(err);
      return undefined;
    }
    const name = run.spec.steps[index]?.name ?? String(index);
    const f: Followed = { attempt, name, vmId: this.access.vmId, follower: new StepFollower(this.access.vm.vm, stepPath(run.metadata.uid, attempt, index), this.secrets) };
    this.followed.set(key, f);
    return f;
  }

  /** Adds the values of every Secret the run's output is masked with, as they are now; one that is gone stops live output. */
  private async readSecrets(run: SandboxRun, sandbox: Sandbox | undefined): Promise<void> {
    for (const name of maskingSecretNames(run.spec, sandbox).all) {
      const secret = await this.read<SecretObject>(secretsPath(this.namespace, name), `Secret "${name}"`);
      if (secret === undefined) throw new VMAccessError(`Secret "${name}", which the run reads, is not found, so its values could not be masked`);
      for (const v of Object.values(secret.data ?? {})) this.secrets.add(Buffer.from(v, "base64").toString("utf8"));
    }
  }

  /** One look at a followed step (`last`: it has ended): its new output to stdout, what it says to stderr. */
  private async lookAt(f: Followed, last = false): Promise<void> {
    // A new attempt's VM since: this step's is not read any more.
    if (this.access?.vmId !== f.vmId) return;
    try {
      const { text, note } = await f.follower.look(last);
      if (text !== "") this.io.out(text);
      if (note !== undefined) this.sayOnce(`${f.attempt}/${f.name}/note`, `--- step "${f.name}" (attempt ${f.attempt}): ${note} ---\n`);
    } catch (err) {
      this.sayOnce(`${f.attempt}/${f.name}/failed`, `--- step "${f.name}" (attempt ${f.attempt}): its output could not be read live (${errorMessage(err)}) ---\n`);
    }
  }

  /** The rest of an ended step's output from what the run keeps (StepFollower.restFrom). */
  private printKept(f: Followed, kept: string): void {
    const { text, note } = f.follower.restFrom(kept);
    if (note !== undefined) this.io.err(`--- step "${f.name}" (attempt ${f.attempt}): ${note} ---\n`);
    this.io.out(text);
  }

  /** A failure to set up live output: for good (said, and off), or for now (said once, tried again). */
  private failed(err: unknown): void {
    if (err instanceof VMAccessError && err.transient) {
      this.sayOnce("transient", `--- live output could not be set up (${err.message})${this.following ? "; trying again" : ""} ---\n`);
      return;
    }
    this.off = errorMessage(err);
    this.io.err(`--- live output is off (${this.off}); each step's output is printed once it has ended ---\n`);
  }

  private sayOnce(key: string, line: string): void {
    if (this.said.has(key)) return;
    this.said.add(key);
    this.io.err(line);
  }

  private read<T>(path: string, what: string): Promise<T | undefined> {
    return readObject<T>(this.reader, path, `${what} in namespace "${this.namespace}"`);
  }
}

const currentAttempt = (run: SandboxRun): number => Math.max(1, run.status?.attempts ?? 1);
const stepKey = (attempt: number, index: number): string => `${attempt}/${index}`;
