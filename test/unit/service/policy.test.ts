// Pure unit tests of the retry policy, Retry-After parsing, error-body parsing and the token
// cache's single-flight logic (no HTTP here; the contract tests cover the wire).

import { describe, expect, it } from "vitest";
import { httpErrorMessage, parseErrorBody, scrub } from "../../../src/service/errors.js";
import { attemptTimeout, backoffDelay, judge, MIN_ATTEMPT_MS, parseRetryAfter, retryDelay } from "../../../src/service/retry.js";
import { parseTokenResponse, TokenSource } from "../../../src/service/token.js";
import type { IssuedToken } from "../../../src/service/token.js";

describe("judge", () => {
  it.each([
    // [class, status, retry, transient, outcomeUnknown]
    ["idempotent", 429, true, true, false],
    ["idempotent", 500, true, true, false],
    ["idempotent", 502, true, true, false],
    ["idempotent", 503, true, true, false],
    ["idempotent", 504, true, true, false],
    ["idempotent", 400, false, false, false],
    ["idempotent", 404, false, false, false],
    ["idempotent", 409, false, false, false],
    ["unsafe", 408, true, true, false],
    ["unsafe", 429, true, true, false],
    ["unsafe", 503, true, true, false],
    ["unsafe", 500, false, true, true],
    ["unsafe", 502, false, true, true],
    ["unsafe", 504, false, true, true],
    ["unsafe", 400, false, false, false],
    ["unsafe", 409, false, false, false],
  ] as const)("%s %i", (cls, status, retry, transient, outcomeUnknown) => {
    expect(judge(cls, { kind: "status", status })).toEqual({ retry, transient, outcomeUnknown });
  });

  it("a proxy's 503, and any 5xx but 501 and 505: a create may have been done", () => {
    expect(judge("unsafe", { kind: "status", status: 503, fromService: false })).toEqual({ retry: false, transient: true, outcomeUnknown: true });
    expect(judge("unsafe", { kind: "status", status: 503, fromService: true })).toEqual({ retry: true, transient: true, outcomeUnknown: false });
    expect(judge("idempotent", { kind: "status", status: 503, fromService: false })).toEqual({ retry: true, transient: true, outcomeUnknown: false });
    for (const status of [507, 520, 524, 599]) {
      expect(judge("unsafe", { kind: "status", status })).toEqual({ retry: false, transient: true, outcomeUnknown: true });
      expect(judge("idempotent", { kind: "status", status })).toEqual({ retry: true, transient: true, outcomeUnknown: false });
    }
    for (const status of [501, 505]) expect(judge("unsafe", { kind: "status", status })).toEqual({ retry: false, transient: false, outcomeUnknown: false });
  });

  it("network failures", () => {
    expect(judge("unsafe", { kind: "network", sent: "no", permanent: false })).toEqual({ retry: true, transient: true, outcomeUnknown: false });
    expect(judge("unsafe", { kind: "network", sent: "maybe", permanent: false })).toEqual({ retry: false, transient: true, outcomeUnknown: true });
    expect(judge("idempotent", { kind: "network", sent: "maybe", permanent: false })).toEqual({ retry: true, transient: true, outcomeUnknown: false });
    expect(judge("idempotent", { kind: "network", sent: "no", permanent: true })).toEqual({ retry: false, transient: false, outcomeUnknown: false });
  });
});

describe("backoff", () => {
  const o = { baseDelayMs: 200, maxDelayMs: 30_000 };
  it("is full jitter under an exponential ceiling", () => {
    expect(backoffDelay(0, o, () => 0.999)).toBe(199);
    expect(backoffDelay(3, o, () => 0.5)).toBe(800);
    expect(backoffDelay(20, o, () => 0.999)).toBeLessThanOrEqual(30_000);
    expect(backoffDelay(2, o, () => 0)).toBe(0);
  });
  it("Retry-After wins, plus a little jitter", () => {
    expect(retryDelay(0, 5000, o, () => 0)).toBe(5000);
    expect(retryDelay(0, 5000, o, () => 0.999)).toBeLessThan(5200);
  });
});

