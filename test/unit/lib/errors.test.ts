// errorMessage, retold (src/lib/errors.ts): what logs, conditions and Events say about a thrown value.
import { describe, expect, it } from "vitest";
import { errorMessage, retold, retryAfterOf } from "../../../src/lib/errors.js";

describe("errorMessage", () => {
  it("is an Error's message", () => {
    expect(errorMessage(new TypeError("boom"))).toBe("boom");
    expect(errorMessage(new Error("boom"), { labelNonError: true })).toBe("boom");
  });

  it("is anything else as text", () => {
    expect(errorMessage("a string")).toBe("a string");
    expect(errorMessage(42)).toBe("42");
    expect(errorMessage(undefined)).toBe("undefined");
    expect(errorMessage({ a: 1 })).toBe("[object Object]");
  });

  it("labels a non-Error, as JSON, when asked (a reconcile's panic)", () => {
    expect(errorMessage("a string", { labelNonError: true })).toBe("non-Error thrown: a string");
    expect(errorMessage({ a: 1 }, { labelNonError: true })).toBe('non-Error thrown: {"a":1}');
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(errorMessage(cyclic, { labelNonError: true })).toBe("non-Error thrown");
  });
});

describe("retold", () => {
  it("says the failure in other words (a secret masked) without the original as its cause, but still asks to wait as long as the service did", () => {
    const original = Object.assign(new Error("429 for token s3cr3t-value"), { retryAfterMs: 30_000 });
    const wrapped = new Error("step failed", { cause: original });
    const told = retold(wrapped, "step failed: 429 for token ***");
    expect(told.message).toBe("step failed: 429 for token ***");
    expect(told.cause).toBeUndefined();
    expect(JSON.stringify(told)).not.toContain("s3cr3t-value");
    expect(retryAfterOf(told)).toBe(30_000);
    expect(retryAfterOf(retold(new Error("x"), "y"))).toBeUndefined();
  });
});
