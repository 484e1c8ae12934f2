// The generated API reference (dev/api-reference.ts): what a reader looks up must be in it, and it
// must say what the API server enforces.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { allKinds } from "../../../src/api/index.js";
import { toCRD } from "../../../src/api/crd.js";
import { cell, constraintsOf, examplesFor, flatten, renderKind, renderReference, staleFiles, typeOf, type Schema } from "../../../dev/api-reference.js";

describe("flatten", () => {
  const schema: Schema = {
    type: "object",
    required: ["tier"],
    properties: {
      tier: { type: "string", description: "Compute tier.", minLength: 1, maxLength: 10 },
      env: { type: "object", additionalProperties: { type: "string" } },
      envFrom: {
        type: "array",
        maxItems: 4,
        items: { type: "object", required: ["secretRef"], properties: { secretRef: { type: "object", properties: { name: { type: "string" } } } } },
      },
      policy: { type: "string", enum: ["Delete", "Orphan"], default: "Delete" },
      ref: { type: "object", default: { name: "default" }, properties: { name: { type: "string", default: "default" } } },
      manifest: { type: "object", "x-kubernetes-preserve-unknown-fields": true },
      at: { type: "string", format: "date-time" },
    },
    "x-kubernetes-validations": [
      { rule: "self.tier == oldSelf.tier", message: "spec.tier is immutable", fieldPath: ".tier" },
      { rule: "size(self.tier) > 0", message: "tier must not be empty" },
    ],
  };
  const { fields, rules } = flatten(schema, "spec");
  const field = (path: string) => fields.find((f) => f.path === path);

  it("lists nested fields, array items and their required flags, in declaration order", () => {
    expect(fields.map((f) => f.path)).toEqual([
      "spec.tier",
      "spec.env",
      "spec.envFrom",
      "spec.envFrom[].secretRef",
      "spec.envFrom[].secretRef.name",
      "spec.policy",
      "spec.ref",
      "spec.ref.name",
      "spec.manifest",
      "spec.at",
    ]);
    expect(field("spec.tier")?.required).toBe(true);
    expect(field("spec.envFrom[].secretRef")?.required).toBe(true);
    expect(field("spec.env")?.required).toBe(false);
  });

  it("names types as a Kubernetes user reads them", () => {
    expect(field("spec.env")?.type).toBe("map[string]string");
    expect(field("spec.envFrom")?.type).toBe("[]object");
    expect(field("spec.manifest")?.type).toBe("object (free-form)");
    expect(field("spec.at")?.type).toBe("string (date-time)");
  });

  it("shows defaults and constraints", () => {
    expect(field("spec.policy")?.default).toBe("Delete");
    expect(field("spec.ref")?.default).toBe('{"name":"default"}');
    expect(field("spec.tier")?.constraints).toEqual(["1–10 characters"]);
    expect(field("spec.policy")?.constraints).toEqual(["one of: `Delete`, `Orphan`"]);
    expect(field("spec.envFrom")?.constraints).toEqual(["at most 4 items"]);
  });

  it("collects CEL rules with their field path, marking those checked on update", () => {
    expect(rules).toEqual([
      { path: "spec.tier", message: "spec.tier is immutable", rule: "self.tier == oldSelf.tier", onUpdate: true },
      { path: "spec", message: "tier must not be empty", rule: "size(self.tier) > 0", onUpdate: false },
    ]);
  });
});

describe("bounds and cells", () => {
  it("writes numeric bounds, exclusive ones included", () => {
    expect(constraintsOf({ type: "integer", minimum: 1, maximum: 600 })).toEqual(["≥ 1, ≤ 600"]);
    expect(constraintsOf({ type: "number", exclusiveMinimum: 0 })).toEqual(["> 0"]);
    expect(typeOf({ type: "array", items: { type: "string" } })).toBe("[]string");
  });

  it("keeps a table cell on one line, escapes pipes and <placeholders> but not inline code", () => {
    expect(cell("a | b\nc")).toBe("a \\| b c");
    expect(cell("posts to <authURL>/token, e.g. `<name>`")).toBe("posts to &lt;authURL&gt;/token, e.g. `<name>`");
  });
});

describe("docs/reference/<kind>.md", () => {
  it("covers every spec and status field, every validation message and printer column of every kind", () => {
    for (const def of allKinds) {
      const page = renderKind(def, examplesFor(def.kind));
      const version = (toCRD(def) as { spec: { versions: Array<{ schema: { openAPIV3Schema: { properties: { spec: Schema; status: Schema } } }; additionalPrinterColumns: Array<{ name: string }> }> } }).spec.versions[0];
      const { spec, status } = version?.schema.openAPIV3Schema.properties ?? { spec: {}, status: {} };
      const specDoc = flatten(spec, "spec");
      for (const f of [...specDoc.fields, ...flatten(status, "status").fields]) expect(page, `${def.kind} ${f.path}`).toContain(`| \`${f.path}\` |`);
      for (const r of specDoc.rules) expect(page, `${def.kind} rule`).toContain(cell(r.message));
      for (const c of version?.additionalPrinterColumns ?? []) expect(page, `${def.kind} column ${c.name}`).toContain(`| ${c.name} |`);
    }
  });

  it("shows each kind's example from examples/", () => {
    for (const def of allKinds) {
      const examples = examplesFor(def.kind);
      expect(examples.length, def.kind).toBeGreaterThan(0);
      const page = renderKind(def, examples);
      for (const e of examples) expect(page).toContain(e.content.trimEnd());
      expect(page).toMatch(new RegExp(`kind: ${def.kind}\\n`));
    }
  });

  it("puts an index and one page per kind in docs/reference/", () => {
    const files = renderReference();
    expect([...files.keys()].sort()).toEqual(["README.md", "agent.md", "agentdeployment.md", "connection.md", "sandbox.md", "sandboxrun.md", "skill.md"]);
    for (const def of allKinds) expect(files.get("README.md")).toContain(`[${def.kind}](${def.kind.toLowerCase()}.md)`);
  });
});

describe("docs:check", () => {
  it("finds files that changed, are missing, or are not generated", () => {
    const dir = mkdtempSync(join(tmpdir(), "docs-check-"));
    writeFileSync(join(dir, "a.md"), "same");
    writeFileSync(join(dir, "b.md"), "old");
    writeFileSync(join(dir, "extra.md"), "x");
    const wanted = new Map([["a.md", "same"], ["b.md", "new"], ["c.md", "missing"]]);
    expect(staleFiles(dir, wanted).sort()).toEqual(["b.md", "c.md", "extra.md (not generated)"]);
    expect(staleFiles(dir, new Map([["a.md", "same"], ["b.md", "old"], ["extra.md", "x"]]))).toEqual([]);
  });
});
