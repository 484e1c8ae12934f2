// A thin JSON REST client for the Kubernetes API.
//
// Why not @kubernetes/client-node's generated APIs: they push every object through
// ObjectSerializer (a deep, reflective copy per object, per request) which dominates CPU and
// allocation at 10,000 objects, its Watch/ListWatch carry the failure modes listed in
// docs/runtime.md, and merely importing it costs ~80 MB of RSS. Configuration comes from
// ./kubeconfig.ts (kubeconfig files, in-cluster, exec plugins; or a client-node KubeConfig the
// caller already has). The HTTP is undici with a keep-alive pool.
//
// Auth is re-derived every `authRefreshMs` (default 60 s, the interval at which client-go
// re-reads a service-account token file) and at once after a 401, so rotated bound
// service-account tokens and exec credentials are picked up without a restart. If the TLS
// material changes (rotated client certificate), the connection pool is replaced.
import { setTimeout as sleep } from "node:timers/promises";
import { Agent, type Dispatcher } from "undici";
import { parseJsonOr } from "../lib/errors.js";
import {
  fromKubeConfig,
  inClusterConfig,
  loadKubeconfig,
  type ClusterConnection,
  type KubeConfigLike,
  type TlsOptions,
} from "./kubeconfig.js";

// ---------------------------------------------------------------------------------------
// Object shapes (only what the runtime reads; everything else passes through untouched)

export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

/** metav1.ObjectMeta as it comes over the wire: the one declaration of these fields (src/api narrows it). */
export interface ObjectMeta {
  name?: string;
  generateName?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  deletionGracePeriodSeconds?: number;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  finalizers?: string[];
  ownerReferences?: OwnerReference[];
  managedFields?: unknown[];
}

/**
 * The metadata fields the runtime itself reads. Deliberately minimal so that any object type
 * (typed CRs, narrow local Secret shapes) satisfies `T extends KubeObject`.
 */
export type KubeObjectMeta = Pick<ObjectMeta, "name" | "namespace" | "uid" | "resourceVersion" | "generation">;

/** Any Kubernetes object: apiVersion/kind/metadata plus whatever the kind carries. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: KubeObjectMeta;
}

export interface ListMeta {
  resourceVersion: string;
  continue?: string;
  remainingItemCount?: number;
}

export interface ObjectList<T> {
  apiVersion?: string;
  kind?: string;
  items: T[];
  metadata: ListMeta;
}

/** meta/v1 Status, the body of every API error and of watch ERROR events. */
export interface Status {
  apiVersion?: string;
  kind?: string;
  status?: "Success" | "Failure" | (string & {});
  message?: string;
  reason?: string;
  code?: number;
  details?: {
    name?: string;
    group?: string;
    kind?: string;
    uid?: string;
    causes?: { reason?: string; message?: string; field?: string }[];
    retryAfterSeconds?: number;
  };
}

export type WatchEvent<T> =
  | { type: "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK"; object: T }
  | { type: "ERROR"; object: Status };

export interface ListOptions {
  labelSelector?: string;
  fieldSelector?: string;
  limit?: number;
  continue?: string;
  resourceVersion?: string;
  resourceVersionMatch?: "Exact" | "NotOlderThan";
  signal?: AbortSignal;
}

export interface WatchOptions {
  resourceVersion?: string;
  allowWatchBookmarks?: boolean;
  /** Server-side timeout: the API server ends the watch cleanly after this many seconds. */
  timeoutSeconds?: number;
  labelSelector?: string;
  fieldSelector?: string;
}

export type PatchType = "merge" | "json" | "strategic" | "apply";

/** One HTTP request the client made (each retry is one), reported to onRequest listeners. */
export interface KubeRequestInfo {
  method: string;
  /** Path without query, e.g. /apis/agentcompute.dev/v1alpha1/namespaces/a/skills/x/status. */
  path: string;
  /** HTTP status, or "error" when no answer came (network failure, timeout, abort). */
  status: number | "error";
  watch: boolean;
  /** Until the answer's headers (for a watch: until the stream opened). */
  durationMs: number;
}

