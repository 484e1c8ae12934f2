// What `kubectl get -o wide` shows, from the real kubectl against the real API server: the
// expiry times (a Sandbox's VM, a Connection's token) are times to come, and a `date` column
// would print them as <invalid> (an age of something in the future). They show as the time.
import { describe, expect, it } from "vitest";
import { kubectlOk } from "../support/kube.js";
import { apply, useStack, waitForReady } from "../support/operator.js";

const t = useStack("columns");

/** The table kubectl prints, as rows of cells keyed by the header (columns split on 2+ spaces). */
async function wideTable(kind: string): Promise<Array<Record<string, string>>> {
  const out = await kubectlOk(["get", kind, "-o", "wide"], { namespace: t.namespace });
  const [header, ...rows] = out.trim().split("\n");
  const names = (header ?? "").trim().split(/\s{2,}/);
  return rows.map((row) => {
    const cells = row.trim().split(/\s{2,}/);
    return Object.fromEntries(names.map((n, i) => [n, cells[i] ?? ""]));
  });
}

describe("kubectl get -o wide", () => {
  it("shows a Sandbox's expiry and a Connection's token expiry as times, never <invalid>", async () => {
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: cols}
spec: {tier: standard, ttlSeconds: 3600}`, t.namespace);
    const sb = await waitForReady(t.stack, "sandboxes", "cols");
    const conn = await waitForReady(t.stack, "connections", "default");
    const expiresAt = sb.status?.expiresAt as string;
    const tokenExpiresAt = conn.status?.tokenExpiresAt as string;
    expect(Date.parse(expiresAt)).toBeGreaterThan(Date.now());
    expect(Date.parse(tokenExpiresAt)).toBeGreaterThan(Date.now());

    const sandboxes = await wideTable("sandbox");
    const row = sandboxes.find((r) => r["NAME"] === "cols");
    expect(row).toMatchObject({ EXPIRES: expiresAt, READY: "True" });
    const connections = await wideTable("connection");
    expect(connections.find((r) => r["NAME"] === "default")).toMatchObject({ "TOKEN EXPIRES": tokenExpiresAt, READY: "True" });

    const all = await kubectlOk(["get", "agentcompute", "-o", "wide"], { namespace: t.namespace });
    expect(all).not.toContain("<invalid>");
    expect(all).toContain(expiresAt);
    expect(all).toContain(tokenExpiresAt);
  });
});
