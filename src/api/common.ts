// What every kind of agentcompute.dev shares: the API group, object metadata, kstatus
// conditions, the connection reference, the deletion policy, and the annotations the
// operator understands.
import type { ObjectMeta as WireObjectMeta } from "../runtime/kube-client.js";
import { DEFAULT_CONNECTION } from "./names.js";
import { SecretReference } from "./refs.js";
import { LocalObjectReference, StringEnum, StringMap, Type, type Spec, type Static, type TSchema, type ValidationRule } from "./schema.js";

export {
  API_VERSION,
  Annotations,
  CATEGORY,
  ConditionType,
  DEFAULT_CONNECTION,
  FINALIZER,
  GROUP,
  MARKER_KEY,
  VERSION,
  kindNames,
  type KindNames,
} from "./names.js";

/**
 * metadata of a stored agentcompute.dev object: the wire shape (declared once, in
 * src/runtime/kube-client.ts) with the fields the API server always sets made required.
 */
export type ObjectMeta = WireObjectMeta & Required<Pick<WireObjectMeta, "name" | "namespace" | "uid">>;
export type { OwnerReference } from "../runtime/kube-client.js";

// --- kstatus conditions -------------------------------------------------------------------

export const ConditionSchema = Type.Object(
  {
    type: Type.String({ description: "Ready, Reconciling or Stalled (kstatus), or a kind-specific type.", maxLength: 316 }),
    status: StringEnum(["True", "False", "Unknown"] as const, { description: "Status of the condition." }),
    reason: Type.Optional(Type.String({ description: "CamelCase reason, stable for tools to match on.", maxLength: 1024 })),
    message: Type.Optional(Type.String({ description: "Human-readable explanation.", maxLength: 32768 })),
    observedGeneration: Type.Optional(
      Type.Integer({ description: "The metadata.generation the condition was computed for.", minimum: 0 }),
    ),
    lastTransitionTime: Type.String({
      description: "When the condition last changed status.",
      format: "date-time",
    }),
  },
  { description: "A kstatus condition (what Flux, Argo CD and kubectl wait read)." },
);
export type Condition = Static<typeof ConditionSchema>;

/** Status fields every kind has. Kind-specific fields are added next to them. */
export function statusSchema<P extends Record<string, TSchema>>(description: string, properties: P) {
  return Type.Object(
    {
      observedGeneration: Type.Optional(
        Type.Integer({ description: "The metadata.generation the status was last computed for.", minimum: 0 }),
      ),
      conditions: Type.Optional(
        Type.Array(ConditionSchema, {
          description: "Ready, Reconciling and Stalled, following kstatus.",
          "x-kubernetes-list-type": "map",
          "x-kubernetes-list-map-keys": ["type"],
          maxItems: 16,
        }),
      ),
      ...properties,
    },
    { description },
  );
}

// --- spec fields every managed kind has ----------------------------------------------------

export const DeletionPolicy = StringEnum(["Delete", "Orphan"] as const, {
  description:
    "What happens to the service object when this resource is deleted: Delete removes it from the service, Orphan leaves it there (a Sandbox's VM so left is renewed by no one, and runs out within its TTL).",
  default: "Delete",
});

export const ConnectionRef = Type.Object(
  {
    name: Type.String({
      description: "Name of a Connection in the same namespace.",
      default: DEFAULT_CONNECTION,
      minLength: 1,
      maxLength: 253,
    }),
  },
  {
    description:
      'The Connection (service endpoint and credentials) to use. Defaults to the Connection named "default" in the same namespace; a Connection of another namespace can never be used.',
    default: { name: DEFAULT_CONNECTION },
  },
);

