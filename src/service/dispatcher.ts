// The connections under the service clients (the service's API, its token service, and agentd
// through the API): TLS as the Connection says, and an egress proxy as the environment says,
// read the way Go programs read it (golang.org/x/net/http/httpproxy, which kubectl and every
// Kubernetes component use):
// - HTTPS_PROXY for https:// origins, HTTP_PROXY for http:// ones, each on its own (no proxy
//   for https when only HTTP_PROXY is set); upper-case names first, then lower-case; a value
//   without a scheme is an http:// proxy;
// - NO_PROXY: comma-separated; `*` (nothing is proxied), an IP address, a CIDR range
//   (10.0.0.0/8), a domain (`example.com`: it and its subdomains; `.example.com`: its
//   subdomains only), each with an optional `:port`;
// - localhost and loopback addresses are never proxied.
// Without a proxy for an origin, a plain keep-alive Agent.

import { readFileSync } from "node:fs";
import { BlockList, isIP } from "node:net";
import { rootCertificates } from "node:tls";
import { Agent, ProxyAgent, type Dispatcher } from "undici";

export interface DispatcherOptions {
  /** Sockets per origin (undefined: undici's default, no limit). */
  connections?: number;
  headersTimeoutMs: number;
  bodyTimeoutMs?: number;
  insecureSkipTLSVerify?: boolean;
  /** PEM text, or a path to a PEM file: trusted besides Node's bundled roots. */
  caCert?: string;
}

/** The dispatcher for each origin: direct, or through the proxy the environment names for it. */
export class ServiceDispatchers {
  private readonly direct: Agent;
  private readonly proxied = new Map<string, ProxyAgent>();
  private readonly proxies: ProxySettings;

  constructor(
    private readonly o: DispatcherOptions,
    env: NodeJS.ProcessEnv = process.env,
  ) {
    this.proxies = proxySettings(env);
    this.direct = new Agent({ ...this.common(), connect: this.tls() });
  }

  /** The dispatcher for requests to `origin` (scheme://host[:port]). */
  for(origin: string): Dispatcher {
    const proxy = proxyFor(new URL(origin), this.proxies);
    if (proxy === undefined) return this.direct;
    let agent = this.proxied.get(proxy);
    if (agent === undefined) {
      // Through the proxy, the service's TLS is the tunnelled connection's (requestTls).
      agent = new ProxyAgent({ ...this.common(), uri: proxy, requestTls: this.tls() });
      this.proxied.set(proxy, agent);
    }
    return agent;
  }

  async close(): Promise<void> {
    await Promise.all([this.direct.close(), ...[...this.proxied.values()].map((a) => a.close())]);
  }

  private common() {
    return {
      ...(this.o.connections !== undefined && { connections: this.o.connections }),
      headersTimeout: this.o.headersTimeoutMs,
      ...(this.o.bodyTimeoutMs !== undefined && { bodyTimeout: this.o.bodyTimeoutMs }),
    };
  }

  private tls() {
    return {
      rejectUnauthorized: this.o.insecureSkipTLSVerify !== true,
      // `ca` replaces Node's bundled roots, so keep them and add the extra one.
      ...(this.o.caCert !== undefined ? { ca: [...rootCertificates, loadPEM(this.o.caCert)] } : {}),
    };
  }
}

export interface ProxySettings {
  http?: string;
  https?: string;
  noProxy: NoProxy;
}

/**
 * The proxy settings of an environment. A proxy variable that is not a URL is an Error naming
 * the variable and never its value (which may carry the proxy's password).
 */
export function proxySettings(env: NodeJS.ProcessEnv): ProxySettings {
  const read = (name: string) => {
    const upper = env[name];
    const value = upper !== undefined && upper !== "" ? upper : env[name.toLowerCase()];
    return value === undefined || value.trim() === "" ? undefined : { name: upper ? name : name.toLowerCase(), value: value.trim() };
  };
  const http = read("HTTP_PROXY");
  const https = read("HTTPS_PROXY");
  return {
    ...(http !== undefined && { http: proxyURL(http.name, http.value) }),
    ...(https !== undefined && { https: proxyURL(https.name, https.value) }),
    noProxy: parseNoProxy(read("NO_PROXY")?.value ?? ""),
  };
}

