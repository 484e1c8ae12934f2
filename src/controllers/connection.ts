// The Connection controller: proves the credentials work (a token), and reports the account's
// access clients and a 30-day usage summary by tier. It owns no service object, so it is not a
// managed resource (nothing to create or delete in the service); its finalizer holds its
// deletion until no resource uses it, since they need it to delete their service objects.
import { ConditionType, FINALIZER, GROUP, MAX_ACCESS_CLIENTS, VERSION, kindNames } from "../api/names.js";
import type { Connection, ConnectionStatus } from "../api/index.js";
import { errorMessage } from "../lib/errors.js";
import { kstatusConditions } from "../managed/conditions.js";
import { NotReadyError, StalledError, classify, type Failure } from "../managed/errors.js";
import { patchFinalizers } from "../managed/finalizers.js";
import { afterBackoff, jittered } from "../managed/requeue.js";
import { StatusWriter } from "../managed/status-writer.js";
import type { Events } from "../runtime/events.js";
import type { Informer } from "../runtime/informer.js";
import { resourcePath, type KubeClient } from "../runtime/kube-client.js";
import type { Controller, ReconcileContext, Reconciler, Request, Result } from "../runtime/controller.js";
import { boundedMessage, formatTime } from "../runtime/status.js";
import { InvalidEndpointError, REFUSAL_HOLD_MS, ServiceError, isNotFound, tlsErrorCode, type ServiceClient, type UsageRecord } from "../service/index.js";
import type { ServiceMetrics } from "../service/metrics.js";
import type { ConnectionPool } from "./connection-pool.js";
import { gatedWrites, requestOf, specOrMetaChanged, type OperatorContext } from "./kind.js";
import { UsageGauges } from "./usage-metrics.js";

/**
 * The Connection controller, its own watches and the Secret watch. The managed kinds add the
 * watch that brings back a deleting Connection when its last user goes (src/controllers/kind.ts).
 */
export function setupConnection(ctx: OperatorContext): Controller {
  const { connections, secrets, manager } = ctx;
  // The leader's writes, through the leadership's gate but not the managed kinds' (the leader
  // writes Connections whether or not it has joined the shard ring): a leader stalled past its
  // lease must not, on waking, let a deleting Connection go that a resource created meanwhile uses.
  const { kube, events } = gatedWrites(manager, manager.leaderWriteGate());
  const controller = manager.newController({
    name: "connection",
    concurrency: 2,
    reconciler: new ConnectionReconciler({
      informer: connections,
      usersOf: (namespace, connection) => ctx.usersOf(namespace, connection),
      kube,
      pool: ctx.pool,
      status: new StatusWriter(kube),
      events,
      usage: new UsageGauges(manager.metrics.registry),
      service: manager.metrics.service,
    }),
  });
  controller.watch(connections, undefined, { filter: specOrMetaChanged });
  ctx.whenCredentialsRefused((namespace, name) => controller.enqueue({ namespace, name }));
  controller.watch(secrets, (s) =>
    connections
      .list(s.metadata.namespace)
      .filter((c) => c.spec.credentials.secretRef.name === s.metadata.name)
      .map(requestOf),
  );
  return controller;
}

export interface ConnectionReconcilerOptions {
  informer: Informer<Connection>;
  /** The resources (kind/name) of the Connection's namespace that use it. */
  usersOf(namespace: string, connection: string): string[];
  kube: KubeClient;
  pool: ConnectionPool;
  status: StatusWriter;
  events: Events;
  usage?: UsageGauges;
  /** The service client's series (agentcompute_service_*): a deleted Connection's are removed. */
  service?: ServiceMetrics;
  now?: () => Date;
}

const USAGE_DAYS = 30;

export class ConnectionReconciler implements Reconciler {
  private readonly now: () => Date;

  constructor(private readonly opts: ConnectionReconcilerOptions) {
    this.now = opts.now ?? (() => new Date());
  }

