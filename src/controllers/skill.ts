// Skill: a named bundle of instructions and files in the Compute Service. Its key there is
// its name; skills carry no metadata, so the name is claimed before the create (annotations
// written with the finalizer: the name, a hash of what the create sends, and the createdAt of
// the skill a create makes again; see isOwn).
import { Annotations, ConditionType, kindNames } from "../api/names.js";
import { notReportedYet, troubleOf } from "../managed/conditions.js";
import type { Skill, SkillStatus } from "../api/index.js";
import { ClaimTaken, NotReadyError, StalledError } from "../managed/errors.js";
import type { ActionResult, ExternalClient, ManagedResource, Observation, Planned } from "../managed/external.js";
import { isBadRequest, isConflict, isServiceNotFound, isOutcomeUnknown, type SkillRequest, type Skill as ServiceSkill } from "../service/index.js";
import { deepEqual } from "../runtime/status.js";
import { managementOf } from "../managed/management-policies.js";
import type { ServiceHandle } from "./connection-pool.js";
import { connectionName, fingerprint, referrers, requestOf, type KindContext, type ManagedKind } from "./kind.js";
import { changeObserved, goneSinceObserved, removeObject, staleFor } from "./marker.js";
import { keysListed, type ObjectStore } from "./object-store.js";
import type { Informer } from "../runtime/informer.js";
import type { KubeObject } from "../runtime/kube-client.js";

export function skillName(cr: Skill): string {
  return cr.spec.name ?? cr.metadata.name;
}

/** The Skills' index by `namespace/<name in the service>` (skillsByName). */
export const SKILL_NAME_INDEX = "skillName";

/** The Skill informer, indexed by SKILL_NAME_INDEX: one index, however many kinds look Skills up by the name they use. */
export function skillsByName(ctx: KindContext): Informer<Skill> {
  return skillsIndexed(ctx, SKILL_NAME_INDEX, (s) => [`${s.metadata.namespace}/${skillName(s)}`]);
}

/** The Skills' index by the skill their status names in the service, whatever their namespace: who manages a skill. */
const SKILL_MANAGED_INDEX = "skillManaged";

/** The Skill informer with the index `index` (added once, whoever asks first). */
function skillsIndexed(ctx: KindContext, index: string, values: (s: Skill) => string[]): Informer<Skill> {
  const skills = ctx.informer<Skill>(kindNames.skill);
  if (!skills.hasIndex(index)) skills.addIndex(index, values);
  return skills;
}

/** The resources of `own` whose spec.skills load a Skill's skill (by its name in the service): a change of the Skill brings them back. */
export function skillUsers<T extends KubeObject & { spec: { skills?: string[] } }>(own: Informer<T>): (skill: Skill) => T[] {
  const loading = referrers(own, "skill", (r) => r.spec.skills ?? []);
  return (skill) => loading({ metadata: { namespace: skill.metadata.namespace, name: skillName(skill) } });
}

/**
 * The Skill resource of the user's namespace that makes the skill `name` in the service for
 * it (a Sandbox, a deployment), if there is one. Several may claim the name: one makes it and
 * the others are NameTaken, or they are on Connections to different accounts. The user waits
 * for the one on its own Connection that made the skill, else a Ready one; a NameTaken one
 * only when no other claims the name, as it will never make it.
 */
export function skillNamed(skills: Informer<Skill>, user: ManagedResource, name: string): Skill | undefined {
  const connection = connectionName(user);
  // Lower is better; the terms in order of weight.
  const rank = (s: Skill) =>
    (troubleOf(s) === NAME_TAKEN ? 8 : 0) + (connectionName(s) === connection ? 0 : 4) + (isReady(s) ? 0 : 2) + (s.status?.skillName === name ? 0 : 1);
  let best: Skill | undefined;
  for (const s of skills.byIndex(SKILL_NAME_INDEX, `${user.metadata.namespace}/${name}`)) if (best === undefined || rank(s) < rank(best)) best = s;
  return best;
}

