// The registry agent's manifest: published as models.AgentManifest, a closed struct. The real
// service is a Go server that decodes the body into that struct, so a key outside it is
// dropped without an error, and a key of the wrong type is a 400. The emulator does the same:
// it stores and answers only the published keys, so a client that relies on round-tripping
// extra keys fails here as it would there.
import { badRequest } from "./errors.js";
import { isObject } from "./validate.js";
import type { AgentManifest, JsonValue, ManifestSkill } from "./wire.js";

const OBJECT_KEYS = ["authentication", "capabilities", "input_schema", "output_schema", "runtime"] as const;
const STRING_KEYS = ["description", "name", "url", "version"] as const;

/** null counts as absent, as it does when Go decodes JSON into a struct. */
function stringArray(v: JsonValue, field: string): string[] {
  if (!Array.isArray(v)) throw badRequest(`${field} must be an array of strings`);
  return v.map((item, i) => {
    if (typeof item !== "string") throw badRequest(`${field}[${i}] must be a string`);
    return item;
  });
}

function skill(v: JsonValue, field: string): ManifestSkill {
  if (!isObject(v)) throw badRequest(`${field} must be an object`);
  const out: ManifestSkill = {};
  if (v["id"] !== undefined && v["id"] !== null) {
    if (typeof v["id"] !== "string") throw badRequest(`${field}.id must be a string`);
    out.id = v["id"];
  }
  for (const k of ["inputModes", "outputModes"] as const) {
    const m = v[k];
    if (m !== undefined && m !== null) out[k] = stringArray(m, `${field}.${k}`);
  }
  return out;
}

/** The published part of a manifest, type-checked; `field` names it in 400 messages. */
export function parseManifest(value: JsonValue, field = "manifest"): AgentManifest {
  if (!isObject(value)) throw badRequest(`${field} must be an object`);
  const out: AgentManifest = {};
  for (const k of OBJECT_KEYS) {
    const v = value[k];
    if (v === undefined || v === null) continue;
    if (!isObject(v)) throw badRequest(`${field}.${k} must be an object`);
    out[k] = structuredClone(v);
  }
  for (const k of STRING_KEYS) {
    const v = value[k];
    if (v === undefined || v === null) continue;
    if (typeof v !== "string") throw badRequest(`${field}.${k} must be a string`);
    out[k] = v;
  }
  const skills = value["skills"];
  if (skills !== undefined && skills !== null) {
    if (!Array.isArray(skills)) throw badRequest(`${field}.skills must be an array`);
    out.skills = skills.map((s, i) => skill(s, `${field}.skills[${i}]`));
  }
  return out;
}
