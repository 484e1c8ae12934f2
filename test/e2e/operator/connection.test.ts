// Connection end to end: credentials from a Secret, what a person sees when they are missing
// or wrong (on the Connection and on what depends on it), recovery without a restart, and
// tokens that expire while work goes on.
import { describe, expect, it } from "vitest";
import { secretsPath, type KubeObject } from "../../../src/runtime/kube-client.js";
import { kubectlOk, waitFor } from "../support/kube.js";
import { API_KEY, apply, condition, connectionManifest, useStack, waitForReady } from "../support/operator.js";

const TOKEN_TTL_S = 5;
// No Connection yet: the tests create it in the states they need.
const t = useStack("connection", { connection: false, syncPeriodMs: 3_000, emulator: { tokenTTLSeconds: TOKEN_TTL_S } });

describe("Connection", () => {
  it("reports a missing credentials Secret, on itself and on its dependants, and recovers once it exists", async () => {
    const [secret, connection] = connectionManifest(t.namespace, t.stack.emulator).split("---");
    await apply(connection as string);
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: waits-for-connection}
spec: {content: "hello"}`, t.namespace);
    const conn = await waitForReady(t.stack, "connections", "default", { status: "False", reason: "SecretNotFound" });
    expect(condition(conn, "Ready")?.message).toContain('"agentcompute-credentials"');
    const sk = await waitForReady(t.stack, "skills", "waits-for-connection", { status: "False", reason: "ConnectionNotReady" });
    expect(condition(sk, "Ready")?.message).toContain('Connection "default" is not Ready');

    await apply(secret as string);
    await waitForReady(t.stack, "connections", "default");
    await waitForReady(t.stack, "skills", "waits-for-connection");
    expect(t.stack.emulator.state.skills.get("waits-for-connection")?.content).toBe("hello");
  });

  it("reports refused credentials with a reason, never the key, and recovers when the Secret is fixed", async () => {
    await kubectlOk(["patch", "secret", "agentcompute-credentials", "--type=merge", "-p", JSON.stringify({ stringData: { apiKey: "wrong-key-0000" } })], {
      namespace: t.namespace,
    });
    const conn = await waitForReady(t.stack, "connections", "default", { status: "False", reason: "CredentialsRefused", timeoutMs: 30_000 });
    expect(condition(conn, "Stalled")?.status).toBe("True");
    expect(JSON.stringify(conn.status)).not.toContain("wrong-key-0000");

    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: blocked-agent}
spec: {image: "example/blocked:1"}`, t.namespace);
    await waitForReady(t.stack, "agents", "blocked-agent", { status: "False", reason: "ConnectionNotReady" });

    await kubectlOk(["patch", "secret", "agentcompute-credentials", "--type=merge", "-p", JSON.stringify({ stringData: { apiKey: API_KEY } })], {
      namespace: t.namespace,
    });
    await waitForReady(t.stack, "connections", "default");
    await waitForReady(t.stack, "agents", "blocked-agent");
  });

  it("reports credentials revoked while it was Ready as soon as a resource's call meets the refusal, not at its next look", async () => {
    const client = t.stack.emulator.state.createAccessClient("to-revoke");
    await apply(connectionManifest(t.namespace, t.stack.emulator, { name: "revocable", secretName: "revocable-credentials" }));
    await kubectlOk(["patch", "secret", "revocable-credentials", "--type=json", "-p", JSON.stringify([
      { op: "remove", path: "/data/apiKey" },
      { op: "add", path: "/stringData", value: { clientId: client.client_id, clientSecret: client.client_secret } },
    ])], { namespace: t.namespace });
    await waitForReady(t.stack, "connections", "revocable");
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: on-revocable}
spec: {content: "hello", connectionRef: {name: revocable}}`, t.namespace);
    await waitForReady(t.stack, "skills", "on-revocable");
    // Its next look is 10 minutes away (usageRefreshSeconds); the Skill's resync (3 s) calls the service.
    t.stack.emulator.state.revokeAccessClient(client.client_id);
    const conn = await waitForReady(t.stack, "connections", "revocable", { status: "False", reason: "CredentialsRefused", timeoutMs: 20_000 });
    expect(condition(conn, "Stalled")?.status).toBe("True");
    const refused = t.stack.emulator.requests.filter((r) => r.operation === "token" && r.status === 401).length;
    expect(refused).toBeLessThanOrEqual(3);
    // Credentials that work again, so that the Skill can be deleted; then both go, so that the
    // tests after this one see one Connection's token requests.
    await kubectlOk(["create", "secret", "generic", "revocable-credentials", `--from-literal=apiKey=${API_KEY}`, "--dry-run=client", "-o", "yaml"], { namespace: t.namespace }).then((yaml) =>
      kubectlOk(["replace", "-f", "-"], { input: yaml, namespace: t.namespace }),
    );
    await waitForReady(t.stack, "connections", "revocable");
    await kubectlOk(["delete", "skill", "on-revocable", "--wait=true", "--timeout=30s"], { namespace: t.namespace });
    await kubectlOk(["delete", "connection", "revocable", "--wait=true", "--timeout=30s"], { namespace: t.namespace });
  });

  it("lists access clients and a usage summary by tier in status", async () => {
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: used-once}
spec: {tier: standard, ttlSeconds: 600}`, t.namespace);
    const sb = await waitForReady(t.stack, "sandboxes", "used-once");
    await kubectlOk(["delete", "sandbox", "used-once", "--wait=true", "--timeout=30s"], { namespace: t.namespace });
    expect(t.stack.emulator.state.usage.some((u) => u.vm_id === sb.status?.vmId)).toBe(true);
    t.stack.emulator.state.createAccessClient("ci-pipeline");
    // A change of the Connection's spec refreshes the reports at once (otherwise: every usageRefreshSeconds).
    await kubectlOk(["patch", "connection", "default", "--type=merge", "-p", '{"spec":{"usageRefreshSeconds":60}}'], { namespace: t.namespace });
    const conn = await waitFor(async () => {
      const c = await waitForReady(t.stack, "connections", "default");
      const usage = c.status?.usage as { byTier?: Array<{ tier: string; vmCount: number }> } | undefined;
      return usage?.byTier?.some((t) => t.tier === "standard" && t.vmCount >= 1) ? c : undefined;
    });
    expect(conn.status?.accessClients).toEqual(expect.arrayContaining([expect.objectContaining({ name: "ci-pipeline", active: true })]));
    expect(conn.status?.tokenExpiresAt).toBeTruthy();
  });
});

