// The commands need Node.js 24 (their HTTP client fails on Node 20 with "Cannot read properties
// of undefined (reading 'bind')"): an older one is told so, and how to run them from a checkout.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { MIN_NODE_MAJOR, nodeTooOld } from "../../../src/commands/table.js";

describe("an older Node.js", () => {
  it("is refused in one line naming the version needed, the one found and the way from a checkout", () => {
    expect(nodeTooOld("kubectl agentcompute", "20.20.2")).toBe(
      "kubectl agentcompute: needs Node.js 24 or later, not 20.20.2 (from a checkout, `npm run -s dev -- <command>` runs the Node.js 24 that npm ci installed)",
    );
    expect(nodeTooOld("agent-operator", "24.0.0")).toBeUndefined();
    expect(nodeTooOld("agent-operator", "25.1.0")).toBeUndefined();
  });

  it("needs the version package.json's engines names", () => {
    const pkg = JSON.parse(readFileSync(new URL("../../../package.json", import.meta.url), "utf8")) as { engines: { node: string } };
    expect(pkg.engines.node).toBe(`>=${MIN_NODE_MAJOR}`);
  });
});
