// Deploy options: free-form on the service (SERVICE.md). The keys the Deployment record
// carries are type-checked; every other key (env included) is kept as sent. The record never
// echoes the options, so the service's only trace of them is `config_hash`, which the emulator
// computes here from the whole options object it received.
import { createHash } from "node:crypto";
import stableStringify from "safe-stable-stringify";
import { optionalString, optionalStringArray, optionalStringMap } from "./validate.js";
import type { DeployOptions, JsonObject } from "./wire.js";

/** Validates the keys the record carries (400 naming the field) and returns a copy of all. */
export function parseDeployOptions(body: JsonObject): DeployOptions {
  optionalString(body, "name");
  optionalString(body, "tier");
  optionalString(body, "endpoint_name");
  optionalStringArray(body, "skills");
  optionalStringMap(body, "metadata");
  optionalStringMap(body, "env");
  return structuredClone(body) as DeployOptions;
}


/** Hex SHA-256 of the options' canonical JSON: `config_hash` of the Deployment record. */
export function configHash(options: DeployOptions): string {
  // Keys sorted at every depth: equal options give equal text whatever their order.
  return createHash("sha256").update(stableStringify(options) ?? "null").digest("hex");
}
