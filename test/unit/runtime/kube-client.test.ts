// Transport-level tests of KubeClient against a local HTTP server that streams bytes: chunk
// framing, error mapping, Retry-After. Behaviour against the real API server is in test/e2e.
import { KubeConfig } from "@kubernetes/client-node";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import {
  KubeApiError,
  KubeClient,
  isConflict,
  isGone,
  isNotFound,
  isAlreadyExists,
  resourcePath,
  withWriteGate,
  type WatchEvent,
} from "../../../src/runtime/kube-client.js";

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

let server: Server | undefined;
let client: KubeClient | undefined;

async function serve(handler: Handler): Promise<KubeClient> {
  server = createServer(handler);
  await new Promise<void>((r) => server!.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "c", server: `http://127.0.0.1:${port}`, skipTLSVerify: true }],
    users: [{ name: "u", token: "secret-token" }],
    contexts: [{ name: "ctx", cluster: "c", user: "u", namespace: "team-a" }],
    currentContext: "ctx",
  });
  client = new KubeClient({ kubeConfig: kc, requestTimeoutMs: 2_000 });
  return client;
}

afterEach(async () => {
  await client?.close();
  server?.closeAllConnections();
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  server = undefined;
  client = undefined;
});

const obj = (name: string, rv: string, extra: Record<string, unknown> = {}) => ({
  apiVersion: "v1",
  kind: "ConfigMap",
  metadata: { name, namespace: "team-a", resourceVersion: rv },
  ...extra,
});

describe("paths", () => {
  it("builds core and group paths", () => {
    expect(resourcePath({ version: "v1", plural: "secrets", namespace: "a", name: "b" })).toBe("/api/v1/namespaces/a/secrets/b");
    expect(resourcePath({ group: "agentcompute.dev", version: "v1alpha1", plural: "sandboxes" })).toBe(
      "/apis/agentcompute.dev/v1alpha1/sandboxes",
    );
    expect(
      resourcePath({ group: "agentcompute.dev", version: "v1alpha1", plural: "sandboxes", namespace: "n", name: "s", subresource: "status" }),
    ).toBe("/apis/agentcompute.dev/v1alpha1/namespaces/n/sandboxes/s/status");
  });
});

