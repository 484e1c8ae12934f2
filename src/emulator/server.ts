// The HTTP front of the emulator. Per request, on arrival: rate limit (429) -> fault rules ->
// random errors decide whether the request is answered by the service at all; then the
// latency knob delays it; then it is routed, authenticated and handled.
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { TokenStore } from "./auth.js";
import { defaultCode, errorBody, familyOf, ServiceError, type Family } from "./errors.js";
import { FaultInjector } from "./faults.js";
import { accessRoutes } from "./handlers/access.js";
import { accountRoutes } from "./handlers/account.js";
import { deploymentRoutes } from "./handlers/deployments.js";
import { forwardRoutes } from "./handlers/forward.js";
import { poolRoutes } from "./handlers/pool.js";
import { registryRoutes } from "./handlers/registry.js";
import { skillRoutes } from "./handlers/skills.js";
import { toolRoutes } from "./handlers/tools.js";
import { vmRoutes } from "./handlers/vms.js";
import { WebSocketEndpoint, wsPath } from "./handlers/ws.js";
import { bodyParser, readBody, send } from "./http.js";
import type { EmulatorOptions, FaultRule, RequestLogEntry, RequestStats, ResolvedOptions } from "./options.js";
import { resolveOptions } from "./options.js";
import { loadState, STATE_FILE_VERSION, StateSaver } from "./persistence.js";
import { callRateLimit, retryAfterSeconds } from "./ratelimit.js";
import { RequestLog, requestLine } from "./requestlog.js";
import { Router, type HandlerResult, type Match } from "./router.js";
import { RuntimeManager } from "./runtime/manager.js";
import { EmulatorState } from "./state.js";

export interface Emulator {
  /** e.g. http://127.0.0.1:PORT; the service lives under {baseURL}/registry/v1 and {baseURL}/compute/v1. */
  readonly baseURL: string;
  /** e.g. http://127.0.0.1:PORT/auth; the token endpoint is POST {authURL}/token. */
  readonly authURL: string;
  /** Every request served, /token included, oldest first (bounded by requestLogLimit). */
  readonly requests: readonly RequestLogEntry[];
  /** Counters by operation and status since start or the last clearRequests(); never trimmed. */
  stats(): RequestStats;
  clearRequests(): void;
  /** Change knobs at run time; host, port and stateFile are fixed at start. */
  setOptions(patch: Partial<EmulatorOptions>): void;
  injectFault(rule: FaultRule): void;
  clearFaults(): void;
  /** Every issued token becomes invalid now. */
  revokeTokens(): void;
  /** Direct, out-of-band access for tests (drift). */
  readonly state: EmulatorState;
  /**
   * The VMs' local runtimes: `runtimes.get(vmId)?.workspace` (the host directory that is the
   * VM's /workspace), `.executions` (per VM), `runtimes.executions` (all VMs, ever).
   */
  readonly runtimes: RuntimeManager;
  /** Also kills every process the VMs started and removes the runtime directory it created. */
  close(): Promise<void>;
}

type Outcome =
  | { kind: "answer"; status: number; body: unknown; headers: Record<string, string> }
  | { kind: "drop" }
  | { kind: "handle"; after?: "drop" | { delayMs: number } };

const routes = [
  ...registryRoutes,
  ...toolRoutes,
  ...deploymentRoutes,
  ...vmRoutes,
  ...forwardRoutes,
  ...poolRoutes,
  ...skillRoutes,
  ...accountRoutes,
  ...accessRoutes,
];

const sleep = (ms: number): Promise<void> =>
  ms > 0
    ? new Promise((resolve) => {
        // Unref'd: an in-flight slow answer must not keep a closed emulator's process alive.
        setTimeout(resolve, ms).unref();
      })
    : Promise.resolve();

