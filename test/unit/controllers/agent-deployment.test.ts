// AgentDeployment: the service has no update for deployments, so every difference is one
// action (replace, stop, redeploy) or none. The plan table, then the same decisions end to end
// against the emulator: which calls are made, and what status records.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Annotations, FINALIZER, MARKER_KEY, OPTIONS_HASH_KEY } from "../../../src/api/names.js";
import type { Agent, AgentDeployment, AgentDeploymentStatus, Connection, Sandbox, Skill } from "../../../src/api/index.js";
import { startEmulator } from "../../../src/emulator/index.js";
import { sandboxes } from "../../../src/controllers/sandbox.js";
import { agentDeployments, desiredOptions, optionsHash, planFor, type Target } from "../../../src/controllers/agent-deployment.js";
import { skills } from "../../../src/controllers/skill.js";
import type { Deployment } from "../../../src/service/index.js";
import { API_KEY, condition, NS, ORG, World } from "./helpers.js";

describe("AgentDeployment plan", () => {
  const target: Target = { agentId: "ag-1", revision: "rev-1" };
  const spec: AgentDeployment["spec"] = { agentRef: { name: "a" }, tier: "standard" };
  const cr = (over: { spec?: Partial<AgentDeployment["spec"]>; status?: AgentDeployment["status"]; annotations?: Record<string, string> } = {}): AgentDeployment => {
    const base: AgentDeployment = {
      apiVersion: "agentcompute.dev/v1alpha1",
      kind: "AgentDeployment",
      metadata: { name: "d", namespace: "ns", uid: "u-1", generation: 1, annotations: over.annotations },
      spec: { ...spec, ...over.spec },
    };
    const applied = optionsHash(base);
    return { ...base, status: { deploymentId: "dep-1", optionsHash: applied, configHash: "cfg-1", agentRevision: "rev-1", ...over.status } };
  };
  const running: Deployment = { id: "dep-1", registry_id: "ag-1", state: "running", config_hash: "cfg-1" };

  it("does nothing when what runs is what the spec asks for", () => {
    expect(planFor(cr(), running, target)).toEqual({ action: "none" });
  });

  it("replaces when the deploy options in the spec change (their hash, not the record, tells)", () => {
    const changed = cr({ spec: { tier: "large" } });
    const recorded = cr().status?.optionsHash;
    expect(planFor({ ...changed, status: { ...changed.status, optionsHash: recorded } }, running, target)).toMatchObject({
      action: "replace",
      why: expect.stringContaining("deploy options in the spec changed"),
    });
  });

  it("replaces when the service's config_hash drifted from what the operator left", () => {
    expect(planFor(cr(), { ...running, config_hash: "cfg-other" }, target)).toMatchObject({
      action: "replace",
      why: expect.stringContaining("changed outside the operator (config_hash cfg-1 is now cfg-other)"),
    });
  });

  it("replaces when the agent it runs is another one", () => {
    expect(planFor(cr(), { ...running, registry_id: "ag-0" }, target)).toMatchObject({ action: "replace" });
  });

  it("stops on suspend, and does nothing more once stopped", () => {
    expect(planFor(cr({ spec: { suspend: true } }), running, target)).toEqual({ action: "stop" });
    expect(planFor(cr({ spec: { suspend: true } }), { ...running, state: "stopped" }, target)).toEqual({ action: "none" });
  });

  it("redeploys a stopped deployment when suspend is false", () => {
    expect(planFor(cr(), { ...running, state: "stopped" }, target)).toEqual({ action: "redeploy", why: "it was stopped and spec.suspend is false" });
  });

  it("redeploys once per new redeploy-at value", () => {
    const asked = cr({ annotations: { [Annotations.redeployAt]: "t2" }, status: { redeployAt: "t1" } });
    expect(planFor(asked, running, target)).toMatchObject({ action: "redeploy", why: expect.stringContaining('"t2"') });
    const done = cr({ annotations: { [Annotations.redeployAt]: "t2" }, status: { redeployAt: "t2" } });
    expect(planFor(done, running, target)).toEqual({ action: "none" });
  });

  it("redeploys when the Agent has a new revision", () => {
    expect(planFor(cr(), running, { ...target, revision: "rev-2" })).toEqual({ action: "redeploy", why: "the Agent changed (revision rev-2)" });
  });

  it("does not replace a deployment the adoption annotation names for a configuration changed in the service", () => {
    const imported = cr({ annotations: { [Annotations.externalId]: "dep-1" } });
    expect(planFor(imported, { ...running, config_hash: "cfg-other" }, target)).toEqual({ action: "none" });
  });

  it("takes a deployment with no recorded optionsHash as running the spec (adopted): no action", () => {
    const adopted = cr({ status: { optionsHash: undefined, configHash: undefined, agentRevision: undefined } });
    expect(planFor(adopted, { ...running, config_hash: "whatever" }, target)).toEqual({ action: "none" });
  });
});

