import { CONFIG_HASH_KEY, MARKER_KEY, SECRETS_HASH_KEY, kindNames } from "./names.js";
import { StringEnum, StringMap, Type, type Static } from "./schema.js";
import { EnvFromSecrets, ServiceMetadata, WriteConnectionSecretTo, has, managedSpecFields, managementPolicyRules, notEmptyAtCreation, notMadeEmpty, statusSchema, type Resource } from "./common.js";
import { readyColumns, type KindDefinition } from "./kind.js";

export const SandboxSpecSchema = Type.Object(
  {
    ...managedSpecFields(),
    tier: Type.String({ description: "Compute tier of the VM, e.g. standard.", minLength: 1, maxLength: 253 }),
    skills: Type.Optional(
      Type.Array(Type.String({ maxLength: 253 }), {
        description:
          "Skills to load, by name. A name that is a Skill resource in this namespace waits for it to be Ready. A change replaces the VM; listing the same skills in another order does not.",
        maxItems: 256,
      }),
    ),
    env: Type.Optional(StringMap("Environment variables of the VM (plain values; secrets go in envFrom).")),
    envFrom: Type.Optional(
      EnvFromSecrets(
        "Secret in the same namespace whose keys become environment variables.",
        "Secrets whose data is added to env; their values never appear in spec or status.",
      ),
    ),
    metadata: Type.Optional(
      ServiceMetadata(
        "Free key/value metadata of the VM, given at allocation: a change takes effect with the next VM (the service cannot change a VM's metadata, and a change alone does not replace the VM).",
        [MARKER_KEY, CONFIG_HASH_KEY, SECRETS_HASH_KEY],
      ),
    ),
    orgId: Type.Optional(
      Type.String({
        description:
          "Organisation of the VM. Defaults to the Connection's orgId (leave the field out, rather than set it empty). The service lists only the VMs of the org its credentials belong to: a VM of another org is found by the id status records only, so one allocated just before the operator crashed (its id not recorded yet) is not found again and runs until its TTL, unrenewed.",
        maxLength: 253,
      }),
    ),
    secureRuntime: Type.Optional(
      Type.String({
        description:
          "Name of the secure runtime to run the VM with (the service's values are not published, so it is passed through). Was a boolean before v1alpha1 settled it: replace `true` with the runtime's name; a stored `false` is ignored.",
        minLength: 1,
        maxLength: 253,
      }),
    ),
    ttlSeconds: Type.Optional(
      Type.Integer({
        description:
          "Time-to-live asked for at allocation and at each renewal. At least 2: a renewal must land before the VM runs out, at least a second after the one before. A Sandbox whose renewal the service refuses for this value (its bounds are not published) keeps its VM: it is renewed with the TTL it had, or the pool's maximum, and the Sandbox is Stalled (ServiceRejected) until this changes.",
        default: 3600,
        minimum: 2,
      }),
    ),
    renewBeforeSeconds: Type.Optional(
      Type.Integer({
        description:
          "Renew this long before the VM expires. Default: a fifth of ttlSeconds, at least 30, and less than ttlSeconds (ttlSeconds - 1 for a TTL of 30 s or less). It must cover an operator failover (a 15 s lease and the takeover); with --sharding give short-TTL Sandboxes 45 or more (docs/sharding.md).",
        minimum: 1,
      }),
    ),
    keepAlive: Type.Optional(
      Type.Boolean({
        description:
          "true: renew the VM for as long as this resource exists, and replace it if it disappears, as far as managementPolicies allow (renewals need Create or Update, a replacement Create: an import, [Observe], is never renewed). false: let it expire and report Expired.",
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
      "Desired state of the sandbox VM. A change of tier, skills (as a set), env, envFrom, secureRuntime or orgId (this spec's, else the Connection's) replaces the VM (the new one first, then the old one is released).",
  },
);
export type SandboxSpec = Static<typeof SandboxSpecSchema>;

export const SandboxStatusSchema = statusSchema("Observed state of the sandbox VM.", {
  vmId: Type.Optional(Type.String({ description: "Id of the VM in the service." })),
  state: Type.Optional(
    Type.String({
      description:
        "The service's state: allocated, released, expired... Or gone: the VM vmId names is no longer in the service and the allocation of its replacement failed, or waits for what the spec needs (the Ready message says why); endpoint and wsURL are removed, and the connection Secret is deleted until a VM runs again. (A Sandbox that makes no replacement, paused or without Create in its managementPolicies, says its VM is gone in its Ready message only.)",
    }),
  ),
  tier: Type.Optional(Type.String({ description: "Tier of the VM." })),
  skillsLoaded: Type.Optional(Type.Array(Type.String(), { description: "Skills the VM loaded.", maxItems: 256 })),
  endpoint: Type.Optional(Type.String({ description: "Endpoint of the VM (also in the connection Secret)." })),
  wsURL: Type.Optional(Type.String({ description: "WebSocket URL of the VM (also in the connection Secret)." })),
  configHash: Type.Optional(
    Type.String({
      description:
        "Hash of the allocation options of the current VM, salted with this resource's uid: of the env its envFrom Secrets give, the keys only, not the values. Except for a VM allocated by an older operator, before it recorded the VM's agentcompute.dev/secrets-hash metadata: there, until the VM is replaced, it is the hash that operator recorded, with the values in (SHA-256, cut to 64 bits), the only record of the values that VM holds.",
    }),
  ),
  allocatedAt: Type.Optional(Type.String({ description: "When the current VM was allocated.", format: "date-time" })),
  expiresAt: Type.Optional(
    Type.String({
      description:
        "When the VM expires unless renewed, as of reportedAt. Renewals are not written one by one: while the VM is kept alive (renewEverySeconds above 0) this time moves on every renewEverySeconds and is written at the next report, so it may be in the past on a VM that is alive. The VM is being renewed while Ready is True and reportedAt is less than reportEverySeconds + renewEverySeconds old.",
      format: "date-time",
    }),
  ),
  lastRenewedAt: Type.Optional(
    Type.String({ description: "When the VM was last renewed (or allocated), as of reportedAt.", format: "date-time" }),
  ),
  renewals: Type.Optional(
    Type.Integer({
      description:
        "Renewals of the current VM, as of reportedAt. Counted by the operator and written at each report; after an operator restart, renewals its predecessor made since its last report are counted from how far the VM's expiry moved. The metric agentcompute_sandbox_renewals_total counts them as they happen.",
      minimum: 0,
    }),
  ),
  renewEverySeconds: Type.Optional(
    Type.Integer({
      description:
        "Seconds between two renewals: ttlSeconds - renewBeforeSeconds (each lands up to 10 % of renewBeforeSeconds earlier, to spread renewals), reckoned from the TTL the service granted where it granted less than ttlSeconds without refusing it (a cap). 0: the VM is not renewed (keepAlive false, or managementPolicies without Create and Update).",
      minimum: 0,
    }),
  ),
  reportedAt: Type.Optional(
    Type.String({
      description:
        "When the operator last wrote expiresAt, lastRenewedAt and renewals. It writes them for a new VM, and otherwise, once they changed, at the first renewal (or resync) at least reportEverySeconds after the previous report, never when nothing changed, so while the VM is renewed this is at most reportEverySeconds + renewEverySeconds old; older means the operator is not renewing it. Conditions, state and a failure are written as soon as they change.",
      format: "date-time",
    }),
  ),
  reportEverySeconds: Type.Optional(
    Type.Integer({
      description:
        "The operator's status interval (agent-operator run --sandbox-status-interval, default 10m) in seconds: renewals are reported at most this often. 0: at every renewal.",
      minimum: 0,
    }),
  ),
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
      holds: (self) => !has(self, "renewBeforeSeconds") || !has(self, "ttlSeconds") || Number(self.renewBeforeSeconds) < Number(self.ttlSeconds),
    },
    notMadeEmpty("orgId", "the Connection's orgId"),
  ],
  creationValidations: [notEmptyAtCreation("orgId", "the Connection's orgId")],
  status: SandboxStatusSchema,
  printerColumns: [
    { name: "VM ID", type: "string", jsonPath: ".status.vmId" },
    { name: "Tier", type: "string", jsonPath: ".spec.tier" },
    { name: "State", type: "string", jsonPath: ".status.state" },
    // A time in the future: a `date` column renders an age, and kubectl prints <invalid> for one
    // still to come. The RFC 3339 time itself is what a person can read (docs/design.md).
    // Renewals are reported every few minutes, not one by one: Expires is as of Reported, and
    // the VM is renewed every "Renew Every" seconds meanwhile (docs/design.md, Sandbox).
    {
      name: "Expires",
      type: "string",
      jsonPath: ".status.expiresAt",
      description: "When the VM expires unless renewed, as of Reported (RFC 3339, UTC); renewed every Renew Every seconds meanwhile.",
      priority: 1,
    },
    {
      name: "Renew Every (s)",
      type: "integer",
      jsonPath: ".status.renewEverySeconds",
      description: "Seconds between two renewals (0: not renewed).",
      priority: 1,
    },
    {
      name: "Reported",
      type: "string",
      jsonPath: ".status.reportedAt",
      description: "When the operator last reported the VM's expiry and renewals (RFC 3339, UTC).",
      priority: 1,
    },
    ...readyColumns,
  ],
};