describe("attemptTimeout", () => {
  it("is half the time left before neededBy, between MIN_ATTEMPT_MS and the client's timeout", () => {
    const now = 1_000_000;
    expect(attemptTimeout(30_000, now, undefined)).toBe(30_000);
    expect(attemptTimeout(30_000, now, now + 20_000)).toBe(10_000);
    expect(attemptTimeout(30_000, now, now + 600_000)).toBe(30_000);
    expect(attemptTimeout(30_000, now, now + 1_000)).toBe(MIN_ATTEMPT_MS);
    // Past it (a renewal of a VM the service may still keep a while): no hurry left to make.
    expect(attemptTimeout(30_000, now, now - 1)).toBe(30_000);
    expect(attemptTimeout(1_000, now, now + 1_000)).toBe(1_000);
  });
});

describe("parseRetryAfter", () => {
  const now = Date.UTC(2030, 0, 1, 12, 0, 0);
  it("reads seconds and HTTP dates", () => {
    expect(parseRetryAfter("3", now)).toBe(3000);
    expect(parseRetryAfter("0", now)).toBe(0);
    expect(parseRetryAfter("1.5", now)).toBe(1500);
    expect(parseRetryAfter(new Date(now + 7000).toUTCString(), now)).toBe(7000);
    expect(parseRetryAfter(new Date(now - 7000).toUTCString(), now)).toBe(0);
    expect(parseRetryAfter(["2", "9"], now)).toBe(2000);
  });
  it("ignores absent or unreadable values", () => {
    expect(parseRetryAfter(undefined, now)).toBeUndefined();
    expect(parseRetryAfter("", now)).toBeUndefined();
    expect(parseRetryAfter("soon", now)).toBeUndefined();
    expect(parseRetryAfter("-1", now)).toBeUndefined();
  });
});

describe("error bodies", () => {
  it("parses both shapes and nests", () => {
    expect(parseErrorBody('{"code":503,"error_code":"pool_exhausted","message":"no VMs"}', [])).toEqual({ code: 503, errorCode: "pool_exhausted", serviceMessage: "no VMs" });
    expect(parseErrorBody('{"error":"conflict","message":"name taken"}', [])).toEqual({ serviceError: "conflict", serviceMessage: "name taken" });
    expect(parseErrorBody('{"error":{"message":"nested"}}', [])).toEqual({ serviceMessage: "nested" });
    expect(parseErrorBody("", [])).toEqual({});
    expect(parseErrorBody("  \n", [])).toEqual({});
    expect(parseErrorBody("{not json", [])).toEqual({ snippet: "{not json" });
    expect(parseErrorBody("[1,2]", [])).toEqual({ snippet: "[1,2]" });
  });
  it("scrubs secrets, before truncating", () => {
    const secret = "abcdefgh12345678";
    const body = `${"y".repeat(195)}${secret}`;
    const p = parseErrorBody(body, [secret]);
    expect(p.snippet).not.toContain("abcdefgh");
    expect(parseErrorBody(`{"message":"key ${secret} refused"}`, [secret]).serviceMessage).toBe("key [REDACTED] refused");
  });
  it("scrubs a secret as a JSON body or a URL carries it, and a short one where it stands alone", () => {
    const password = 'pa"ss\\word';
    expect(scrub(JSON.stringify({ password }), [password])).toBe('{"password":"[REDACTED]"}');
    expect(scrub(`GET /v2/?p=${encodeURIComponent("a b/c&d")}`, ["a b/c&d"])).toBe("GET /v2/?p=[REDACTED]");
    expect(scrub('{"password":"abc","note":"abcdef"}', ["abc"])).toBe('{"password":"[REDACTED]","note":"abcdef"}');
    expect(scrub("x.y x.y1 zx.y", ["x.y"])).toBe("[REDACTED] x.y1 zx.y");
    expect(scrub("nothing here", [""])).toBe("nothing here");
    // Go's JSON encoder and query encoding.
    expect(scrub('{"password":"p\\u0026ss\\u003cw\\u003erd"}', ["p&ss<w>rd"])).toBe('{"password":"[REDACTED]"}');
    expect(scrub("?p=it%21s+me", ["it!s me"])).toBe("?p=[REDACTED]");
    expect(scrub("?p=a~b%2Ac+d", ["a~b*c d"])).toBe("?p=[REDACTED]");
    // Overlapping secrets go under one mask; a short secret's encoded forms follow its rule too,
    // and an escape before it is a boundary.
    expect(scrub("zzabcdxyz", ["abcdxyz", "zzabcd"])).toBe("[REDACTED]");
    expect(scrub("data%2Fbase a%2Fb", ["a/b"])).toBe("data%2Fbase [REDACTED]");
    expect(scrub("line\\nabc x%20abc", ["abc"])).toBe("line\\n[REDACTED] x%20[REDACTED]");
    // A replacement is not matched again by a shorter secret.
    expect(scrub("key abcdefgh and REDA", ["abcdefgh", "REDA"])).toBe("key [REDACTED] and [REDACTED]");
  });
  it("formats messages for people", () => {
    expect(httpErrorMessage("agents.create", 409, "Conflict", { serviceError: "conflict", serviceMessage: 'name "x" already taken' })).toBe('agents.create: conflict: name "x" already taken (HTTP 409)');
    expect(httpErrorMessage("vms.get", 502, "", { snippet: "upstream died" })).toBe("vms.get: Bad Gateway: upstream died (HTTP 502)");
    expect(httpErrorMessage("token", 401, "Unauthorized", { serviceError: "invalid_client" }, { lead: "credentials refused by the token service" })).toBe("token: credentials refused by the token service: invalid_client (HTTP 401)");
    expect(httpErrorMessage("vms.allocate", 500, "Internal Server Error", {}, { suffix: "outcome unknown" })).toBe("vms.allocate: Internal Server Error (HTTP 500); outcome unknown");
  });
});

