// Connection: Ready once the token service accepts the credentials; a missing Secret is waited
// for, refused credentials stall; deletion waits until no resource uses the Connection.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { FINALIZER } from "../../../src/api/names.js";
import type { Connection } from "../../../src/api/index.js";
import { ConnectionReconciler } from "../../../src/controllers/connection.js";
import { StatusWriter } from "../../../src/managed/status-writer.js";
import type { Informer } from "../../../src/runtime/informer.js";
import { condition, NS, reconcileContext, World } from "./helpers.js";

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
const reconcile = () =>
  new ConnectionReconciler({
    informer: w.informer({ kind: "Connection", plural: "connections" }).as<Connection>() as unknown as Informer<Connection>,
    usersOf: () => users,
    kube: w.kube,
    pool: w.pool,
    status: new StatusWriter(w.kube),
    events: w.recorder(),
    now: () => new Date(w.clock.ms),
  }).reconcile({ namespace: NS, name: "c" }, reconcileContext());

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

  it("stalls on refused credentials and looks again within a minute", async () => {
    w.secrets.set({ metadata: { name: "bad", namespace: NS }, data: { apiKey: Buffer.from("wrong-key").toString("base64") } });
    w.apply<Connection>("connections", { metadata: { name: "c" }, spec: { ...connection().spec, credentials: { secretRef: { name: "bad" } } } });
    const result = (await reconcile()) as { requeueAfterMs: number };
    expect(result.requeueAfterMs).toBeLessThanOrEqual(66_000);
    expect(condition(connection(), "Stalled")).toMatchObject({ status: "True", reason: "CredentialsRefused" });
    expect(condition(connection(), "Reconciling")?.status).toBe("False");
    expect(w.events.at(-1)).toMatchObject({ type: "Warning", reason: "CredentialsRefused" });
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
});