  async reconcile(req: Request, ctx: ReconcileContext): Promise<Result | void> {
    const cached = this.opts.informer.get(req.namespace, req.name);
    if (cached === undefined) {
      await this.forget(req);
      return;
    }
    let conn = this.opts.status.fresh(cached);
    const finalizers = conn.metadata.finalizers ?? [];
    if (conn.metadata.deletionTimestamp !== undefined) return this.finalize(conn, req, ctx);
    if (!finalizers.includes(FINALIZER)) {
      const updated = await patchFinalizers(this.opts.kube, this.path(conn), conn, [...finalizers, FINALIZER]);
      if (updated === undefined) return;
      conn = updated;
    }
    const refreshMs = (conn.spec.usageRefreshSeconds ?? 600) * 1000;
    const path = this.path(conn, "status");
    const wasReady = conn.status?.conditions?.find((c) => c.type === ConditionType.Ready);
    try {
      const handle = this.opts.pool.clientFor(conn);
      const { expiresAt } = await handle.client.authenticate();
      // The token service refused the credentials at the token's refresh, and the token obtained
      // before still works. Revoked (tokens issued before left alive), or a refusal that passes:
      // still Ready while that token works, since every call does; said, and looked at again as
      // soon as the client asks the token service again (its refusal hold), and when the token
      // runs out. Then a refusal is CredentialsRefused (below).
      const refusedAtRefresh = handle.client.credentials() === "refused";
      const observed: { [K in keyof ConnectionStatus]?: ConnectionStatus[K] | null } = { tokenExpiresAt: formatTime(expiresAt) };
      // The reports are extras: one the service refuses (an account that may not list its
      // access clients, a workspace it does not know) is said, and the Connection is still
      // Ready, since every resource needs only the token. A service that cannot be reached
      // or fails is still the Connection's trouble (below), as every resource would meet it.
      const unread: string[] = [];
      const notes: string[] = [];
      if (this.refreshDue(conn, refreshMs)) {
        try {
          const clients = await handle.client.accessClients();
          // More than status holds (the CRD's maxItems): the first, and the rest counted, rather
          // than a status the API server refuses at every pass.
          observed.accessClients = clients.slice(0, MAX_ACCESS_CLIENTS).map((c) => ({ name: c.name, clientId: c.client_id, active: c.is_active }));
          observed.accessClientsRefreshedAt = formatTime(this.now());
          if (clients.length > MAX_ACCESS_CLIENTS) notes.push(`status.accessClients shows the first ${MAX_ACCESS_CLIENTS} of the ${clients.length} access clients`);
        } catch (err) {
          // The route takes no parameter and publishes no 404: a 404 is a base URL that is not
          // the service's (a path too many, another host's gateway), if another route the
          // service publishes is not there either (a gateway may hide one route from an
          // account). Every resource would meet it, and a delete answered 404 would count its
          // object gone.
          if (isNotFound(err) && (await notFoundEither(() => handle.client.pool.config()))) {
            throw new StalledError(
              "ServiceNotFound",
              `${conn.spec.baseURL} does not serve the compute API (GET /compute/v1/access/clients and /compute/v1/pool/config answered HTTP 404): check spec.baseURL, the service's root URL (e.g. https://api.example.com, without /compute/v1)`,
            );
          }
          unread.push(`the access clients could not be read (${refused(err)})`);
          observed.accessClients = null;
          observed.accessClientsRefreshedAt = null;
        }
        const { workspaceId, environmentId } = conn.spec;
        let usage: ConnectionStatus["usage"] | null = null;
        if (workspaceId && environmentId) {
          try {
            usage = await this.usageSummary(handle.client, workspaceId, environmentId);
          } catch (err) {
            unread.push(`the usage could not be read (${refused(err)}): check spec.workspaceId and spec.environmentId`);
          }
        }
        // No usage (not asked for any more, or refused): none shown, none exported, rather
        // than the last one read, which may be another workspace's.
        observed.usage = usage;
        if (usage === null) this.opts.usage?.remove(handle.key);
        else this.opts.usage?.set(handle.key, usage.byTier);
      } else if (conn.status?.usage !== undefined) {
        // Read for this spec (a refresh is due at once otherwise), maybe by the process before
        // this one (a restart, a new leader): exported now, not only at the next refresh,
        // up to usageRefreshSeconds away, which left the dashboards blank after every deploy.
        this.opts.usage?.set(handle.key, conn.status.usage.byTier);
      }
      const authenticated = "a token was obtained from the token service";
      const refusal = refusedAtRefresh
        ? `the token service at ${conn.spec.authURL} refused the credentials in Secret "${conn.spec.credentials.secretRef.name}" when the token was refreshed; the token obtained before works until ${formatTime(expiresAt)}, then every call fails unless the token service accepts them again`
        : undefined;
      // As the condition holds it (cut if very long), so that it compares equal next time.
      const message = boundedMessage([authenticated, ...(refusal === undefined ? [] : [refusal]), ...unread, ...notes].join("; "));
      await this.opts.status.write(path, conn, observed, kstatusConditions({ state: "ready", reason: "Authenticated", message }));
      if (wasReady?.status !== "True") this.opts.events.normal(conn, "Authenticated", "credentials accepted by the token service");
      if (refusal !== undefined && wasReady?.message !== message) this.opts.events.warning(conn, "RefreshRefused", refusal);
      if (unread.length > 0 && wasReady?.message !== message) this.opts.events.warning(conn, "ReportNotRead", unread.join("; "));
      if (refusal !== undefined) {
        const runsOutIn = Math.max(1_000, expiresAt.getTime() - this.now().getTime() + 1_000);
        return { requeueAfterMs: Math.min(runsOutIn, REFUSAL_HOLD_MS + 1_000) };
      }
      return { requeueAfterMs: jittered(refreshMs) };
    } catch (err) {
      const { kind, reason, message } = describe(err, conn);
      const stalled = kind === "stalled";
      // A changed spec (another Secret, account or workspace): the reports read for the spec
      // before are not this one's, and are not shown while this one cannot be checked.
      const specChanged = conn.status?.observedGeneration !== undefined && conn.status.observedGeneration !== conn.metadata.generation;
      const reports = specChanged ? { accessClients: null, accessClientsRefreshedAt: null, usage: null } : {};
      if (specChanged) this.opts.usage?.remove(`${conn.metadata.namespace}/${conn.metadata.name}`);
      await this.opts.status.write(path, conn, reports, kstatusConditions({ state: stalled ? "stalled" : "reconciling", reason, message }));
      if (wasReady?.reason !== reason) this.opts.events.warning(conn, reason, message);
      ctx.log.info({ reason }, message);
      if (stalled) {
        // Refused credentials stay refused until the Secret changes (which triggers a
        // reconcile through the Secret watch); look again slowly in case the service relents.
        return { requeueAfterMs: jittered(Math.min(refreshMs, 60_000)) };
      }
      // A missing Secret is waited for (its watch brings the Connection back), not an error.
      if (kind === "notReady") return afterBackoff();
      throw err;
    }
  }

