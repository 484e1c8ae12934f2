// The API reference, docs/reference/<kind>.md, rendered from the CRD schemas in src/api:
// `npm run docs` writes it and `npm run docs:check` (scripts/docs.ts) compares it; the unit
// tests (test/unit/docs) check what it says.
//
// The reference is rendered from toCRD(kind): exactly the schema the API server enforces, so
// every type, default, bound and validation message in it is the one a user meets.
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join, relative } from "node:path";
import { parseAllDocuments } from "yaml";
import { API_VERSION, Annotations, CATEGORY, FINALIZER, allKinds, type KindDefinition } from "../src/api/index.js";
import { toCRD } from "../src/api/crd.js";
import { REPO_ROOT } from "./paths.js";

export const referenceDir = join(REPO_ROOT, "docs", "reference");
export const examplesDir = join(REPO_ROOT, "examples");
const HEADER = "<!-- Generated from src/api by `npm run docs`. Do not edit by hand. -->\n";

/** The subset of OpenAPI v3 (structural, as Kubernetes has it) that the CRDs use. */
export interface Schema {
  type?: string;
  description?: string;
  default?: unknown;
  enum?: unknown[];
  format?: string;
  pattern?: string;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number | boolean;
  exclusiveMaximum?: number | boolean;
  minItems?: number;
  maxItems?: number;
  minProperties?: number;
  maxProperties?: number;
  properties?: Record<string, Schema>;
  required?: string[];
  items?: Schema;
  additionalProperties?: Schema | boolean;
  "x-kubernetes-preserve-unknown-fields"?: boolean;
  "x-kubernetes-validations"?: Array<{ rule: string; message?: string; fieldPath?: string }>;
  "x-kubernetes-list-type"?: string;
  "x-kubernetes-list-map-keys"?: string[];
}

export interface Field {
  /** e.g. spec.envFrom[].secretRef.name */
  path: string;
  type: string;
  required: boolean;
  default?: string;
  description: string;
  constraints: string[];
}

export interface Rule {
  /** Where the rule is declared (e.g. spec, spec.baseURL), plus its fieldPath if any. */
  path: string;
  message: string;
  rule: string;
  /** The rule reads oldSelf: it is checked when the object is updated. */
  onUpdate: boolean;
  /** A creation rule (KindDefinition.creationValidations): checked when the object is created. */
  onCreate?: boolean;
}

export function typeOf(s: Schema): string {
  if (s["x-kubernetes-preserve-unknown-fields"] && !s.properties) return "object (free-form)";
  if (s.type === "array") return `[]${s.items ? typeOf(s.items) : "any"}`;
  if (s.type === "object" && !s.properties && typeof s.additionalProperties === "object") {
    return `map[string]${typeOf(s.additionalProperties)}`;
  }
  if (s.type === "string" && s.format) return `string (${s.format})`;
  return s.type ?? "any";
}