export type KubeRequestListener = (info: KubeRequestInfo) => void;

export interface WriteOptions {
  fieldManager?: string;
  dryRun?: boolean;
  signal?: AbortSignal;
  /**
   * Do not parse the answer (the written object, managedFields and all): the call resolves
   * undefined. For writes whose result nobody reads (status, Events, connection Secrets): at
   * 10,000 resources that is tens of thousands of objects parsed and thrown away, each of
   * which comes back through the watch anyway.
   */
  discardResult?: boolean;
  /** Asked before each attempt, retries included; throws to refuse the write unsent (withWriteGate). */
  gate?: () => void;
}

export interface PatchOptions extends WriteOptions {
  /** Server-side apply only: take ownership of conflicting fields. */
  force?: boolean;
}

export interface DeleteOptions {
  propagationPolicy?: "Foreground" | "Background" | "Orphan";
  gracePeriodSeconds?: number;
  preconditions?: { uid?: string; resourceVersion?: string };
  dryRun?: boolean;
  signal?: AbortSignal;
  /** As WriteOptions.gate. */
  gate?: () => void;
}

// ---------------------------------------------------------------------------------------
// Errors

/** An error answered by the API server, carrying its Status. */
export class KubeApiError extends Error {
  override readonly name = "KubeApiError";
  /** HTTP status code (Status.code when the body carried one). */
  readonly status: number;
  /** Status.reason: NotFound, Conflict, AlreadyExists, Gone, Expired, Forbidden, Invalid, ... */
  readonly reason: string;
  readonly details: Status["details"];
  /** Seconds the server asked us to wait (Retry-After header or details.retryAfterSeconds). */
  readonly retryAfterSeconds: number | undefined;
  readonly method: string;
  readonly path: string;

  constructor(opts: {
    status: number;
    reason: string;
    message: string;
    details?: Status["details"];
    retryAfterSeconds?: number;
    method: string;
    path: string;
  }) {
    super(opts.message);
    this.status = opts.status;
    this.reason = opts.reason;
    this.details = opts.details;
    this.retryAfterSeconds = opts.retryAfterSeconds;
    this.method = opts.method;
    this.path = opts.path;
  }

  /** The wait asked for in the unit the controller reads it in (serverAskedWaitMs): the key comes back no sooner. */
  get retryAfterMs(): number | undefined {
    return this.retryAfterSeconds === undefined ? undefined : this.retryAfterSeconds * 1000;
  }

  static fromStatus(s: Status, fallbackCode: number, method: string, path: string, retryAfter?: number): KubeApiError {
    const status = typeof s.code === "number" && s.code > 0 ? s.code : fallbackCode;
    return new KubeApiError({
      status,
      reason: s.reason ?? reasonForCode(status),
      message: s.message ?? `${method} ${path}: HTTP ${status}`,
      details: s.details,
      retryAfterSeconds: retryAfter ?? s.details?.retryAfterSeconds,
      method,
      path,
    });
  }
}

/** A request that did not get an answer in time (client-side timeout). */
export class KubeTimeoutError extends Error {
  override readonly name = "KubeTimeoutError";
}

function reasonForCode(code: number): string {
  switch (code) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 405:
      return "MethodNotAllowed";
    case 406:
      return "NotAcceptable";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 415:
      return "UnsupportedMediaType";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 500:
      return "InternalError";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      return "Unknown";
  }
}

export function isKubeApiError(err: unknown): err is KubeApiError {
  return err instanceof KubeApiError;
}
export function isNotFound(err: unknown): boolean {
  return err instanceof KubeApiError && err.status === 404;
}
/** 409 caused by a stale resourceVersion (optimistic concurrency), not AlreadyExists. */
export function isConflict(err: unknown): boolean {
  return err instanceof KubeApiError && err.status === 409 && err.reason !== "AlreadyExists";
}
export function isAlreadyExists(err: unknown): boolean {
  return err instanceof KubeApiError && err.status === 409 && err.reason === "AlreadyExists";
}
/** 410: the resourceVersion (or continue token) is too old; relist. */
export function isGone(err: unknown): boolean {
  return err instanceof KubeApiError && (err.status === 410 || err.reason === "Expired" || err.reason === "Gone");
}
export function isForbidden(err: unknown): boolean {
  return err instanceof KubeApiError && err.status === 403;
}
export function isInvalid(err: unknown): boolean {
  return err instanceof KubeApiError && err.status === 422;
}

