// Sandbox renewals off the status path: a renewal is one service call and no status write until
// a report is due (--sandbox-status-interval); a new VM is reported at once; status says the
// cadences so an old expiresAt does not mislead; a new process neither loses nor doubles the
// count; the metrics count every renewal as it happens.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Annotations } from "../../../src/api/names.js";
import type { Sandbox } from "../../../src/api/index.js";
import { parseRunFlags } from "../../../src/commands/run.js";
import { sandboxes } from "../../../src/controllers/sandbox.js";
import { Metrics } from "../../../src/runtime/metrics.js";
import { condition, World } from "./helpers.js";

const INTERVAL_MS = 600_000;

let w: World;
beforeEach(async () => {
  w = await World.start();
});
afterEach(async () => {
  await w.close();
});

/** The kind as one operator process builds it: its own renewal counts, its own metrics. */
function operatorProcess(metrics = new Metrics({ defaultMetrics: false })) {
  const kind = sandboxes({ ...w.ctx, options: { sandboxStatusIntervalMs: INTERVAL_MS }, metrics });
  return { kind, metrics };
}

// TTL 60 s: renewBeforeSeconds defaults to 30, so a renewal is due 30 s after the last one.
const apply = (spec: Partial<Sandbox["spec"]> = {}, annotations: Record<string, string> = {}) =>
  w.apply<Sandbox>("sandboxes", { metadata: { name: "sb", annotations }, spec: { tier: "standard", ttlSeconds: 60, ...spec } });
const sandbox = () => w.get<Sandbox>("sandboxes", "sb");
/** Bumped by every write of the resource (the world's API server stand-in). */
const version = () => sandbox().metadata.resourceVersion;
/** The VM's expiry as the service holds it. */
const vmExpiry = (id: string) => w.emu.state.vms.get(id)?.expiresAt;

/**
 * The service writes it accepted since the last call. (The world's clock moves the emulator's
 * token expiry but not the client's token cache: a call may be refused once with 401 and retried.)
 */
function accepted(): string[] {
  const ops = w.emu.requests.filter((r) => r.operation !== "token" && r.method !== "GET" && typeof r.status === "number" && r.status < 300).map((r) => r.operation);
  w.calls();
  return ops;
}

/** Lets the renewal come due and reconciles; returns whether the status was written. */
async function renewOnce(kind: ReturnType<typeof operatorProcess>["kind"]): Promise<boolean> {
  w.advance(31_000);
  const before = version();
  await w.reconcile(kind, "sb");
  expect(accepted()).toEqual(["vms.renew"]);
  return version() !== before;
}

/** A series' value as /metrics shows it (`name` exactly, e.g. `..._count` of a histogram). */
async function metric(metrics: Metrics, family: string, series = family): Promise<number | undefined> {
  const text = await metrics.registry.getSingleMetricAsString(family);
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.split(" ")[1]);
}

