import { describe, expect, it, vi } from "vitest";
import { EventRecorder, eventsWhile, scrubSecrets } from "../../../src/runtime/events.js";
import { KubeApiError, type KubeClient, type KubeObject } from "../../../src/runtime/kube-client.js";
import { silentLogger } from "../../../src/runtime/logging.js";
import { Metrics } from "../../../src/runtime/metrics.js";

/** Records the writes the recorder makes; this tests the correlator, not the API server. */
class RecordingClient {
  creates: { path: string; body: Record<string, unknown> }[] = [];
  patches: { path: string; body: Record<string, unknown> }[] = [];
  failPatchWith404 = false;
  /** Set: every create fails with it (the API server refusing). */
  failCreateWith: Error | undefined;
  delayMs = 0;
  async create<T>(path: string, body: unknown): Promise<T> {
    if (this.delayMs) await new Promise((r) => setTimeout(r, this.delayMs));
    if (this.failCreateWith) throw this.failCreateWith;
    this.creates.push({ path, body: structuredClone(body) as Record<string, unknown> }); // as sent
    return body as T;
  }
  async patch<T>(path: string, body: unknown): Promise<T> {
    if (this.delayMs) await new Promise((r) => setTimeout(r, this.delayMs));
    if (this.failPatchWith404) {
      throw new KubeApiError({ status: 404, reason: "NotFound", message: "gone", method: "PATCH", path });
    }
    this.patches.push({ path, body: structuredClone(body) as Record<string, unknown> });
    return body as T;
  }
}

const sandbox: KubeObject = {
  apiVersion: "agentcompute.dev/v1alpha1",
  kind: "Sandbox",
  metadata: { name: "sb-1", namespace: "team-a", uid: "u-1", resourceVersion: "7" },
};

function setup(opts: { now?: () => number; qps?: number; burst?: number; metrics?: Metrics } = {}) {
  const client = new RecordingClient();
  const rec = new EventRecorder({
    client: client as unknown as KubeClient,
    logger: silentLogger(),
    reportingInstance: "host_abcd",
    now: opts.now,
    metrics: opts.metrics,
    ...(opts.qps !== undefined ? { qps: opts.qps } : {}),
    ...(opts.burst !== undefined ? { burst: opts.burst } : {}),
  });
  return { client, rec };
}