describe("AgentDeployment against the service", () => {
  let w: World;
  let agentId: string;
  beforeEach(async () => {
    w = await World.start();
    agentId = w.emu.state.createAgent({ name: "a", org_id: ORG, image: "registry.example/a:1" }).id;
    w.apply<Agent>("agents", { metadata: { name: "a" }, spec: { image: "registry.example/a:1" } });
    setAgentRevision("rev-1");
  });
  afterEach(async () => {
    await w.close();
  });

  function setAgentRevision(revision: string): void {
    w.setStatus("agents", "a", {
      agentId,
      revision,
      observedGeneration: w.get<Agent>("agents", "a").metadata.generation,
      conditions: [{ type: "Ready", status: "True", lastTransitionTime: "2030-01-01T00:00:00Z" }],
    });
  }
  const kind = () => agentDeployments(w.ctx);
  const apply = (spec: Partial<AgentDeployment["spec"]> = {}, annotations?: Record<string, string>) =>
    w.apply<AgentDeployment>("agentdeployments", { metadata: { name: "d", annotations }, spec: { agentRef: { name: "a" }, tier: "standard", ...spec } });
  const deployment = () => w.get<AgentDeployment>("agentdeployments", "d");
  const resync = () => w.handle().deployments.invalidate();
  /** The Skill resource "sk" making the skill "triage", not Ready yet (its create failing for now). */
  const skillNotReadyYet = () => {
    w.apply<Skill>("skills", { metadata: { name: "sk" }, spec: { name: "triage", content: "# c" } });
    w.setStatus("skills", "sk", { conditions: [{ type: "Ready", status: "False", reason: "ServiceUnavailable", lastTransitionTime: "2030-01-01T00:00:00Z" }] });
  };

  it("deploys again, once its Agent has a new revision, a deployment the service refused for the Agent (its image); not before", async () => {
    w.emu.injectFault({ method: "POST", path: `/compute/v1/agents/${agentId}/deploy`, times: 1, action: { status: 400, body: { code: 400, error_code: "bad_image", message: "image registry.example/a:1 cannot be deployed" } } });
    // One reconciler throughout: it remembers what the refusal was made with.
    const kept = w.kindOf(agentDeployments);
    apply();
    await w.reconcile(kept, "d");
    expect(condition(deployment(), "Stalled")).toMatchObject({ status: "True", reason: "ServiceRejected" });
    w.calls();
    await w.reconcile(kept, "d");
    expect(w.writes()).toEqual([]);

    w.apply<Agent>("agents", { metadata: { name: "a" }, spec: { image: "registry.example/a:2" } });
    setAgentRevision("rev-2");
    await w.reconcile(kept, "d");
    expect(w.writes()).toEqual(["deployments.deploy"]);
    expect(deployment().status?.agentRevision).toBe("rev-2");
  });

  it("a Sandbox of its name has the Secret of the default name: says whose it is and how to move, not to delete it (its owner writes it again)", async () => {
    w.apply<Sandbox>("sandboxes", { metadata: { name: "d" }, spec: { tier: "standard", ttlSeconds: 600 } });
    await w.reconcile(w.kindOf(sandboxes), "d");
    apply();
    await w.reconcile(kind(), "d");
    const ready = condition(deployment(), "Ready");
    expect(ready).toMatchObject({ status: "False", reason: "SecretConflict" });
    expect(ready?.message).toBe('Secret "d-agentcompute" is the connection Secret of Sandbox "d"; set spec.writeConnectionSecretTo.name to another name');

    apply({ writeConnectionSecretTo: { name: "d-deployment" } });
    await w.reconcile(kind(), "d");
    expect(condition(deployment(), "Ready")?.status).toBe("True");
  });

  it("the Secret of an earlier resource of its kind and name (deleted and made again, its Secret not collected yet): says to delete it", async () => {
    w.secrets.set({
      metadata: { name: "d-agentcompute", namespace: NS, ownerReferences: [{ uid: "earlier-uid", controller: true, kind: "AgentDeployment", name: "d" }] },
      type: "agentcompute.dev/connection",
      data: {},
    });
    apply();
    await w.reconcile(kind(), "d");
    expect(condition(deployment(), "Ready")).toMatchObject({
      reason: "SecretConflict",
      message: 'Secret "d-agentcompute" exists and is not owned by this resource; set spec.writeConnectionSecretTo.name to another name or delete that Secret',
    });
  });

  it("waiting for an Agent its registry lacks, says when the Agent is registered through another Connection, and how to deploy through that one", async () => {
    // Another account: another service.
    const other = await startEmulator({ apiKey: API_KEY, orgId: ORG });
    try {
      w.apply<Connection>("connections", { metadata: { name: "prod" }, spec: { baseURL: other.baseURL, authURL: other.authURL, orgId: ORG, credentials: { secretRef: { name: "creds" } } } });
      w.setStatus("connections", "prod", { observedGeneration: 1, conditions: [{ type: "Ready", status: "True", lastTransitionTime: "2030-01-01T00:00:00Z" }] });
      apply({ connectionRef: { name: "prod" } });
      await w.reconcile(kind(), "d");
      expect(condition(deployment(), "Ready")).toMatchObject({
        status: "False",
        reason: "WaitingForAgent",
        message: expect.stringContaining('Agent "a" is registered through Connection "default", this deployment deploys through "prod": if they reach different accounts, set spec.connectionRef.name to "default"'),
      });
    } finally {
      await other.close();
    }
  });

  it("deploys and records the options hash, the service's config_hash and the agent revision", async () => {
    const cr = apply();
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual(["deployments.deploy"]);
    const id = deployment().status?.deploymentId as string;
    expect(deployment().status).toMatchObject({
      optionsHash: optionsHash(cr),
      configHash: w.emu.state.deployments.get(id)?.config_hash,
      agentRevision: "rev-1",
    });
    expect(w.emu.state.deployments.get(id)?.metadata?.[MARKER_KEY]).toBe(cr.metadata.uid);
  });

  it("waits for an Agent that has no id yet", async () => {
    w.setStatus("agents", "a", { agentId: undefined });
    apply();
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual([]);
    expect(condition(deployment(), "Ready")).toMatchObject({ status: "False", reason: "WaitingForAgent" });
  });

  it("says nothing while its Agent is still being created (no status yet): that wait is normal in a large apply", async () => {
    w.apply<Agent>("agents", { metadata: { name: "new" }, spec: { image: "registry.example/new:1" } });
    w.apply<AgentDeployment>("agentdeployments", { metadata: { name: "d" }, spec: { agentRef: { name: "new" }, tier: "standard" } });
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual([]);
    expect(deployment().status).toBeUndefined();
    expect(w.events).toEqual([]);
  });

  it("reports at once, naming the Agent's reason, when its Agent is in trouble", async () => {
    w.setStatus("agents", "a", {
      agentId: undefined,
      conditions: [{ type: "Ready", status: "False", reason: "ConnectionNotReady", lastTransitionTime: "2030-01-01T00:00:00Z" }],
    });
    apply();
    await w.reconcile(kind(), "d");
    expect(condition(deployment(), "Ready")).toMatchObject({
      status: "False",
      reason: "WaitingForAgent",
      message: 'Agent "a" has no id in the registry yet; the Agent is not Ready (ConnectionNotReady)',
    });
    expect(w.events).toMatchObject([{ type: "Warning", reason: "WaitingForAgent" }]);
  });

  it("waits for a Skill resource of a skill it loads until that is Ready (apply order never matters); a skill no Skill resource makes is the service's", async () => {
    w.apply<Skill>("skills", { metadata: { name: "sk" }, spec: { name: "triage", content: "# c" } });
    apply({ skills: ["triage", "made-elsewhere"] });
    w.calls();
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual([]);
    w.setStatus("skills", "sk", { conditions: [{ type: "Ready", status: "False", reason: "ServiceRejected", lastTransitionTime: "2030-01-01T00:00:00Z" }] });
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual([]);
    expect(condition(deployment(), "Ready")).toMatchObject({ status: "False", reason: "WaitingForSkill" });
    expect(condition(deployment(), "Ready")?.message).toBe('Skill "sk" (spec.skills) is not Ready yet: ServiceRejected');
    w.setStatus("skills", "sk", { skillName: "triage", conditions: [{ type: "Ready", status: "True", lastTransitionTime: "2030-01-01T00:00:00Z" }] });
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual(["deployments.deploy"]);
    expect(condition(deployment(), "Ready")?.status).toBe("True");
  });

  it("of two Skill resources claiming the skill it loads, waits for the one that makes it, not the NameTaken one", async () => {
    w.apply<Skill>("skills", { metadata: { name: "copy" }, spec: { name: "triage", content: "# v2" } });
    w.apply<Skill>("skills", { metadata: { name: "sk" }, spec: { name: "triage", content: "# v1" } });
    await w.reconcile(w.kindOf(skills), "sk");
    await w.reconcile(w.kindOf(skills), "copy");
    expect(condition(w.get<Skill>("skills", "copy"), "Ready")).toMatchObject({ status: "False", reason: "NameTaken" });
    apply({ skills: ["triage"] });
    w.calls();
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual(["deployments.deploy"]);
  });

  it("waits for the Skill resource of the skill it loads on its own Connection, not one of that name on another (another account)", async () => {
    const ready = [{ type: "Ready", status: "True", lastTransitionTime: "2030-01-01T00:00:00Z" }];
    w.apply<Skill>("skills", { metadata: { name: "elsewhere" }, spec: { name: "triage", content: "# c", connectionRef: { name: "other" } } });
    w.setStatus("skills", "elsewhere", { skillName: "triage", conditions: ready });
    skillNotReadyYet();
    apply({ skills: ["triage"] });
    w.calls();
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual([]);
    expect(condition(deployment(), "Ready")?.message).toBe('Skill "sk" (spec.skills) is not Ready yet: ServiceUnavailable');
    w.setStatus("skills", "sk", { skillName: "triage", conditions: ready });
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual(["deployments.deploy"]);
  });

  it("a replacement that adds a skill whose Skill resource is not Ready yet keeps the running deployment until it is", async () => {
    apply();
    await w.reconcile(kind(), "d");
    const running = deployment().status?.deploymentId as string;
    skillNotReadyYet();
    apply({ skills: ["triage"] });
    w.calls();
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual([]);
    expect(w.emu.state.deployments.has(running)).toBe(true);
    expect(deployment().status?.deploymentId).toBe(running);
    expect(condition(deployment(), "Ready")).toMatchObject({ status: "False", reason: "WaitingForSkill" });
    w.setStatus("skills", "sk", { skillName: "triage", conditions: [{ type: "Ready", status: "True", lastTransitionTime: "2030-01-01T00:00:00Z" }] });
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual(["deployments.delete", "deployments.deploy"]);
    expect(deployment().status?.deploymentId).not.toBe(running);
  });

  it("a first deploy waits for an Agent being updated, and says so", async () => {
    w.apply<Agent>("agents", { metadata: { name: "a" }, spec: { image: "registry.example/a:2" } }); // a new generation, not synced yet
    w.setStatus("agents", "a", { conditions: [{ type: "Ready", status: "False", reason: "ServiceUnavailable", lastTransitionTime: "2030-01-01T00:00:00Z" }] });
    apply();
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual([]);
    expect(condition(deployment(), "Ready")).toMatchObject({
      reason: "WaitingForAgent",
      message: 'Agent "a" is not Ready for its latest spec yet; the Agent is not Ready (ServiceUnavailable)',
    });
  });

  it("adopts a deployment carrying its marker with no optionsHash, records the hash, and leaves it running", async () => {
    const cr = apply();
    const existing = w.emu.state.deploy(agentId, { tier: "standard", metadata: { [MARKER_KEY]: cr.metadata.uid } });
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual([]);
    expect(deployment().status).toMatchObject({ deploymentId: existing.id, optionsHash: optionsHash(cr), configHash: existing.config_hash });
  });

  it("replaces a deployment reconfigured outside the operator", async () => {
    apply();
    await w.reconcile(kind(), "d");
    const before = deployment().status?.deploymentId as string;
    w.emu.state.reconfigureDeployment(before, { tier: "large" });
    resync();
    w.calls();
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual(["deployments.delete", "deployments.deploy"]);
    expect(deployment().status?.deploymentId).not.toBe(before);
    expect(w.events.at(-1)).toMatchObject({ reason: "Replaced", message: expect.stringContaining("changed outside the operator") });
  });

  it("adopts the deployment a crash left mid-replacement, and keeps it: it says which options it was deployed with", async () => {
    apply();
    await w.reconcile(kind(), "d");
    apply({ tier: "large" });
    const lost = await w.losingStatus<AgentDeploymentStatus>("agentdeployments", "d", () => w.reconcile(kind(), "d"));
    resync();
    w.calls();
    await w.reconcile(kind(), "d");
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual([]);
    expect(deployment().status?.deploymentId).toBe(lost.deploymentId);
  });

  it("keeps a deployment imported with the adoption annotation, even one another resource deployed with other options", async () => {
    const other = w.emu.state.deploy(agentId, { tier: "standard", metadata: { [MARKER_KEY]: "uid-of-another-deployment", [OPTIONS_HASH_KEY]: "0123456789abcdef" } });
    apply({}, { [Annotations.externalId]: other.id });
    await w.reconcile(kind(), "d");
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual([]);
    expect(deployment().status?.deploymentId).toBe(other.id);
  });

  it("never replaces a deployment imported with the adoption annotation: a spec change that needs a new one stalls until the annotation goes", async () => {
    const imported = w.emu.state.deploy(agentId, { tier: "standard" });
    apply({}, { [Annotations.externalId]: imported.id });
    await w.reconcile(kind(), "d");
    expect(condition(deployment(), "Ready")?.status).toBe("True");
    w.calls();
    apply({ tier: "large" }, { [Annotations.externalId]: imported.id });
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual([]);
    expect(w.emu.state.deployments.get(imported.id)).toBeDefined();
    expect(condition(deployment(), "Stalled")).toMatchObject({ status: "True", reason: "AdoptedDeploymentNotReplaced" });
    expect(condition(deployment(), "Stalled")?.message).toContain(`remove the annotation ${Annotations.externalId}`);
    // The annotation removed: replaced, and status names the new one from then on.
    apply({ tier: "large" });
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual(["deployments.delete", "deployments.deploy"]);
    const replacement = deployment().status?.deploymentId as string;
    expect(replacement).not.toBe(imported.id);
    w.calls();
    resync();
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual([]);
    expect(condition(deployment(), "Ready")?.status).toBe("True");
    expect(deployment().status?.deploymentId).toBe(replacement);
  });

  it("stops naming the deployment it deleted for a replacement the service then refused", async () => {
    apply();
    await w.reconcile(kind(), "d");
    const old = deployment().status?.deploymentId as string;
    expect(deployment().status?.state).toBe("running");
    w.emu.injectFault({ method: "POST", path: /\/deploy$/, times: 1, action: { status: 400, body: { code: 400, error_code: "bad_request", message: "unknown tier huge" } } });
    apply({ tier: "huge" });
    await w.reconcile(kind(), "d");
    expect(w.emu.state.deployments.get(old)).toBeUndefined();
    expect(condition(deployment(), "Stalled")).toMatchObject({ status: "True", reason: "ServiceRejected" });
    const st = deployment().status;
    expect(st?.deploymentId).toBeUndefined();
    expect(st?.state).toBeUndefined();
    expect(st?.endpoint).toBeUndefined();
    // Nor does the connection Secret hand out the deleted deployment's endpoint and token.
    expect(w.secrets.get(NS, "d-agentcompute")).toBeUndefined();
    expect(condition(deployment(), "Stalled")?.message).toContain("connection Secret is deleted");
    // The spec fixed: deployed again, and named.
    apply({ tier: "large" });
    await w.reconcile(kind(), "d");
    expect(condition(deployment(), "Ready")?.status).toBe("True");
    const deployed = deployment().status?.deploymentId as string;
    const secret = w.secrets.get(NS, "d-agentcompute");
    expect(Buffer.from(secret?.data?.endpoint ?? "", "base64").toString()).toBe(w.emu.state.deployments.get(deployed)?.endpoint);
  });

  it("stops naming a deployment deleted outside the operator, and deletes its connection Secret, when none can be deployed again", async () => {
    apply();
    await w.reconcile(kind(), "d");
    const old = deployment().status?.deploymentId as string;
    expect(w.secrets.get(NS, "d-agentcompute")).toBeDefined();
    w.emu.state.deleteDeployment(old);
    resync();
    w.emu.injectFault({ method: "POST", path: /\/deploy$/, times: 1, action: { status: 400, body: { code: 400, error_code: "bad_request", message: "quota exceeded" } } });
    await w.reconcile(kind(), "d");
    expect(deployment().status?.deploymentId).toBeUndefined();
    expect(deployment().status?.endpoint).toBeUndefined();
    expect(w.secrets.get(NS, "d-agentcompute")).toBeUndefined();
    expect(condition(deployment(), "Stalled")?.message).toContain(`deployment ${old} is gone`);
  });

  it("stops naming a deployment deleted outside the operator while its Agent has no id to deploy again", async () => {
    apply();
    await w.reconcile(kind(), "d");
    const old = deployment().status?.deploymentId as string;
    w.emu.state.deleteDeployment(old);
    resync();
    w.setStatus("agents", "a", { agentId: undefined });
    await w.reconcile(kind(), "d");
    expect(deployment().status?.deploymentId).toBeUndefined();
    expect(w.secrets.get(NS, "d-agentcompute")).toBeUndefined();
    expect(condition(deployment(), "Ready")).toMatchObject({ status: "False", reason: "WaitingForAgent" });
  });

  it("stops naming the deployment it deleted at once, though the agent for the new one is only waited for", async () => {
    w.dependencyGraceMs = 5_000;
    apply({ agentId });
    await w.reconcile(kind(), "d");
    const old = deployment().status?.deploymentId as string;
    // Another agent, not registered yet: the old deployment is deleted, the deploy answers 404.
    apply({ agentId: "agent-registered-later" });
    await w.reconcile(kind(), "d");
    expect(w.emu.state.deployments.get(old)).toBeUndefined();
    expect(deployment().status?.deploymentId).toBeUndefined();
    expect(deployment().status?.state).toBeUndefined();
    expect(condition(deployment(), "Ready")).toMatchObject({ status: "False", reason: "WaitingForAgent" });
    expect(condition(deployment(), "Ready")?.message).toContain(`deployment ${old} was deleted to be replaced`);
  });

  it("moved in from another owner mid-replacement (sharding): adopts the deployment it made for the spec, and keeps it", async () => {
    apply();
    await w.reconcile(kind(), "d");
    const first = deployment().status?.deploymentId as string;
    const cr = apply({ tier: "large" });
    // The previous owner replaced it for the new tier and let go before writing status.
    w.emu.state.deleteDeployment(first);
    const options = desiredOptions(cr);
    const replacement = w.emu.state.deploy(agentId, { ...options, metadata: { ...options.metadata, [OPTIONS_HASH_KEY]: optionsHash(cr) } });
    w.calls();
    w.handle().deployments.arrived(cr.metadata.uid, Date.now());
    await w.reconcile(kind(), "d");
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual([]);
    expect(deployment().status).toMatchObject({ deploymentId: replacement.id, optionsHash: optionsHash(cr) });
  });

  it("a stop or a redeploy that finds the deployment gone (deleted since the last list) waits for the next pass, which deploys again", async () => {
    apply();
    await w.reconcile(kind(), "d");
    const first = deployment().status?.deploymentId as string;
    w.emu.state.deleteDeployment(first); // out of band; the snapshot still has it
    apply({ suspend: true });
    w.calls();
    expect(await w.reconcile(kind(), "d")).toEqual({ requeue: true });
    expect(condition(deployment(), "Reconciling")).toMatchObject({ status: "True", reason: "ExternalGone" });
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual(["deployments.stop", "deployments.deploy", "deployments.stop"]);
    expect(deployment().status?.deploymentId).not.toBe(first);
  });

  it("a redeploy answered 404 for its agent (gone from the registry), not for the deployment: waits for the agent, saying so, and keeps the deployment", async () => {
    apply();
    await w.reconcile(kind(), "d");
    const first = deployment().status?.deploymentId as string;
    w.emu.state.deleteAgent(agentId); // out of band
    apply({}, { [Annotations.redeployAt]: "2030-01-01T00:00:00Z" });
    w.calls();
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual(["deployments.redeploy"]);
    const reconciling = condition(deployment(), "Reconciling");
    expect(reconciling).toMatchObject({ status: "True", reason: "WaitingForAgent" });
    expect(reconciling?.message).toContain(`agent "${agentId}" may be gone from the registry`);
    expect(deployment().status?.deploymentId).toBe(first);
    await w.reconcile(kind(), "d");
    expect(w.emu.state.deployments.has(first)).toBe(true);
    expect(w.writes().filter((op) => op !== "deployments.redeploy")).toEqual([]);
  });

  it("stops on suspend and starts again on resume", async () => {
    apply();
    await w.reconcile(kind(), "d");
    w.calls();
    apply({ suspend: true });
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual(["deployments.stop"]);
    apply({ suspend: false });
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual(["deployments.redeploy"]);
    expect(deployment().status?.state).toBe("running");
  });

  it("reports a deployment the service says failed (one Warning), does not redeploy it on its own, and redeploys it for a new Agent revision", async () => {
    apply();
    await w.reconcile(kind(), "d");
    const id = deployment().status?.deploymentId as string;
    w.calls();
    w.emu.state.setDeploymentState(id, "failed");
    resync();
    await w.reconcile(kind(), "d");
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual([]);
    expect(deployment().status?.state).toBe("failed");
    expect(condition(deployment(), "Ready")).toMatchObject({ status: "False", reason: "DeploymentFailed" });
    expect(condition(deployment(), "Ready")?.message).toContain(id);
    expect(condition(deployment(), "Reconciling")?.status).toBe("False");
    // Nothing happens until the user acts: stuck, as GitOps tools read it (Argo CD Degraded, Flux failed).
    expect(condition(deployment(), "Stalled")).toMatchObject({ status: "True", reason: "DeploymentFailed" });
    expect(w.events.filter((e) => e.reason === "DeploymentFailed")).toEqual([expect.objectContaining({ type: "Warning" })]);

    setAgentRevision("rev-2");
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual(["deployments.redeploy"]);
    expect(condition(deployment(), "Ready")).toMatchObject({ status: "True", reason: "Available" });
    expect(deployment().status).toMatchObject({ state: "running", agentRevision: "rev-2" });
  });

  it("cuts a service message too long for a condition (the CRD allows 32,768 characters), saying so", async () => {
    const long = `unknown tier: ${"x".repeat(50_000)}`;
    w.emu.injectFault({ method: "POST", path: /\/deploy$/, times: 1, action: { status: 400, body: { code: 400, error_code: "bad_request", message: long } } });
    apply();
    await w.reconcile(kind(), "d");
    const stalled = condition(deployment(), "Stalled");
    expect(stalled).toMatchObject({ status: "True", reason: "ServiceRejected" });
    expect(stalled?.message?.length).toBeLessThanOrEqual(4096);
    expect(stalled?.message).toMatch(/unknown tier: x+ … \(\d+ more characters cut\)$/);
  });

  it("a bad poll-interval on a failed deployment: one Warning, and the Ready message says it", async () => {
    apply({}, { [Annotations.pollInterval]: "every minute" });
    await w.reconcile(w.kindOf(agentDeployments), "d");
    w.emu.state.setDeploymentState(deployment().status?.deploymentId as string, "failed");
    for (let i = 0; i < 3; i++) {
      resync();
      await w.reconcile(w.kindOf(agentDeployments), "d");
    }
    expect(condition(deployment(), "Ready")).toMatchObject({ status: "False", reason: "DeploymentFailed" });
    expect(condition(deployment(), "Ready")?.message).toContain(`${Annotations.pollInterval}: "every minute" is not a duration`);
    expect(w.events.filter((e) => e.reason === "InvalidPollInterval")).toHaveLength(1);
  });

  it("a bad poll-interval while waiting, unreported, for its Agent: one Warning however often it is looked at", async () => {
    w.dependencyGraceMs = 60_000;
    w.setStatus("agents", "a", { agentId: undefined });
    apply({}, { [Annotations.pollInterval]: "every minute" });
    for (let i = 0; i < 5; i++) await w.reconcile(w.kindOf(agentDeployments), "d");
    expect(deployment().status).toBeUndefined();
    expect(w.events.filter((e) => e.reason === "InvalidPollInterval")).toHaveLength(1);
  });

  it("a resource that left (deleted before its finalizer, or moved to another replica) and came back waits out a new grace", async () => {
    w.dependencyGraceMs = 5_000;
    w.setStatus("agents", "a", { agentId: undefined });
    apply();
    await w.reconcile(w.kindOf(agentDeployments), "d");
    expect(deployment().status).toBeUndefined();
    // Gone from this replica's cache, and back a while later (the same object).
    const cache = w.informer({ kind: "AgentDeployment", plural: "agentdeployments" });
    const cr = deployment();
    cache.delete(NS, "d");
    await w.reconcile(w.kindOf(agentDeployments), "d");
    w.advance(10_000);
    cache.set(cr);
    await w.reconcile(w.kindOf(agentDeployments), "d");
    expect(deployment().status).toBeUndefined();
    expect(w.events).toEqual([]);
  });

  it("reports a failed deployment whose policies leave out the Update that would redeploy it, with the drift", async () => {
    apply({ managementPolicies: ["Observe", "Create", "Delete"] });
    await w.reconcile(kind(), "d");
    w.emu.state.setDeploymentState(deployment().status?.deploymentId as string, "failed");
    resync();
    setAgentRevision("rev-2");
    w.calls();
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual([]);
    expect(condition(deployment(), "Ready")).toMatchObject({ status: "False", reason: "DeploymentFailed" });
    expect(condition(deployment(), "Ready")?.message).toContain("leaves out Update");
    expect(condition(deployment(), "Ready")?.message).not.toContain("redeploy-at");
    expect(condition(deployment(), "Drifted")).toMatchObject({ status: "True" });
  });

  it("redeploys a failed deployment on a new value of the redeploy-at annotation", async () => {
    apply();
    await w.reconcile(kind(), "d");
    w.emu.state.setDeploymentState(deployment().status?.deploymentId as string, "failed");
    resync();
    await w.reconcile(kind(), "d");
    w.calls();
    apply({}, { [Annotations.redeployAt]: "2030-01-01T00:00:00Z" });
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual(["deployments.redeploy"]);
    expect(condition(deployment(), "Ready")?.status).toBe("True");
  });

  it("redeploys for a new Agent revision, and records the revision it runs", async () => {
    apply();
    await w.reconcile(kind(), "d");
    w.calls();
    setAgentRevision("rev-2");
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual(["deployments.redeploy"]);
    expect(deployment().status?.agentRevision).toBe("rev-2");
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual([]);
  });

  it("redeploys a deployment whose first status write was lost when its Agent changed meanwhile: the deployment says the revision it was made for", async () => {
    apply();
    const lost = await w.losingStatus<AgentDeploymentStatus>("agentdeployments", "d", () => w.reconcile(kind(), "d"));
    setAgentRevision("rev-2");
    resync();
    w.calls();
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual(["deployments.redeploy"]);
    expect(deployment().status).toMatchObject({ deploymentId: lost.deploymentId, agentRevision: "rev-2" });
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual([]);
  });

  it("deleted after a replacement whose deploy's outcome is unknown: keeps its finalizer a while, so a deployment that lands late goes too", async () => {
    const process = w.kindOf(agentDeployments); // one operator process: it remembers the unknown outcome
    const cr = apply();
    await w.reconcile(process, "d");
    w.emu.injectFault({ method: "POST", path: /\/deploy$/, times: 1, action: { drop: "before" } });
    apply({ tier: "large" });
    await w.reconcile(process, "d").catch(() => undefined);
    expect(deployment().status?.deploymentId).toBeUndefined(); // the old one deleted
    w.apply<AgentDeployment>("agentdeployments", { metadata: { name: "d", deletionTimestamp: "2030-01-01T00:00:00Z", finalizers: deployment().metadata.finalizers }, spec: deployment().spec });
    const result = (await w.reconcile(process, "d")) as { requeueAfterMs: number } | undefined;
    expect(result?.requeueAfterMs).toBeGreaterThan(0);
    expect(deployment().metadata.finalizers).toContain(FINALIZER);
    // The deploy lands now, after the first look.
    const late = w.emu.state.deploy(agentId, { tier: "large", metadata: { [MARKER_KEY]: cr.metadata.uid } });
    w.advance(60_001);
    resync();
    await w.reconcile(process, "d");
    expect(w.emu.state.deployments.has(late.id)).toBe(false);
    expect(deployment()?.metadata.finalizers ?? []).not.toContain(FINALIZER);
  });

  it("deleted after a deploy whose outcome is unknown and the retry's deploy: keeps its finalizer until a while after the first, so a deployment that lands late goes too", async () => {
    const process = w.kindOf(agentDeployments); // one operator process: it remembers the unknown outcome
    const cr = apply();
    w.emu.injectFault({ method: "POST", path: /\/deploy$/, times: 1, action: { drop: "before" } });
    await w.reconcile(process, "d").catch(() => undefined); // no answer: the deploy may still land
    w.advance(5);
    await w.reconcile(process, "d"); // the retry: nothing in the list yet, so it deploys again
    const second = deployment().status?.deploymentId as string;
    expect(second).toBeDefined();
    w.advance(10_000);
    w.apply<AgentDeployment>("agentdeployments", { metadata: { name: "d", deletionTimestamp: "2030-01-01T00:00:00Z", finalizers: deployment().metadata.finalizers }, spec: deployment().spec });
    // What is there goes now; the finalizer stays until 60 s after the first deploy.
    expect(await w.reconcile(process, "d")).toEqual({ requeueAfterMs: 60_000 - 10_005 });
    expect(w.emu.state.deployments.has(second)).toBe(false);
    expect(deployment().metadata.finalizers).toContain(FINALIZER);
    // The first deploy lands now, after that look.
    const late = w.emu.state.deploy(agentId, { tier: "standard", metadata: { [MARKER_KEY]: cr.metadata.uid } });
    w.advance(60_000 - 10_005);
    await w.reconcile(process, "d");
    expect(w.emu.state.deployments.has(late.id)).toBe(false);
    expect(deployment()?.metadata.finalizers ?? []).not.toContain(FINALIZER);
  });

  it("after a deploy whose outcome is unknown and the retry's deploy, passes that are not deletions go on as before: on the sync period, writing nothing, giving back the first if it lands", async () => {
    const process = w.kindOf(agentDeployments);
    const cr = apply();
    w.emu.injectFault({ method: "POST", path: /\/deploy$/, times: 1, action: { drop: "before" } });
    await w.reconcile(process, "d").catch(() => undefined);
    w.calls();
    const retried = (await w.reconcile(process, "d")) as { requeueAfterMs: number };
    expect(w.writes()).toEqual(["deployments.deploy"]);
    expect(retried.requeueAfterMs).toBeGreaterThanOrEqual(540_000); // the sync period (jittered), not the landing wait
    const second = deployment().status?.deploymentId as string;
    const again = (await w.reconcile(process, "d")) as { requeueAfterMs: number };
    expect(w.writes()).toEqual([]);
    expect(again.requeueAfterMs).toBeGreaterThanOrEqual(540_000);
    // The first deploy lands: the next pass on a fresh list gives it back and keeps the one status names.
    const late = w.emu.state.deploy(agentId, { tier: "standard", metadata: { [MARKER_KEY]: cr.metadata.uid } });
    resync();
    await w.reconcile(process, "d");
    expect(w.writes()).toEqual(["deployments.delete"]);
    expect(w.emu.state.deployments.has(late.id)).toBe(false);
    expect(deployment().status?.deploymentId).toBe(second);
    expect(w.emu.state.deployments.has(second)).toBe(true);
  });

  it("reports a deployment a lost deploy left behind without deleting it; the reconcile deletes it", async () => {
    const cr = apply();
    await w.reconcile(kind(), "d");
    const kept = deployment().status?.deploymentId as string;
    const stray = w.emu.state.deploy(agentId, { metadata: { [MARKER_KEY]: cr.metadata.uid } });
    resync();
    w.calls();
    const observed = await kind().client(w.handle()).observe(deployment());
    expect(observed).toMatchObject({ upToDate: true, leftovers: [stray.id] });
    expect(w.writes()).toEqual([]);
    await w.reconcile(kind(), "d");
    expect(w.writes()).toEqual(["deployments.delete"]);
    expect(w.emu.state.deployments.has(stray.id)).toBe(false);
    expect(w.emu.state.deployments.has(kept)).toBe(true);
  });
});
