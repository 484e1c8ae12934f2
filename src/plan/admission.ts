// What the API server does with a manifest's spec on apply, for the plan: nulls of fields that
// are not nullable dropped, the CRD's defaults applied (withDefaults), and the schema's checks
// (specProblems; kubectl's default, --validate=strict, refuses unknown fields too). A spec it
// would refuse is not planned: the plan would describe a change that cannot be made, in words
// about something else (a string of skills read letter by letter, a Secret "undefined").
// Of the CEL rules (x-kubernetes-validations), the spec's that have a JavaScript twin are
// checked (ruleProblems); the others (oldSelf, the nested ones) are left to the API server.
import Value from "typebox/value";
import { allKinds } from "../api/index.js";

/**
 * The spec as the API server will store it: null values of fields that are not nullable
 * dropped (a field left empty in YAML, `env:`), then the CRD's defaults.
 */
export function withDefaults(kind: string, spec: object | undefined): Record<string, unknown> {
  const def = allKinds.find((k) => k.kind === kind);
  const copy = structuredClone(spec ?? {}) as Record<string, unknown>;
  if (def === undefined) return copy;
  pruneNulls(copy, def.spec as SchemaNode);
  return Value.Default(def.spec, copy) as Record<string, unknown>;
}

/** The parts of a CRD's (structural) schema that say which fields an object has, and where a null is kept. */
interface SchemaNode {
  properties?: Record<string, SchemaNode>;
  additionalProperties?: boolean | SchemaNode;
  items?: SchemaNode;
  nullable?: boolean;
  "x-kubernetes-preserve-unknown-fields"?: boolean;
}

/**
 * Drops, at any depth, the null values of the fields the schema declares and does not make
 * nullable, as the API server does before defaulting (apiextensions-apiserver's
 * PruneNonNullableNullsWithoutDefaults; a null of a field with a default is defaulted, which
 * Value.Default does once it is gone). Fields the schema does not declare are left as they
 * are: inside an x-kubernetes-preserve-unknown-fields subtree (an Agent's manifest.input_schema,
 * an AgentDeployment's options) the API server keeps nulls, and stores them.
 */
function pruneNulls(value: unknown, schema: SchemaNode | undefined): void {
  if (schema === undefined || typeof value !== "object" || value === null) return;
  if (Array.isArray(value)) {
    for (const item of value) pruneNulls(item, schema.items);
    return;
  }
  const record = value as Record<string, unknown>;
  const other = typeof schema.additionalProperties === "object" ? schema.additionalProperties : undefined;
  for (const [key, v] of Object.entries(record)) {
    const field = schema.properties !== undefined && Object.hasOwn(schema.properties, key) ? schema.properties[key] : other;
    if (field === undefined) continue;
    if (v === null && field.nullable !== true) delete record[key];
    else pruneNulls(v, field);
  }
}

/** At most this many problems said for one spec. */
const SHOWN = 5;

/**
 * What the API server would refuse in `spec` of `kind` once stored as withDefaults stores it,
 * each as `spec.<path>: <why>`; none for a kind without a schema here.
 */
export function specProblems(kind: string, spec: object | undefined): string[] {
  const def = allKinds.find((k) => k.kind === kind);
  if (def === undefined) return [];
  const stored = withDefaults(kind, spec);
  const found: Array<{ path: string; message: string }> = [];
  unknownFields(stored, def.spec as SchemaNode, "spec", found);
  for (const e of Value.Errors(def.spec, stored)) {
    const { path, value } = located(stored, e.instancePath);
    found.push({ path: `spec${path}`, message: e.keyword === "enum" ? unsupported(value, e.params) : e.message });
  }
  // A map's value of the wrong type is said once, as the value's problem (env.A "must be
  // string"), not once more as the map's ("must not have additional properties").
  const echo = (p: { path: string; message: string }) => /additional properties/.test(p.message) && found.some((q) => q.path.startsWith(`${p.path}.`));
  const said = [...new Set(found.filter((p) => !echo(p)).map((p) => `${p.path}: ${p.message}`))];
  return said.length > SHOWN ? [...said.slice(0, SHOWN), `and ${said.length - SHOWN} more`] : said;
}

/**
 * A JSON pointer into the spec as the operator's messages write paths (`.envFrom[0].secretRef`,
 * `.env.A`), and the value there.
 */
function located(spec: unknown, pointer: string): { path: string; value: unknown } {
  let path = "";
  let value = spec;
  for (const raw of pointer.split("/").slice(1)) {
    const key = raw.replaceAll("~1", "/").replaceAll("~0", "~");
    path += Array.isArray(value) ? `[${key}]` : `.${key}`;
    value = typeof value === "object" && value !== null ? (value as Record<string, unknown>)[key] : undefined;
  }
  return { path, value };
}

/** An enum's refusal in the API server's words, with the values it takes. */
function unsupported(value: unknown, params: unknown): string {
  const allowed = (params as { allowedValues?: unknown[] } | undefined)?.allowedValues ?? [];
  return `Unsupported value: ${JSON.stringify(value)}: supported values: ${allowed.map((v) => JSON.stringify(v)).join(", ")}`;
}

/** Fields the schema does not declare, where it keeps none it does not declare. */
function unknownFields(value: unknown, schema: SchemaNode | undefined, path: string, out: Array<{ path: string; message: string }>): void {
  if (schema === undefined || typeof value !== "object" || value === null || schema["x-kubernetes-preserve-unknown-fields"] === true) return;
  if (Array.isArray(value)) {
    value.forEach((item, i) => unknownFields(item, schema.items, `${path}[${i}]`, out));
    return;
  }
  for (const [key, v] of Object.entries(value)) {
    const declared = schema.properties !== undefined && Object.hasOwn(schema.properties, key) ? schema.properties[key] : undefined;
    if (declared !== undefined) unknownFields(v, declared, `${path}.${key}`, out);
    else if (typeof schema.additionalProperties === "object") unknownFields(v, schema.additionalProperties, `${path}.${key}`, out);
    else if (schema.additionalProperties !== true && schema.properties !== undefined) out.push({ path: `${path}.${key}`, message: `unknown field "${key}"` });
  }
}

/**
 * The messages of the spec's CEL rules that `spec` of `kind`, stored as withDefaults stores it,
 * breaks: those with a JavaScript twin (ValidationRule.holds), such as requiredToCreate; for an
 * update of the object whose spec is `before`, its transition rules too; and for a new object
 * (no `before`) its kind's creation rules (held by any object with a status).
 */
export function ruleProblems(kind: string, spec: object | undefined, before: object | undefined): string[] {
  const def = allKinds.find((k) => k.kind === kind);
  if (def === undefined) return [];
  const stored = withDefaults(kind, spec);
  const old = before === undefined ? undefined : withDefaults(kind, before);
  const rules = old === undefined ? [...def.specValidations, ...(def.creationValidations ?? [])] : def.specValidations;
  return rules.filter((r) => r.holds !== undefined && !r.holds(stored, old)).map((r) => r.message);
}
