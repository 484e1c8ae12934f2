// One ServiceClient (token cache, rate limit, keep-alive pool) and one set of inventories per
// Connection, built from the Connection's spec and its credentials Secret and rebuilt when
// either changes. Resources reach the service only through the Connection of their own
// namespace: that is the tenancy boundary.
import { createHash } from "node:crypto";
import type { Logger } from "pino";
import { ConditionType, DEFAULT_CONNECTION, MARKER_KEY } from "../api/names.js";
import type { Connection } from "../api/index.js";
import { Inventory } from "../managed/inventory.js";
import { notReportedYet } from "../managed/conditions.js";
import { NotReadyError } from "../managed/errors.js";
import type { Informer } from "../runtime/informer.js";
import { keysListed } from "./object-store.js";
import type { SecretObject } from "../managed/connection-secret.js";
import { DEFAULTS, ServiceClient, type ServiceClientHooks } from "../service/index.js";
import type { Agent, AgentVM, Credentials, Deployment, Skill } from "../service/index.js";

export type InventoryKind = "agents" | "deployments" | "vms" | "skills";

export interface ServiceHandle {
  readonly key: string;
  readonly connection: Connection;
  readonly client: ServiceClient;
  readonly agents: Inventory<Agent>;
  readonly deployments: Inventory<Deployment>;
  readonly vms: Inventory<AgentVM>;
  readonly skills: Inventory<Skill>;
}

export interface ConnectionPoolOptions {
  connections: Informer<Connection>;
  secrets: Informer<SecretObject>;
  logger: Logger;
  hooks?: (connectionKey: string) => ServiceClientHooks;
  /** How old an inventory snapshot may be before it is read again (the sync period). */
  inventoryMaxAgeMs: number;
  /** Inventories are read once and their first failure kept (InventoryOptions.keepFailure): a plan's. */
  inventoryKeepsFailure?: boolean;
  /** Told which service objects changed out of band, so their resources are reconciled. */
  onInventoryChange?(connectionKey: string, kind: InventoryKind, keys: string[]): void;
  /** Every client's ServiceClientOptions.writeGate (sharded mode: this replica's membership). */
  writeGate?: () => void;
}

interface Entry {
  fingerprint: string;
  handle: ServiceHandle;
  /**
   * A client before this one, kept while it is the last proven one (see proven) and this one
   * is not: a rotated Secret not checked yet, or refused; a URL edited with a typo. It serves
   * upkeep and deletions meanwhile.
   */
  proven?: ServiceHandle;
}

/**
 * A client that works: the token service accepted its credentials and the service answered one
 * of its calls (a token alone says nothing of spec.baseURL).
 */
function proven(handle: ServiceHandle): boolean {
  return handle.client.credentials() === "accepted" && handle.client.served();
}

/**
 * How long a replaced client stays open: a call begun on it (a renewal through the client
 * upkeep was given) ends rather than fails with "client closed". One call may take 4 attempts
 * of the 30 s timeout and up to 30 s between them (DEFAULTS), and wait for the rate limiter.
 */
const RETIRE_AFTER_MS = 5 * 60_000;

/** Every hook a client has (the compiler checks the list is whole): each is silenced on forget(). */
const HOOK_NAMES: Record<keyof ServiceClientHooks, true> = { onRequest: true, onTokenRequest: true, onRetry: true, onRateLimited: true, onCredentialsRefused: true };

export class ConnectionPool {
  private readonly entries = new Map<string, Entry>();
  /** Replaced clients waiting to be closed (RETIRE_AFTER_MS), and their timers. */
  private readonly retiring = new Map<ServiceHandle, NodeJS.Timeout>();

  /**
   * Per Connection: whether its clients' hooks still report (metrics). forget() turns it off
   * for every client of the Connection, replaced ones retiring included, so that a call ending
   * after the Connection is gone brings back none of its series; a Connection made again with
   * the same name gets a new one.
   */
  private readonly reporting = new Map<string, { on: boolean }>();

  /** This process's share of each Connection's rate (sharded mode: 1 / the live replicas). */
  private rateShare = 1;

  constructor(private readonly opts: ConnectionPoolOptions) {}

