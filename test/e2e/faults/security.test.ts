// Security, on a full run of every kind. The operator is `agent-operator run` (a child
// process) with nothing but its ServiceAccount's token, bound to the least-privilege
// ClusterRole of manifests/ (applied for real with `kubectl apply -k`), leader election on.
//  - API keys, client secrets, image pull passwords, Secret values handed to VMs, deployment
//    and VM tokens and the service's bearer tokens never appear in its logs (debug level),
//    Events, any resource's status, or its /metrics.
//  - Deployment and VM tokens are only in the connection Secrets owned by their resource.
//  - A Connection cannot use a credentials Secret of another namespace (resources using a
//    Connection or Secret of another namespace: see bad-input.test.ts).
//  - TLS verification of the service is on by default: a self-signed server makes the
//    Connection Ready=False (TLSVerificationFailed); insecureSkipTLSVerify: true makes it Ready.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { createServer as createHttpsServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startEmulator, type Emulator } from "../../../src/emulator/index.js";
import { OPERATOR_NAMESPACE, applyKustomization, refusedLines, serviceAccountCredentials } from "../install/support.js";
import { createTestNamespace, deleteTestNamespace, kubectl, kubectlOk, uniqueName, useTestNamespace, waitFor } from "../support/kube.js";
import { API_KEY, apply, connectionManifest } from "../support/operator.js";
import { startOperatorProcess, type OperatorProcess } from "../support/process.js";
import { deleteAllManaged, leakedSecrets, listManaged, readyCondition, waitAllReady, withBase64, type ListedResource } from "./support.js";

const ns = useTestNamespace("fault-security");
let other: string;
let emulator: Emulator;
/** The service a Connection with a foreign credentials Secret would reach: it must hear nothing. */
let foreignEmulator: Emulator;
let op: OperatorProcess;
const logs: string[] = [];
const dir = mkdtempSync(join(tmpdir(), "agentcompute-security-"));
const stateFile = join(dir, "emulator-state.json");

const CLIENT_ID = "client-e2e";
const CLIENT_SECRET = "e2e-client-secret-7b1f0c9a";
const PULL_PASSWORD = "e2e-pull-password-51d2e8aa";
const ENV_SECRET = "e2e-env-secret-value-c3a90f2e";
const FOREIGN_KEY = "e2e-foreign-api-key-0d4e11b7";

const manifest = (namespace: string) => `
apiVersion: v1
kind: Secret
metadata: {name: client-credentials}
stringData: {clientId: ${CLIENT_ID}, clientSecret: ${CLIENT_SECRET}}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Connection
metadata: {name: by-client}
spec:
  baseURL: ${emulator.baseURL}
  authURL: ${emulator.authURL}
  orgId: org-e2e
  credentials: {secretRef: {name: client-credentials}}
---
apiVersion: v1
kind: Secret
metadata: {name: registry-pull}
stringData: {registry: registry.example.com, username: robot, password: ${PULL_PASSWORD}}
---
apiVersion: v1
kind: Secret
metadata: {name: sandbox-env}
stringData: {API_TOKEN: ${ENV_SECRET}}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: sec-skill}
spec: {content: "do things safely"}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: private}
spec: {image: registry.example.com/private:1, imagePullSecretRef: {name: registry-pull}}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: via-client}
spec: {image: example/public:1, connectionRef: {name: by-client}}
---
apiVersion: agentcompute.dev/v1alpha1
kind: AgentDeployment
metadata: {name: private}
spec: {agentRef: {name: private}, tier: standard}
---
apiVersion: agentcompute.dev/v1alpha1
kind: AgentDeployment
metadata: {name: via-client}
spec: {agentRef: {name: via-client}, connectionRef: {name: by-client}}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: with-secret-env}
spec: {tier: standard, skills: [sec-skill], envFrom: [{secretRef: {name: sandbox-env}, prefix: APP_}]}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: plain}
spec: {tier: standard, env: {MODE: plain}}
`.replaceAll("metadata: {name:", `metadata: {namespace: ${namespace}, name:`);

/** Every secret of the run: what the test handed over, and what the service issued. */
async function allSecrets(): Promise<Map<string, string>> {
  const out = new Map<string, string>([
    [API_KEY, "API key"],
    [CLIENT_SECRET, "client secret"],
    [PULL_PASSWORD, "image pull password"],
    [ENV_SECRET, "Secret value given to a VM"],
    [FOREIGN_KEY, "API key of another namespace"],
  ]);
  for (const d of emulator.state.deployments.values()) out.set(d.token, `token of deployment ${d.id}`);
  for (const vm of emulator.state.vms.values()) out.set(vm.token, `token of VM ${vm.id}`);
  // Bearer tokens: the emulator saves the ones it issued to its state file (100 ms debounce).
  await sleep(500);
  const saved = JSON.parse(readFileSync(stateFile, "utf8")) as { tokens: Array<{ token: string }> };
  for (const t of saved.tokens) out.set(t.token, "service bearer token");
  return out;
}

