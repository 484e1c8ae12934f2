// The emulator's public option and log types, and the one place their defaults live.

export interface EmulatorOptions {
  /** Interface to listen on; default "127.0.0.1". */
  host?: string;
  /** Port; default 0 (a free port). */
  port?: number;
  /** Accepted X-API-Key; default "emulator-api-key". */
  apiKey?: string;
  /** Accepted client_credentials pairs. */
  clients?: { clientId: string; clientSecret: string }[];
  /** Token lifetime; default 900. Returned as expires_in. */
  tokenTTLSeconds?: number;
  /** Answer /token without expires_in (clients must then assume 900 s). */
  omitExpiresIn?: boolean;
  /** Added to every response; default 0. */
  latencyMs?: number;
  /** Uniform extra 0..jitterMs on top of latencyMs. */
  jitterMs?: number;
  /**
   * 0..1: that fraction of service calls (not /token) fail: half answer 500, half drop the
   * connection without a response.
   */
  errorRate?: number;
  /** Requests per second over service calls (token bucket, burst = 1 s worth); beyond it 429. */
  rateLimit?: number;
  /**
   * Max live VMs; allocate answers 503 pool_exhausted beyond it. Default unlimited. The pool
   * config's max_total (PUT /compute/v1/pool/config) limits too: the smaller wins.
   */
  poolSize?: number;
  /** Load at start if present, save on change (debounced) and on close. */
  stateFile?: string;
  /**
   * Cap on `limit` for list endpoints; default none (Infinity). A cap tries a client against a
   * service that caps its pages silently, which none is published to do: SERVICE.md has clients
   * page until a short page, and a cap by default would fail those that ask for more than it.
   */
  maxPageSize?: number;
  /** Clock in ms for expiry and timestamps; default Date.now. */
  now?: () => number;
  /** VM expiry sweep period; default 1000. */
  sweepIntervalMs?: number;
  /** The caller's org (VM lists are scoped to it); default "org-emulator". */
  orgId?: string;
  /** Tiers that allocate rejects with 400 (so tests can show a service 400 passing through); default ["unknown-tier"]. */
  rejectTiers?: string[];
  /** Cap on the in-memory request log; default 200_000 entries (counters are never capped). */
  requestLogLimit?: number;
  /**
   * Directory the VMs' workspaces live in (`<runtimeDir>/<vm id>/workspace`). Default: a fresh
   * directory under os.tmpdir(), removed on close. Fixed at start.
   */
  runtimeDir?: string;
  /** Output kept per execution (command or code block), in bytes; beyond it, a marker. Default 1 MiB. */
  outputLimitBytes?: number;
  /**
   * agentd leaves zero values (0, false, "", empty lists) out of its JSON answers and end
   * events, as a Go server's `omitempty` does: a finished command's status without `exit_code`
   * means 0. The published models require none of these fields. Default false.
   */
  agentdOmitEmpty?: boolean;
  /**
   * agentd's command streams carry no `start` event: the command's id is nowhere in the stream
   * (the published SSEEvent names no events, so a client must not rest on one). Code streams
   * keep theirs. Default false.
   */
  agentdNoStartEvent?: boolean;
  /**
   * A background command's answer streams its whole run (output, end), as a foreground one's,
   * instead of ending after its start event: the published description says only that the
   * answer is an event stream, so a client must not wait for that stream to end. Default false.
   */
  agentdBackgroundStreams?: boolean;
  /**
   * Refuse (400) a request body's fields the published request model does not have, and those
   * it says a client may not set. Default false: they are dropped, as a Go service decoding
   * into its request struct drops them, so a client that sends back what it read works. The
   * project's own tests turn it on, so that a misspelt key of the operator's is seen.
   */
  strictBodies?: boolean;
}

export interface RequestLogEntry {
  /** Arrival time on the emulator's clock (ms). */
  time: number;
  method: string;
  path: string;
  /** The raw query string without "?"; "" when none. */
  query: string;
  status: number | "dropped";
  /** Stable name of the operation, e.g. "agents.create", "vms.renew", "token". */
  operation: string;
  /** The client's User-Agent header, when it sent one (who made the call: a replica names itself there). */
  userAgent?: string;
}

export type FaultAction =
  | { status: number; body?: unknown; retryAfterSeconds?: number }
  | { drop: "before" }
  | { drop: "after" }
  | { delayMs: number };