describe("tokens", () => {
  it(`expire every ${TOKEN_TTL_S} s during a minute of work with no failed call, about one token per lifetime`, async () => {
    t.stack.emulator.clearRequests();
    const started = Date.now();
    // A minute of steady work: a short-TTL Sandbox renewing, and a Skill edited every few seconds.
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: busy}
spec: {tier: standard, ttlSeconds: 4, renewBeforeSeconds: 2}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: busy-skill}
spec: {content: "0"}`, t.namespace);
    let edits = 0;
    while (Date.now() - started < 60_000) {
      await new Promise((r) => setTimeout(r, 3_000));
      edits++;
      await kubectlOk(["patch", "skill", "busy-skill", "--type=merge", "-p", JSON.stringify({ spec: { content: String(edits) } })], { namespace: t.namespace });
    }
    await waitFor(() => t.stack.emulator.state.skills.get("busy-skill")?.content === String(edits));
    const elapsedS = (Date.now() - started) / 1000;
    const calls = t.stack.emulator.requests;
    const tokens = calls.filter((r) => r.operation === "token").length;
    const failed = calls.filter((r) => r.operation !== "token" && (r.status === "dropped" || r.status >= 400));
    expect(failed.map((r) => `${r.operation} ${r.status}`)).toEqual([]);
    // About one per lifetime (refreshed a little early), never one per call.
    const lifetimes = elapsedS / TOKEN_TTL_S;
    expect(tokens).toBeGreaterThanOrEqual(Math.floor(lifetimes * 0.5));
    expect(tokens).toBeLessThanOrEqual(Math.ceil(lifetimes * 1.5) + 2);
    expect(calls.length - tokens).toBeGreaterThan(tokens * 2);
    const busy = await waitForReady(t.stack, "sandboxes", "busy");
    expect(busy.status?.renewals as number).toBeGreaterThan(5);
  }, 120_000);

  it("keeps Helm's release Secrets (up to 1 MiB each, one per revision kept) out of its cache, and every other Secret in", async () => {
    const helmRelease = "sh.helm.release.v1.some-app.v3";
    await kubectlOk(["create", "secret", "generic", helmRelease, "--type=helm.sh/release.v1", "--from-literal=release=H4sIAAAA"], { namespace: t.namespace });
    await kubectlOk(["create", "secret", "generic", "plain", "--from-literal=key=value"], { namespace: t.namespace });
    // The operator's own cache: already there and synced when asked for (asking for a cache the
    // operator does not have makes a new one, which has not listed yet).
    const secrets = t.stack.operator.manager.informerFor<KubeObject>(secretsPath(), { pageSize: 500, fieldSelector: "type!=helm.sh/release.v1" });
    expect(secrets.hasSynced()).toBe(true);
    await waitFor(() => secrets.get(t.namespace, "plain"), { description: "the plain Secret in the operator's cache" });
    expect(secrets.get(t.namespace, helmRelease)).toBeUndefined();
  });
});
