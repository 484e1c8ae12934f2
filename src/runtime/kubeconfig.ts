// Where the API server is and how to authenticate to it: kubeconfig files, in-cluster
// service-account config, or a @kubernetes/client-node KubeConfig the caller already has.
//
// Why our own loader: importing @kubernetes/client-node costs ~80 MB of RSS (its config
// module pulls in every generated API model), against an operator budget of 200 MB at
// 10,000 resources. This covers what operators use - in-cluster tokens, token / token-file,
// client certificates, basic auth, exec credential plugins, impersonation - in a few hundred
// lines; the legacy `auth-provider` plugins (oidc, gcp, azure) fall back to client-node,
// loaded lazily only when such a user is selected.
//
// Credentials are re-derived on demand (KubeClient asks every 60 s and after a 401):
// token files and certificate files are re-read (bound service-account tokens rotate; note
// client-node reads a kubeconfig `token-file` once, at load), exec plugins are re-run when
// their credential expires or the server answered 401.
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import type { RequestOptions as HttpsRequestOptions } from "node:https";
import { isIPv6 } from "node:net";
import { homedir } from "node:os";
import { delimiter, dirname, isAbsolute, join, resolve } from "node:path";
import { parseDocument } from "yaml";
import type * as ClientNodeModule from "@kubernetes/client-node";
import { parseJsonOr } from "../lib/errors.js";
import { yamlValue } from "../lib/yaml.js";

export interface TlsOptions {
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  rejectUnauthorized?: boolean;
  servername?: string;
}

export interface Credentials {
  /** Lower-case header names: authorization, impersonate-user, ... */
  headers: Record<string, string>;
  tls: TlsOptions;
}

/** One API server and a way to get fresh credentials for it. */
export interface ClusterConnection {
  /** https://host:port[/prefix] */
  server: string;
  /** Namespace of the current context (or the pod's namespace in-cluster). */
  namespace?: string;
  /** Where it was loaded from, to be named in messages: `kubeconfig <files>, context "<name>"`, or `in-cluster config`. */
  source?: string;
  /** `force`: the server rejected the last credentials (401); do not serve a cache. */
  credentials(force?: boolean): Promise<Credentials>;
}

/** What we need from a @kubernetes/client-node KubeConfig (structural: no runtime import). */
export interface KubeConfigLike {
  getCurrentCluster(): { server: string } | null;
  getCurrentContext(): string;
  getContextObject(name: string): { namespace?: string } | null;
  applyToHTTPSOptions(opts: HttpsRequestOptions): Promise<void>;
}

export const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

// ---------------------------------------------------------------------------------------
// kubeconfig file model

interface ExecConfig {
  apiVersion?: string;
  command: string;
  args?: string[];
  env?: { name: string; value: string }[] | null;
  provideClusterInfo?: boolean;
}

interface RawCluster {
  server?: string;
  "certificate-authority"?: string;
  "certificate-authority-data"?: string;
  "insecure-skip-tls-verify"?: boolean;
  "tls-server-name"?: string;
  "proxy-url"?: string;
}

interface RawUser {
  token?: string;
  tokenFile?: string;
  "token-file"?: string;
  "client-certificate"?: string;
  "client-certificate-data"?: string;
  "client-key"?: string;
  "client-key-data"?: string;
  username?: string;
  password?: string;
  exec?: ExecConfig;
  "auth-provider"?: unknown;
  as?: string;
  "as-groups"?: string[];
  "as-uid"?: string;
}

interface RawContext {
  cluster?: string;
  user?: string;
  namespace?: string;
}

interface Named<T> {
  name: string;
  value: T;
  /** directory of the file that defined it (relative paths resolve against it) */
  dir: string;
}

interface MergedConfig {
  clusters: Named<RawCluster>[];
  users: Named<RawUser>[];
  contexts: Named<RawContext>[];
  currentContext?: string;
}

function readConfigFile(path: string, into: MergedConfig, from: string): void {
  const text = readNamed(path, `kubeconfig ${path}${from}`).toString("utf8");
  // Not yaml's parse(), which also prints its warnings with the lines around them, tokens included.
  const doc = yamlValue(parseDocument(text), text, (fault) => new Error(`kubeconfig ${path}${from}: not valid YAML: ${fault}`));
  if (!doc || typeof doc !== "object") return;
  const d = doc as Record<string, unknown>;
  const dir = dirname(resolve(path));
  // Merge rule of kubectl: the first file to define a name wins; so does the first current-context.
  const add = <T>(list: Named<T>[], entries: unknown, field: string): void => {
    if (!Array.isArray(entries)) return;
    for (const e of entries) {
      if (!e || typeof e !== "object") continue;
      const name = (e as { name?: unknown }).name;
      if (typeof name !== "string" || list.some((x) => x.name === name)) continue;
      list.push({ name, value: ((e as Record<string, unknown>)[field] ?? {}) as T, dir });
    }
  };
  add(into.clusters, d.clusters, "cluster");
  add(into.users, d.users, "user");
  add(into.contexts, d.contexts, "context");
  const cc = d["current-context"];
  if (!into.currentContext && typeof cc === "string" && cc) into.currentContext = cc;
}

