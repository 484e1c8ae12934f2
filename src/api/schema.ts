// Building blocks for the CRD schemas. The schemas are written with TypeBox so that ONE
// definition gives both the static TypeScript type (Static<typeof X>) and the OpenAPI v3
// schema that goes into crds/*.yaml. Kubernetes wants *structural* schemas: every node has a
// type, no anyOf/patternProperties at the top of a node, maps are `additionalProperties`.
// The helpers below produce exactly that shape; plain TypeBox Record/Union would not.
import Type, { type Static, type TSchema } from "typebox";

export { Type };
export type { Static, TSchema };

/** A CEL rule as the API server evaluates it (x-kubernetes-validations). */
export interface ValidationRule {
  rule: string;
  message: string;
  /** Optional field path the error is reported on, e.g. ".orgId". */
  fieldPath?: string;
  reason?: "FieldValueInvalid" | "FieldValueForbidden" | "FieldValueRequired" | "FieldValueDuplicate";
  /**
   * The same rule in JavaScript, over the spec as stored (defaults applied), and for a rule
   * that reads oldSelf (a transition rule, run on updates only) the stored spec before:
   * `plan` checks a manifest with it, having no CEL engine. Written next to the rule, for the
   * rules that are a line of JavaScript; not in the CRD.
   */
  holds?: (self: Spec, oldSelf?: Spec) => boolean;
}

/** A spec as a rule's JavaScript twin reads it. */
export type Spec = Record<string, unknown>;

/** A map of string to string: labels-like free maps (env, metadata). */
export function StringMap(description: string, extra: { maxProperties?: number; "x-kubernetes-validations"?: ValidationRule[] } = {}) {
  return Type.Unsafe<Record<string, string>>({
    type: "object",
    description,
    additionalProperties: { type: "string" },
    ...extra,
  });
}

/** Free-form JSON kept as the user wrote it (the service's manifest, pass-through options). */
export function FreeFormObject(description: string) {
  return Type.Unsafe<JsonObject>({
    type: "object",
    description,
    "x-kubernetes-preserve-unknown-fields": true,
  });
}

/** A closed set of strings (Kubernetes `enum`), typed as the union of its members. */
export function StringEnum<const T extends readonly string[]>(
  values: T,
  options: { description: string; default?: T[number] },
) {
  return Type.Unsafe<T[number]>({ type: "string", enum: [...values], ...options });
}

/** Reference to an object of another kind in the same namespace. */
export function LocalObjectReference(description: string) {
  return Type.Object(
    {
      name: Type.String({
        description: "Name of the referenced object, in the same namespace.",
        minLength: 1,
        maxLength: 253,
      }),
    },
    { description },
  );
}

export type JsonObject = { [key: string]: JsonValue };
export type JsonValue = string | number | boolean | null | JsonValue[] | JsonObject;
