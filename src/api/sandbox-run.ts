// SandboxRun: work run to completion in a sandbox VM, as a Kubernetes Job runs Pods. Not a
// managed object (nothing of it lives in the service but the commands it runs): the run
// executes its steps in order in a Sandbox's VM (or a VM allocated for it from a template) and
// reports each step's exit code and output. The spec is immutable once created, as a Job's is.
import { RunPhase, kindNames } from "./names.js";
import { StringEnum, StringMap, Type, type Static, type TSchema, type ValidationRule } from "./schema.js";
import { EnvFromSecrets, notEmptyAtCreation, statusSchema, type Resource } from "./common.js";
import { readyColumns, type KindDefinition } from "./kind.js";
import { SandboxSpecSchema } from "./sandbox.js";

/** Languages a code step can be written in, and the interpreter that runs it in the VM. */
export const RUN_LANGUAGES = ["python", "javascript"] as const;
export type RunLanguage = (typeof RUN_LANGUAGES)[number];

export const MAX_RUN_STEPS = 16;
const MAX_SCRIPT = 65536;

const KeySelector = (what: string, where: string) =>
  Type.Object(
    {
      name: Type.String({ description: `Name of the ${what}, in the same namespace.`, minLength: 1, maxLength: 253 }),
      key: Type.String({ description: `Key in the ${what}'s ${where}.`, minLength: 1, maxLength: 253 }),
    },
    { description: `A key of a ${what} in the same namespace.` },
  );

