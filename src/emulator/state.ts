// The emulated service's domain state, free of HTTP. Handlers call it after validating a
// request; tests call it directly to change things behind the operator's back (drift).
// Errors are the service's own (ServiceError with the documented status), so a test that
// names a wrong id fails as loudly as the service would.
import { createHash } from "node:crypto";
import type {
  Agent,
  AgentVM,
  Allocation,
  AllocateVMRequest,
  CreateAgentRequest,
  DeployOptions,
  Deployment,
  Skill,
  SkillRequest,
  UpdateAgentRequest,
  UsageRecord,
  UsageSummary,
} from "../service/types.js";
import { badRequest, conflict, notFound, ServiceError } from "./errors.js";
import { ExpiryHeap } from "./expiry-heap.js";
import {
  agentView,
  allocationView,
  deploymentView,
  skillView,
  usageView,
  vmView,
  type PersistedState,
  type StoredAgent,
  type StoredDeployment,
  type StoredSkill,
  type StoredVM,
} from "./records.js";
import type { Page } from "./validate.js";
import { paginate } from "./validate.js";
import { DAY_MS, newId, newToken, parseUTCDate, rfc3339, utcDate } from "./util.js";

/** What the state needs from the emulator's (run-time changeable) options. */
export interface StatePolicy {
  now(): number;
  poolSize(): number | undefined;
  rejectTiers(): readonly string[];
  orgId(): string;
}

/** Out-of-band agent changes may also touch what the service alone controls. */
export type AgentPatch = UpdateAgentRequest & { visibility?: string; allowed_org_ids?: string[] };

export type UsageReason = "released" | "expired" | "deleted";

const DEFAULT_VM_TTL_SECONDS = 3600;

export function contentHash(content: string, resources: Record<string, string>): string {
  // Separators that cannot occur in a file name keep ("a","bc") and ("ab","c") apart.
  const h = createHash("sha256").update(content);
  for (const key of Object.keys(resources).sort()) h.update(`\0${key}\0${resources[key] ?? ""}`);
  return h.digest("hex");
}

export class EmulatorState {
  private readonly _agents = new Map<string, StoredAgent>();
  /** `${org_id}\0${name}` -> id: names are unique per org. */
  private readonly agentNames = new Map<string, string>();
  private readonly _deployments = new Map<string, StoredDeployment>();
  private readonly _vms = new Map<string, StoredVM>();
  private readonly expiry = new ExpiryHeap();
  private readonly _skills = new Map<string, StoredSkill>();
  private readonly _usage: UsageRecord[] = [];

  /** Called after every change, so the server can persist it. */
  onChange: () => void = () => {};

  constructor(private readonly policy: StatePolicy) {}

  get agents(): ReadonlyMap<string, Readonly<StoredAgent>> {
    return this._agents;
  }
  get deployments(): ReadonlyMap<string, Readonly<StoredDeployment>> {
    return this._deployments;
  }
  /**
   * Live VMs. Reading it first expires those whose time has passed (a cheap heap check), so
   * a test sees what the service would answer, not what the last sweep left behind.
   */
  get vms(): ReadonlyMap<string, Readonly<StoredVM>> {
    this.sweep();
    return this._vms;
  }
  get skills(): ReadonlyMap<string, Readonly<StoredSkill>> {
    return this._skills;
  }
  /** Usage records, oldest first; like `vms`, reading it expires VMs that are due. */
  get usage(): readonly UsageRecord[] {
    this.sweep();
    return this._usage;
  }

  private now(): number {
    return this.policy.now();
  }

  // ---------------------------------------------------------------------------------------
  // Registry

  createAgent(req: CreateAgentRequest): Agent {
    const key = nameKey(req.org_id, req.name);
    if (this.agentNames.has(key)) {
      throw conflict(`an agent named "${req.name}" already exists in org "${req.org_id}"`);
    }
    const at = rfc3339(this.now());
    const agent: StoredAgent = {
      id: newId(),
      name: req.name,
      org_id: req.org_id,
      image: req.image,
      ...(req.author !== undefined && { author: req.author }),
      ...(req.description !== undefined && { description: req.description }),
      ...(req.endpoint !== undefined && { endpoint: req.endpoint }),
      ...(req.version !== undefined && { version: req.version }),
      ...(req.manifest !== undefined && { manifest: structuredClone(req.manifest) }),
      ...(req.image_pull_secret !== undefined && { image_pull_secret: { ...req.image_pull_secret } }),
      capabilities: [...(req.capabilities ?? [])],
      metadata: { ...req.metadata },
      state: "registered",
      visibility: "private",
      allowed_org_ids: [],
      created_at: at,
      updated_at: at,
    };
    this._agents.set(agent.id, agent);
    this.agentNames.set(key, agent.id);
    this.onChange();
    return agentView(agent);
  }

