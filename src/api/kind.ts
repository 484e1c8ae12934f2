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
   * CEL rules checked when the object is created, for a spec that cannot change after: a rule
   * on spec is checked at every write, and the API server did not ratchet validation on status
   * writes before Kubernetes 1.33 (kubernetes#129503), so one added in an upgrade refused every
   * status write of an object stored before it that breaks it. Placed at the object's root
   * (written with self.spec, fieldPath from the root; never oldSelf) as `has(self.status) ||
   * rule`: status is dropped at creation, so they hold once the operator has written one. Until
   * then an object stored before the rule that breaks it has every write refused, the
   * operator's finalizer and shard label included (docs/install.md, Upgrading).
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
