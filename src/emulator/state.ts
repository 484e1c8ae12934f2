// The emulated service's domain state, free of HTTP. Handlers call it after validating a
// request; tests call it directly to change things behind the operator's back (drift).
// Errors are the service's own (ServiceError with the documented status), so a test that
// names a wrong id fails as loudly as the service would.
import { createHash } from "node:crypto";
import { AccessClients, type ConfiguredClient } from "./access-clients.js";
import { configHash, parseDeployOptions } from "./deploy-options.js";
import { badRequest, conflict, notFound, ServiceError } from "./errors.js";
import { ExpiryHeap } from "./expiry-heap.js";
import type { StateSnapshot } from "./persistence.js";
import { allocationLimit, defaultPoolConfig, mergePoolConfig, poolStatus } from "./pool.js";
import {
  agentView,
  allocationView,
  deploymentView,
  skillView,
  toolView,
  usageView,
  vmView,
  type StoredAgent,
  type StoredDeployment,
  type StoredSkill,
  type StoredTool,
  type StoredUsage,
  type StoredVM,
} from "./records.js";
import { DAY_MS, newId, newToken, parseUTCDate, rfc3339, utcDate } from "./util.js";
import type { Page } from "./validate.js";
import { paginate } from "./validate.js";
import type {
  AccessClient,
  Agent,
  AgentVM,
  AllocateRequest,
  Allocation,
  CreateAgentRequest,
  CreateToolRequest,
  CreatedAccessClient,
  DeployOptions,
  Deployment,
  JsonObject,
  PoolConfig,
  PoolStatus,
  Skill,
  SkillRequest,
  Tool,
  UpdateAgentRequest,
  UsageRecord,
  UsageSummary,
} from "./wire.js";

/** What the state needs from the emulator's (run-time changeable) options. */
export interface StatePolicy {
  now(): number;
  poolSize(): number | undefined;
  rejectTiers(): readonly string[];
  orgId(): string;
  /** The `clients` option. */
  configuredClients(): readonly ConfiguredClient[];
  /** When the emulator started (created_at of the API key and configured clients). */
  startedAt(): number;
  /** The VM's WebSocket URL on the emulator's own server; without it, a placeholder host. */
  wsURL?(vmId: string): string;
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
  private readonly _tools = new Map<string, StoredTool>();
  private readonly _usage: StoredUsage[] = [];
  private _poolConfig: PoolConfig = defaultPoolConfig();
  private readonly clients: AccessClients;

  /** Called after every change, so the server can persist it. */
  onChange: () => void = () => {};
  /**
   * Called when a VM comes to life (allocation, or restore from a state file) before it is
   * stored, so the server can start its runtime; a throw fails the allocation.
   */
  onVMStart: (vm: Readonly<StoredVM>) => void = () => {};
  /** Called when a VM ends (release, delete, expiry), so the server can stop its runtime. */
  onVMEnd: (vm: Readonly<StoredVM>, reason: UsageReason) => void = () => {};

  constructor(private readonly policy: StatePolicy) {
    this.clients = new AccessClients({ now: () => policy.now(), configured: () => policy.configuredClients(), startedAt: () => policy.startedAt() });
    this.clients.onChange = () => this.onChange();
  }

  get agents(): ReadonlyMap<string, Readonly<StoredAgent>> {
    return this._agents;
  }
  get deployments(): ReadonlyMap<string, Readonly<StoredDeployment>> {
    return this._deployments;
  }
  /**
   * Live VMs, keyed by id. Reading it first expires those whose time has passed (a cheap heap
   * check), so a test sees what the service would answer, not what the last sweep left behind.
   */
  get vms(): ReadonlyMap<string, Readonly<StoredVM>> {
    this.sweep();
    return this._vms;
  }
  get skills(): ReadonlyMap<string, Readonly<StoredSkill>> {
    return this._skills;
  }
  get tools(): ReadonlyMap<string, Readonly<StoredTool>> {
    return this._tools;
  }
  /** Usage records, oldest first; like `vms`, reading it expires VMs that are due. */
  get usage(): readonly Readonly<StoredUsage>[] {
    this.sweep();
    return this._usage;
  }
  /** A copy of the pool configuration. */
  get poolConfig(): PoolConfig {
    return { ...this._poolConfig, default_skills: [...this._poolConfig.default_skills] };
  }

  /** Called with a client id when an access client is revoked (the server ends its tokens). */
  set onClientRevoked(fn: (clientId: string) => void) {
    this.clients.onRevoke = fn;
  }

  private now(): number {
    return this.policy.now();
  }

  // ---------------------------------------------------------------------------------------
  // Registry: agents

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