  /**
   * Sharded mode: the replicas share a Connection's `rateLimit`, each taking `share` of it
   * (qps and burst), so that together they ask the service for what the Connection says.
   */
  setRateShare(share: number): void {
    if (!(share > 0 && share <= 1) || share === this.rateShare) return;
    this.rateShare = share;
    for (const { handle, proven } of this.entries.values()) {
      for (const h of [handle, proven]) h?.client.setRateLimit(this.rateOf(h.connection));
    }
  }

  private rateOf(connection: Connection): { qps: number; burst: number } {
    const r = connection.spec.rateLimit;
    return {
      qps: (r?.qps ?? DEFAULTS.qps) * this.rateShare,
      burst: Math.max(1, Math.floor((r?.burst ?? DEFAULTS.burst) * this.rateShare)),
    };
  }

  /**
   * The client of a Connection, built if needed. Throws NotReadyError with a reason a person
   * can act on when the Connection or its Secret is missing or incomplete.
   */
  clientFor(connection: Connection): ServiceHandle {
    const key = `${connection.metadata.namespace}/${connection.metadata.name}`;
    const credentials = this.credentialsOf(connection);
    const fingerprint = fingerprintOf(connection, credentials);
    const existing = this.entries.get(key);
    if (existing?.fingerprint === fingerprint) {
      if (existing.proven !== undefined && proven(existing.handle)) {
        this.retire(existing.proven);
        delete existing.proven;
      }
      return existing.handle;
    }
    const handle = this.build(key, connection, credentials);
    const entry: Entry = { fingerprint, handle };
    if (existing) {
      const kept = proven(existing.handle) ? existing.handle : existing.proven;
      for (const old of [existing.handle, existing.proven]) if (old !== undefined && old !== kept) this.retire(old);
      if (kept !== undefined) entry.proven = kept;
    }
    this.entries.set(key, entry);
    return handle;
  }

  /**
   * What a resource's Connection holds (its spec and credentials) as an opaque fingerprint, or
   * undefined when there is none: a spec the service refused may have been the Connection's
   * doing (its orgId, the account its credentials are of), so a change of it is a fix too.
   */
  inputsOf(namespace: string, connectionRef: { name?: string } | undefined): string | undefined {
    const connection = this.opts.connections.get(namespace, connectionRef?.name ?? DEFAULT_CONNECTION);
    if (connection === undefined) return undefined;
    try {
      return fingerprintOf(connection, this.credentialsOf(connection));
    } catch {
      return fingerprintOf(connection, undefined);
    }
  }

  /** Closes a replaced client once the calls begun on it have had time to end. */
  private retire(handle: ServiceHandle): void {
    const timer = setTimeout(() => {
      this.retiring.delete(handle);
      void handle.client.close();
    }, RETIRE_AFTER_MS);
    timer.unref();
    this.retiring.set(handle, timer);
  }

  /**
   * For a managed resource: its Connection, which must be Ready. A Connection of another
   * namespace can never be named (connectionRef has only a name).
   */
  forResource(namespace: string, connectionRef: { name?: string } | undefined, opts: { deleting?: boolean } = {}): ServiceHandle {
    const name = connectionRef?.name ?? DEFAULT_CONNECTION;
    const connection = this.opts.connections.get(namespace, name);
    if (connection === undefined) throw connectionNotFound(namespace, name);
    // Cleaning up must work while everything is being deleted at once: the Connection may be
    // deleting too (it waits for its users), and its Secret may be gone already. Through a
    // client that works: a delete a wrong URL answers 404 would count the object gone.
    if (opts.deleting) return this.workingClient(connection);
    const ready = connection.status?.conditions?.find((c) => c.type === ConditionType.Ready);
    if (ready?.status !== "True" || connection.status?.observedGeneration !== connection.metadata.generation) {
      // Ready for an earlier spec: its message would say all is well.
      const why = ready?.status === "True" ? ": its changed spec has not been checked yet" : ready?.message ? `: ${ready.message}` : "";
      throw new NotReadyError("ConnectionNotReady", `Connection "${name}" is not Ready${why}`, notReportedYet(connection));
    }
    return this.clientFor(connection);
  }