  /**
   * A Connection goes only once nothing uses it (crossplane's ProviderConfigUsage idea): the
   * resources that use it need it to delete their service objects, and `kubectl delete -k` or
   * a GitOps prune deletes everything at once.
   */
  private async finalize(conn: Connection, req: Request, ctx: ReconcileContext): Promise<Result | void> {
    const finalizers = conn.metadata.finalizers ?? [];
    if (!finalizers.includes(FINALIZER)) {
      await this.forget(req);
      return;
    }
    const users = this.opts.usersOf(conn.metadata.namespace, conn.metadata.name);
    if (users.length > 0) {
      const shown = users.slice(0, 5).join(", ") + (users.length > 5 ? `, and ${users.length - 5} more` : "");
      ctx.log.info({ users: users.length }, "deletion waits until no resource uses the Connection");
      const message = `deletion waits for the ${users.length} resource(s) that use this Connection to be deleted: ${shown}`;
      await this.opts.status.write(this.path(conn, "status"), conn, {}, [
        { type: ConditionType.Reconciling, status: "True", reason: "InUse", message },
      ]);
      // Their deletion brings this Connection back (see the watches); this is a safety net.
      return { requeueAfterMs: 30_000 };
    }
    await patchFinalizers(this.opts.kube, this.path(conn), conn, finalizers.filter((f) => f !== FINALIZER));
    this.opts.status.forget(conn.metadata.uid);
    await this.forget(req);
  }

  /**
   * A deleted Connection: its clients closed, and its series removed (a Connection per preview
   * environment would otherwise grow /metrics without bound). The pool silences the clients
   * first, so that a call ending later brings back no series.
   */
  private async forget(req: Request): Promise<void> {
    const key = `${req.namespace}/${req.name}`;
    this.opts.pool.forget(req.namespace, req.name);
    this.opts.usage?.remove(key);
    await this.opts.service?.removeConnection(key);
  }

  private path(conn: Connection, subresource?: string): string {
    return resourcePath({
      group: GROUP,
      version: VERSION,
      plural: kindNames.connection.plural,
      namespace: conn.metadata.namespace,
      name: conn.metadata.name,
      subresource,
    });
  }

