// A cluster without direct egress reaches the service through a proxy named by the environment
// (HTTPS_PROXY, HTTP_PROXY, NO_PROXY), as curl, Go programs and kubectl do: the service's API
// and, through it, agentd in the VMs. The proxy here is a real forward proxy (and CONNECT
// tunnel) that records where it was asked to go.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, request, type Server } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { connect, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AgentdClient } from "../../../src/service/agentd.js";
import { proxyFor, proxySettings } from "../../../src/service/dispatcher.js";
import type { ExecEvent } from "../../../src/service/agentd.js";
import { ServiceError } from "../../../src/service/index.js";
import { newClient, rejection, start, type Harness } from "./helpers.js";

let h: Harness;
let proxy: Server;
let proxyURL: string;
const tunnels: string[] = [];

beforeAll(async () => {
  h = await start();
  // http:// targets come as absolute-form requests, https:// ones through a CONNECT tunnel.
  proxy = createServer((req, res) => {
    const target = new URL(req.url ?? "");
    tunnels.push(target.host);
    // The proxy resolves the names (here: every name is this machine).
    const upstream = request({ host: "127.0.0.1", port: target.port, path: `${target.pathname}${target.search}`, method: req.method, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    upstream.on("error", () => res.destroy());
    req.pipe(upstream);
  });
  proxy.on("connect", (req, client, head) => {
    tunnels.push(req.url ?? "");
    const [, port] = (req.url ?? "").split(":");
    const upstream = connect(Number(port), "127.0.0.1", () => {
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    upstream.on("error", () => client.destroy());
    client.on("error", () => upstream.destroy());
  });
  await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  proxyURL = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
});

afterAll(async () => {
  proxy.closeAllConnections();
  await new Promise<void>((resolve) => proxy.close(() => resolve()));
  await h.close();
});

const PROXY_VARIABLES = ["HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"];

/** A URL of the emulator's under a name only the proxy resolves (loopback is never proxied). */
const viaName = (url: string) => url.replace("127.0.0.1", "emulator.test");

/** Builds what `make` builds with these proxy variables (and no other) set in the environment (read when built). */
function withEnv<T>(vars: Record<string, string>, make: () => T): T {
  const before = Object.fromEntries(PROXY_VARIABLES.map((k) => [k, process.env[k]]));
  for (const k of PROXY_VARIABLES) delete process.env[k];
  Object.assign(process.env, vars);
  try {
    return make();
  } finally {
    for (const [k, v] of Object.entries(before)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

describe("an egress proxy from the environment", () => {
  it("carries the token request, the service's API and agentd's commands", async () => {
    const [baseURL, authURL] = [viaName(h.emu.baseURL), viaName(h.emu.authURL)];
    tunnels.length = 0;
    const client = withEnv({ HTTP_PROXY: proxyURL }, () => newClient(h.emu, { baseURL, authURL }));
    const vm = await client.vms.allocate({ tier: "standard" });
    const agentd = withEnv({ HTTP_PROXY: proxyURL }, () => new AgentdClient({ baseURL, vmId: vm.vm_id, accessToken: (r) => client.accessToken(r) }));
    try {
      const events: ExecEvent[] = [];
      for await (const e of agentd.runCommand("echo through")) events.push(e);
      expect(events.filter((e) => e.type === "stdout").map((e) => (e as { text: string }).text).join("")).toBe("through\n");
      expect(tunnels.length).toBeGreaterThanOrEqual(2);
      expect(new Set(tunnels)).toEqual(new Set([new URL(baseURL).host, new URL(authURL).host]));
    } finally {
      await agentd.close();
      await client.close();
    }
  });

  it("tunnels to an https service, verifying its certificate against the Connection's CA, as without the proxy", async () => {
    // The service behind TLS with a certificate of its own CA (self-signed, made here).
    const dir = mkdtempSync(join(tmpdir(), "proxy-tls-"));
    const [keyFile, certFile] = [join(dir, "tls.key"), join(dir, "tls.crt")];
    execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", keyFile, "-out", certFile, "-days", "1", "-subj", "/CN=emulator.test", "-addext", "subjectAltName=DNS:emulator.test"], { stdio: "ignore" });
    const cert = readFileSync(certFile, "utf8");
    const upstream = new URL(h.emu.baseURL);
    const front = createHttpsServer({ key: readFileSync(keyFile), cert }, (req, res) => {
      const out = request({ host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      });
      req.pipe(out);
    });
    await new Promise<void>((resolve) => front.listen(0, "127.0.0.1", resolve));
    const baseURL = `https://emulator.test:${(front.address() as AddressInfo).port}`;
    const env = { HTTPS_PROXY: proxyURL, HTTP_PROXY: proxyURL };
    const authURL = viaName(h.emu.authURL);
    const trusting = withEnv(env, () => newClient(h.emu, { baseURL, authURL, caCert: cert }));
    const untrusting = withEnv(env, () => newClient(h.emu, { baseURL, authURL }));
    try {
      tunnels.length = 0;
      expect(Array.isArray(await trusting.vms.list({}))).toBe(true);
      expect(tunnels).toContain(new URL(baseURL).host);
      const refused = await rejection(untrusting.vms.list({}));
      expect(refused).toBeInstanceOf(ServiceError);
      expect((refused as ServiceError).message).toMatch(/TLS verification failed/);
    } finally {
      await trusting.close();
      await untrusting.close();
      front.closeAllConnections();
      await new Promise<void>((resolve) => front.close(() => resolve()));
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("is not used for a host NO_PROXY names, nor for loopback", async () => {
    tunnels.length = 0;
    const named = withEnv({ HTTP_PROXY: proxyURL, NO_PROXY: "example.com" }, () => newClient(h.emu));
    try {
      await named.vms.list({});
      expect(tunnels).toEqual([]); // 127.0.0.1: never proxied
    } finally {
      await named.close();
    }
  });
});

describe("which proxy an origin goes through, as Go programs decide it", () => {
  const via = (url: string, env: Record<string, string>) => proxyFor(new URL(url), proxySettings(env));

  it("takes HTTPS_PROXY for https and HTTP_PROXY for http, each on its own; a value without a scheme is http://", () => {
    expect(via("https://api.example.com", { HTTP_PROXY: "http://p:3128" })).toBeUndefined();
    expect(via("http://api.example.com", { HTTP_PROXY: "http://p:3128" })).toBe("http://p:3128/");
    expect(via("https://api.example.com", { HTTPS_PROXY: "proxy.corp:3128" })).toBe("http://proxy.corp:3128/");
    expect(via("https://api.example.com", { https_proxy: "http://lower:1" })).toBe("http://lower:1/");
    expect(via("https://api.example.com", { HTTPS_PROXY: "http://upper:1", https_proxy: "http://lower:1" })).toBe("http://upper:1/");
  });

  it("leaves out loopback and what NO_PROXY lists: *, addresses, CIDR ranges, domains (with subdomains; .domain: subdomains only), ports", () => {
    const env = (noProxy: string) => ({ HTTPS_PROXY: "http://p:1", NO_PROXY: noProxy });
    expect(via("https://localhost:8443", env(""))).toBeUndefined();
    expect(via("https://127.0.0.5", env(""))).toBeUndefined();
    expect(via("https://[::1]:8443", env(""))).toBeUndefined();
    expect(via("https://api.example.com", env("*"))).toBeUndefined();
    expect(via("https://10.1.2.3", env("10.0.0.0/8"))).toBeUndefined();
    expect(via("https://11.1.2.3", env("10.0.0.0/8"))).toBe("http://p:1/");
    expect(via("https://192.168.1.9", env("192.168.1.9"))).toBeUndefined();
    expect(via("https://api.example.com", env("example.com"))).toBeUndefined();
    expect(via("https://example.com", env("example.com"))).toBeUndefined();
    expect(via("https://example.com", env(".example.com"))).toBe("http://p:1/");
    expect(via("https://a.example.com", env("*.example.com"))).toBeUndefined();
    expect(via("https://notexample.com", env("example.com"))).toBe("http://p:1/");
    expect(via("https://api.example.com", env("example.com:8443"))).toBe("http://p:1/");
    expect(via("https://api.example.com:8443", env("example.com:8443"))).toBeUndefined();
    expect(via("https://svc.ns.svc.cluster.local", env(" .svc.cluster.local , 10.96.0.0/12"))).toBeUndefined();
  });

  it("names a proxy variable that is not a URL, never its value (which may hold the proxy's password)", () => {
    expect(() => proxySettings({ HTTPS_PROXY: "http://user:s3cret@[bad" })).toThrow(/^\$HTTPS_PROXY is not a proxy URL/);
    expect(() => proxySettings({ HTTPS_PROXY: "http://user:s3cret@[bad" })).not.toThrow(/s3cret/);
    expect(() => proxySettings({ https_proxy: "socks5://p:1080" })).toThrow("$https_proxy: a proxy must be http:// or https://, not socks5://");
  });
});
