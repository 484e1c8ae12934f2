import { SecretReference } from "./refs.js";
import { MARKER_KEY, kindNames } from "./names.js";
import { ServiceMetadata, immutableField, managedSpecFields, notEmptyAtCreation, managementPolicyRules, requiredToCreate, statusSchema, type Resource } from "./common.js";
import { readyColumns, type KindDefinition } from "./kind.js";
import { FreeFormObject, Type, type Static } from "./schema.js";

// The registry's manifest (its published models.AgentManifest). Its keys keep the registry's
// spelling (input_schema, inputModes): it is a document the registry defines, passed through.
// The registry stores only these keys, so the schema has no others: an unknown key would be
// dropped by the registry and then look like drift forever.
const AgentManifestSchema = Type.Object(
  {
    name: Type.Optional(Type.String({ description: "Name of the agent in its manifest.", maxLength: 253 })),
    description: Type.Optional(Type.String({ description: "What the agent does.", maxLength: 4096 })),
    version: Type.Optional(Type.String({ description: "Version of the manifest.", maxLength: 253 })),
    url: Type.Optional(Type.String({ description: "URL the agent serves at.", maxLength: 2048 })),
    authentication: Type.Optional(FreeFormObject("How callers authenticate to the agent.")),
    capabilities: Type.Optional(FreeFormObject("Capabilities the agent declares (e.g. streaming).")),
    input_schema: Type.Optional(FreeFormObject("JSON Schema of the agent's input.")),
    output_schema: Type.Optional(FreeFormObject("JSON Schema of the agent's output.")),
    runtime: Type.Optional(FreeFormObject("Runtime settings of the agent.")),
    skills: Type.Optional(
      Type.Array(
        Type.Object({
          id: Type.Optional(Type.String({ description: "Skill id.", maxLength: 253 })),
          inputModes: Type.Optional(Type.Array(Type.String({ maxLength: 253 }), { description: "Input modes.", maxItems: 64 })),
          outputModes: Type.Optional(Type.Array(Type.String({ maxLength: 253 }), { description: "Output modes.", maxItems: 64 })),
        }),
        { description: "Skills the agent offers.", maxItems: 256 },
      ),
    ),
  },
  {
    description:
      "The agent's manifest, as the registry defines it (its keys keep the registry's spelling, e.g. input_schema). Keys outside this list are not stored by the registry.",
  },
);

export const AgentSpecSchema = Type.Object(
  {
    ...managedSpecFields(),
    // Create-only in the registry.
    orgId: Type.Optional(
      Type.String({
        description: "Organisation that owns the agent. Defaults to the Connection's orgId (leave the field out, rather than set it empty). Create-only (immutable).",
        maxLength: 253,
      }),
    ),
    name: Type.Optional(
      Type.String({
        description: "Agent name, unique in the organisation. Defaults to metadata.name. Create-only (immutable).",
        minLength: 1,
        maxLength: 253,
      }),
    ),
    author: Type.Optional(Type.String({ description: "Author of the agent. Create-only (immutable).", maxLength: 253 })),
    imagePullSecretRef: Type.Optional(
      SecretReference(
        "Secret in the same namespace with keys `registry`, `username` and `password`, used to pull a private image. Create-only (immutable): the registry reads it once.",
      ),
    ),
    // Updatable.
    image: Type.Optional(
      Type.String({
        description:
          "Container image of the agent, e.g. ghcr.io/acme/triage:1.4.2. Required, unless managementPolicies leaves out Create (an imported agent).",
        minLength: 1,
        maxLength: 4096,
      }),
    ),
    description: Type.Optional(Type.String({ description: "What the agent does.", maxLength: 4096 })),
    version: Type.Optional(Type.String({ description: "Version label of the agent.", maxLength: 253 })),
    endpoint: Type.Optional(Type.String({ description: "Endpoint the agent is reachable at, if it runs elsewhere.", maxLength: 2048 })),
    publicKey: Type.Optional(Type.String({ description: "Public key of the agent (PEM or the registry's format).", maxLength: 16384 })),
    capabilities: Type.Optional(
      Type.Array(Type.String({ maxLength: 253 }), {
        description: "Capabilities the agent offers; the registry's search matches on them.",
        maxItems: 256,
      }),
    ),
    metadata: Type.Optional(
      ServiceMetadata("Free key/value metadata stored with the agent, as a whole: keys the registry has and this map lacks are removed. Unset: the registry's metadata stays as it is (the operator only adds its marker); to remove keys set before, set it to {} rather than leave it out.", [MARKER_KEY]),
    ),
    manifest: Type.Optional(AgentManifestSchema),
  },
  { description: "Desired state of the registry agent." },
);
export type AgentSpec = Static<typeof AgentSpecSchema>;

export const AgentStatusSchema = statusSchema("Observed state of the registry agent.", {
  agentId: Type.Optional(Type.String({ description: "Id of the agent in the registry." })),
  name: Type.Optional(Type.String({ description: "Name of the agent, as the registry has it." })),
  orgId: Type.Optional(Type.String({ description: "Organisation that owns the agent, as the registry has it." })),
  image: Type.Optional(Type.String({ description: "Image of the agent, as the registry has it (an imported agent's spec may leave it out)." })),
  version: Type.Optional(Type.String({ description: "Version label of the agent, as the registry has it." })),
  state: Type.Optional(Type.String({ description: "The registry's state: registered, running, stopped, failed..." })),
  visibility: Type.Optional(Type.String({ description: "private or public (set by the registry)." })),
  allowedOrgIds: Type.Optional(
    Type.Array(Type.String(), { description: "Organisations allowed to use the agent (set by the registry).", maxItems: 1000 }),
  ),
  revision: Type.Optional(
    Type.String({
      description:
        "Hash of what runs (spec.image, version, manifest and endpoint) as last written to the registry; AgentDeployments redeploy when it changes. Other fields (description, capabilities, metadata) change the agent without a redeploy.",
    }),
  ),
  createdAt: Type.Optional(Type.String({ description: "When the registry created the agent.", format: "date-time" })),
  updatedAt: Type.Optional(Type.String({ description: "When the registry last updated the agent.", format: "date-time" })),
});
export type AgentStatus = Static<typeof AgentStatusSchema>;
export type Agent = Resource<AgentSpec, AgentStatus>;

export const agentKind: KindDefinition = {
  ...kindNames.agent,
  singular: "agent",
  shortNames: ["ag"],
  description: "An Agent is an agent in the Agent Registry: its image, capabilities, metadata and manifest.",
  spec: AgentSpecSchema,
  specValidations: [
    ...managementPolicyRules(),
    requiredToCreate("image"),
    immutableField("orgId", "the registry sets it at creation only"),
    immutableField("name", "the registry sets it at creation only"),
    immutableField("author", "the registry sets it at creation only"),
    immutableField("imagePullSecretRef", "the registry reads it at creation only"),
  ],
  creationValidations: [notEmptyAtCreation("orgId", "the Connection's orgId")],
  status: AgentStatusSchema,
  printerColumns: [
    { name: "Agent ID", type: "string", jsonPath: ".status.agentId" },
    { name: "Image", type: "string", jsonPath: ".spec.image", priority: 1 },
    { name: "State", type: "string", jsonPath: ".status.state" },
    ...readyColumns,
  ],
};