/**
 * True for errors worth retrying unchanged: network failures, client timeouts, 429, 5xx and
 * 409 Conflict (re-read and retry). Mirrors what controller-runtime users treat as requeue-able.
 */
export function isTransient(err: unknown): boolean {
  if (err instanceof KubeApiError) {
    return err.status === 429 || err.status >= 500 || isConflict(err);
  }
  if (err instanceof KubeTimeoutError) return true;
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code ?? (err.cause as { code?: unknown } | undefined)?.code;
    return typeof code === "string" && (code.startsWith("UND_ERR") || TRANSIENT_NET_CODES.has(code));
  }
  return false;
}

const TRANSIENT_NET_CODES = new Set([
  "ECONNRESET",
  "ECONNREFUSED",
  "ECONNABORTED",
  "ETIMEDOUT",
  "EPIPE",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENETDOWN",
]);

// ---------------------------------------------------------------------------------------
// Paths

export interface ResourceRef {
  /** "" or undefined for the core group */
  group?: string;
  version: string;
  plural: string;
  namespace?: string;
  name?: string;
  subresource?: string;
}

/** `/apis/{group}/{version}[/namespaces/{ns}]/{plural}[/{name}[/{subresource}]]`, or `/api/v1/...` for core. */
export function resourcePath(ref: ResourceRef): string {
  const base = ref.group ? `/apis/${ref.group}/${ref.version}` : `/api/${ref.version}`;
  let p = base;
  if (ref.namespace) p += `/namespaces/${encodeURIComponent(ref.namespace)}`;
  p += `/${ref.plural}`;
  if (ref.name !== undefined) {
    p += `/${encodeURIComponent(ref.name)}`;
    if (ref.subresource) p += `/${ref.subresource}`;
  } else if (ref.subresource) {
    throw new Error("resourcePath: a subresource needs a name");
  }
  return p;
}

export const secretsPath = (namespace?: string, name?: string): string =>
  resourcePath({ version: "v1", plural: "secrets", namespace, name });
export const configMapsPath = (namespace?: string, name?: string): string =>
  resourcePath({ version: "v1", plural: "configmaps", namespace, name });
export const eventsPath = (namespace?: string, name?: string): string =>
  resourcePath({ version: "v1", plural: "events", namespace, name });
export const namespacesPath = (name?: string): string => resourcePath({ version: "v1", plural: "namespaces", name });
export const leasesPath = (namespace: string, name?: string): string =>
  resourcePath({ group: "coordination.k8s.io", version: "v1", plural: "leases", namespace, name });
export const crdPath = (name?: string): string =>
  resourcePath({ group: "apiextensions.k8s.io", version: "v1", plural: "customresourcedefinitions", name });

/** `namespace/name`, or `name` for cluster-scoped objects (client-go's MetaNamespaceKeyFunc). */
export function objectKey(obj: KubeObject): string {
  const ns = obj.metadata.namespace;
  return ns ? `${ns}/${obj.metadata.name ?? ""}` : (obj.metadata.name ?? "");
}

// ---------------------------------------------------------------------------------------
// Client

export interface KubeClientOptions {
  /** Where and how to connect. Default: loadKubeconfig() ($KUBECONFIG, ~/.kube/config, in-cluster). */
  cluster?: ClusterConnection;
  /** Alternatively a @kubernetes/client-node KubeConfig (its auth plugins apply). */
  kubeConfig?: KubeConfigLike;
  /** Per-request timeout for everything but watches (default 30 s). */
  requestTimeoutMs?: number;
  /** How often auth headers and TLS material are re-derived from the KubeConfig (default 60 s). */
  authRefreshMs?: number;
  /** Retries of requests the server refused with 429 (or a 5xx carrying Retry-After); default 5. */
  maxRetries?: number;
  userAgent?: string;
  /** Max sockets per origin (default unbounded: every watch holds one on HTTP/1.1). */
  connections?: number;
}

