// What a run needs of one VM's agentd: start a command in the background (its id), its status,
// kill it, upload a file, read a file (or the two ends of a large one), remove a directory:
// AgentdClient (src/service/agentd.ts) over the compute API's /vms/{id}/r/<agentd path>, with a
// VM that is gone told apart from a file or command the VM does not know (agentd's 404).
//
// The forwarding route's 404 is the compute API's (no such VM) or agentd's (no such file or
// command), and its 502 a VM that cannot be reached, gone or not. The compute API's error body
// may carry error_code (agentd's published one has none), but need not (SERVICE.md: never
// assume either field is there): a 404 with error_code is the compute API's; one without, and
// a 502, are asked about with GET /compute/v1/vms/{id} (a 404, or a state that is not live:
// the VM is gone).
import { AgentdClient, isAgentdNotFound, type CommandStatus, type FileEnds } from "../service/agentd.js";
import { isServiceNotFound, type ServiceError } from "../service/errors.js";
import type { ServiceClient } from "../service/index.js";
import { vmStateIsLive } from "../api/vm-state.js";

/** The VM itself is gone: every command in it is lost. */
export class VMGoneError extends Error {
  constructor(readonly vmId: string) {
    super(`VM ${vmId} is gone`);
    this.name = "VMGoneError";
  }
}

export interface RunVM {
  /**
   * Starts `script` in the background; the command's id (undefined: the VM named none).
   * `secretValues`: those of `envs` read from Secrets, never quoted by an error.
   */
  start(script: string, opts: { cwd?: string; envs?: Record<string, string>; secretValues?: readonly string[]; timeoutMs?: number }): Promise<string | undefined>;
  /** The command's status; undefined if the VM does not know it. */
  status(commandId: string): Promise<CommandStatus | undefined>;
  kill(commandId: string): Promise<void>;
  /** A file's text; undefined if there is no such file. */
  read(path: string): Promise<string | undefined>;
  /** A file's first and last bytes, however large it is; undefined if there is no such file. */
  readEnds(path: string, headBytes: number, tailBytes: number): Promise<FileEnds | undefined>;
  /** Writes a file: bytes as they are, a string as UTF-8. `secret`: a Secret's content, never quoted by an error. */
  upload(path: string, content: Buffer | string, opts?: { secret?: boolean }): Promise<void>;
  removeDir(path: string): Promise<void>;
  close(): Promise<void>;
}

export interface VMTarget {
  baseURL: string;
  vmId: string;
  /** Its token; and GET /compute/v1/vms/{id} when an answer may mean the VM is gone. */
  client: ServiceClient;
  insecureSkipTLSVerify?: boolean;
  /**
   * Writes pass the client's write gate (default). false: for the kill of a deleted run's step,
   * which nothing retries (see SandboxRunReconciler.stopDeleted).
   */
  gated?: boolean;
}

const TIMEOUT_MS = 30_000;
/** How long after the VM answered a bare 404 of a file read is taken as agentd's without asking the compute API. */
const RECENTLY_ANSWERED_MS = 5_000;

/** A RunVM over the service's forwarding route. Every call throws VMGoneError once the VM is gone. */
export class ForwardedVM implements RunVM {
  private readonly agentd: AgentdClient;
  /** When the VM last answered a command's status or a file read (it was there then). */
  private answeredAt = -Infinity;

  constructor(private readonly target: VMTarget) {
    this.agentd = new AgentdClient({
      baseURL: target.baseURL,
      vmId: target.vmId,
      accessToken: (refused?: string) => target.client.accessToken(refused),
      ...(target.gated !== false && { writeGate: () => target.client.checkWriteGate() }),
      forwarding: target.client.forwarding,
      ...(target.insecureSkipTLSVerify !== undefined && { insecureSkipTLSVerify: target.insecureSkipTLSVerify }),
      timeoutMs: TIMEOUT_MS,
      explainError: (err) => this.explain(err),
    });
  }

  start(script: string, opts: { cwd?: string; envs?: Record<string, string>; secretValues?: readonly string[]; timeoutMs?: number }): Promise<string | undefined> {
    return this.agentd.startCommand(script, opts);
  }

  async status(commandId: string): Promise<CommandStatus | undefined> {
    try {
      const status = await this.agentd.commandStatus(commandId);
      this.answeredAt = Date.now();
      return status;
    } catch (err) {
      if (isAgentdNotFound(err)) return undefined;
      throw err;
    }
  }

  async kill(commandId: string): Promise<void> {
    await this.agentd.killCommand(commandId);
  }

  async read(path: string): Promise<string | undefined> {
    const text = await this.agentd.downloadFile(path);
    // Only a file read proves the VM there: a bare 404 taken as agentd's must not prolong that.
    if (text !== undefined) this.answeredAt = Date.now();
    return text;
  }

  readEnds(path: string, headBytes: number, tailBytes: number): Promise<FileEnds | undefined> {
    return this.agentd.downloadFileEnds(path, headBytes, tailBytes);
  }

  upload(path: string, content: Buffer | string, opts: { secret?: boolean } = {}): Promise<void> {
    return this.agentd.uploadFile(path, content, opts);
  }

  removeDir(path: string): Promise<void> {
    return this.agentd.removeDirectory(path);
  }

  close(): Promise<void> {
    return this.agentd.close();
  }

  /**
   * A 404 or 502 of the forwarding route, before AgentdClient throws it (or reads a 404 as "no
   * such file or command"): VMGoneError if the VM is gone; undefined if it is there (the error
   * is agentd's, and stands); the lookup's own failure if the VM's state cannot be had, so that
   * a 404 is never read as agentd's without knowing.
   */
  private async explain(err: ServiceError): Promise<Error | undefined> {
    const { vmId } = this.target;
    if (isServiceNotFound(err)) return new VMGoneError(vmId);
    // A file read just after the VM answered (observeStep reads the exit file right after a
    // command's status or the step's heartbeat): a bare 404 is agentd's (no exit file yet, which
    // a step followed by its files meets at every poll), not worth a look-up each time.
    if (err.status === 404 && err.operation === "files.download" && Date.now() - this.answeredAt < RECENTLY_ANSWERED_MS) return undefined;
    try {
      const vm = await this.target.client.vms.get(vmId);
      return vmStateIsLive(vm.state) ? undefined : new VMGoneError(vmId);
    } catch (lookup) {
      // Only the service's own 404: a bare one (the same gateway) says nothing of the VM.
      if (isServiceNotFound(lookup)) return new VMGoneError(vmId);
      return lookup instanceof Error ? lookup : new Error(String(lookup));
    }
  }
}