  listAgents(filter: { author?: string; status?: string }, page: Page): { agents: Agent[]; total: number } {
    const { items, total } = paginate(
      this._agents.values(),
      page,
      (a) => (filter.author === undefined || a.author === filter.author) && (filter.status === undefined || a.state === filter.status),
    );
    return { agents: items.map(agentView), total };
  }

  searchAgents(capabilities: readonly string[], page: Page): { agents: Agent[]; total: number } {
    const { items, total } = paginate(this._agents.values(), page, (a) => capabilities.every((c) => a.capabilities.includes(c)));
    return { agents: items.map(agentView), total };
  }

  getAgent(id: string): Agent {
    return agentView(this.agent(id));
  }

  updateAgent(id: string, patch: AgentPatch): Agent {
    const agent = this.agent(id);
    if (patch.name !== undefined && patch.name !== agent.name) {
      const key = nameKey(agent.org_id, patch.name);
      if (this.agentNames.has(key)) throw conflict(`an agent named "${patch.name}" already exists in org "${agent.org_id}"`);
      this.agentNames.delete(nameKey(agent.org_id, agent.name));
      this.agentNames.set(key, id);
    }
    // An explicit undefined means "not given", as it does in a JSON body.
    const given = Object.fromEntries(Object.entries(structuredClone(patch)).filter(([, v]) => v !== undefined)) as Partial<StoredAgent>;
    Object.assign(agent, given);
    agent.updated_at = rfc3339(this.now());
    this.onChange();
    return agentView(agent);
  }

  deleteAgent(id: string): void {
    const agent = this.agent(id);
    this._agents.delete(id);
    this.agentNames.delete(nameKey(agent.org_id, agent.name));
    this.onChange();
  }

  private agent(id: string): StoredAgent {
    const agent = this._agents.get(id);
    if (!agent) throw notFound(`agent ${id} not found`);
    return agent;
  }

  // ---------------------------------------------------------------------------------------
  // Deployments

  deploy(agentId: string, options: DeployOptions): Deployment {
    const agent = this._agents.get(agentId);
    if (!agent) throw notFound(`agent ${agentId} not found`);
    const id = newId();
    const at = rfc3339(this.now());
    const endpointName = options.endpoint_name ?? `agent-${id.slice(0, 8)}`;
    // Options first so that an unknown option can never overwrite what the service sets.
    const dep: StoredDeployment = {
      ...structuredClone(options),
      id,
      agent_id: agentId,
      state: "running",
      endpoint: `https://${endpointName}.agents.emulator.local`,
      endpoint_name: endpointName,
      token: newToken(),
      created_at: at,
      updated_at: at,
      revision: 1,
      agent_image: agent.image,
    };
    this._deployments.set(id, dep);
    this.onChange();
    return deploymentView(dep);
  }

  listDeployments(page: Page): Deployment[] {
    return paginate(this._deployments.values(), page).items.map(deploymentView);
  }

  getDeployment(id: string): Deployment {
    return deploymentView(this.deployment(id));
  }

  stopDeployment(id: string): Deployment {
    const dep = this.deployment(id);
    dep.state = "stopped";
    dep.updated_at = rfc3339(this.now());
    this.onChange();
    return deploymentView(dep);
  }

  redeploy(id: string): Deployment {
    const dep = this.deployment(id);
    const agent = this._agents.get(dep.agent_id);
    if (!agent) {
      // A distinct code: the deployment exists, its agent does not (D).
      throw new ServiceError(404, "agent_not_found", `agent ${dep.agent_id} of deployment ${id} not found`);
    }
    dep.state = "running";
    dep.revision += 1;
    dep.agent_image = agent.image;
    dep.updated_at = rfc3339(this.now());
    this.onChange();
    return deploymentView(dep);
  }

  deleteDeployment(id: string): void {
    this.deployment(id);
    this._deployments.delete(id);
    this.onChange();
  }

  private deployment(id: string): StoredDeployment {
    const dep = this._deployments.get(id);
    if (!dep) throw notFound(`deployment ${id} not found`);
    return dep;
  }

  // ---------------------------------------------------------------------------------------
  // Agent VMs