interface AuthState {
  headers: Record<string, string>;
  tlsFingerprint: string;
  expiresAt: number;
}

type Query = Record<string, string | number | boolean | undefined>;

interface RawRequest {
  method: Dispatcher.HttpMethod;
  path: string;
  query?: Query;
  body?: unknown;
  contentType?: string;
  signal?: AbortSignal;
  /** 2xx: consume the body without parsing it (see WriteOptions.discardResult). */
  discard?: boolean;
  /** WriteOptions.gate. */
  gate?: () => void;
}

const CONTENT_TYPES: Record<PatchType, string> = {
  merge: "application/merge-patch+json",
  json: "application/json-patch+json",
  strategic: "application/strategic-merge-patch+json",
  apply: "application/apply-patch+yaml",
};

/** Where each write method takes its options: the gate rides in them. */
const WRITE_OPTIONS_AT: ReadonlyMap<PropertyKey, number> = new Map([
  ["create", 2],
  ["replace", 2],
  ["patch", 3],
  ["delete", 1],
]);

/**
 * `client` whose writes (create, replace, patch, delete) call `gate` before each attempt, the
 * client's own retries (429, Retry-After, a 401) included; it throws to refuse one unsent.
 * Everything else (reads, watches, close) is the client's own: one client underneath, with
 * its connections, auth and metrics.
 */
export function withWriteGate(client: KubeClient, gate: () => void): KubeClient {
  return new Proxy(client, {
    get(target, prop) {
      const value: unknown = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      const method = value as (...args: unknown[]) => unknown;
      const at = WRITE_OPTIONS_AT.get(prop);
      if (at === undefined) return method.bind(target);
      return (...args: unknown[]) => {
        const opts = args[at] as { gate?: () => void } | undefined;
        const inner = opts?.gate;
        const withGate = [...args];
        // A gate already in the options (a client wrapped twice) is asked as well.
        withGate[at] = { ...opts, gate: inner === undefined ? gate : () => (inner(), gate()) };
        return method.apply(target, withGate);
      };
    },
  });
}

export class KubeClient {
  readonly cluster: ClusterConnection;
  /** Server base URL without trailing slash (may carry a path prefix behind proxies). */
  readonly server: string;
  private readonly origin: string;
  private readonly basePath: string;
  private readonly requestTimeoutMs: number;
  private readonly authRefreshMs: number;
  private readonly maxRetries: number;
  private readonly userAgent: string;
  private readonly connections: number | undefined;
  private agent: Agent | undefined;
  private auth: AuthState | undefined;
  private authInFlight: Promise<AuthState> | undefined;
  private closed = false;
  private readonly listeners: KubeRequestListener[] = [];

  constructor(opts: KubeClientOptions = {}) {
    this.cluster = opts.cluster ?? (opts.kubeConfig ? fromKubeConfig(opts.kubeConfig) : loadKubeconfig());
    this.server = this.cluster.server.replace(/\/+$/, "");
    const url = new URL(this.server);
    this.origin = url.origin;
    this.basePath = url.pathname.replace(/\/+$/, "");
    this.requestTimeoutMs = opts.requestTimeoutMs ?? 30_000;
    this.authRefreshMs = opts.authRefreshMs ?? 60_000;
    this.maxRetries = opts.maxRetries ?? 5;
    this.userAgent = opts.userAgent ?? "agent-operator";
    this.connections = opts.connections;
  }

  /** Load from a kubeconfig file, or default resolution ($KUBECONFIG, ~/.kube/config, in-cluster). */
  static fromKubeconfig(
    path?: string,
    opts: Omit<KubeClientOptions, "kubeConfig" | "cluster"> & { context?: string } = {},
  ): KubeClient {
    const { context, ...rest } = opts;
    return new KubeClient({ ...rest, cluster: loadKubeconfig({ path: path || undefined, context }) });
  }

