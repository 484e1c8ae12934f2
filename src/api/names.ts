// The names and constants of the API that the running operator needs. Nothing here imports
// TypeBox: the schemas (common.ts and the kinds' modules) are what crds/*.yaml and the docs
// are generated from, and building them costs ~20 MB of RSS that the operator has no use for.
// Code under src/runtime, src/managed and src/controllers imports values from here and only
// types from ./index.js.

export const GROUP = "agentcompute.dev";
export const VERSION = "v1alpha1";
export const API_VERSION = `${GROUP}/${VERSION}`;
export const CATEGORY = "agentcompute";

/** Finalizer that makes deletion wait until the service object is deleted or orphaned. */
export const FINALIZER = `${GROUP}/finalizer`;

export const Annotations = {
  /** Take over an existing service object with this id instead of creating one. */
  externalId: `${GROUP}/external-id`,
  /** Any new value triggers one redeploy of an AgentDeployment (like `kubectl rollout restart`). */
  redeployAt: `${GROUP}/redeploy-at`,
  /**
   * "true": the operator makes no change in the service for the resource (no create, update,
   * replace or delete; deletion waits) until the annotation goes. A Sandbox's VM is still renewed.
   */
  paused: `${GROUP}/paused`,
  /**
   * A duration (30s, 5m, 1h) that replaces --sync-period for this resource: how often it is
   * observed again, its service object read at least that often.
   */
  pollInterval: `${GROUP}/poll-interval`,
  /**
   * Written by the operator, not by people: a Skill's name in the service, claimed in the same
   * write as the finalizer, before the create (a skill carries no marker of its own).
   */
  claimedName: `${GROUP}/claimed-name`,
  /**
   * Written by the operator with the claim: a hash of the content, files and description the
   * create sends (comma-separated, with those of earlier creates none of which was answered),
   * by which a skill that create made (its answer lost) is told from one someone else made
   * under the name.
   */
  claimedContent: `${GROUP}/claimed-content`,
  /**
   * Written by the operator with the claim, before a create that makes its skill again (the
   * one status names gone from the service): that skill's createdAt. A skill of the name with
   * another created_at is this resource's only by such a create (its answer lost); otherwise
   * someone else made it after ours went.
   */
  claimedReplacing: `${GROUP}/claimed-replacing`,
} as const;

/** The annotations a Skill's claim is made of (written by the operator, with the finalizer). */
export const CLAIM_ANNOTATIONS: readonly string[] = [Annotations.claimedName, Annotations.claimedContent, Annotations.claimedReplacing];

/** Crash-safety marker written into the `metadata` of every service object the operator creates. */
export const MARKER_KEY = `${GROUP}/uid`;

/**
 * Written into a VM's `metadata` next to the marker: the configHash of the spec it was
 * allocated for, so that a VM adopted after a lost status write (a crash, a shard moved
 * mid-replacement) is compared with the spec it was made from, not taken for an old one.
 */
export const CONFIG_HASH_KEY = `${GROUP}/config-hash`;

/**
 * Written into a VM's `metadata` when its env takes values from Secrets (a Sandbox's envFrom):
 * a salted hash of those values, so that a SandboxRun can tell that a VM holds values of a
 * Secret rotated since (not replaced yet, or not to be: policies without Update), which its
 * output could show and it could not mask.
 */
export const SECRETS_HASH_KEY = `${GROUP}/secrets-hash`;

/** The same for a deployment: the optionsHash of the spec it was deployed from. */
export const OPTIONS_HASH_KEY = `${GROUP}/options-hash`;

/**
 * And the revision of the Agent it was first deployed with (a redeploy leaves the metadata as
 * it was): a deployment adopted after a lost status write is redeployed if its Agent changed
 * since, rather than taken for one running the Agent's newest revision.
 */
export const AGENT_REVISION_KEY = `${GROUP}/agent-revision`;

/** Name of the Connection a resource uses when spec.connectionRef is not set. */
export const DEFAULT_CONNECTION = "default";

export const ConditionType = {
  Ready: "Ready",
  Reconciling: "Reconciling",
  Stalled: "Stalled",
  /** Only on resources whose managementPolicies leave out Update: True while the service object differs from the spec. */
  Drifted: "Drifted",
} as const;

/** A SandboxRun's own conditions, beside the kstatus three (as a Job's). */
export const RunConditionType = {
  Complete: "Complete",
  Failed: "Failed",
} as const;

/** The phases of a SandboxRun. */
export const RunPhase = {
  Pending: "Pending",
  Running: "Running",
  Succeeded: "Succeeded",
  Failed: "Failed",
} as const;
export type RunPhaseName = (typeof RunPhase)[keyof typeof RunPhase];

/** Label on a SandboxRun's output ConfigMap: the run's name. */
export const RUN_LABEL = `${GROUP}/sandboxrun`;

/** A kind's name and plural: what the operator needs of a KindDefinition at run time. */
export interface KindNames {
  kind: string;
  plural: string;
}

export const kindNames = {
  connection: { kind: "Connection", plural: "connections" },
  skill: { kind: "Skill", plural: "skills" },
  agent: { kind: "Agent", plural: "agents" },
  agentDeployment: { kind: "AgentDeployment", plural: "agentdeployments" },
  sandbox: { kind: "Sandbox", plural: "sandboxes" },
  sandboxRun: { kind: "SandboxRun", plural: "sandboxruns" },
} as const satisfies Record<string, KindNames>;

/** Access clients a Connection's status keeps (a status must stay well under the API server's 1.5 MiB object limit). */
export const MAX_ACCESS_CLIENTS = 1000;