  /** Every agent having all the capabilities (no paging is published for search). */
  searchAgents(capabilities: readonly string[]): { agents: Agent[]; total: number } {
    const agents = [...this._agents.values()].filter((a) => capabilities.every((c) => a.capabilities.includes(c))).map(agentView);
    return { agents, total: agents.length };
  }

  getAgent(id: string): Agent {
    return agentView(this.agent(id));
  }

  /** Published as a map of strings; 404 when the agent has no key (D). */
  agentPublicKey(id: string): Record<string, string> {
    const agent = this.agent(id);
    if (agent.public_key === undefined || agent.public_key === "") throw notFound(`agent ${id} has no public key`);
    return { agent_id: agent.id, public_key: agent.public_key };
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
  // Registry: tools

  createTool(req: CreateToolRequest): Tool {
    if (this._tools.has(req.id)) throw conflict(`a tool with id "${req.id}" already exists`);
    const tool: StoredTool = {
      id: req.id,
      name: req.name,
      category: req.category ?? "",
      description: req.description ?? "",
      created_at: rfc3339(this.now()),
    };
    this._tools.set(tool.id, tool);
    this.onChange();
    return toolView(tool);
  }

  /** Every tool (no paging is published), optionally of one category. */
  listTools(category?: string): { tools: Tool[]; total: number } {
    const tools = [...this._tools.values()].filter((t) => category === undefined || t.category === category).map(toolView);
    return { tools, total: tools.length };
  }

  getTool(id: string): Tool {
    const tool = this._tools.get(id);
    if (!tool) throw notFound(`tool ${id} not found`);
    return toolView(tool);
  }

  // ---------------------------------------------------------------------------------------
  // Deployments

  /** `options` as received; its known keys are validated (400), the rest kept as sent. */
  deploy(agentId: string, options: DeployOptions | JsonObject): Deployment {
    const agent = this._agents.get(agentId);
    if (!agent) throw notFound(`agent ${agentId} not found`);
    const opts = parseDeployOptions(options as JsonObject);
    const id = newId();
    const at = rfc3339(this.now());
    const dep: StoredDeployment = {
      id,
      registry_id: agentId,
      image: agent.image,
      ...(agent.manifest !== undefined && { manifest: structuredClone(agent.manifest) }),
      state: "running",
      token: newToken(),
      created_at: at,
      updated_at: at,
      revision: 1,
      ...this.fromOptions(id, opts, agent),
    };
    this._deployments.set(id, dep);
    this.onChange();
    return deploymentView(dep);
  }

  /** No paging is published for this list: every deployment, always. */
  listDeployments(): Deployment[] {
    return [...this._deployments.values()].map(deploymentView);
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

  /** Out of band: the service moves the deployment to `state` (a crashed agent: "failed"). */
  setDeploymentState(id: string, state: string): Deployment {
    const dep = this.deployment(id);
    dep.state = state;
    dep.updated_at = rfc3339(this.now());
    this.onChange();
    return deploymentView(dep);
  }

  /** Picks up the agent's current image and manifest; the options (and config_hash) stay. */
  redeploy(id: string): Deployment {
    const dep = this.deployment(id);
    const agent = this._agents.get(dep.registry_id);
    if (!agent) {
      // A distinct code: the deployment exists, its agent does not (D).
      throw new ServiceError(404, "agent_not_found", `agent ${dep.registry_id} of deployment ${id} not found`);
    }
    dep.state = "running";
    dep.revision += 1;
    dep.image = agent.image;
    if (agent.manifest !== undefined) dep.manifest = structuredClone(agent.manifest);
    else delete dep.manifest;
    dep.updated_at = rfc3339(this.now());
    this.onChange();
    return deploymentView(dep);
  }

  /**
   * Out of band: the deployment's config was changed from another client. The options are
   * replaced and the record's option-derived fields and config_hash follow, as if it had been
   * deployed with them; updated_at moves.
   */
  reconfigureDeployment(id: string, options: DeployOptions | JsonObject): Deployment {
    const dep = this.deployment(id);
    const opts = parseDeployOptions(options as JsonObject);
    Object.assign(dep, this.fromOptions(id, opts, this._agents.get(dep.registry_id), dep.name));
    dep.updated_at = rfc3339(this.now());
    this.onChange();
    return deploymentView(dep);
  }

  deleteDeployment(id: string): void {
    this.deployment(id);
    this._deployments.delete(id);
    this.onChange();
  }

  /** The record's fields taken from the options, each with its default when not given. */
  private fromOptions(
    id: string,
    opts: DeployOptions,
    agent: StoredAgent | undefined,
    fallbackName = "",
  ): Pick<StoredDeployment, "name" | "tier" | "skills" | "metadata" | "endpoint_name" | "endpoint" | "config_hash" | "options"> {
    const endpointName = opts.endpoint_name ?? `agent-${id.slice(0, 8)}`;
    return {
      name: opts.name ?? agent?.name ?? fallbackName,
      tier: opts.tier ?? this._poolConfig.default_tier,
      skills: [...(opts.skills ?? [])],
      metadata: { ...opts.metadata },
      endpoint_name: endpointName,
      endpoint: `https://${endpointName}.agents.emulator.local`,
      config_hash: configHash(opts),
      options: opts,
    };
  }

  private deployment(id: string): StoredDeployment {
    const dep = this._deployments.get(id);
    if (!dep) throw notFound(`deployment ${id} not found`);
    return dep;
  }

  // ---------------------------------------------------------------------------------------
  // Agent VMs

  /** Returns the allocation result (the only shape that says vm_id). */
  allocateVM(req: AllocateRequest): Allocation {
    this.sweep();
    if (this.policy.rejectTiers().includes(req.tier)) {
      throw new ServiceError(400, "invalid_tier", `tier "${req.tier}" is not available`);
    }
    const ttl = req.ttl_seconds ?? DEFAULT_VM_TTL_SECONDS;
    this.checkTTL(ttl);
    const skills = req.skills ?? [];
    for (const name of skills) {
      if (!this._skills.has(name)) throw new ServiceError(400, "skill_not_found", `skill "${name}" does not exist`);
    }
    const limit = allocationLimit(this._poolConfig, this.policy.poolSize());
    if (limit !== undefined && this._vms.size >= limit) {
      throw new ServiceError(503, "pool_exhausted", "no VMs available, retry shortly");
    }
    const now = this.now();
    const id = newId();
    const vm: StoredVM = {
      id,
      state: "allocated",
      tier: req.tier,
      org_id: req.org_id ?? this.policy.orgId(),
      skills: [...skills],
      metadata: { ...req.metadata },
      env: { ...req.env },
      ...(req.secure_runtime !== undefined && { secure_runtime: req.secure_runtime }),
      endpoint: `https://${id}.vms.emulator.local`,
      ws_url: this.policy.wsURL?.(id) ?? `wss://${id}.vms.emulator.local/ws`,
      token: newToken(),
      ttl_seconds: ttl,
      allocatedAt: now,
      expiresAt: now + ttl * 1000,
    };
    this.onVMStart(vm);
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
    // Derived anew: a VM restored from a state file keeps working on a new port.
    return { endpoint: vm.endpoint, ws_url: this.policy.wsURL?.(vm.id) ?? vm.ws_url };
  }

  renewVM(id: string, ttlSeconds: number): AgentVM {
    const vm = this.vm(id);
    this.checkTTL(ttlSeconds);
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

  private checkTTL(ttl: number): void {
    const max = this._poolConfig.max_vm_ttl_seconds;
    if (ttl > max) throw badRequest(`ttl_seconds must be at most ${max} (the pool's max_vm_ttl_seconds)`);
  }

  private vm(id: string): StoredVM {
    this.sweep();
    const vm = this._vms.get(id);
    if (!vm) throw notFound(`vm ${id} not found`);
    return vm;
  }

  private endVM(vm: StoredVM, endedAt: number, reason: UsageReason): void {
    this._vms.delete(vm.id);
    this.onVMEnd(vm, reason);
    this._usage.push({
      org_id: vm.org_id,
      vm_id: vm.id,
      tier: vm.tier,
      started_at: rfc3339(vm.allocatedAt),
      ended_at: rfc3339(endedAt),
      duration_seconds: Math.max(0, Math.round((endedAt - vm.allocatedAt) / 1000)),
      reason,
    });
    this.onChange();
  }

  // ---------------------------------------------------------------------------------------
  // Pool

  poolStatus(): PoolStatus {
    this.sweep();
    return poolStatus(this._poolConfig, [...this._vms.values()].map((vm) => vm.tier), this.policy.poolSize());
  }

  /** Any subset of the config; min_warm <= max_warm is checked on the result (400). */
  updatePoolConfig(patch: Partial<PoolConfig>): PoolConfig {
    this._poolConfig = mergePoolConfig(this._poolConfig, patch);
    this.onChange();
    return this.poolConfig;
  }

  // ---------------------------------------------------------------------------------------
  // Access clients

  createAccessClient(name: string): CreatedAccessClient {
    return this.clients.create(name);
  }

  listAccessClients(): AccessClient[] {
    return this.clients.list();
  }

  revokeAccessClient(clientId: string): void {
    this.clients.revoke(clientId);
  }

  /** True for an active client with this secret (the token service asks). */
  verifyClient(clientId: string, secret: string): boolean {
    return this.clients.verify(clientId, secret);
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

  /** No paging is published for this list: every skill, always. */
  listSkills(): Skill[] {
    return [...this._skills.values()].map(skillView);
  }

  getSkill(name: string): Skill {
    return skillView(this.skill(name));
  }

  /** PUT semantics: the body replaces content, description and resources. */
  replaceSkill(name: string, req: SkillRequest): Skill {
    const skill = this.skill(name);
    const resources = { ...req.resources };
    const next: StoredSkill = {
      name: skill.name,
      content: req.content,
      ...(req.description !== undefined && { description: req.description }),
      resources,
      content_hash: contentHash(req.content, resources),
      created_at: skill.created_at,
      updated_at: rfc3339(this.now()),
    };
    this._skills.set(name, next);
    this.onChange();
    return skillView(next);
  }

  /** Out of band: change some fields; the hash follows as the service would recompute it. */
  updateSkill(name: string, patch: Partial<Omit<SkillRequest, "name">>): Skill {
    const skill = this.skill(name);
    const description = patch.description ?? skill.description;
    return this.replaceSkill(name, {
      name,
      content: patch.content ?? skill.content,
      ...(description !== undefined && { description }),
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

  /**
   * The caller's org's records (as the VM list is the caller's org's, decision 5) whose ended_at
   * falls on a UTC day within [from, to] (YYYY-MM-DD, inclusive).
   */
  listUsage(q: { from?: string; to?: string; tier?: string }, page: Page): UsageRecord[] {
    this.sweep();
    const org = this.policy.orgId();
    const today = utcDate(this.now());
    const fromMs = parseDay(q.from ?? utcDate(this.now() - 30 * DAY_MS), "from");
    const toMs = parseDay(q.to ?? today, "to") + DAY_MS;
    return paginate(this._usage, page, (u) => {
      const ended = Date.parse(u.ended_at);
      return u.org_id === org && ended >= fromMs && ended < toMs && (q.tier === undefined || u.tier === q.tier);
    }).items.map(usageView);
  }

  /** The caller's org's usage in the current calendar month (UTC) of the emulator's clock. */
  usageSummary(): UsageSummary {
    this.sweep();
    const org = this.policy.orgId();
    const now = new Date(this.now());
    const start = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1);
    const next = Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1);
    const byTier: Record<string, number> = {};
    const vms = new Set<string>();
    let total = 0;
    for (const u of this._usage) {
      const ended = Date.parse(u.ended_at);
      if (u.org_id !== org || ended < start || ended >= next) continue;
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

  snapshot(): StateSnapshot {
    const clients = this.clients.snapshot();
    return {
      agents: [...this._agents.values()],
      deployments: [...this._deployments.values()],
      vms: [...this._vms.values()],
      skills: [...this._skills.values()],
      tools: [...this._tools.values()],
      usage: this._usage,
      poolConfig: this._poolConfig,
      accessClients: clients.created,
      revokedClientIds: clients.revokedConfigured,
    };
  }

  restore(p: StateSnapshot): void {
    this._agents.clear();
    this.agentNames.clear();
    this._deployments.clear();
    for (const vm of this._vms.values()) this.onVMEnd(vm, "deleted");
    this._vms.clear();
    this.expiry.clear();
    this._skills.clear();
    this._tools.clear();
    this._usage.length = 0;
    for (const a of p.agents) {
      this._agents.set(a.id, a);
      this.agentNames.set(nameKey(a.org_id, a.name), a.id);
    }
    for (const d of p.deployments) this._deployments.set(d.id, d);
    for (const vm of p.vms) {
      // Processes do not survive a restart: a restored VM gets a fresh runtime.
      this.onVMStart(vm);
      this._vms.set(vm.id, vm);
      this.expiry.push(vm.expiresAt, vm.id);
    }
    for (const s of p.skills) this._skills.set(s.name, s);
    for (const t of p.tools) this._tools.set(t.id, t);
    // A loop, not push(...): a spread of a long array overflows the call stack.
    // A record saved before usage was org-scoped (no org_id) counts as the caller's org's.
    for (const u of p.usage) this._usage.push({ ...u, org_id: u.org_id ?? this.policy.orgId() });
    this._poolConfig = { ...defaultPoolConfig(), ...p.poolConfig };
    this.clients.restore({ created: p.accessClients, revokedConfigured: p.revokedClientIds });
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