  /** In-cluster config from the pod's service account. */
  static inCluster(opts: Omit<KubeClientOptions, "kubeConfig" | "cluster"> = {}): KubeClient {
    return new KubeClient({ ...opts, cluster: inClusterConfig() });
  }

  /** The namespace of the current kubeconfig context (or the pod's namespace in-cluster). */
  currentNamespace(): string | undefined {
    return this.cluster.namespace;
  }

  /**
   * Be told of every request (metrics: rest_client_requests_total; the benchmark counts the
   * operator's writes with it). Listeners must be quick and must not throw. Returns an
   * unsubscribe function.
   */
  onRequest(listener: KubeRequestListener): () => void {
    this.listeners.push(listener);
    return () => {
      const i = this.listeners.indexOf(listener);
      if (i >= 0) this.listeners.splice(i, 1);
    };
  }

  /** Same as the module-level resourcePath(), for callers that only hold a client. */
  resourcePath(ref: ResourceRef): string {
    return resourcePath(ref);
  }

  // --- verbs ---------------------------------------------------------------------------

  async get<T>(path: string, opts: { signal?: AbortSignal } = {}): Promise<T> {
    return this.json<T>({ method: "GET", path, signal: opts.signal });
  }

  async list<T>(path: string, opts: ListOptions = {}): Promise<ObjectList<T>> {
    const list = await this.json<ObjectList<T>>({
      method: "GET",
      path,
      signal: opts.signal,
      query: {
        labelSelector: opts.labelSelector,
        fieldSelector: opts.fieldSelector,
        limit: opts.limit,
        continue: opts.continue,
        resourceVersion: opts.resourceVersion,
        resourceVersionMatch: opts.resourceVersionMatch,
      },
    });
    // The server sends `items: null` for an empty list of some kinds; normalise.
    if (!Array.isArray(list.items)) list.items = [];
    if (!list.metadata) list.metadata = { resourceVersion: "" };
    return list;
  }

  create(path: string, body: unknown, opts: WriteOptions & { discardResult: true }): Promise<void>;
  create<T>(path: string, body: unknown, opts?: WriteOptions): Promise<T>;
  async create<T>(path: string, body: unknown, opts: WriteOptions = {}): Promise<T> {
    return this.json<T>({ method: "POST", path, body, signal: opts.signal, query: writeQuery(opts), discard: opts.discardResult, gate: opts.gate });
  }

  async replace<T>(path: string, body: unknown, opts: WriteOptions = {}): Promise<T> {
    return this.json<T>({ method: "PUT", path, body, signal: opts.signal, query: writeQuery(opts), gate: opts.gate });
  }

  patch(path: string, body: unknown, type: PatchType, opts: PatchOptions & { discardResult: true }): Promise<void>;
  patch<T>(path: string, body: unknown, type: PatchType, opts?: PatchOptions): Promise<T>;
  async patch<T>(path: string, body: unknown, type: PatchType, opts: PatchOptions = {}): Promise<T> {
    if (type === "apply" && !opts.fieldManager) throw new Error("server-side apply needs a fieldManager");
    return this.json<T>({
      method: "PATCH",
      path,
      body,
      contentType: CONTENT_TYPES[type],
      signal: opts.signal,
      discard: opts.discardResult,
      query: { ...writeQuery(opts), force: type === "apply" && opts.force ? true : undefined },
      gate: opts.gate,
    });
  }

  /** Delete; returns the server's answer (the object while finalizers hold it, or a Status). */
  async delete<T = unknown>(path: string, opts: DeleteOptions = {}): Promise<T> {
    const body: Record<string, unknown> = { apiVersion: "v1", kind: "DeleteOptions" };
    if (opts.propagationPolicy) body.propagationPolicy = opts.propagationPolicy;
    if (opts.gracePeriodSeconds !== undefined) body.gracePeriodSeconds = opts.gracePeriodSeconds;
    if (opts.preconditions) body.preconditions = opts.preconditions;
    return this.json<T>({
      method: "DELETE",
      path,
      body,
      signal: opts.signal,
      query: { dryRun: opts.dryRun ? "All" : undefined },
      gate: opts.gate,
    });
  }

