// Renewals off the status path, end to end: short-TTL Sandboxes renewed every few seconds (the
// emulator's request log counts the renewals) while the real API server sees their status
// change at most at each report (a watch counts the changes), status saying enough to tell
// that the VMs are alive, and a restarted operator neither losing nor doubling the count.
import { describe, expect, it } from "vitest";
import { kubectlOk, waitFor } from "../support/kube.js";
import { apply, getResource, useStack, waitForReady, type Resource } from "../support/operator.js";
import { resourcePath } from "../../../src/runtime/kube-client.js";

// Status reports every 10 s; the VMs are renewed every ~3 s (TTL 6 s, renew 3 s before expiry).
const INTERVAL_MS = 10_000;
const t = useStack("renewals", { sandboxStatusIntervalMs: INTERVAL_MS });
const NAMES = ["r1", "r2", "r3"];

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const sandboxesPath = () => resourcePath({ group: "agentcompute.dev", version: "v1alpha1", plural: "sandboxes", namespace: t.namespace });
const sandbox = (name: string) => getResource(t.stack.kube, "sandboxes", t.namespace, name);

/** Renewals of `vmId` the service accepted, arrived before `until` (ms) if given. */
function renewalsOf(vmId: string, until = Infinity): number {
  return t.stack.emulator.requests.filter(
    (r) => r.operation === "vms.renew" && r.status === 200 && r.path.includes(`/vms/${vmId}/`) && r.time < until,
  ).length;
}

/** The VMs that ran out (the service records each in its usage). */
const expired = () => t.stack.emulator.state.usage.filter((u) => u.reason === "expired");

/** Counts the changes of each Sandbox the API server sends a watcher, for `ms`. */
async function changesDuring(ms: number): Promise<Map<string, number>> {
  const list = await t.stack.kube.list<Resource>(sandboxesPath());
  const changes = new Map<string, number>();
  const abort = new AbortController();
  const watching = (async () => {
    try {
      for await (const e of t.stack.kube.watch<Resource>(sandboxesPath(), { resourceVersion: list.metadata.resourceVersion }, abort.signal)) {
        if (e.type === "MODIFIED") changes.set(e.object.metadata.name, (changes.get(e.object.metadata.name) ?? 0) + 1);
      }
    } catch (err) {
      if (!abort.signal.aborted) throw err;
    }
  })();
  await sleep(ms);
  abort.abort();
  await watching;
  return changes;
}

/** Waits for a report of `name` made after `after` (ms); returns the Sandbox. */
function reportAfter(name: string, after: number): Promise<Resource> {
  return waitFor(
    async () => {
      const r = await sandbox(name);
      return Date.parse(String(r.status?.reportedAt)) > after ? r : undefined;
    },
    { timeoutMs: INTERVAL_MS * 3, description: `a report of ${name}` },
  );
}

/** The renewals the service accepted up to the renewal a report says was the last. */
const renewedBy = (r: Resource) => renewalsOf(String(r.status?.vmId), Date.parse(String(r.status?.lastRenewedAt)) + 1000);

describe("Sandbox renewals", () => {
  it("renew several times while their status is written at most twice, and say so honestly", async () => {
    await apply(
      NAMES.map((n) => `apiVersion: agentcompute.dev/v1alpha1\nkind: Sandbox\nmetadata: {name: ${n}}\nspec: {tier: standard, ttlSeconds: 6, renewBeforeSeconds: 3}`).join("\n---\n"),
      t.namespace,
    );
    const ready = await Promise.all(NAMES.map((n) => waitForReady(t.stack, "sandboxes", n)));
    const vmIds = ready.map((r) => String(r.status?.vmId));
    for (const r of ready) expect(r.status).toMatchObject({ renewals: 0, renewEverySeconds: 3, reportEverySeconds: 10 });
    const before = vmIds.map((id) => renewalsOf(id));

    // 16 s: about five renewals each, and one report (10 s after the allocation's).
    const changes = await changesDuring(16_000);
    for (const [i, id] of vmIds.entries()) {
      expect(renewalsOf(id) - (before[i] ?? 0), `renewals of ${NAMES[i]}`).toBeGreaterThanOrEqual(4);
      expect(changes.get(NAMES[i] ?? "") ?? 0, `status changes of ${NAMES[i]}`).toBeLessThanOrEqual(2);
    }
    expect(expired()).toEqual([]);

    // A report says the exact count, and the cadences that make an old expiresAt readable.
    const reported = await Promise.all(NAMES.map((n, i) => reportAfter(n, Date.parse(String(ready[i]?.status?.reportedAt)))));
    for (const r of reported) {
      expect(r.status?.renewals).toBe(renewedBy(r));
      expect(r.status).toMatchObject({ renewEverySeconds: 3, reportEverySeconds: 10 });
      expect(r.status?.conditions?.find((c) => c.type === "Ready")?.status).toBe("True");
    }

    const out = await kubectlOk(["get", "sandbox", "r1", "-o", "wide"], { namespace: t.namespace });
    const [header, row] = out.trim().split("\n");
    const cells = Object.fromEntries((header ?? "").trim().split(/\s{2,}/).map((h, i) => [h, (row ?? "").trim().split(/\s{2,}/)[i]]));
    const r1 = await sandbox("r1");
    expect(cells).toMatchObject({ "RENEW EVERY (S)": "3", REPORTED: r1.status?.reportedAt, EXPIRES: r1.status?.expiresAt, READY: "True" });
    expect(out).not.toContain("<invalid>");
  }, 90_000);

  it("keep renewing across an operator restart, which neither loses nor doubles the count", async () => {
    const before = await Promise.all(NAMES.map(sandbox));
    await t.stack.restartOperator();
    const restartedAt = Date.now();
    const reported = await Promise.all(NAMES.map((n) => reportAfter(n, restartedAt)));
    expect(expired()).toEqual([]);
    for (const [i, r] of reported.entries()) {
      expect(r.status?.vmId).toBe(before[i]?.status?.vmId);
      // Exact while a process runs; across a restart the missed renewals are counted from how
      // far the VM's expiry moved, which a loaded machine's late renewals may put one out.
      expect(Math.abs(Number(r.status?.renewals) - renewedBy(r)), `${NAMES[i]}: ${String(r.status?.renewals)} vs ${renewedBy(r)}`).toBeLessThanOrEqual(1);
      expect(Number(r.status?.renewals)).toBeGreaterThan(Number(before[i]?.status?.renewals));
    }
  }, 90_000);
});
