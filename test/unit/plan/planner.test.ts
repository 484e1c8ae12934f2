// The planner over a fake cluster (lists from memory) and the real in-process emulator: the
// cases the e2e test does not reach (paused, a name taken in the service, a Connection not
// Ready, drift made outside the operator, --prune's scope and deletionPolicy: Orphan), and
// that only GETs (and the token request) reach the service.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startEmulator, type Emulator } from "../../../src/emulator/index.js";
import { MARKER_KEY } from "../../../src/api/names.js";
import type { Agent, Sandbox } from "../../../src/api/index.js";
import { agentRevision } from "../../../src/controllers/agent.js";
import { allocationHash } from "../../../src/controllers/sandbox.js";
import type { AllocateVMRequest } from "../../../src/service/index.js";
import { parseSources } from "../../../src/plan/manifests.js";
import { LAST_APPLIED, plan, type ClusterReader } from "../../../src/plan/planner.js";
import { parseSelector } from "../../../src/plan/selector.js";
import { renderText } from "../../../src/plan/render.js";
import { NS, ORG, find, live, manifests, memoryCluster, ready } from "./helpers.js";

const API_KEY = "planner-unit-key-2b7e";

let emu: Emulator;
let cluster: Map<string, unknown[]>;

const reader = memoryCluster(() => cluster);




beforeAll(async () => {
  emu = await startEmulator({ apiKey: API_KEY, strictBodies: true, orgId: ORG });
  const pausedSkill = emu.state.createSkill({ name: "paused-skill", content: "old" });
  emu.state.createSkill({ name: "taken", content: "someone else's" });
  emu.state.createAgent({ name: "other-team", org_id: ORG, image: "x:1" });
  const drifted = emu.state.createAgent({ name: "drifted", org_id: ORG, image: "img:0", metadata: { [MARKER_KEY]: "uid-drifted" } });
  cluster = new Map<string, unknown[]>([
    ["secrets", [{ metadata: { name: "creds", namespace: NS }, data: { apiKey: Buffer.from(API_KEY).toString("base64") } }]],
    ["configmaps", []],
    [
      "connections",
      [
        { metadata: { name: "default", namespace: NS, generation: 1 }, spec: { baseURL: emu.baseURL, authURL: emu.authURL, orgId: ORG, credentials: { secretRef: { name: "creds" } } }, status: ready() },
        { metadata: { name: "broken", namespace: NS, generation: 1 }, spec: { baseURL: emu.baseURL, authURL: emu.authURL, credentials: { secretRef: { name: "creds" } } }, status: { observedGeneration: 1, conditions: [{ type: "Ready", status: "False", reason: "SecretKeyMissing", message: "no key" }] } },
      ],
    ],
    ["skills", [live("paused-skill", { content: "old" }, { skillName: "paused-skill", contentHash: "h-old", createdAt: pausedSkill.created_at })]],
    [
      "agents",
      [
        live("drifted", { image: "img:1" }, { agentId: drifted.id }),
        live("stuck", { image: "s:1", connectionRef: { name: "broken" } }, { agentId: "ag-stuck" }),
      ],
    ],
    ["agentdeployments", []],
    [
      "sandboxes",
      [
        live("orphaned", { tier: "standard", deletionPolicy: "Orphan" }, { vmId: "vm-1" }),
        live("by-hand", { tier: "standard" }, { vmId: "vm-2" }, {
          annotations: {},
          // Created by hand; another controller applies its status only.
          managedFields: [{ manager: "kubectl-create", operation: "Update" }, { manager: "status-reporter", operation: "Apply", subresource: "status" }],
        }),
        // Server-side applied (Flux's kustomize-controller, kubectl apply --server-side): no last-applied annotation.
        live("flux-applied", { tier: "standard" }, { vmId: "vm-4" }, { annotations: {}, managedFields: [{ manager: "kustomize-controller", operation: "Apply" }] }),
        live("other-app", { tier: "standard" }, { vmId: "vm-3" }, { labels: { app: "other" } }),
      ],
    ],
  ]);
});

afterAll(async () => {
  await emu.close();
});