interface SecretObject {
  metadata: { name: string; ownerReferences?: Array<{ kind: string; name: string; uid: string; controller?: boolean }> };
  data?: Record<string, string>;
}

beforeAll(async () => {
  // manifests/ for real: CRDs, the operator's namespace, ServiceAccount and least-privilege RBAC.
  await applyKustomization();
  const sa = await serviceAccountCredentials({ dir });
  emulator = await startEmulator({ apiKey: API_KEY, strictBodies: true, orgId: "org-e2e", clients: [{ clientId: CLIENT_ID, clientSecret: CLIENT_SECRET }], stateFile });
  foreignEmulator = await startEmulator({ apiKey: FOREIGN_KEY, strictBodies: true, orgId: "org-foreign" });
  other = await createTestNamespace("fault-security-other");
  await kubectlOk(["create", "secret", "generic", "foreign-credentials", `--from-literal=apiKey=${FOREIGN_KEY}`], { namespace: other });
  await apply(connectionManifest(ns.name, emulator), ns.name);
  await apply(manifest(ns.name));
  op = await startOperatorProcess({
    kubeconfig: sa.path,
    namespaces: [ns.name],
    leaderElection: { namespace: OPERATOR_NAMESPACE, id: uniqueName("security") },
    logs,
    logLevel: "debug",
  });
});

