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
    const upstream = request(target, { method: req.method, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    upstream.on("error", () => res.destroy());
    req.pipe(upstream);
  });
  proxy.on("connect", (req, client, head) => {
    tunnels.push(req.url ?? "");
    const [host, port] = (req.url ?? "").split(":");
    const upstream = connect(Number(port), host, () => {
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

/** Builds what `make` builds with these proxy variables set in the environment (read when built). */
function withEnv<T>(vars: Record<string, string>, make: () => T): T {
  const before = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
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
    const origin = new URL(h.emu.baseURL).host;
    tunnels.length = 0;
    const client = withEnv({ HTTP_PROXY: proxyURL }, () => newClient(h.emu));
    const vm = await client.vms.allocate({ tier: "standard" });
    const agentd = withEnv({ HTTP_PROXY: proxyURL }, () => new AgentdClient({ baseURL: h.emu.baseURL, vmId: vm.vm_id, accessToken: (r) => client.accessToken(r) }));
    try {
      const events: ExecEvent[] = [];
      for await (const e of agentd.runCommand("echo through")) events.push(e);
      expect(events.filter((e) => e.type === "stdout").map((e) => (e as { text: string }).text).join("")).toBe("through\n");
      expect(tunnels.length).toBeGreaterThanOrEqual(2);
      expect(new Set(tunnels)).toEqual(new Set([origin, new URL(h.emu.authURL).host]));
    } finally {
      await agentd.close();
      await client.close();
    }
  });

  it("tunnels to an https service, verifying its certificate against the Connection's CA, as without the proxy", async () => {
    // The service behind TLS with a certificate of its own CA (self-signed, made here).
    const dir = mkdtempSync(join(tmpdir(), "proxy-tls-"));
    const [keyFile, certFile] = [join(dir, "tls.key"), join(dir, "tls.crt")];
    execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", keyFile, "-out", certFile, "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"], { stdio: "ignore" });
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
    const baseURL = `https://127.0.0.1:${(front.address() as AddressInfo).port}`;
    const env = { HTTPS_PROXY: proxyURL, HTTP_PROXY: proxyURL };
    const trusting = withEnv(env, () => newClient(h.emu, { baseURL, caCert: cert }));
    const untrusting = withEnv(env, () => newClient(h.emu, { baseURL }));
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

  it("is not used for a host NO_PROXY names", async () => {
    tunnels.length = 0;
    const client = withEnv({ HTTP_PROXY: proxyURL, NO_PROXY: "127.0.0.1" }, () => newClient(h.emu));
    try {
      await client.vms.list({});
      expect(tunnels).toEqual([]);
    } finally {
      await client.close();
    }
  });
});