describe("EventRecorder", () => {
  it("creates a core/v1 Event with the involved object and reporting fields", async () => {
    const { client, rec } = setup();
    rec.warning(sandbox, "AllocateFailed", "pool exhausted");
    await rec.flush();
    expect(client.creates).toHaveLength(1);
    const { path, body } = client.creates[0]!;
    expect(path).toBe("/api/v1/namespaces/team-a/events");
    expect(body).toMatchObject({
      apiVersion: "v1",
      kind: "Event",
      type: "Warning",
      reason: "AllocateFailed",
      message: "pool exhausted",
      count: 1,
      reportingComponent: "agentcompute.dev/agent-operator",
      reportingInstance: "host_abcd",
      involvedObject: { kind: "Sandbox", name: "sb-1", namespace: "team-a", uid: "u-1" },
      metadata: { namespace: "team-a" },
    });
    expect(String((body.metadata as { name: string }).name)).toMatch(/^sb-1\.[0-9a-f]+$/);
  });

  it("keeps writing when the wall clock steps back (NTP, a VM resumed from a snapshot): its rate limits run on the monotonic clock", async () => {
    const real = Date.now();
    const clock = vi.spyOn(Date, "now").mockReturnValue(real);
    const { client, rec } = setup({ qps: 50, burst: 2 });
    try {
      const one = (i: number): KubeObject => ({ ...sandbox, metadata: { ...sandbox.metadata, name: `sb-${i}`, uid: `u-${i}` } });
      rec.warning(one(1), "A", "first");
      rec.warning(one(2), "A", "second"); // the burst spent
      clock.mockReturnValue(real - 3_600_000); // an hour back
      for (let i = 3; i <= 6; i++) rec.warning(one(i), "A", `event ${i}`);
      await Promise.race([rec.flush(), new Promise((r) => setTimeout(r, 3_000))]);
      expect(client.creates).toHaveLength(6);
    } finally {
      clock.mockRestore();
      rec.close();
    }
  });

  it("aggregates identical events into count patches instead of new Events", async () => {
    let now = 1_000_000;
    const { client, rec } = setup({ now: () => now });
    rec.normal(sandbox, "Renewed", "TTL renewed");
    await rec.flush();
    now += 60_000;
    rec.normal(sandbox, "Renewed", "TTL renewed");
    await rec.flush();
    now += 60_000;
    rec.normal(sandbox, "Renewed", "TTL renewed");
    await rec.flush();
    expect(client.creates).toHaveLength(1);
    expect(client.patches.map((p) => p.body.count)).toEqual([2, 3]);
    const name = (client.creates[0]!.body.metadata as { name: string }).name;
    expect(client.patches[0]!.path).toBe(`/api/v1/namespaces/team-a/events/${name}`);
  });

  it("a different message or reason is a different Event", async () => {
    const { client, rec } = setup();
    rec.normal(sandbox, "Renewed", "a");
    rec.normal(sandbox, "Renewed", "b");
    rec.normal(sandbox, "Other", "a");
    await rec.flush();
    expect(client.creates).toHaveLength(3);
  });

  it("starts a new Event after the correlation window", async () => {
    let now = 0;
    const { client, rec } = setup({ now: () => now });
    rec.normal(sandbox, "R", "m");
    await rec.flush();
    now += 11 * 60_000;
    rec.normal(sandbox, "R", "m");
    await rec.flush();
    expect(client.creates).toHaveLength(2);
    expect(client.patches).toHaveLength(0);
  });

  it("coalesces a burst of repeats into few writes with the final count", async () => {
    const { client, rec } = setup();
    client.delayMs = 5;
    for (let i = 0; i < 20; i++) rec.warning(sandbox, "Failing", "boom");
    await rec.flush();
    expect(client.creates).toHaveLength(1);
    expect(client.creates.length + client.patches.length).toBeLessThanOrEqual(3);
    const last = client.patches.at(-1)?.body.count ?? client.creates[0]!.body.count;
    expect(last).toBe(20);
  });

  it("rate-limits one object (burst 25) without affecting others", async () => {
    let now = 0;
    const { client, rec } = setup({ now: () => now });
    for (let i = 0; i < 40; i++) rec.warning(sandbox, "Failing", `attempt ${i}`);
    await rec.flush();
    expect(client.creates).toHaveLength(25);
    const other: KubeObject = { kind: "Sandbox", metadata: { name: "sb-2", namespace: "team-a", uid: "u-2" } };
    rec.warning(other, "Failing", "x");
    await rec.flush();
    expect(client.creates).toHaveLength(26);
    now += 5 * 60_000; // one token back
    rec.warning(sandbox, "Failing", "later");
    rec.warning(sandbox, "Failing", "later still");
    await rec.flush();
    expect(client.creates).toHaveLength(27);
  });

  it("re-creates the Event when the aggregated one expired (404 on patch)", async () => {
    const { client, rec } = setup();
    rec.normal(sandbox, "R", "m");
    await rec.flush();
    client.failPatchWith404 = true;
    rec.normal(sandbox, "R", "m");
    await rec.flush();
    expect(client.creates).toHaveLength(2);
  });

  it("re-creates an expired Event with the repeats not written yet, and patches the new one after", async () => {
    const metrics = new Metrics({ defaultMetrics: false });
    // One write at once, the next 50 ms later: repeats meanwhile are coalesced into it.
    const { client, rec } = setup({ metrics, qps: 20, burst: 1 });
    rec.normal(sandbox, "R", "m");
    await rec.flush();
    client.failPatchWith404 = true;
    // Three repeats coalesced into one write, whose patch finds the Event expired.
    for (let i = 0; i < 3; i++) rec.normal(sandbox, "R", "m");
    await rec.flush();
    expect(client.creates.map((c) => c.body.count)).toEqual([1, 3]);
    client.failPatchWith404 = false;
    rec.normal(sandbox, "R", "m");
    await rec.flush();
    const second = (client.creates[1]!.body.metadata as { name: string }).name;
    expect(client.patches.map((p) => [p.path, p.body.count])).toEqual([[`/api/v1/namespaces/team-a/events/${second}`, 4]]);
    // Every event counted once: two Events made, three repeats counted on them.
    expect(await eventCounts(metrics)).toEqual({ "Normal/created": 2, "Normal/aggregated": 3 });
  });

  it("scrubs credentials and truncates long messages", async () => {
    const { client, rec } = setup();
    rec.warning(sandbox, "AuthFailed", `request failed: Authorization: Bearer abc.def-ghi ${"x".repeat(2000)}`);
    await rec.flush();
    const msg = String(client.creates[0]!.body.message);
    expect(msg).not.toContain("abc.def-ghi");
    expect(msg.length).toBeLessThanOrEqual(1024);
  });

  it("uses namespace default for cluster-scoped objects", async () => {
    const { client, rec } = setup();
    rec.normal({ kind: "Namespace", metadata: { name: "x", uid: "u" } }, "R", "m");
    await rec.flush();
    expect(client.creates[0]!.path).toBe("/api/v1/namespaces/default/events");
  });
});