  /**
   * For keeping alive what exists (a Sandbox's VM renewed) while `forResource` refuses the
   * Connection: an edit its controller has not checked yet (sharded, a leader failover can make
   * that 20 s), a failed check (the usage endpoint down), its Secret gone. None of those must
   * cost a user their VM, and a renewal changes nothing the check is there to guard. Throws
   * NotReadyError saying why when there is no client to be had (no Connection; no Secret and no
   * client built before; credentials refused and none accepted before).
   */
  forUpkeep(namespace: string, connectionRef: { name?: string } | undefined): ServiceHandle {
    const name = connectionRef?.name ?? DEFAULT_CONNECTION;
    const connection = this.opts.connections.get(namespace, name);
    if (connection === undefined) throw connectionNotFound(namespace, name);
    const handle = this.workingClient(connection);
    // Credentials the token service refused, and none it accepted before at hand: there is
    // nothing to try, every attempt would be one more refused token request (the Connection
    // may still say Ready: its controller has not looked since).
    if (handle.client.credentials() !== "refused") return handle;
    throw new NotReadyError(
      "CredentialsRefused",
      `the token service refuses the credentials of Connection "${name}" (Secret "${connection.spec.credentials.secretRef.name}"), and none it accepted before are at hand; fix the Secret`,
    );
  }

  /**
   * The client of the Connection's spec and Secret (the one built before if they cannot make
   * one); while it is not proven, the last proven one, unless the token service has refused
   * that one's credentials since. So new credentials refused (a rotation gone wrong), or a URL
   * edited with a typo, keep the VMs alive through the client that worked until the spec or
   * the Secret is fixed.
   */
  private workingClient(connection: Connection): ServiceHandle {
    let handle: ServiceHandle | undefined;
    try {
      handle = this.clientFor(connection);
    } catch (err) {
      handle = this.entries.get(`${connection.metadata.namespace}/${connection.metadata.name}`)?.handle;
      if (handle === undefined) throw err;
    }
    const before = this.entries.get(handle.key)?.proven;
    return before === undefined || proven(handle) || before.client.credentials() === "refused" ? handle : before;
  }

  /**
   * Drops the clients of a deleted Connection. From now on none of them reports through its
   * hooks (a call in flight ends unreported), so the Connection's metric series can be removed.
   */
  forget(namespace: string, name: string): void {
    const key = `${namespace}/${name}`;
    const entry = this.entries.get(key);
    if (entry) for (const h of [entry.handle, entry.proven]) void h?.client.close();
    this.entries.delete(key);
    const reporting = this.reporting.get(key);
    if (reporting !== undefined) reporting.on = false;
    this.reporting.delete(key);
  }

  async close(): Promise<void> {
    for (const timer of this.retiring.values()) clearTimeout(timer);
    const all = [...this.entries.values()].flatMap((e) => [e.handle, e.proven]).concat([...this.retiring.keys()]);
    this.retiring.clear();
    this.entries.clear();
    this.reporting.clear();
    await Promise.all(all.map((h) => h?.client.close()));
  }

  private credentialsOf(connection: Connection): Credentials {
    const { namespace } = connection.metadata;
    const secretName = connection.spec.credentials.secretRef.name;
    const secret = this.opts.secrets.get(namespace, secretName);
    if (secret === undefined) {
      throw new NotReadyError(
        "SecretNotFound",
        `credentials Secret "${secretName}" not found in namespace "${namespace}" (spec.credentials.secretRef.name)`,
      );
    }
    const data = secret.data ?? {};
    const read = (k: string) => (data[k] === undefined ? undefined : Buffer.from(data[k], "base64").toString("utf8").trim());
    const apiKey = read("apiKey");
    if (apiKey) return { apiKey };
    const clientId = read("clientId");
    const clientSecret = read("clientSecret");
    if (clientId && clientSecret) return { clientId, clientSecret };
    // Present but empty (`--from-literal=apiKey="$KEY"` with $KEY unset) is said so: "has no
    // key" would send one looking for a typo in the name.
    const empty = ["apiKey", "clientId", "clientSecret"].filter((k) => data[k] !== undefined && !read(k));
    throw new NotReadyError(
      "SecretKeyMissing",
      `credentials Secret "${secretName}" has neither the key "apiKey" nor both "clientId" and "clientSecret"${empty.length > 0 ? ` with a value (${empty.map((k) => `"${k}"`).join(", ")} ${empty.length === 1 ? "is" : "are"} empty)` : ""}; ${keysListed(Object.keys(data))}`,
    );
  }

