// The Connection pool's clients across a credentials rotation or an edit of its URLs: upkeep (a
// VM's renewal) and deletions go through the client that last worked (credentials accepted, a
// call answered) while the new one does not, and a replaced client is not closed under a call
// begun on it.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Connection } from "../../../src/api/index.js";
import { kindNames } from "../../../src/api/names.js";
import { ConnectionPool } from "../../../src/controllers/connection-pool.js";
import type { Informer } from "../../../src/runtime/informer.js";
import { silentLogger } from "../../../src/runtime/logging.js";
import { NS, World } from "./helpers.js";

let w: World;
beforeEach(async () => {
  w = await World.start();
});
afterEach(async () => {
  await w.close();
});

const connection = () => w.get<Connection>("connections", "default");
const rotate = (apiKey: string) =>
  w.secrets.set({ metadata: { name: "creds", namespace: NS }, data: { apiKey: Buffer.from(apiKey).toString("base64") } });
const currentKey = () => Buffer.from(w.secrets.get(NS, "creds")?.data?.["apiKey"] ?? "", "base64").toString("utf8");

describe("ConnectionPool", () => {
  it("serves upkeep through the client last accepted while the new credentials are refused, and drops it once new ones are accepted", async () => {
    const good = currentKey();
    const first = w.pool.forResource(NS, undefined);
    await first.client.vms.listAll();
    expect(first.client.credentials()).toBe("accepted");

    rotate("a-mistyped-key");
    const refused = w.pool.clientFor(connection());
    expect(refused).not.toBe(first);
    await expect(refused.client.authenticate()).rejects.toThrow(/credentials refused/);
    expect(refused.client.credentials()).toBe("refused");
    expect(w.pool.forUpkeep(NS, undefined)).toBe(first);
    // Replaced, not closed: a call on it still goes through.
    await expect(first.client.vms.listAll()).resolves.toEqual([]);

    rotate(good); // fixed: a new client, whose credentials are accepted
    const fixed = w.pool.clientFor(connection());
    await fixed.client.authenticate();
    // A token alone does not prove it (nothing of baseURL); a call the service answers does.
    expect(w.pool.forUpkeep(NS, undefined)).toBe(first);
    await fixed.client.skills.list();
    expect(w.pool.clientFor(connection())).toBe(fixed);
    expect(w.pool.forUpkeep(NS, undefined)).toBe(fixed);
    // The first is let go, but not closed under a call begun on it (it closes 5 minutes later).
    await expect(first.client.vms.listAll()).resolves.toEqual([]);
  });

  it("renews and deletes through the client that worked while an edited URL does not: the token service unreachable, or a base URL that is not the service's", async () => {
    const first = w.pool.forResource(NS, undefined);
    await first.client.vms.listAll();
    const edit = (spec: Partial<Connection["spec"]>) => w.apply<Connection>("connections", { metadata: { name: "default" }, spec: { ...connection().spec, ...spec } });

    edit({ authURL: "http://127.0.0.1:9/auth" }); // nothing listens there
    const typo = w.pool.clientFor(connection());
    expect(typo).not.toBe(first);
    await expect(typo.client.authenticate()).rejects.toThrow();
    expect(typo.client.credentials()).toBe("unknown"); // not refused: unreachable
    expect(w.pool.forUpkeep(NS, undefined)).toBe(first);
    expect(w.pool.forResource(NS, undefined, { deleting: true })).toBe(first);

    edit({ authURL: first.connection.spec.authURL, baseURL: `${w.emu.baseURL}/v2` }); // the token is had; every call is answered 404
    const wrongBase = w.pool.clientFor(connection());
    await wrongBase.client.authenticate();
    expect(wrongBase.client.credentials()).toBe("accepted");
    await expect(wrongBase.client.vms.listAll()).rejects.toThrow(/404/);
    expect(w.pool.clientFor(connection())).toBe(wrongBase);
    expect(w.pool.forUpkeep(NS, undefined)).toBe(first);
    expect(w.pool.forResource(NS, undefined, { deleting: true })).toBe(first);
    await expect(first.client.vms.listAll()).resolves.toEqual([]); // kept open, not retired
  });

  it("is not proven by a host that answers every path 200 with a page, and is by the service's own refusal of a call", async () => {
    const first = w.pool.forResource(NS, undefined);
    await first.client.vms.listAll();
    const edit = (spec: Partial<Connection["spec"]>) => w.apply<Connection>("connections", { metadata: { name: "default" }, spec: { ...connection().spec, ...spec } });
    edit({ registryURL: w.emu.baseURL }); // a new client, on the same service
    const next = w.pool.clientFor(connection());
    w.emu.injectFault({ method: "GET", path: "/compute/v1/vms", times: 1, action: { status: 200, body: "<html>dashboard</html>" } });
    await expect(next.client.vms.listAll()).rejects.toThrow(/not JSON/);
    expect(w.pool.forUpkeep(NS, undefined)).toBe(first);
    // An account that may not list its access clients: the service's 403 says the URL is its.
    w.emu.injectFault({ method: "GET", path: "/compute/v1/access/clients", times: 1, action: { status: 403, body: { code: 403, error_code: "forbidden", message: "not allowed" } } });
    await expect(next.client.accessClients()).rejects.toThrow(/403/);
    expect(w.pool.forUpkeep(NS, undefined)).toBe(next);
  });

  it("has no client for upkeep when the credentials are refused and none were accepted before, and says so", async () => {
    rotate("a-mistyped-key");
    await expect(w.pool.clientFor(connection()).client.authenticate()).rejects.toThrow(/credentials refused/);
    expect(() => w.pool.forUpkeep(NS, undefined)).toThrow(/refuses the credentials of Connection "default" \(Secret "creds"\).*fix the Secret/);
    expect(() => w.pool.forUpkeep(NS, { name: "other" })).toThrow(/Connection "other" not found/);
  });

  it("closes every client of a Connection it forgets, the one kept for upkeep too", async () => {
    const first = w.pool.forResource(NS, undefined);
    await first.client.vms.listAll();
    rotate("a-mistyped-key");
    const refused = w.pool.clientFor(connection());
    await expect(refused.client.authenticate()).rejects.toThrow();
    w.pool.forget(NS, "default");
    await expect(first.client.vms.listAll()).rejects.toThrow(/service client closed/);
    await expect(refused.client.vms.listAll()).rejects.toThrow(/service client closed/);
  });

  it("silences the hooks of a Connection it forgets: a call ending later reports nothing; a Connection made again reports", async () => {
    const reported: string[] = [];
    const pool = new ConnectionPool({
      connections: w.informer(kindNames.connection).as<Connection>() as unknown as Informer<Connection>,
      secrets: w.secrets.as(),
      logger: silentLogger(),
      inventoryMaxAgeMs: 60_000,
      hooks: (key) => ({ onRequest: (e) => reported.push(`${key} ${e.operation}`) }),
    });
    try {
      const first = pool.forResource(NS, undefined);
      await first.client.authenticate();
      expect(reported).toEqual([`${NS}/default token`]);
      w.emu.injectFault({ method: "GET", path: "/compute/v1/skills", times: 1, action: { delayMs: 300 } });
      const inFlight = first.client.skills.list().catch(() => undefined);
      await new Promise((r) => setTimeout(r, 100)); // sent, not answered yet
      pool.forget(NS, "default");
      await inFlight;
      expect(reported).toEqual([`${NS}/default token`]);

      // The same name again: a new client, whose calls are reported.
      await pool.forResource(NS, undefined).client.authenticate();
      expect(reported).toEqual([`${NS}/default token`, `${NS}/default token`]);
    } finally {
      await pool.close();
    }
  });
});