describe("Sandbox renewals and status", () => {
  it("renews without writing status until the interval has passed, then reports the exact count once", async () => {
    const { kind } = operatorProcess();
    apply();
    await w.reconcile(kind, "sb");
    const vmId = sandbox().status?.vmId as string;
    const allocated = sandbox().status;
    expect(allocated).toMatchObject({ renewals: 0, renewEverySeconds: 30, reportEverySeconds: 600, reportedAt: allocated?.allocatedAt });
    w.calls();

    // 19 renewals in 9 min 49 s: the VM is renewed each time, status is not written.
    const writes: boolean[] = [];
    for (let i = 0; i < 19; i++) writes.push(await renewOnce(kind));
    expect(writes.every((written) => !written)).toBe(true);
    expect(sandbox().status).toMatchObject({ renewals: 0, expiresAt: allocated?.expiresAt, reportedAt: allocated?.reportedAt });
    expect(w.emu.state.vms.get(vmId)?.state).toBe("allocated");
    expect(condition(sandbox(), "Ready")).toMatchObject({ status: "True", reason: "Available" });

    // The first renewal 10 minutes after the last report reports all 20.
    expect(await renewOnce(kind)).toBe(true);
    const now = w.clock.ms;
    expect(sandbox().status?.renewals).toBe(20);
    expect(Date.parse(sandbox().status?.expiresAt ?? "")).toBe(now + 60_000);
    expect(Date.parse(sandbox().status?.reportedAt ?? "")).toBe(now);
    expect(Date.parse(sandbox().status?.lastRenewedAt ?? "")).toBe(now);

    // And the next one is quiet again.
    expect(await renewOnce(kind)).toBe(false);
  });

  it("writes nothing when nothing changed, however long since the last report (a long TTL is reported at each renewal)", async () => {
    const { kind } = operatorProcess();
    apply({ ttlSeconds: 3600 });
    await w.reconcile(kind, "sb");
    w.calls();
    const before = version();
    w.advance(20 * 60_000); // twice the interval, renewal not due yet (48 min)
    await w.reconcile(kind, "sb");
    expect(w.writes()).toEqual([]);
    expect(version()).toBe(before);

    w.advance(29 * 60_000);
    await w.reconcile(kind, "sb");
    expect(accepted()).toEqual(["vms.renew"]);
    expect(sandbox().status).toMatchObject({ renewals: 1, renewEverySeconds: 2880 });
  });

  it("reports a replacement at once, counting the new VM's renewals from 0", async () => {
    const { kind } = operatorProcess();
    apply();
    await w.reconcile(kind, "sb");
    w.calls();
    const first = sandbox().status?.vmId as string;
    await renewOnce(kind);
    await renewOnce(kind);
    w.calls();

    apply({ tier: "large" });
    await w.reconcile(kind, "sb");
    expect(w.writes()).toEqual(["vms.allocate", "vms.release"]);
    const status = sandbox().status;
    expect(status?.vmId).not.toBe(first);
    expect(status).toMatchObject({ tier: "large", renewals: 0 });
    expect(Date.parse(status?.reportedAt ?? "")).toBe(w.clock.ms);
    expect(await renewOnce(kind)).toBe(false);
  });

  it("after a restart, counts the renewals the previous process made since its last report: none lost, none twice", async () => {
    const first = operatorProcess();
    apply();
    await w.reconcile(first.kind, "sb");
    w.calls();
    for (let i = 0; i < 25; i++) await renewOnce(first.kind); // reported at the 20th
    expect(sandbox().status?.renewals).toBe(20);
    const vmId = sandbox().status?.vmId as string;

    // A new process: the 5 renewals since the report are only in the VM's expiry.
    const second = operatorProcess();
    w.advance(5_000);
    const before = version();
    await w.reconcile(second.kind, "sb");
    expect(accepted()).toEqual([]);
    expect(version()).toBe(before); // a resync is no reason to write
    for (let i = 0; i < 14; i++) expect(await renewOnce(second.kind)).toBe(false);
    expect(await renewOnce(second.kind)).toBe(true); // 10 min after the report
    expect(sandbox().status).toMatchObject({ vmId, renewals: 40 });
    expect(Date.parse(sandbox().status?.expiresAt ?? "")).toBe(vmExpiry(vmId));
  });

  it("a paused Sandbox is renewed the same way, without a write per renewal", async () => {
    const { kind } = operatorProcess();
    apply();
    await w.reconcile(kind, "sb");
    apply({}, { [Annotations.paused]: "true" });
    await w.reconcile(kind, "sb");
    expect(condition(sandbox(), "Ready")).toMatchObject({ reason: "ReconcilePaused" });
    w.calls();
    const writes: boolean[] = [];
    for (let i = 0; i < 5; i++) writes.push(await renewOnce(kind));
    expect(writes).toEqual([false, false, false, false, false]);
  });

  it("says a VM that is not renewed has no renewal cadence", async () => {
    const { kind } = operatorProcess();
    apply({ keepAlive: false });
    await w.reconcile(kind, "sb");
    expect(sandbox().status).toMatchObject({ renewEverySeconds: 0, reportEverySeconds: 600 });
  });

  it("counts every renewal and its lateness in the metrics as it happens", async () => {
    const { kind, metrics } = operatorProcess();
    apply();
    await w.reconcile(kind, "sb");
    w.calls();
    for (let i = 0; i < 3; i++) await renewOnce(kind);
    const lateness = "agentcompute_sandbox_renewal_lateness_seconds";
    expect(await metric(metrics, "agentcompute_sandbox_renewals_total")).toBe(3);
    expect(await metric(metrics, lateness, `${lateness}_count`)).toBe(3);
    // Each came 1 s after the unjittered due time (31 s after a renewal that left 60 s: due at
    // 30 s), and so up to the jitter (10 % of the 30 s window) after the jittered one.
    const sum = await metric(metrics, lateness, `${lateness}_sum`);
    expect(sum).toBeGreaterThanOrEqual(3);
    expect(sum).toBeLessThanOrEqual(3 + 3 * 3);
  });

  it("with an interval of 0, reports every renewal (the behaviour before the flag)", async () => {
    const kind = sandboxes({ ...w.ctx, options: { sandboxStatusIntervalMs: 0 } });
    apply();
    await w.reconcile(kind, "sb");
    w.calls();
    expect(await renewOnce(kind)).toBe(true);
    expect(await renewOnce(kind)).toBe(true);
    expect(sandbox().status).toMatchObject({ renewals: 2, reportEverySeconds: 0 });
  });
});

describe("agent-operator run --sandbox-status-interval", () => {
  const interval = (argv: string[]) => {
    const flags = parseRunFlags(argv);
    return flags === "help" ? undefined : flags.sandboxStatusIntervalMs;
  };

  it("defaults to 10 minutes, takes a duration, and 0 for every renewal", () => {
    expect(interval([])).toBe(600_000);
    expect(interval(["--sandbox-status-interval", "5m"])).toBe(300_000);
    expect(interval(["--sandbox-status-interval", "0"])).toBe(0);
    expect(() => interval(["--sandbox-status-interval", "soon"])).toThrow(/--sandbox-status-interval: "soon" is not a duration/);
  });
});
