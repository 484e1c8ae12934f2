// An Agent's revision (what its deployments run; a new one redeploys them) must not depend on the
// order a manifest's keys were written in (the planner hashes the manifest file's, the operator
// the API server's sorted copy), and must stay what it was for the API server's copy: the
// revisions recorded in status before are compared with it, and a different one would redeploy
// every deployment on upgrade.
import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import type { Agent } from "../../../src/api/index.js";
import { agentRevision } from "../../../src/controllers/agent.js";

const agent = (spec: Record<string, unknown>) => ({ metadata: { name: "a", namespace: "ns" }, spec }) as unknown as Agent;

/** The formula the revisions in status were taken with. */
const oldRevision = (cr: Agent) => {
  const { image, version, manifest, endpoint } = cr.spec;
  return createHash("sha256").update(JSON.stringify([image, version ?? null, manifest ?? null, endpoint ?? null])).digest("hex").slice(0, 16);
};

/** JSON as the API server (Go) writes it: every object's keys sorted by their UTF-8 bytes. */
function goJSON(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(goJSON).join(",")}]`;
  if (typeof v !== "object" || v === null) return JSON.stringify(v);
  const keys = Object.keys(v).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  return `{${keys.map((k) => `${JSON.stringify(k)}:${goJSON((v as Record<string, unknown>)[k])}`).join(",")}}`;
}

const MANIFEST = {
  name: "triage-bot",
  version: "1.4.2",
  description: "Labels and routes incoming support tickets.",
  input_schema: { type: "object", properties: { ticket: { type: "string" }, Priority: { type: "integer" } }, required: ["ticket"] },
  skills: [{ id: "triage", outputModes: ["text"], inputModes: ["text"] }],
  // Keys a JavaScript object puts first whatever their order (integer-like), others past ASCII,
  // and one that is a key like any other in JSON.
  responses: { "200": { ok: true }, "10": {}, "9": null, "404": "x" },
  labels: { "é": 1, z: 2, "\uff01": 3, "😀": 4, A: 5 },
  ["__proto__"]: { polluted: false },
};

describe("agentRevision", () => {
  it("is, for a spec as the API server gives it (keys sorted), the revision the operator recorded before", () => {
    // What the operator reads: the API server's JSON, parsed.
    const spec = JSON.parse(goJSON({ image: "ghcr.io/acme/triage-bot:1.4.2", version: "1.4.2", manifest: JSON.parse(JSON.stringify(MANIFEST)), endpoint: "https://x" })) as Record<string, unknown>;
    expect(agentRevision(agent(spec))).toBe(oldRevision(agent(spec)));
    // The repo's example Agent's revision, as recorded in status (pinned).
    const example = JSON.parse(
      '{"image":"ghcr.io/acme/triage-bot:1.4.2","manifest":{"description":"Labels and routes incoming support tickets.","input_schema":{"properties":{"ticket":{"type":"string"}},"type":"object"},"name":"triage-bot","skills":[{"id":"triage","inputModes":["text"],"outputModes":["text"]}],"version":"1.4.2"},"version":"1.4.2"}',
    ) as Record<string, unknown>;
    expect(agentRevision(agent(example))).toBe("bd20d208b668d4fe");
    expect(agentRevision(agent({ image: "i:1" }))).toBe(oldRevision(agent({ image: "i:1" })));
  });

  it("does not depend on the order the manifest's keys were written in, at any depth", () => {
    const written = { image: "i:1", version: "1", manifest: MANIFEST };
    const sorted = JSON.parse(goJSON(written)) as Record<string, unknown>;
    expect(agentRevision(agent(written))).toBe(agentRevision(agent(sorted)));
    const reversed = (v: unknown): unknown =>
      Array.isArray(v) ? v.map(reversed) : typeof v === "object" && v !== null ? Object.fromEntries(Object.entries(v).reverse().map(([k, x]) => [k, reversed(x)])) : v;
    expect(agentRevision(agent({ ...written, manifest: reversed(MANIFEST) }))).toBe(agentRevision(agent(sorted)));
    // What is in it still counts (array order included).
    expect(agentRevision(agent({ ...written, manifest: { ...MANIFEST, version: "1.4.3" } }))).not.toBe(agentRevision(agent(written)));
    expect(agentRevision(agent({ ...written, manifest: { ...MANIFEST, skills: [{ id: "b" }, { id: "a" }] } }))).not.toBe(
      agentRevision(agent({ ...written, manifest: { ...MANIFEST, skills: [{ id: "a" }, { id: "b" }] } })),
    );
  });
});
