// src/lib is a neutral library: everything else may import it (the emulator included, which
// must never import src/service), so it imports nothing from the rest of src/.
import { readdirSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

const dir = new URL("../../../src/lib/", import.meta.url);

describe("src/lib", () => {
  it("imports only its own modules, Node's and packages", () => {
    const files = readdirSync(dir).filter((f) => f.endsWith(".ts"));
    expect(files.length).toBeGreaterThan(0);
    for (const f of files) {
      const text = readFileSync(new URL(f, dir), "utf8");
      for (const m of text.matchAll(/\bfrom\s+"([^"]+)"/g)) expect(m[1], `${f} imports ${m[1]}`).not.toMatch(/^\.\.\//);
    }
  });
});
