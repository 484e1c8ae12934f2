// A step's output as a run reports it: tail in status, capped whole in the ConfigMap, secrets masked.
import { describe, expect, it } from "vitest";
import { cap, lastLine, mask, tail } from "../../../src/runs/output.js";

describe("step output", () => {
  it("keeps the tail on a character boundary", () => {
    expect(tail("short", 10)).toBe("short");
    expect(tail("0123456789", 4)).toBe("6789");
    expect(tail("aé", 1)).toBe(""); // never half a character
  });

  it("caps long output keeping head and tail, with a marker saying how much was cut", () => {
    const text = "x".repeat(5000) + "END";
    const out = cap(text, 1000);
    expect(Buffer.byteLength(out)).toBeLessThanOrEqual(1000);
    expect(out.startsWith("xxx")).toBe(true);
    expect(out.endsWith("END")).toBe(true);
    expect(out).toMatch(/\[\.\.\. \d+ bytes of output cut here \.\.\.\]/);
    expect(cap("small", 1000)).toBe("small");
  });

  it("masks secret values, longest first, and leaves very short ones alone", () => {
    expect(mask("token=abcdef and abcdefgh, id=ab", ["abcdef", "abcdefgh", "ab"])).toBe("token=*** and ***, id=ab");
  });

  it("takes the last non-empty line for messages", () => {
    expect(lastLine("one\ntwo\n\n")).toBe("two");
    expect(lastLine("")).toBeUndefined();
  });
});