function resolvePath(dir: string, p: string): string {
  return isAbsolute(p) ? p : join(dir, p);
}

function fileOrData(dir: string, file: string | undefined, data: string | undefined, what: string): Buffer | undefined {
  if (data) return Buffer.from(data, "base64");
  if (!file) return undefined;
  const path = resolvePath(dir, file);
  return readNamed(path, `${what} ${path}`);
}

/** A file's bytes; a failure says which file it was for, and why, in words (not a bare ENOENT). */
function readNamed(path: string, what: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === "ENOENT" ? "no such file" : code === "EISDIR" ? "is a directory, not a file" : code === "EACCES" ? "permission denied" : (code ?? "cannot be read");
    throw new Error(`${what}: ${why}`, { cause: err });
  }
}

// ---------------------------------------------------------------------------------------
// Loading

export interface LoadOptions {
  /** A kubeconfig path (or a KUBECONFIG-style list). Default: $KUBECONFIG, ~/.kube/config, then in-cluster. */
  path?: string;
  context?: string;
}

/** kubectl's resolution order: explicit path, $KUBECONFIG (merged list), ~/.kube/config, in-cluster. */
export function loadKubeconfig(opts: LoadOptions = {}): ClusterConnection {
  const list = opts.path ?? process.env.KUBECONFIG ?? "";
  let files = list.split(delimiter).filter((f) => f.length > 0);
  if (files.length === 0) {
    const home = join(homedir(), ".kube", "config");
    if (existsSync(home)) files = [home];
  }
  if (files.length === 0) {
    if (process.env.KUBERNETES_SERVICE_HOST) return inClusterConfig();
    throw new Error("no kubeconfig found (set KUBECONFIG or --kubeconfig) and not running in a cluster");
  }
  const merged: MergedConfig = { clusters: [], users: [], contexts: [] };
  // Where the path came from: said in a message about the files; of the two, only
  // $KUBECONFIG in messages about reaching the API server (a flag's path reads plainly there).
  const env = opts.path === undefined && process.env.KUBECONFIG ? " ($KUBECONFIG)" : "";
  const from = opts.path !== undefined ? " (--kubeconfig)" : env;
  // kubectl skips the files of a $KUBECONFIG list that do not exist, but not all of them.
  const existing = opts.path !== undefined ? files : files.filter((f) => existsSync(f));
  if (existing.length === 0) throw new Error(`kubeconfig ${files.join(delimiter)}${from}: no such file`);
  for (const f of existing) readConfigFile(f, merged, from);
  const connection = fromMergedConfig(merged, opts.context, files);
  const context = opts.context ?? merged.currentContext;
  return { ...connection, source: `kubeconfig ${files.join(delimiter)}${env}${context === undefined ? "" : `, context "${context}"`}` };
}

