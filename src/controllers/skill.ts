// Skill: a named bundle of instructions and files in the Compute Service. Its key there is
// its name; skills carry no metadata, so the name is claimed in status before the create.
import { Annotations } from "../api/names.js";
import type { Skill, SkillStatus } from "../api/index.js";
import { NotReadyError, StalledError } from "../managed/errors.js";
import type { ActionResult, Connector, ExternalClient, Observation } from "../managed/external.js";
import { isConflict, isNotFound, isOutcomeUnknown, type SkillRequest, type Skill as ServiceSkill } from "../service/index.js";
import { deepEqual } from "../runtime/status.js";
import type { ConnectionPool, ServiceHandle } from "./connection-pool.js";
import type { ObjectStore } from "./object-store.js";

export function skillName(cr: Skill): string {
  return cr.spec.name ?? cr.metadata.name;
}

export function skillExternalId(cr: Skill): string | undefined {
  return cr.metadata.annotations?.[Annotations.externalId] ?? cr.status?.skillName;
}

export class SkillConnector implements Connector<Skill> {
  constructor(
    private readonly pool: ConnectionPool,
    private readonly store: ObjectStore,
  ) {}

  async connect(cr: Skill): Promise<ExternalClient<Skill>> {
    const handle = this.pool.forResource(cr.metadata.namespace, cr.spec.connectionRef, {
      deleting: cr.metadata.deletionTimestamp !== undefined,
    });
    // Computed when first needed: deleting a Skill must not wait for its ConfigMap.
    return new SkillClient(handle, () => desiredSkill(cr, this.store));
  }
}

/** The skill as the spec wants it, with content and files read from ConfigMaps. */
export function desiredSkill(cr: Skill, store: ObjectStore): SkillRequest {
  const { namespace } = cr.metadata;
  const { spec } = cr;
  let content = spec.content;
  if (content === undefined && spec.contentFrom) {
    const ref = spec.contentFrom.configMapKeyRef;
    content = store.configMapData(namespace, ref.name, "spec.contentFrom.configMapKeyRef.name")[ref.key];
    if (content === undefined) {
      throw new NotReadyError(
        "ConfigMapKeyMissing",
        `ConfigMap "${ref.name}" has no key "${ref.key}" (spec.contentFrom.configMapKeyRef.key)`,
      );
    }
  }
  const resources = spec.resourcesFrom
    ? store.configMapData(namespace, spec.resourcesFrom.configMapRef.name, "spec.resourcesFrom.configMapRef.name")
    : spec.resources;
  const req: SkillRequest = { name: skillName(cr), content: content ?? "" };
  if (spec.description !== undefined) req.description = spec.description;
  if (resources !== undefined) req.resources = resources;
  return req;
}

class SkillClient implements ExternalClient<Skill> {
  private desiredCache: SkillRequest | undefined;

  constructor(
    private readonly handle: ServiceHandle,
    private readonly desiredFn: () => SkillRequest,
  ) {}

  private get desired(): SkillRequest {
    return (this.desiredCache ??= this.desiredFn());
  }

  async observe(cr: Skill): Promise<Observation<SkillStatus>> {
    const inventory = this.handle.skills;
    await inventory.ensureFresh();
    const name = this.desired.name;
    const adopting = cr.metadata.annotations?.[Annotations.externalId];
    if (adopting !== undefined && adopting !== name) {
      throw new StalledError(
        "ExternalIdMismatch",
        `annotation ${Annotations.externalId}: "${adopting}" differs from the skill name "${name}"; a skill's id is its name`,
      );
    }
    const found = inventory.get(name);
    if (found === undefined) return { exists: false, upToDate: false };
    if (cr.status?.skillName !== name && adopting !== name) {
      throw new StalledError(
        "NameTaken",
        `a skill named "${name}" already exists in the service and is not managed by this resource; choose another spec.name, or adopt it with the annotation ${Annotations.externalId}: "${name}"`,
      );
    }
    const differences = this.differences(found);
    return { exists: true, upToDate: differences.length === 0, differences, status: statusOf(found) };
  }

  claim(): Partial<SkillStatus> {
    return { skillName: this.desired.name };
  }

  async create(cr: Skill): Promise<ActionResult<SkillStatus>> {
    try {
      const created = await this.handle.client.skills.create(this.desired);
      this.handle.skills.put(created);
      return { status: statusOf(created) };
    } catch (err) {
      if (isOutcomeUnknown(err)) this.handle.skills.invalidate();
      if (!isConflict(err)) throw err;
      if (cr.status?.skillName !== this.desired.name) {
        this.handle.skills.invalidate();
        throw new StalledError(
          "NameTaken",
          `a skill named "${this.desired.name}" already exists in the service and is not managed by this resource; choose another spec.name, or adopt it with the annotation ${Annotations.externalId}: "${this.desired.name}"`,
        );
      }
      // An earlier attempt claimed the name and its answer was lost: the skill is ours.
      const updated = await this.handle.client.skills.update(this.desired.name, this.desired);
      this.handle.skills.put(updated);
      return { status: statusOf(updated), event: { reason: "Adopted", message: `adopted the existing skill "${this.desired.name}"` } };
    }
  }

  async update(): Promise<ActionResult<SkillStatus>> {
    const updated = await this.handle.client.skills.update(this.desired.name, this.desired);
    this.handle.skills.put(updated);
    return { status: statusOf(updated) };
  }

  async delete(cr: Skill): Promise<void> {
    const name = skillExternalId(cr);
    if (name === undefined) return;
    try {
      await this.handle.client.skills.delete(name);
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    this.handle.skills.remove(name);
  }

  private differences(found: ServiceSkill): string[] {
    const d = this.desired;
    const out: string[] = [];
    if ((found.content ?? "") !== d.content) out.push("content");
    if (d.description !== undefined && (found.description ?? "") !== d.description) out.push("description");
    if (!deepEqual(found.resources ?? {}, d.resources ?? {})) out.push("resources");
    return out;
  }
}

function statusOf(s: ServiceSkill): Partial<SkillStatus> {
  return { skillName: s.name, contentHash: s.content_hash, createdAt: s.created_at, updatedAt: s.updated_at };
}
