import { SecretReference } from "./refs.js";
import { kindNames } from "./names.js";
import { StringEnum, StringMap, Type, type Static } from "./schema.js";
import { WriteConnectionSecretTo, managedSpecFields, managementPolicyRules, statusSchema, type Resource } from "./common.js";
import { readyColumns, type KindDefinition } from "./kind.js";

export const SandboxSpecSchema = Type.Object(
  {
    ...managedSpecFields(),
    tier: Type.String({ description: "Compute tier of the VM, e.g. standard.", minLength: 1, maxLength: 253 }),
    skills: Type.Optional(
      Type.Array(Type.String({ maxLength: 253 }), {
        description: "Skills to load, by name. A name that is a Skill resource in this namespace waits for it to be Ready.",
        maxItems: 256,
      }),
    ),
    env: Type.Optional(StringMap("Environment variables of the VM (plain values; secrets go in envFrom).")),
    envFrom: Type.Optional(
      Type.Array(
        Type.Object({
          secretRef: SecretReference("Secret in the same namespace whose keys become environment variables."),
          prefix: Type.Optional(Type.String({ description: "Prefix added to every key.", maxLength: 253 })),
        }),
        { description: "Secrets whose data is added to env; their values never appear in spec or status.", maxItems: 32 },
      ),
    ),
    metadata: Type.Optional(
      StringMap("Free key/value metadata of the VM. The key agentcompute.dev/uid is reserved for the operator."),
    ),
    orgId: Type.Optional(Type.String({ description: "Organisation of the VM. Defaults to the Connection's orgId.", maxLength: 253 })),
    secureRuntime: Type.Optional(
      Type.String({
        description:
          "Name of the secure runtime to run the VM with (the service's values are not published, so it is passed through). Was a boolean before v1alpha1 settled it: replace `true` with the runtime's name; a stored `false` is ignored.",
        minLength: 1,
        maxLength: 253,
      }),
    ),
    ttlSeconds: Type.Optional(
      Type.Integer({ description: "Time-to-live asked for at allocation and at each renewal.", default: 3600, minimum: 1 }),
    ),
    renewBeforeSeconds: Type.Optional(
      Type.Integer({
        description: "Renew this long before the VM expires. Default: a fifth of ttlSeconds, at least 30.",
        minimum: 1,
      }),
    ),
    keepAlive: Type.Optional(
      Type.Boolean({
        description:
          "true: renew the VM for as long as this resource exists, and replace it if it disappears. false: let it expire and report Expired.",
        default: true,
      }),
    ),
    onDelete: Type.Optional(
      StringEnum(["Release", "Delete"] as const, {
        description: "How the VM is given back when this resource is deleted (with deletionPolicy Delete).",
        default: "Release",
      }),
    ),
    recycle: Type.Optional(
      Type.Boolean({ description: "With onDelete Release: let the service recycle the VM.", default: false }),
    ),
    writeConnectionSecretTo: Type.Optional(WriteConnectionSecretTo),
  },
  {
    description:
      "Desired state of the sandbox VM. A change of tier, skills, env, envFrom or secureRuntime replaces the VM (the new one first, then the old one is released).",
  },
);
export type SandboxSpec = Static<typeof SandboxSpecSchema>;

export const SandboxStatusSchema = statusSchema("Observed state of the sandbox VM.", {
  vmId: Type.Optional(Type.String({ description: "Id of the VM in the service." })),
  state: Type.Optional(Type.String({ description: "The service's state: allocated, released, expired..." })),
  tier: Type.Optional(Type.String({ description: "Tier of the VM." })),
  skillsLoaded: Type.Optional(Type.Array(Type.String(), { description: "Skills the VM loaded.", maxItems: 256 })),
  endpoint: Type.Optional(Type.String({ description: "Endpoint of the VM (also in the connection Secret)." })),
  wsURL: Type.Optional(Type.String({ description: "WebSocket URL of the VM (also in the connection Secret)." })),
  configHash: Type.Optional(Type.String({ description: "Hash of the allocation options of the current VM." })),
  allocatedAt: Type.Optional(Type.String({ description: "When the current VM was allocated.", format: "date-time" })),
  expiresAt: Type.Optional(Type.String({ description: "When the VM expires unless renewed.", format: "date-time" })),
  lastRenewedAt: Type.Optional(Type.String({ description: "When the VM was last renewed.", format: "date-time" })),
  renewals: Type.Optional(Type.Integer({ description: "Renewals of the current VM.", minimum: 0 })),
});
export type SandboxStatus = Static<typeof SandboxStatusSchema>;
export type Sandbox = Resource<SandboxSpec, SandboxStatus>;

export const sandboxKind: KindDefinition = {
  ...kindNames.sandbox,
  singular: "sandbox",
  shortNames: ["sbx"],
  description:
    "A Sandbox is an agent VM on the Compute Service, kept alive by renewing its time-to-live before it runs out.",
  spec: SandboxSpecSchema,
  specValidations: [
    ...managementPolicyRules(),
    {
      rule: "!has(self.renewBeforeSeconds) || !has(self.ttlSeconds) || self.renewBeforeSeconds < self.ttlSeconds",
      message: "spec.renewBeforeSeconds must be less than spec.ttlSeconds",
      fieldPath: ".renewBeforeSeconds",
    },
  ],
  status: SandboxStatusSchema,
  printerColumns: [
    { name: "VM ID", type: "string", jsonPath: ".status.vmId" },
    { name: "Tier", type: "string", jsonPath: ".spec.tier" },
    { name: "State", type: "string", jsonPath: ".status.state" },
    // A time in the future: a `date` column renders an age, and kubectl prints <invalid> for one
    // still to come. The RFC 3339 time itself is what a person can read (docs/design.md).
    {
      name: "Expires",
      type: "string",
      jsonPath: ".status.expiresAt",
      description: "When the VM expires unless renewed (RFC 3339, UTC).",
      priority: 1,
    },
    ...readyColumns,
  ],
};
