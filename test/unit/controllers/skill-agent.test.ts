// Skill and Agent: which differences are sent, which fields are left alone, and how a name
// that is taken is told apart from one this resource claimed.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Annotations, FINALIZER, MARKER_KEY, kindNames } from "../../../src/api/names.js";
import type { Agent, Connection, Skill } from "../../../src/api/index.js";
import { agentPatch, agentRevision, agents } from "../../../src/controllers/agent.js";
import { specOrMetaChanged } from "../../../src/controllers/kind.js";
import { skills } from "../../../src/controllers/skill.js";
import { condition, NS, ORG, World } from "./helpers.js";

let w: World;
beforeEach(async () => {
  w = await World.start();
});
afterEach(async () => {
  await w.close();
});

describe("Skill", () => {
  const kind = () => w.kindOf(skills);
  const apply = (spec: Skill["spec"], annotations?: Record<string, string>) =>
    w.apply<Skill>("skills", { metadata: { name: "sk", annotations }, spec });
  const skill = () => w.get<Skill>("skills", "sk");
  const resync = () => w.handle().skills.invalidate();
  /** The Skill deleted (kubectl delete: a deletion timestamp), and the pass that follows. */
  const deleted = async (name = "sk") => {
    w.apply<Skill>("skills", { metadata: { name, deletionTimestamp: "2030-01-01T00:00:00Z" }, spec: w.get<Skill>("skills", name).spec });
    await w.reconcile(kind(), name);
  };
  /**
   * Skills "a" and "b" of one spec.name, "a" first: "b" is NameTaken. Then "web" is deleted
   * outside the operator (as NameTaken's message says to), a while later, and "b"'s pass comes
   * first: it makes "web" its own.
   */
  const takenAfterOutOfBandDelete = async (contentOfB: string) => {
    w.apply<Skill>("skills", { metadata: { name: "a" }, spec: { name: "web", content: "A" } });
    await w.reconcile(kind(), "a");
    w.apply<Skill>("skills", { metadata: { name: "b" }, spec: { name: "web", content: contentOfB } });
    await w.reconcile(kind(), "b");
    expect(condition(w.get<Skill>("skills", "b"), "Ready")).toMatchObject({ status: "False", reason: "NameTaken" });
    w.advance(60_000);
    w.emu.state.deleteSkill("web");
    resync();
    await w.reconcile(kind(), "b");
    expect(condition(w.get<Skill>("skills", "b"), "Ready")?.status).toBe("True");
    resync();
    w.calls();
  };

  it("waits for a contentFrom key its ConfigMap lacks, naming the keys it has", async () => {
    w.configMaps.set({ metadata: { name: "cm", namespace: NS }, data: { "skill.md": "# x", "README.md": "r" } });
    apply({ contentFrom: { configMapKeyRef: { name: "cm", key: "SKILL.md" } } });
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual([]);
    expect(condition(skill(), "Ready")).toMatchObject({
      status: "False",
      reason: "ConfigMapKeyMissing",
      message: 'ConfigMap "cm" has no key "SKILL.md" (spec.contentFrom.configMapKeyRef.key); its keys: "README.md", "skill.md"',
    });
  });

  it("claims the name with the finalizer, before the create, so a create whose answer is lost stays its own", async () => {
    apply({ content: "v1" });
    w.emu.injectFault({ method: "POST", path: "/compute/v1/skills", times: 1, action: { status: 400, body: { code: 400, error_code: "bad", message: "no" } } });
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual(["skills.create"]);
    expect(skill().metadata.annotations?.[Annotations.claimedName]).toBe("sk");
    expect(condition(skill(), "Stalled")).toMatchObject({ status: "True", reason: "ServiceRejected" });
  });

  it("after a create whose answer was lost (409 next time), the claim makes the skill its own", async () => {
    apply({ content: "v1" });
    w.emu.injectFault({ method: "POST", path: "/compute/v1/skills", times: 1, action: { drop: "after" } });
    await w.reconcile(kind(), "sk").catch(() => undefined);
    expect(skill().status?.skillName).toBeUndefined(); // no status written: the answer was lost
    expect(w.emu.state.skills.get("sk")?.content).toBe("v1");
    w.handle().skills.invalidate();
    await w.reconcile(kind(), "sk");
    expect(condition(skill(), "Ready")?.status).toBe("True");
    expect(skill().status?.skillName).toBe("sk");
  });

  it("after a create whose answer was lost, retried before the cache has its finalizer and claim: the skill is its own, not NameTaken", async () => {
    apply({ content: "v1" });
    w.cacheLags = true;
    w.emu.injectFault({ method: "POST", path: "/compute/v1/skills", times: 1, action: { drop: "after" } });
    await w.reconcile(kind(), "sk").catch(() => undefined);
    expect(skill().metadata.annotations?.[Annotations.claimedName]).toBeUndefined(); // not in the cache yet
    expect(w.emu.state.skills.get("sk")?.content).toBe("v1");
    await w.reconcile(kind(), "sk");
    w.catchUp();
    expect(condition(skill(), "Stalled")?.status).not.toBe("True");
    expect(condition(skill(), "Ready")?.status).toBe("True");
    expect(skill().status?.skillName).toBe("sk");
    expect(w.events.filter((e) => e.reason === "NameTaken")).toEqual([]);
  });

  it("deletes the skill a create whose answer was lost made, though status never named it", async () => {
    apply({ content: "v1" });
    w.emu.injectFault({ method: "POST", path: "/compute/v1/skills", times: 1, action: { drop: "after" } });
    await w.reconcile(kind(), "sk").catch(() => undefined);
    expect(skill().status?.skillName).toBeUndefined();
    await deleted();
    expect(w.emu.state.skills.get("sk")).toBeUndefined();
  });

  it("deleted after a create whose outcome is unknown: looks again a while later, and deletes a skill that landed since (read afresh)", async () => {
    apply({ content: "v1" });
    w.emu.injectFault({ method: "POST", path: "/compute/v1/skills", times: 1, action: { drop: "before" } });
    await w.reconcile(kind(), "sk").catch(() => undefined);
    w.apply<Skill>("skills", { metadata: { name: "sk", deletionTimestamp: "2030-01-01T00:00:00Z" }, spec: skill().spec });
    const result = (await w.reconcile(kind(), "sk")) as { requeueAfterMs: number };
    expect(result.requeueAfterMs).toBeGreaterThan(0);
    expect(skill().metadata.finalizers).toContain(FINALIZER);
    // The create lands after the first look; no resync before the second.
    w.emu.state.createSkill({ name: "sk", content: "v1" });
    w.advance(60_001);
    await w.reconcile(kind(), "sk");
    expect(w.emu.state.skills.get("sk")).toBeUndefined();
    expect(skill().metadata.finalizers ?? []).not.toContain(FINALIZER);
  });

  it("knows the skill its lost create made after the spec changed, updates it, and deletes it with itself", async () => {
    apply({ content: "v1" });
    w.emu.injectFault({ method: "POST", path: "/compute/v1/skills", times: 1, action: { drop: "after" } });
    await w.reconcile(kind(), "sk").catch(() => undefined);
    expect(skill().metadata.annotations?.[Annotations.claimedContent]).toMatch(/^[0-9a-f]{32}$/);
    apply({ content: "v2" }, skill().metadata.annotations);
    resync();
    await w.reconcile(kind(), "sk");
    expect(condition(skill(), "Ready")?.status).toBe("True");
    expect(w.emu.state.skills.get("sk")?.content).toBe("v2");
    await deleted();
    expect(w.emu.state.skills.get("sk")).toBeUndefined();
  });

  it("knows the skill a lost create made when it lands after a spec edit and a create of the new content: updates it, and deletes it with itself", async () => {
    apply({ content: "v1" });
    // Neither create is answered, and neither has landed yet when the next pass looks.
    w.emu.injectFault({ method: "POST", path: "/compute/v1/skills", times: 2, action: { drop: "before" } });
    await w.reconcile(kind(), "sk").catch(() => undefined);
    apply({ content: "v2" }, skill().metadata.annotations);
    resync();
    await w.reconcile(kind(), "sk").catch(() => undefined);
    expect(w.emu.state.skills.get("sk")).toBeUndefined();
    // The first create lands late.
    w.emu.state.createSkill({ name: "sk", content: "v1" });
    resync();
    await w.reconcile(kind(), "sk");
    expect(condition(skill(), "Ready")?.status).toBe("True");
    expect(w.events.filter((e) => e.reason === "NameTaken")).toEqual([]);
    expect(w.emu.state.skills.get("sk")?.content).toBe("v2");
    await deleted();
    expect(w.emu.state.skills.get("sk")).toBeUndefined();
  });

  it("takes a 400 to a create for a name taken (the published answers are 400 and 500, not 409) as a 409: its own lost create's skill is adopted", async () => {
    apply({ content: "v1" });
    w.emu.injectFault({ method: "POST", path: "/compute/v1/skills", times: 1, action: { drop: "before" } });
    await w.reconcile(kind(), "sk").catch(() => undefined);
    await w.handle().skills.ensureFresh(); // read before the lost create lands
    w.emu.state.createSkill({ name: "sk", content: "v1" });
    w.emu.injectFault({ method: "POST", path: "/compute/v1/skills", times: 1, action: { status: 400, body: { code: 400, error_code: "bad_request", message: 'skill "sk" already exists' } } });
    await w.reconcile(kind(), "sk");
    expect(condition(skill(), "Ready")?.status).toBe("True");
    expect(skill().status?.skillName).toBe("sk");
    // A 400 for the spec itself, with the name free, still stalls.
    w.emu.state.deleteSkill("sk");
    resync();
    apply({ content: "v2" }, skill().metadata.annotations);
    w.emu.injectFault({ method: "POST", path: "/compute/v1/skills", times: 1, action: { status: 400, body: { code: 400, error_code: "bad_request", message: "content too long" } } });
    await w.reconcile(kind(), "sk").catch(() => undefined);
    expect(condition(skill(), "Stalled")).toMatchObject({ status: "True", reason: "ServiceRejected" });
  });

  it("does not take a skill with its content and someone else's description for the one its create made", async () => {
    await w.handle().skills.ensureFresh();
    w.emu.state.createSkill({ name: "sk", content: "same", description: "theirs" });
    apply({ content: "same" });
    await w.reconcile(kind(), "sk");
    expect(condition(skill(), "Stalled")).toMatchObject({ status: "True", reason: "NameTaken" });
    expect(w.emu.state.skills.get("sk")?.description).toBe("theirs");
  });

  it("does not take a name status held as a claim (operators before the annotation) for a skill it made", async () => {
    w.emu.state.createSkill({ name: "sk", content: "someone else's" });
    apply({ content: "mine" });
    w.setStatus("skills", "sk", { skillName: "sk" }); // claimed, no create answered: no contentHash, no createdAt
    await w.reconcile(kind(), "sk");
    expect(condition(skill(), "Stalled")).toMatchObject({ status: "True", reason: "NameTaken" });
    expect(w.emu.state.skills.get("sk")?.content).toBe("someone else's");
  });

  it("never takes over a skill of its name another Skill made after its own was deleted outside the operator, nor deletes it with itself", async () => {
    await takenAfterOutOfBandDelete("B");
    await w.reconcile(kind(), "a");
    expect(w.writes()).toEqual([]);
    expect(w.emu.state.skills.get("web")?.content).toBe("B");
    expect(condition(w.get<Skill>("skills", "a"), "Ready")).toMatchObject({ status: "False", reason: "NameTaken" });
    await deleted("a");
    expect(w.emu.state.skills.get("web")?.content).toBe("B");
    await w.reconcile(kind(), "b");
    expect(w.writes()).toEqual([]);
    expect(condition(w.get<Skill>("skills", "b"), "Ready")?.status).toBe("True");
  });

  it("never takes for its own a skill another Skill made after its own was deleted outside the operator though it holds what its claim sent, nor deletes it", async () => {
    await takenAfterOutOfBandDelete("A"); // the same manifest applied in two places
    await w.reconcile(kind(), "a");
    expect(condition(w.get<Skill>("skills", "a"), "Ready")).toMatchObject({ status: "False", reason: "NameTaken" });
    // A change of its spec is not sent to the other's skill...
    w.apply<Skill>("skills", { metadata: { name: "a", annotations: w.get<Skill>("skills", "a").metadata.annotations }, spec: { name: "web", content: "A2" } });
    resync();
    await w.reconcile(kind(), "a");
    expect(w.writes()).toEqual([]);
    expect(w.emu.state.skills.get("web")?.content).toBe("A");
    // ...nor is that skill deleted with it.
    await deleted("a");
    expect(w.emu.state.skills.get("web")).toBeDefined();
  });

  it("never takes for its own a skill another Skill of the same content made between its look and its create of its skill again (after its own was deleted outside the operator)", async () => {
    w.apply<Skill>("skills", { metadata: { name: "a" }, spec: { name: "web", content: "A" } });
    await w.reconcile(kind(), "a");
    w.apply<Skill>("skills", { metadata: { name: "b" }, spec: { name: "web", content: "A" } });
    await w.reconcile(kind(), "b");
    w.advance(60_000);
    w.emu.state.deleteSkill("web");
    resync();
    // A's look finds it gone; then B makes it, before A's create.
    await w.handle().skills.ensureFresh();
    w.emu.state.createSkill({ name: "web", content: "A" });
    await w.reconcile(kind(), "a");
    expect(condition(w.get<Skill>("skills", "a"), "Ready")).toMatchObject({ status: "False", reason: "NameTaken" });
    expect(w.get<Skill>("skills", "a").metadata.annotations?.[Annotations.claimedReplacing]).toBeUndefined();
    // Nor at the next look, nor at its deletion.
    resync();
    await w.reconcile(kind(), "a");
    expect(condition(w.get<Skill>("skills", "a"), "Ready")).toMatchObject({ status: "False", reason: "NameTaken" });
    await deleted("a");
    expect(w.emu.state.skills.get("web")).toBeDefined();
  });

  it("knows the skill it made again after its own was deleted outside the operator, that create's answer lost", async () => {
    apply({ content: "v1" });
    await w.reconcile(kind(), "sk");
    w.advance(60_000);
    w.emu.state.deleteSkill("sk");
    resync();
    w.emu.injectFault({ method: "POST", path: "/compute/v1/skills", times: 1, action: { drop: "after" } });
    await w.reconcile(kind(), "sk").catch(() => undefined);
    const made = w.emu.state.skills.get("sk");
    expect(made?.created_at).not.toBe(skill().status?.createdAt);
    resync();
    await w.reconcile(kind(), "sk");
    expect(condition(skill(), "Ready")?.status).toBe("True");
    expect(skill().status?.createdAt).toBe(made?.created_at);
    await deleted();
    expect(w.emu.state.skills.get("sk")).toBeUndefined();
  });

  it("takes its own claim (written with the finalizer, or before a create that makes its skill again) for no news at its watch", () => {
    const before = { metadata: { name: "sk", namespace: NS, uid: "u", generation: 1, annotations: { team: "a" } } };
    const claim = { [Annotations.claimedName]: "sk", [Annotations.claimedContent]: "h", [Annotations.claimedReplacing]: "2030-01-01T00:00:00.000Z" };
    expect(specOrMetaChanged({ metadata: { ...before.metadata, annotations: { team: "a", ...claim } } }, before)).toBe(false);
    expect(specOrMetaChanged({ metadata: { ...before.metadata, annotations: { team: "b", ...claim } } }, before)).toBe(true);
  });

  it("still takes the skill status names for its own with status from operators before createdAt was kept, or a createdAt spelled otherwise", async () => {
    const made = w.emu.state.createSkill({ name: "sk", content: "v1" });
    apply({ content: "v2" });
    w.setStatus("skills", "sk", { skillName: "sk", contentHash: made.content_hash });
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual(["skills.update"]);
    expect(skill().status?.createdAt).toBe(made.created_at);
    w.setStatus("skills", "sk", { createdAt: (made.created_at ?? "").replace(/\.000Z$/, "+00:00") });
    apply({ content: "v3" });
    resync();
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual(["skills.update"]);
    expect(condition(skill(), "Ready")?.status).toBe("True");
  });

  it("names, when NameTaken, the Skill resource of its namespace that manages the skill, rather than send the user to delete it", async () => {
    w.apply<Skill>("skills", { metadata: { name: "web" }, spec: { content: "v1" } });
    await w.reconcile(kind(), "web");
    apply({ name: "web", content: "v2" });
    await w.reconcile(kind(), "sk");
    const message = condition(skill(), "Ready")?.message;
    expect(message).toBe(`a skill named "web" already exists in the service: Skill "${NS}/web" manages it, and two resources cannot share one skill; create this resource again with another spec.name (it is immutable), or delete one of the two`);
    // Its claim was withdrawn (a 409 at its first create): the next look says the same.
    resync();
    await w.reconcile(kind(), "sk");
    expect(condition(skill(), "Ready")?.message).toBe(message);
  });

  it("names, when NameTaken, the Skill resource of another namespace that manages the skill, not one whose status names an earlier skill of that name", async () => {
    const made = w.emu.state.createSkill({ name: "sk", content: "theirs" });
    const elsewhere = (namespace: string, createdAt: string | undefined) =>
      w.informer(kindNames.skill).set({ metadata: { name: "owner", namespace, uid: `uid-${namespace}` }, spec: { content: "theirs" }, status: { skillName: "sk", contentHash: made.content_hash, createdAt } });
    elsewhere("team-c", "2029-12-31T00:00:00.000Z"); // its skill was deleted since
    elsewhere("team-b", made.created_at);
    apply({ content: "mine" });
    await w.reconcile(kind(), "sk");
    expect(condition(skill(), "Stalled")).toMatchObject({ status: "True", reason: "NameTaken" });
    expect(condition(skill(), "Ready")?.message).toContain('Skill "team-b/owner" manages it');
  });

  it("never takes over a skill someone else made under its name between its look and its create", async () => {
    // The snapshot is read, then another party creates the skill: the create meets a 409.
    await w.handle().skills.ensureFresh();
    w.emu.state.createSkill({ name: "sk", content: "someone else's" });
    apply({ content: "mine" });
    await w.reconcile(kind(), "sk");
    expect(condition(skill(), "Stalled")).toMatchObject({ status: "True", reason: "NameTaken" });
    // The claim is withdrawn: the skill is not its own at the next look...
    resync();
    await w.reconcile(kind(), "sk");
    expect(condition(skill(), "Stalled")).toMatchObject({ status: "True", reason: "NameTaken" });
    expect(w.writes()).toEqual(["skills.create"]);
    expect(w.emu.state.skills.get("sk")?.content).toBe("someone else's");
    // ...nor at its deletion: the other party's skill stays.
    await deleted();
    expect(w.emu.state.skills.get("sk")?.content).toBe("someone else's");
  });

  it("never takes over a skill of its name and content made by another resource (another Connection to the account) before its first create", async () => {
    await w.handle().skills.ensureFresh();
    w.emu.state.createSkill({ name: "sk", content: "same" }); // the other resource's create
    apply({ content: "same" });
    await w.reconcile(kind(), "sk");
    expect(condition(skill(), "Stalled")).toMatchObject({ status: "True", reason: "NameTaken" });
    expect(w.events.map((e) => e.reason)).not.toContain("Adopted");
    expect(skill().metadata.annotations?.[Annotations.claimedName]).toBeUndefined(); // the claim withdrawn
    // Nor at its next look, the snapshot showing the skill with the content it claimed, nor
    // after a change of the spec (a new generation)...
    resync();
    await w.reconcile(kind(), "sk");
    expect(condition(skill(), "Stalled")).toMatchObject({ status: "True", reason: "NameTaken" });
    apply({ content: "same", description: "edited" });
    resync();
    await w.reconcile(kind(), "sk");
    expect(condition(skill(), "Stalled")).toMatchObject({ status: "True", reason: "NameTaken" });
    expect(skill().status?.skillName).toBeUndefined();
    // ...nor at its deletion: the other resource's skill stays.
    await deleted();
    expect(w.emu.state.skills.get("sk")?.content).toBe("same");
  });

  it("sends a refused skill again when the ConfigMap it reads is fixed, not before", async () => {
    // A ConfigMap key may be "..", which the service refuses as a file name.
    w.configMaps.set({ metadata: { name: "files", namespace: NS }, data: { "..": "x", "ok.md": "fine" } });
    apply({ content: "c", resourcesFrom: { configMapRef: { name: "files" } } });
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual(["skills.create"]);
    expect(condition(skill(), "Stalled")).toMatchObject({ status: "True", reason: "ServiceRejected" });
    // The same spec and the same ConfigMap: refused again, so not sent.
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual([]);
    // A new operator process sends nothing either: it takes the refusal as made with what it sees.
    w.restart();
    await w.reconcile(kind(), "sk");
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual([]);
    // The user fixes the ConfigMap (its watch brings the Skill back): sent, and made.
    w.configMaps.set({ metadata: { name: "files", namespace: NS }, data: { "ok.md": "fine" } });
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual(["skills.create"]);
    expect(condition(skill(), "Ready")?.status).toBe("True");
    expect(w.emu.state.skills.get("sk")?.resources).toEqual({ "ok.md": "fine" });
  });

  it("sends content, resources and a set description when they differ; leaves an unset description alone", async () => {
    apply({ content: "v1" });
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual(["skills.create"]);

    w.emu.state.updateSkill("sk", { description: "theirs" });
    resync();
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual([]);

    apply({ content: "v2", resources: { "notes.md": "n" } });
    const observed = await kind().client(w.handle()).observe(skill());
    expect(observed).toMatchObject({ upToDate: false, differences: ["content", "resources"] });
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual(["skills.update"]);
    // A PUT replaces the whole skill: the description the spec leaves alone is sent as it was.
    expect(w.emu.state.skills.get("sk")).toMatchObject({ content: "v2", resources: { "notes.md": "n" }, description: "theirs" });

    apply({ content: "v2", resources: { "notes.md": "n" }, description: "ours" });
    expect((await kind().client(w.handle()).observe(skill())).differences).toEqual(["description"]);
  });

  it("refuses an external-id annotation naming another skill, and deleted then deletes its own skill, never the one the annotation names", async () => {
    apply({ content: "ours" });
    await w.reconcile(kind(), "sk");
    w.emu.state.createSkill({ name: "foo", content: "another team's" });
    apply({ content: "ours" }, { [Annotations.externalId]: "foo" });
    await w.reconcile(kind(), "sk");
    expect(condition(skill(), "Ready")).toMatchObject({ status: "False", reason: "ExternalIdMismatch" });
    await deleted();
    expect(w.emu.state.skills.get("foo")?.content).toBe("another team's");
    expect(w.emu.state.skills.get("sk")).toBeUndefined();
    expect(skill()?.metadata.finalizers ?? []).toEqual([]);
  });

  it("imports a skill without naming its content ([Observe]): in sync, nothing written, only the fields named compared; Drifted cleared once Update is allowed", async () => {
    w.emu.state.createSkill({ name: "sk", content: "theirs", description: "shared", resources: { "a.md": "a" } });
    apply({ managementPolicies: ["Observe"] }, { [Annotations.externalId]: "sk" });
    await w.reconcile(kind(), "sk");
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual([]);
    expect(condition(skill(), "Ready")).toMatchObject({ status: "True", reason: "Available" });
    expect(condition(skill(), "Drifted")).toMatchObject({ status: "False" });
    expect(skill().status).toMatchObject({ skillName: "sk", contentHash: w.emu.state.skills.get("sk")?.content_hash });

    apply({ managementPolicies: ["Observe"], content: "ours" }, { [Annotations.externalId]: "sk" });
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual([]);
    expect(condition(skill(), "Drifted")).toMatchObject({ status: "True" });
    expect(condition(skill(), "Drifted")?.message).toContain("content");
    expect(condition(skill(), "Drifted")?.message).not.toContain("resources");

    // Update allowed while paused: nothing is put back yet, and Drifted no longer says Update is left out.
    apply({ managementPolicies: ["Observe", "Update"], content: "ours" }, { [Annotations.externalId]: "sk", [Annotations.paused]: "true" });
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual([]);
    expect(condition(skill(), "Drifted")).toMatchObject({ status: "Unknown", reason: "UpdateAllowed" });

    // Resumed: the content is put back, and Drifted says so.
    apply({ managementPolicies: ["Observe", "Update"], content: "ours" }, { [Annotations.externalId]: "sk" });
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual(["skills.update"]);
    expect(condition(skill(), "Ready")).toMatchObject({ status: "True" });
    expect(condition(skill(), "Drifted")).toMatchObject({ status: "False", reason: "InSync" });
  });

  it("an import allowed to update sends what it names and keeps the rest as the service has it", async () => {
    w.emu.state.createSkill({ name: "sk", content: "theirs", resources: { "a.md": "a" } });
    apply({ managementPolicies: ["Observe", "Update"], description: "ours" }, { [Annotations.externalId]: "sk" });
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual(["skills.update"]);
    expect(w.emu.state.skills.get("sk")).toMatchObject({ content: "theirs", description: "ours", resources: { "a.md": "a" } });
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual([]);

    // The owners change the content after the shared snapshot was read: the next update keeps it.
    w.emu.state.updateSkill("sk", { content: "theirs, v2" });
    apply({ managementPolicies: ["Observe", "Update"], description: "ours, v2" }, { [Annotations.externalId]: "sk" });
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual(["skills.update"]);
    expect(w.emu.state.skills.get("sk")).toMatchObject({ content: "theirs, v2", description: "ours, v2", resources: { "a.md": "a" } });
  });

  it("an import's update that finds the skill gone since its observe waits for the next look (not an error)", async () => {
    w.emu.state.createSkill({ name: "sk", content: "theirs" });
    apply({ managementPolicies: ["Observe", "Update"], description: "ours" }, { [Annotations.externalId]: "sk" });
    w.emu.injectFault({ method: "GET", path: "/compute/v1/skills/sk", times: 1, action: { status: 404, body: { code: 404, error_code: "not_found", message: "skill sk not found" } } });
    expect(await w.reconcile(kind(), "sk")).toEqual({ requeue: true });
    expect(w.writes()).toEqual([]);
    expect(condition(skill(), "Reconciling")).toMatchObject({ status: "True", reason: "ExternalGone" });
    resync(); // (the 404 was a fault: the skill is there)
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual(["skills.update"]);
    expect(condition(skill(), "Ready")?.status).toBe("True");
  });

  it("an update of the whole skill that finds it gone (404) waits for the next pass, which creates it again", async () => {
    apply({ content: "v1", description: "d" });
    await w.reconcile(kind(), "sk");
    apply({ content: "v2", description: "d" });
    w.emu.state.deleteSkill("sk"); // the snapshot still has it
    w.calls();
    expect(await w.reconcile(kind(), "sk")).toEqual({ requeue: true });
    expect(condition(skill(), "Reconciling")).toMatchObject({ status: "True", reason: "ExternalGone" });
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual(["skills.update", "skills.create"]);
    expect(w.emu.state.skills.get("sk")?.content).toBe("v2");
  });

  it("stalls with NameTaken on a skill of that name it never claimed, and writes nothing", async () => {
    w.emu.state.createSkill({ name: "sk", content: "someone else's" });
    apply({ content: "mine" });
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual([]);
    expect(condition(skill(), "Stalled")).toMatchObject({ status: "True", reason: "NameTaken" });
    expect(w.emu.state.skills.get("sk")?.content).toBe("someone else's");
  });

  it("creates its skill once the one that took the name is gone from the service's list, with no change of its spec", async () => {
    await w.handle().skills.ensureFresh();
    w.emu.state.createSkill({ name: "sk", content: "someone else's" });
    apply({ content: "mine" });
    await w.reconcile(kind(), "sk"); // a 409 at its create
    expect(condition(skill(), "Stalled")).toMatchObject({ status: "True", reason: "NameTaken" });
    w.emu.state.deleteSkill("sk");
    resync();
    w.calls();
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual(["skills.create"]);
    expect(w.emu.state.skills.get("sk")?.content).toBe("mine");
    expect(condition(skill(), "Ready")).toMatchObject({ status: "True" });
  });

  it("takes it over with the adoption annotation", async () => {
    w.emu.state.createSkill({ name: "sk", content: "someone else's" });
    apply({ content: "mine" }, { [Annotations.externalId]: "sk" });
    await w.reconcile(kind(), "sk");
    expect(w.writes()).toEqual(["skills.update"]);
    expect(w.emu.state.skills.get("sk")?.content).toBe("mine");
  });
});

