// The description of one custom resource kind: everything crds/*.yaml and the docs are
// generated from.
import type { TSchema, ValidationRule } from "./schema.js";

export interface PrinterColumn {
  name: string;
  type: "string" | "integer" | "number" | "boolean" | "date";
  jsonPath: string;
  description?: string;
  /** 0 = always shown; 1 = only with -o wide. */
  priority?: number;
}

export interface KindDefinition {
  kind: string;
  plural: string;
  singular: string;
  shortNames: string[];
  /** One paragraph for `kubectl explain <kind>`. */
  description: string;
  spec: TSchema;
  /** CEL rules evaluated on spec (cross-field and create-only rules). */
  specValidations: ValidationRule[];
  /**
   * CEL rules on the spec checked when the object is created and not after, for a spec that is
   * immutable anyway: the API server did not ratchet validation on status writes before
   * Kubernetes 1.33 (kubernetes#129503), so a spec rule added in an upgrade refused every status
   * write of an object stored before it. Written with `spec` for the object's spec; they are
   * placed at the object's root, where status is seen, and hold while it has none: status is
   * dropped at creation, and the operator's first pass writes it.
   */
  creationValidations?: ValidationRule[];
  status: TSchema;
  printerColumns: PrinterColumn[];
}

export const readyColumns: PrinterColumn[] = [
  { name: "Ready", type: "string", jsonPath: '.status.conditions[?(@.type=="Ready")].status' },
  {
    name: "Reason",
    type: "string",
    jsonPath: '.status.conditions[?(@.type=="Ready")].reason',
    priority: 1,
  },
  { name: "Age", type: "date", jsonPath: ".metadata.creationTimestamp" },
];