describe("requests", () => {
  it("sends auth, query and JSON; returns parsed JSON", async () => {
    let seen: { auth?: string; url?: string; ct?: string; body?: string } = {};
    const c = await serve((req, res) => {
      let body = "";
      req.on("data", (d: Buffer) => (body += d.toString()));
      req.on("end", () => {
        seen = { auth: req.headers.authorization, url: req.url, ct: req.headers["content-type"], body };
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ items: null, metadata: { resourceVersion: "5" } }));
      });
    });
    const list = await c.list("/api/v1/namespaces/team-a/configmaps", { labelSelector: "a=b", limit: 10 });
    expect(list.items).toEqual([]);
    expect(seen.auth).toBe("Bearer secret-token");
    expect(seen.url).toBe("/api/v1/namespaces/team-a/configmaps?labelSelector=a%3Db&limit=10");
    await c.patch("/x", { a: 1 }, "merge", { fieldManager: "m" });
    expect(seen.ct).toBe("application/merge-patch+json");
    expect(seen.url).toBe("/x?fieldManager=m");
    await c.patch("/x", { a: 1 }, "apply", { fieldManager: "m", force: true });
    expect(seen.ct).toBe("application/apply-patch+yaml");
    expect(seen.url).toBe("/x?fieldManager=m&force=true");
    expect(c.currentNamespace()).toBe("team-a");
  });

  it("maps Status errors to KubeApiError", async () => {
    const statuses: Record<string, [number, Record<string, unknown>]> = {
      "/nf": [404, { kind: "Status", reason: "NotFound", message: "cm \"x\" not found", code: 404 }],
      "/cf": [409, { kind: "Status", reason: "Conflict", message: "the object has been modified", code: 409 }],
      "/ae": [409, { kind: "Status", reason: "AlreadyExists", message: "exists", code: 409 }],
      "/gone": [410, { kind: "Status", reason: "Expired", message: "too old", code: 410 }],
      "/plain": [502, {}],
    };
    const c = await serve((req, res) => {
      const [code, body] = statuses[req.url ?? ""] ?? [500, {}];
      if (req.url === "/plain") res.writeHead(502).end("bad gateway");
      else res.writeHead(code, { "content-type": "application/json" }).end(JSON.stringify(body));
    });
    const err = async (p: string) => c.get(p).then(() => undefined, (e: unknown) => e);
    const nf = await err("/nf");
    expect(nf).toBeInstanceOf(KubeApiError);
    expect(isNotFound(nf)).toBe(true);
    expect((nf as KubeApiError).message).toBe('cm "x" not found');
    expect(isConflict(await err("/cf"))).toBe(true);
    const ae = await err("/ae");
    expect(isAlreadyExists(ae)).toBe(true);
    expect(isConflict(ae)).toBe(false);
    expect(isGone(await err("/gone"))).toBe(true);
    const plain = (await err("/plain")) as KubeApiError;
    expect(plain.status).toBe(502);
    expect(plain.message).toContain("bad gateway");
  });

  it("a 2xx body cut short (a list of Secrets): the error names the request and never quotes the body", async () => {
    const c = await serve((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" }).end('{"kind":"SecretList","items":[{"data":{"token":"c2VjcmV0LXZhbHVl"');
    });
    const err = await c.get("/api/v1/secrets").catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/^GET \/api\/v1\/secrets: the API server answered HTTP 200 with a body that is not JSON \(\d+ characters/);
    expect(JSON.stringify(err, Object.getOwnPropertyNames(err))).not.toContain("c2VjcmV0");
  });

  it("retries 429 honouring Retry-After", async () => {
    let n = 0;
    const c = await serve((_req, res) => {
      n++;
      if (n < 3) res.writeHead(429, { "retry-after": "0", "content-type": "application/json" }).end("{}");
      else res.writeHead(200, { "content-type": "application/json" }).end('{"ok":true}');
    });
    expect(await c.get("/x")).toEqual({ ok: true });
    expect(n).toBe(3);
  });

  it("sends nothing more once closed: a write waiting out a Retry-After fails instead (a lost leader must not write beside the next)", async () => {
    let posts = 0;
    const c = await serve((req, res) => {
      if (req.method === "POST") posts++;
      res.writeHead(429, { "retry-after": "1", "content-type": "application/json" }).end("{}");
    });
    const write = c.create("/api/v1/namespaces/team-a/events", { metadata: { name: "e" } }).then(
      () => "sent",
      (err: unknown) => (err as Error).message,
    );
    await new Promise((r) => setTimeout(r, 200));
    await c.close();
    expect(await write).toBe("KubeClient is closed");
    expect(posts).toBe(1);
  });

  it("times out a request that gets no answer", async () => {
    const c = await serve(() => {
      /* never answers */
    });
    await expect(c.get("/hang")).rejects.toThrow(/no answer within/);
  });
});