/** agentcompute_events_total, as "type/result" → value. */
async function eventCounts(metrics: Metrics): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const v of (await metrics.eventsTotal.get()).values) out[`${v.labels.type}/${v.labels.result}`] = v.value;
  return out;
}

describe("agentcompute_events_total", () => {
  it("counts an event created only once its Event is written: one held back by the rate limit and dropped at close() is dropped only", async () => {
    const metrics = new Metrics({ defaultMetrics: false });
    const { client, rec } = setup({ qps: 0.001, burst: 1, metrics });
    for (let i = 0; i < 5; i++) rec.warning(sandbox, "Failing", `attempt ${i}`);
    await new Promise((r) => setTimeout(r, 20));
    rec.close();
    await rec.flush();
    expect(client.creates).toHaveLength(1);
    expect(await eventCounts(metrics)).toEqual({ "Warning/created": 1, "Warning/dropped": 4 });
  });

  it("counts an event the API server refuses as failed, not created", async () => {
    const metrics = new Metrics({ defaultMetrics: false });
    const { client, rec } = setup({ metrics });
    client.failCreateWith = new KubeApiError({ status: 403, reason: "Forbidden", message: "no", method: "POST", path: "/api/v1/namespaces/team-a/events" });
    rec.warning(sandbox, "Failing", "boom");
    await rec.flush();
    expect(await eventCounts(metrics)).toEqual({ "Warning/failed": 1 });
  });

  it("counts an event dropped by EventOptions.while (a sharded replica's lapsed membership) as dropped only", async () => {
    const metrics = new Metrics({ defaultMetrics: false });
    // One write at once (another object's), the next 100 ms later.
    const { client, rec } = setup({ metrics, qps: 10, burst: 1 });
    let open = true;
    rec.warning(agent(0), "Failing", "boom");
    eventsWhile(rec, () => open).warning(sandbox, "Failing", "boom");
    open = false;
    await rec.flush();
    expect(client.creates).toHaveLength(1);
    expect(await eventCounts(metrics)).toEqual({ "Warning/created": 1, "Warning/dropped": 1 });
  });

  it("counts a combined Event's creation as created, and the other folds as aggregated", async () => {
    const metrics = new Metrics({ defaultMetrics: false });
    const client = new RecordingClient();
    const rec = aggregating(client, 1, { metrics });
    for (let i = 0; i < 5; i++) rec.normal(agent(i), "Created", "created");
    await rec.flush();
    expect(client.creates.map((c) => [(c.body.involvedObject as { kind: string }).kind, c.body.count])).toEqual([
      ["Agent", 1],
      ["Namespace", 4],
    ]);
    // Five events: two Events made, three folded into the combined one.
    expect(await eventCounts(metrics)).toEqual({ "Normal/created": 2, "Normal/aggregated": 3 });
  });
});

