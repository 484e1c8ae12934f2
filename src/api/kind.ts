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