export function constraintsOf(s: Schema): string[] {
  const out: string[] = [];
  if (s.enum) out.push(`one of: ${s.enum.map((v) => `\`${String(v)}\``).join(", ")}`);
  if (s.minLength !== undefined && s.maxLength !== undefined) out.push(`${s.minLength}–${s.maxLength} characters`);
  else if (s.minLength !== undefined) out.push(`at least ${s.minLength} character${s.minLength === 1 ? "" : "s"}`);
  else if (s.maxLength !== undefined) out.push(`at most ${s.maxLength} characters`);
  const lower =
    typeof s.exclusiveMinimum === "number" ? `> ${s.exclusiveMinimum}` : s.minimum !== undefined ? `${s.exclusiveMinimum === true ? ">" : "≥"} ${s.minimum}` : undefined;
  const upper =
    typeof s.exclusiveMaximum === "number" ? `< ${s.exclusiveMaximum}` : s.maximum !== undefined ? `${s.exclusiveMaximum === true ? "<" : "≤"} ${s.maximum}` : undefined;
  if (lower && upper) out.push(`${lower}, ${upper}`);
  else if (lower ?? upper) out.push(lower ?? upper ?? "");
  if (s.minItems !== undefined) out.push(`at least ${s.minItems} item${s.minItems === 1 ? "" : "s"}`);
  if (s.maxItems !== undefined) out.push(`at most ${s.maxItems} items`);
  if (s.minProperties !== undefined) out.push(`at least ${s.minProperties} entries`);
  if (s.maxProperties !== undefined) out.push(`at most ${s.maxProperties} entries`);
  if (s.pattern !== undefined) out.push(`matches \`${s.pattern}\``);
  const keys = s["x-kubernetes-list-map-keys"];
  if (s["x-kubernetes-list-type"] === "map" && keys) out.push(`one entry per ${keys.map((k) => `\`${k}\``).join(", ")}`);
  if (s["x-kubernetes-list-type"] === "set") out.push("no duplicates");
  return out;
}

function formatDefault(v: unknown): string {
  return typeof v === "string" ? v : JSON.stringify(v);
}

/** Every field under `schema`, depth first in declaration order, and every CEL rule met on the way. */
export function flatten(schema: Schema, path: string): { fields: Field[]; rules: Rule[] } {
  const fields: Field[] = [];
  const rules: Rule[] = [];
  const visit = (s: Schema, at: string, required: boolean, isRoot: boolean): void => {
    if (!isRoot) {
      const field: Field = { path: at, type: typeOf(s), required, description: oneLine(s.description ?? ""), constraints: constraintsOf(s) };
      if (s.default !== undefined) field.default = formatDefault(s.default);
      fields.push(field);
    }
    for (const r of s["x-kubernetes-validations"] ?? []) {
      rules.push({ path: at + (r.fieldPath ?? ""), message: r.message ?? r.rule, rule: r.rule, onUpdate: /\boldSelf\b/.test(r.rule) });
    }
    for (const [key, child] of Object.entries(s.properties ?? {})) visit(child, `${at}.${key}`, (s.required ?? []).includes(key), false);
    if (s.type === "array" && s.items?.properties) {
      for (const [key, child] of Object.entries(s.items.properties)) visit(child, `${at}[].${key}`, (s.items.required ?? []).includes(key), false);
    }
    if (typeof s.additionalProperties === "object" && s.additionalProperties.properties) {
      const a = s.additionalProperties;
      for (const [key, child] of Object.entries(a.properties ?? {})) visit(child, `${at}.<key>.${key}`, (a.required ?? []).includes(key), false);
    }
  };
  visit(schema, path, true, true);
  return { fields, rules };
}

function oneLine(s: string): string {
  return s.replace(/\s*\n\s*/g, " ").trim();
}

/** A table cell: no line breaks, no bare pipes, and no `<name>` that Markdown would take for an HTML tag. */
export function cell(s: string): string {
  return oneLine(s)
    .split(/(`[^`]*`)/)
    .map((part, i) => (i % 2 === 1 ? part : part.replace(/</g, "&lt;").replace(/>/g, "&gt;")))
    .join("")
    .replace(/\|/g, "\\|");
}

function fieldTable(fields: Field[], withDefaults: boolean): string {
  const head = withDefaults ? "| Field | Type | Required | Default | Description |\n|---|---|---|---|---|" : "| Field | Type | Description |\n|---|---|---|";
  const rows = fields.map((f) => {
    const description = [f.description, ...f.constraints.map((c) => `*${c}*`)].filter((x) => x !== "").join(" ");
    const cols = withDefaults
      ? [`\`${f.path}\``, `\`${f.type}\``, f.required ? "yes" : "", f.default === undefined ? "" : `\`${f.default}\``, cell(description)]
      : [`\`${f.path}\``, `\`${f.type}\``, cell(description)];
    return `| ${cols.join(" | ")} |`;
  });
  return [head, ...rows].join("\n");
}

export interface Example {
  /** Path relative to the repository root, e.g. examples/sandbox.yaml */
  file: string;
  content: string;
}

/** Every file of examples/ that holds an object of this kind, verbatim (comments are half the point). */
export function examplesFor(kind: string, dir: string = examplesDir): Example[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml")
    .sort()
    .map((f) => ({ file: relative(REPO_ROOT, join(dir, f)), content: readFileSync(join(dir, f), "utf8") }))
    .filter((e) =>
      parseAllDocuments(e.content).some((d) => {
        const o = d.toJS() as { apiVersion?: string; kind?: string } | null;
        return o?.apiVersion === API_VERSION && o.kind === kind;
      }),
    );
}

/** The kinds that manage a service object (not a Connection, nor a SandboxRun, which runs steps). */
const managesObject = (kind: string): boolean => kind !== "Connection" && kind !== "SandboxRun";