const isReady = (skill: Skill) => skill.status?.conditions?.find((c) => c.type === ConditionType.Ready)?.status === "True";

/** Why a user of a Skill resource's skill (a Sandbox, a deployment) waits for it: not Ready yet; undefined once it is. */
export function skillNotReady(skill: Skill): NotReadyError | undefined {
  if (isReady(skill)) return undefined;
  const trouble = troubleOf(skill);
  const why = trouble === undefined ? "" : `: ${trouble}`;
  return new NotReadyError("WaitingForSkill", `Skill "${skill.metadata.name}" (spec.skills) is not Ready yet${why}`, notReportedYet(skill));
}

/**
 * Throws WaitingForSkill for the first of `names` (the user's spec.skills) whose Skill
 * resource (skillNamed) is not Ready yet; a name no Skill resource makes is `unmanaged`'s to
 * judge (a Sandbox waits for it in the service; a deployment leaves it to the service).
 */
export function waitForSkills(skills: Informer<Skill>, user: ManagedResource, names: readonly string[], unmanaged: (name: string) => void = () => undefined): void {
  for (const name of names) {
    const skill = skillNamed(skills, user, name);
    if (skill === undefined) {
      unmanaged(name);
      continue;
    }
    const waiting = skillNotReady(skill);
    if (waiting !== undefined) throw waiting;
  }
}

export function skillExternalId(cr: Skill): string | undefined {
  return adoptedName(cr) ?? cr.status?.skillName;
}

/**
 * The skill the external-id annotation imports, where it names this resource's skill: one that
 * names another (refused: ExternalIdMismatch) is no one's to read or delete as this resource's,
 * or a deletion would take that other skill and leave its own.
 */
function adoptedName(cr: Skill): string | undefined {
  const annotated = cr.metadata.annotations?.[Annotations.externalId];
  return annotated === skillName(cr) ? annotated : undefined;
}

/**
 * Whether this resource claimed `name` before creating it: the annotation written with the
 * finalizer, or (resources created before the annotation existed) status.skillName.
 */
function claimed(cr: Skill, name: string): boolean {
  return cr.metadata.annotations?.[Annotations.claimedName] === name || cr.status?.skillName === name;
}