export const ManagementPolicies = Type.Array(
  StringEnum(["*", "Observe", "Create", "Update", "Delete", "LateInitialize"] as const, {
    description: "One thing the operator may do with the service object.",
  }),
  {
    description:
      'What the operator may do with the service object (Crossplane\'s management policies). "*" (the default) is all of them. [Observe] with the annotation agentcompute.dev/external-id imports an existing object read-only: its fields are reported in status and nothing is ever written to it. Without Create a missing object is reported, not created; without Update drift is reported (condition Drifted) and not put back; without Delete, deleting the resource leaves the object in the service, as deletionPolicy: Orphan does. Every list names Observe. LateInitialize is accepted and changes nothing: no field is late-initialized.',
    default: ["*"],
    minItems: 1,
    maxItems: 6,
    "x-kubernetes-list-type": "set",
  },
);

export function managedSpecFields() {
  return {
    connectionRef: Type.Optional(ConnectionRef),
    deletionPolicy: Type.Optional(DeletionPolicy),
    managementPolicies: Type.Optional(ManagementPolicies),
  };
}

/** CEL: true when the policies let the operator create the service object. */
export const MAY_CREATE = "(!has(self.managementPolicies) || '*' in self.managementPolicies || 'Create' in self.managementPolicies)";

/** The spec's managementPolicies, as CEL's has() and `in` read them (undefined: not set). */
const policiesOf = (self: Spec): unknown[] | undefined => (Array.isArray(self.managementPolicies) ? self.managementPolicies : undefined);

/** MAY_CREATE in JavaScript. */
export const mayCreate = (self: Spec): boolean => {
  const p = policiesOf(self);
  return p === undefined || p.includes("*") || p.includes("Create");
};

/** CEL's has(self.<field>): the field is set (the API server drops the nulls first). */
export const has = (self: Spec, field: string): boolean => self[field] !== undefined;

/**
 * A creation rule (KindDefinition.creationValidations) refusing an empty `path` (an optional
 * string under spec, e.g. "orgId"): an empty value (a template's) is not the default its
 * absence gives. At creation only: objects stored before the rule keep their writes.
 */
export function notEmptyAtCreation(path: string, what: string): ValidationRule {
  const at = `self.spec.${path}`;
  const parents = path.split(".").map((_, i, parts) => `has(self.spec.${parts.slice(0, i + 1).join(".")})`);
  const value = (spec: Spec): unknown => path.split(".").reduce<unknown>((o, key) => (o as Record<string, unknown> | undefined)?.[key], spec);
  return {
    rule: `!(${parents.join(" && ")}) || ${at} != ''`,
    message: `spec.${path} must not be empty: leave it out for ${what}`,
    fieldPath: `.spec.${path}`,
    holds: (spec) => value(spec) !== "",
  };
}

/**
 * notEmptyAtCreation's rule for updates (a transition rule of the spec: the API server runs it
 * on updates only): `field` (an optional string directly under spec) is not made empty. An
 * object stored empty before the creation rule keeps its writes.
 */
export function notMadeEmpty(field: string, what: string): ValidationRule {
  return {
    rule: `!has(self.${field}) || self.${field} != '' || (has(oldSelf.${field}) && oldSelf.${field} == '')`,
    message: `spec.${field} must not be empty: leave it out for ${what}`,
    fieldPath: `.${field}`,
    holds: (spec, old) => spec[field] !== "" || old === undefined || old[field] === "",
  };
}

/** The rules every managed kind's spec carries for managementPolicies and deletionPolicy. */
export function managementPolicyRules(): ValidationRule[] {
  return [
    {
      rule: "!has(self.managementPolicies) || !('*' in self.managementPolicies) || size(self.managementPolicies) == 1",
      message: 'spec.managementPolicies: "*" means all of them and stands alone; list either "*" or the ones you want',
      fieldPath: ".managementPolicies",
      holds: (self) => {
        const p = policiesOf(self);
        return p === undefined || !p.includes("*") || p.length === 1;
      },
    },
    {
      rule: "!has(self.managementPolicies) || '*' in self.managementPolicies || 'Observe' in self.managementPolicies",
      message: "spec.managementPolicies must include Observe: the operator cannot create, update or delete what it does not read",
      fieldPath: ".managementPolicies",
      holds: (self) => {
        const p = policiesOf(self);
        return p === undefined || p.includes("*") || p.includes("Observe");
      },
    },
    {
      rule: "!has(self.deletionPolicy) || self.deletionPolicy != 'Orphan' || !has(self.managementPolicies) || !('Delete' in self.managementPolicies)",
      message:
        "spec.deletionPolicy: Orphan contradicts spec.managementPolicies listing Delete; remove Delete from the policies (which then orphan on their own), or set deletionPolicy: Delete",
      fieldPath: ".deletionPolicy",
      holds: (self) => self.deletionPolicy !== "Orphan" || !(policiesOf(self)?.includes("Delete") ?? false),
    },
  ];
}

