// What a run needs of one VM's agentd: start a command in the background (its id), its status,
// kill it, upload a file, read a file, remove a directory. Commands go through AgentdClient
// (src/service/agentd.ts); the file calls it does not have yet are made here, the same way
// (the compute API's /vms/{id}/r/<agentd path>, the account's bearer token).
import { Agent, type Dispatcher } from "undici";
import { AgentdClient, type CommandStatus } from "../service/agentd.js";
import { ServiceError, httpErrorMessage, parseErrorBody } from "../service/errors.js";
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
  upload(path: string, content: string): Promise<void>;
  removeDir(path: string): Promise<void>;
  close(): Promise<void>;
}

export interface VMTarget {
  baseURL: string;
  vmId: string;
  client: ServiceClient;
  insecureSkipTLSVerify?: boolean;
}

const TIMEOUT_MS = 30_000;

/** A RunVM over the service's forwarding route. */
export class ForwardedVM implements RunVM {
  private readonly agentd: AgentdClient;
  private readonly http: Agent;
  private readonly origin: string;
  private readonly prefix: string;

  constructor(private readonly target: VMTarget) {
    const accessToken = (refused?: string) => target.client.accessToken(refused);
    this.agentd = new AgentdClient({
      baseURL: target.baseURL,
      vmId: target.vmId,
      accessToken,
      ...(target.insecureSkipTLSVerify !== undefined && { insecureSkipTLSVerify: target.insecureSkipTLSVerify }),
      timeoutMs: TIMEOUT_MS,
    });
    const u = new URL(target.baseURL);
    this.origin = u.origin;
    this.prefix = `${u.pathname.replace(/\/+$/, "")}/compute/v1/vms/${encodeURIComponent(target.vmId)}/r/`;
    this.http = new Agent({ headersTimeout: TIMEOUT_MS, bodyTimeout: TIMEOUT_MS, connect: { rejectUnauthorized: target.insecureSkipTLSVerify !== true } });
  }

  async start(script: string, opts: { envs?: Record<string, string>; timeoutMs?: number }): Promise<string> {
    return this.gone(() => this.agentd.startCommand(script, opts));
  }

  async status(commandId: string): Promise<CommandStatus | undefined> {
    try {
      return await this.gone(() => this.agentd.commandStatus(commandId));
    } catch (err) {
      if (err instanceof ServiceError && err.status === 404) return undefined;
      throw err;
    }
  }

  async kill(commandId: string): Promise<void> {
    await this.gone(() => this.agentd.killCommand(commandId));
  }

  async read(path: string): Promise<string | undefined> {
    const res = await this.send("files.download", "GET", `v1/files/download?path=${encodeURIComponent(path)}`, undefined, {});
    if (res === undefined) return undefined;
    return res;
  }

  async upload(path: string, content: string): Promise<void> {
    const boundary = `----agent-operator-${Math.random().toString(36).slice(2)}${Date.now().toString(36)}`;
    const name = path.split("/").pop() || "file";
    const body = Buffer.concat([
      Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="path"\r\n\r\n${path}\r\n`),
      Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${name.replace(/["\r\n]/g, "_")}"\r\nContent-Type: application/octet-stream\r\n\r\n`),
      Buffer.from(content, "utf8"),
      Buffer.from(`\r\n--${boundary}--\r\n`),
    ]);
    const res = await this.send("files.upload", "POST", "v1/files/upload", body, { "content-type": `multipart/form-data; boundary=${boundary}` });
    if (res === undefined) throw new ServiceError({ operation: "files.upload", status: 404, message: `files.upload: the VM cannot write ${path}`, retryable: false });
  }

  async removeDir(path: string): Promise<void> {
    await this.send("directories.delete", "DELETE", "v1/directories", Buffer.from(JSON.stringify([path])), { "content-type": "application/json" });
  }

  async close(): Promise<void> {
    await Promise.all([this.agentd.close(), this.http.close()]);
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

  /** One call; the body's text, or undefined for an agentd 404 (no such file). */
  private async send(operation: string, method: Dispatcher.HttpMethod, path: string, body: Buffer | undefined, headers: Record<string, string>): Promise<string | undefined> {
    let refused: string | undefined;
    for (let attempt = 1; ; attempt++) {
      const token = await this.target.client.accessToken(refused);
      let res: Dispatcher.ResponseData;
      try {
        res = await this.http.request({
          origin: this.origin,
          path: this.prefix + path,
          method,
          headers: { authorization: `Bearer ${token}`, "user-agent": "agent-operator/sandbox-run", ...headers },
          body: body ?? null,
        });
      } catch (err) {
        throw new ServiceError({
          operation,
          message: `${operation}: cannot reach the service: ${err instanceof Error ? err.message : "network error"}`,
          retryable: true,
          outcomeUnknown: method !== "GET",
          cause: err,
        });
      }
      const text = await res.body.text();
      if (res.statusCode >= 200 && res.statusCode < 300) return text;
      if (res.statusCode === 401 && attempt === 1) {
        refused = token;
        continue;
      }
      const parsed = parseErrorBody(text, [token]);
      if (res.statusCode === 404 && parsed.errorCode !== undefined) throw new VMGoneError(this.target.vmId);
      if (res.statusCode === 404) return undefined;
      throw new ServiceError({
        operation,
        status: res.statusCode,
        code: parsed.code,
        errorCode: parsed.errorCode,
        serviceMessage: parsed.serviceMessage,
        message: httpErrorMessage(operation, res.statusCode, "", parsed),
        retryable: res.statusCode === 429 || res.statusCode >= 500,
      });
    }
  }
}