  /** Access clients and usage are refreshed together on their interval, or when the spec changed. */
  private refreshDue(conn: Connection, refreshMs: number): boolean {
    const { status } = conn;
    const refreshedAt = status?.accessClientsRefreshedAt;
    if (status === undefined || status.observedGeneration !== conn.metadata.generation || refreshedAt === undefined) return true;
    if (status.usage === undefined && conn.spec.workspaceId && conn.spec.environmentId) return true;
    return this.now().getTime() - Date.parse(refreshedAt) >= refreshMs * 0.9;
  }

  private async usageSummary(client: ServiceClient, workspaceId: string, environmentId: string) {
    const to = this.now();
    const from = new Date(to.getTime() - USAGE_DAYS * 86_400_000);
    const records = await client.usage.list({ workspaceId, environmentId, from: day(from), to: day(to) });
    return { from: day(from), to: day(to), ...summarise(records), refreshedAt: formatTime(to) };
  }
}

export function summarise(records: UsageRecord[]) {
  const byTier = new Map<string, { seconds: number; vmCount: number }>();
  let totalSeconds = 0;
  for (const r of records) {
    const t = byTier.get(r.tier) ?? { seconds: 0, vmCount: 0 };
    t.seconds += Math.round(r.duration_seconds);
    t.vmCount += 1;
    byTier.set(r.tier, t);
    totalSeconds += Math.round(r.duration_seconds);
  }
  return {
    totalSeconds,
    vmCount: records.length,
    byTier: [...byTier.entries()]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([tier, t]) => ({ tier, seconds: t.seconds, vmCount: t.vmCount })),
  };
}

/**
 * What the service said in refusing a read of a report (access clients, usage), for the Ready
 * message; anything but a refusal (the service unreachable or failing, a token refused) is
 * rethrown: the Connection's own trouble.
 */
function refused(err: unknown): string {
  if (err instanceof ServiceError && err.status !== undefined && REPORT_REFUSALS.has(err.status)) return err.message;
  throw err;
}

/** Whether `read` is answered 404 as well; its other failures are the Connection's own trouble, thrown. */
async function notFoundEither(read: () => Promise<unknown>): Promise<boolean> {
  try {
    await read();
    return false;
  } catch (err) {
    if (isNotFound(err)) return true;
    if (err instanceof ServiceError && err.status !== undefined && REPORT_REFUSALS.has(err.status)) return false;
    throw err;
  }
}

/**
 * Answers to a report's read that the same read would get again: the account or the spec is at
 * fault, not the service; or (200) a listing answered but that cannot be read whole (pageAll: a
 * service ignoring offset), which every resource does not meet.
 */
const REPORT_REFUSALS = new Set([200, 400, 403, 404, 422]);

/** A Connection's own sorting of failures: what the token service and TLS say is about the Connection. */
function describe(err: unknown, conn: Connection): Failure {
  if (err instanceof NotReadyError || err instanceof StalledError) return classify(err);
  if (err instanceof InvalidEndpointError) {
    return {
      kind: "stalled",
      reason: "InvalidURL",
      message: `spec.${err.option} ${err.message.replace(/^service client: \S+ /, "")}: set it to an http(s) URL, e.g. https://api.example.com`,
    };
  }
  if (err instanceof ServiceError) {
    if (err.operation === "token" && (err.status === 400 || err.status === 401 || err.status === 403)) {
      return {
        kind: "stalled",
        reason: "CredentialsRefused",
        message: `the token service at ${conn.spec.authURL} refused the credentials in Secret "${conn.spec.credentials.secretRef.name}" (HTTP ${err.status})`,
      };
    }
    const tls = tlsErrorCode(err);
    if (tls !== undefined) {
      // Retrying cannot help until the certificate or the spec changes (looked at again slowly).
      const url = err.operation === "token" ? conn.spec.authURL : conn.spec.baseURL;
      return {
        kind: "stalled",
        reason: "TLSVerificationFailed",
        message: `the TLS certificate of ${url} could not be verified (${tls}): give the server a certificate from a trusted CA, or have the operator trust its CA (NODE_EXTRA_CA_CERTS: docs/install.md), or (local development only) set spec.insecureSkipTLSVerify: true`,
      };
    }
    if (err.status === undefined) {
      return { kind: "transient", reason: "ServiceUnreachable", message: `cannot reach the service: ${err.message}` };
    }
    return { kind: "transient", reason: "ServiceError", message: err.message };
  }
  return { kind: "transient", reason: "ReconcileError", message: errorMessage(err) };
}

function day(d: Date): string {
  return d.toISOString().slice(0, 10);
}