afterAll(async () => {
  if (op?.alive()) {
    await deleteAllManaged(ns.name);
    await op.stop();
  }
  if (other) await deleteTestNamespace(other);
  await emulator?.close();
  await foreignEmulator?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("security", () => {
  it("runs every kind to Ready as its ServiceAccount under the least-privilege ClusterRole, never refused", async () => {
    await waitAllReady(ns.name, 7, { timeoutMs: 120_000 });
    // The secrets did flow where they belong: to the service, not elsewhere.
    const agent = [...emulator.state.agents.values()].find((a) => a.name === "private");
    expect(agent?.image_pull_secret?.password).toBe(PULL_PASSWORD);
    expect([...emulator.state.vms.values()].some((vm) => vm.env["APP_API_TOKEN"] === ENV_SECRET)).toBe(true);
    expect(emulator.stats().byOperation["token"]).toBeGreaterThanOrEqual(2); // API key and client credentials
    expect(refusedLines(logs)).toEqual([]);
  });

  it("keeps every secret out of its logs, Events, every status and /metrics", async () => {
    const secrets = await allSecrets();
    expect([...secrets.values()].filter((v) => v === "service bearer token").length).toBeGreaterThan(0);
    const sources: Record<string, string> = {
      logs: logs.join("\n"),
      events: await kubectlOk(["get", "events", "-o", "json"], { namespace: ns.name }),
      "resources (spec and status)": await kubectlOk(["get", "agentcompute", "-o", "json"], { namespace: ns.name }),
      metrics: await op.scrape(),
    };
    expect(sources.logs!.length).toBeGreaterThan(10_000); // debug level: it said a lot
    for (const [where, text] of Object.entries(sources)) {
      const leaked = leakedSecrets(text, withBase64(secrets.keys())).map((s) => secrets.get(s) ?? `base64 of ${secrets.get(Buffer.from(s, "base64").toString())}`);
      expect(leaked, `secrets in ${where}`).toEqual([]);
    }
  });

  it("puts deployment and VM tokens only in the connection Secret owned by their resource", async () => {
    const resources = await listManaged(ns.name);
    const secrets = (JSON.parse(await kubectlOk(["get", "secrets", "-o", "json"], { namespace: ns.name })) as { items: SecretObject[] }).items;
    const configMaps = await kubectlOk(["get", "configmaps", "-o", "json"], { namespace: ns.name });
    const holders = (token: string) =>
      secrets.filter((s) => Object.values(s.data ?? {}).some((v) => Buffer.from(v, "base64").toString("utf8") === token));
    const owned: Array<[ListedResource, string]> = [];
    for (const r of resources) {
      const token =
        r.kind === "AgentDeployment"
          ? emulator.state.deployments.get(r.status?.deploymentId as string)?.token
          : r.kind === "Sandbox"
            ? emulator.state.vms.get(r.status?.vmId as string)?.token
            : undefined;
      if (token === undefined) continue;
      owned.push([r, token]);
      const h = holders(token);
      expect(h.map((s) => s.metadata.name), `Secrets holding the token of ${r.kind} ${r.metadata.name}`).toEqual([`${r.metadata.name}-agentcompute`]);
      expect(h[0]!.metadata.ownerReferences).toEqual([expect.objectContaining({ kind: r.kind, name: r.metadata.name, uid: r.metadata.uid, controller: true })]);
      expect(configMaps).not.toContain(token);
    }
    expect(owned.length).toBe(4);
    // Bearer tokens are in no Secret at all: the operator keeps them in memory.
    const bearer = [...(await allSecrets()).entries()].filter(([, what]) => what === "service bearer token").map(([t]) => t);
    for (const t of bearer) expect(holders(t)).toEqual([]);
  });

  it("cannot use a credentials Secret of another namespace", async () => {
    await apply(
      `apiVersion: agentcompute.dev/v1alpha1
kind: Connection
metadata: {name: foreign-credentials}
spec:
  baseURL: ${foreignEmulator.baseURL}
  authURL: ${foreignEmulator.authURL}
  credentials: {secretRef: {name: foreign-credentials}}`,
      ns.name,
    );
    const conn = await waitFor(
      async () => {
        const c = JSON.parse(await kubectlOk(["get", "connection", "foreign-credentials", "-o", "json"], { namespace: ns.name })) as ListedResource;
        return readyCondition(c)?.reason === "SecretNotFound" ? c : undefined;
      },
      { timeoutMs: 30_000, description: "the Connection to report its Secret missing" },
    );
    expect(readyCondition(conn)?.message).toContain(`credentials Secret "foreign-credentials" not found in namespace "${ns.name}"`);
    expect(foreignEmulator.stats().total).toBe(0);
    await kubectlOk(["delete", "connection", "foreign-credentials", "--wait=true", "--timeout=30s"], { namespace: ns.name });
  });

  it.skipIf(!hasOpenSSL())("verifies the service's TLS certificate by default; insecureSkipTLSVerify turns that off", async () => {
    const tls = await startTLSProxy(emulator.baseURL);
    try {
      const url = `https://127.0.0.1:${tls.port}`;
      await apply(
        `apiVersion: agentcompute.dev/v1alpha1
kind: Connection
metadata: {name: self-signed}
spec:
  baseURL: ${url}
  authURL: ${url}/auth
  credentials: {secretRef: {name: agentcompute-credentials}}`,
        ns.name,
      );
      const refused = await waitFor(
        async () => {
          const c = JSON.parse(await kubectlOk(["get", "connection", "self-signed", "-o", "json"], { namespace: ns.name })) as ListedResource;
          return readyCondition(c)?.status === "False" && readyCondition(c)?.reason === "TLSVerificationFailed" ? c : undefined;
        },
        { timeoutMs: 30_000, description: "the Connection to refuse the self-signed certificate" },
      );
      expect(readyCondition(refused)?.message).toMatch(/SELF_SIGNED|self-signed/i);
      expect(readyCondition(refused)?.message).toContain("insecureSkipTLSVerify");
      expect(refused.status?.conditions?.find((c) => c.type === "Stalled")?.status).toBe("True");
      expect(tls.requests()).toBe(0); // not a single request went through: the handshake failed

      await kubectlOk(["patch", "connection", "self-signed", "--type=merge", "-p", '{"spec":{"insecureSkipTLSVerify":true}}'], { namespace: ns.name });
      await waitFor(
        async () => {
          const c = JSON.parse(await kubectlOk(["get", "connection", "self-signed", "-o", "json"], { namespace: ns.name })) as ListedResource;
          return c.status?.observedGeneration === c.metadata.generation && readyCondition(c)?.status === "True";
        },
        { timeoutMs: 60_000, description: "the Connection to be Ready without verification" },
      );
      expect(tls.requests()).toBeGreaterThan(0);
    } finally {
      await kubectl(["delete", "connection", "self-signed", "--wait=true", "--timeout=30s"], { namespace: ns.name });
      await tls.close();
    }
  });
});

function hasOpenSSL(): boolean {
  try {
    execFileSync("openssl", ["version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

/** An HTTPS server with a fresh self-signed certificate (openssl), forwarding to `target` over HTTP. */
async function startTLSProxy(target: string): Promise<{ port: number; requests(): number; close(): Promise<void> }> {
  const key = join(dir, "tls.key");
  const cert = join(dir, "tls.crt");
  if (!existsSync(cert)) {
    execFileSync(
      "openssl",
      ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
      { stdio: "ignore" },
    );
  }
  const upstream = new URL(target);
  let count = 0;
  const server: Server = createHttpsServer({ key: readFileSync(key), cert: readFileSync(cert) }, (req, res) => {
    count++;
    const out = httpRequest(
      { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers },
      (up) => {
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
      },
    );
    out.on("error", () => res.destroy());
    req.pipe(out);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    requests: () => count,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