describe("Agent", () => {
  const kind = () => w.kindOf(agents);
  const apply = (spec: Partial<Agent["spec"]>) =>
    w.apply<Agent>("agents", { metadata: { name: "ag" }, spec: { image: "registry.example/a:1", ...spec } });
  const agent = () => w.get<Agent>("agents", "ag");
  const registry = () => w.emu.state.agents.get(agent().status?.agentId as string);
  const resync = () => w.handle().agents.invalidate();

  it("switched to policies without Create, takes the marker it set for no drift, and an update keeps it", async () => {
    apply({ metadata: { team: "a" } });
    await w.reconcile(kind(), "ag");
    const uid = agent().metadata.uid;
    expect(registry()?.metadata).toEqual({ team: "a", [MARKER_KEY]: uid });
    apply({ metadata: { team: "a" }, managementPolicies: ["Observe"] });
    resync();
    w.calls();
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual([]);
    expect(condition(agent(), "Drifted")).toMatchObject({ status: "False" });
    expect(w.events.map((e) => e.reason)).not.toContain("DriftNotCorrected");
    // With Update, a change is sent with the marker the registry holds, not without it.
    apply({ metadata: { team: "b" }, managementPolicies: ["Observe", "Update"] });
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual(["agents.update"]);
    expect(registry()?.metadata).toEqual({ team: "b", [MARKER_KEY]: uid });
  });

  it("sends a create the registry refused for the org its Connection gives again once the Connection is fixed, not before", async () => {
    const conn = w.get<Connection>("connections", "default");
    const setOrg = (orgId: string) => {
      w.apply<Connection>("connections", { metadata: { name: "default" }, spec: { ...conn.spec, orgId } });
      const generation = w.get<Connection>("connections", "default").metadata.generation;
      w.setStatus("connections", "default", { observedGeneration: generation, conditions: [{ type: "Ready", status: "True", lastTransitionTime: "2030-01-01T00:00:00Z", observedGeneration: generation }] });
    };
    setOrg("org-typo");
    w.emu.injectFault({ method: "POST", path: "/registry/v1/agents", times: 1, action: { status: 400, body: { error: "bad_request", message: "unknown org org-typo" } } });
    apply({});
    await w.reconcile(kind(), "ag");
    expect(condition(agent(), "Stalled")).toMatchObject({ status: "True", reason: "ServiceRejected" });
    w.calls();
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual([]); // the same spec with the same Connection: refused again

    setOrg(ORG);
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual(["agents.create"]);
    expect(condition(agent(), "Ready")?.status).toBe("True");
  });

  it("takes an empty spec.orgId (a template's empty value, stored before the CRD refused it) as unset: the Connection's org", async () => {
    apply({ orgId: "" });
    await w.reconcile(kind(), "ag");
    expect(registry()?.org_id).toBe(ORG);
    expect(condition(agent(), "Ready")?.status).toBe("True");
  });

  it("creates the agent with the crash-safety marker and records its revision", async () => {
    const cr = apply({});
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual(["agents.create"]);
    expect(registry()?.metadata?.[MARKER_KEY]).toBe(cr.metadata.uid);
    expect(agent().status?.revision).toBe(agentRevision(cr));
  });

  it("deletes the agent it created again after the one status names vanished, though its status write was lost", async () => {
    const cr = apply({});
    await w.reconcile(kind(), "ag");
    const first = agent().status?.agentId as string;
    w.emu.state.deleteAgent(first); // out of band
    resync();
    await w.losingStatus("agents", "ag", () => w.reconcile(kind(), "ag")); // created again; status still names the first
    const ours = () => [...w.emu.state.agents.values()].filter((a) => a.metadata?.[MARKER_KEY] === cr.metadata.uid);
    expect(ours()).toHaveLength(1);
    expect(agent().status?.agentId).toBe(first);
    w.apply<Agent>("agents", { metadata: { name: "ag", deletionTimestamp: "2030-01-01T00:00:00Z" }, spec: agent().spec });
    await w.reconcile(kind(), "ag");
    expect(ours()).toEqual([]);
  });

  it("deleted with nothing uncertain, deletes on the snapshot it has: no read of the whole registry per deletion (a namespace of thousands deleted at once)", async () => {
    apply({});
    await w.reconcile(kind(), "ag");
    w.calls();
    w.apply<Agent>("agents", { metadata: { name: "ag", deletionTimestamp: "2030-01-01T00:00:00Z", finalizers: agent().metadata.finalizers }, spec: agent().spec });
    await w.reconcile(kind(), "ag");
    expect(w.calls()).toEqual(["agents.delete"]);
  });

  it("deleted after a failed delete, its failure's status write not in the cache yet: removes its finalizer once, without a 409 and a second delete", async () => {
    apply({});
    await w.reconcile(kind(), "ag");
    const id = agent().status?.agentId as string;
    w.apply<Agent>("agents", { metadata: { name: "ag", deletionTimestamp: "2030-01-01T00:00:00Z", finalizers: agent().metadata.finalizers }, spec: agent().spec });
    w.emu.injectFault({ method: "DELETE", path: `/registry/v1/agents/${id}`, times: 100, action: { status: 503 } });
    w.cacheLags = true; // the failure's status write reaches the API server, not the cache
    await w.reconcile(kind(), "ag").catch(() => undefined);
    w.emu.clearFaults();
    w.calls();
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual(["agents.delete"]);
    w.catchUp();
    expect(agent()?.metadata.finalizers ?? []).not.toContain(FINALIZER);
  });

  it("deleted after a create whose outcome is unknown: keeps its finalizer and looks again a while later, so an agent that lands late goes too", async () => {
    const cr = apply({});
    w.emu.injectFault({ method: "POST", path: "/registry/v1/agents", times: 1, action: { drop: "before" } });
    await w.reconcile(kind(), "ag").catch(() => undefined);
    w.apply<Agent>("agents", { metadata: { name: "ag", deletionTimestamp: "2030-01-01T00:00:00Z", finalizers: agent().metadata.finalizers }, spec: agent().spec });
    const result = (await w.reconcile(kind(), "ag")) as { requeueAfterMs: number };
    expect(result.requeueAfterMs).toBeGreaterThan(0);
    expect(result.requeueAfterMs).toBeLessThanOrEqual(60_000);
    expect(agent().metadata.finalizers).toContain(FINALIZER);
    // The create lands now, after the first look.
    w.emu.state.createAgent({ name: "ag", org_id: ORG, image: "registry.example/a:1", metadata: { [MARKER_KEY]: cr.metadata.uid } });
    w.advance(60_001);
    // No resync: nothing marks the list stale within LANDING_MS (a snapshot lives a sync period),
    // so the second look must read it again itself.
    await w.reconcile(kind(), "ag");
    expect([...w.emu.state.agents.values()].filter((a) => a.metadata?.[MARKER_KEY] === cr.metadata.uid)).toEqual([]);
    expect(agent()?.metadata.finalizers ?? []).not.toContain(FINALIZER);
  });

  it("an update that finds the agent gone (deleted in the registry since the last list) waits for the next pass, which creates it again", async () => {
    apply({});
    await w.reconcile(kind(), "ag");
    const first = agent().status?.agentId as string;
    w.emu.state.deleteAgent(first); // out of band; the snapshot still has it
    apply({ description: "changed" });
    w.calls();
    expect(await w.reconcile(kind(), "ag")).toEqual({ requeue: true });
    expect(condition(agent(), "Reconciling")).toMatchObject({ status: "True", reason: "ExternalGone" });
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual(["agents.update", "agents.create"]);
    expect(agent().status?.agentId).not.toBe(first);
    expect(registry()?.description).toBe("changed");
  });

  it("an update answered a bare 404 (a gateway's) is a failure, tried again: the agent is not taken for gone, nor made a second time", async () => {
    apply({});
    await w.reconcile(kind(), "ag");
    const first = agent().status?.agentId as string;
    apply({ description: "changed" });
    w.emu.injectFault({ method: "PUT", path: `/registry/v1/agents/${first}`, times: 1, action: { status: 404, body: "404 page not found" } });
    w.calls();
    await w.reconcile(kind(), "ag").catch(() => undefined);
    expect(condition(agent(), "Reconciling")?.reason).not.toBe("ExternalGone");
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual(["agents.update", "agents.update"]);
    expect(agent().status?.agentId).toBe(first);
    expect(registry()?.description).toBe("changed");
  });

  it("does not manage fields the spec leaves out: values set in the registry stay", async () => {
    apply({});
    await w.reconcile(kind(), "ag");
    w.emu.state.updateAgent(agent().status?.agentId as string, { description: "theirs", capabilities: ["search"] });
    resync();
    w.calls();
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual([]);
    expect(registry()).toMatchObject({ description: "theirs", capabilities: ["search"] });
  });

  it("sends only the fields that differ, and updates the revision when what a deployment runs changes", async () => {
    apply({});
    await w.reconcile(kind(), "ag");
    const id = agent().status?.agentId as string;
    w.emu.state.updateAgent(id, { capabilities: ["search"] });
    resync();
    w.calls();
    const before = agent().status?.revision;

    apply({ description: "ours", image: "registry.example/a:2" });
    const observed = await kind().client(w.handle()).observe(agent());
    expect(observed.differences).toEqual(["spec.image", "spec.description"]);
    expect(observed.plan).toEqual({ id, patch: { image: "registry.example/a:2", description: "ours" } });
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual(["agents.update"]);
    expect(registry()).toMatchObject({ description: "ours", image: "registry.example/a:2", capabilities: ["search"] });
    expect(agent().status?.revision).not.toBe(before);
  });

  it("sets a public key, which the create request cannot carry, with an update right after the create", async () => {
    apply({ publicKey: "ssh-ed25519 AAAA" });
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual(["agents.create", "agents.update"]);
    expect(registry()?.public_key).toBe("ssh-ed25519 AAAA");
    expect(condition(agent(), "Ready")?.status).toBe("True");
    resync();
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual([]);
  });

  it("records the agent it created when the public key's update after it is refused, and reports the refusal at once, not Ready", async () => {
    w.emu.injectFault({ method: "PUT", path: /^\/registry\/v1\/agents\//, times: 1, action: { status: 400, body: { error: "bad_request", message: "public_key is not a key" } } });
    apply({ publicKey: "not a key" });
    await w.reconcile(kind(), "ag");
    expect(agent().status?.agentId).toEqual(expect.any(String));
    expect(condition(agent(), "Ready")?.status).toBe("False");
    expect(condition(agent(), "Stalled")).toMatchObject({
      status: "True",
      reason: "ServiceRejected",
      message: expect.stringContaining("was created, and its public key (spec.publicKey) could not be set"),
    });
    // Refused for this spec: not sent again until it changes.
    resync();
    w.calls();
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual([]);
    expect(condition(agent(), "Stalled")).toMatchObject({ status: "True", reason: "ServiceRejected" });
    apply({ publicKey: "ssh-ed25519 AAAA" });
    await w.reconcile(kind(), "ag");
    expect(registry()?.public_key).toBe("ssh-ed25519 AAAA");
    expect(condition(agent(), "Ready")?.status).toBe("True");
  });

  it("retries a public key whose update failed for now, and is Ready once it is set", async () => {
    w.emu.injectFault({ method: "PUT", path: /^\/registry\/v1\/agents\//, times: 100, action: { status: 503, body: { error: "unavailable", message: "try again" } } });
    apply({ publicKey: "ssh-ed25519 AAAA" });
    await expect(w.reconcile(kind(), "ag")).rejects.toThrow();
    expect(agent().status?.agentId).toEqual(expect.any(String));
    expect(condition(agent(), "Ready")?.status).not.toBe("True");
    w.emu.clearFaults();
    await w.reconcile(kind(), "ag");
    expect(registry()?.public_key).toBe("ssh-ed25519 AAAA");
    expect(condition(agent(), "Ready")?.status).toBe("True");
    expect([...w.emu.state.agents.values()]).toHaveLength(1);
  });

  it("manages metadata as spec.metadata sets it, with the marker in it", () => {
    const cr = apply({ metadata: { team: "a" } });
    const found = { id: "x", name: "ag", image: "registry.example/a:1", metadata: { team: "a", cost: "x" } };
    expect(agentPatch(cr, found)).toEqual({ metadata: { team: "a", [MARKER_KEY]: cr.metadata.uid } });
  });

  it("takes an agent over (the adoption annotation) keeping the registry's metadata where spec.metadata is unset: only the marker is added", async () => {
    const theirs = w.emu.state.createAgent({ name: "shared", org_id: ORG, image: "registry.example/a:1", metadata: { team: "platform", cost: "c-17" } });
    const cr = w.apply<Agent>("agents", { metadata: { name: "ag", annotations: { [Annotations.externalId]: theirs.id } }, spec: { image: "registry.example/a:1" } });
    await w.reconcile(kind(), "ag");
    expect(registry()?.metadata).toEqual({ team: "platform", cost: "c-17", [MARKER_KEY]: cr.metadata.uid });
    w.calls();
    resync();
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual([]);
  });

  it("waits for an image pull Secret with an empty value, naming the Secret and the key, and sends nothing", async () => {
    w.secrets.set({ metadata: { name: "pull", namespace: NS }, data: { registry: Buffer.from("r.example").toString("base64"), username: Buffer.from("u").toString("base64"), password: "" } });
    w.apply<Agent>("agents", { metadata: { name: "ag" }, spec: { image: "registry.example/a:1", imagePullSecretRef: { name: "pull" } } });
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual([]);
    expect(condition(agent(), "Ready")).toMatchObject({ status: "False", reason: "SecretKeyMissing" });
    expect(condition(agent(), "Ready")?.message).toBe('Secret "pull" (spec.imagePullSecretRef.name) has an empty "password": set it');
  });

  it("waits for an image pull Secret that lacks a key, naming the keys it has (a typo shows), never a value", async () => {
    const b64 = (v: string) => Buffer.from(v).toString("base64");
    w.secrets.set({ metadata: { name: "pull", namespace: NS }, data: { registry: b64("r.example"), username: b64("u"), Password: b64("s3cret-pull-pass") } });
    w.apply<Agent>("agents", { metadata: { name: "ag" }, spec: { image: "registry.example/a:1", imagePullSecretRef: { name: "pull" } } });
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual([]);
    expect(condition(agent(), "Ready")?.message).toBe('Secret "pull" (spec.imagePullSecretRef.name) lacks the key "password"; its keys: "Password", "registry", "username"');
  });

  it("takes a cleared field as matching a registry that leaves empty fields out, or sends null", () => {
    const cr = apply({ description: "", capabilities: [] });
    const base = { id: "x", name: "ag", image: "registry.example/a:1", metadata: { [MARKER_KEY]: cr.metadata.uid } };
    expect(agentPatch(cr, base)).toEqual({});
    expect(agentPatch(cr, { ...base, description: null, capabilities: null } as never)).toEqual({});
    expect(agentPatch(cr, { ...base, description: "set by hand", capabilities: ["x"] })).toEqual({ description: "", capabilities: [] });
  });

  it("takes empty fields inside the manifest as matching a registry that leaves them out, and still sees a nested change", () => {
    const manifest = { name: "ag", skills: [{ id: "triage", inputModes: [], outputModes: ["text"] }], capabilities: {}, description: "" };
    const cr = apply({ manifest });
    const base = { id: "x", name: "ag", image: "registry.example/a:1", metadata: { [MARKER_KEY]: cr.metadata.uid } };
    expect(agentPatch(cr, { ...base, manifest: { name: "ag", skills: [{ id: "triage", outputModes: ["text"] }] } })).toEqual({});
    expect(agentPatch(cr, { ...base, manifest: { name: "ag", skills: [{ id: "triage", outputModes: ["json"] }] } })).toEqual({ manifest });
    expect(agentPatch(cr, { ...base, manifest: { name: "ag", skills: [{ id: "triage", inputModes: ["x"], outputModes: ["text"] }] } })).toEqual({ manifest });
  });

  it("keeps empty values inside the manifest's free-form objects and in metadata: the registry stores them as sent", () => {
    const manifest = { name: "ag", input_schema: { type: "object", default: "" } };
    const cr = apply({ manifest, metadata: { team: "" } });
    const marker = { [MARKER_KEY]: cr.metadata.uid };
    const base = { id: "x", name: "ag", image: "registry.example/a:1", metadata: { ...marker, team: "" }, manifest };
    expect(agentPatch(cr, base)).toEqual({});
    expect(agentPatch(cr, { ...base, manifest: { name: "ag", input_schema: { type: "object" } } })).toEqual({ manifest });
    expect(agentPatch(cr, { ...base, metadata: marker })).toEqual({ metadata: { team: "", ...marker } });
  });

  it("does not stall over a 409 while the registry's list does not yet show what took the name: its own lost create is found after", async () => {
    apply({});
    // A create whose answer is lost: the agent is made.
    w.emu.injectFault({ method: "POST", path: "/registry/v1/agents", times: 1, action: { drop: "after" } });
    await w.reconcile(kind(), "ag").catch(() => undefined);
    const made = [...w.emu.state.agents.values()].find((a) => a.name === "ag");
    expect(made).toBeDefined();
    // The next pass: the list lags (shows nothing), so it creates again and meets a 409.
    w.emu.injectFault({ method: "GET", path: "/registry/v1/agents", times: 2, action: { status: 200, body: { agents: [], total: 0 } } });
    await w.reconcile(kind(), "ag").catch(() => undefined);
    expect(condition(agent(), "Stalled")?.status).not.toBe("True");
    // The list catches up: adopted, not created again.
    await w.reconcile(kind(), "ag");
    expect(agent().status?.agentId).toBe(made?.id);
    expect([...w.emu.state.agents.values()].filter((a) => a.name === "ag")).toHaveLength(1);
  });

  it("stalls with NameTaken over a 409 whose taker the list does not show when no create of its own was lost", async () => {
    // Its first pass finds the Connection not Ready (as at a GitOps apply of everything): the
    // finalizer goes on, nothing is created.
    apply({});
    w.connectionNotReady("Pending", "not checked yet");
    await w.reconcile(kind(), "ag");
    w.setStatus("connections", "default", { observedGeneration: 1, conditions: [{ type: "Ready", status: "True", lastTransitionTime: "2030-01-01T00:00:00Z" }] });
    w.emu.state.createAgent({ name: "ag", org_id: ORG, image: "other" });
    w.emu.injectFault({ method: "GET", path: "/registry/v1/agents", times: 2, action: { status: 200, body: { agents: [], total: 0 } } });
    await w.reconcile(kind(), "ag").catch(() => undefined);
    expect(condition(agent(), "Stalled")).toMatchObject({ status: "True", reason: "NameTaken" });
  });

  it("stalls with NameTaken when the name is another agent's", async () => {
    w.emu.state.createAgent({ name: "ag", org_id: ORG, image: "other" });
    apply({});
    await w.reconcile(kind(), "ag");
    expect(condition(agent(), "Stalled")).toMatchObject({ status: "True", reason: "NameTaken" });
    // Refused at this generation: the same spec is not sent again.
    w.calls();
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual([]);
    expect(condition(agent(), "Stalled")?.message).toContain("delete that agent from the registry");
  });

  it("creates its agent once the one that took the name is gone from the registry's list, with no change of its spec", async () => {
    const other = w.emu.state.createAgent({ name: "ag", org_id: ORG, image: "other" });
    apply({});
    await w.reconcile(kind(), "ag");
    expect(condition(agent(), "Stalled")).toMatchObject({ status: "True", reason: "NameTaken" });
    w.emu.state.deleteAgent(other.id);
    w.handle().agents.invalidate(); // the next list, at the sync period
    w.calls();
    await w.reconcile(kind(), "ag");
    expect(w.writes()).toEqual(["agents.create"]);
    expect(condition(agent(), "Ready")).toMatchObject({ status: "True" });
    expect(condition(agent(), "Stalled")?.status).not.toBe("True");
  });
});