  /**
   * Watch a collection. Yields events as the server streams them (newline-delimited JSON,
   * parsed across arbitrary chunk boundaries). Ends when the server closes the stream
   * (timeoutSeconds elapsed) or throws on transport errors / non-200 answers. ERROR events
   * are yielded, not thrown: the caller decides (410 means relist). No client-side timeout:
   * the caller owns liveness (the informer runs a watchdog and aborts `signal`).
   */
  async *watch<T>(path: string, opts: WatchOptions, signal?: AbortSignal): AsyncGenerator<WatchEvent<T>, void, undefined> {
    const query: Query = {
      watch: true,
      resourceVersion: opts.resourceVersion,
      allowWatchBookmarks: opts.allowWatchBookmarks ? true : undefined,
      timeoutSeconds: opts.timeoutSeconds,
      labelSelector: opts.labelSelector,
      fieldSelector: opts.fieldSelector,
    };
    const res = await this.send({ method: "GET", path, query, signal }, true);
    if (res.statusCode !== 200) {
      throw await this.errorFrom(res, "GET", path);
    }
    const decoder = new TextDecoder("utf-8");
    let buffered = "";
    try {
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        // stream:true keeps a multi-byte UTF-8 sequence split across chunks intact.
        const text = decoder.decode(chunk, { stream: true });
        let start = 0;
        let nl = text.indexOf("\n");
        if (nl === -1) {
          buffered += text;
          continue;
        }
        while (nl !== -1) {
          const line = buffered + text.slice(start, nl);
          buffered = "";
          const ev = parseWatchLine<T>(line, path);
          if (ev) yield ev;
          start = nl + 1;
          nl = text.indexOf("\n", start);
        }
        buffered = text.slice(start);
      }
      const rest = buffered + decoder.decode();
      const ev = parseWatchLine<T>(rest, path);
      if (ev) yield ev;
    } finally {
      // Reached on normal end, on error, and when the consumer stops iterating (break/return):
      // destroying the body releases the socket instead of leaking a half-read connection.
      if (!res.body.destroyed) res.body.destroy();
    }
  }

  /** Close the connection pool (in-flight watches are torn down). */
  async close(): Promise<void> {
    this.closed = true;
    const a = this.agent;
    this.agent = undefined;
    if (a) await a.destroy().catch(() => undefined);
  }

  // --- plumbing ------------------------------------------------------------------------

  private async json<T>(req: RawRequest): Promise<T> {
    const res = await this.send(req, false);
    if (res.statusCode >= 200 && res.statusCode < 300) {
      if (req.discard) {
        await res.body.dump({ limit: 4 * 1024 * 1024 });
        return undefined as T;
      }
      const text = await res.body.text();
      if (text.length === 0) return undefined as T;
      return parseJsonOr(text, (notJson) => new Error(`${req.method} ${req.path}: the API server answered HTTP ${res.statusCode} with a body that is ${notJson}`)) as T;
    }
    throw await this.errorFrom(res, req.method, req.path);
  }

  /**
   * One request with: fresh auth, a timeout (not for watches), one retry after 401 with
   * re-derived credentials, and client-go's Retry-After handling (429, or 5xx with
   * Retry-After: wait and retry, up to maxRetries; the server refused before doing anything).
   */
  private async send(req: RawRequest, isWatch: boolean): Promise<Dispatcher.ResponseData> {
    let authRetried = false;
    for (let attempt = 0; ; attempt++) {
      // At every attempt: one made after a Retry-After wait or a 401 must not go out once the
      // client is closed (the leadership lost: nothing here may write beside the next leader).
      if (this.closed) throw new Error("KubeClient is closed");
      // The caller's signal bounds the wait for credentials (an exec plugin that hangs: a lease
      // renewal must still give up by its deadline); the request's own timeout starts after it,
      // as a slow plugin (an SSO round trip) is no slow API server.
      const auth = await untilAborted(this.authState(false), req.signal);
      // After the wait for credentials or a Retry-After: what allowed the write may be over.
      req.gate?.();
      const agent = this.agent;
      if (!agent || this.closed) throw new Error("KubeClient is closed");
      const headers: Record<string, string> = {
        accept: "application/json",
        "user-agent": this.userAgent,
        ...auth.headers,
      };
      let body: string | undefined;
      if (req.body !== undefined) {
        body = JSON.stringify(req.body);
        headers["content-type"] = req.contentType ?? "application/json";
      }
      const timeoutSignal = isWatch ? undefined : AbortSignal.timeout(this.requestTimeoutMs);
      const signals = [req.signal, timeoutSignal].filter((s): s is AbortSignal => s !== undefined);
      const signal = signals.length === 0 ? undefined : signals.length === 1 ? signals[0] : AbortSignal.any(signals);
      let res: Dispatcher.ResponseData;
      const started = performance.now();
      try {
        res = await agent.request({
          origin: this.origin,
          path: this.basePath + req.path + queryString(req.query),
          method: req.method,
          headers,
          body,
          signal,
          // Watches: no body timeout (the informer's watchdog owns liveness); otherwise the
          // overall AbortSignal.timeout bounds the request and these are a backstop.
          headersTimeout: isWatch ? 60_000 : this.requestTimeoutMs,
          bodyTimeout: isWatch ? 0 : this.requestTimeoutMs,
        });
        this.report(req, res.statusCode, isWatch, started);
      } catch (err) {
        this.report(req, "error", isWatch, started);
        if (timeoutSignal?.aborted && !req.signal?.aborted) {
          throw new KubeTimeoutError(`${req.method} ${req.path}: no answer within ${this.requestTimeoutMs} ms`, {
            cause: err,
          });
        }
        throw err;
      }
      if (res.statusCode === 401 && !authRetried) {
        // Rotated token: drop the cached credentials and try once more.
        authRetried = true;
        await res.body.dump().catch(() => undefined);
        await untilAborted(this.authState(true), req.signal);
        attempt--;
        continue;
      }
      const retryAfter = parseRetryAfter(res.headers["retry-after"]);
      if ((res.statusCode === 429 || (res.statusCode >= 500 && retryAfter !== undefined)) && attempt < this.maxRetries) {
        await res.body.dump().catch(() => undefined);
        const waitMs = Math.min((retryAfter ?? 1) * 1000, 30_000);
        await sleep(waitMs, undefined, { signal: req.signal });
        continue;
      }
      return res;
    }
  }

  private report(req: RawRequest, status: number | "error", watch: boolean, started: number): void {
    if (this.listeners.length === 0) return;
    const info: KubeRequestInfo = { method: req.method, path: req.path, status, watch, durationMs: performance.now() - started };
    for (const l of this.listeners) {
      try {
        l(info);
      } catch {
        // a listener's failure is not the request's
      }
    }
  }

  private async errorFrom(res: Dispatcher.ResponseData, method: string, path: string): Promise<KubeApiError> {
    let text = "";
    try {
      text = await res.body.text();
    } catch {
      // body unreadable: fall back to the status line
    }
    const retryAfter = parseRetryAfter(res.headers["retry-after"]);
    let status: Status = {};
    try {
      const parsed: unknown = JSON.parse(text);
      if (parsed && typeof parsed === "object") status = parsed as Status;
    } catch {
      status = { message: `${method} ${path}: HTTP ${res.statusCode}${text ? `: ${text.slice(0, 200)}` : ""}` };
    }
    return KubeApiError.fromStatus(status, res.statusCode, method, path, retryAfter);
  }

  private async authState(force: boolean): Promise<AuthState> {
    const now = Date.now();
    if (!force && this.auth && this.auth.expiresAt > now && this.agent) return this.auth;
    if (this.authInFlight) return this.authInFlight;
    this.authInFlight = this.deriveAuth(force).finally(() => {
      this.authInFlight = undefined;
    });
    return this.authInFlight;
  }

  private async deriveAuth(force: boolean): Promise<AuthState> {
    const { headers, tls } = await this.cluster.credentials(force);
    // Closed meanwhile: no new connection pool (it would be left open, and used).
    if (this.closed) throw new Error("KubeClient is closed");
    const fingerprint = tlsFingerprint(tls);
    if (!this.agent || !this.auth || this.auth.tlsFingerprint !== fingerprint) {
      const old = this.agent;
      this.agent = new Agent({
        // HTTP/1.1 only. undici 8 negotiates HTTP/2 by default, which multiplexes every watch
        // and request onto ONE connection: a single silently stalled connection (half-open
        // after an LB/NAT drop) then freezes all watches and all requests at once, and
        // undici's h2 PINGs have no timeout to notice (client-go needs ReadIdleTimeout +
        // PingTimeout for exactly this). On HTTP/1.1 each watch has its own socket, aborting
        // it destroys that socket, and a stall stays contained to one watch or one request.
        allowH2: false,
        connections: this.connections ?? null,
        keepAliveTimeout: 30_000,
        connect: {
          ...stripUndefined(tls),
          // TCP keepalive detects dead peers (half-open sockets after a NAT/LB drop) that
          // would otherwise hang a watch until the watchdog fires. 30 s as client-go.
          keepAlive: true,
          keepAliveInitialDelay: 30_000,
        } as Agent.Options["connect"],
      });
      // Let in-flight requests on the old pool finish; new ones use the new material.
      if (old) void old.close().catch(() => undefined);
    }
    this.auth = { headers, tlsFingerprint: fingerprint, expiresAt: Date.now() + this.authRefreshMs };
    return this.auth;
  }
}