describe("scrubSecrets", () => {
  it("redacts bearer tokens, JWTs and key=value secrets", () => {
    expect(scrubSecrets("Bearer sk-123.abc")).toBe("Bearer [REDACTED]");
    expect(scrubSecrets("got eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig_part here")).toBe("got [REDACTED] here");
    expect(scrubSecrets('{"access_token": "abc123", "ok": true}')).toBe('{"access_token": "[REDACTED]", "ok": true}');
    expect(scrubSecrets("apiKey=s3cr3t&x=1")).toBe("apiKey=[REDACTED]&x=1");
    expect(scrubSecrets("client_secret: hunter2")).toBe("client_secret: [REDACTED]");
    expect(scrubSecrets("the VM was renewed")).toBe("the VM was renewed");
  });

  it("redacts the credential forms a service's error text carries: any Authorization value, camelCase keys, a URL's password, a private key", () => {
    const cases: Array<[string, string]> = [
      ["Authorization: Token abc123def", "abc123def"],
      ['{"authorization":"Basic dXNlcjpwYXNz"}', "dXNlcjpwYXNz"],
      ['{"apiToken":"sk-live-9f8e7d"}', "sk-live-9f8e7d"],
      ["authToken=tok-5566&next=1", "tok-5566"],
      ["sessionToken: st-778899", "st-778899"],
      ["dial https://admin:hunter2@db.example.com:5432 failed", "hunter2"],
      ['{"private_key":"-----BEGIN RSA PRIVATE KEY-----\\nMIIEpAIBAAKCAQEA7\\n-----END RSA PRIVATE KEY-----"}', "MIIEpAIBAAKCAQEA7"],
      ["Bearer eyJhbGciOi.eyJzdWIiOi.c2ln", "eyJzdWIiOi"],
    ];
    for (const [message, secret] of cases) expect(scrubSecrets(message), message).not.toContain(secret);
    // Words that only look like keys are left alone.
    expect(scrubSecrets("tokens: 5, secretRef: creds, tokenExpiresAt: 2026-11-29T00:00:00Z")).toBe("tokens: 5, secretRef: creds, tokenExpiresAt: 2026-11-29T00:00:00Z");
    expect(scrubSecrets("dial https://db.example.com:5432 failed")).toBe("dial https://db.example.com:5432 failed");
    // Prose about tokens and Authorization is left as it is said.
    expect(scrubSecrets("Token service refused the credentials; Token has expired")).toBe("Token service refused the credentials; Token has expired");
    expect(scrubSecrets("missing Authorization: the token service answered 401")).toBe("missing Authorization: [REDACTED] token service answered 401");
  });

  it("scrubs only the head of a long message (a webhook's Status text), well over what is written: its patterns backtrack", () => {
    expect(scrubSecrets("a-".repeat(50_000)).length).toBe(4 * 1024);
  });

  it("rate-limits writes: a burst goes at once, the rest at qps", async () => {
    const { client, rec } = setup({ qps: 50, burst: 5 });
    const objects = Array.from({ length: 15 }, (_, i) => ({ ...sandbox, metadata: { ...sandbox.metadata, name: `sb-${i}`, uid: `u-${i}` } }));
    const started = performance.now();
    for (const o of objects) rec.normal(o, "Created", "created the sandbox in the service");
    await new Promise((r) => setTimeout(r, 20));
    expect(client.creates.length).toBeGreaterThanOrEqual(5);
    expect(client.creates.length).toBeLessThan(15);
    await rec.flush();
    expect(client.creates).toHaveLength(15);
    // 10 beyond the burst at 50/s: at least ~200 ms
    expect(performance.now() - started).toBeGreaterThanOrEqual(150);
  });

  it("close() drops what the rate limit holds back, at once, and ignores new events", async () => {
    const { client, rec } = setup({ qps: 1, burst: 2 });
    const objects = Array.from({ length: 10 }, (_, i) => ({ ...sandbox, metadata: { ...sandbox.metadata, name: `sb-${i}`, uid: `u-${i}` } }));
    for (const o of objects) rec.normal(o, "Created", "created the sandbox in the service");
    await new Promise((r) => setTimeout(r, 20));
    rec.close();
    const started = performance.now();
    await rec.flush();
    expect(performance.now() - started).toBeLessThan(500); // not 8 s at 1/s
    expect(client.creates.length).toBeLessThanOrEqual(3);
    rec.normal(sandbox, "Late", "after close");
    await rec.flush();
    expect(client.creates.map((c) => c.body.reason)).not.toContain("Late");
  });
});

