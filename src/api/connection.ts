import { DEFAULTS } from "../service/options.js";
import { SecretReference } from "./refs.js";
import { MAX_ACCESS_CLIENTS, kindNames } from "./names.js";
import { notEmptyAtCreation, notMadeEmpty, statusSchema, type Resource } from "./common.js";
import { readyColumns, type KindDefinition } from "./kind.js";
import { Type, type Static } from "./schema.js";


const url = (description: string) =>
  Type.String({
    description,
    minLength: 1,
    maxLength: 2048,
    "x-kubernetes-validations": [
      {
        rule: "self.startsWith('https://') || self.startsWith('http://')",
        message: "must be an http:// or https:// URL",
      },
    ],
  });

export const ConnectionSpecSchema = Type.Object(
  {
    baseURL: url("Base URL of the Agent Registry and Compute Service, e.g. https://api.example.com."),
    registryURL: Type.Optional(
      url(
        "Base URL of the Agent Registry (/registry/v1), when it is served from another host than compute. Defaults to baseURL.",
      ),
    ),
    authURL: url("Base URL of the token service; the operator posts to <authURL>/token."),
    credentials: Type.Object(
      {
        secretRef: SecretReference(
          "Secret in the same namespace holding either `apiKey`, or `clientId` and `clientSecret`. Credentials never sit in a spec.",
        ),
      },
      { description: "Where the service account's credentials are." },
    ),
    orgId: Type.Optional(
      Type.String({ description: "Default organisation id for Agents and Sandboxes that do not set one (leave the field out, rather than set it empty).", maxLength: 253 }),
    ),
    workspaceId: Type.Optional(
      Type.String({ description: "Workspace id sent as X-Workspace-Id when reading usage.", maxLength: 253 }),
    ),
    environmentId: Type.Optional(
      Type.String({ description: "Environment id sent as X-Environment-Id when reading usage.", maxLength: 253 }),
    ),
    rateLimit: Type.Optional(
      Type.Object(
        {
          qps: Type.Optional(
            Type.Number({ description: "Sustained requests per second to the service.", default: DEFAULTS.qps, minimum: 0.01 }),
          ),
          burst: Type.Optional(
            Type.Integer({ description: "Requests allowed in a burst above qps.", default: DEFAULTS.burst, minimum: 1 }),
          ),
        },
        { description: "Client-side rate limit for the calls made through this Connection to the registry and compute APIs, a SandboxRun's calls to its VM's daemon (r/ paths: a step's start, its status, its output) included: size it for those too.", default: {} },
      ),
    ),
    timeoutSeconds: Type.Optional(
      Type.Integer({ description: "Timeout of one request to the service.", default: DEFAULTS.timeoutMs / 1000, minimum: 1, maximum: 600 }),
    ),
    usageRefreshSeconds: Type.Optional(
      Type.Integer({
        description: "How often the usage summary and access clients in status are refreshed.",
        default: 600,
        minimum: 30,
      }),
    ),
    insecureSkipTLSVerify: Type.Optional(
      Type.Boolean({
        description:
          "Skip verification of the service's TLS certificate. For local development only: never in production.",
        default: false,
      }),
    ),
  },
  { description: "How to reach the service and which credentials to use." },
);
export type ConnectionSpec = Static<typeof ConnectionSpecSchema>;

export const ConnectionStatusSchema = statusSchema("Observed state of the Connection.", {
  tokenExpiresAt: Type.Optional(
    Type.String({ description: "When the current access token expires.", format: "date-time" }),
  ),
  accessClients: Type.Optional(
    Type.Array(
      Type.Object({
        name: Type.String({ description: "Client name." }),
        clientId: Type.String({ description: "Client id." }),
        active: Type.Boolean({ description: "Whether the client is active." }),
      }),
      { description: `Access clients of the service account, as the service lists them (the first ${MAX_ACCESS_CLIENTS}: the Ready message says how many more there are).`, maxItems: MAX_ACCESS_CLIENTS },
    ),
  ),
  accessClientsRefreshedAt: Type.Optional(
    Type.String({ description: "When the access clients were read (every usageRefreshSeconds).", format: "date-time" }),
  ),
  usage: Type.Optional(
    Type.Object(
      {
        from: Type.String({ description: "First day of the period (YYYY-MM-DD)." }),
        to: Type.String({ description: "Last day of the period (YYYY-MM-DD)." }),
        totalSeconds: Type.Integer({ description: "VM seconds used in the period." }),
        vmCount: Type.Integer({ description: "VMs that ended in the period." }),
        byTier: Type.Array(
          Type.Object({
            tier: Type.String({ description: "Tier name." }),
            seconds: Type.Integer({ description: "VM seconds of this tier." }),
            vmCount: Type.Integer({ description: "VMs of this tier." }),
          }),
          { description: "Usage per tier.", maxItems: 256 },
        ),
        refreshedAt: Type.String({ description: "When the usage was read.", format: "date-time" }),
      },
      { description: "VM usage of the last 30 days by tier (needs workspaceId and environmentId)." },
    ),
  ),
});
export type ConnectionStatus = Static<typeof ConnectionStatusSchema>;

export type Connection = Resource<ConnectionSpec, ConnectionStatus>;

export const connectionKind: KindDefinition = {
  ...kindNames.connection,
  singular: "connection",
  shortNames: ["conn"],
  description:
    "A Connection says how to reach the Agent Registry and Compute Service and which credentials to use. Every other agentcompute.dev resource uses the Connection named in spec.connectionRef (default: \"default\") of its own namespace.",
  spec: ConnectionSpecSchema,
  specValidations: [notMadeEmpty("orgId", "no default organisation")],
  creationValidations: [notEmptyAtCreation("orgId", "no default organisation")],
  status: ConnectionStatusSchema,
  printerColumns: [
    { name: "Base URL", type: "string", jsonPath: ".spec.baseURL" },
    // A future time: shown as itself, not as an age (a `date` column prints <invalid>; docs/design.md).
    {
      name: "Token Expires",
      type: "string",
      jsonPath: ".status.tokenExpiresAt",
      description: "When the current access token expires (RFC 3339, UTC).",
      priority: 1,
    },
    ...readyColumns,
  ],
};
