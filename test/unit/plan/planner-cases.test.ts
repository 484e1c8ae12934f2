// The planner over a fake cluster and the in-process emulator, continued: what a review found
// wanting (a Sandbox that cannot be compared with its spec, secrets in updates, fields left
// empty in YAML, dependants of Agents that do not change, waits of new resources, spec-only
// changes, a failing list read once per plan, long values, notes' words).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startEmulator, type Emulator } from "../../../src/emulator/index.js";
import { MARKER_KEY } from "../../../src/api/names.js";
import { SENSITIVE } from "../../../src/plan/model.js";
import type { Agent, AgentDeployment, Sandbox } from "../../../src/api/index.js";
import { optionsHash } from "../../../src/controllers/agent-deployment.js";
import { agentRevision } from "../../../src/controllers/agent.js";
import { allocationHash } from "../../../src/controllers/sandbox.js";
import type { AllocateVMRequest } from "../../../src/service/index.js";
import { ManifestError, parseSources } from "../../../src/plan/manifests.js";
import { plan, type ClusterReader } from "../../../src/plan/planner.js";
import { KubeApiError } from "../../../src/runtime/kube-client.js";
import { exitCodeOf } from "../../../src/plan/model.js";
import { renderText, renderJSON, renderMarkdown } from "../../../src/plan/render.js";
import { NS, ORG, find, live, manifests, memoryCluster, ready } from "./helpers.js";

const API_KEY = "planner-review-key-9c1d";

let emu: Emulator;
let cluster: Map<string, unknown[]>;
const reader = memoryCluster(() => cluster);

/** A Sandbox in the cluster with its VM in the service, made for `req`. */
function liveSandbox(name: string, spec: Record<string, unknown>, req: Partial<AllocateVMRequest> = {}) {
  const vm = emu.state.allocateVM({ tier: (spec.tier as string) ?? "standard", ttl_seconds: 3600, org_id: ORG, metadata: { [MARKER_KEY]: `uid-${name}` } });
  const configHash = allocationHash({ metadata: { uid: `uid-${name}` }, spec } as unknown as Sandbox, { tier: (spec.tier as string) ?? "standard", org_id: ORG, ...req } as AllocateVMRequest);
  return live(name, spec, { vmId: vm.vm_id, tier: vm.tier, configHash, expiresAt: vm.expires_at });
}

beforeAll(async () => {
  emu = await startEmulator({ apiKey: API_KEY, strictBodies: true, orgId: ORG });
  cluster = new Map<string, unknown[]>([
    ["secrets", [{ metadata: { name: "creds", namespace: NS }, data: { apiKey: Buffer.from(API_KEY).toString("base64") } }]],
    ["configmaps", []],
    ["connections", [{ metadata: { name: "default", namespace: NS, generation: 1 }, spec: { baseURL: emu.baseURL, authURL: emu.authURL, orgId: ORG, credentials: { secretRef: { name: "creds" } } }, status: ready() }]],
    ["skills", []], ["agents", []], ["agentdeployments", []], ["sandboxes", []],
  ]);
});
afterAll(async () => { await emu.close(); });