/** A proxy variable's value as a URL: `proxy.corp:3128` is `http://proxy.corp:3128`, as Go reads it. */
function proxyURL(name: string, value: string): string {
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(value) ? value : `http://${value}`;
  let u: URL;
  try {
    u = new URL(withScheme);
  } catch {
    throw new TypeError(`$${name} is not a proxy URL (e.g. http://proxy.example.com:3128)`);
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") throw new TypeError(`$${name}: a proxy must be http:// or https://, not ${u.protocol}//`);
  return u.href;
}

/** The proxy for requests to `url`, if any. */
export function proxyFor(url: URL, s: ProxySettings): string | undefined {
  const proxy = url.protocol === "https:" ? s.https : url.protocol === "http:" ? s.http : undefined;
  if (proxy === undefined) return undefined;
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1").replace(/\.$/, "").toLowerCase();
  if (host === "localhost" || isLoopback(host)) return undefined;
  const port = url.port !== "" ? url.port : url.protocol === "https:" ? "443" : "80";
  return s.noProxy.excludes(host, port) ? undefined : proxy;
}

function isLoopback(host: string): boolean {
  if (isIP(host) === 4) return host.startsWith("127.");
  if (isIP(host) === 6) return host === "::1" || /^(0{0,4}:){7}0{0,3}1$/.test(host) || /^::ffff:127\./.test(host);
  return false;
}

interface NoProxy {
  excludes(host: string, port: string): boolean;
}

function parseNoProxy(value: string): NoProxy {
  const entries = value
    .split(",")
    .map((e) => e.trim().toLowerCase())
    .filter((e) => e !== "");
  if (entries.includes("*")) return { excludes: () => true };
  const ranges = new BlockList();
  const ips: Array<{ ip: string; port?: string }> = [];
  const domains: Array<{ suffix: string; exact?: string; port?: string }> = [];
  for (const entry of entries) {
    if (entry.includes("/")) {
      const [address = "", bits = ""] = entry.split("/");
      const family = isIP(address);
      if (family !== 0 && /^\d+$/.test(bits)) ranges.addSubnet(address, Number(bits), family === 4 ? "ipv4" : "ipv6");
      continue;
    }
    const bracketed = /^\[([^\]]+)\](?::(\d+))?$/.exec(entry);
    const [host = "", port] = bracketed ? [bracketed[1], bracketed[2]] : isIP(entry) === 6 ? [entry] : splitPort(entry);
    if (isIP(host) !== 0) {
      ips.push({ ip: host, ...(port !== undefined && { port }) });
      continue;
    }
    // `*.example.com` is `.example.com`; `example.com` matches itself too.
    const name = host.startsWith("*.") ? host.slice(1) : host;
    domains.push(name.startsWith(".") ? { suffix: name, ...(port !== undefined && { port }) } : { suffix: `.${name}`, exact: name, ...(port !== undefined && { port }) });
  }
  return {
    excludes(host, port) {
      const family = isIP(host);
      if (family !== 0) {
        if (ranges.check(host, family === 4 ? "ipv4" : "ipv6")) return true;
        return ips.some((e) => e.ip === host && (e.port === undefined || e.port === port));
      }
      return domains.some((d) => (d.port === undefined || d.port === port) && (host === d.exact || host.endsWith(d.suffix)));
    },
  };
}

function splitPort(entry: string): [string, string?] {
  const m = /^(.*):(\d+)$/.exec(entry);
  return m ? [m[1] ?? "", m[2]] : [entry];
}

function loadPEM(caCert: string): string {
  return caCert.includes("-----BEGIN") ? caCert : readFileSync(caCert, "utf8");
}