/** What a skill holds, as a hash: content, files and description ("" when none). */
function contentHash(s: { content?: string; resources?: Record<string, string>; description?: string }): string {
  const files = Object.entries(s.resources ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return fingerprint(s.content ?? "", files, s.description ?? "").slice(0, 32);
}

/** Whether status holds a service answer for the skill `name` (created by this resource, or adopted), not a bare claim. */
function answered(status: SkillStatus | undefined, name: string): boolean {
  return status?.skillName === name && (status.contentHash !== undefined || status.createdAt !== undefined);
}

/**
 * Whether two created_at values say the same instant. As instants, not as text: a service
 * that stores less precision than it answers a create with (nanoseconds in the answer,
 * microseconds in the store) gives the same skill two spellings. Text that is no date (the
 * published description says only "string") is compared as it is.
 */
function sameInstant(a: string, b: string): boolean {
  const [x, y] = [Date.parse(a), Date.parse(b)];
  return Number.isNaN(x) || Number.isNaN(y) ? a === b : x === y;
}

/**
 * Whether the skill `found` under the resource's name is its own. Status naming it, with what
 * only a service answer gives (created by this resource, or adopted), says so, as does the
 * adoption annotation; but status names a name, and a skill made under it since (ours
 * deleted outside the operator, then made again by a Skill of that name elsewhere, which was
 * NameTaken until then) has a created_at of its own: status then says nothing of it, and the
 * claim decides. (Status without createdAt, from operators before it was kept, or a service
 * that answers none, cannot tell the two apart and is taken as before.) A claim alone says
 * only that a create was tried: the skill is the one it made (its answer lost) if it holds
 * what that create, or one before it, sent (the claimed-content hashes, see claimedContent);
 * otherwise someone else made it between this resource's look and its create (another Skill
 * of that name elsewhere, another replica, a script), and overwriting it would take it from
 * them. A claim made before the hash existed is compared with what a create would send now.
 */
function isOwn(cr: Skill, found: ServiceSkill, desired: () => DesiredSkill): boolean {
  const name = found.name;
  const annotations = cr.metadata.annotations ?? {};
  if (adoptedName(cr) === name) return true;
  const { status } = cr;
  if (answered(status, name)) {
    const createdAt = status?.createdAt;
    if (createdAt === undefined || found.created_at === undefined || sameInstant(createdAt, found.created_at)) return true;
    // Another skill of the name: ours only if a create was claimed after the one status names
    // went. Its content alone cannot tell: the other Skill may hold the same manifest.
    if (annotations[Annotations.claimedReplacing] !== createdAt) return false;
  }
  if (!claimed(cr, name)) return false;
  const sent = annotations[Annotations.claimedContent];
  return sent === undefined ? contentHash(found) === contentHash(desired()) : claimedHashes(sent).includes(contentHash(found));
}

/** At most this many hashes in a claim: a create per spec edit while none is answered. */
const MAX_CLAIMED_HASHES = 8;

const claimedHashes = (annotation: string | undefined): string[] => (annotation === undefined || annotation === "" ? [] : annotation.split(","));

/**
 * The claimed-content annotation for a create that sends `sent`: that hash, first, then those
 * claimed before it under the same name while no create was answered. A create whose answer
 * was lost may land after the spec changed and a create of the new content was claimed; the
 * skill it made is still this resource's own (isOwn), updated rather than taken for someone
 * else's, and deleted with it. Once status holds an answer, only the hash of the next create.
 */
function claimedContent(cr: Skill, sent: string): string {
  const annotations = cr.metadata.annotations ?? {};
  const name = skillName(cr);
  const before = annotations[Annotations.claimedName] === name && !answered(cr.status, name) ? claimedHashes(annotations[Annotations.claimedContent]) : [];
  return [...new Set([sent, ...before])].slice(0, MAX_CLAIMED_HASHES).join(",");
}

/** Skills: their key in the service is their name, so the name is claimed before the create. */
export function skills(ctx: KindContext): ManagedKind<Skill, SkillPlan> {
  const managed = skillsIndexed(ctx, SKILL_MANAGED_INDEX, (s) => (s.status?.skillName === undefined ? [] : [s.status.skillName]));
  return {
    names: kindNames.skill,
    controller: "skill",
    inventory: "skills",
    externalId: skillExternalId,
    // A skill carries no marker: its name is claimed before the create, with the finalizer,
    // with a hash of what the create sends, and, when it makes its skill again, with the
    // createdAt of the one that went (isOwn).
    claim: (cr) => {
      let sent: string | undefined;
      try {
        sent = contentHash(desiredSkill(cr, ctx.store));
      } catch {
        sent = undefined; // its ConfigMap not readable: nothing is created before it is
      }
      const name = skillName(cr);
      const replacing = answered(cr.status, name) ? cr.status?.createdAt : undefined;
      return {
        [Annotations.claimedName]: name,
        ...(sent !== undefined && { [Annotations.claimedContent]: claimedContent(cr, sent) }),
        ...(replacing !== undefined && { [Annotations.claimedReplacing]: replacing }),
      };
    },
    // Content and files may come from ConfigMaps: fixing one is a fix of a refused skill.
    inputs: (cr) => fingerprint(desiredSkill(cr, ctx.store)),
    connectionSecret: false,
    client: (handle) => new SkillClient(handle, ctx.store, managed),
    watches(controller, own) {
      const usingConfigMap = referrers(own, "configMap", (s) => [s.spec.contentFrom?.configMapKeyRef.name, s.spec.resourcesFrom?.configMapRef.name]);
      controller.watch(ctx.configMaps, (cm) => usingConfigMap(cm).map(requestOf));
    },
  };
}

/**
 * The skill as the spec wants it, with content and files read from ConfigMaps. `content` is
 * absent only when the spec names none (an import: managementPolicies leaves out Create).
 */
export function desiredSkill(cr: Skill, store: ObjectStore): DesiredSkill {
  const { namespace } = cr.metadata;
  const { spec } = cr;
  let content = spec.content;
  if (content === undefined && spec.contentFrom) {
    const ref = spec.contentFrom.configMapKeyRef;
    const data = store.configMapData(namespace, ref.name, "spec.contentFrom.configMapKeyRef.name");
    content = data[ref.key];
    if (content === undefined) {
      throw new NotReadyError(
        "ConfigMapKeyMissing",
        `ConfigMap "${ref.name}" has no key "${ref.key}" (spec.contentFrom.configMapKeyRef.key); ${keysListed(Object.keys(data))}`,
      );
    }
  }
  const resources = spec.resourcesFrom
    ? store.configMapData(namespace, spec.resourcesFrom.configMapRef.name, "spec.resourcesFrom.configMapRef.name")
    : spec.resources;
  const req: DesiredSkill = { name: skillName(cr) };
  if (content !== undefined) req.content = content;
  if (spec.description !== undefined) req.description = spec.description;
  if (resources !== undefined) req.resources = resources;
  return req;
}

/** A skill as a spec names it (desiredSkill), or as far as it manages it (managedFields): a field left out is not named, or not managed. */
export type DesiredSkill = Omit<SkillRequest, "content"> & { content?: string };

/**
 * What the spec manages, as compared while observing: update sends it. `answered`: the skill as
 * a GET of this observe answered it (not the shared snapshot), fresh enough for what the update
 * sends of the rest.
 */
export interface SkillPlan {
  fields: DesiredSkill;
  answered?: ServiceSkill;
}

class SkillClient implements ExternalClient<Skill, SkillPlan> {
  constructor(
    private readonly handle: ServiceHandle,
    private readonly store: ObjectStore,
    /** Indexed by SKILL_MANAGED_INDEX. */
    private readonly skills: Informer<Skill>,
  ) {}

  /** NameTaken stands while the service's list (as last read) shows a skill of the name (observe found it gone, or it would say NameTaken itself). */
  refusalStands(cr: Skill, reason: string): boolean {
    return reason !== NAME_TAKEN || this.handle.skills.get(skillName(cr)) !== undefined;
  }

  async observe(cr: Skill): Promise<Observation<SkillStatus, SkillPlan>> {
    const inventory = this.handle.skills;
    await inventory.ensureFresh();
    const desired = desiredSkill(cr, this.store);
    const name = desired.name;
    const adopting = cr.metadata.annotations?.[Annotations.externalId];
    if (adopting !== undefined && adopting !== name) {
      throw new StalledError(
        "ExternalIdMismatch",
        `annotation ${Annotations.externalId}: "${adopting}" differs from the skill name "${name}"; a skill's id is its name`,
      );
    }
    const reading = staleFor(cr, inventory, name);
    let found = reading ? await this.read(name) : inventory.get(name);
    // Moved in from another owner (sharding), which may have created it after this snapshot: read since.
    if (found === undefined && (await inventory.readSinceArrival(cr.metadata.uid))) found = inventory.get(name);
    if (found === undefined) return { exists: false, upToDate: false };
    if (!isOwn(cr, found, () => desired)) throw nameTaken(name, this.managerOf(cr, found));
    const managed = managedFields(cr, desired);
    const differences = skillDifferences(found, managed);
    const plan: SkillPlan = { fields: managed, ...(reading && { answered: found }) };
    return { exists: true, upToDate: differences.length === 0, differences, status: statusOf(found), plan };
  }

  /**
   * One GET, for a resource polled more often than the snapshot is read; the service's own 404
   * is "gone". A bare one (a gateway's) says nothing of the skill: thrown, as findOwn does.
   */
  private async read(name: string): Promise<ServiceSkill | undefined> {
    try {
      const got = await this.handle.client.skills.get(name);
      this.handle.skills.put(got);
      return got;
    } catch (err) {
      if (!isServiceNotFound(err)) throw err;
      this.handle.skills.remove(name);
      return undefined;
    }
  }

  async create(cr: Skill, opts: { first?: boolean; claimedNow?: readonly string[] } = {}): Promise<ActionResult<SkillStatus>> {
    const desired = desiredSkill(cr, this.store);
    const { content } = desired;
    if (content === undefined) {
      // The CRD asks for content when Create is allowed; this is for where its CEL rules are not enforced.
      throw new StalledError("ContentRequired", "set spec.content or spec.contentFrom: the service needs the content to create a skill");
    }
    try {
      const created = await this.handle.client.skills.create({ ...desired, content });
      this.handle.skills.put(created);
      return { status: statusOf(created) };
    } catch (err) {
      if (isOutcomeUnknown(err)) this.handle.skills.invalidate();
      // A name taken is answered 409 by the emulator, as the registry answers for agents; the
      // published description lists only 400 and 500 for this create, so a refusal is looked
      // into as well: a 400 with the name taken is the same case.
      if (!isConflict(err) && !isBadRequest(err)) throw err;
      // Taken since this resource looked: ours only if an earlier create, whose answer was
      // lost, made it (see isOwn); never on the first pass, which made no create before (a
      // Skill of the same name and content through another Connection to the account).
      const existing = await this.read(desired.name);
      if (existing === undefined) throw err; // gone again meanwhile (the retry creates it), or a refusal of the spec
      // The first, or the first to make it again (its claimed-replacing written by this pass: no
      // create of ours since the one status names went can have made it; another Skill of the
      // name made it meanwhile, maybe with the same content): the claim is withdrawn
      // (ClaimTaken), so that later looks do not take it either.
      if (opts.first === true || opts.claimedNow?.includes(Annotations.claimedReplacing) === true) {
        throw nameTaken(desired.name, this.managerOf(cr, existing), ClaimTaken);
      }
      if (!isOwn(cr, existing, () => desired)) throw nameTaken(desired.name, this.managerOf(cr, existing));
      return { status: statusOf(existing), event: { reason: "Adopted", message: `adopted the existing skill "${desired.name}", which an earlier create whose answer was lost made` } };
    }
  }

  async update(_cr: Skill, { plan }: Planned<SkillStatus, SkillPlan>): Promise<ActionResult<SkillStatus>> {
    const managed = plan.fields;
    // A PUT replaces the whole skill: what the spec leaves to others is sent as the service has
    // it now, not as the shared snapshot had it (up to its age ago).
    const whole = managed.content !== undefined && managed.resources !== undefined && managed.description !== undefined;
    const current = whole ? { name: managed.name } : (plan.answered ?? (await this.read(managed.name)));
    if (current === undefined) throw goneSinceObserved(`skill "${managed.name}"`);
    return this.send(skillToSend(current, managed));
  }

  /**
   * The skill ownSkill finds, by a GET: no snapshot, so the look LANDING_MS after a create
   * whose outcome was unknown sees a skill that landed since.
   */
  async delete(cr: Skill): Promise<void> {
    const name = await this.ownSkill(cr);
    if (name === undefined) return;
    await removeObject(this.handle.skills, name, (key) => this.handle.client.skills.delete(key), { get: (key) => this.handle.client.skills.get(key) });
  }

  /**
   * The name of the skill this resource deletes, read afresh and judged as observe judges it
   * (isOwn): the one it adopted, the one status names, or the one a create whose answer was
   * lost made (status never named it). Not one someone else made under the name, after ours
   * was deleted outside the operator or between a look and a create. Without the
   * claimed-content hash (a claim made before it existed), the spec's inputs must be readable
   * to tell.
   */
  private async ownSkill(cr: Skill): Promise<string | undefined> {
    const name = skillExternalId(cr) ?? cr.metadata.annotations?.[Annotations.claimedName];
    if (name === undefined) return undefined;
    const found = await this.read(name);
    if (found === undefined) return undefined;
    try {
      return isOwn(cr, found, () => desiredSkill(cr, this.store)) ? name : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * The Skill resource, other than `cr`, that manages the skill `found` (made or adopted it),
   * if the operator knows one: its status names the skill with its created_at (another skill
   * of the name has its own; a service that answers none leaves it unknown).
   */
  private managerOf(cr: Skill, found: ServiceSkill): Skill | undefined {
    const createdAt = found.created_at;
    if (createdAt === undefined) return undefined;
    const manages = (s: Skill) => s.metadata.uid !== cr.metadata.uid && s.status?.createdAt !== undefined && sameInstant(s.status.createdAt, createdAt);
    return this.skills.byIndex(SKILL_MANAGED_INDEX, found.name).find(manages);
  }

  private async send(desired: SkillRequest): Promise<ActionResult<SkillStatus>> {
    const updated = await changeObserved(this.handle.skills, desired.name, `skill "${desired.name}"`, () => this.handle.client.skills.update(desired.name, desired));
    this.handle.skills.put(updated);
    return { status: statusOf(updated) };
  }
}

/**
 * What of the skill the spec manages: the content and description it names, and the files.
 * A spec that may create the skill defines it whole, so naming no files means none; an import
 * (managementPolicies without Create) manages only what it names, as an imported Agent does.
 */
function managedFields(cr: Skill, desired: DesiredSkill): DesiredSkill {
  const wholeSkill = managementOf(cr.spec).create;
  const resources = desired.resources ?? (wholeSkill ? {} : undefined);
  return { ...desired, ...(resources !== undefined && { resources }) };
}

/** The managed fields that differ from the service's skill. */
export function skillDifferences(found: ServiceSkill, managed: DesiredSkill): string[] {
  const out: string[] = [];
  if (managed.content !== undefined && (found.content ?? "") !== managed.content) out.push("content");
  if (managed.description !== undefined && (found.description ?? "") !== managed.description) out.push("description");
  if (managed.resources !== undefined && !deepEqual(found.resources ?? {}, managed.resources)) out.push("resources");
  return out;
}

/**
 * The update: a PUT replaces the whole skill, so what the spec does not manage is sent as the
 * service has it, and kept.
 */
function skillToSend(found: ServiceSkill, managed: DesiredSkill): SkillRequest {
  const description = managed.description ?? found.description;
  const resources = managed.resources ?? found.resources;
  return {
    name: managed.name,
    content: managed.content ?? found.content ?? "",
    ...(description !== undefined && { description }),
    ...(resources !== undefined && { resources }),
  };
}

const NAME_TAKEN = "NameTaken";

/**
 * The skill `name` is someone else's. Managed by another Skill resource (`manager`), that one
 * is named, and neither deleting the skill nor adopting it is offered: its manager would make
 * it again, in a race with this resource, or both would write it; one of the two resources
 * has to give the name up.
 */
function nameTaken(name: string, manager: Skill | undefined, as: typeof StalledError = StalledError): StalledError {
  if (manager !== undefined) {
    return new as(
      NAME_TAKEN,
      `a skill named "${name}" already exists in the service: Skill "${manager.metadata.namespace}/${manager.metadata.name}" manages it, and two resources cannot share one skill; create this resource again with another spec.name (it is immutable), or delete one of the two`,
    );
  }
  return new as(
    NAME_TAKEN,
    `a skill named "${name}" already exists in the service and is not managed by this resource; delete that skill from the service (this resource creates its own once the service's list no longer shows it), adopt it with the annotation ${Annotations.externalId}: "${name}", or create this resource again with another spec.name (it is immutable)`,
  );
}

function statusOf(s: ServiceSkill): Partial<SkillStatus> {
  return { skillName: s.name, contentHash: s.content_hash, createdAt: s.created_at, updatedAt: s.updated_at };
}