function fromMergedConfig(cfg: MergedConfig, contextName: string | undefined, files: string[]): ClusterConnection {
  const name = contextName ?? cfg.currentContext;
  if (!name) throw new Error(`kubeconfig ${files.join(delimiter)}: no current-context`);
  const ctx = cfg.contexts.find((c) => c.name === name);
  if (!ctx) throw new Error(`kubeconfig: context "${name}" not found`);
  const cluster = cfg.clusters.find((c) => c.name === ctx.value.cluster);
  if (!cluster) throw new Error(`kubeconfig: cluster "${ctx.value.cluster ?? ""}" of context "${name}" not found`);
  if (!cluster.value.server) throw new Error(`kubeconfig: cluster "${cluster.name}" of context "${name}" has no server`);
  const user = cfg.users.find((u) => u.name === ctx.value.user) ?? { name: "", value: {}, dir: cluster.dir };
  if (cluster.value["proxy-url"]) {
    throw new Error(`kubeconfig: cluster "${cluster.name}" uses proxy-url, which the operator does not support`);
  }
  if (user.value["auth-provider"]) return legacyAuthProvider(files, name, cluster.value.server, ctx.value.namespace);
  const server = cluster.value.server.replace(/\/+$/, "");
  if (server.startsWith("http:") && !cluster.value["insecure-skip-tls-verify"]) {
    throw new Error(`kubeconfig: plain http server ${server} needs insecure-skip-tls-verify: true`);
  }
  const exec = user.value.exec ? new ExecPlugin(user.value.exec, user.dir) : undefined;
  return {
    server,
    namespace: ctx.value.namespace || undefined,
    async credentials(force = false): Promise<Credentials> {
      const c = cluster.value;
      const u = user.value;
      const tls: TlsOptions = {
        ca: fileOrData(cluster.dir, c["certificate-authority"], c["certificate-authority-data"], `kubeconfig: certificate-authority of cluster "${cluster.name}"`),
        cert: fileOrData(user.dir, u["client-certificate"], u["client-certificate-data"], `kubeconfig: client-certificate of user "${user.name}"`),
        key: fileOrData(user.dir, u["client-key"], u["client-key-data"], `kubeconfig: client-key of user "${user.name}"`),
      };
      if (c["insecure-skip-tls-verify"]) tls.rejectUnauthorized = false;
      if (c["tls-server-name"]) tls.servername = c["tls-server-name"];
      const headers: Record<string, string> = {};
      const tokenFile = u.tokenFile ?? u["token-file"];
      if (u.token) headers.authorization = `Bearer ${u.token}`;
      else if (tokenFile) {
        const path = resolvePath(user.dir, tokenFile);
        headers.authorization = `Bearer ${readNamed(path, `kubeconfig: token-file of user "${user.name}" ${path}`).toString("utf8").trim()}`;
      }
      else if (u.username !== undefined && u.password !== undefined) {
        headers.authorization = `Basic ${Buffer.from(`${u.username}:${u.password}`).toString("base64")}`;
      }
      if (exec) {
        const cred = await exec.credential(force, server);
        if (cred.token) headers.authorization = `Bearer ${cred.token}`;
        if (cred.cert) tls.cert = cred.cert;
        if (cred.key) tls.key = cred.key;
      }
      if (u.as) headers["impersonate-user"] = u.as;
      if (u["as-uid"]) headers["impersonate-uid"] = u["as-uid"];
      if (u["as-groups"]?.length) headers["impersonate-group"] = u["as-groups"].join(", ");
      return { headers, tls };
    },
  };
}

/** The pod's service account: token (re-read each time: kubelet rotates it), CA, namespace. */
export function inClusterConfig(dir = SERVICE_ACCOUNT_DIR): ClusterConnection {
  const host = process.env.KUBERNETES_SERVICE_HOST;
  const port = process.env.KUBERNETES_SERVICE_PORT ?? "443";
  if (!host) throw new Error("not running in a cluster: KUBERNETES_SERVICE_HOST is not set");
  const hostPart = isIPv6(host) ? `[${host}]` : host;
  let namespace: string | undefined;
  try {
    namespace = readFileSync(join(dir, "namespace"), "utf8").trim() || undefined;
  } catch {
    namespace = undefined;
  }
  return {
    server: `https://${hostPart}:${port}`,
    namespace,
    source: "in-cluster config",
    async credentials(): Promise<Credentials> {
      const token = readFileSync(join(dir, "token"), "utf8").trim();
      return { headers: { authorization: `Bearer ${token}` }, tls: { ca: readFileSync(join(dir, "ca.crt")) } };
    },
  };
}

/** Adapter for a client-node KubeConfig the caller loaded (all its auth plugins apply). */
export function fromKubeConfig(kc: KubeConfigLike): ClusterConnection {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error("kubeconfig: no current cluster");
  return {
    server: cluster.server.replace(/\/+$/, ""),
    namespace: kc.getContextObject(kc.getCurrentContext())?.namespace?.trim() || undefined,
    async credentials(): Promise<Credentials> {
      const opts: HttpsRequestOptions = { headers: {} };
      await kc.applyToHTTPSOptions(opts);
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(opts.headers ?? {})) {
        if (v !== undefined) headers[k.toLowerCase()] = Array.isArray(v) ? v.join(", ") : String(v);
      }
      if (opts.auth && !headers.authorization) headers.authorization = `Basic ${Buffer.from(opts.auth).toString("base64")}`;
      const tls: TlsOptions = {
        ca: toBuffer(opts.ca),
        cert: toBuffer(opts.cert),
        key: toBuffer(opts.key),
      };
      if (opts.rejectUnauthorized === false) tls.rejectUnauthorized = false;
      if (opts.servername) tls.servername = opts.servername;
      return { headers, tls };
    },
  };
}

function toBuffer(v: unknown): Buffer | undefined {
  if (v === undefined || v === null) return undefined;
  if (Buffer.isBuffer(v)) return v;
  if (typeof v === "string") return Buffer.from(v);
  if (Array.isArray(v)) return Buffer.concat(v.map((x) => toBuffer(x) ?? Buffer.alloc(0)));
  return undefined;
}

