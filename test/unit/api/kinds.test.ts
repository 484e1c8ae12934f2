// The custom resources as a user meets them: the examples they copy validate against the
// schemas the CRDs are generated from, fields are spelled as Kubernetes users expect, a wrong
// type is refused with the field's path, and what `kubectl get` shows is there for every kind.
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Value } from "typebox/value";
import { describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { agentKind, allKinds, sandboxKind, type KindDefinition } from "../../../src/api/index.js";
import { toCRD } from "../../../src/api/crd.js";
import { GROUP } from "../../../src/api/names.js";

const EXAMPLES = fileURLToPath(new URL("../../../examples/", import.meta.url));

interface Doc {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string };
  spec?: unknown;
}

function examples(): Array<{ file: string; doc: Doc }> {
  return readdirSync(EXAMPLES)
    .filter((f) => f.endsWith(".yaml"))
    .flatMap((file) =>
      parseAllDocuments(readFileSync(`${EXAMPLES}${file}`, "utf8"))
        .map((d) => d.toJS() as Doc | null)
        .filter((doc): doc is Doc => doc !== null && doc.apiVersion?.startsWith(`${GROUP}/`) === true)
        .map((doc) => ({ file, doc })),
    );
}

const kindOf = (name: string | undefined): KindDefinition | undefined => allKinds.find((k) => k.kind === name);

/** Property names of a schema, recursively, with their paths (free-form objects are not entered). */
function propertyPaths(schema: unknown, path = "spec"): string[] {
  const s = schema as { properties?: Record<string, unknown>; items?: unknown };
  const out: string[] = [];
  for (const [name, sub] of Object.entries(s.properties ?? {})) {
    out.push(`${path}.${name}`);
    out.push(...propertyPaths(sub, `${path}.${name}`));
  }
  if (s.items !== undefined) out.push(...propertyPaths(s.items, `${path}[]`));
  return out;
}

describe("the examples", () => {
  it("cover every kind, and each validates against its kind's schema", () => {
    const all = examples();
    expect(new Set(all.map((e) => e.doc.kind))).toEqual(new Set(allKinds.map((k) => k.kind)));
    for (const { file, doc } of all) {
      const kind = kindOf(doc.kind);
      expect(kind, `${file}: unknown kind ${doc.kind}`).toBeDefined();
      const errors = [...Value.Errors(kind!.spec, doc.spec)].map((e) => `${e.instancePath} ${e.message}`);
      expect(errors, `${file}: ${doc.kind}/${doc.metadata?.name}`).toEqual([]);
    }
  });
});

describe("the schemas", () => {
  it("spell spec fields in camelCase, except inside the registry's own manifest document", () => {
    const offenders = allKinds.flatMap((k) =>
      propertyPaths(k.spec)
        .filter((p) => !p.startsWith("spec.manifest."))
        .filter((p) => !/^[a-z][a-zA-Z0-9]*$/.test(p.split(".").pop()!.replace("[]", "")))
        .map((p) => `${k.kind} ${p}`),
    );
    expect(offenders).toEqual([]);
  });

  it("refuse a boolean secureRuntime (a runtime's name is a string) and name the field", () => {
    expect(Value.Check(sandboxKind.spec, { tier: "standard", secureRuntime: "gvisor" })).toBe(true);
    const errors = [...Value.Errors(sandboxKind.spec, { tier: "standard", secureRuntime: true })];
    expect(errors.map((e) => e.instancePath)).toEqual(["/secureRuntime"]);
  });

  it("give the Agent manifest exactly the registry's keys, so nothing the registry drops can be set", () => {
    const manifest = (agentKind.spec as { properties: { manifest: { properties: Record<string, unknown> } } }).properties.manifest;
    expect(Object.keys(manifest.properties).sort()).toEqual(
      ["authentication", "capabilities", "description", "input_schema", "name", "output_schema", "runtime", "skills", "url", "version"].sort(),
    );
  });

  it("refuse a change of every create-only Agent field with a message naming it", () => {
    const crd = toCRD(agentKind) as { spec: { versions: Array<{ schema: { openAPIV3Schema: { properties: { spec: Record<string, unknown> } } } }> } };
    const rules = JSON.stringify(crd.spec.versions[0]!.schema.openAPIV3Schema.properties.spec);
    for (const field of ["orgId", "name", "author", "imagePullSecretRef"]) expect(rules).toContain(`spec.${field}`);
  });
});

describe("what kubectl shows", () => {
  it("every kind is in the agentcompute category, has a unique short name, and shows Ready and Age", () => {
    const shortNames = allKinds.flatMap((k) => k.shortNames);
    expect(new Set(shortNames).size).toBe(shortNames.length);
    // The short names the design promises (kubectl get sbxr), each kind's first.
    expect(Object.fromEntries(allKinds.map((k) => [k.kind, k.shortNames[0]]))).toEqual({
      Connection: "conn",
      Skill: "sk",
      Agent: "ag",
      AgentDeployment: "agd",
      Sandbox: "sbx",
      SandboxRun: "sbxr",
    });
    for (const kind of allKinds) {
      const crd = toCRD(kind) as { spec: { names: { categories?: string[] }; versions: Array<{ subresources?: object; additionalPrinterColumns?: Array<{ name: string }> }> } };
      expect(crd.spec.names.categories, kind.kind).toContain("agentcompute");
      const version = crd.spec.versions[0]!;
      expect(version.subresources, kind.kind).toHaveProperty("status");
      expect(version.additionalPrinterColumns?.map((c) => c.name), kind.kind).toEqual(expect.arrayContaining(["Ready", "Age"]));
    }
  });

  it("a date column only for a time in the past: kubectl renders a date as an age, and a future time as <invalid>", () => {
    // Only creationTimestamp is known to be past; expiry times are shown as the RFC 3339 time itself.
    for (const kind of allKinds) {
      const dates = kind.printerColumns.filter((c) => c.type === "date").map((c) => c.jsonPath);
      expect(dates, kind.kind).toEqual([".metadata.creationTimestamp"]);
    }
    const columns = (k: KindDefinition) => Object.fromEntries(k.printerColumns.map((c) => [c.name, c]));
    expect(columns(sandboxKind)["Expires"]).toMatchObject({ type: "string", jsonPath: ".status.expiresAt", priority: 1 });
  });
});

describe("the CRDs under GitOps", () => {
  it("are never pruned by Flux or Argo CD, nor deleted with an Argo CD Application: that would delete every resource of their kind, the operator gone with them", () => {
    for (const kind of allKinds) {
      const crd = toCRD(kind) as { metadata: { annotations?: Record<string, string> } };
      expect(crd.metadata.annotations, kind.kind).toMatchObject({
        "kustomize.toolkit.fluxcd.io/prune": "disabled",
        "argocd.argoproj.io/sync-options": "Prune=false,Delete=false",
      });
    }
  });
});