describe("watch", () => {
  it("parses events split across arbitrary chunk boundaries, including inside a UTF-8 character", async () => {
    const events = [
      { type: "ADDED", object: obj("a", "1", { data: { greeting: "héllo wörld ✓ 🚀" } }) },
      { type: "MODIFIED", object: obj("a", "2") },
      { type: "BOOKMARK", object: { kind: "ConfigMap", apiVersion: "v1", metadata: { resourceVersion: "3" } } },
      { type: "DELETED", object: obj("a", "4") },
    ];
    const bytes = Buffer.from(events.map((e) => JSON.stringify(e)).join("\n") + "\n", "utf8");
    const c = await serve((req, res) => {
      expect(req.url).toContain("watch=true");
      expect(req.url).toContain("allowWatchBookmarks=true");
      expect(req.url).toContain("resourceVersion=0");
      res.writeHead(200, { "content-type": "application/json" });
      // 7-byte chunks cut through JSON tokens and multi-byte characters alike.
      let i = 0;
      const tick = () => {
        if (i >= bytes.length) return res.end();
        res.write(bytes.subarray(i, i + 7));
        i += 7;
        setImmediate(tick);
      };
      tick();
    });
    const got: WatchEvent<unknown>[] = [];
    for await (const ev of c.watch("/api/v1/configmaps", { resourceVersion: "0", allowWatchBookmarks: true, timeoutSeconds: 5 })) {
      got.push(ev);
    }
    expect(got).toEqual(events);
  });

  it("handles many events in one chunk and a final line without newline", async () => {
    const lines = Array.from({ length: 50 }, (_, i) => JSON.stringify({ type: "ADDED", object: obj(`o${i}`, String(i)) }));
    const c = await serve((_req, res) => {
      res.writeHead(200);
      res.end(lines.join("\n"));
    });
    let n = 0;
    for await (const _ of c.watch("/w", {})) n++;
    expect(n).toBe(50);
  });

  it("yields ERROR events (e.g. 410) for the caller to act on", async () => {
    const c = await serve((_req, res) => {
      res.writeHead(200);
      res.end(JSON.stringify({ type: "ERROR", object: { kind: "Status", code: 410, reason: "Expired", message: "too old resource version" } }) + "\n");
    });
    const got: WatchEvent<unknown>[] = [];
    for await (const ev of c.watch("/w", {})) got.push(ev);
    expect(got[0]?.type).toBe("ERROR");
  });

  it("throws KubeApiError on a non-200 watch answer", async () => {
    const c = await serve((_req, res) => {
      res.writeHead(410, { "content-type": "application/json" }).end(JSON.stringify({ kind: "Status", code: 410, reason: "Gone", message: "gone" }));
    });
    const it = c.watch("/w", { resourceVersion: "1" });
    await expect(it.next()).rejects.toSatisfy(isGone);
  });

  it("ends with an error on a corrupt frame instead of silently dropping it", async () => {
    const c = await serve((_req, res) => {
      res.writeHead(200);
      // A Secret's event cut short: the error must not quote its data.
      res.end('{"type":"ADDED","object":{"metadata":{}}}\n{"type":"MODIFIED","object":{"kind":"Secret","data":{"token":"c2VjcmV0LXZhbHVl"\n');
    });
    const got: unknown[] = [];
    const err = await (async () => {
      for await (const ev of c.watch("/w", {})) got.push(ev);
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toMatch(/unparsable event \(not JSON \(\d+ characters/);
    expect(JSON.stringify(err, Object.getOwnPropertyNames(err))).not.toContain("c2VjcmV0");
    expect(got).toHaveLength(1);
  });

  it("stops the stream when the caller aborts", async () => {
    const c = await serve((_req, res) => {
      res.writeHead(200);
      res.write(JSON.stringify({ type: "ADDED", object: obj("a", "1") }) + "\n");
      // then silence
    });
    const ac = new AbortController();
    const got: unknown[] = [];
    const done = (async () => {
      for await (const ev of c.watch("/w", {}, ac.signal)) {
        got.push(ev);
        ac.abort();
      }
    })();
    await expect(done).rejects.toBeTruthy();
    expect(got).toHaveLength(1);
  });
});

describe("request listeners", () => {
  it("reports every request with method, path and status, until unsubscribed", async () => {
    const c = await serve((req, res) => {
      res.writeHead(req.method === "PATCH" ? 404 : 200, { "content-type": "application/json" });
      res.end(req.method === "PATCH" ? JSON.stringify({ kind: "Status", code: 404, reason: "NotFound" }) : "{}");
    });
    const seen: unknown[] = [];
    const off = c.onRequest((r) => seen.push(r));
    await c.get("/api/v1/namespaces/a/configmaps/x");
    await expect(c.patch("/api/v1/namespaces/a/configmaps/x", {}, "merge")).rejects.toThrow();
    off();
    await c.get("/api/v1/namespaces/a/configmaps/y");
    expect(seen).toEqual([
      expect.objectContaining({ method: "GET", path: "/api/v1/namespaces/a/configmaps/x", status: 200, watch: false }),
      expect.objectContaining({ method: "PATCH", path: "/api/v1/namespaces/a/configmaps/x", status: 404, watch: false }),
    ]);
  });
});

describe("discardResult", () => {
  it("resolves undefined without parsing the answer, and the connection stays usable", async () => {
    const c = await serve((req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(req.method === "PATCH" ? "not json at all, and never parsed" : JSON.stringify(obj("x", "2")));
    });
    await expect(c.patch("/api/v1/namespaces/team-a/configmaps/x", { data: {} }, "merge", { discardResult: true })).resolves.toBeUndefined();
    await expect(c.create("/api/v1/namespaces/team-a/configmaps", obj("x", ""), { discardResult: true })).resolves.toBeUndefined();
    await expect(c.get<{ metadata: { name: string } }>("/api/v1/namespaces/team-a/configmaps/x")).resolves.toMatchObject({ metadata: { name: "x" } });
  });
});

describe("withWriteGate", () => {
  it("refuses writes unsent while the gate says no; reads go through, on the one client underneath", async () => {
    const seen: string[] = [];
    const c = await serve((req, res) => {
      seen.push(`${req.method} ${req.url}`);
      req.resume();
      req.on("end", () => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(obj("a", "1"))));
    });
    let open = false;
    const gated = withWriteGate(c, () => {
      if (!open) throw new Error("membership lapsed");
    });
    const path = "/api/v1/namespaces/team-a/configmaps";
    await expect(gated.get(`${path}/a`)).resolves.toMatchObject({ metadata: { name: "a" } });
    await expect(gated.create(path, obj("a", ""))).rejects.toThrow("membership lapsed");
    await expect(gated.replace(`${path}/a`, obj("a", "1"))).rejects.toThrow("membership lapsed");
    await expect(gated.patch(`${path}/a`, { data: {} }, "merge", { discardResult: true })).rejects.toThrow("membership lapsed");
    await expect(gated.delete(`${path}/a`)).rejects.toThrow("membership lapsed");
    expect(seen).toEqual([`GET ${path}/a`]);
    open = true;
    await gated.patch(`${path}/a`, { data: {} }, "merge", { discardResult: true });
    expect(seen).toEqual([`GET ${path}/a`, `PATCH ${path}/a`]);
    // Wrapped again, both gates are asked: either one refuses.
    let outerOpen = false;
    const twice = withWriteGate(gated, () => {
      if (!outerOpen) throw new Error("outer gate closed");
    });
    await expect(twice.patch(`${path}/a`, { data: {} }, "merge")).rejects.toThrow("outer gate closed");
    outerOpen = true;
    open = false;
    await expect(twice.patch(`${path}/a`, { data: {} }, "merge")).rejects.toThrow("membership lapsed");
    expect(seen).toEqual([`GET ${path}/a`, `PATCH ${path}/a`]);
    // The client itself is not gated: the membership's own Lease writes go through it.
    await c.delete(`${path}/a`);
    expect(seen.at(-1)).toBe(`DELETE ${path}/a`);
  });

  it("asks again before the client's own retry: a write throttled while the gate was open is not sent again once it closed", async () => {
    const seen: string[] = [];
    const c = await serve((req, res) => {
      seen.push(`${req.method} ${req.url}`);
      req.resume();
      req.on("end", () => res.writeHead(429, { "content-type": "application/json", "retry-after": "1" }).end(JSON.stringify({ kind: "Status", code: 429, reason: "TooManyRequests" })));
    });
    let open = true;
    const gated = withWriteGate(c, () => {
      if (!open) throw new Error("membership lapsed");
    });
    const path = "/api/v1/namespaces/team-a/configmaps/a";
    const write = gated.patch(path, { data: {} }, "merge");
    await expect.poll(() => seen.length).toBe(1);
    open = false;
    await expect(write).rejects.toThrow("membership lapsed");
    expect(seen).toEqual([`PATCH ${path}`]);
  });
});

describe("credentials that take long (an exec plugin that hangs)", () => {
  it("are waited for no longer than the caller's signal allows: a lease renewal gives up by its own deadline", async () => {
    let asked = 0;
    const hung = new KubeClient({
      cluster: {
        server: "http://127.0.0.1:9",
        credentials: async () => {
          asked++;
          await new Promise((r) => setTimeout(r, 3_000));
          return { headers: {}, tls: {} };
        },
      },
      requestTimeoutMs: 400,
    });
    try {
      const started = performance.now();
      await expect(hung.get("/api/v1/namespaces/a/configmaps/x", { signal: AbortSignal.timeout(150) })).rejects.toThrow();
      expect(performance.now() - started).toBeLessThan(1_500);
      expect(asked).toBe(1);
    } finally {
      await hung.close();
    }
  });
});
