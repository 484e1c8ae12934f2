import { LocalObjectReference, StringMap, Type, type JsonObject, type Spec, type Static, type ValidationRule } from "./schema.js";
import { AGENT_REVISION_KEY, MARKER_KEY, OPTIONS_HASH_KEY, kindNames } from "./names.js";
import { ServiceMetadata, WriteConnectionSecretTo, has, managedSpecFields, managementPolicyRules, statusSchema, type Resource } from "./common.js";
import { readyColumns, type KindDefinition } from "./kind.js";

/** The spec's own fields among the deploy options: set there, not in `options` too. */
const FIRST_CLASS_OPTIONS = ["tier", "skills", "env"] as const;

/** An object whose content is left free: typed, so that a CEL rule can ask whether it is there. */
const anyObject = { type: "object", "x-kubernetes-preserve-unknown-fields": true };

/**
 * Free-form, with the keys the spec has fields for declared, so that the rules below can name
 * them (CEL sees no field that has no type): the spec's field wins over them, silently, and
 * options.metadata is never sent (the deployment's metadata is spec.metadata with the marker).
 */
const DeployOptionsSchema = Type.Unsafe<JsonObject>({
  type: "object",
  description:
    "Further deploy options passed to the service unchanged (e.g. name, endpoint_name). Not metadata (spec.metadata is the deployment's), nor tier, skills or env when the spec's own field is set.",
  "x-kubernetes-preserve-unknown-fields": true,
  properties: {
    tier: { type: "string", description: "Use spec.tier." },
    skills: { type: "array", items: { type: "string" }, description: "Use spec.skills." },
    env: { ...anyObject, description: "Use spec.env." },
    metadata: { ...anyObject, description: "Use spec.metadata." },
  },
});

const optionOf = (self: Spec, key: string): unknown => (self["options"] as Record<string, unknown> | undefined)?.[key];

/**
 * Options the spec's own fields shadow: refused, rather than dropped without a word. At
 * creation (creationValidations): deployments stored before the rules keep their writes.
 */
const deployOptionRules: ValidationRule[] = [
  {
    rule: "!has(self.spec.options) || !has(self.spec.options.metadata)",
    message: "spec.options.metadata is not sent: the deployment's metadata is spec.metadata; move it there",
    fieldPath: ".spec.options.metadata",
    reason: "FieldValueForbidden",
    holds: (self) => optionOf(self, "metadata") === undefined,
  },
  ...FIRST_CLASS_OPTIONS.map(
    (key): ValidationRule => ({
      rule: `!has(self.spec.options) || !has(self.spec.options.${key}) || !has(self.spec.${key})`,
      message: `set spec.${key} or spec.options.${key}, not both (spec.${key} is the one sent)`,
      fieldPath: `.spec.options.${key}`,
      reason: "FieldValueForbidden",
      holds: (self) => optionOf(self, key) === undefined || !has(self, key),
    }),
  ),
];

export const AgentDeploymentSpecSchema = Type.Object(
  {
    ...managedSpecFields(),
    agentRef: Type.Optional(
      LocalObjectReference(
        "An Agent in the same namespace to deploy. The deployment waits (Ready=False, reason WaitingForAgent) until that Agent has an id. Exactly one of agentRef and agentId.",
      ),
    ),
    agentId: Type.Optional(
      Type.String({
        description: "Id of a registry agent that is not managed in this cluster. Exactly one of agentRef and agentId.",
        minLength: 1,
        maxLength: 253,
      }),
    ),
    tier: Type.Optional(Type.String({ description: "Compute tier, e.g. standard.", maxLength: 253 })),
    skills: Type.Optional(
      Type.Array(Type.String({ maxLength: 253 }), { description: "Names of skills to load.", maxItems: 256 }),
    ),
    env: Type.Optional(StringMap("Environment variables of the deployment. Put secrets in a Sandbox envFrom Secret, not here.")),
    metadata: Type.Optional(
      ServiceMetadata("Free key/value metadata of the deployment.", [MARKER_KEY, OPTIONS_HASH_KEY, AGENT_REVISION_KEY]),
    ),
    options: Type.Optional(DeployOptionsSchema),
    suspend: Type.Optional(
      Type.Boolean({ description: "true stops the deployment; false starts it again (redeploy).", default: false }),
    ),
    writeConnectionSecretTo: Type.Optional(WriteConnectionSecretTo),
  },
  {
    description:
      "Desired state of the deployment. A change of tier, skills, env, metadata or options replaces the deployment (its endpoint may change).",
  },
);
export type AgentDeploymentSpec = Static<typeof AgentDeploymentSpecSchema>;

export const AgentDeploymentStatusSchema = statusSchema("Observed state of the deployment.", {
  deploymentId: Type.Optional(Type.String({ description: "Id of the deployment in the service." })),
  agentId: Type.Optional(Type.String({ description: "Id of the registry agent it runs." })),
  agentRevision: Type.Optional(Type.String({ description: "The Agent's status.revision this deployment runs." })),
  state: Type.Optional(Type.String({ description: "The service's state: running, stopped..." })),
  endpoint: Type.Optional(Type.String({ description: "Endpoint of the deployment (also in the connection Secret)." })),
  endpointName: Type.Optional(Type.String({ description: "Endpoint name of the deployment." })),
  tier: Type.Optional(Type.String({ description: "Tier it runs on." })),
  optionsHash: Type.Optional(
    Type.String({
      description:
        "Hash of the deploy options this operator applied. The service does not echo options back, so a change of the spec is seen here, not in the deployment record.",
    }),
  ),
  configHash: Type.Optional(
    Type.String({
      description:
        "The service's config_hash of the deployment as the operator last left it. A different config_hash in the service means it was reconfigured outside the operator: the deployment is replaced to match the spec.",
    }),
  ),
  redeployAt: Type.Optional(
    Type.String({ description: "The last agentcompute.dev/redeploy-at annotation value acted upon." }),
  ),
  lastRedeployedAt: Type.Optional(Type.String({ description: "When it was last redeployed.", format: "date-time" })),
});
export type AgentDeploymentStatus = Static<typeof AgentDeploymentStatusSchema>;
export type AgentDeployment = Resource<AgentDeploymentSpec, AgentDeploymentStatus>;

export const agentDeploymentKind: KindDefinition = {
  ...kindNames.agentDeployment,
  singular: "agentdeployment",
  shortNames: ["agd"],
  description:
    "An AgentDeployment runs a registry agent on the Compute Service. Its token and endpoint are written to a Secret owned by the resource.",
  spec: AgentDeploymentSpecSchema,
  specValidations: [
    ...managementPolicyRules(),
    { rule: "has(self.agentRef) != has(self.agentId)", message: "set exactly one of spec.agentRef and spec.agentId", holds: (self) => has(self, "agentRef") !== has(self, "agentId") },
  ],
  creationValidations: deployOptionRules,
  status: AgentDeploymentStatusSchema,
  printerColumns: [
    { name: "Deployment ID", type: "string", jsonPath: ".status.deploymentId" },
    { name: "State", type: "string", jsonPath: ".status.state" },
    { name: "Endpoint", type: "string", jsonPath: ".status.endpoint", priority: 1 },
    ...readyColumns,
  ],
};