const ANNOTATIONS: Array<{ key: string; kinds: (k: string) => boolean; description: string; operators?: true }> = [
  {
    key: Annotations.externalId,
    kinds: managesObject,
    description:
      "Adopt an existing service object with this id (for a Skill, its name) instead of creating one. An id that names nothing stalls the resource with reason `ExternalNotFound`. A Sandbox's VM or an AgentDeployment's deployment adopted this way is never replaced: a spec change that needs a new one stalls the resource with reason `AdoptedVMNotReplaced` (the VM still renewed) or `AdoptedDeploymentNotReplaced` until the annotation is removed.",
  },
  {
    key: Annotations.redeployAt,
    kinds: (k) => k === "AgentDeployment",
    description: "Any new value redeploys the deployment once, as `kubectl rollout restart` does for a Deployment.",
  },
  {
    key: Annotations.paused,
    kinds: managesObject,
    description:
      '`"true"`: make no change in the service for this resource (no create, update, replace or delete; a deletion waits with the finalizer kept) until the annotation goes; what changed meanwhile is applied then. Ready says `ReconcilePaused`. A paused Sandbox\'s VM is still renewed.',
  },
  {
    key: Annotations.pollInterval,
    kinds: managesObject,
    description:
      "A duration (`30s`, `5m`, `1h`; at least `1s`): observe this resource at this period instead of `--sync-period`. A bad value keeps the sync period and is reported (`InvalidPollInterval`).",
  },
  {
    key: Annotations.claimedName,
    kinds: (k) => k === "Skill",
    operators: true,
    description:
      "The skill's name in the service, claimed before the create in the same write as the finalizer (a skill carries no marker, so this is how a skill whose create answer was lost is known as this resource's own). Do not set or remove it by hand.",
  },
  {
    key: Annotations.claimedContent,
    kinds: (k) => k === "Skill",
    operators: true,
    description:
      "Beside `claimed-name`: a hash of what the create sends. A skill found under the claimed name is this resource's own only if it holds that (`NameTaken` otherwise). Do not set or remove it by hand.",
  },
  {
    key: Annotations.claimedReplacing,
    kinds: (k) => k === "Skill",
    operators: true,
    description:
      "Beside `claimed-name`, when the Skill makes its skill again (the one status names was deleted outside the operator): that skill's `createdAt`. A skill found since under the name with another creation time is this resource's own only by such a create, not by its content (`NameTaken` otherwise). Do not set or remove it by hand.",
  },
];

/** What Ready=True says, and what the finalizer waits for, by kind. */
function lifecycleOf(kind: string): { ready: string; finalizerWaitsFor: string } {
  if (kind === "Connection") {
    return { ready: "a token was obtained with the credentials", finalizerWaitsFor: "no resource of the namespace uses this Connection any more (reason `InUse` meanwhile)" };
  }
  if (kind === "SandboxRun") {
    return {
      ready: "the run has succeeded",
      finalizerWaitsFor: "its running step is stopped (it is removed too when the run ends)",
    };
  }
  return { ready: "the service object matches the spec", finalizerWaitsFor: "the service object is deleted (or orphaned, per `spec.deletionPolicy`)" };
}

export function fileNameOf(def: KindDefinition): string {
  return `${def.kind.toLowerCase()}.md`;
}

