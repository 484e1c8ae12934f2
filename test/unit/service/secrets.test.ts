// Secret scan: a mix of succeeding and failing calls with a pino logger at trace level writing
// to a buffer; no credential may appear in any log line or any error (message, stack, cause,
// or the error as pino would serialise it).

import diagnosticsChannel from "node:diagnostics_channel";
import { Writable } from "node:stream";
import pino from "pino";
import { describe, expect, it } from "vitest";
import { startEmulator } from "../../../src/emulator/index.js";
import { ServiceClient } from "../../../src/service/index.js";
import { API_KEY, ORG } from "./helpers.js";

const CLIENT = { clientId: "scan-client", clientSecret: "client-secret-7a6b5c4d3e2f1a0b" };
const PULL_PASSWORD = "pull-password-0f1e2d3c4b5a6978";
const WRONG_KEY = "wrong-api-key-1122334455667788";

describe("secrets never reach logs or errors", () => {
  it("scans every log line and every error of a mixed workload", async () => {
    // Every bearer token the client sends, observed on undici's own diagnostics channel.
    const bearers = new Set<string>();
    const onCreate = (message: unknown): void => {
      const headers = (message as { request: { headers: unknown } }).request.headers;
      if (!Array.isArray(headers)) return;
      for (let i = 0; i + 1 < headers.length; i += 2) {
        const v: unknown = headers[i + 1];
        if (String(headers[i]).toLowerCase() === "authorization" && typeof v === "string") bearers.add(v.replace(/^Bearer /, ""));
      }
    };
    diagnosticsChannel.subscribe("undici:request:create", onCreate);
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, cb) {
        lines.push(chunk.toString("utf8"));
        cb();
      },
    });
    const logger = pino({ level: "trace" }, sink);
    const emu = await startEmulator({ apiKey: API_KEY, clients: [CLIENT] });
    const errors: unknown[] = [];
    const secrets: string[] = [API_KEY, CLIENT.clientSecret, PULL_PASSWORD, WRONG_KEY];
    const mk = (credentials: ConstructorParameters<typeof ServiceClient>[0]["credentials"]): ServiceClient =>
      new ServiceClient({ baseURL: emu.baseURL, authURL: emu.authURL, credentials, logger, retry: { baseDelayMs: 1, maxDelayMs: 50 } });
    const byKey = mk({ apiKey: API_KEY });
    const byClient = mk(CLIENT);
    const wrong = mk({ apiKey: WRONG_KEY });
    const attempt = async (p: Promise<unknown>): Promise<unknown> => {
      try {
        return await p;
      } catch (e) {
        errors.push(e);
        logger.error({ err: e }, "call failed"); // as a controller would log it
        return undefined;
      }
    };

    try {
      // Successes that return credentials (deployment and VM tokens).
      const agent = await byKey.agents.create({
        name: "scan-agent",
        org_id: ORG,
        image: "registry.example/private:1",
        image_pull_secret: { registry: "registry.example", username: "bot", password: PULL_PASSWORD },
      });
      const dep = await byClient.deployments.deploy(agent.id, { tier: "standard", env: { API_TOKEN: "env-secret-value-abcdef12" } });
      const vm = await byKey.vms.allocate({ tier: "standard" });
      for (const t of [dep.token, vm.token]) if (t !== undefined) secrets.push(t);
      secrets.push("env-secret-value-abcdef12");
      await byClient.agents.listAll();
      await byKey.vms.listAll();

      // Failures of every kind. The service echoing a secret back must be scrubbed too.
      emu.injectFault({ method: "POST", path: "/registry/v1/agents", action: { status: 400, body: { error: "bad_request", message: `bad pull secret ${PULL_PASSWORD} for key ${API_KEY}` } } });
      await attempt(byKey.agents.create({ name: "scan-2", org_id: ORG, image: "i", image_pull_secret: { registry: "r", username: "u", password: PULL_PASSWORD } }));
      emu.injectFault({ method: "POST", path: "/compute/v1/vms/allocate", action: { status: 500, body: `<html>env-secret-value-abcdef12 ${CLIENT.clientSecret}</html>` } });
      await attempt(byClient.vms.allocate({ tier: "standard", env: { X: "env-secret-value-abcdef12" } }));
      emu.injectFault({ method: "POST", path: "/registry/v1/agents", action: { drop: "after" } });
      await attempt(byKey.agents.create({ name: "scan-3", org_id: ORG, image: "i", image_pull_secret: { registry: "r", username: "u", password: PULL_PASSWORD } }));
      await attempt(wrong.skills.list());
      await attempt(wrong.authenticate());
      emu.revokeTokens();
      await attempt(byKey.skills.list());
      await attempt(byClient.agents.get("does-not-exist"));
      emu.injectFault({ path: "/auth/token", action: { status: 401, body: { error: "invalid_client", message: `client ${CLIENT.clientSecret} refused` } } });
      emu.revokeTokens();
      await attempt(byClient.skills.list());
      emu.injectFault({ method: "GET", path: "/compute/v1/skills", times: Infinity, action: { status: 503 } });
      await attempt(byKey.skills.list());
      emu.clearFaults();
    } finally {
      await Promise.all([byKey.close(), byClient.close(), wrong.close()]);
      await emu.close();
      diagnosticsChannel.unsubscribe("undici:request:create", onCreate);
    }

    // Two clients, two revocations: at least four distinct bearer tokens were in use.
    expect(bearers.size).toBeGreaterThanOrEqual(4);
    secrets.push(...bearers);

    expect(errors.length).toBeGreaterThanOrEqual(8);
    expect(lines.length).toBeGreaterThan(20);
    expect(secrets.length).toBeGreaterThanOrEqual(11);
    const texts: string[] = [...lines];
    for (const e of errors) {
      const err = e as Error & { cause?: unknown };
      texts.push(String(err), err.message, err.stack ?? "", JSON.stringify(err), String(err.cause ?? ""));
    }
    for (const text of texts) {
      for (const s of secrets) expect(text.includes(s), `secret leaked into: ${text.slice(0, 300)}`).toBe(false);
    }
    // The scrubbed messages still say what went wrong.
    expect(errors.map(String).join("\n")).toContain("[REDACTED]");
  });
});
