// Connection: Ready once the token service accepts the credentials; a missing Secret is waited
// for, refused credentials stall; deletion waits until no resource uses the Connection.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { FINALIZER } from "../../../src/api/names.js";
import type { Connection } from "../../../src/api/index.js";
import { ConnectionReconciler, type ConnectionReconcilerOptions } from "../../../src/controllers/connection.js";
import { gatedWrites } from "../../../src/controllers/kind.js";
import { LeadershipLapsed } from "../../../src/runtime/leader-election.js";
import type { Manager } from "../../../src/runtime/manager.js";
import { StatusWriter } from "../../../src/managed/status-writer.js";
import { UsageGauges } from "../../../src/controllers/usage-metrics.js";
import { Registry } from "prom-client";
import type { Informer } from "../../../src/runtime/informer.js";
import { API_KEY, condition, NS, reconcileContext, World } from "./helpers.js";
import { ConnectionPool } from "../../../src/controllers/connection-pool.js";
import { ServiceClient } from "../../../src/service/index.js";
import { ServiceMetrics, serviceClientHooks } from "../../../src/service/metrics.js";
import { silentLogger } from "../../../src/runtime/logging.js";
import { kindNames } from "../../../src/api/names.js";

let w: World;
let users: string[];
beforeEach(async () => {
  w = await World.start();
  users = [];
  // A fresh Connection: no status yet.
  w.apply<Connection>("connections", { metadata: { name: "c" }, spec: { ...connection("default").spec } });
});
afterEach(async () => {
  await w.close();
});

const connection = (name = "c") => w.get<Connection>("connections", name);
const reconcileWith = (opts: Partial<Pick<ConnectionReconcilerOptions, "usage" | "pool" | "service" | "kube" | "status" | "events">> = {}) =>
  new ConnectionReconciler({
    informer: w.informer({ kind: "Connection", plural: "connections" }).as<Connection>() as unknown as Informer<Connection>,
    usersOf: () => users,
    kube: w.kube,
    pool: w.pool,
    status: new StatusWriter(w.kube),
    events: w.recorder(),
    now: () => new Date(w.clock.ms),
    ...opts,
  }).reconcile({ namespace: NS, name: "c" }, reconcileContext());
const reconcile = () => reconcileWith();
/** The Connection reporting one VM's usage (a workspace and environment set), and its gauges. */
async function reportingUsage(): Promise<{ registry: Registry; usage: UsageGauges }> {
  const registry = new Registry();
  const usage = new UsageGauges(registry);
  w.emu.state.releaseVM(w.emu.state.allocateVM({ tier: "standard" }).vm_id);
  w.apply<Connection>("connections", { metadata: { name: "c" }, spec: { ...connection().spec, workspaceId: "ws", environmentId: "env" } });
  await reconcileWith({ usage });
  expect(connection().status?.usage?.vmCount).toBe(1);
  expect(await exportedTiers(registry)).toEqual(["standard"]);
  return { registry, usage };
}
/** The tiers the usage gauges export. */
const exportedTiers = async (registry: Registry) => ((await registry.getSingleMetric("agentcompute_usage_vm_seconds")?.get())?.values ?? []).map((v) => v.labels.tier);