export const RunStepSchema = Type.Object(
  {
    name: Type.String({
      description: "Name of the step, unique in the run (a DNS label): its key in status and in the output ConfigMap.",
      minLength: 1,
      maxLength: 63,
      pattern: "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    }),
    command: Type.Optional(
      Type.String({ description: "A shell command (/bin/sh -c), run in /workspace. Set command, or language and code.", minLength: 1, maxLength: MAX_SCRIPT }),
    ),
    language: Type.Optional(StringEnum(RUN_LANGUAGES, { description: "Language of code: python (python3) or javascript (node)." })),
    code: Type.Optional(Type.String({ description: "Source code run by the language's interpreter, in /workspace.", minLength: 1, maxLength: MAX_SCRIPT })),
  },
  { description: "One step: a shell command, or code in a language. A step that exits non-zero fails the attempt." },
);
export type RunStep = Static<typeof RunStepSchema>;

export const RunFileSchema = Type.Object(
  {
    path: Type.String({
      description: "Where the file is written in the VM: a path under /workspace (absolute, or relative to it).",
      minLength: 1,
      maxLength: 1024,
    }),
    configMapKeyRef: Type.Optional(KeySelector("ConfigMap", "data, or binaryData (a value that is not UTF-8), written as its bytes")),
    secretKeyRef: Type.Optional(KeySelector("Secret", "data")),
  },
  { description: "A file uploaded before the first step of every attempt, from one key of a ConfigMap or a Secret." },
);
export type RunFile = Static<typeof RunFileSchema>;

/** An optional field of `schema` with another description (a Sandbox's field, as a run's own VM takes it). */
function describedAs<T extends TSchema>(schema: T, description: string) {
  return Type.Optional({ ...schema, description });
}

/**
 * A Sandbox's spec fields, described as a run takes them: its spec is immutable, its VM is its
 * own and ends with it; what a Sandbox's field says of changes, imports and Secrets does not hold.
 */
const sandboxFields = SandboxSpecSchema.properties;
const templateFields = {
  ...sandboxFields,
  managementPolicies: describedAs(sandboxFields.managementPolicies, "Refused: a run's own VM is created, renewed and given back by the run (for a VM under management policies, make it a Sandbox and name it in spec.sandboxRef)."),
  deletionPolicy: describedAs(sandboxFields.deletionPolicy, "Only Delete (the default): a run's own VM is given back when the run ends or is deleted, as onDelete says."),
  skills: describedAs(sandboxFields.skills, "Skills to load, by name. A name that is a Skill resource in this namespace waits for it to be Ready."),
  metadata: describedAs(sandboxFields.metadata, "Free key/value metadata of the VM, given at allocation. The keys agentcompute.dev/uid, agentcompute.dev/config-hash and agentcompute.dev/secrets-hash are the operator's."),
  ttlSeconds: describedAs(
    sandboxFields.ttlSeconds,
    "Time-to-live asked for at allocation (activeDeadlineSeconds + 300 instead, if that is longer) and at each renewal. At least 2. A TTL the service refuses at a renewal is replaced by the one the VM had, or the pool's maximum.",
  ),
  keepAlive: describedAs(sandboxFields.keepAlive, "true: renew the VM for as long as the run runs. false: never renew it, so a run that outlasts the TTL loses its VM."),
  onDelete: describedAs(sandboxFields.onDelete, "How the VM is given back when the run ends or is deleted."),
  writeConnectionSecretTo: describedAs(sandboxFields.writeConnectionSecretTo, "Refused: a run's own VM has no connection Secret, its steps reach the VM through the operator (for a VM others connect to, make it a Sandbox and name it in spec.sandboxRef)."),
};

export const SandboxRunSpecSchema = Type.Object(
  {
    sandboxRef: Type.Optional(
      Type.Object(
        { name: Type.String({ description: "Name of a Sandbox in the same namespace.", minLength: 1, maxLength: 253 }) },
        { description: "The Sandbox whose VM runs the steps; the run waits until it is Ready. Set sandboxRef or sandboxTemplate." },
      ),
    ),
    sandboxTemplate: Type.Optional(
      Type.Object(templateFields, {
        description:
          "A Sandbox spec: a VM is allocated for this run and released when it ends. Set sandboxRef or sandboxTemplate. The VM is asked for ttlSeconds (3600 unless set), or activeDeadlineSeconds + 300 if that is longer (and ttlSeconds again if the service refuses that), and renewed for ttlSeconds, renewBeforeSeconds before it runs out, for as long as the run runs (unless keepAlive is false). The VM is the run's: managementPolicies, deletionPolicy Orphan and writeConnectionSecretTo are refused (use a Sandbox and sandboxRef for those).",
      }),
    ),
    steps: Type.Array(RunStepSchema, {
      description: "The steps, run one after the other; the run stops at the first that fails.",
      minItems: 1,
      maxItems: MAX_RUN_STEPS,
      "x-kubernetes-list-type": "map",
      "x-kubernetes-list-map-keys": ["name"],
    }),
    env: Type.Optional(StringMap("Environment variables of every step (plain values; secrets go in envFrom).", { maxProperties: 128 })),
    envFrom: Type.Optional(
      EnvFromSecrets(
        "Secret in the same namespace whose keys become environment variables of every step.",
        "Secrets whose data is added to env; their values never appear in status, Events or the output ConfigMap's metadata.",
      ),
    ),
    files: Type.Optional(
      Type.Array(RunFileSchema, { description: "Files uploaded to the VM before the first step of every attempt.", maxItems: 32 }),
    ),
    backoffLimit: Type.Optional(
      Type.Integer({ description: "How many times the whole run is tried again after a failed attempt (as a Job's).", default: 0, minimum: 0, maximum: 100 }),
    ),
    activeDeadlineSeconds: Type.Optional(
      Type.Integer({
        description: "The run fails with reason DeadlineExceeded (its running step killed) once it has been running this long, whatever attempt it is at.",
        minimum: 1,
      }),
    ),
    ttlSecondsAfterFinished: Type.Optional(
      Type.Integer({ description: "The run (and its output ConfigMap) is deleted this long after it succeeded or failed.", minimum: 0 }),
    ),
  },
  { description: "What to run and where. Immutable once created, as a Job's spec." },
);
export type SandboxRunSpec = Static<typeof SandboxRunSpecSchema>;

export const RunStepStatusSchema = Type.Object(
  {
    name: Type.String({ description: "The step's name." }),
    commandId: Type.Optional(Type.String({ description: "Id of the step's command in the VM (how a restarted operator follows it). None when the VM named no id as it took the command: the step is followed by its files in the VM (its heartbeat and exit code) and stopped through them." })),
    startedAt: Type.Optional(Type.String({ description: "When the step was started.", format: "date-time" })),
    finishedAt: Type.Optional(Type.String({ description: "When the step was seen to end.", format: "date-time" })),
    exitCode: Type.Optional(Type.Integer({ description: "The step's exit code. None for a step that ended without one: its command lost by the VM, or the step not run because its directory in the VM (/workspace/.agent-operator/runs/...) could not be created (the run's condition says which)." })),
    output: Type.Optional(Type.String({ description: "The last few KiB of the step's output (stdout and stderr); all of it is in the output ConfigMap." })),
  },
  { description: "A step of the current attempt." },
);
export type RunStepStatus = Static<typeof RunStepStatusSchema>;

export const SandboxRunStatusSchema = statusSchema("Where the run stands: phase, attempts, and each step of the current attempt.", {
  phase: Type.Optional(
    StringEnum([RunPhase.Pending, RunPhase.Running, RunPhase.Succeeded, RunPhase.Failed] as const, {
      description: "Pending (waiting for its Sandbox), Running, Succeeded or Failed.",
    }),
  ),
  startTime: Type.Optional(Type.String({ description: "When the operator first took the run up, waiting for its Sandbox included (as a Job's); activeDeadlineSeconds counts from it.", format: "date-time" })),
  completionTime: Type.Optional(Type.String({ description: "When the run succeeded or failed.", format: "date-time" })),
  attempts: Type.Optional(Type.Integer({ description: "Attempts started (1 + retries).", minimum: 0 })),
  vmId: Type.Optional(Type.String({ description: "The VM the current attempt runs in." })),
  vmReleased: Type.Optional(Type.Boolean({ description: "With sandboxTemplate: the run's VM was given back." })),
  steps: Type.Optional(Type.Array(RunStepStatusSchema, { description: "The steps of the current attempt, in order, as far as it got.", maxItems: 16 })),
  lastFailedAttempt: Type.Optional(
    Type.Object(
      {
        attempt: Type.Integer({ description: "The attempt's number.", minimum: 1 }),
        reason: Type.String({ description: "Why it failed: StepFailed, VMLost, ..." }),
        message: Type.String({ description: "What failed, as the Retrying Event said." }),
        step: Type.Optional(
          Type.Object(
            {
              ...RunStepStatusSchema.properties,
              output: Type.Optional(Type.String({ description: "The last few KiB of its output (stdout and stderr); the output ConfigMap holds the next attempt's." })),
            },
            { description: "The step it failed at, as it ended (none when its VM was lost between steps)." },
          ),
        ),
      },
      {
        description:
          "The attempt that failed last, when another was started after it (spec.backoffLimit): its failing step as it ended (exit code, the last few KiB of its output). The next attempt's steps replace status.steps and its output the ConfigMap's.",
      },
    ),
  ),
  outputConfigMap: Type.Optional(
    Type.String({
      description:
        "The ConfigMap (owned by the run) with each step's whole output, one key per step: <run>-output, or <run>-output-<first 8 characters of the run's uid> when a ConfigMap that is not the run's has the first name.",
    }),
  ),
});
export type SandboxRunStatus = Static<typeof SandboxRunStatusSchema>;
export type SandboxRun = Resource<SandboxRunSpec, SandboxRunStatus>;

/**
 * The template is a Sandbox's spec, but the VM is the run's: allocated for it, renewed while it
 * runs and given back when it ends. The fields that say how a Sandbox's VM is kept beyond that
 * (what the operator may do to it, whether it outlives its resource, a connection Secret for
 * others to reach it) have no meaning there. They are refused, each with its fix, rather than
 * ignored: a run would otherwise do the opposite of what its spec says. Checked at creation
 * (creationValidations: the spec is immutable), so that runs stored before these rules keep
 * their status writes.
 */
const ifTemplate = (field: string, rule: string) => `!has(self.spec.sandboxTemplate) || !has(self.spec.sandboxTemplate.${field}) || ${rule}`;
const templateRules: ValidationRule[] = [
  notEmptyAtCreation("sandboxTemplate.orgId", "the Connection's orgId"),
  {
    rule: ifTemplate("renewBeforeSeconds", "!has(self.spec.sandboxTemplate.ttlSeconds) || self.spec.sandboxTemplate.renewBeforeSeconds < self.spec.sandboxTemplate.ttlSeconds"),
    message: "spec.sandboxTemplate.renewBeforeSeconds must be less than spec.sandboxTemplate.ttlSeconds",
    fieldPath: ".spec.sandboxTemplate.renewBeforeSeconds",
  },
  {
    rule: ifTemplate("managementPolicies", "self.spec.sandboxTemplate.managementPolicies == ['*']"),
    message:
      "spec.sandboxTemplate.managementPolicies: a run's own VM is created, renewed and given back by the run; remove the field (to run in a VM under management policies, make it a Sandbox and name it in spec.sandboxRef)",
    fieldPath: ".spec.sandboxTemplate.managementPolicies",
  },
  {
    rule: ifTemplate("deletionPolicy", "self.spec.sandboxTemplate.deletionPolicy == 'Delete'"),
    message:
      "spec.sandboxTemplate.deletionPolicy: a run's own VM is given back when the run ends (spec.sandboxTemplate.onDelete says how), so it cannot be orphaned; remove the field (for a VM that outlives its run, make it a Sandbox and name it in spec.sandboxRef)",
    fieldPath: ".spec.sandboxTemplate.deletionPolicy",
  },
  {
    rule: "!has(self.spec.sandboxTemplate) || !has(self.spec.sandboxTemplate.writeConnectionSecretTo)",
    message:
      "spec.sandboxTemplate.writeConnectionSecretTo: a run's own VM has no connection Secret (its steps reach the VM through the operator); remove the field (for a VM others connect to, make it a Sandbox and name it in spec.sandboxRef)",
    fieldPath: ".spec.sandboxTemplate.writeConnectionSecretTo",
  },
];

export const sandboxRunKind: KindDefinition = {
  ...kindNames.sandboxRun,
  singular: "sandboxrun",
  shortNames: ["sbxr", "sbxrun"],
  description:
    "A SandboxRun runs steps (shell commands or code) to completion in a Sandbox's VM, like a Job: status reports each step's exit code and output, and Ready turns True once it has succeeded.",
  spec: SandboxRunSpecSchema,
  specValidations: [
    {
      rule: "self == oldSelf",
      message: "spec is immutable once the SandboxRun is created (as a Job's); delete the SandboxRun and create it again to change it",
      reason: "FieldValueForbidden",
    },
    {
      rule: "has(self.sandboxRef) != has(self.sandboxTemplate)",
      message: "set exactly one of spec.sandboxRef and spec.sandboxTemplate",
    },
    {
      rule: "self.steps.all(s, has(s.command) != has(s.code) && has(s.code) == has(s.language))",
      message: "each step sets either command, or both language and code",
      fieldPath: ".steps",
    },
    {
      rule: "!has(self.files) || self.files.all(f, has(f.configMapKeyRef) != has(f.secretKeyRef))",
      message: "each file sets exactly one of configMapKeyRef and secretKeyRef",
      fieldPath: ".files",
    },
  ],
  creationValidations: templateRules,
  status: SandboxRunStatusSchema,
  printerColumns: [
    { name: "Phase", type: "string", jsonPath: ".status.phase" },
    { name: "Sandbox", type: "string", jsonPath: ".spec.sandboxRef.name", priority: 1 },
    { name: "Attempts", type: "integer", jsonPath: ".status.attempts", priority: 1 },
    {
      name: "Completed",
      type: "string",
      jsonPath: ".status.completionTime",
      description: "When the run succeeded or failed (RFC 3339, UTC).",
      priority: 1,
    },
    ...readyColumns,
  ],
};