const MANIFESTS = `
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: paused-skill, annotations: {agentcompute.dev/paused: "true"}, labels: {app: mine}}
spec: {content: new}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: taken, labels: {app: mine}}
spec: {content: mine}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: other-team, labels: {app: mine}}
spec: {image: "y:1"}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: drifted, labels: {app: mine}}
spec: {image: "img:1"}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: stuck, labels: {app: mine}}
spec: {image: "s:2", connectionRef: {name: broken}}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: later, labels: {app: mine}}
spec: {image: "l:1", connectionRef: {name: broken}}
---
apiVersion: agentcompute.dev/v1alpha1
kind: AgentDeployment
metadata: {name: orphan-dep, labels: {app: mine}}
spec: {agentRef: {name: nowhere}, tier: standard}
`;

describe("planner", () => {
  it("plans each case as the operator would act, reading only", async () => {
    const from = emu.requests.length;
    const p = await plan(reader, manifests(MANIFESTS), { prune: true, selector: parseSelector("app!=other") });

    const paused = find(p, "Skill", "paused-skill");
    expect(paused.action).toBe("none");
    expect(paused.reason).toMatch(/^paused \(agentcompute\.dev\/paused: "true"\).*once resumed it would update/);

    expect(find(p, "Skill", "taken")).toMatchObject({ action: "unknown" });
    expect(find(p, "Skill", "taken").reason).toMatch(/^NameTaken: a skill named "taken" already exists/);

    const nameTaken = find(p, "Agent", "other-team");
    expect(nameTaken.action).toBe("create");
    expect(nameTaken.notes.join()).toContain('an agent named "other-team"');

    expect(find(p, "Agent", "drifted")).toMatchObject({
      action: "update",
      changes: [{ path: "spec.image", old: "img:0", new: "img:1" }],
      notes: ["the registry differs from the spec (changed outside the operator): put back"],
    });

    const stuck = find(p, "Agent", "stuck");
    expect(stuck.action).toBe("unknown");
    expect(stuck.reason).toBe('ConnectionNotReady: Connection "broken" is not Ready: no key');
    expect(stuck.changes).toEqual([{ path: "spec.image", old: "s:1", new: "s:2" }]);

    const later = find(p, "Agent", "later");
    expect(later.action).toBe("create");
    expect(later.notes.join()).toContain('after Connection "broken" is Ready; not checked against the service');

    expect(find(p, "AgentDeployment", "orphan-dep")).toMatchObject({
      action: "create",
      notes: ["waits for Agent nowhere, which is neither in the cluster nor in the manifests"],
    });

    // --prune: only what was applied (kubectl apply's last-applied, or server-side apply as
    // Flux does), matching the selector; Orphan said.
    const deletes = p.resources.filter((r) => r.action === "delete");
    expect(deletes.map((r) => `${r.kind}/${r.name}`)).toEqual(["Sandbox/orphaned", "Sandbox/flux-applied"]);
    expect(find(p, "Sandbox", "orphaned")).toMatchObject({ serviceId: "vm-1", reason: "the service object is left in place (deletionPolicy: Orphan)" });

    expect(p.summary).toEqual({ create: 3, update: 1, replace: 0, delete: 2, unchanged: 1, unknown: 2 });

    const calls = emu.requests.slice(from);
    expect(calls.filter((r) => r.method !== "GET" && r.operation !== "token")).toEqual([]);
    expect(calls.some((r) => r.operation === "skills.list")).toBe(true);
  });

  it("plans nothing to delete without --prune, and no changes for what matches; a Namespace touches no namespace", async () => {
    const paths: string[] = [];
    const tracking: ClusterReader = { list: (path) => (paths.push(path), reader.list(path)) };
    const yaml = "apiVersion: v1\nkind: Namespace\nmetadata: {name: elsewhere}\n---\napiVersion: agentcompute.dev/v1alpha1\nkind: Skill\nmetadata: {name: paused-skill}\nspec: {content: old}";
    const p = await plan(tracking, manifests(yaml), { prune: false });
    expect(paths.every((path) => path.includes(`/namespaces/${NS}/`))).toBe(true);
    expect(p.resources).toEqual([expect.objectContaining({ kind: "Skill", name: "paused-skill", action: "none", serviceId: "paused-skill" })]);
    expect(p.changes).toBe(false);
  });
  it("with --prune, lists no namespace for a cluster-scoped kind it learns of from discovery", async () => {
    // The parser gives every object without a namespace the default one; a ClusterIssuer has none.
    const paths: string[] = [];
    const discovering: ClusterReader = {
      list: (path) => (paths.push(path), reader.list(path)),
      namespaced: async (apiVersion, kind) => (apiVersion === "cert-manager.io/v1" && kind === "ClusterIssuer" ? false : undefined),
    };
    const yaml = `apiVersion: cert-manager.io/v1\nkind: ClusterIssuer\nmetadata: {name: letsencrypt}\n---\napiVersion: agentcompute.dev/v1alpha1\nkind: Skill\nmetadata: {name: paused-skill, namespace: ${NS}}\nspec: {content: old}`;
    const parsed = parseSources([{ name: "m.yaml", text: yaml }], "default");
    await plan(discovering, parsed, { prune: true });
    expect(paths.length).toBeGreaterThan(0);
    expect(paths.filter((path) => path.includes("/namespaces/default/"))).toEqual([]);
    // Without discovery's answer, a kind it does not know is namespaced (as kubectl assumes of a manifest's kind).
    paths.length = 0;
    await plan({ list: discovering.list }, parsed, { prune: true });
    expect(paths.some((path) => path.includes("/namespaces/default/"))).toBe(true);
    // Its CustomResourceDefinition among the manifests (not installed yet) says so too.
    paths.length = 0;
    const crd = `apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: clusterissuers.cert-manager.io}\nspec: {group: cert-manager.io, scope: Cluster, names: {kind: ClusterIssuer, plural: clusterissuers}, versions: [{name: v1, served: true, storage: true}]}`;
    await plan({ list: discovering.list }, parseSources([{ name: "m.yaml", text: `${crd}\n---\n${yaml}` }], "default"), { prune: true });
    expect(paths.filter((path) => path.includes("/namespaces/default/"))).toEqual([]);
  });

  it("plans no change for a resource whose list items the API server returns with their keys in another order", async () => {
    // The API server answers a custom resource's objects with their keys sorted; a manifest
    // keeps the author's order (name, then command).
    cluster.set("sandboxruns", [
      {
        metadata: { name: "nightly", namespace: NS, uid: "uid-nightly", generation: 1, annotations: { [LAST_APPLIED]: "{}" } },
        spec: {
          envFrom: [{ prefix: "X_", secretRef: { name: "creds" } }],
          sandboxRef: { name: "box" },
          steps: [{ command: "make test", name: "test" }, { code: "print(1)", language: "python", name: "py" }],
        },
        status: { phase: "Succeeded" },
      },
    ]);
    const yaml = `apiVersion: agentcompute.dev/v1alpha1
kind: SandboxRun
metadata: {name: nightly}
spec:
  sandboxRef: {name: box}
  envFrom: [{secretRef: {name: creds}, prefix: X_}]
  steps:
    - name: test
      command: make test
    - {name: py, language: python, code: "print(1)"}`;
    try {
      const p = await plan(reader, manifests(yaml), { prune: false });
      expect(find(p, "SandboxRun", "nightly")).toMatchObject({ action: "none", changes: [] });
      expect(p.changes).toBe(false);
      // A real change is still one.
      const changed = await plan(reader, manifests(yaml.replace("make test", "make check")), { prune: false });
      expect(find(changed, "SandboxRun", "nightly").action).toBe("unknown");
    } finally {
      cluster.delete("sandboxruns");
    }
  });

  it("sees the pause annotation a server-side apply set go when its manifest drops it (as Flux applies)", async () => {
    const made = emu.state.createSkill({ name: "ssa-paused", content: "old" });
    const ssa = {
      manager: "kustomize-controller",
      operation: "Apply",
      fieldsV1: { "f:metadata": { "f:annotations": { "f:agentcompute.dev/paused": {} } }, "f:spec": { "f:content": {} } },
    };
    const skills = cluster.get("skills")!;
    cluster.set("skills", [...skills, live("ssa-paused", { content: "old" }, { skillName: "ssa-paused", contentHash: "h-old", createdAt: made.created_at }, { annotations: { "agentcompute.dev/paused": "true" }, managedFields: [ssa] })]);
    try {
      const yaml = "apiVersion: agentcompute.dev/v1alpha1\nkind: Skill\nmetadata: {name: ssa-paused}\nspec: {content: new}";
      const p = await plan(reader, manifests(yaml), { prune: false });
      expect(find(p, "Skill", "ssa-paused")).toMatchObject({ action: "update", changes: [{ path: "spec.content", old: "old", new: "new" }] });
      // Set by someone else (no Apply of it): it stays, and the plan says paused.
      const other = { ...ssa, fieldsV1: { "f:spec": { "f:content": {} } } };
      cluster.set("skills", [...skills, live("ssa-paused", { content: "old" }, { skillName: "ssa-paused", contentHash: "h-old", createdAt: made.created_at }, { annotations: { "agentcompute.dev/paused": "true" }, managedFields: [other] })]);
      expect(find(await plan(reader, manifests(yaml), { prune: false }), "Skill", "ssa-paused").action).toBe("none");
    } finally {
      cluster.set("skills", skills);
    }
  });

  it("says a VM adopted with the annotation is not replaced for a spec that needs a new one", async () => {
    const vm = emu.state.allocateVM({ tier: "standard", ttl_seconds: 600, org_id: ORG, metadata: {} });
    const sandboxes = cluster.get("sandboxes")!;
    const adopted = live("adopted", { tier: "standard" }, { vmId: vm.vm_id, configHash: "made-for-the-old-spec" }, {
      annotations: { [LAST_APPLIED]: "{}", "agentcompute.dev/external-id": vm.vm_id },
    });
    cluster.set("sandboxes", [...sandboxes, adopted]);
    try {
      const yaml = `apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: adopted, annotations: {agentcompute.dev/external-id: ${vm.vm_id}}}
spec: {tier: large}`;
      const p = await plan(reader, manifests(yaml), { prune: false });
      expect(find(p, "Sandbox", "adopted")).toMatchObject({ action: "unknown", changes: [{ path: "spec.tier", old: "standard", new: "large" }] });
      expect(find(p, "Sandbox", "adopted").reason).toMatch(/^AdoptedVMNotReplaced: .*remove the annotation to have it replaced/);
    } finally {
      cluster.set("sandboxes", sandboxes);
    }
  });

  it("follows spec.managementPolicies: no create without Create, no update without Update", async () => {
    const yaml = `apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: drifted}
spec: {image: "img:1", managementPolicies: [Observe, Create, Delete]}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: imported}
spec: {managementPolicies: [Observe]}`;
    const p = await plan(reader, manifests(yaml), { prune: false });
    expect(find(p, "Agent", "drifted").action).toBe("none");
    expect(find(p, "Agent", "drifted").reason).toMatch(/leaves out Update: the differences would be reported \(condition Drifted\), not applied/);
    expect(find(p, "Agent", "imported")).toMatchObject({ action: "none" });
    expect(find(p, "Agent", "imported").reason).toMatch(/^ExternalNotFound: .*leaves out Create/);
    // Nothing changes in the service, but applying changes the resources (drifted gets its
    // policies, imported is new): a change all the same.
    expect(find(p, "Agent", "drifted").specChanged).toBe(true);
    expect(find(p, "Agent", "imported").specChanged).toBe(true);
    expect(p.changes).toBe(true);
    // Its policies applied already: the drift held back is no change.
    const agents = cluster.get("agents")!;
    cluster.set("agents", agents.map((a) => ((a as { metadata: { name: string } }).metadata.name === "drifted" ? live("drifted", { image: "img:1", managementPolicies: ["Observe", "Create", "Delete"] }, (a as { status: Record<string, unknown> }).status) : a)));
    try {
      const applied = await plan(reader, manifests(yaml.split("---")[0] ?? ""), { prune: false });
      expect(find(applied, "Agent", "drifted")).toMatchObject({ action: "none" });
      expect(find(applied, "Agent", "drifted").specChanged).toBeUndefined();
      expect(applied.changes).toBe(false);
    } finally {
      cluster.set("agents", agents);
    }
  });

  it("says a failed deployment would be reported, and its replacement with it, when its policies leave out Update", async () => {
    const agent = emu.state.createAgent({ name: "crashing", org_id: ORG, image: "c:1" });
    const dep = emu.state.deploy(agent.id, { tier: "standard" });
    emu.state.setDeploymentState(dep.id, "failed");
    const spec = { agentId: agent.id, tier: "large", managementPolicies: ["Observe", "Create", "Delete"] };
    cluster.set("agentdeployments", [live("crashing", spec, { deploymentId: dep.id, optionsHash: "applied-before", configHash: dep.config_hash })]);
    try {
      const yaml = `apiVersion: agentcompute.dev/v1alpha1
kind: AgentDeployment
metadata: {name: crashing}
spec: {agentId: "${agent.id}", tier: large, managementPolicies: [Observe, Create, Delete]}`;
      const r = find(await plan(reader, manifests(yaml), { prune: false }), "AgentDeployment", "crashing");
      expect(r.action).toBe("none");
      expect(r.reason).toMatch(/leaves out Update: the replacement would be reported \(condition Drifted\)/);
      expect(r.notes.join("\n")).toMatch(/DeploymentFailed: the service reports deployment \S+ as failed/);
    } finally {
      cluster.set("agentdeployments", []);
    }
  });

  it("plans no redeploy for an unchanged Agent whose manifest is written in another key order than the API server's", async () => {
    // The API server hands a free-form manifest back with its keys sorted (Go's maps); the
    // revision recorded by the operator was taken over that copy.
    const sortedManifest = { description: "Labels tickets.", input_schema: { properties: { ticket: { type: "string" } }, type: "object" }, name: "triage", version: "1.4.2" };
    const registry = emu.state.createAgent({ name: "triage", org_id: ORG, image: "t:1", metadata: { [MARKER_KEY]: "uid-triage" } });
    const dep = emu.state.deploy(registry.id, { tier: "standard" });
    const liveAgent = live("triage", { image: "t:1", manifest: sortedManifest }, { agentId: registry.id });
    const revision = agentRevision(liveAgent as unknown as Agent);
    (liveAgent.status as Record<string, unknown>).revision = revision;
    const agents = cluster.get("agents")!;
    cluster.set("agents", [...agents, liveAgent]);
    cluster.set("agentdeployments", [live("triage-prod", { agentRef: { name: "triage" }, tier: "standard" }, { deploymentId: dep.id, agentId: registry.id, agentRevision: revision })]);
    try {
      const yaml = `apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: triage}
spec:
  image: "t:1"
  manifest:
    name: triage
    version: "1.4.2"
    description: Labels tickets.
    input_schema:
      type: object
      properties:
        ticket: {type: string}
---
apiVersion: agentcompute.dev/v1alpha1
kind: AgentDeployment
metadata: {name: triage-prod}
spec: {agentRef: {name: triage}, tier: standard}`;
      const p = await plan(reader, manifests(yaml), { prune: false });
      const d = find(p, "AgentDeployment", "triage-prod");
      expect(d.reason).toBeUndefined();
      expect(d.action).toBe("none");
      // A real change of the manifest is still a redeploy.
      const changed = await plan(reader, manifests(yaml.replace("ticket: {type: string}", "ticket: {type: integer}")), { prune: false });
      expect(find(changed, "AgentDeployment", "triage-prod").reason).toMatch(/^redeploy: the Agent changed/);
    } finally {
      cluster.set("agents", agents);
      cluster.set("agentdeployments", []);
    }
  });

  it("reads YAML merge keys as kubectl does: a Sandbox written with one plans as it does without", async () => {
    const vm = emu.state.allocateVM({ tier: "large", ttl_seconds: 600, org_id: ORG, metadata: {} });
    const sandboxes = cluster.get("sandboxes")!;
    // Made for tier large: a spec that reads otherwise (a merge key left unread: no tier) replaces it.
    const configHash = allocationHash({ metadata: { uid: "uid-merged" }, spec: { tier: "large" } } as Sandbox, { tier: "large", org_id: ORG } as AllocateVMRequest);
    cluster.set("sandboxes", [...sandboxes, live("merged", { tier: "large", ttlSeconds: 600 }, { vmId: vm.vm_id, tier: "large", configHash })]);
    try {
      const plain = "apiVersion: agentcompute.dev/v1alpha1\nkind: Sandbox\nmetadata: {name: merged}\nspec: {tier: large, ttlSeconds: 600}";
      const merged = "apiVersion: agentcompute.dev/v1alpha1\nkind: Sandbox\nmetadata: {name: merged}\nspec:\n  <<: &common\n    tier: large\n  ttlSeconds: 600";
      const withMerge = find(await plan(reader, manifests(merged), { prune: false }), "Sandbox", "merged");
      const without = find(await plan(reader, manifests(plain), { prune: false }), "Sandbox", "merged");
      expect(withMerge).toEqual({ ...without, source: withMerge.source });
      expect(withMerge).toMatchObject({ action: "none", changes: [] });
    } finally {
      cluster.set("sandboxes", sandboxes);
    }
  });

  it("names each pruned resource by its own service object: an AgentDeployment by its deployment, not its Agent", async () => {
    const status = { deploymentId: "dep-to-go", agentId: "ag-of-the-agent" };
    cluster.set("agentdeployments", [live("dropped-dep", { agentRef: { name: "drifted" }, tier: "standard" }, status)]);
    try {
      const yaml = "apiVersion: agentcompute.dev/v1alpha1\nkind: Skill\nmetadata: {name: paused-skill}\nspec: {content: old}";
      const p = await plan(reader, manifests(yaml), { prune: true });
      expect(find(p, "AgentDeployment", "dropped-dep")).toMatchObject({ action: "delete", serviceId: "dep-to-go" });
      expect(renderText(p)).toContain(`  - AgentDeployment ${NS}/dropped-dep will be deleted (dep-to-go): its service object is deleted`);
    } finally {
      cluster.set("agentdeployments", []);
    }
  });

  it("names an AgentDeployment's deployment, not its Agent, when observe finds it by its marker", async () => {
    const agent = emu.state.createAgent({ name: "found-again", org_id: ORG, image: "f:1" });
    const dep = emu.state.deploy(agent.id, { tier: "standard", metadata: { [MARKER_KEY]: "uid-lost-status" } });
    // Its status write was lost: no deploymentId; the deployment carries the resource's marker.
    cluster.set("agentdeployments", [live("lost-status", { agentId: agent.id, tier: "standard" }, {}, { uid: "uid-lost-status" })]);
    try {
      const yaml = `apiVersion: agentcompute.dev/v1alpha1\nkind: AgentDeployment\nmetadata: {name: lost-status}\nspec: {agentId: "${agent.id}", tier: standard}`;
      const r = find(await plan(reader, manifests(yaml), { prune: false }), "AgentDeployment", "lost-status");
      expect(r.serviceId).toBe(dep.id);
    } finally {
      cluster.set("agentdeployments", []);
    }
  });

  it("says a deployment adopted with the annotation is not replaced for a spec that needs a new one", async () => {
    const agent = emu.state.createAgent({ name: "imported-agent", org_id: ORG, image: "i:1" });
    const dep = emu.state.deploy(agent.id, { tier: "standard" });
    const spec = { agentId: agent.id, tier: "standard" };
    cluster.set("agentdeployments", [
      live("imported-dep", spec, { deploymentId: dep.id, optionsHash: "applied-before", configHash: dep.config_hash }, {
        annotations: { [LAST_APPLIED]: "{}", "agentcompute.dev/external-id": dep.id },
      }),
    ]);
    try {
      const yaml = `apiVersion: agentcompute.dev/v1alpha1
kind: AgentDeployment
metadata: {name: imported-dep, annotations: {agentcompute.dev/external-id: ${dep.id}}}
spec: {agentId: "${agent.id}", tier: large}`;
      const p = await plan(reader, manifests(yaml), { prune: false });
      const r = find(p, "AgentDeployment", "imported-dep");
      expect(r).toMatchObject({ action: "unknown", serviceId: dep.id, changes: [{ path: "spec.tier", old: "standard", new: "large" }] });
      expect(r.reason).toMatch(
        new RegExp(
          `^AdoptedDeploymentNotReplaced: the deploy options in the spec changed \\(.*\\), which needs a new deployment, but the annotation agentcompute\\.dev/external-id names deployment ${dep.id}: the operator will not replace it \\(remove the annotation to have it replaced\\)$`,
        ),
      );
      // Without the annotation, the same change is a replacement.
      const plainYaml = yaml.replace(/, annotations: \{[^}]*\}/, "");
      cluster.set("agentdeployments", [live("imported-dep", spec, { deploymentId: dep.id, optionsHash: "applied-before", configHash: dep.config_hash })]);
      expect(find(await plan(reader, manifests(plainYaml), { prune: false }), "AgentDeployment", "imported-dep").action).toBe("replace");
    } finally {
      cluster.set("agentdeployments", []);
    }
  });
});