describe("parseTokenResponse", () => {
  it("defaults expires_in to 900 and tolerates strings", () => {
    expect(parseTokenResponse({ access_token: "t" })).toEqual({ accessToken: "t", expiresInSeconds: 900 });
    expect(parseTokenResponse({ access_token: "t", expires_in: 60 })).toEqual({ accessToken: "t", expiresInSeconds: 60 });
    expect(parseTokenResponse({ access_token: "t", expires_in: "120" })).toEqual({ accessToken: "t", expiresInSeconds: 120 });
    expect(parseTokenResponse({ access_token: "t", expires_in: -5 })).toEqual({ accessToken: "t", expiresInSeconds: 900 });
    expect(parseTokenResponse({ access_token: "" })).toBeUndefined();
    expect(parseTokenResponse(undefined)).toBeUndefined();
  });
});

describe("TokenSource", () => {
  function source(ttl = 900): { ts: TokenSource; clock: { ms: number }; calls: () => number; release: () => void } {
    const clock = { ms: 0 };
    let n = 0;
    let gate: (() => void) | undefined;
    const fetch = (): Promise<IssuedToken> => {
      n++;
      return new Promise((resolve) => {
        gate = () => resolve({ accessToken: `tok-${n}`, expiresInSeconds: ttl });
      });
    };
    return { ts: new TokenSource(fetch, () => clock.ms), clock, calls: () => n, release: () => gate?.() };
  }

  it("single-flights concurrent refreshes", async () => {
    const s = source();
    const all = Promise.all(Array.from({ length: 50 }, () => s.ts.get()));
    await Promise.resolve();
    s.release();
    expect(new Set(await all)).toEqual(new Set(["tok-1"]));
    expect(s.calls()).toBe(1);
  });

  it("invalidate only clears the token it names", async () => {
    const s = source();
    const p = s.ts.get();
    s.release();
    const t1 = await p;
    s.ts.invalidate("someone-elses-token");
    expect(s.ts.peek()).toBe(t1);
    s.ts.invalidate(t1);
    expect(s.ts.peek()).toBeUndefined();
  });

  it("within the margin, answers with the cached token while a slow refresh runs, and with the new one after it", async () => {
    const s = source(900);
    const p = s.ts.get();
    s.release();
    await p;
    s.clock.ms = 880_000; // 20 s before expiry: inside the 30 s margin
    // The refresh does not answer: calls still get the token, which works for 20 s more.
    expect(await s.ts.get()).toBe("tok-1");
    expect(await s.ts.get()).toBe("tok-1");
    expect(s.calls()).toBe(2); // one refresh, shared
    s.release();
    await new Promise((r) => setImmediate(r));
    expect(await s.ts.get()).toBe("tok-2");
    // Once it has expired, a call waits for the refresh.
    s.clock.ms = 880_000 + 900_000;
    let got: string | undefined;
    const waiting = s.ts.get().then((t) => (got = t));
    await new Promise((r) => setImmediate(r));
    expect(got).toBeUndefined();
    s.release();
    await waiting;
    expect(got).toBe("tok-3");
  });

  it("uses a tenth of the lifetime as the margin for short tokens", async () => {
    const s = source(10);
    const p = s.ts.get();
    s.release();
    await p;
    s.clock.ms = 8_999;
    expect(s.ts.peek()).toBe("tok-1");
    s.clock.ms = 9_000;
    expect(s.ts.peek()).toBeUndefined();
  });
});
