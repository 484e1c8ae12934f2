// Bad input, as a table: each bad spec with the answer a person gets. Either the API server
// refuses it, naming the field (CRD schema and CEL rules), or the operator accepts it and says
// in Ready (and Stalled, when only a change of the spec can help) what is wrong, with a reason
// and a message a person can act on. None of them blocks the good resources applied with
// them, crashes the operator (a child process here) or makes it spin: over a quiet window the
// bad resources cost a handful of reconciles, not a hot loop.
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startEmulator, type Emulator } from "../../../src/emulator/index.js";
import { createTestNamespace, deleteTestNamespace, kubectl, kubectlOk, testKubeconfig, useTestNamespace, waitFor } from "../support/kube.js";
import { API_KEY, apply, connectionManifest, installCRDs } from "../support/operator.js";
import { startOperatorProcess, type OperatorProcess } from "../support/process.js";
import { deleteAllManaged, createAll, mixedManifests, readyCondition, waitAllReady, type ListedResource } from "./support.js";

const ns = useTestNamespace("fault-input");
let other: string;
let emulator: Emulator;
/** The service the other namespace's Connection points at: it must never hear from `ns`. */
let otherEmulator: Emulator;
let op: OperatorProcess;
const logs: string[] = [];

const HUGE = 1_200_000; // over the service's 1 MiB request limit, under the API server's
const GOOD = { prefix: "good", skills: 2, agents: 2, deployments: 2, sandboxes: 2, withSkills: true };

// --- refused by the API server ---------------------------------------------------------

interface Refused {
  what: string;
  /** Applied first (valid), for changes of immutable fields. */
  before?: string;
  manifest: string;
  /** stderr must match each (the field is named). */
  says: RegExp[];
}