export function renderKind(def: KindDefinition, examples: Example[]): string {
  const crd = toCRD(def) as {
    spec: {
      versions: Array<{
        schema: { openAPIV3Schema: Schema & { properties: { spec: Schema; status: Schema } } };
        additionalPrinterColumns: Array<{ name: string; type: string; jsonPath: string; description?: string; priority?: number }>;
      }>;
    };
  };
  const version = crd.spec.versions[0];
  if (!version) throw new Error(`${def.kind}: the CRD has no version`);
  const { spec, status } = version.schema.openAPIV3Schema.properties;
  const specDoc = flatten(spec, "spec");
  for (const r of version.schema.openAPIV3Schema["x-kubernetes-validations"] ?? []) {
    specDoc.rules.push({ path: r.fieldPath?.slice(1) ?? "spec", message: r.message ?? r.rule, rule: r.rule, onUpdate: false, onCreate: true });
  }
  const statusDoc = flatten(status, "status");
  const lifecycle = lifecycleOf(def.kind);
  const out: string[] = [HEADER];
  out.push(`# ${def.kind}`, "");
  out.push(
    `\`apiVersion: ${API_VERSION}\` · \`kind: ${def.kind}\` · namespaced · \`kubectl get ${def.plural}\` ` +
      `(short: ${def.shortNames.map((s) => `\`${s}\``).join(", ")}; all kinds: \`kubectl get ${CATEGORY}\`)`,
    "",
  );
  out.push(cell(def.description), "");

  out.push("## Example", "");
  if (examples.length === 0) out.push("No example in examples/ yet.", "");
  for (const e of examples) {
    out.push(`From [${e.file}](../../${e.file}):`, "", "```yaml", e.content.trimEnd(), "```", "");
  }

  out.push("## Spec", "");
  if (spec.description) out.push(cell(spec.description), "");
  out.push(fieldTable(specDoc.fields, true), "");
  if (specDoc.rules.length > 0) {
    out.push("### Validation", "", "The API server refuses a change that breaks one of these rules, with this message:", "");
    for (const r of specDoc.rules) out.push(`- \`${r.path}\`${r.onUpdate ? " (on update)" : r.onCreate ? " (on creation)" : ""}: ${cell(r.message)}`);
    out.push("");
  }

  out.push("## Status", "");
  if (status.description) out.push(cell(status.description), "");
  out.push(
    "Written by the operator only, through the status subresource. `conditions` follow kstatus: " +
      `\`Ready\` (True when ${lifecycle.ready}), \`Reconciling\` (True while work is in progress), ` +
      "`Stalled` (True when it cannot progress without a change by you); each carries the generation it was computed for. " +
      "The reasons are listed under [Troubleshooting](../../README.md#troubleshooting).",
    "",
  );
  out.push(fieldTable(statusDoc.fields, false), "");

  out.push("## Printer columns", "", "What `kubectl get` shows (`-o wide` adds the columns marked wide).", "");
  out.push("| Column | Type | JSONPath | Shown |", "|---|---|---|---|");
  for (const c of version.additionalPrinterColumns) {
    out.push(`| ${c.name} | ${c.type} | \`${cell(c.jsonPath)}\` | ${c.priority ? "wide" : "always"} |`);
  }
  out.push("");

  const annotations = ANNOTATIONS.filter((a) => a.kinds(def.kind));
  out.push("## Metadata the operator reads or writes", "");
  out.push("| Key | Where | Meaning |", "|---|---|---|");
  for (const a of annotations) out.push(`| \`${a.key}\` | annotation (${a.operators ? "the operator's" : "yours"}) | ${cell(a.description)} |`);
  out.push(`| \`${FINALIZER}\` | finalizer (the operator's) | Added on first reconcile; deletion waits until ${lifecycle.finalizerWaitsFor}, then the operator removes it. |`);
  out.push("");
  return `${out.join("\n").trimEnd()}\n`;
}

export function renderIndex(): string {
  const out: string[] = [HEADER, "# API reference", "", `Group \`${API_VERSION.split("/")[0]}\`, version \`${API_VERSION.split("/")[1]}\`. All kinds are namespaced.`, ""];
  out.push("| Kind | Short names | What it is |", "|---|---|---|");
  for (const def of allKinds) {
    out.push(`| [${def.kind}](${fileNameOf(def)}) | ${def.shortNames.map((s) => `\`${s}\``).join(", ")} | ${cell(def.description)} |`);
  }
  return `${out.join("\n")}\n`;
}

/** File name -> content of everything docs/reference/ should hold. */
export function renderReference(): Map<string, string> {
  const files = new Map<string, string>([["README.md", renderIndex()]]);
  for (const def of allKinds) files.set(fileNameOf(def), renderKind(def, examplesFor(def.kind)));
  return files;
}

/** Names of the files that differ from what would be generated (missing, changed, or not generated). */
export function staleFiles(dir: string, wanted: Map<string, string>): string[] {
  const present = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith(".md")) : [];
  const stale: string[] = [];
  for (const [name, content] of wanted) {
    if (!present.includes(name) || readFileSync(join(dir, name), "utf8") !== content) stale.push(name);
  }
  for (const name of present) if (!wanted.has(name)) stale.push(`${name} (not generated)`);
  return stale;
}