export async function startEmulator(input: EmulatorOptions = {}): Promise<Emulator> {
  const options: ResolvedOptions = resolveOptions(input);
  const startedAt = options.now();
  const runtimes = new RuntimeManager({ root: options.runtimeDir, outputLimitBytes: () => options.outputLimitBytes, now: () => options.now() });
  let wsBase = ""; // ws://host:port, once listening
  const state = new EmulatorState({
    now: () => options.now(),
    poolSize: () => options.poolSize,
    rejectTiers: () => options.rejectTiers,
    orgId: () => options.orgId,
    configuredClients: () => options.clients,
    startedAt: () => startedAt,
    wsURL: (id) => `${wsBase}${wsPath(id)}`,
  });
  const tokens = new TokenStore({
    now: () => options.now(),
    apiKey: () => options.apiKey,
    verifyClient: (id, secret) => state.verifyClient(id, secret),
    tokenTTLSeconds: () => options.tokenTTLSeconds,
    omitExpiresIn: () => options.omitExpiresIn,
  });
  // A revoked client's tokens stop working at once, not when they expire.
  state.onClientRevoked = (clientId) => tokens.revokeClient(clientId);
  // Each live VM has a local runtime (agentd): started with it, stopped with it.
  state.onVMStart = (vm) => {
    runtimes.create(vm, vm.skills.flatMap((name) => state.skills.get(name) ?? []));
  };
  state.onVMEnd = (vm) => runtimes.destroy(vm.id);

  let saver: StateSaver | undefined;
  if (options.stateFile !== undefined) {
    const loaded = await loadState(options.stateFile);
    if (loaded) {
      state.restore(loaded);
      tokens.restore(loaded.tokens);
    }
    saver = new StateSaver(options.stateFile, () => ({ version: STATE_FILE_VERSION, ...state.snapshot(), tokens: tokens.snapshot() }));
    const s = saver;
    state.onChange = () => s.changed();
    tokens.onChange = () => s.changed();
  }

  const router = new Router(routes);
  const faults = new FaultInjector();
  const log = new RequestLog(() => options.requestLogLimit);
  let bucket = options.rateLimit !== undefined ? callRateLimit(options.rateLimit) : undefined;
  let closed = false;

  function decide(family: Family, method: string, path: string): Outcome {
    const serviceCall = family !== "auth";
    if (serviceCall && bucket) {
      const waitMs = bucket.take();
      if (waitMs > 0) {
        const retryAfter = retryAfterSeconds(waitMs);
        const message = `rate limit of ${options.rateLimit} requests/s exceeded, retry after ${retryAfter} s`;
        return { kind: "answer", status: 429, body: errorBody(family, 429, "rate_limited", message), headers: { "Retry-After": String(retryAfter) } };
      }
    }
    const fault = faults.take(method, path);
    if (fault) {
      if ("status" in fault) {
        const headers: Record<string, string> = fault.retryAfterSeconds !== undefined ? { "Retry-After": String(fault.retryAfterSeconds) } : {};
        const body = fault.body !== undefined ? fault.body : errorBody(family, fault.status, defaultCode(fault.status), `injected fault: ${fault.status}`);
        return { kind: "answer", status: fault.status, body, headers };
      }
      if ("delayMs" in fault) return { kind: "handle", after: { delayMs: fault.delayMs } };
      return fault.drop === "before" ? { kind: "drop" } : { kind: "handle", after: "drop" };
    }
    if (serviceCall && options.errorRate > 0 && Math.random() < options.errorRate) {
      if (Math.random() < 0.5) return { kind: "drop" };
      return { kind: "answer", status: 500, body: errorBody(family, 500, "internal_error", "injected random error"), headers: {} };
    }
    return { kind: "handle" };
  }

  async function run(match: Match, family: Family, method: string, path: string, query: string, req: IncomingMessage, raw: Buffer): Promise<HandlerResult> {
    try {
      if (match.kind === "not_found") throw new ServiceError(404, "not_found", `no route for ${method} ${path}`);
      if (match.kind === "method_not_allowed") {
        const allow = match.allow.join(", ");
        throw new ServiceError(405, "method_not_allowed", `method ${method} is not allowed on ${path} (allowed: ${allow})`, { Allow: allow });
      }
      if (match.route.auth) tokens.check(req.headers.authorization);
      return await match.route.handler({
        params: match.params,
        query: new URLSearchParams(query),
        headers: req.headers,
        body: bodyParser(raw),
        state,
        tokens,
        options,
        startedAt,
        method,
        raw,
        runtimes,
      });
    } catch (err) {
      if (err instanceof ServiceError) return { status: err.status, body: errorBody(family, err.status, err.code, err.message), headers: err.headers };
      // Anything else is a bug in the emulator: answer like a service would, but say so loudly.
      console.error(`emulator: ${method} ${path} failed:`, err);
      return { status: 500, body: errorBody(family, 500, "internal_error", `internal error: ${String(err)}`) };
    }
  }

  async function onRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const arrival = options.now();
    const line = requestLine(req);
    const { method, path, query } = line;
    const family = familyOf(path);
    const match = router.match(method, path);
    const operation = match.kind === "ok" ? match.route.operation : `route.${match.kind}`;
    const record = (status: number | "dropped"): void => log.add({ time: arrival, ...line, status, operation });
    const drop = (): void => {
      req.socket.destroy();
      record("dropped");
    };
    const answer = (status: number, body: unknown, headers: Record<string, string> = {}): void => {
      send(res, status, body, headers);
      record(status);
    };

    let raw: Buffer | "too_large";
    try {
      raw = await readBody(req, match.kind === "ok" ? match.route.maxBodyBytes : undefined);
    } catch {
      record("dropped"); // the client went away
      return;
    }

    const outcome = decide(family, method, path);
    await sleep(options.latencyMs + (options.jitterMs > 0 ? Math.random() * options.jitterMs : 0));
    if (closed) return drop();
    if (outcome.kind === "drop") return drop();
    if (outcome.kind === "answer") return answer(outcome.status, outcome.body, outcome.headers);
    if (raw === "too_large") return answer(413, errorBody(family, 413, "payload_too_large", "request body too large"));

    const result = await run(match, family, method, path, query, req, raw);
    if (closed) return drop();
    if (outcome.after === "drop") return drop();
    if (outcome.after !== undefined) {
      await sleep(outcome.after.delayMs);
      if (closed) return drop();
    }
    answer(result.status, result.body, result.headers);
  }

  const server = createServer((req, res) => {
    onRequest(req, res).catch((err: unknown) => {
      console.error("emulator: request failed:", err);
      if (!res.headersSent) send(res, 500, errorBody(familyOf(req.url ?? "/"), 500, "internal_error", "internal error"));
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => {
      server.off("error", reject);
      resolve();
    });
  }).catch(async (err: unknown) => {
    await runtimes.close(); // VMs restored from a state file already have runtimes
    throw err;
  });
  const { port } = server.address() as AddressInfo;
  const host = options.host.includes(":") ? `[${options.host}]` : options.host;
  const baseURL = `http://${host}:${port}`;
  wsBase = `ws://${host}:${port}`;

  // The allocations' ws_url: WebSocket upgrades on this same server.
  const sockets = new WebSocketEndpoint({
    state,
    tokens,
    runtimes,
    admit: async (method, path) => {
      const outcome = decide(familyOf(path), method, path);
      await sleep(options.latencyMs + (options.jitterMs > 0 ? Math.random() * options.jitterMs : 0));
      return outcome;
    },
    log: (entry) => log.add(entry),
    now: () => options.now(),
    sleep,
    isClosed: () => closed,
  });
  server.on("upgrade", (req, socket, head) => sockets.onUpgrade(req, socket, head));

  // Expiry is lazy on every VM call; this sweep makes usage records appear (and pruned tokens
  // go) even when nobody calls.
  const startSweep = (): NodeJS.Timeout => {
    const t = setInterval(() => {
      state.sweep();
      tokens.prune();
    }, options.sweepIntervalMs);
    t.unref();
    return t;
  };
  let sweepTimer = startSweep();

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      closed = true;
      clearInterval(sweepTimer);
      sockets.close();
      await runtimes.close();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      if (saver) {
        saver.changed();
        await saver.flush();
      }
    })();
    return closing;
  };

  return {
    baseURL,
    authURL: `${baseURL}/auth`,
    get requests(): readonly RequestLogEntry[] {
      return log.entries;
    },
    stats: () => log.stats(),
    clearRequests: () => log.clear(),
    setOptions(patch: Partial<EmulatorOptions>): void {
      const fixed = { host: options.host, port: options.port, stateFile: options.stateFile, runtimeDir: options.runtimeDir };
      for (const key of ["host", "port", "stateFile", "runtimeDir"] as const) {
        if (key in patch && patch[key] !== fixed[key] && !(key === "port" && patch.port === port)) {
          throw new TypeError(`emulator option ${key} cannot be changed at run time`);
        }
      }
      // Re-resolving makes `{ latencyMs: undefined }` mean "back to the default" and validates.
      const next = resolveOptions({ ...options, ...patch, ...fixed });
      Object.assign(options, next);
      if ("rateLimit" in patch) bucket = options.rateLimit !== undefined ? callRateLimit(options.rateLimit) : undefined;
      if ("sweepIntervalMs" in patch) {
        clearInterval(sweepTimer);
        sweepTimer = startSweep();
      }
    },
    injectFault: (rule: FaultRule) => faults.add(rule),
    clearFaults: () => faults.clear(),
    revokeTokens: () => tokens.revokeAll(),
    state,
    runtimes,
    close,
  };
}