  /** The hooks of a new client of the Connection: silent once the Connection is forgotten. */
  private hooksOf(key: string): ServiceClientHooks | undefined {
    const hooks = this.opts.hooks?.(key);
    if (hooks === undefined) return undefined;
    let reporting = this.reporting.get(key);
    if (reporting === undefined) {
      reporting = { on: true };
      this.reporting.set(key, reporting);
    }
    const r = reporting;
    // Only the hooks given: the client builds an event only for a hook that is there.
    const silenced: Record<string, unknown> = {};
    for (const name of Object.keys(HOOK_NAMES) as Array<keyof ServiceClientHooks>) {
      const hook = hooks[name] as ((...args: unknown[]) => void) | undefined;
      if (hook !== undefined) silenced[name] = (...args: unknown[]) => r.on && hook.apply(hooks, args);
    }
    return silenced as ServiceClientHooks;
  }

  private build(key: string, connection: Connection, credentials: Credentials): ServiceHandle {
    const { spec } = connection;
    const client = new ServiceClient({
      baseURL: spec.baseURL,
      ...(spec.registryURL !== undefined && { registryURL: spec.registryURL }),
      authURL: spec.authURL,
      credentials,
      rateLimit: this.rateOf(connection),
      timeoutMs: spec.timeoutSeconds !== undefined ? spec.timeoutSeconds * 1000 : DEFAULTS.timeoutMs,
      insecureSkipTLSVerify: spec.insecureSkipTLSVerify ?? false,
      logger: this.opts.logger.child({ connection: key }),
      hooks: this.hooksOf(key),
      writeGate: this.opts.writeGate,
    });
    const inventory = <T>(
      kind: InventoryKind,
      list: () => Promise<T[]>,
      keyOf: (o: T) => string,
      markerOf: (o: T) => string | undefined,
      equal?: (a: T, b: T) => boolean,
    ) =>
      new Inventory<T>({
        list,
        keyOf,
        markerOf,
        maxAgeMs: this.opts.inventoryMaxAgeMs,
        ...(this.opts.inventoryKeepsFailure === true && { keepFailure: true }),
        onChange: (keys) => this.opts.onInventoryChange?.(key, kind, keys),
        ...(equal ? { equal } : {}),
      });
    return {
      key,
      connection,
      client,
      agents: inventory<Agent>("agents", () => client.agents.listAll(), (a) => a.id, (a) => a.metadata?.[MARKER_KEY]),
      deployments: inventory<Deployment>(
        "deployments",
        () => client.deployments.list(),
        (d) => d.id,
        (d) => d.metadata?.[MARKER_KEY],
      ),
      vms: inventory<AgentVM>("vms", () => client.vms.listAll(), (v) => v.id, (v) => v.metadata?.[MARKER_KEY], sameVM),
      skills: inventory<Skill>("skills", () => client.skills.list(), (s) => s.name, () => undefined),
    };
  }
}

function connectionNotFound(namespace: string, name: string): NotReadyError {
  return new NotReadyError("ConnectionNotFound", `Connection "${name}" not found in namespace "${namespace}"; create it or set spec.connectionRef.name`);
}

/**
 * A VM changed out of band when what the Sandbox observes of it changed. The copy recorded
 * after an allocation lacks fields the list has (created_at, the service's allocated_at, the
 * token), so whole-object equality would report every new VM as changed at the first re-read
 * and bring every Sandbox back for nothing.
 */
function sameVM(a: AgentVM, b: AgentVM): boolean {
  return (
    a.id === b.id &&
    a.state === b.state &&
    a.expires_at === b.expires_at &&
    a.tier === b.tier &&
    JSON.stringify(a.skills ?? []) === JSON.stringify(b.skills ?? []) &&
    a.metadata?.[MARKER_KEY] === b.metadata?.[MARKER_KEY]
  );
}

function fingerprintOf(connection: Connection, credentials: Credentials | undefined): string {
  return createHash("sha256")
    .update(JSON.stringify([connection.spec, credentials]))
    .digest("hex");
}
