// The connection pool under the service clients (the service's API, and agentd's through it):
// TLS as the Connection says, and an egress proxy as the environment says (HTTPS_PROXY,
// HTTP_PROXY and NO_PROXY, lower case too: what curl, Go programs and kubectl read), which a
// cluster without direct egress needs. Without a proxy set, a plain keep-alive Agent.

import { readFileSync } from "node:fs";
import { rootCertificates } from "node:tls";
import { Agent, EnvHttpProxyAgent, type Dispatcher } from "undici";

export interface DispatcherOptions {
  /** Sockets per origin (undefined: undici's default, no limit). */
  connections?: number;
  headersTimeoutMs: number;
  bodyTimeoutMs?: number;
  insecureSkipTLSVerify?: boolean;
  /** PEM text, or a path to a PEM file: trusted besides Node's bundled roots. */
  caCert?: string;
}

const PROXY_VARIABLES = ["https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY"];

export function serviceDispatcher(o: DispatcherOptions, env: NodeJS.ProcessEnv = process.env): Dispatcher {
  const tls = {
    rejectUnauthorized: o.insecureSkipTLSVerify !== true,
    // `ca` replaces Node's bundled roots, so keep them and add the extra one.
    ...(o.caCert !== undefined ? { ca: [...rootCertificates, loadPEM(o.caCert)] } : {}),
  };
  const options = {
    ...(o.connections !== undefined && { connections: o.connections }),
    headersTimeout: o.headersTimeoutMs,
    ...(o.bodyTimeoutMs !== undefined && { bodyTimeout: o.bodyTimeoutMs }),
    connect: tls,
  };
  if (!PROXY_VARIABLES.some((name) => (env[name] ?? "") !== "")) return new Agent(options);
  const pick = (name: string) => env[name.toLowerCase()] || env[name] || undefined;
  // Through the proxy, the service's TLS is the tunnelled one (requestTls); connect is for the
  // origins NO_PROXY sends direct.
  return new EnvHttpProxyAgent({
    ...options,
    requestTls: tls,
    httpProxy: pick("HTTP_PROXY"),
    httpsProxy: pick("HTTPS_PROXY"),
    noProxy: pick("NO_PROXY") ?? "",
  });
}

function loadPEM(caCert: string): string {
  return caCert.includes("-----BEGIN") ? caCert : readFileSync(caCert, "utf8");
}
