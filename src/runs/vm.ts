// What a run needs of one VM's agentd: start a command in the background (its id), its status,
// kill it, upload a file, read a file (or the two ends of a large one), remove a directory:
// AgentdClient (src/service/agentd.ts) over the compute API's /vms/{id}/r/<agentd path>, with a
// VM that is gone (the compute API's own 404) told apart from a file or command the VM does not
// know (agentd's 404).
import { AgentdClient, isAgentdNotFound, type CommandStatus, type FileEnds } from "../service/agentd.js";
import { ServiceError } from "../service/errors.js";
import type { ServiceClient } from "../service/index.js";

/** The VM itself is gone (the compute API answered 404): every command in it is lost. */
export class VMGoneError extends Error {
  constructor(readonly vmId: string) {
    super(`VM ${vmId} is gone`);
    this.name = "VMGoneError";
  }
}

export interface RunVM {
  /** Starts `script` in the background; the command's id. */
  start(script: string, opts: { envs?: Record<string, string>; timeoutMs?: number }): Promise<string>;
  /** The command's status; undefined if the VM does not know it. */
  status(commandId: string): Promise<CommandStatus | undefined>;
  kill(commandId: string): Promise<void>;
  /** A file's text; undefined if there is no such file. */
  read(path: string): Promise<string | undefined>;
  /** A file's first and last bytes, however large it is; undefined if there is no such file. */
  readEnds(path: string, headBytes: number, tailBytes: number): Promise<FileEnds | undefined>;
  upload(path: string, content: string): Promise<void>;
  removeDir(path: string): Promise<void>;
  close(): Promise<void>;
}

export interface VMTarget {
  baseURL: string;
  vmId: string;
  client: ServiceClient;
  insecureSkipTLSVerify?: boolean;
  /**
   * Writes pass the client's write gate (default). false: for the kill of a deleted run's step,
   * which nothing retries (see SandboxRunReconciler.stopDeleted).
   */
  gated?: boolean;
}

const TIMEOUT_MS = 30_000;

/** A RunVM over the service's forwarding route. */
export class ForwardedVM implements RunVM {
  private readonly agentd: AgentdClient;

  constructor(private readonly target: VMTarget) {
    this.agentd = new AgentdClient({
      baseURL: target.baseURL,
      vmId: target.vmId,
      accessToken: (refused?: string) => target.client.accessToken(refused),
      ...(target.gated !== false && { writeGate: () => target.client.checkWriteGate() }),
      ...(target.insecureSkipTLSVerify !== undefined && { insecureSkipTLSVerify: target.insecureSkipTLSVerify }),
      timeoutMs: TIMEOUT_MS,
    });
  }

  start(script: string, opts: { envs?: Record<string, string>; timeoutMs?: number }): Promise<string> {
    return this.gone(() => this.agentd.startCommand(script, opts));
  }

  async status(commandId: string): Promise<CommandStatus | undefined> {
    try {
      return await this.gone(() => this.agentd.commandStatus(commandId));
    } catch (err) {
      if (isAgentdNotFound(err)) return undefined;
      throw err;
    }
  }

  async kill(commandId: string): Promise<void> {
    await this.gone(() => this.agentd.killCommand(commandId));
  }

  read(path: string): Promise<string | undefined> {
    return this.gone(() => this.agentd.downloadFile(path));
  }

  readEnds(path: string, headBytes: number, tailBytes: number): Promise<FileEnds | undefined> {
    return this.gone(() => this.agentd.downloadFileEnds(path, headBytes, tailBytes));
  }

  upload(path: string, content: string): Promise<void> {
    return this.gone(() => this.agentd.uploadFile(path, content));
  }

  removeDir(path: string): Promise<void> {
    return this.gone(() => this.agentd.removeDirectory(path));
  }

  close(): Promise<void> {
    return this.agentd.close();
  }

  /** Runs `fn`; a 404 of the compute API itself (not of agentd) means the VM is gone. */
  private async gone<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      if (err instanceof ServiceError && err.status === 404 && err.errorCode !== undefined) throw new VMGoneError(this.target.vmId);
      throw err;
    }
  }
}