  allocateVM(req: AllocateVMRequest): Allocation {
    this.sweep();
    if (this.policy.rejectTiers().includes(req.tier)) {
      throw new ServiceError(400, "invalid_tier", `tier "${req.tier}" is not available`);
    }
    const skills = req.skills ?? [];
    for (const name of skills) {
      if (!this._skills.has(name)) throw new ServiceError(400, "skill_not_found", `skill "${name}" does not exist`);
    }
    const pool = this.policy.poolSize();
    if (pool !== undefined && this._vms.size >= pool) {
      throw new ServiceError(503, "pool_exhausted", "no VMs available, retry shortly");
    }
    const now = this.now();
    const ttl = req.ttl_seconds ?? DEFAULT_VM_TTL_SECONDS;
    const id = newId();
    const vm: StoredVM = {
      vm_id: id,
      state: "allocated",
      tier: req.tier,
      org_id: req.org_id ?? this.policy.orgId(),
      skills_loaded: [...skills],
      metadata: { ...req.metadata },
      env: { ...req.env },
      secure_runtime: req.secure_runtime ?? false,
      endpoint: `https://${id}.vms.emulator.local`,
      ws_url: `wss://${id}.vms.emulator.local/ws`,
      token: newToken(),
      ttl_seconds: ttl,
      allocatedAt: now,
      expiresAt: now + ttl * 1000,
    };
    this._vms.set(id, vm);
    this.expiry.push(vm.expiresAt, id);
    this.onChange();
    return allocationView(vm);
  }

  /** The caller's org only (SERVICE.md: "scoped to the caller's org"). */
  listVMs(filter: { state?: string; tier?: string }, page: Page): AgentVM[] {
    this.sweep();
    const org = this.policy.orgId();
    return paginate(
      this._vms.values(),
      page,
      (vm) => vm.org_id === org && (filter.state === undefined || vm.state === filter.state) && (filter.tier === undefined || vm.tier === filter.tier),
    ).items.map((vm) => vmView(vm));
  }

  getVM(id: string): AgentVM {
    return vmView(this.vm(id));
  }

  vmEndpoint(id: string): Record<string, string> {
    const vm = this.vm(id);
    return { endpoint: vm.endpoint, ws_url: vm.ws_url };
  }

  renewVM(id: string, ttlSeconds: number): AgentVM {
    const vm = this.vm(id);
    vm.ttl_seconds = ttlSeconds;
    vm.expiresAt = this.now() + ttlSeconds * 1000;
    this.expiry.push(vm.expiresAt, id);
    this.onChange();
    return vmView(vm);
  }

  releaseVM(id: string): AgentVM {
    const vm = this.vm(id);
    const now = this.now();
    this.endVM(vm, now, "released");
    return vmView({ ...vm, state: "released" }, now);
  }

  deleteVM(id: string): void {
    this.endVM(this.vm(id), this.now(), "deleted");
  }

  /** Out of band: the VM's TTL runs out now. */
  expireVM(id: string): void {
    const vm = this.vm(id);
    vm.expiresAt = Math.min(vm.expiresAt, this.now());
    this.endVM(vm, vm.expiresAt, "expired");
  }

  /** Remove every VM whose expires_at has passed; returns how many. Cheap when none are due. */
  sweep(): number {
    let expired = 0;
    for (const { at, id } of this.expiry.popDue(this.now())) {
      const vm = this._vms.get(id);
      // A renewal left an older heap entry behind: only the VM's current expiry counts.
      if (!vm || vm.expiresAt !== at) continue;
      this.endVM(vm, vm.expiresAt, "expired");
      expired++;
    }
    return expired;
  }

  private vm(id: string): StoredVM {
    this.sweep();
    const vm = this._vms.get(id);
    if (!vm) throw notFound(`vm ${id} not found`);
    return vm;
  }

  private endVM(vm: StoredVM, endedAt: number, reason: UsageReason): void {
    this._vms.delete(vm.vm_id);
    this._usage.push({
      vm_id: vm.vm_id,
      tier: vm.tier,
      started_at: rfc3339(vm.allocatedAt),
      ended_at: rfc3339(endedAt),
      duration_seconds: Math.max(0, Math.round((endedAt - vm.allocatedAt) / 1000)),
      reason,
    });
    this.onChange();
  }

  // ---------------------------------------------------------------------------------------
  // Skills

  createSkill(req: SkillRequest): Skill {
    if (this._skills.has(req.name)) throw conflict(`a skill named "${req.name}" already exists`);
    const at = rfc3339(this.now());
    const resources = { ...req.resources };
    const skill: StoredSkill = {
      name: req.name,
      content: req.content,
      ...(req.description !== undefined && { description: req.description }),
      resources,
      content_hash: contentHash(req.content, resources),
      created_at: at,
      updated_at: at,
    };
    this._skills.set(skill.name, skill);
    this.onChange();
    return skillView(skill);
  }

