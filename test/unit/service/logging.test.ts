// The service client's logger (a pino child of the operator's) censors what the operator's
// logger censors: a child given its own redaction paths loses its parent's, so it carries
// the one list whole.
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { createLogger } from "../../../src/runtime/logging.js";
import { clientLogger } from "../../../src/service/client.js";

/** A logger at trace level writing its lines into `lines`. */
function capture(): { lines: string[]; destination: Writable } {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _enc, cb) {
      lines.push(chunk.toString("utf8"));
      cb();
    },
  });
  return { lines, destination };
}

describe("the service client's logger", () => {
  it("censors the operator logger's paths and its own", () => {
    const { lines, destination } = capture();
    const log = clientLogger(createLogger({ level: "trace", destination }));
    log.info(
      {
        Authorization: "Bearer capital-bearer-1",
        headers: { Authorization: "Bearer header-bearer-2", "x-api-key": "header-key-3" },
        api_key: "api-key-4",
        refresh_token: "refresh-5",
        secret: { data: { KEY: "secret-data-6" }, stringData: { KEY: "string-data-7" } },
        req: { apiKey: "nested-key-8", image_pull_secret: { password: "pull-9" } },
        credentials: { apiKey: "cred-10" },
      },
      "a line that should never carry these",
    );
    const line = lines.join("");
    for (const value of ["capital-bearer-1", "header-bearer-2", "header-key-3", "api-key-4", "refresh-5", "secret-data-6", "string-data-7", "nested-key-8", "pull-9", "cred-10"]) {
      expect(line).not.toContain(value);
    }
    expect(JSON.parse(line)).toMatchObject({ component: "service-client", Authorization: "[REDACTED]", refresh_token: "[REDACTED]", secret: { data: "[REDACTED]" } });
  });
});
