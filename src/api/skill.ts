import { ConfigMapKeySelector, ConfigMapReference } from "./refs.js";
import { kindNames } from "./names.js";
import { MAY_CREATE, has, immutableField, mayCreate, managedSpecFields, managementPolicyRules, statusSchema, type Resource } from "./common.js";
import { readyColumns, type KindDefinition } from "./kind.js";
import { StringMap, Type, type Static } from "./schema.js";

export const SkillSpecSchema = Type.Object(
  {
    ...managedSpecFields(),
    name: Type.Optional(
      Type.String({
        description: "Name of the skill in the service (its key there). Defaults to metadata.name. Immutable.",
        minLength: 1,
        maxLength: 253,
      }),
    ),
    description: Type.Optional(Type.String({ description: "What the skill does.", maxLength: 4096 })),
    content: Type.Optional(
      Type.String({
        description:
          "The skill's instructions (e.g. SKILL.md). One of content and contentFrom is required, unless managementPolicies leaves out Create (an imported skill: its content is then not compared).",
      }),
    ),
    contentFrom: Type.Optional(
      Type.Object(
        { configMapKeyRef: ConfigMapKeySelector },
        { description: "Read the content from a ConfigMap key; a change of the ConfigMap re-syncs the skill." },
      ),
    ),
    resources: Type.Optional(
      StringMap(
        "Extra files: file name -> content, written under /workspace/skills/<name>/ on the VM. A requirements.txt installs Python packages at VM boot. At most one of resources and resourcesFrom. Left out: no extra files, or, on an imported skill (managementPolicies without Create), not compared.",
      ),
    ),
    resourcesFrom: Type.Optional(
      Type.Object(
        { configMapRef: ConfigMapReference },
        { description: "Read the extra files from a ConfigMap (each key is a file name)." },
      ),
    ),
  },
  { description: "Desired state of the skill." },
);
export type SkillSpec = Static<typeof SkillSpecSchema>;

export const SkillStatusSchema = statusSchema("Observed state of the skill.", {
  skillName: Type.Optional(Type.String({ description: "Name of the skill in the service." })),
  contentHash: Type.Optional(Type.String({ description: "The service's hash of the content and resources." })),
  createdAt: Type.Optional(Type.String({ description: "When the service created the skill.", format: "date-time" })),
  updatedAt: Type.Optional(Type.String({ description: "When the service last updated the skill.", format: "date-time" })),
});
export type SkillStatus = Static<typeof SkillStatusSchema>;
export type Skill = Resource<SkillSpec, SkillStatus>;

export const skillKind: KindDefinition = {
  ...kindNames.skill,
  singular: "skill",
  shortNames: ["sk"],
  description:
    "A Skill is a named bundle of instructions and files in the Compute Service that Sandboxes and AgentDeployments load by name.",
  spec: SkillSpecSchema,
  specValidations: [
    ...managementPolicyRules(),
    {
      rule: "!(has(self.content) && has(self.contentFrom))",
      message: "set at most one of spec.content and spec.contentFrom",
      holds: (self) => !(has(self, "content") && has(self, "contentFrom")),
    },
    {
      rule: `has(self.content) || has(self.contentFrom) || !${MAY_CREATE}`,
      message:
        "set one of spec.content and spec.contentFrom (they may be left out only when spec.managementPolicies leaves out Create, to import an existing skill)",
      reason: "FieldValueRequired",
      holds: (self) => has(self, "content") || has(self, "contentFrom") || !mayCreate(self),
    },
    {
      rule: "!(has(self.resources) && has(self.resourcesFrom))",
      message: "set at most one of spec.resources and spec.resourcesFrom",
      holds: (self) => !(has(self, "resources") && has(self, "resourcesFrom")),
    },
    immutableField("name", "it is the skill's key in the service"),
  ],
  status: SkillStatusSchema,
  printerColumns: [
    { name: "Skill", type: "string", jsonPath: ".status.skillName" },
    { name: "Hash", type: "string", jsonPath: ".status.contentHash", priority: 1 },
    ...readyColumns,
  ],
};