/** Legacy auth-provider users: delegate to client-node, imported only now. */
function legacyAuthProvider(files: string[], context: string, server: string, namespace?: string): ClusterConnection {
  let delegate: Promise<ClusterConnection> | undefined;
  const load = async (): Promise<ClusterConnection> => {
    let clientNode: typeof ClientNodeModule;
    try {
      clientNode = await import("@kubernetes/client-node");
    } catch {
      // An optional dependency (the container image leaves it out: a pod uses its ServiceAccount).
      throw new Error(
        `the kubeconfig's user in context "${context}" uses an auth-provider, which needs the optional package @kubernetes/client-node (not installed: npm install @kubernetes/client-node); or give the user a token or an exec plugin instead`,
      );
    }
    const { KubeConfig } = clientNode;
    const kc = new KubeConfig();
    const saved = process.env.KUBECONFIG;
    try {
      process.env.KUBECONFIG = files.join(delimiter);
      kc.loadFromDefault();
    } finally {
      if (saved === undefined) delete process.env.KUBECONFIG;
      else process.env.KUBECONFIG = saved;
    }
    kc.setCurrentContext(context);
    return fromKubeConfig(kc);
  };
  return {
    server: server.replace(/\/+$/, ""),
    namespace: namespace || undefined,
    async credentials(force?: boolean): Promise<Credentials> {
      delegate ??= load();
      return (await delegate).credentials(force);
    },
  };
}

// ---------------------------------------------------------------------------------------
// exec credential plugins (client.authentication.k8s.io ExecCredential)

interface ExecResult {
  token?: string;
  cert?: Buffer;
  key?: Buffer;
  expiresAt?: number;
}

class ExecPlugin {
  private cached: ExecResult | undefined;
  private inFlight: Promise<ExecResult> | undefined;

  constructor(
    private readonly cfg: ExecConfig,
    private readonly dir: string,
  ) {}

  async credential(force: boolean, server: string): Promise<ExecResult> {
    const c = this.cached;
    // Refresh a little before expiry, and whenever the server said 401.
    if (!force && c && (c.expiresAt === undefined || c.expiresAt - 10_000 > Date.now())) return c;
    this.inFlight ??= this.run(server).finally(() => {
      this.inFlight = undefined;
    });
    this.cached = await this.inFlight;
    return this.cached;
  }

  private run(server: string): Promise<ExecResult> {
    const apiVersion = this.cfg.apiVersion ?? "client.authentication.k8s.io/v1";
    const env: NodeJS.ProcessEnv = { ...process.env };
    for (const e of this.cfg.env ?? []) env[e.name] = e.value;
    const spec: Record<string, unknown> = { interactive: false };
    if (this.cfg.provideClusterInfo) spec.cluster = { server };
    env.KUBERNETES_EXEC_INFO = JSON.stringify({ apiVersion, kind: "ExecCredential", spec });
    // A bare command name is looked up on PATH; a relative path is relative to the kubeconfig.
    const command = this.cfg.command.includes("/") ? resolvePath(this.dir, this.cfg.command) : this.cfg.command;
    return new Promise((resolvePromise, reject) => {
      execFile(command, this.cfg.args ?? [], { env, timeout: 60_000, maxBuffer: 1 << 20 }, (err, stdout, stderr) => {
        if (err) {
          // Not err.message: it spells out the command line, whose arguments may hold a secret
          // (a client secret given to a login plugin). Its own stderr, once.
          const said = String(stderr).trim().slice(0, 300);
          reject(new Error(`exec credential plugin ${this.cfg.command} ${howItEnded(err)}${said ? `: ${said}` : ""}`));
          return;
        }
        try {
          const parsed = parseJsonOr(String(stdout), (notJson) => new Error(notJson)) as {
            status?: { token?: string; clientCertificateData?: string; clientKeyData?: string; expirationTimestamp?: string };
          };
          const s = parsed.status ?? {};
          const expires = s.expirationTimestamp ? Date.parse(s.expirationTimestamp) : undefined;
          resolvePromise({
            token: s.token,
            cert: s.clientCertificateData ? Buffer.from(s.clientCertificateData) : undefined,
            key: s.clientKeyData ? Buffer.from(s.clientKeyData) : undefined,
            expiresAt: expires !== undefined && Number.isFinite(expires) ? expires : undefined,
          });
        } catch (e) {
          reject(new Error(`exec credential plugin ${this.cfg.command}: unparsable output (${(e as Error).message})`));
        }
      });
    });
  }
}

/** How an exec plugin's run failed, in words (never execFile's message: it spells out the arguments). */
function howItEnded(err: Error & { killed?: boolean; code?: unknown; signal?: unknown }): string {
  const { code, signal } = err;
  if (err.killed === true) return "timed out after 60 s";
  if (typeof code === "number") return `exited ${code}`;
  if (code === "ENOENT") return "was not found";
  if (code === "ERR_CHILD_PROCESS_STDIO_MAXBUFFER") return "printed more than 1 MiB";
  if (typeof signal === "string") return `was killed (${signal})`;
  return `could not be run (${String(code ?? err.name)})`;
}