const refused: Refused[] = [
  {
    what: "a wrong type (spec.image a number)",
    manifest: `kind: Agent\nmetadata: {name: bad-type}\nspec: {image: 42}`,
    says: [/spec\.image/, /string/],
  },
  {
    what: "a wrong type (spec.ttlSeconds a string)",
    manifest: `kind: Sandbox\nmetadata: {name: bad-ttl-type}\nspec: {tier: standard, ttlSeconds: "an hour"}`,
    says: [/spec\.ttlSeconds/, /integer/],
  },
  {
    what: "a missing required field (Agent spec.image)",
    manifest: `kind: Agent\nmetadata: {name: no-image}\nspec: {description: x}`,
    says: [/spec\.image/, /Required value/],
  },
  {
    what: "a missing required field (Sandbox spec.tier)",
    manifest: `kind: Sandbox\nmetadata: {name: no-tier}\nspec: {ttlSeconds: 60}`,
    says: [/spec\.tier/, /Required value/],
  },
  {
    what: "a value out of range (spec.ttlSeconds 1: no time left to renew in)",
    manifest: `kind: Sandbox\nmetadata: {name: one-second-ttl}\nspec: {tier: standard, ttlSeconds: 1}`,
    says: [/spec\.ttlSeconds/, /greater than or equal to 2/],
  },
  {
    what: "a value outside an enum (spec.onDelete)",
    manifest: `kind: Sandbox\nmetadata: {name: bad-enum}\nspec: {tier: standard, onDelete: Destroy}`,
    says: [/spec\.onDelete/, /Unsupported value: "Destroy"/],
  },
  {
    what: "both of two exclusive fields (content and contentFrom)",
    manifest: `kind: Skill\nmetadata: {name: both}\nspec: {content: x, contentFrom: {configMapKeyRef: {name: a, key: b}}}`,
    says: [/set at most one of spec\.content and spec\.contentFrom/],
  },
  {
    what: "neither of agentRef and agentId",
    manifest: `kind: AgentDeployment\nmetadata: {name: no-agent}\nspec: {tier: standard}`,
    says: [/set exactly one of spec\.agentRef and spec\.agentId/],
  },
  {
    what: "deploy options the spec's own fields shadow (options.metadata; options.tier with spec.tier)",
    manifest: `kind: AgentDeployment\nmetadata: {name: shadowed-options}\nspec: {agentId: a, tier: standard, metadata: {team: a}, options: {tier: large, metadata: {team: b}, name: kept}}`,
    says: [/spec\.options\.metadata is not sent: the deployment's metadata is spec\.metadata/, /set spec\.tier or spec\.options\.tier, not both/],
  },
  {
    what: "an empty orgId (a template's empty value)",
    manifest: `kind: Agent\nmetadata: {name: empty-org}\nspec: {image: x, orgId: ""}`,
    says: [/spec\.orgId/],
  },
  {
    what: "renewBeforeSeconds not below ttlSeconds",
    manifest: `kind: Sandbox\nmetadata: {name: renew-late}\nspec: {tier: standard, ttlSeconds: 60, renewBeforeSeconds: 60}`,
    says: [/spec\.renewBeforeSeconds must be less than spec\.ttlSeconds/],
  },
  {
    what: "a run's template with renewBeforeSeconds not below its ttlSeconds",
    manifest: `kind: SandboxRun\nmetadata: {name: run-renew-late}\nspec: {sandboxTemplate: {tier: standard, ttlSeconds: 60, renewBeforeSeconds: 90}, steps: [{name: s, command: "true"}]}`,
    says: [/spec\.sandboxTemplate\.renewBeforeSeconds must be less than spec\.sandboxTemplate\.ttlSeconds/],
  },
  // A run's own VM is the run's: a Sandbox's fields that would keep it otherwise are refused,
  // not ignored, each pointing at a Sandbox and sandboxRef.
  ...[
    ["managementPolicies", "managementPolicies: [Observe]"],
    ["deletionPolicy", "deletionPolicy: Orphan"],
    ["writeConnectionSecretTo", "writeConnectionSecretTo: {name: vm-secret}"],
  ].map(([field, value]) => ({
    what: `a run's template with ${value}`,
    manifest: `kind: SandboxRun\nmetadata: {name: run-template-${field!.toLowerCase()}}\nspec: {sandboxTemplate: {tier: standard, ${value}}, steps: [{name: s, command: "true"}]}`,
    says: [new RegExp(`spec\\.sandboxTemplate\\.${field}: a run's own VM`), /spec\.sandboxRef/],
  })),
  {
    what: "a change of an immutable field (Skill spec.name)",
    before: `kind: Skill\nmetadata: {name: immutable-skill}\nspec: {name: first-name, content: x}`,
    manifest: `kind: Skill\nmetadata: {name: immutable-skill}\nspec: {name: second-name, content: x}`,
    says: [/spec\.name/, /immutable/],
  },
  {
    what: "a change of an immutable field (Agent spec.orgId)",
    before: `kind: Agent\nmetadata: {name: immutable-agent}\nspec: {image: x, orgId: org-e2e}`,
    manifest: `kind: Agent\nmetadata: {name: immutable-agent}\nspec: {image: x, orgId: org-other}`,
    says: [/spec\.orgId/, /immutable/],
  },
  {
    what: "a Connection whose baseURL is not a URL",
    manifest: `kind: Connection\nmetadata: {name: not-a-url}\nspec: {baseURL: "ftp.example.com", authURL: "https://auth.example.com", credentials: {secretRef: {name: s}}}`,
    says: [/spec\.baseURL/, /http:\/\/ or https:\/\/ URL/],
  },
];

const withApiVersion = (m: string) => `apiVersion: agentcompute.dev/v1alpha1\n${m}`;

// --- accepted, and answered by the operator -----------------------------------------------

interface Answered {
  what: string;
  plural: string;
  name: string;
  manifest: string;
  reason: string;
  /** Stalled=True: only a change of the spec (or annotation) helps. Else it waits and retries. */
  stalled: boolean;
  /** The message must match each: what is wrong, and where. */
  says: RegExp[];
  /** Extra checks once the answer is there. */
  check?: () => void;
}

const answered: Answered[] = [
  {
    what: "a tier the service does not have (400 from the service)",
    plural: "sandboxes",
    name: "unknown-tier",
    manifest: `kind: Sandbox\nmetadata: {name: unknown-tier}\nspec: {tier: unknown-tier}`,
    reason: "ServiceRejected",
    stalled: true,
    says: [/tier "unknown-tier" is not available/],
  },
  {
    what: "a skill name the service refuses (400 from the service)",
    plural: "skills",
    name: "bad-skill-name",
    manifest: `kind: Skill\nmetadata: {name: bad-skill-name}\nspec: {name: "not a valid name!", content: x}`,
    reason: "ServiceRejected",
    stalled: true,
    says: [/name must start with a letter or digit/],
  },
  {
    what: "a skill too large for the service (413 from the service)",
    plural: "skills",
    name: "huge",
    manifest: `kind: Skill\nmetadata: {name: huge}\nspec: {content: "${"x".repeat(HUGE)}"}`,
    reason: "ServiceRejected",
    stalled: true,
    says: [/too large/],
    check: () => expect(emulator.state.skills.has("huge")).toBe(false),
  },
  {
    what: "a skill name already taken by a skill it does not manage",
    plural: "skills",
    name: "taken",
    manifest: `kind: Skill\nmetadata: {name: taken}\nspec: {content: mine}`,
    reason: "NameTaken",
    stalled: true,
    says: [/already exists in the service and is not managed by this resource/, /agentcompute\.dev\/external-id/],
    check: () => expect(emulator.state.skills.get("taken")?.content).toBe("someone else's"),
  },
  {
    what: "a reference to a missing Agent",
    plural: "agentdeployments",
    name: "missing-agent",
    manifest: `kind: AgentDeployment\nmetadata: {name: missing-agent}\nspec: {agentRef: {name: no-such-agent}}`,
    reason: "WaitingForAgent",
    stalled: false,
    says: [/Agent "no-such-agent" not found/, /spec\.agentRef\.name/],
  },
  {
    what: "an agentId the registry does not know (404 from the service)",
    plural: "agentdeployments",
    name: "unknown-agent-id",
    manifest: `kind: AgentDeployment\nmetadata: {name: unknown-agent-id}\nspec: {agentId: no-such-id}`,
    reason: "WaitingForAgent",
    stalled: false,
    says: [/no-such-id/, /not found/],
  },
  {
    what: "a reference to a missing Skill",
    plural: "sandboxes",
    name: "missing-skill",
    manifest: `kind: Sandbox\nmetadata: {name: missing-skill}\nspec: {tier: standard, skills: [no-such-skill]}`,
    reason: "WaitingForSkill",
    stalled: false,
    says: [/"no-such-skill"/, /spec\.skills/],
  },
  {
    what: "a reference to a missing Secret (image pull credentials)",
    plural: "agents",
    name: "missing-pull-secret",
    manifest: `kind: Agent\nmetadata: {name: missing-pull-secret}\nspec: {image: x, imagePullSecretRef: {name: no-such-secret}}`,
    reason: "SecretNotFound",
    stalled: false,
    says: [/Secret "no-such-secret" not found/, /spec\.imagePullSecretRef\.name/],
  },
  {
    what: "a Secret of another namespace (envFrom names only a Secret of the same namespace)",
    plural: "sandboxes",
    name: "foreign-secret",
    manifest: `kind: Sandbox\nmetadata: {name: foreign-secret}\nspec: {tier: standard, envFrom: [{secretRef: {name: foreign-env}}]}`,
    reason: "SecretNotFound",
    stalled: false,
    says: [/Secret "foreign-env" not found in namespace/, /spec\.envFrom\[0\]\.secretRef\.name/],
  },
  {
    what: "a reference to a missing ConfigMap",
    plural: "skills",
    name: "missing-cm",
    manifest: `kind: Skill\nmetadata: {name: missing-cm}\nspec: {contentFrom: {configMapKeyRef: {name: no-such-cm, key: SKILL.md}}}`,
    reason: "ConfigMapNotFound",
    stalled: false,
    says: [/ConfigMap "no-such-cm" not found/, /spec\.contentFrom\.configMapKeyRef\.name/],
  },
  {
    what: "a Connection that exists only in another namespace",
    plural: "agents",
    name: "foreign-connection",
    manifest: `kind: Agent\nmetadata: {name: foreign-connection}\nspec: {image: x, connectionRef: {name: elsewhere}}`,
    reason: "ConnectionNotFound",
    stalled: false,
    says: [/Connection "elsewhere" not found in namespace/, /spec\.connectionRef\.name/],
  },
];

beforeAll(async () => {
  await installCRDs();
  emulator = await startEmulator({ apiKey: API_KEY, strictBodies: true, orgId: "org-e2e" });
  otherEmulator = await startEmulator({ apiKey: API_KEY, strictBodies: true, orgId: "org-other" });
  other = await createTestNamespace("fault-input-other");
  await apply(connectionManifest(ns.name, emulator), ns.name);
  // The other namespace: a Connection named "elsewhere" (to another service) and a Secret "foreign-env".
  await apply(connectionManifest(other, otherEmulator, { name: "elsewhere" }), other);
  await kubectlOk(["create", "secret", "generic", "foreign-env", "--from-literal=LEAK=from-the-other-namespace"], { namespace: other });
  // A skill someone else made in the service.
  emulator.state.createSkill({ name: "taken", content: "someone else's" });
  op = await startOperatorProcess({ kubeconfig: testKubeconfig(), namespaces: [ns.name, other], logs, logLevel: "info" });
  // Valid objects that the immutable-field cases then try to change.
  for (const c of refused) if (c.before) await apply(withApiVersion(c.before), ns.name);
  // Everything the operator must answer, and good resources alongside, all at once.
  // (createAll, not kubectl apply: apply's last-applied annotation would double the huge skill
  // past what etcd stores.)
  await createAll([...answered.map((c) => withApiVersion(c.manifest)), mixedManifests(GOOD)].join("\n---\n"), ns.name);
});

afterAll(async () => {
  if (op?.alive()) {
    await Promise.all([deleteAllManaged(ns.name), deleteAllManaged(other)]);
    await op.stop();
  }
  if (other) await deleteTestNamespace(other);
  await emulator?.close();
  await otherEmulator?.close();
});

describe("bad specs the API server refuses, naming the field", () => {
  it.each(refused)("$what", async (c) => {
    const res = await kubectl(["apply", "-f", "-"], { namespace: ns.name, input: withApiVersion(c.manifest) });
    expect(res.exitCode, res.stdout).not.toBe(0);
    for (const re of c.says) expect(res.stderr).toMatch(re);
  });
});

describe("bad specs the operator answers in Ready (and Stalled)", () => {
  it.each(answered)("$what: $reason", async (c) => {
    const r = await waitFor(
      async () => {
        const got = JSON.parse(await kubectlOk(["get", c.plural, c.name, "-o", "json"], { namespace: ns.name })) as ListedResource;
        const ready = readyCondition(got);
        return got.status?.observedGeneration === got.metadata.generation && ready?.status === "False" && ready.reason === c.reason ? got : undefined;
      },
      { timeoutMs: 60_000, description: `${c.plural}/${c.name} Ready=False ${c.reason}` },
    );
    const ready = readyCondition(r)!;
    for (const re of c.says) expect(ready.message).toMatch(re);
    const stalled = r.status?.conditions?.find((x) => x.type === "Stalled");
    expect(stalled?.status).toBe(c.stalled ? "True" : "False");
    const reconciling = r.status?.conditions?.find((x) => x.type === "Reconciling");
    expect(reconciling?.status).toBe(c.stalled ? "False" : "True");
    // Also an Event a person sees in `kubectl describe`.
    const events = await kubectlOk(
      ["get", "events", "--field-selector", `involvedObject.name=${c.name},reason=${c.reason}`, "-o", "jsonpath={.items[*].message}"],
      { namespace: ns.name },
    );
    expect(events).not.toBe("");
    c.check?.();
  });
});

describe("none of them blocks, crashes or spins", () => {
  it("the good resources applied with them are Ready", async () => {
    await waitAllReady(ns.name, GOOD.skills + GOOD.agents + GOOD.deployments + GOOD.sandboxes, { prefix: "good", timeoutMs: 120_000 });
  });

  it("nothing of this namespace reached the other namespace's service, and no foreign Secret reached ours", () => {
    const ops = Object.keys(otherEmulator.stats().byOperation);
    // Only its own Connection's calls (token, access clients, usage): no create of any kind.
    expect(ops.filter((o) => !["token", "access.clients", "usage.list"].includes(o))).toEqual([]);
    for (const vm of emulator.state.vms.values()) expect(Object.values(vm.env)).not.toContain("from-the-other-namespace");
  });

  it("over a quiet window the bad resources cost a few reconciles, not a hot loop, and the process lives", async () => {
    await sleep(3_000); // first backoffs pass
    const before = await op.metric("controller_runtime_reconcile_total");
    const serviceBefore = emulator.stats().total;
    await sleep(8_000);
    const reconciles = (await op.metric("controller_runtime_reconcile_total")) - before;
    const serviceCalls = emulator.stats().total - serviceBefore;
    console.log(`bad input: ${reconciles} reconciles and ${serviceCalls} service calls in 8 s for ${answered.length} bad resources`);
    expect(reconciles).toBeLessThanOrEqual(answered.length * 3);
    expect(serviceCalls).toBeLessThanOrEqual(answered.length * 3);
    expect(await op.metric("controller_runtime_reconcile_panics_total")).toBe(0);
    expect(op.alive()).toBe(true);
    expect(logs.filter((l) => /"level":"fatal"|unhandled|uncaught/i.test(l))).toEqual([]);
  });
});
