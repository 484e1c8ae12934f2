// The operator's logger censors secrets by key, as the shapes a log line may carry them: at
// the top, one level down, two levels down and in arrays, under the spellings headers, SDKs
// and config files use.
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { createLogger } from "../../../src/runtime/logging.js";

function logged(fields: Record<string, unknown>): string {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _enc, cb) {
      lines.push(chunk.toString("utf8"));
      cb();
    },
  });
  createLogger({ level: "info", destination }).info(fields, "line");
  return lines.join("");
}

describe("createLogger's redaction", () => {
  it("censors secrets nested two levels and in arrays, and their common spellings", () => {
    const line = logged({
      "x-api-key": "top-xapikey-01",
      req: { headers: { "x-api-key": "nested-xapikey-02", authorization: "Bearer nested-bearer-03" } },
      a: { b: { token: "deep-token-04" } },
      items: [{ token: "array-token-05" }, { accessToken: "array-access-06" }],
      session: { accessToken: "access-07", refreshToken: "refresh-08", Token: "capital-09" },
      config: { apiKey: "apikey-10", apikey: "apikey-11", "api-key": "apikey-12", password: "password-13" },
      oauth: { clientSecret: "client-secret-14", client_secret: "client-secret-15" },
      creds: { nested: { password: "deep-password-16" } },
    });
    for (let i = 1; i <= 16; i++) expect(line).not.toMatch(new RegExp(`-${String(i).padStart(2, "0")}"`));
    // What is not secret stays: the line still says which fields were there.
    expect(JSON.parse(line)).toMatchObject({ msg: "line", items: [{ token: "[REDACTED]" }, { accessToken: "[REDACTED]" }], a: { b: { token: "[REDACTED]" } } });
  });

  it("keeps fields that only look alike (tokens counted, a Secret's name)", () => {
    const line = JSON.parse(logged({ tokens: 5, secretRef: { name: "creds" }, spec: { credentials: { secretRef: { name: "creds" } } } })) as Record<string, unknown>;
    expect(line).toMatchObject({ tokens: 5, secretRef: { name: "creds" }, spec: { credentials: { secretRef: { name: "creds" } } } });
  });
});

describe("createLogger's level", () => {
  it("takes $LOG_LEVEL in any case, as the run command does", () => {
    const before = process.env.LOG_LEVEL;
    try {
      process.env.LOG_LEVEL = "DEBUG";
      expect(createLogger().level).toBe("debug");
    } finally {
      if (before === undefined) delete process.env.LOG_LEVEL;
      else process.env.LOG_LEVEL = before;
    }
  });
});