describe("Connection", () => {
  it("is Ready once a token is obtained, with its finalizer, and looks again on the usage interval", async () => {
    const result = await reconcile();
    expect(w.calls()).toContain("access.clients");
    expect(connection().metadata.finalizers).toEqual([FINALIZER]);
    expect(condition(connection(), "Ready")).toMatchObject({ status: "True", reason: "Authenticated" });
    expect(condition(connection(), "Reconciling")).toMatchObject({ status: "False", reason: "Authenticated" });
    expect(condition(connection(), "Stalled")).toMatchObject({ status: "False", reason: "Authenticated" });
    expect(w.events).toEqual([{ type: "Normal", reason: "Authenticated", message: "credentials accepted by the token service" }]);
    const after = (result as { requeueAfterMs: number }).requeueAfterMs;
    expect(after).toBeGreaterThanOrEqual(540_000);
    expect(after).toBeLessThanOrEqual(660_000);
  });

  it("reads its access clients again on the interval, with no workspace or environment for usage", async () => {
    await reconcile();
    expect(connection().status?.accessClients?.map((c) => c.name)).not.toContain("added-later");
    w.emu.state.createAccessClient("added-later");
    w.advance(300_000);
    await reconcile();
    expect(connection().status?.accessClients?.map((c) => c.name)).not.toContain("added-later"); // not due yet
    w.advance(300_000);
    await reconcile();
    expect(connection().status?.accessClients?.map((c) => c.name)).toContain("added-later");
    expect(Date.parse(connection().status?.accessClientsRefreshedAt ?? "")).toBe(w.clock.ms);
  });

  it("waits for a missing credentials Secret: Reconciling, retried with the queue's backoff", async () => {
    w.apply<Connection>("connections", { metadata: { name: "c" }, spec: { ...connection().spec, credentials: { secretRef: { name: "later" } } } });
    expect(await reconcile()).toEqual({ requeue: true });
    expect(condition(connection(), "Ready")).toMatchObject({ status: "False", reason: "SecretNotFound" });
    expect(condition(connection(), "Reconciling")).toMatchObject({ status: "True", message: expect.stringContaining('"later"') });
    expect(condition(connection(), "Stalled")?.status).toBe("False");
  });

  it("says a credentials key that is there but empty is empty (an unset variable in --from-literal), not missing", async () => {
    w.secrets.set({ metadata: { name: "blank", namespace: NS }, data: { apiKey: "" } });
    w.apply<Connection>("connections", { metadata: { name: "c" }, spec: { ...connection().spec, credentials: { secretRef: { name: "blank" } } } });
    await reconcile();
    expect(condition(connection(), "Ready")).toMatchObject({
      status: "False",
      reason: "SecretKeyMissing",
      message: 'credentials Secret "blank" has neither the key "apiKey" nor both "clientId" and "clientSecret" with a value ("apiKey" is empty); its keys: "apiKey"',
    });
  });

  it("names the keys a credentials Secret has when none is the one read (a typo shows at once), never their values", async () => {
    const secretWith = (name: string, keys: string[]) =>
      w.secrets.set({ metadata: { name, namespace: NS }, data: Object.fromEntries(keys.map((k) => [k, Buffer.from(`value-of-${k}`).toString("base64")])) });
    const messageFor = async (name: string) => {
      w.apply<Connection>("connections", { metadata: { name: "c" }, spec: { ...connection().spec, credentials: { secretRef: { name } } } });
      await reconcile();
      const ready = condition(connection(), "Ready");
      expect(ready).toMatchObject({ status: "False", reason: "SecretKeyMissing" });
      return ready?.message ?? "";
    };
    secretWith("typo", ["api-key", "API_KEY", "clientId"]);
    const typo = await messageFor("typo");
    expect(typo).toBe('credentials Secret "typo" has neither the key "apiKey" nor both "clientId" and "clientSecret"; its keys: "API_KEY", "api-key", "clientId"');
    expect(typo).not.toContain("value-of-");

    // Many keys: the first ten, sorted, and how many more.
    secretWith("many", Array.from({ length: 12 }, (_, i) => `key${String(i).padStart(2, "0")}`));
    expect(await messageFor("many")).toMatch(/; its keys: "key00", "key01", .*"key09" and 2 more$/);

    w.secrets.set({ metadata: { name: "bare", namespace: NS }, data: {} });
    expect(await messageFor("bare")).toMatch(/; it has no keys$/);
  });

  it("stalls on refused credentials and looks again within a minute", async () => {
    w.secrets.set({ metadata: { name: "bad", namespace: NS }, data: { apiKey: Buffer.from("wrong-key").toString("base64") } });
    w.apply<Connection>("connections", { metadata: { name: "c" }, spec: { ...connection().spec, credentials: { secretRef: { name: "bad" } } } });
    const result = (await reconcile()) as { requeueAfterMs: number };
    expect(result.requeueAfterMs).toBeLessThanOrEqual(66_000);
    expect(condition(connection(), "Stalled")).toMatchObject({ status: "True", reason: "CredentialsRefused" });
    expect(condition(connection(), "Reconciling")?.status).toBe("False");
    expect(w.events.at(-1)).toMatchObject({ type: "Warning", reason: "CredentialsRefused" });
  });

  it("stays Ready when the service refuses a report (usage of an unknown workspace, access clients not allowed), and says so", async () => {
    const { registry, usage } = await reportingUsage();

    // A workspace the service does not know: 400 on the usage; the access clients not allowed: 403.
    w.emu.injectFault({ method: "GET", path: "/compute/v1/usage", times: 1, action: { status: 400, body: { code: 400, error_code: "bad_request", message: "unknown workspace" } } });
    w.emu.injectFault({ method: "GET", path: "/compute/v1/access/clients", times: 1, action: { status: 403, body: { code: 403, error_code: "forbidden", message: "not allowed" } } });
    w.apply<Connection>("connections", { metadata: { name: "c" }, spec: { ...connection().spec, workspaceId: "ws-typo" } });
    await reconcileWith({ usage });
    const ready = condition(connection(), "Ready");
    expect(ready).toMatchObject({ status: "True", reason: "Authenticated" });
    expect(ready?.message).toContain("the access clients could not be read");
    expect(ready?.message).toContain("the usage could not be read");
    expect(ready?.message).toContain("check spec.workspaceId and spec.environmentId");
    expect(condition(connection(), "Stalled")?.status).toBe("False");
    expect(w.events.at(-1)).toMatchObject({ type: "Warning", reason: "ReportNotRead" });
    // Not the last ones read, which were another workspace's.
    expect(connection().status?.usage).toBeUndefined();
    expect(connection().status?.accessClients).toBeUndefined();
    expect(await exportedTiers(registry)).toEqual([]);
    // What depends on it is not held up.
    expect(() => w.pool.forResource(NS, { name: "c" })).not.toThrow();
  });

  it("exports the usage its status holds at once after a restart (a new process, its gauges empty), not only at the next refresh", async () => {
    await reportingUsage();
    w.calls();
    w.advance(60_000);
    const registry = new Registry();
    await reconcileWith({ usage: new UsageGauges(registry) });
    expect(w.calls()).not.toContain("usage.list"); // not read again: not due
    expect(await exportedTiers(registry)).toEqual(["standard"]);
  });

  it("stays Ready when the usage cannot be read whole (a service answering every page with its first), and says so", async () => {
    await reportingUsage();
    const record = { vm_id: "vm-1", tier: "standard", started_at: "2026-11-01T00:00:00Z", ended_at: "2026-11-01T01:00:00Z", duration_seconds: 3600, reason: "released" };
    const page = Array.from({ length: 100 }, (_, i) => ({ ...record, vm_id: `vm-${i}` }));
    w.emu.injectFault({ method: "GET", path: "/compute/v1/usage", times: Infinity, action: { status: 200, body: page } });
    w.apply<Connection>("connections", { metadata: { name: "c" }, spec: { ...connection().spec, environmentId: "env-2" } });
    await reconcile();
    const ready = condition(connection(), "Ready");
    expect(ready).toMatchObject({ status: "True", reason: "Authenticated" });
    expect(ready?.message).toMatch(/the usage could not be read \(usage\.list: the page at offset 100 holds only items already listed/);
  });

  it("no longer shows nor exports usage once workspaceId and environmentId are removed", async () => {
    const { registry, usage } = await reportingUsage();
    const { workspaceId: _w, environmentId: _e, ...spec } = connection().spec;
    w.apply<Connection>("connections", { metadata: { name: "c" }, spec });
    await reconcileWith({ usage });
    expect(connection().status?.usage).toBeUndefined();
    expect(await exportedTiers(registry)).toEqual([]);
    expect(condition(connection(), "Ready")?.status).toBe("True");
  });

  it("is still not Ready when the service fails a report's read (not a refusal): every resource would meet the same", async () => {
    w.emu.injectFault({ method: "GET", path: "/compute/v1/access/clients", times: Infinity, action: { status: 500 } });
    await expect(reconcile()).rejects.toThrow();
    expect(condition(connection(), "Ready")).toMatchObject({ status: "False", reason: "ServiceError" });
  });

  it("stalls, naming spec.baseURL, on a base URL the token is had with but whose calls are answered 404 (a path too many)", async () => {
    w.apply<Connection>("connections", { metadata: { name: "c" }, spec: { ...connection().spec, baseURL: `${w.emu.baseURL}/compute/v1` } });
    await reconcile();
    expect(condition(connection(), "Stalled")).toMatchObject({ status: "True", reason: "ServiceNotFound" });
    expect(condition(connection(), "Ready")?.message).toMatch(/does not serve the compute API .*HTTP 404.*check spec\.baseURL/);
    expect(() => w.pool.forResource(NS, { name: "c" })).toThrow(/not Ready/);
  });

  it("stays Ready when only the access clients are answered 404 (a gateway hiding that route) and another route of the service is there", async () => {
    w.emu.injectFault({ method: "GET", path: "/compute/v1/access/clients", times: 1, action: { status: 404, body: { code: 404, error_code: "not_found", message: "no such route" } } });
    await reconcile();
    expect(condition(connection(), "Ready")).toMatchObject({ status: "True", reason: "Authenticated" });
    expect(condition(connection(), "Ready")?.message).toContain("the access clients could not be read");
  });

  it("shows neither the access clients nor the usage read for its spec before while its changed spec cannot be checked", async () => {
    const { registry, usage } = await reportingUsage();
    expect(connection().status?.accessClients).toBeDefined();
    // Another account's Secret, not there yet.
    w.apply<Connection>("connections", { metadata: { name: "c" }, spec: { ...connection().spec, credentials: { secretRef: { name: "other-account" } } } });
    await reconcileWith({ usage });
    expect(condition(connection(), "Ready")).toMatchObject({ status: "False", reason: "SecretNotFound" });
    expect(connection().status?.usage).toBeUndefined();
    expect(connection().status?.accessClients).toBeUndefined();
    expect(await exportedTiers(registry)).toEqual([]);
    // Once it is there, they are read for it (not taken as read already).
    w.secrets.set({ metadata: { name: "other-account", namespace: NS }, data: { apiKey: Buffer.from(API_KEY).toString("base64") } });
    w.calls();
    await reconcileWith({ usage });
    expect(w.calls()).toEqual(expect.arrayContaining(["access.clients", "usage.list"]));
    expect(connection().status?.usage?.vmCount).toBe(1);
  });

  it("shows the first 1,000 access clients of an account with more, and says how many there are, rather than a status the API server refuses", async () => {
    for (let i = 0; i < 1_001; i++) w.emu.state.createAccessClient(`client-${i}`);
    await reconcile();
    expect(condition(connection(), "Ready")?.status).toBe("True");
    expect(connection().status?.accessClients).toHaveLength(1_000);
    expect(condition(connection(), "Ready")?.message).toMatch(/shows the first 1000 of the 100[12] access clients/);
  });

  it("stalls, naming the field, on a base URL that is not a URL", async () => {
    w.apply<Connection>("connections", { metadata: { name: "c" }, spec: { ...connection().spec, baseURL: "http://" } });
    const result = (await reconcile()) as { requeueAfterMs: number };
    expect(result.requeueAfterMs).toBeGreaterThan(0);
    expect(condition(connection(), "Stalled")).toMatchObject({ status: "True", reason: "InvalidURL" });
    expect(condition(connection(), "Stalled")?.message).toMatch(/^spec\.baseURL is not a URL: "http:\/\/": set it to an http\(s\) URL/);
  });

  it("says the token service refused the credentials at a refresh while the token before works, then CredentialsRefused once it has run out", async () => {
    // A client on the World's clock (the pool's run on the machine's), so that the refresh comes.
    const client = new ServiceClient({ baseURL: w.emu.baseURL, authURL: w.emu.authURL, credentials: { apiKey: API_KEY }, now: () => w.clock.ms });
    const pool = { clientFor: () => ({ key: `${NS}/c`, client }) } as unknown as ConnectionPool;
    try {
      await reconcileWith({ pool });
      expect(condition(connection(), "Ready")?.status).toBe("True");
      // Revoked, the tokens issued before left alive: the refresh (30 s before the 900 s are up) is refused.
      w.emu.injectFault({ method: "POST", path: "/auth/token", times: Infinity, action: { status: 401, body: { code: 401, error_code: "invalid_client", message: "revoked" } } });
      w.advance(880_000);
      await client.skills.list(); // still served, on the token obtained before
      const result = (await reconcileWith({ pool })) as { requeueAfterMs: number };
      // Every call still works: Ready, with the refusal said, and looked at again within the client's refusal hold.
      expect(condition(connection(), "Ready")).toMatchObject({ status: "True", reason: "Authenticated" });
      expect(condition(connection(), "Ready")?.message).toContain("refused the credentials in Secret \"creds\" when the token was refreshed; the token obtained before works until");
      expect(w.events.at(-1)).toMatchObject({ type: "Warning", reason: "RefreshRefused" });
      expect(result.requeueAfterMs).toBeLessThanOrEqual(31_000);
      // The token runs out, the refusal stands: CredentialsRefused.
      w.advance(25_000);
      await reconcileWith({ pool });
      expect(condition(connection(), "Stalled")).toMatchObject({ status: "True", reason: "CredentialsRefused" });
    } finally {
      await client.close();
    }
  });

  it("is Ready again, with nothing said, when the token service accepts the credentials again after refusing them once", async () => {
    const client = new ServiceClient({ baseURL: w.emu.baseURL, authURL: w.emu.authURL, credentials: { apiKey: API_KEY }, now: () => w.clock.ms });
    const pool = { clientFor: () => ({ key: `${NS}/c`, client }) } as unknown as ConnectionPool;
    try {
      await reconcileWith({ pool });
      w.emu.injectFault({ method: "POST", path: "/auth/token", times: 1, action: { status: 401, body: { code: 401, error_code: "invalid_client", message: "blip" } } });
      w.advance(880_000);
      await client.skills.list();
      await reconcileWith({ pool });
      expect(condition(connection(), "Ready")?.message).toContain("when the token was refreshed");
      w.advance(31_000); // past the client's refusal hold: asked again, and accepted
      await reconcileWith({ pool });
      expect(condition(connection(), "Ready")).toMatchObject({ status: "True", message: "a token was obtained from the token service" });
    } finally {
      await client.close();
    }
  });

  it("tells its resources, while its changed spec has not been checked, that it has not, not that all is well", async () => {
    await reconcile();
    w.apply<Connection>("connections", { metadata: { name: "c" }, spec: { ...connection().spec, timeoutSeconds: 7 } });
    expect(() => w.pool.forResource(NS, { name: "c" })).toThrow('Connection "c" is not Ready: its changed spec has not been checked yet');
  });

  it("keeps its finalizer while a resource uses it, and lets go once none does", async () => {
    await reconcile();
    w.apply<Connection>("connections", { metadata: { name: "c", deletionTimestamp: "2030-01-01T00:00:00Z" }, spec: connection().spec });
    users = ["Sandbox/sb"];
    expect(await reconcile()).toEqual({ requeueAfterMs: 30_000 });
    expect(connection().metadata.finalizers).toEqual([FINALIZER]);
    expect(condition(connection(), "Reconciling")).toMatchObject({ status: "True", reason: "InUse", message: expect.stringContaining("Sandbox/sb") });

    users = [];
    await reconcile();
    expect(connection().metadata.finalizers).toEqual([]);
  });

  it("through the leadership's gate (gatedWrites, as setupConnection writes): a leader stalled past its lease lets no deleting Connection go, and says nothing", async () => {
    await reconcile();
    w.apply<Connection>("connections", { metadata: { name: "c", deletionTimestamp: "2030-01-01T00:00:00Z" }, spec: connection().spec });
    const events = w.events.length;
    let leading = false;
    const { kube, events: gated } = gatedWrites({ client: w.kube, events: w.recorder() } as unknown as Pick<Manager, "client" | "events">, () => {
      if (!leading) throw new LeadershipLapsed();
    });
    const lapsed = await reconcileWith({ kube, status: new StatusWriter(kube), events: gated }).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(lapsed).toBeInstanceOf(LeadershipLapsed);
    expect(connection().metadata.finalizers).toEqual([FINALIZER]);
    expect(w.events.length).toBe(events);

    leading = true;
    await reconcileWith({ kube, status: new StatusWriter(kube), events: gated });
    expect(connection().metadata.finalizers).toEqual([]);
  });

  it("removes every agentcompute_service_* series of a deleted Connection, and only its own", async () => {
    const registry = new Registry();
    const service = new ServiceMetrics(registry);
    // The operator's pool: each client's hooks feed the series labelled with its Connection.
    const pool = new ConnectionPool({
      connections: w.informer(kindNames.connection).as<Connection>() as unknown as Informer<Connection>,
      secrets: w.secrets.as(),
      logger: silentLogger(),
      inventoryMaxAgeMs: 60_000,
      hooks: (key) => serviceClientHooks(service, key),
    });
    try {
      await reconcileWith({ pool, service });
      // Another Connection's series, and one of each kind for "c" (a retry, a rate-limited wait).
      await pool.forResource(NS, { name: "default" }).client.skills.list();
      serviceClientHooks(service, `${NS}/c`).onRetry({ operation: "skills.list", attempt: 1, delayMs: 1, reason: "HTTP 503" });
      serviceClientHooks(service, `${NS}/c`).onRateLimited({ operation: "skills.list", waitMs: 10 });
      const text = await registry.metrics();
      for (const name of ["requests_total", "request_duration_seconds_count", "token_requests_total", "retries_total", "rate_limited_seconds_total"]) {
        expect(text).toMatch(new RegExp(`agentcompute_service_${name}\\{[^}]*connection="${NS}/c"`));
      }
      expect(text).toContain(`connection="${NS}/default"`);

      // Deleted, used by nothing: the finalizer goes, and its series with it.
      w.apply<Connection>("connections", { metadata: { name: "c", deletionTimestamp: "2030-01-01T00:00:00Z" }, spec: connection().spec });
      await reconcileWith({ pool, service });
      expect(connection().metadata.finalizers).toEqual([]);
      const after = await registry.metrics();
      expect(after).not.toContain(`connection="${NS}/c"`);
      expect(after).toMatch(new RegExp(`agentcompute_service_requests_total\\{[^}]*connection="${NS}/default"`));
    } finally {
      await pool.close();
    }
  });
});