function writeQuery(opts: WriteOptions): Query {
  return { fieldManager: opts.fieldManager, dryRun: opts.dryRun ? "All" : undefined };
}

function queryString(q: Query | undefined): string {
  if (!q) return "";
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) {
    if (v !== undefined && v !== "") params.set(k, String(v));
  }
  const s = params.toString();
  return s ? `?${s}` : "";
}

function parseRetryAfter(v: string | string[] | undefined): number | undefined {
  const s = Array.isArray(v) ? v[0] : v;
  if (s === undefined) return undefined;
  const n = Number(s);
  if (Number.isFinite(n) && n >= 0) return n;
  const date = Date.parse(s);
  if (Number.isFinite(date)) return Math.max(0, (date - Date.now()) / 1000);
  return undefined;
}

function parseWatchLine<T>(line: string, path: string): WatchEvent<T> | undefined {
  const trimmed = line.trim();
  if (trimmed.length === 0) return undefined;
  // Unlike client-node (which drops unparsable lines silently, losing events), a corrupt
  // frame ends the watch with an error: the informer reconnects from the last good
  // resourceVersion and nothing is lost.
  const parsed = parseJsonOr(trimmed, (notJson) => new Error(`watch ${path}: unparsable event (${notJson})`));
  if (!parsed || typeof parsed !== "object") throw new Error(`watch ${path}: event is not an object`);
  const ev = parsed as { type?: unknown; object?: unknown };
  if (typeof ev.type !== "string" || !ev.object || typeof ev.object !== "object") {
    throw new Error(`watch ${path}: malformed event`);
  }
  return ev as WatchEvent<T>;
}

function tlsFingerprint(t: TlsOptions): string {
  const part = (v: Buffer | boolean | string | undefined): string =>
    v === undefined ? "" : Buffer.isBuffer(v) ? v.toString("base64") : String(v);
  return [t.ca, t.cert, t.key, t.rejectUnauthorized, t.servername].map(part).join("|");
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  const out: Partial<T> = {};
  for (const [k, v] of Object.entries(o)) {
    if (v !== undefined) (out as Record<string, unknown>)[k] = v;
  }
  return out;
}

/** `p`, or the signal's reason once it aborts first (`p` goes on, unobserved). */
function untilAborted<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return p;
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason as Error);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(e instanceof Error ? e : new Error(String(e)));
      },
    );
  });
}