const agent = (i: number): KubeObject => ({
  apiVersion: "agentcompute.dev/v1alpha1",
  kind: "Agent",
  metadata: { name: `ag-${i}`, namespace: "team-a", uid: `u-${i}` },
});

/** A recorder folding similar "Created" events after `aggregateAfter`, with no rate limit to speak of. */
function aggregating(client: RecordingClient, aggregateAfter: number, opts: { now?: () => number; metrics?: Metrics } = {}): EventRecorder {
  return new EventRecorder({
    client: client as unknown as KubeClient,
    logger: silentLogger(),
    reportingInstance: "host_abcd",
    aggregateReasons: ["Created"],
    aggregateAfter,
    qps: 1000,
    burst: 1000,
    ...opts,
  });
}

/** Every write of the combined Events: its Event's name, count, and the count its message says. */
function combinedWrites(client: RecordingClient): { name: string; count: unknown; says: number }[] {
  const creates = client.creates.filter((c) => (c.body.involvedObject as { kind: string }).kind === "Namespace");
  const names = new Set(creates.map((c) => (c.body.metadata as { name: string }).name));
  const writes = [
    ...creates.map((c) => ({ name: (c.body.metadata as { name: string }).name, body: c.body })),
    ...client.patches.map((p) => ({ name: p.path.split("/").at(-1)!, body: p.body })).filter((p) => names.has(p.name)),
  ];
  return writes.map(({ name, body }) => ({ name, count: body.count, says: Number(/ for (\d+) more /.exec(String(body.message))?.[1]) }));
}