  listSkills(): Skill[] {
    return [...this._skills.values()].map(skillView);
  }

  getSkill(name: string): Skill {
    return skillView(this.skill(name));
  }

  /** PUT semantics: the body replaces content, description and resources. */
  replaceSkill(name: string, req: SkillRequest): Skill {
    const skill = this.skill(name);
    const next: StoredSkill = {
      name: skill.name,
      content: req.content,
      ...(req.description !== undefined && { description: req.description }),
      resources: { ...req.resources },
      content_hash: "",
      created_at: skill.created_at,
      updated_at: rfc3339(this.now()),
    };
    next.content_hash = contentHash(next.content, next.resources);
    this._skills.set(name, next);
    this.onChange();
    return skillView(next);
  }

  /** Out of band: change some fields; the hash follows as the service would recompute it. */
  updateSkill(name: string, patch: Partial<Omit<SkillRequest, "name">>): Skill {
    const skill = this.skill(name);
    return this.replaceSkill(name, {
      name,
      content: patch.content ?? skill.content,
      description: patch.description ?? skill.description,
      resources: patch.resources ?? skill.resources,
    });
  }

  deleteSkill(name: string): void {
    this.skill(name);
    this._skills.delete(name);
    this.onChange();
  }

  private skill(name: string): StoredSkill {
    const skill = this._skills.get(name);
    if (!skill) throw notFound(`skill ${name} not found`);
    return skill;
  }

  // ---------------------------------------------------------------------------------------
  // Usage

  /** Records whose ended_at falls on a UTC day within [from, to] (YYYY-MM-DD, inclusive). */
  listUsage(q: { from?: string; to?: string; tier?: string }, page: Page): UsageRecord[] {
    this.sweep();
    const today = utcDate(this.now());
    const fromMs = parseDay(q.from ?? utcDate(this.now() - 30 * DAY_MS), "from");
    const toMs = parseDay(q.to ?? today, "to") + DAY_MS;
    return paginate(this._usage, page, (u) => {
      const ended = Date.parse(u.ended_at);
      return ended >= fromMs && ended < toMs && (q.tier === undefined || u.tier === q.tier);
    }).items.map(usageView);
  }

  /** The current calendar month (UTC) of the emulator's clock. */
  usageSummary(): UsageSummary {
    this.sweep();
    const now = new Date(this.now());
    const start = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1);
    const next = Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1);
    const byTier: Record<string, number> = {};
    const vms = new Set<string>();
    let total = 0;
    for (const u of this._usage) {
      const ended = Date.parse(u.ended_at);
      if (ended < start || ended >= next) continue;
      total += u.duration_seconds;
      vms.add(u.vm_id);
      byTier[u.tier] = (byTier[u.tier] ?? 0) + u.duration_seconds;
    }
    return {
      period_start: utcDate(start),
      period_end: utcDate(next - DAY_MS),
      total_seconds: total,
      vm_count: vms.size,
      by_tier: byTier,
    };
  }

  // ---------------------------------------------------------------------------------------
  // Persistence

  snapshot(): Omit<PersistedState, "version" | "tokens"> {
    return {
      agents: [...this._agents.values()],
      deployments: [...this._deployments.values()],
      vms: [...this._vms.values()],
      skills: [...this._skills.values()],
      usage: this._usage,
    };
  }

  restore(p: Omit<PersistedState, "version" | "tokens">): void {
    this._agents.clear();
    this.agentNames.clear();
    this._deployments.clear();
    this._vms.clear();
    this.expiry.clear();
    this._skills.clear();
    this._usage.length = 0;
    for (const a of p.agents) {
      this._agents.set(a.id, a);
      this.agentNames.set(nameKey(a.org_id, a.name), a.id);
    }
    for (const d of p.deployments) this._deployments.set(d.id, d);
    for (const vm of p.vms) {
      this._vms.set(vm.vm_id, vm);
      this.expiry.push(vm.expiresAt, vm.vm_id);
    }
    for (const s of p.skills) this._skills.set(s.name, s);
    // A loop, not push(...): a spread of a long array overflows the call stack.
    for (const u of p.usage) this._usage.push(u);
  }
}

function nameKey(org: string, name: string): string {
  return `${org}\0${name}`;
}

function parseDay(s: string, field: string): number {
  const ms = parseUTCDate(s);
  if (ms === undefined) throw badRequest(`${field} must be a date in the form YYYY-MM-DD`);
  return ms;
}