/**
 * A field the service needs to create the object, made optional for a resource that only
 * imports one (managementPolicies without Create), as Crossplane's generated CRDs do.
 */
export function requiredToCreate(field: string): ValidationRule {
  return {
    rule: `has(self.${field}) || !${MAY_CREATE}`,
    message: `spec.${field} is required (unless spec.managementPolicies leaves out Create, to import an existing object)`,
    fieldPath: `.${field}`,
    reason: "FieldValueRequired",
    holds: (self) => has(self, field) || !mayCreate(self),
  };
}

/** `envFrom`: Secrets whose keys become environment variables (a Sandbox's, a SandboxRun's). */
export function EnvFromSecrets(secretRefDescription: string, description: string) {
  return Type.Array(
    Type.Object({
      secretRef: SecretReference(secretRefDescription),
      prefix: Type.Optional(Type.String({ description: "Prefix added to every key.", maxLength: 253 })),
    }),
    { description, maxItems: 32 },
  );
}

export const WriteConnectionSecretTo = LocalObjectReference(
  "Secret (in the same namespace, owned by this resource) that receives the credentials and endpoints of the service object. Defaults to <metadata.name>-agentcompute (the same for a Sandbox and an AgentDeployment of one name: give one of them another). The operator keeps it: deleted or edited by someone else it is written again at once, and when this name changes the Secret of the old name is deleted (as is any other Secret of type agentcompute.dev/connection this resource controls, e.g. a copy that kept its ownerReferences). An AgentDeployment's is deleted while it has no deployment (the one it had deleted, to be replaced or outside the operator, and no new one deployed yet), and a Sandbox's while its VM is gone and no replacement is allocated yet; each is written again when one runs.",
);

/** A rule that makes an optional spec field create-only, reported on that field. */
export function immutableField(field: string, why: string): ValidationRule {
  return {
    rule: `has(self.${field}) == has(oldSelf.${field}) && (!has(self.${field}) || self.${field} == oldSelf.${field})`,
    message: `spec.${field} is immutable (${why}); delete and recreate the resource to change it`,
    fieldPath: `.${field}`,
    reason: "FieldValueForbidden",
  };
}

/** The shape every agentcompute.dev object has, given its spec and status types. */
export interface Resource<Spec, Status> {
  apiVersion: string;
  kind: string;
  metadata: ObjectMeta;
  spec: Spec;
  status?: Status;
}

export type ManagedStatusBase = {
  observedGeneration?: number;
  conditions?: Condition[];
};

/**
 * A service object's free metadata map, in which the operator keeps `reserved` keys of its own
 * (the marker it finds the object by, a hash): the API server refuses a spec that sets one,
 * since the operator's value would silently win.
 */
export function ServiceMetadata(description: string, reserved: readonly string[]) {
  const keys = reserved.length === 1 ? `the key ${reserved[0]} is` : `the keys ${reserved.slice(0, -1).join(", ")} and ${reserved.at(-1)} are`;
  const them = reserved.length === 1 ? "it" : "them";
  return StringMap(`${description} ${keys[0]!.toUpperCase()}${keys.slice(1)} the operator's.`, {
    "x-kubernetes-validations": [
      {
        rule: reserved.map((k) => `!('${k}' in self)`).join(" && "),
        message: `${keys} the operator's (it marks the service object with ${them}): remove ${them}`,
      },
    ],
  });
}
