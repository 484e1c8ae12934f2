// Turns a KindDefinition into a CustomResourceDefinition object.
import { CATEGORY, GROUP, VERSION } from "./common.js";
import type { KindDefinition } from "./kind.js";
import type { ValidationRule } from "./schema.js";

type Json = { [key: string]: unknown };

/** TypeBox keeps its bookkeeping in symbol keys and `~` keys; the CRD wants plain JSON Schema. */
function plainSchema(schema: unknown): unknown {
  return JSON.parse(JSON.stringify(schema, (key, value: unknown) => (key.startsWith("~") ? undefined : value)));
}

/** A rule as the CRD holds it: without its JavaScript twin, which is the plan's. */
function inCRD({ holds: _twin, ...r }: ValidationRule): ValidationRule {
  return r;
}

/** A creation rule at the object's root, where it holds once there is a status. */
function atCreation(r: ValidationRule): ValidationRule {
  return { ...inCRD(r), rule: `has(self.status) || (${r.rule})` };
}

export function toCRD(def: KindDefinition): Json {
  const spec = plainSchema(def.spec) as Json;
  if (def.specValidations.length > 0) spec["x-kubernetes-validations"] = def.specValidations.map(inCRD);
  const creation = (def.creationValidations ?? []).map(atCreation);
  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: {
      name: `${def.plural}.${GROUP}`,
      labels: { "app.kubernetes.io/name": "agent-operator", "app.kubernetes.io/part-of": "agent-operator" },
      // Deleting a CRD deletes every resource of its kind: with the operator gone in the same
      // sweep, each then hangs on its finalizer and its service object is left behind. GitOps
      // tools that prune what git drops (or delete an app's objects with the app) leave these
      // alone, as Helm leaves its crds/; they go only when deleted by hand.
      annotations: { "kustomize.toolkit.fluxcd.io/prune": "disabled", "argocd.argoproj.io/sync-options": "Prune=false,Delete=false" },
    },
    spec: {
      group: GROUP,
      scope: "Namespaced",
      names: {
        kind: def.kind,
        listKind: `${def.kind}List`,
        plural: def.plural,
        singular: def.singular,
        shortNames: def.shortNames,
        categories: [CATEGORY],
      },
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          subresources: { status: {} },
          additionalPrinterColumns: def.printerColumns,
          schema: {
            openAPIV3Schema: {
              type: "object",
              description: def.description,
              ...(creation.length > 0 && { "x-kubernetes-validations": creation }),
              required: ["spec"],
              properties: {
                apiVersion: { type: "string", description: "APIVersion of this object: agentcompute.dev/v1alpha1." },
                kind: { type: "string", description: `Kind of this object: ${def.kind}.` },
                metadata: { type: "object" },
                spec,
                status: plainSchema(def.status),
              },
            },
          },
        },
      ],
    },
  };
}
