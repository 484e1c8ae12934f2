import { chmod, mkdtemp, readFile, rm, writeFile, mkdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { inClusterConfig, loadKubeconfig } from "../../../src/runtime/kubeconfig.js";

let dir: string;
const savedEnv = { ...process.env };

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "kubeconfig-test-"));
});
afterEach(async () => {
  process.env = { ...savedEnv };
  await rm(dir, { recursive: true, force: true });
});

const b64 = (s: string) => Buffer.from(s).toString("base64");

/** A kubeconfig whose user runs `plugin` (a Node script) as its exec credential plugin; `more`: further exec fields. */
async function execPluginConfig(plugin: string, more = ""): Promise<string> {
  const p = join(dir, "config");
  await writeFile(
    p,
    config(`- name: u1
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ${process.execPath}
      args: [${JSON.stringify(plugin)}]${more}`),
  );
  return p;
}

function config(users: string, extra = ""): string {
  return `apiVersion: v1
kind: Config
current-context: main
clusters:
- name: c1
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority-data: ${b64("CA-PEM")}
    tls-server-name: api.example
contexts:
- name: main
  context: {cluster: c1, user: u1, namespace: team-a}
- name: other
  context: {cluster: c1, user: u2}
users:
${users}
${extra}`;
}

describe("loadKubeconfig", () => {
  it("reads server, CA, namespace and a static token", async () => {
    const p = join(dir, "config");
    await writeFile(p, config(`- name: u1\n  user: {token: abc}\n- name: u2\n  user: {username: bob, password: pw}`));
    const c = loadKubeconfig({ path: p });
    expect(c.server).toBe("https://10.0.0.1:6443");
    expect(c.namespace).toBe("team-a");
    const cred = await c.credentials();
    expect(cred.headers.authorization).toBe("Bearer abc");
    expect(cred.tls.ca?.toString()).toBe("CA-PEM");
    expect(cred.tls.servername).toBe("api.example");
    const other = await loadKubeconfig({ path: p, context: "other" }).credentials();
    expect(other.headers.authorization).toBe(`Basic ${b64("bob:pw")}`);
  });

  it("re-reads token files and certificate files (relative to the kubeconfig) on every refresh", async () => {
    await mkdir(join(dir, "creds"));
    await writeFile(join(dir, "creds", "token"), "first\n");
    await writeFile(join(dir, "creds", "cert.pem"), "CERT-1");
    await writeFile(join(dir, "creds", "key.pem"), "KEY-1");
    const p = join(dir, "config");
    await writeFile(
      p,
      config(`- name: u1\n  user:\n    tokenFile: creds/token\n    client-certificate: creds/cert.pem\n    client-key: creds/key.pem\n    as: alice\n    as-groups: [devs, ops]`),
    );
    const c = loadKubeconfig({ path: p });
    let cred = await c.credentials();
    expect(cred.headers.authorization).toBe("Bearer first");
    expect(cred.tls.cert?.toString()).toBe("CERT-1");
    expect(cred.headers["impersonate-user"]).toBe("alice");
    expect(cred.headers["impersonate-group"]).toBe("devs, ops");
    await writeFile(join(dir, "creds", "token"), "second\n");
    await writeFile(join(dir, "creds", "cert.pem"), "CERT-2");
    cred = await c.credentials();
    expect(cred.headers.authorization).toBe("Bearer second");
    expect(cred.tls.cert?.toString()).toBe("CERT-2");
  });

  it("merges a KUBECONFIG list: first definition and first current-context win", async () => {
    const a = join(dir, "a");
    const b = join(dir, "b");
    await writeFile(a, `apiVersion: v1\nkind: Config\nusers:\n- name: u1\n  user: {token: from-a}\n`);
    await writeFile(b, config(`- name: u1\n  user: {token: from-b}`));
    process.env.KUBECONFIG = [a, join(dir, "missing"), b].join(delimiter);
    const c = loadKubeconfig();
    expect(c.server).toBe("https://10.0.0.1:6443");
    expect((await c.credentials()).headers.authorization).toBe("Bearer from-a");
  });

  it("runs exec credential plugins and caches until expiry; force re-runs", async () => {
    const counter = join(dir, "count");
    await writeFile(counter, "0");
    const plugin = join(dir, "plugin.mjs");
    await writeFile(
      plugin,
      `#!/usr/bin/env node
import { readFileSync, writeFileSync } from "node:fs";
const n = Number(readFileSync(${JSON.stringify(counter)}, "utf8")) + 1;
writeFileSync(${JSON.stringify(counter)}, String(n));
const info = JSON.parse(process.env.KUBERNETES_EXEC_INFO);
process.stdout.write(JSON.stringify({ apiVersion: info.apiVersion, kind: "ExecCredential",
  status: { token: "tok-" + n + "-" + process.env.EXTRA + "-" + (info.spec.cluster ? info.spec.cluster.server : "none"),
            expirationTimestamp: new Date(Date.now() + 3600e3).toISOString() } }));
`,
    );
    await chmod(plugin, 0o755);
    const c = loadKubeconfig({ path: await execPluginConfig(plugin, "\n      env: [{name: EXTRA, value: x}]\n      provideClusterInfo: true") });
    expect((await c.credentials()).headers.authorization).toBe("Bearer tok-1-x-https://10.0.0.1:6443");
    expect((await c.credentials()).headers.authorization).toBe("Bearer tok-1-x-https://10.0.0.1:6443");
    expect((await c.credentials(true)).headers.authorization).toBe("Bearer tok-2-x-https://10.0.0.1:6443");
  });

  it("an exec plugin that prints something other than JSON (a bare token): the error says so without quoting it", async () => {
    const plugin = join(dir, "bare.mjs");
    await writeFile(plugin, `process.stdout.write("bare-token-0c7f31a9");\n`);
    const err = await loadKubeconfig({ path: await execPluginConfig(plugin) }).credentials().catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/unparsable output \(not JSON \(19 characters/);
    expect((err as Error).message).not.toMatch(/bare|0c7f/);
  });

  it("refuses plain http without insecure-skip-tls-verify", async () => {
    const p = join(dir, "config");
    await writeFile(p, config(`- name: u1\n  user: {token: a}`).replace("https://10.0.0.1:6443/", "http://10.0.0.1:8080"));
    expect(() => loadKubeconfig({ path: p })).toThrow(/insecure-skip-tls-verify/);
  });

  it("fails clearly on a missing context", async () => {
    const p = join(dir, "config");
    await writeFile(p, config(`- name: u1\n  user: {token: a}`));
    expect(() => loadKubeconfig({ path: p, context: "nope" })).toThrow(/context "nope" not found/);
  });

  it("names the file and the flag, in words, for a kubeconfig that is missing, a directory, or not YAML, and quotes none of it", async () => {
    const missing = join(dir, "nope");
    expect(() => loadKubeconfig({ path: missing })).toThrow(`kubeconfig ${missing} (--kubeconfig): no such file`);
    expect(() => loadKubeconfig({ path: dir })).toThrow(`kubeconfig ${dir} (--kubeconfig): is a directory, not a file`);
    process.env.KUBECONFIG = missing;
    expect(() => loadKubeconfig()).toThrow(`kubeconfig ${missing} ($KUBECONFIG): no such file`);
    const p = join(dir, "config");
    await writeFile(p, config(`- name: u1\n  user:\n    token: secret-token-5e1b\n   bad: indent`));
    const err = (() => {
      try {
        loadKubeconfig({ path: p });
      } catch (e) {
        return e as Error;
      }
    })();
    expect(err?.message).toMatch(new RegExp(`^kubeconfig ${p} \\(--kubeconfig\\): not valid YAML: .* at line \\d+, column \\d+$`));
    expect(err?.message).not.toContain("secret-token");
    // A token starting with * reads as an alias, which the library's message names.
    await writeFile(p, config(`- name: u1\n  user: {token: *secret-token-5e1b}`));
    expect(() => loadKubeconfig({ path: p })).toThrow(`kubeconfig ${p} (--kubeconfig): not valid YAML: an alias (*name) names no anchor (&name) set before it at line 17, column 17`);
    // Nor is a warning printed, which would show the line around it.
    const warned = vi.spyOn(process, "emitWarning").mockImplementation(() => undefined);
    await writeFile(p, config(`- name: u1\n  user: {token: !!int secret-token-5e1b}`));
    loadKubeconfig({ path: p });
    expect(warned).not.toHaveBeenCalled();
    warned.mockRestore();
  });

  it("names the user and the file of a token-file that cannot be read, and the cluster a context names that is not there", async () => {
    const p = join(dir, "config");
    await writeFile(p, config(`- name: u1\n  user: {tokenFile: gone/token}`));
    await expect(loadKubeconfig({ path: p }).credentials()).rejects.toThrow(`kubeconfig: token-file of user "u1" ${join(dir, "gone/token")}: no such file`);
    await writeFile(p, config(`- name: u1\n  user: {token: a}`).replace("cluster: c1, user: u1", "cluster: c9, user: u1"));
    expect(() => loadKubeconfig({ path: p })).toThrow('kubeconfig: cluster "c9" of context "main" not found');
  });

  it("a failing exec plugin: how it ended and its stderr, never its command line (its arguments may hold a secret)", async () => {
    const plugin = join(dir, "failing.mjs");
    await writeFile(plugin, `process.stderr.write("login refused\\n"); process.exit(3);\n`);
    const p = await execPluginConfig(plugin, "");
    await writeFile(p, (await readFile(p, "utf8")).replace(`args: [${JSON.stringify(plugin)}]`, `args: [${JSON.stringify(plugin)}, "--client-secret=cs-7d2e"]`));
    const err = (await loadKubeconfig({ path: p }).credentials().catch((e: unknown) => e)) as Error;
    expect(err.message).toBe(`exec credential plugin ${process.execPath} exited 3: login refused`);
  });
});

describe("inClusterConfig", () => {
  it("uses the service-account token (re-read each time), CA and namespace", async () => {
    await writeFile(join(dir, "token"), "sa-token-1");
    await writeFile(join(dir, "ca.crt"), "SA-CA");
    await writeFile(join(dir, "namespace"), "operators\n");
    process.env.KUBERNETES_SERVICE_HOST = "fd00::1";
    process.env.KUBERNETES_SERVICE_PORT = "443";
    const c = inClusterConfig(dir);
    expect(c.server).toBe("https://[fd00::1]:443");
    expect(c.namespace).toBe("operators");
    expect((await c.credentials()).headers.authorization).toBe("Bearer sa-token-1");
    await writeFile(join(dir, "token"), "sa-token-2");
    const cred = await c.credentials();
    expect(cred.headers.authorization).toBe("Bearer sa-token-2");
    expect(cred.tls.ca?.toString()).toBe("SA-CA");
  });
});