describe("planner", () => {
  it("plans a Sandbox that cannot be compared with its spec as unknown, with the spec's changes (a Secret missing, the VMs unreadable)", async () => {
    const yaml = (name: string, extra = "") => `apiVersion: agentcompute.dev/v1alpha1\nkind: Sandbox\nmetadata: {name: ${name}}\nspec: {tier: large${extra}}`;
    cluster.set("sandboxes", [liveSandbox("no-secret", { tier: "standard", envFrom: [{ secretRef: { name: "gone" } }] }), liveSandbox("no-list", { tier: "standard" })]);
    try {
      const p = await plan(reader, manifests(yaml("no-secret", ", envFrom: [{secretRef: {name: gone}}]")), { prune: false });
      const r = find(p, "Sandbox", "no-secret");
      expect(r).toMatchObject({ action: "unknown", changes: [{ path: "spec.tier", old: "standard", new: "large" }] });
      expect(r.reason).toMatch(/^SecretNotFound: Secret "gone" not found in namespace "team" \(spec\.envFrom\[0\]\.secretRef\.name\); the VM is renewed meanwhile/);
      expect(p.changes).toBe(true);
      // The service's list of VMs answering 500: not "No changes".
      emu.injectFault({ method: "GET", path: "/compute/v1/vms", times: Infinity, action: { status: 500 } });
      try {
        const outage = await plan(reader, manifests(yaml("no-list")), { prune: false });
        const o = find(outage, "Sandbox", "no-list");
        expect(o).toMatchObject({ action: "unknown", changes: [{ path: "spec.tier", old: "standard", new: "large" }] });
        expect(o.reason).toMatch(/^ServiceUnavailable: the service's list of VMs cannot be read/);
        expect(outage.changes).toBe(true);
      } finally {
        emu.clearFaults();
      }
    } finally {
      cluster.set("sandboxes", []);
    }
  });

  it("says a deployment's create waits for the Skill resource of a skill it loads that is not Ready", async () => {
    const notReady = { conditions: [{ type: "Ready", status: "False", reason: "ServiceUnavailable", lastTransitionTime: "2030-01-01T00:00:00Z" }] };
    cluster.set("skills", [{ ...live("sk", { name: "triage", content: "# c" }, {}), status: notReady }]);
    try {
      const yaml = "apiVersion: agentcompute.dev/v1alpha1\nkind: AgentDeployment\nmetadata: {name: with-skill}\nspec: {agentId: agent-x, tier: standard, skills: [triage]}";
      const r = find(await plan(reader, manifests(yaml), { prune: false }), "AgentDeployment", "with-skill");
      expect(r.action).toBe("create");
      expect(r.notes).toContain('then waits: WaitingForSkill: Skill "sk" (spec.skills) is not Ready yet: ServiceUnavailable');
      expect(r.notes).toContain("waits for Skill sk, not Ready now");
    } finally {
      cluster.set("skills", []);
    }
  });

  it("never shows a secret-looking field's value, at any depth, in an update's or a create's changes, in any output", async () => {
    const secrets = ["old-token-1f3a", "new-token-9b2c", "old-pass-77e1", "new-pass-0d4f", "reg-pass-5a6b"];
    const registry = emu.state.createAgent({
      name: "leaky",
      org_id: ORG,
      image: "l:1",
      metadata: { team: "a", token: "old-token-1f3a", [MARKER_KEY]: "uid-leaky" },
      manifest: { name: "leaky", authentication: { scheme: "basic", password: "old-pass-77e1" } },
    });
    const liveAgent = live("leaky", { image: "l:1", metadata: { team: "a", token: "old-token-1f3a" }, manifest: { name: "leaky", authentication: { scheme: "basic", password: "old-pass-77e1" } } }, { agentId: registry.id });
    cluster.set("agents", [liveAgent]);
    try {
      const yaml = `apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: leaky}
spec:
  image: "l:1"
  metadata: {team: b, token: new-token-9b2c}
  manifest: {name: leaky, authentication: {scheme: basic, password: new-pass-0d4f}}
---
apiVersion: agentcompute.dev/v1alpha1
kind: AgentDeployment
metadata: {name: leaky-dep}
spec:
  agentRef: {name: leaky}
  tier: standard
  options: {registries: [{host: r.example, password: reg-pass-5a6b}]}`;
      const p = await plan(reader, manifests(yaml), { prune: false });
      const agent = find(p, "Agent", "leaky");
      expect(agent.action).toBe("update");
      expect(agent.changes).toEqual([
        { path: "spec.metadata.team", old: "a", new: "b" },
        { path: "spec.metadata.token", old: SENSITIVE, new: SENSITIVE },
        { path: "spec.manifest.authentication.password", old: SENSITIVE, new: SENSITIVE },
      ]);
      expect(find(p, "AgentDeployment", "leaky-dep").changes).toContainEqual({ path: "spec.options.registries", new: [{ host: "r.example", password: SENSITIVE }] });
      for (const out of [renderText(p), renderJSON(p), renderMarkdown(p)]) {
        for (const secret of secrets) expect(out).not.toContain(secret);
      }
      expect(renderText(p)).toContain("~ spec.metadata.token: (sensitive) -> (sensitive)");
    } finally {
      cluster.set("agents", []);
    }
  });

  it("drops fields left empty in YAML (null) as the API server does, but keeps nulls inside free-form fields", async () => {
    const agent = emu.state.createAgent({ name: "empty-fields", org_id: ORG, image: "e:1", description: "set in the registry", metadata: { [MARKER_KEY]: "uid-empty-fields" } });
    const dep = emu.state.deploy(agent.id, { tier: "standard" });
    const depSpec = { agentId: agent.id, tier: "standard", options: { name: "web", extra: null } };
    const applied = optionsHash({ metadata: { uid: "uid-empty-dep" }, spec: depSpec } as unknown as AgentDeployment);
    cluster.set("agents", [live("empty-fields", { image: "e:1" }, { agentId: agent.id })]);
    cluster.set("agentdeployments", [live("empty-dep", depSpec, { deploymentId: dep.id, optionsHash: applied, configHash: dep.config_hash })]);
    try {
      const yaml = `apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: empty-fields}
spec:
  image: "e:1"
  description:
  capabilities:
---
apiVersion: agentcompute.dev/v1alpha1
kind: AgentDeployment
metadata: {name: empty-dep}
spec:
  agentId: "${agent.id}"
  tier: standard
  env:
  skills:
  options: {name: web, extra: }`;
      const p = await plan(reader, manifests(yaml), { prune: false });
      expect(find(p, "Agent", "empty-fields")).toMatchObject({ action: "none", changes: [] });
      expect(find(p, "AgentDeployment", "empty-dep")).toMatchObject({ action: "none", changes: [] });
      expect(p.changes).toBe(false);
      // A null inside options (x-kubernetes-preserve-unknown-fields) is stored: dropping it is a change.
      const dropped = await plan(reader, manifests(yaml.replace("options: {name: web, extra: }", "options: {name: web}")), { prune: false });
      expect(find(dropped, "AgentDeployment", "empty-dep").action).toBe("replace");
    } finally {
      cluster.set("agents", []);
      cluster.set("agentdeployments", []);
    }
  });

  it("redeploys an Agent's deployments only when the Agent itself is created or updated (not paused, not held back by its policies)", async () => {
    const registry = emu.state.createAgent({ name: "held", org_id: ORG, image: "h:1", metadata: { [MARKER_KEY]: "uid-held" } });
    const dep = emu.state.deploy(registry.id, { tier: "standard" });
    const liveAgent = live("held", { image: "h:1" }, { agentId: registry.id });
    const revision = agentRevision(liveAgent as unknown as Agent);
    (liveAgent.status as Record<string, unknown>).revision = revision;
    const depSpec = { agentRef: { name: "held" }, tier: "standard" };
    const applied = optionsHash({ metadata: { uid: "uid-held-dep" }, spec: depSpec } as unknown as AgentDeployment);
    cluster.set("agents", [liveAgent]);
    cluster.set("agentdeployments", [live("held-dep", depSpec, { deploymentId: dep.id, agentId: registry.id, agentRevision: revision, optionsHash: applied, configHash: dep.config_hash })]);
    const yaml = (agentMeta: string, agentSpec: string) => `apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: held${agentMeta}}
spec: {image: "h:2"${agentSpec}}
---
apiVersion: agentcompute.dev/v1alpha1
kind: AgentDeployment
metadata: {name: held-dep}
spec: {agentRef: {name: held}, tier: standard}`;
    try {
      for (const [meta, spec] of [[", annotations: {agentcompute.dev/paused: \"true\"}", ""], ["", ", managementPolicies: [Observe, Create, Delete]"]] as const) {
        const p = await plan(reader, manifests(yaml(meta, spec)), { prune: false });
        expect(find(p, "Agent", "held").action).toBe("none");
        expect(find(p, "AgentDeployment", "held-dep")).toMatchObject({ action: "none", notes: [] });
        expect(find(p, "AgentDeployment", "held-dep").reason).toBeUndefined();
      }
      // Only in the manifests, and not created (no Create): its deployment waits for it.
      const imported = `apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: not-made}
spec: {managementPolicies: [Observe]}
---
apiVersion: agentcompute.dev/v1alpha1
kind: AgentDeployment
metadata: {name: not-made-dep}
spec: {agentRef: {name: not-made}, tier: standard}`;
      const q = await plan(reader, manifests(imported), { prune: false });
      expect(find(q, "Agent", "not-made").action).toBe("none");
      expect(find(q, "AgentDeployment", "not-made-dep")).toMatchObject({
        action: "create",
        notes: ["waits for Agent not-made, which is only in the manifests and is not created by this apply (see its plan)"],
      });
      // Updated: its deployments are redeployed after it.
      const p = await plan(reader, manifests(yaml("", "")), { prune: false });
      expect(find(p, "Agent", "held").action).toBe("update");
      expect(find(p, "AgentDeployment", "held-dep")).toMatchObject({ action: "update", notes: ["after Agent held is updated"] });
      expect(find(p, "AgentDeployment", "held-dep").reason).toMatch(/^redeploy: the Agent changed/);
    } finally {
      cluster.set("agents", []);
      cluster.set("agentdeployments", []);
    }
  });

  it("with -n given, refuses any namespaced object naming another namespace, as kubectl apply -n does; not a cluster-scoped one", async () => {
    const parse = (text: string) => parseSources([{ name: "m.yaml", text }], NS, { enforceNamespace: true });
    const deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: elsewhere}\nspec: {}";
    const refusal = `m.yaml: Deployment "web": the namespace from the provided object "elsewhere" does not match the namespace "${NS}". You must pass '--namespace=elsewhere' to perform this operation.`;
    const paths: string[] = [];
    const discovering: ClusterReader = {
      list: (path) => (paths.push(path), reader.list(path)),
      namespaced: async (apiVersion, kind) => (kind === "Deployment" ? true : kind === "ClusterIssuer" ? false : undefined),
    };
    await expect(plan(discovering, parse(deployment), { prune: true })).rejects.toThrow(new ManifestError(refusal));
    // Before anything is listed (nothing of "elsewhere" planned for deletion).
    expect(paths).toEqual([]);
    // A kind discovery does not know counts as namespaced.
    await expect(plan({ list: reader.list }, parse(deployment.replace("apps/v1", "example.com/v1")), { prune: false })).rejects.toThrow(ManifestError);
    // Cluster-scoped, as discovery says or its CustomResourceDefinition among the manifests: its namespace is ignored.
    const issuer = "apiVersion: cert-manager.io/v1\nkind: ClusterIssuer\nmetadata: {name: le, namespace: elsewhere}\nspec: {}";
    await expect(plan(discovering, parse(issuer), { prune: false })).resolves.toMatchObject({ resources: [] });
    const crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec: {group: example.com, scope: Cluster, names: {kind: Widget, plural: widgets}, versions: [{name: v1, served: true, storage: true}]}";
    await expect(plan({ list: reader.list }, parse(`${crd}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: elsewhere}`), { prune: false })).resolves.toMatchObject({ resources: [] });
    // Without -n, nothing is refused.
    await expect(plan(discovering, manifests(deployment), { prune: false })).resolves.toMatchObject({ resources: [] });
  });

  it("on a cluster without the CRDs, says they are not installed and how to install them; with them among the manifests, plans a first install", async () => {
    const noCrds: ClusterReader = {
      list: async (path) => {
        if (path.startsWith("/apis/agentcompute.dev/")) throw new KubeApiError({ status: 404, reason: "NotFound", message: "404 page not found", method: "GET", path });
        return reader.list(path);
      },
    };
    const sandbox = `apiVersion: agentcompute.dev/v1alpha1\nkind: Sandbox\nmetadata: {name: first}\nspec: {tier: standard}`;
    await expect(plan(noCrds, manifests(sandbox), { prune: false })).rejects.toThrow(
      `the cluster serves no connections.agentcompute.dev (GET /apis/agentcompute.dev/v1alpha1/namespaces/${NS}/connections: HTTP 404): the agentcompute.dev CustomResourceDefinitions are not installed (or are older than this agent-operator): install the operator first (kubectl apply -k manifests/ from its repository, or its Helm chart: docs/install.md), or plan its CRDs (crds/) with the manifests`,
    );
    const crds = ["Connection", "Skill", "Agent", "AgentDeployment", "Sandbox", "SandboxRun"].map(
      (kind) => `apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: ${kind.toLowerCase()}s.agentcompute.dev}\nspec: {group: agentcompute.dev, scope: Namespaced, names: {kind: ${kind}}, versions: [{name: v1alpha1}]}`,
    );
    const first = await plan(noCrds, manifests([...crds, sandbox].join("\n---\n")), { prune: true });
    expect(first.resources).toMatchObject([{ kind: "Sandbox", name: "first", action: "create" }]);
  });

  it("notes what a new Sandbox's or Agent's create would wait for, as a Skill's", async () => {
    const connections = cluster.get("connections")!;
    const noOrg = { metadata: { name: "no-org", namespace: NS, generation: 1 }, spec: { baseURL: emu.baseURL, authURL: emu.authURL, credentials: { secretRef: { name: "creds" } } }, status: ready() };
    cluster.set("connections", [...connections, noOrg]);
    try {
      const yaml = `apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: wants-secret}
spec: {tier: standard, envFrom: [{secretRef: {name: not-there}}]}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: wants-skill}
spec: {tier: standard, skills: [nowhere]}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: wants-pull-secret}
spec: {image: "w:1", imagePullSecretRef: {name: pull-creds}}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: wants-org}
spec: {image: "w:1", connectionRef: {name: no-org}}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: goes-ahead}
spec: {tier: standard}
---
apiVersion: agentcompute.dev/v1alpha1
kind: AgentDeployment
metadata: {name: of-waiting-agent}
spec: {agentRef: {name: wants-pull-secret}, tier: standard}`;
      const p = await plan(reader, manifests(yaml), { prune: false });
      // Its dependant waits as long as it does.
      expect(find(p, "AgentDeployment", "of-waiting-agent").notes).toEqual([
        'after Agent wants-pull-secret is created, which waits: SecretNotFound: Secret "pull-creds" not found in namespace "team" (spec.imagePullSecretRef.name)',
      ]);
      expect(find(p, "Sandbox", "wants-secret")).toMatchObject({ action: "create", notes: ['then waits: SecretNotFound: Secret "not-there" not found in namespace "team" (spec.envFrom[0].secretRef.name)'] });
      expect(find(p, "Sandbox", "wants-skill")).toMatchObject({ action: "create", notes: ['then waits: WaitingForSkill: skill "nowhere" (spec.skills) is neither a Skill resource in this namespace nor a skill in the service'] });
      expect(find(p, "Agent", "wants-pull-secret")).toMatchObject({ action: "create", notes: ['then waits: SecretNotFound: Secret "pull-creds" not found in namespace "team" (spec.imagePullSecretRef.name)'] });
      expect(find(p, "Agent", "wants-org")).toMatchObject({ action: "create", notes: ['then stalls: OrgIdMissing: spec.orgId is not set and Connection "no-org" has no spec.orgId; set one of them'] });
      expect(find(p, "Sandbox", "goes-ahead")).toMatchObject({ action: "create", notes: [] });
      // The Secret in the manifests: no wait.
      const withSecret = `${yaml}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: pull-creds}\nstringData: {registry: r.example, username: u, password: p}`;
      expect(find(await plan(reader, manifests(withSecret), { prune: false }), "Agent", "wants-pull-secret")).toMatchObject({ action: "create", notes: [] });
    } finally {
      cluster.set("connections", connections);
    }
  });

  it("shows a spec change that changes nothing in the service now as a change of the resource, and exits 2 for it", async () => {
    const agent = emu.state.createAgent({ name: "dep-agent", org_id: ORG, image: "d:1" });
    const dep = emu.state.deploy(agent.id, { tier: "standard" });
    const depSpec = { agentId: agent.id, tier: "standard" };
    const applied = optionsHash({ metadata: { uid: "uid-policy-dep" }, spec: depSpec } as unknown as AgentDeployment);
    cluster.set("sandboxes", [liveSandbox("expiring", { tier: "standard", ttlSeconds: 3600 })]);
    cluster.set("agentdeployments", [live("policy-dep", depSpec, { deploymentId: dep.id, optionsHash: applied, configHash: dep.config_hash })]);
    const yaml = (sandbox: string, deployment: string) => `apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: expiring}
spec: {tier: standard, ttlSeconds: 3600${sandbox}}
---
apiVersion: agentcompute.dev/v1alpha1
kind: AgentDeployment
metadata: {name: policy-dep}
spec: {agentId: "${agent.id}", tier: standard${deployment}}`;
    try {
      const same = await plan(reader, manifests(yaml("", "")), { prune: false });
      expect(same.resources.map((r) => [r.action, r.changes, r.specChanged])).toEqual([["none", [], undefined], ["none", [], undefined]]);
      expect(exitCodeOf(same)).toBe(0);

      const p = await plan(reader, manifests(yaml(", keepAlive: false, renewBeforeSeconds: 60, onDelete: Delete, writeConnectionSecretTo: {name: box-conn}", ", deletionPolicy: Orphan")), { prune: false });
      const box = find(p, "Sandbox", "expiring");
      expect(box).toMatchObject({ action: "none", specChanged: true, reason: "only the resource changes: nothing changes in the service now" });
      expect(box.changes).toEqual([
        { path: "spec.keepAlive", old: true, new: false },
        { path: "spec.onDelete", old: "Release", new: "Delete" },
        { path: "spec.renewBeforeSeconds", new: 60 },
        { path: "spec.writeConnectionSecretTo.name", new: "box-conn" },
      ]);
      expect(find(p, "AgentDeployment", "policy-dep")).toMatchObject({ action: "none", specChanged: true, changes: [{ path: "spec.deletionPolicy", old: "Delete", new: "Orphan" }] });
      expect(p.changes).toBe(true);
      expect(exitCodeOf(p)).toBe(2);
      const text = renderText(p);
      expect(text).toMatch(/^agent-operator would perform the following actions/);
      expect(text).toContain(`  ~ Sandbox ${NS}/expiring changes in the cluster only (${box.serviceId ?? ""}): only the resource changes: nothing changes in the service now\n      ~ spec.keepAlive: true -> false\n`);
      expect(text).toContain("Plan: 0 to create, 0 to update, 0 to replace, 0 to delete.\n(2 changed in the cluster only)\n");
      expect(renderMarkdown(p)).toContain(`| \`Sandbox ${NS}/expiring\` | 📝 cluster only |`);
    } finally {
      cluster.set("sandboxes", []);
      cluster.set("agentdeployments", []);
    }
  });

  it("reads a failing list once per plan, not once per resource", async () => {
    const yaml = ["a", "b", "c"].map((n) => `apiVersion: agentcompute.dev/v1alpha1\nkind: Agent\nmetadata: {name: new-${n}}\nspec: {image: "n:1"}`).join("\n---\n");
    emu.injectFault({ method: "GET", path: "/registry/v1/agents", times: Infinity, action: { status: 500 } });
    try {
      const from = emu.requests.length;
      const p = await plan(reader, manifests(yaml), { prune: false });
      for (const n of ["a", "b", "c"]) {
        const r = find(p, "Agent", `new-${n}`);
        expect(r.action).toBe("unknown");
        expect(r.reason).toMatch(/500/);
      }
      // One list, with the client's retries (4 attempts), for the three of them.
      expect(emu.requests.slice(from).filter((r) => r.operation === "agents.list")).toHaveLength(4);
    } finally {
      emu.clearFaults();
    }
    // The next plan reads again.
    const again = await plan(reader, manifests(yaml), { prune: false });
    expect(again.resources.map((r) => r.action)).toEqual(["create", "create", "create"]);
  });

  it("names the envFrom Secrets of a replaced Sandbox only when the manifests change their values", async () => {
    const secrets = cluster.get("secrets")!;
    const b64 = (v: string) => Buffer.from(v).toString("base64");
    cluster.set("secrets", [
      ...secrets,
      { metadata: { name: "env-a", namespace: NS }, data: { A: b64("a-value-1") } },
      { metadata: { name: "env-b", namespace: NS }, data: { B: b64("b-value-1") } },
    ]);
    const spec = { tier: "standard", envFrom: [{ secretRef: { name: "env-a" } }, { secretRef: { name: "env-b" } }] };
    // Made for the org its Connection named before (not in the spec): replaced, with no Secret changed.
    cluster.set("sandboxes", [liveSandbox("from-env", spec, { org_id: "org-before", env: { A: "a-value-1", B: "b-value-1" } })]);
    const yaml = "apiVersion: agentcompute.dev/v1alpha1\nkind: Sandbox\nmetadata: {name: from-env}\nspec: {tier: standard, envFrom: [{secretRef: {name: env-a}}, {secretRef: {name: env-b}}]}";
    try {
      const p = await plan(reader, manifests(yaml), { prune: false });
      expect(find(p, "Sandbox", "from-env")).toMatchObject({ action: "replace", changes: [] });
      // One of them changed by the manifests: named, its value never shown.
      const rotated = `${yaml}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: env-b}\nstringData: {B: b-value-2}`;
      const q = await plan(reader, manifests(rotated), { prune: false });
      expect(find(q, "Sandbox", "from-env")).toMatchObject({ action: "replace", changes: [{ path: "env from Secrets env-b", old: SENSITIVE, new: SENSITIVE }] });
      expect(renderJSON(q)).not.toContain("b-value-2");
    } finally {
      cluster.set("secrets", secrets);
      cluster.set("sandboxes", []);
    }
  });

  it("says a paused resource that cannot be planned cannot be planned once resumed", async () => {
    cluster.set("sandboxes", [liveSandbox("paused-box", { tier: "standard", envFrom: [{ secretRef: { name: "gone" } }] })]);
    try {
      const yaml = 'apiVersion: agentcompute.dev/v1alpha1\nkind: Sandbox\nmetadata: {name: paused-box, annotations: {agentcompute.dev/paused: "true"}}\nspec: {tier: large, envFrom: [{secretRef: {name: gone}}]}';
      const r = find(await plan(reader, manifests(yaml), { prune: false }), "Sandbox", "paused-box");
      expect(r.action).toBe("none");
      expect(r.reason).toMatch(/^paused \(agentcompute\.dev\/paused: "true"\): the operator makes no change in the service; once resumed it cannot be planned: SecretNotFound: /);
    } finally {
      cluster.set("sandboxes", []);
    }
  });

  it("notes a name taken only by an agent of the org the create is made in", async () => {
    emu.state.createAgent({ name: "other-org-name", org_id: "org-other", image: "o:1" });
    emu.state.createAgent({ name: "same-org-name", org_id: ORG, image: "o:1" });
    const yaml = ["other-org-name", "same-org-name"].map((n) => `apiVersion: agentcompute.dev/v1alpha1\nkind: Agent\nmetadata: {name: ${n}}\nspec: {image: "m:1"}`).join("\n---\n");
    const p = await plan(reader, manifests(yaml), { prune: false });
    expect(find(p, "Agent", "other-org-name")).toMatchObject({ action: "create", notes: [] });
    expect(find(p, "Agent", "same-org-name").notes.join()).toContain('an agent named "same-org-name"');
  });

  it("says an update that only adds the operator's marker adds it, not that the agent was changed outside the operator", async () => {
    const registry = emu.state.createAgent({ name: "unmarked", org_id: ORG, image: "u:1", metadata: { team: "a" } });
    cluster.set("agents", [live("unmarked", { image: "u:1", metadata: { team: "a" } }, { agentId: registry.id })]);
    try {
      const yaml = "apiVersion: agentcompute.dev/v1alpha1\nkind: Agent\nmetadata: {name: unmarked}\nspec: {image: \"u:1\", metadata: {team: a}}";
      const r = find(await plan(reader, manifests(yaml), { prune: false }), "Agent", "unmarked");
      expect(r).toMatchObject({ action: "update", changes: [], notes: [`adds the operator's marker (${MARKER_KEY} in the agent's metadata), by which it finds the agent again`] });
      expect(renderText(await plan(reader, manifests(yaml), { prune: false }))).not.toContain('{"team":"a"} -> {"team":"a"}');
    } finally {
      cluster.set("agents", []);
    }
  });

  it("says a Connection that is neither in the cluster nor in the manifests is so, not that the resource waits for it to be Ready", async () => {
    const yaml = "apiVersion: agentcompute.dev/v1alpha1\nkind: Skill\nmetadata: {name: typo-conn}\nspec: {content: c, connectionRef: {name: typo}}";
    expect(find(await plan(reader, manifests(yaml), { prune: false }), "Skill", "typo-conn")).toMatchObject({
      action: "create",
      notes: ['waits for Connection "typo", which is neither in the cluster nor in the manifests; not checked against the service'],
    });
  });

  it("plans a resource being deleted (held by a pause) as the deletion the operator finishes, not as living on, and exits 2", async () => {
    /** A live Sandbox deleted, its finalizer holding it, with `annotations` besides kubectl's. */
    const deleted = (s: ReturnType<typeof liveSandbox>, annotations: Record<string, string> = {}) => ({
      ...s,
      metadata: { ...s.metadata, deletionTimestamp: "2030-01-02T00:00:00Z", finalizers: ["agentcompute.dev/finalizer"], annotations: { ...s.metadata.annotations, ...annotations } },
    });
    const box = liveSandbox("going-box", { tier: "standard" });
    cluster.set("sandboxes", [deleted(box, { "agentcompute.dev/paused": "true" }), deleted(liveSandbox("going-orphan", { tier: "standard", deletionPolicy: "Orphan" }))]);
    try {
      const yaml = (name: string, meta: string, spec: string) => `apiVersion: agentcompute.dev/v1alpha1\nkind: Sandbox\nmetadata: {name: ${name}${meta}}\nspec: {tier: standard${spec}}`;
      const p = await plan(reader, manifests([yaml("going-box", ', annotations: {agentcompute.dev/paused: "true"}', ""), yaml("going-orphan", "", ", deletionPolicy: Orphan")].join("\n---\n")), { prune: false });
      const again = "it is being deleted (metadata.deletionTimestamp 2030-01-02T00:00:00Z): applying does not stop that; apply again once it is gone to have it made anew";
      expect(find(p, "Sandbox", "going-box")).toMatchObject({
        action: "delete",
        serviceId: (box.status as Record<string, unknown>).vmId,
        reason: "its VM is released",
        notes: ["paused: the deletion waits until the annotation is removed", again],
      });
      expect(find(p, "Sandbox", "going-orphan")).toMatchObject({ action: "delete", reason: "the service object is left in place (deletionPolicy: Orphan)", notes: [again] });
      expect(exitCodeOf(p)).toBe(2);
    } finally {
      cluster.set("sandboxes", []);
    }
  });

  it("plans leftover service objects given back as a change (exit 2), only where the operator gives them back: Create allowed, not paused", async () => {
    const yaml = (name: string, meta = "", spec = "") => `apiVersion: agentcompute.dev/v1alpha1\nkind: Sandbox\nmetadata: {name: ${name}${meta}}\nspec: {tier: standard${spec}}`;
    /** A live Sandbox up to date with its VM, and one more VM carrying its marker (what a lost create left). */
    const withLeftover = (name: string, spec: Record<string, unknown> = {}) => {
      const s = liveSandbox(name, { tier: "standard", ...spec });
      return { live: s, leftover: emu.state.allocateVM({ tier: "standard", ttl_seconds: 3600, org_id: ORG, metadata: { [MARKER_KEY]: `uid-${name}` } }).vm_id };
    };
    const kept = withLeftover("kept-box");
    const paused = withLeftover("paused-left");
    const imported = withLeftover("imported-left", { managementPolicies: ["Observe", "Update", "Delete"] });
    const held = withLeftover("held-left", { managementPolicies: ["Observe", "Create", "Delete"] });
    cluster.set("sandboxes", [kept.live, paused.live, imported.live, held.live]);
    try {
      const p = await plan(
        reader,
        manifests([yaml("kept-box"), yaml("paused-left", ', annotations: {agentcompute.dev/paused: "true"}'), yaml("imported-left", "", ", managementPolicies: [Observe, Update, Delete]")].join("\n---\n")),
        { prune: false },
      );
      expect(find(p, "Sandbox", "kept-box")).toMatchObject({ action: "update", reason: `gives back 1 leftover service object(s) carrying its marker: ${kept.leftover}`, changes: [] });
      expect(find(p, "Sandbox", "paused-left")).toMatchObject({ action: "none", notes: [] });
      expect(find(p, "Sandbox", "imported-left")).toMatchObject({ action: "none", notes: [] });
      // A change its policies leave alone (no Update: a new tier is not made) is not listed as
      // made: only the give-back is.
      const heldPlan = await plan(reader, manifests(yaml("held-left", "", ", managementPolicies: [Observe, Create, Delete]").replace("tier: standard", "tier: large")), { prune: false });
      expect(find(heldPlan, "Sandbox", "held-left")).toMatchObject({ action: "update", changes: [], reason: expect.stringContaining(`gives back 1 leftover service object(s) carrying its marker: ${held.leftover}`) });
      expect(exitCodeOf(p)).toBe(2);
      expect(exitCodeOf(await plan(reader, manifests(yaml("paused-left", ', annotations: {agentcompute.dev/paused: "true"}')), { prune: false }))).toBe(0);
    } finally {
      cluster.set("sandboxes", []);
    }
  });

  it("refuses a new resource the spec's CEL rules refuse (an Agent without image, a deployment naming its Agent twice) as the API server would, not plan its create", async () => {
    const agent = (name: string, spec: string) => `apiVersion: agentcompute.dev/v1alpha1\nkind: Agent\nmetadata: {name: ${name}}\nspec: {${spec}}`;
    await expect(plan(reader, manifests(agent("no-image", "description: d")), { prune: false })).rejects.toThrow(
      new ManifestError('m.yaml: Agent "no-image": the API server would refuse it: spec.image is required (unless spec.managementPolicies leaves out Create, to import an existing object)'),
    );
    const deployment = 'apiVersion: agentcompute.dev/v1alpha1\nkind: AgentDeployment\nmetadata: {name: twice}\nspec: {agentId: "a-1", agentRef: {name: x}, tier: standard}';
    await expect(plan(reader, manifests(deployment), { prune: false })).rejects.toThrow('m.yaml: AgentDeployment "twice": the API server would refuse it: set exactly one of spec.agentRef and spec.agentId');
    const sandbox = "apiVersion: agentcompute.dev/v1alpha1\nkind: Sandbox\nmetadata: {name: short}\nspec: {tier: standard, ttlSeconds: 60, renewBeforeSeconds: 60, managementPolicies: ['*', Create]}";
    await expect(plan(reader, manifests(sandbox), { prune: false })).rejects.toThrow(
      'm.yaml: Sandbox "short": the API server would refuse it: spec.managementPolicies: "*" means all of them and stands alone; list either "*" or the ones you want; spec.renewBeforeSeconds must be less than spec.ttlSeconds',
    );
    // Without Create (an import), an image is not needed.
    expect(find(await plan(reader, manifests(agent("imported", "managementPolicies: [Observe]")), { prune: false }), "Agent", "imported").action).toBe("none");
    // One stored before the rule, unchanged, is let through, as the API server's ratcheting does.
    cluster.set("agents", [live("old-no-image", { description: "d" }, {})]);
    try {
      await expect(plan(reader, manifests(agent("old-no-image", "description: d")), { prune: false })).resolves.toBeDefined();
      await expect(plan(reader, manifests(agent("old-no-image", "description: e")), { prune: false })).rejects.toThrow("spec.image is required");
    } finally {
      cluster.set("agents", []);
    }
  });
});