export interface FaultRule {
  /** Match on method; omitted = any. */
  method?: string;
  /** A string is an exact pathname; omitted = any. */
  path?: RegExp | string;
  /** How many requests it applies to; default 1. Infinity is allowed. */
  times?: number;
  action: FaultAction;
}

/** Counters since start (or the last clearRequests); unlike the log they are never trimmed. */
export interface RequestStats {
  total: number;
  byOperation: Record<string, number>;
  byStatus: Record<string, number>;
}

export type ResolvedOptions = Required<Omit<EmulatorOptions, "stateFile" | "poolSize" | "rateLimit" | "runtimeDir">> & {
  runtimeDir: string | undefined;
  stateFile: string | undefined;
  poolSize: number | undefined;
  rateLimit: number | undefined;
};

export const DEFAULT_API_KEY = "emulator-api-key";

export function resolveOptions(opts: EmulatorOptions): ResolvedOptions {
  const resolved: ResolvedOptions = {
    host: opts.host ?? "127.0.0.1",
    port: opts.port ?? 0,
    apiKey: opts.apiKey ?? DEFAULT_API_KEY,
    clients: opts.clients ?? [],
    tokenTTLSeconds: opts.tokenTTLSeconds ?? 900,
    omitExpiresIn: opts.omitExpiresIn ?? false,
    latencyMs: opts.latencyMs ?? 0,
    jitterMs: opts.jitterMs ?? 0,
    errorRate: opts.errorRate ?? 0,
    rateLimit: opts.rateLimit,
    poolSize: opts.poolSize,
    stateFile: opts.stateFile,
    maxPageSize: opts.maxPageSize ?? Infinity,
    now: opts.now ?? Date.now,
    sweepIntervalMs: opts.sweepIntervalMs ?? 1000,
    orgId: opts.orgId ?? "org-emulator",
    rejectTiers: opts.rejectTiers ?? ["unknown-tier"],
    requestLogLimit: opts.requestLogLimit ?? 200_000,
    runtimeDir: opts.runtimeDir,
    outputLimitBytes: opts.outputLimitBytes ?? 1 << 20,
    agentdOmitEmpty: opts.agentdOmitEmpty ?? false,
    agentdNoStartEvent: opts.agentdNoStartEvent ?? false,
    agentdBackgroundStreams: opts.agentdBackgroundStreams ?? false,
    strictBodies: opts.strictBodies ?? false,
  };
  validateOptions(resolved);
  return resolved;
}

/** Fail at start (or at setOptions) rather than behave strangely later. */
export function validateOptions(o: ResolvedOptions): void {
  const nonNegative = (name: string, v: number): void => {
    if (!Number.isFinite(v) || v < 0) throw new RangeError(`emulator option ${name} must be a non-negative number, got ${v}`);
  };
  const positive = (name: string, v: number): void => {
    if (!Number.isFinite(v) || v <= 0) throw new RangeError(`emulator option ${name} must be a positive number, got ${v}`);
  };
  if (!Number.isInteger(o.port) || o.port < 0 || o.port > 65535) {
    throw new RangeError(`emulator option port must be an integer 0..65535, got ${o.port}`);
  }
  if (o.apiKey === "") throw new RangeError("emulator option apiKey must not be empty");
  positive("tokenTTLSeconds", o.tokenTTLSeconds);
  nonNegative("latencyMs", o.latencyMs);
  nonNegative("jitterMs", o.jitterMs);
  if (!(o.errorRate >= 0 && o.errorRate <= 1)) {
    throw new RangeError(`emulator option errorRate must be within 0..1, got ${o.errorRate}`);
  }
  if (o.rateLimit !== undefined) positive("rateLimit", o.rateLimit);
  if (o.poolSize !== undefined && (!Number.isInteger(o.poolSize) || o.poolSize < 0)) {
    throw new RangeError(`emulator option poolSize must be a non-negative integer, got ${o.poolSize}`);
  }
  if (o.maxPageSize !== Infinity && (!Number.isInteger(o.maxPageSize) || o.maxPageSize < 1)) {
    throw new RangeError(`emulator option maxPageSize must be a positive integer, got ${o.maxPageSize}`);
  }
  positive("sweepIntervalMs", o.sweepIntervalMs);
  positive("requestLogLimit", o.requestLogLimit);
  if (!Number.isInteger(o.outputLimitBytes) || o.outputLimitBytes < 1) {
    throw new RangeError(`emulator option outputLimitBytes must be a positive integer, got ${o.outputLimitBytes}`);
  }
  if (o.runtimeDir === "") throw new RangeError("emulator option runtimeDir must not be empty");
}