describe("EventRecorder: similar events of many objects", () => {
  it("writes the first ones for their objects and folds the rest into one Event on the namespace", async () => {
    const client = new RecordingClient();
    const rec = aggregating(client, 3);
    for (let i = 0; i < 50; i++) rec.normal(agent(i), "Created", `created agent ${i}`);
    rec.warning(agent(40), "ServiceRejected", "refused"); // warnings are never folded
    await rec.flush();
    const onObjects = client.creates.filter((c) => (c.body.involvedObject as { kind: string }).kind === "Agent");
    expect(onObjects.map((c) => c.body.reason)).toEqual(["Created", "Created", "Created", "ServiceRejected"]);
    const combined = client.creates.filter((c) => (c.body.involvedObject as { kind: string }).kind === "Namespace");
    expect(combined).toHaveLength(1);
    expect(combined[0]?.body).toMatchObject({ reason: "Created", type: "Normal", involvedObject: { kind: "Namespace", name: "team-a", namespace: "team-a" } });
    // One create for 47 folded events (they all arrived before the flush), with the count.
    expect(combined[0]?.body.count).toBe(47);
    expect(String(combined[0]?.body.message)).toMatch(/^\(combined from similar events\): Created for 47 more Agent resources .*ag-49: created agent 49$/);
    expect(client.patches).toHaveLength(0);
  });

  it("starts a new combined Event with each window, so that its count and its message agree", async () => {
    let now = Date.UTC(2030, 0, 1);
    const client = new RecordingClient();
    const rec = aggregating(client, 3, { now: () => now });
    // 20 creates every 5 minutes for 35 minutes: windows from 0, 15 and 30 min (10 min each).
    let i = 0;
    for (let minute = 0; minute <= 35; minute += 5) {
      for (let j = 0; j < 20; j++, i++) rec.normal(agent(i), "Created", `created agent ${i}`);
      await rec.flush();
      now += 5 * 60_000;
    }
    const onObjects = client.creates.filter((c) => (c.body.involvedObject as { kind: string }).kind === "Agent");
    expect(onObjects).toHaveLength(9); // the first 3 of each window
    const writes = combinedWrites(client);
    for (const w of writes) expect(w.says).toBe(w.count);
    const byEvent = new Map<string, unknown[]>();
    for (const w of writes) byEvent.set(w.name, [...(byEvent.get(w.name) ?? []), w.count]);
    expect([...byEvent.values()]).toEqual([
      [17, 37, 57],
      [17, 37, 57],
      [17, 37],
    ]);
  });

  it("re-creates an expired combined Event with the folds not written yet, its message saying as many", async () => {
    const client = new RecordingClient();
    const rec = aggregating(client, 1);
    for (let i = 0; i < 3; i++) rec.normal(agent(i), "Created", "created");
    await rec.flush();
    client.failPatchWith404 = true;
    for (let i = 3; i < 8; i++) rec.normal(agent(i), "Created", "created");
    await rec.flush();
    const writes = combinedWrites(client);
    expect(writes.map((w) => [w.count, w.says])).toEqual([
      [2, 2],
      [5, 5],
    ]);
    expect(new Set(writes.map((w) => w.name)).size).toBe(2);
  });

  it("folds nothing of a reason it is not told to", async () => {
    const client = new RecordingClient();
    const rec = new EventRecorder({ client: client as unknown as KubeClient, logger: silentLogger(), reportingInstance: "h", aggregateAfter: 1, qps: 1000, burst: 1000 });
    for (let i = 0; i < 5; i++) rec.normal(agent(i), "Created", "created");
    await rec.flush();
    expect(client.creates).toHaveLength(5);
  });
});

describe("eventsWhile", () => {
  it("records nothing while closed, and drops what it recorded while open once closed before the write", async () => {
    const client = new RecordingClient();
    // One write at once, then one per 100 ms: the others wait for the rate limit.
    const rec = new EventRecorder({ client: client as unknown as KubeClient, logger: silentLogger(), reportingInstance: "h", qps: 10, burst: 1 });
    let open = false;
    const events = eventsWhile(rec, () => open);
    events.warning(agent(0), "ServiceRejected", "refused while closed");
    open = true;
    for (let i = 1; i <= 3; i++) events.warning(agent(i), "ServiceRejected", "refused");
    open = false;
    await rec.flush();
    expect(client.creates.map((c) => (c.body.involvedObject as { name: string }).name)).toEqual(["ag-1"]);

    // Open again: new events are written.
    open = true;
    events.warning(agent(4), "ServiceRejected", "refused");
    await rec.flush();
    expect(client.creates.map((c) => (c.body.involvedObject as { name: string }).name)).toEqual(["ag-1", "ag-4"]);
  });

  it("drops a combined Event waiting for its flush once closed", async () => {
    const client = new RecordingClient();
    const rec = aggregating(client, 1);
    let open = true;
    const events = eventsWhile(rec, () => open);
    for (let i = 0; i < 5; i++) events.normal(agent(i), "Created", "created");
    open = false;
    await rec.flush();
    // The first, written at once; the four folded ones waited for the combined Event's flush.
    expect(client.creates.map((c) => (c.body.involvedObject as { kind: string }).kind)).toEqual(["Agent"]);
  });
});
