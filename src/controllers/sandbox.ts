// Sandbox: an agent VM kept alive by renewing its TTL before it runs out. The renewal is
// scheduled as a requeue on the work queue's priority lane at expiresAt - renewBefore
// (jittered), so a cold-start backlog never delays it. A VM that disappears is replaced while
// keepAlive is true; a change of tier, skills, env, secureRuntime or org replaces the VM (the new
// one first, then the old one is released).
//
// A renewal is one service call and, in the steady state, no Kubernetes write: the renewals
// are counted in memory and status reports them (expiresAt, lastRenewedAt, renewals,
// reportedAt) at most every --sandbox-status-interval, as the kubelet reports node status
// (KEP-589). Status also says the cadences (renewEverySeconds, reportEverySeconds), so a reader
// can tell a VM that is alive from one that is not even when expiresAt is in the past.
import { createHash } from "node:crypto";
import { Annotations, CONFIG_HASH_KEY, ConditionType, MARKER_KEY, SECRETS_HASH_KEY, kindNames } from "../api/names.js";
import type { Sandbox, SandboxStatus, Skill } from "../api/index.js";
import { vmStateIsLive } from "../api/vm-state.js";
import { FailedAfterChange, NotReadyError, StalledError } from "../managed/errors.js";
import type { ActionResult, ConnectionDetails, ExternalClient, Observation, Planned } from "../managed/external.js";
import { managementOf } from "../managed/management-policies.js";
import { errorMessage } from "../lib/errors.js";
import { RetryNoLaterThan } from "../runtime/controller.js";
import type { Informer } from "../runtime/informer.js";
import type { Metrics } from "../runtime/metrics.js";
import { formatTime } from "../runtime/status.js";
import {
  isNotFound,
  isOutcomeUnknown,
  goneIndeed,
  isServiceError,
  ServiceError,
  refusalOf,
  type AgentVM,
  type AllocateVMRequest,
  type Allocation,
} from "../service/index.js";
import type { ServiceHandle } from "./connection-pool.js";
import { fingerprint, referrers, requestOf, type KindContext, type ManagedKind } from "./kind.js";
import { findOwn, madeFor, removeObject } from "./marker.js";
import type { ObjectStore } from "./object-store.js";
import { skillUsers, skillsByName, waitForSkills } from "./skill.js";

export const DEFAULT_TTL_SECONDS = 3600;

export function sandboxExternalId(cr: Sandbox): string | undefined {
  return cr.metadata.annotations?.[Annotations.externalId] ?? cr.status?.vmId;
}

export function ttlSeconds(cr: Sandbox): number {
  return cr.spec.ttlSeconds ?? DEFAULT_TTL_SECONDS;
}

/**
 * Default: a fifth of the TTL, at least 30 s, and never the whole TTL. `ttl`: the TTL the VM is
 * renewed with, when it is not the spec's (renewalTtl: the service refused that one).
 */
export function renewBeforeSeconds(cr: Sandbox, ttl = ttlSeconds(cr)): number {
  const wanted = cr.spec.renewBeforeSeconds ?? Math.max(30, Math.floor(ttl / 5));
  return Math.min(wanted, Math.max(1, ttl - 1));
}

/**
 * When `vm`'s renewal is due: renewBeforeSeconds before it runs out, less a jitter of up to
 * 10 % of that window, so thousands of VMs allocated together do not renew in the same second.
 * The jitter comes from the VM's id and expiry (to the second: the list and the write answers
 * differ in precision), not from Math.random: every pass must compute the same time, or a pass
 * woken for a renewal drew another and found it not due (and came back 1 ms later, over and
 * over, until the unjittered time).
 */
export function renewAtOf(cr: Sandbox, vmId: string, expiresAt: number, ttl = ttlSeconds(cr)): number {
  const windowMs = renewBeforeSeconds(cr, ttl) * 1000;
  // Never more than a tenth of the time between renewals either: a window close to the TTL
  // (short TTLs) would otherwise make the next renewal due the moment one is made.
  const jitterMaxMs = Math.min(windowMs, ttl * 1000 - windowMs) / 10;
  const seed = createHash("sha1").update(`${vmId}@${Math.floor(expiresAt / 1000)}`).digest();
  return expiresAt - windowMs - Math.floor((seed.readUInt32BE(0) / 0x1_0000_0000) * jitterMaxMs);
}

/** How soon a renewal counts as soon (renewalSoon): more than a pass through a long queue takes. */
const SOON_MS = 120_000;

/**
 * Whether the Sandbox's VM is due for renewal within SOON_MS, by its status: expiresAt is
 * reported every few minutes, so it is at most as late as the VM's expiry (a renewal since
 * only moves that later), and the renewal is at least as soon as it says.
 */
export function renewalSoon(cr: Sandbox, now: number): boolean {
  const expiresAt = Date.parse(cr.status?.expiresAt ?? "");
  if (cr.status?.vmId === undefined || Number.isNaN(expiresAt) || !(cr.spec.keepAlive ?? true) || !vmStateIsLive(cr.status.state)) return false;
  return expiresAt - renewBeforeSeconds(cr) * 1000 - now < SOON_MS;
}

/**
 * The TTL the service granted, just after a renewal or an allocation: the one asked for, unless
 * its answer says less (the VM's ttl_seconds) or its new expiry is well short of it
 * (CAPPED_BELOW: a second or two is the answer's travel and the clocks' skew, not a cap). A
 * service that caps the TTL without an error (600 s for 3600) would otherwise have the next
 * renewal due at once, and the pass renew again and again, a millisecond apart. What was
 * granted is remembered (grantedTtls) for the passes between renewals; a process that has not
 * renewed the VM yet reckons with the spec's TTL: a VM whose window by it is longer than its
 * time left is renewed at that pass, once, as after a change of ttlSeconds.
 */
function grantedTtl(asked: number, answer: { ttl_seconds?: number }, fresh: { expiresAt: number; now: number }): number {
  const said = answer.ttl_seconds !== undefined && answer.ttl_seconds > 0 ? answer.ttl_seconds : asked;
  const left = fresh.expiresAt > fresh.now ? Math.max(1, Math.round((fresh.expiresAt - fresh.now) / 1000)) : asked;
  return Math.min(asked, said, left < asked * CAPPED_BELOW ? left : asked);
}

/**
 * Seconds between two renewals of a VM kept alive (a renewal lands up to 10 % of
 * renewBeforeSeconds earlier, the jitter); 0 for one that is not renewed (keepAlive false, or
 * management policies without Create and Update).
 */
export function renewEverySeconds(cr: Sandbox, ttl = ttlSeconds(cr)): number {
  if (!(cr.spec.keepAlive ?? true) || !managementOf(cr.spec).upkeep) return 0;
  return ttl - renewBeforeSeconds(cr, ttl);
}

/** Sandbox VMs; a Skill (by its name in the service) or an envFrom Secret changing brings them back. */
export function sandboxes(ctx: KindContext): ManagedKind<Sandbox, SandboxPlan> {
  const skills = skillsByName(ctx);
  const deps: SandboxDeps = {
    store: ctx.store,
    skills,
    now: () => ctx.now(),
    statusIntervalMs: ctx.options?.sandboxStatusIntervalMs ?? 0,
    tallies: new Map(),
    refusedTtls: new Map(),
    grantedTtls: new Map(),
    endpointsRead: new Map(),
    metrics: ctx.metrics,
  };
  return {
    names: kindNames.sandbox,
    controller: "sandbox",
    inventory: "vms",
    externalId: sandboxExternalId,
    connectionSecret: true,
    // Pausing must not lose a VM: a paused Sandbox is still renewed.
    needsUpkeep: true,
    keepsAlive: (cr) => (cr.spec.keepAlive ?? true) && sandboxExternalId(cr) !== undefined && vmStateIsLive(cr.status?.state),
    upkeepSoon: (cr) => renewalSoon(cr, ctx.now().getTime()),
    // A replacement VM (for a changed spec, or one gone at its renewal) is allocated in update:
    // one whose answer is lost may land after a deletion's look, and would run unrenewed and
    // unreleased until its TTL. (The allocation is the only call of update whose outcome can
    // be unknown: renewals and releases are repeated safely.)
    updateCreates: true,
    // The envFrom Secrets' values go into the VM's env: fixing one is a fix of a refused VM.
    inputs: (cr) => fingerprint((cr.spec.envFrom ?? []).map((e, i) => ctx.store.secretData(cr.metadata.namespace, e.secretRef.name, `spec.envFrom[${i}].secretRef.name`))),
    client: (handle) => new SandboxClient(handle, deps),
    watches(controller, own) {
      const loading = skillUsers(own);
      const usingSecret = sandboxesUsingSecret(own);
      controller.watch(skills, (sk) => loading(sk).map(requestOf));
      controller.watch(ctx.secrets, (s) => usingSecret(s).map(requestOf));
      own.on("delete", (sb) => {
        deps.tallies.delete(sb.metadata.uid);
        deps.refusedTtls.delete(sb.metadata.uid);
        deps.grantedTtls.delete(sb.metadata.uid);
        deps.endpointsRead.delete(sb.metadata.uid);
      });
    },
  };
}

export interface SandboxDeps {
  store: ObjectStore;
  /** Indexed by SKILL_NAME_INDEX (skillsByName). */
  skills: Informer<Skill>;
  now(): Date;
  /** Status reports renewals at most this often (ms); 0: at every renewal. */
  statusIntervalMs: number;
  /** Per Sandbox (uid): its VM's renewals as this process counted them, reported or not. */
  tallies: Map<string, Tally>;
  /**
   * Per Sandbox (uid): the spec's ttlSeconds the service refused at a renewal of VM `vmId`,
   * and the TTL the VM had then, which its renewals use instead until the spec's changes.
   */
  refusedTtls: Map<string, RefusedTtl>;
  /**
   * Per Sandbox (uid): a TTL the service granted less of than asked, without an error, for VM
   * `vmId` (its cap: a pool's max_vm_ttl_seconds), which its renewals are timed by while the
   * same TTL is asked. Not known after a restart: the first pass renews once, and learns it.
   */
  grantedTtls: Map<string, GrantedTtl>;
  /**
   * Per Sandbox (uid): the VM whose endpoint this process read (GET /vms/{id}/endpoint
   * answered, whatever keys its map had). One whose read failed has status.endpoint "" and is
   * asked again until it is in here, once per process at most after that.
   */
  endpointsRead: Map<string, string>;
  metrics?: Pick<Metrics, "sandboxRenewals" | "sandboxRenewalLateness">;
}

export interface RefusedTtl {
  vmId: string;
  ttl: number;
  instead: number;
}

export interface GrantedTtl {
  vmId: string;
  asked: number;
  granted: number;
}

/**
 * How much shorter than the TTL asked an expiry's distance must be to count as a cap: it also
 * holds the answer's time on the way and the clocks' skew, which must not make a cadence of
 * their own (a status write at every renewal, for a second's difference).
 */
const CAPPED_BELOW = 0.9;

/**
 * What is known of a VM's renewals, whether status says it yet or not. The count is absolute,
 * not "since the last report": a status write that fails is made good by the next report, and
 * nothing is ever counted twice.
 */
export interface Tally {
  vmId: string;
  renewals: number;
  lastRenewedAt: string | undefined;
}

/**
 * The allocation the spec asks for; waits for Skills managed here and for envFrom Secrets.
 * Reads only `store` and `skills` of the deps (a SandboxRun's template allocates with it too).
 */
export function desiredAllocation(
  cr: Sandbox,
  handle: ServiceHandle,
  deps: Pick<SandboxDeps, "store" | "skills"> & Partial<SandboxDeps>,
): AllocateVMRequest {
  const { spec, metadata } = cr;
  waitForSkills(deps.skills, cr, spec.skills ?? [], (name) => {
    // Not managed here: it must exist in the service already. Order never matters, so a
    // skill that is missing is awaited rather than sent (and refused with a 400).
    if (handle.skills.get(name) === undefined) {
      throw new NotReadyError("WaitingForSkill", `skill "${name}" (spec.skills) is neither a Skill resource in this namespace nor a skill in the service`);
    }
  });
  const fromSecrets = envFromSecrets(cr, deps.store);
  const held = heldFromSecrets(cr, fromSecrets);
  const env: Record<string, string> = { ...fromSecrets, ...spec.env };
  const req: AllocateVMRequest = {
    tier: spec.tier,
    ttl_seconds: ttlSeconds(cr),
    metadata: {
      ...spec.metadata,
      [MARKER_KEY]: metadata.uid,
      ...(Object.keys(held).length > 0 && { [SECRETS_HASH_KEY]: secretsHash(cr, held) }),
    },
  };
  if (spec.skills !== undefined) req.skills = spec.skills;
  if (Object.keys(env).length > 0) req.env = env;
  const orgId = spec.orgId ?? handle.connection.spec.orgId;
  if (orgId !== undefined) req.org_id = orgId;
  // A string naming a runtime. Objects stored while it was a boolean (before v1alpha1 fixed
  // it) may still hold `false`: that asked for nothing, so it is sent as nothing.
  const secureRuntime: unknown = spec.secureRuntime;
  if (typeof secureRuntime === "string" && secureRuntime !== "") req.secure_runtime = secureRuntime;
  req.metadata = { ...req.metadata, [CONFIG_HASH_KEY]: allocationHash(cr, req) };
  return req;
}

/** The Sandboxes of `informer` whose VM takes env from a given Secret (one index per informer, however many ask). */
export function sandboxesUsingSecret(informer: Informer<Sandbox>): (secret: { metadata: { namespace?: string; name?: string } }) => Sandbox[] {
  return referrers(informer, "envFromSecret", (sb) => (sb.spec.envFrom ?? []).map((e) => e.secretRef.name));
}

/** The env the spec's envFrom Secrets give (their keys, prefixed); throws for a Secret that cannot be read. */
function envFromSecrets(cr: Sandbox, store: SandboxDeps["store"]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [i, from] of (cr.spec.envFrom ?? []).entries()) {
    const data = store.secretData(cr.metadata.namespace, from.secretRef.name, `spec.envFrom[${i}].secretRef.name`);
    for (const [k, v] of Object.entries(data)) env[`${from.prefix ?? ""}${k}`] = v;
  }
  return env;
}

/**
 * The values an allocation's env takes from the spec's envFrom Secrets: the client scrubs them
 * from the service's answers whatever their length. None while a Secret cannot be read (the
 * allocation, which reads them first, says so).
 */
export function envFromValues(cr: Sandbox, store: SandboxDeps["store"]): string[] {
  try {
    return Object.values(envFromSecrets(cr, store));
  } catch {
    return [];
  }
}

/**
 * What makes a VM different: a change replaces it. The hash is in status, which more people
 * may read than the Secrets (the `view` role): of the env the envFrom Secrets give, only the
 * keys enter, and a change of their values is told by the VM's SECRETS_HASH_KEY
 * (holdsRotatedSecrets), which only holders of the service's API key see (who can read the VM's
 * env anyway). Plain env values (spec.env, in the spec for all to read) enter as they are. The
 * skills count as a set: listing them in another order asks for the same VM. (`legacy`: the
 * forms hashed before, still recorded by VMs allocated then; see sameSpecAs.)
 */
export function allocationHash(cr: Sandbox, req: AllocateVMRequest, opts: { legacy?: "secretValues" | "skillsAsListed" } = {}): string {
  const skills = opts.legacy === "skillsAsListed" ? (req.skills ?? []) : [...new Set(req.skills ?? [])].sort();
  const plain = cr.spec.env ?? {};
  const env = opts.legacy === undefined ? sortedEntries(req.env ?? {}).map(([k, v]) => [k, Object.hasOwn(plain, k) ? v : null]) : sortedEntries(req.env ?? {});
  return createHash("sha256")
    .update(cr.metadata.uid)
    .update(JSON.stringify([req.tier, skills, env, req.secure_runtime ?? false, req.org_id ?? null]))
    .digest("hex")
    .slice(0, 16);
}

/** Of the env the envFrom Secrets give, what the VM holds: the keys spec.env does not set. */
function heldFromSecrets(cr: Sandbox, fromSecrets: Record<string, string>): Record<string, string> {
  const plain = cr.spec.env ?? {};
  return Object.fromEntries(Object.entries(fromSecrets).filter(([k]) => !Object.hasOwn(plain, k)));
}

/**
 * SECRETS_HASH_KEY's value: the env the VM holds from the envFrom Secrets, salted with the uid.
 * Only in the VM's metadata, never in status: it tells a value to whoever can guess it and list
 * the org's VMs, who holds the API key that reads the VM's env anyway.
 */
function secretsHash(cr: Sandbox, held: Record<string, string>): string {
  return createHash("sha256").update(cr.metadata.uid).update(JSON.stringify(sortedEntries(held))).digest("hex").slice(0, 16);
}

/**
 * Whether the Sandbox's `vm` was allocated with other values of its envFrom Secrets than they
 * hold now (one rotated since): a step run in it could print values nobody knows any more.
 * False where that cannot be told: no envFrom, a VM without the hash (allocated before it was
 * recorded, or for another resource), a Secret that cannot be read (the Sandbox waits for it).
 */
export function holdsRotatedSecrets(cr: Sandbox, vm: { metadata?: Record<string, string> }, store: SandboxDeps["store"]): boolean {
  const recorded = (cr.spec.envFrom ?? []).length > 0 ? madeFor(cr, vm, SECRETS_HASH_KEY) : undefined;
  if (recorded === undefined) return false;
  try {
    return recorded !== secretsHash(cr, heldFromSecrets(cr, envFromSecrets(cr, store)));
  } catch {
    return false;
  }
}

/**
 * Whether a VM, by the hash it records (status's, or the VM's own), was made for the allocation
 * `request` asks for, with the values its envFrom Secrets hold now (holdsRotatedSecrets). The
 * hash may be of a form hashed before (so that an upgrade of the operator replaces no VM): with
 * the values of the envFrom Secrets, which matches only while they hold them still, and before
 * that with the skills as listed.
 */
export interface SameSpec {
  (recorded: string | undefined, vm: AgentVM): boolean;
  /**
   * The recorded hash to keep in status: the one computed now, unless only a form hashed before
   * tells a rotated Secret (its values in, and no SECRETS_HASH_KEY on a VM allocated before that).
   */
  recorded(recorded: string, vm: AgentVM): string;
}

function sameSpecAs(cr: Sandbox, request: AllocateVMRequest): SameSpec {
  const hash = hashOf(request);
  let older: string[] | undefined;
  const legacyForms = () => (older ??= [allocationHash(cr, request, { legacy: "secretValues" }), allocationHash(cr, request, { legacy: "skillsAsListed" })]);
  const legacy = (recorded: string) => legacyForms().includes(recorded);
  // holdsRotatedSecrets, with the values' hash desiredAllocation made already (not the Secrets decoded and hashed again).
  const envFrom = (cr.spec.envFrom ?? []).length > 0;
  const rotated = (vm: AgentVM) => {
    const recorded = envFrom ? madeFor(cr, vm, SECRETS_HASH_KEY) : undefined;
    return recorded !== undefined && recorded !== request.metadata?.[SECRETS_HASH_KEY];
  };
  const same = (recorded: string | undefined, vm: AgentVM) => recorded !== undefined && (recorded === hash || legacy(recorded)) && !rotated(vm);
  const fromSecrets = Object.keys(request.env ?? {}).some((k) => !Object.hasOwn(cr.spec.env ?? {}, k));
  // Kept in the form with the values, skills as a set (a later change of their order must find it the same VM).
  const keepLegacy = (recorded: string, vm: AgentVM) => fromSecrets && madeFor(cr, vm, SECRETS_HASH_KEY) === undefined && recorded !== hash && legacy(recorded);
  return Object.assign(same, { recorded: (recorded: string, vm: AgentVM) => (keepLegacy(recorded, vm) ? legacyForms()[0]! : (hash ?? recorded)) });
}

/**
 * A renewal that failed is retried well before the VM runs out, however far the work queue's
 * backoff has grown (it grows through a long outage, or a wait for the Connection): at most a
 * quarter of the time the VM has left, at least a second, on the priority lane. A VM that ran
 * out is past helping: its error backs off as any other.
 */
function retryWhileAlive(err: unknown, expiresAt: number, now: number): unknown {
  const left = expiresAt - now;
  return left > 0 ? new RetryNoLaterThan(err, Math.max(1_000, Math.floor(left / 4)), true) : err;
}

/** The Ready reason of a Sandbox whose VM's endpoint could not be read: it is asked for again. */
const ENDPOINT_UNKNOWN = { reason: "EndpointUnknown" } as const;
/** status.endpoint and wsURL (and the connection Secret's) of an adopted VM whose endpoint could not be read. */
const ENDPOINT_NOT_READ = "";

/**
 * Status while the VM it names is gone and no replacement is allocated yet: state "gone" (not
 * live: `kubectl agentcompute exec` refuses it), without the endpoints of a VM that is no more.
 * vmId still names it: the replacement's Event says which VM it took the place of.
 */
const VM_GONE = { state: "gone", endpoint: null, wsURL: null };

/** The VM was last reported matching the spec of this very generation (Ready=True for it). */
function matchedThisGeneration(cr: Sandbox): boolean {
  const ready = cr.status?.conditions?.find((c) => c.type === ConditionType.Ready);
  return ready?.status === "True" && ready.observedGeneration === cr.metadata.generation;
}

/** How soon an old VM whose release failed after its replacement was allocated is given back again. */
const LEFTOVER_RETRY_MS = 5_000;

/** The allocationHash desiredAllocation put in the request's metadata (not computed twice). */
function hashOf(request: AllocateVMRequest): string | undefined {
  return request.metadata?.[CONFIG_HASH_KEY];
}

/** What to do about a live VM. A replacement carries the allocation it was compared with. */
export type Renewal =
  | { action: "none" }
  | { action: "renew" }
  | { action: "replace"; why: string; request: AllocateVMRequest };

/** `listFailed`: the VM was read by its id, the list could not be: nothing may be allocated on this plan. */
export type SandboxPlan = Renewal & { vm: AgentVM; listFailed?: boolean };

class SandboxClient implements ExternalClient<Sandbox, SandboxPlan> {
  constructor(
    private readonly handle: ServiceHandle,
    private readonly deps: SandboxDeps,
  ) {}

  async observe(cr: Sandbox): Promise<Observation<SandboxStatus, SandboxPlan>> {
    try {
      return await this.look(cr);
    } catch (err) {
      // A read that failed (the service struggling) must not leave a running VM to the work
      // queue's backoff, which may have grown past its expiry: retry before it runs out.
      if (err instanceof NotReadyError || err instanceof StalledError || !(cr.spec.keepAlive ?? true)) throw err;
      const vmId = sandboxExternalId(cr);
      if (vmId === undefined) throw err; // no VM yet: nothing runs out
      const now = this.deps.now().getTime();
      const expiry = this.expiryOf(cr, vmId);
      // Past as far as this process knows, which after a restart or a move (no renewal made
      // here yet) is status's `expiresAt`, reported only every few minutes: the VM may well
      // live on, renewed since. Retried within a quarter of its renewal window, not backed off.
      throw retryWhileAlive(err, expiry > now ? expiry : now + renewBeforeSeconds(cr, this.renewalTtl(cr, vmId)) * 1000, now);
    }
  }

  /**
   * The TTL VM `vmId` is renewed with: the spec's, unless the service refused that one at a
   * renewal of this VM (refusedTtls); then the TTL the VM had, which it accepted. A refused
   * ttlSeconds must not cost the VM, as a refused tier must not.
   */
  private renewalTtl(cr: Sandbox, vmId: string): number {
    return this.ttlRefused(cr, vmId)?.instead ?? ttlSeconds(cr);
  }

  /**
   * The TTL the renewals of VM `vmId` are timed by: the one it is renewed with (renewalTtl),
   * or what the service granted of it when it granted less (grantedTtls). By the TTL asked, a
   * capped VM would be due at every pass (resyncs, watch events), and its status would state a
   * cadence it does not have.
   */
  private timedTtl(cr: Sandbox, vmId: string): number {
    const asked = this.renewalTtl(cr, vmId);
    const granted = this.deps.grantedTtls.get(cr.metadata.uid);
    return granted?.vmId === vmId && granted.asked === asked ? granted.granted : asked;
  }

  /** Remembers (or forgets) that the service granted VM `vmId` less than the TTL asked (grantedTtl). */
  private noteGranted(cr: Sandbox, vmId: string, asked: number, answer: { ttl_seconds?: number }, fresh: { expiresAt: number; now: number }): void {
    const granted = grantedTtl(asked, answer, fresh);
    if (granted < asked) this.deps.grantedTtls.set(cr.metadata.uid, { vmId, asked, granted });
    else this.deps.grantedTtls.delete(cr.metadata.uid);
  }

  /** The service refused the spec's ttlSeconds for VM `vmId` (refusedTtls), and what it is renewed with instead. */
  private ttlRefused(cr: Sandbox, vmId: string): RefusedTtl | undefined {
    const refused = this.deps.refusedTtls.get(cr.metadata.uid);
    return refused?.vmId === vmId && refused.ttl === ttlSeconds(cr) ? refused : undefined;
  }

  /**
   * When VM `vmId` runs out, as far as this process knows: status's `expiresAt`; later by a
   * renewal made since and not reported yet (status is written only every few minutes); or as
   * the last list of the VMs said.
   */
  private expiryOf(cr: Sandbox, vmId: string): number {
    const tally = this.deps.tallies.get(cr.metadata.uid);
    const renewed = tally?.vmId === vmId ? Date.parse(tally.lastRenewedAt ?? "") + this.renewalTtl(cr, vmId) * 1000 : NaN;
    const listed = Date.parse(this.handle.vms.get(vmId)?.expires_at ?? "");
    return Math.max(...[Date.parse(cr.status?.expiresAt ?? ""), renewed, listed].filter(Number.isFinite), -Infinity);
  }

  private async look(cr: Sandbox): Promise<Observation<SandboxStatus, SandboxPlan>> {
    const keepAlive = cr.spec.keepAlive ?? true;
    const id = sandboxExternalId(cr);
    if ((cr.spec.skills ?? []).length > 0) {
      // Only for what a new VM would load (is an unmanaged skill in the service?). A VM that
      // runs is renewed on the last snapshot rather than lost to a registry that cannot be read.
      await this.handle.skills.ensureFresh().catch((err: unknown) => {
        if (id === undefined) throw err;
      });
    }
    if (!keepAlive && cr.status?.state === "expired" && id !== undefined) {
      return { exists: true, upToDate: true, notReady: expiredCondition(id), status: { state: "expired" }, keptAlive: false };
    }
    const named = await findOwn(cr, id, {
      inventory: this.handle.vms,
      get: (vmId) => this.handle.client.vms.get(vmId),
      // A snapshot that has run out counts as gone.
      usable: (vm) => vmStateIsLive(vm.state) && !(Date.parse(vm.expires_at ?? "") <= this.deps.now().getTime()),
      adoptAfterLoss: true,
      byIdWhenListFails: true,
    });
    if (named.found === undefined) {
      if (id !== undefined && !keepAlive) {
        // It ran out and the user asked us not to keep it: report, do not replace.
        return { exists: true, upToDate: true, notReady: expiredCondition(id), status: { state: "expired" }, keptAlive: false };
      }
      return { exists: false, upToDate: false };
    }
    // Without the list, a replacement cannot be checked against one already made: renew only.
    const desired = named.listFailed ? undefined : this.desiredIfReady(cr);
    const request = desired instanceof NotReadyError ? undefined : desired;
    const hash = request === undefined ? undefined : hashOf(request);
    // Renewed all the same, but not said to match a spec changed since it was last found to
    // match (an unchanged spec the VM matched still does, whatever its dependencies do now).
    const meanwhile = keepAlive ? "the VM is renewed meanwhile, and" : "the VM is";
    const unconfirmed = matchedThisGeneration(cr)
      ? undefined
      : named.listFailed
        ? { reason: "ServiceUnavailable", message: `the service's list of VMs cannot be read: ${meanwhile} compared with the spec once the list is read` }
        : desired instanceof NotReadyError
          ? { reason: desired.reason, message: `${desired.message}; ${meanwhile} compared with the spec once that is resolved` }
          : undefined;
    const sameSpec = request === undefined ? undefined : sameSpecAs(cr, request);
    const { found, leftovers } = this.replacementMadeAlready(cr, named.found, named.leftovers, sameSpec);
    const now = this.deps.now().getTime();
    const expiresAt = Date.parse(found.expires_at ?? "") || now;
    const renewAt = renewAtOf(cr, found.id, expiresAt, this.timedTtl(cr, found.id));
    const planned = renewalOf(cr, found, { now, renewAt, request, sameSpec });
    // A ttlSeconds the service refused for this VM is a spec not applied, whether a renewal is
    // due or not: not up to date, so that the refusal stands (the reconciler's refused-spec
    // path, which only keeps the VM alive) rather than a pass between two renewals reporting
    // it matches the spec. An update (the spec's generation changed since) asks for it again.
    const renewal: Renewal = planned.action === "none" && this.ttlRefused(cr, found.id) ? { action: "renew" } : planned;
    // Moved in from another owner (sharding), which may have replaced the VM just before it let
    // go, status unwritten: a replacement is planned on a snapshot read since, or it would be a second.
    // Nothing from findOwn's last look at the snapshot to here awaits I/O, so no read can land
    // in between and leave this check passing on a plan made on the older snapshot: keep it so.
    if (renewal.action === "replace" && (await this.handle.vms.readSinceArrival(cr.metadata.uid))) return this.look(cr);
    const upToDate = renewal.action === "none";
    // A VM this Sandbox does not renew (keepAlive false, or policies without Create and Update)
    // is looked at again once it has run out, not at a renewal time it would then pass in a loop.
    const nextAt = renewEverySeconds(cr) > 0 ? renewAt : expiresAt + 1000;
    const sameVM = cr.status?.vmId === found.id;
    // A VM adopted (after a lost status write) says which spec it was made for, if we made it.
    const ownHash = sameVM ? undefined : madeFor(cr, found, CONFIG_HASH_KEY);
    const recordedHash = ownHash ?? cr.status?.configHash;
    const matches = recordedHash !== undefined && sameSpec?.(recordedHash, found) === true;
    // One recorded in another form for this very spec (the skills as listed) is written as now
    // computed: a later change of their order must find it the same VM. (Not one that alone
    // tells a rotated Secret: SameSpec.recorded.)
    const configHash = matches && sameSpec !== undefined ? sameSpec.recorded(recordedHash, found) : (recordedHash ?? hash);
    // Adopted, and made for another spec than now: replaced once status names it (the next
    // look), and never said to match the spec meanwhile (a paused Sandbox's upkeep would).
    const outdated =
      ownHash !== undefined && sameSpec !== undefined && !matches
        ? { reason: "Replacing", message: `VM ${found.id}, found by its marker (status did not name it: a status write was lost), was allocated for another spec, and is replaced` }
        : undefined;
    // A VM found another way than by status (adopted) is reported at once.
    const report = this.report(cr, found, this.known(cr, found), now, !sameVM);
    // The VM record has no endpoint or ws_url: they came with the allocation and are in status.
    // A VM found another way (adopted after a crash, or by annotation) is asked for them once,
    // and again while status says they could not be read ("": never another VM's, which a
    // field left as it was would be) and this process has not read them since. A renewal
    // does not wait for them.
    const unread = cr.status?.endpoint === ENDPOINT_NOT_READ && this.deps.endpointsRead.get(cr.metadata.uid) !== found.id;
    const asked = !sameVM || unread;
    const where = asked ? await this.whereIs(cr, found.id) : { endpoint: cr.status?.endpoint, ws_url: cr.status?.wsURL };
    const unknownWhere =
      where.failed !== undefined ? { ...ENDPOINT_UNKNOWN, message: `the VM's endpoint could not be read (${where.failed}): asked again shortly; ${meanwhile} kept` } : undefined;
    return {
      exists: true,
      upToDate,
      keptAlive: keepAlive,
      ...((unconfirmed ?? outdated ?? unknownWhere) && { unconfirmed: unconfirmed ?? outdated ?? unknownWhere }),
      differences: renewal.action === "replace" ? [renewal.why] : renewal !== planned ? [`spec.ttlSeconds (${ttlSeconds(cr)}, refused by the service)`] : [],
      status: {
        ...statusOf(found),
        // Of a VM found another way: "" where unknown, never the old VM's (left as they were).
        endpoint: asked ? (where.endpoint ?? ENDPOINT_NOT_READ) : where.endpoint,
        wsURL: asked ? (where.ws_url ?? ENDPOINT_NOT_READ) : where.ws_url,
        // allocatedAt was recorded when we allocated this VM (the allocation answer has none);
        // the service's list says the same instant in milliseconds: keep ours, or the first
        // resync after a cold start rewrites the status of every Sandbox for nothing.
        ...(sameVM && cr.status?.allocatedAt !== undefined ? { allocatedAt: cr.status.allocatedAt } : {}),
        ...(configHash !== undefined ? { configHash } : {}),
        ...this.cadence(cr, this.timedTtl(cr, found.id)),
        ...report,
      },
      connectionDetails: {
        ...detailsOf({ vm_id: found.id, token: found.token, ...where }),
        // What was asked of a VM found another way, or its token the record lacks: written
        // empty if unknown, not left as they were, which would be another VM's.
        ...(asked && { endpoint: where.endpoint ?? ENDPOINT_NOT_READ, wsURL: where.ws_url ?? ENDPOINT_NOT_READ }),
        ...(!sameVM && !found.token && { token: "" }),
      },
      requeueAfterMs: Math.max(0, nextAt - now),
      priority: true,
      plan: { ...renewal, vm: found, ...(named.listFailed && { listFailed: true }) },
      leftovers,
    };
  }

  /**
   * The VM status names is due for replacement (its spec changed), and the replacement exists
   * already: the process (or a previous owner, sharding) died between allocating it and giving
   * the old one back. That one is adopted and the old one goes with the leftovers, rather than a
   * third allocated.
   */
  private replacementMadeAlready(
    cr: Sandbox,
    named: AgentVM,
    leftovers: string[],
    sameSpec: SameSpec | undefined,
  ): { found: AgentVM; leftovers: string[] } {
    if (sameSpec === undefined || !madeForOtherSpec(cr, named, sameSpec)) return { found: named, leftovers };
    const made = leftovers.map((id) => this.handle.vms.get(id)).find((vm) => vm !== undefined && sameSpec(madeFor(cr, vm, CONFIG_HASH_KEY), vm));
    if (made === undefined) return { found: named, leftovers };
    return { found: made, leftovers: [...leftovers.filter((id) => id !== made.id), named.id] };
  }

  /**
   * GET /vms/{id}/endpoint: a map of strings whose keys are not published; endpoint and ws_url
   * are read if there. `failed`: why it could not be read (the VM is observed all the same).
   */
  private async whereIs(cr: Sandbox, id: string): Promise<{ endpoint?: string; ws_url?: string; failed?: string }> {
    try {
      const m = await this.handle.client.vms.endpoint(id);
      this.deps.endpointsRead.set(cr.metadata.uid, id);
      return { endpoint: m["endpoint"], ws_url: m["ws_url"] };
    } catch (err) {
      if (isNotFound(err)) return {};
      if (!isServiceError(err)) throw err;
      return { endpoint: ENDPOINT_NOT_READ, ws_url: ENDPOINT_NOT_READ, failed: errorMessage(err) };
    }
  }

  private desired(cr: Sandbox): AllocateVMRequest {
    return desiredAllocation(cr, this.handle, this.deps);
  }

  /**
   * The allocation the spec asks for; while a dependency of it is missing, the NotReadyError
   * that says which. A running VM keeps being renewed meanwhile: a Secret or Skill that went away must
   * not cost the user their VM.
   */
  private desiredIfReady(cr: Sandbox): AllocateVMRequest | NotReadyError {
    try {
      return this.desired(cr);
    } catch (err) {
      if (err instanceof NotReadyError) return err;
      throw err;
    }
  }

  async create(cr: Sandbox): Promise<ActionResult<SandboxStatus>> {
    const replacing = sandboxExternalId(cr);
    const { vm, request } = await this.allocateInPlaceOf(cr, replacing);
    const result = this.afterAllocate(cr, vm, request);
    if (replacing !== undefined) {
      result.event = {
        reason: "VMReplaced",
        message: `VM ${replacing} is gone (expired or deleted); allocated ${vm.vm_id} in its place`,
        warning: true,
      };
    }
    return result;
  }

  async update(cr: Sandbox, { plan }: Planned<SandboxStatus, SandboxPlan>): Promise<ActionResult<SandboxStatus>> {
    const current = plan.vm;
    if (plan.action === "replace") {
      // The user named this VM to take over: replacing it would lose what runs in it, and leave
      // the annotation naming a released VM. The user decides (the VM is renewed meanwhile).
      if (cr.metadata.annotations?.[Annotations.externalId] === current.id) {
        throw new StalledError(
          "AdoptedVMNotReplaced",
          `${plan.why}, which needs a new VM, but the annotation ${Annotations.externalId} names VM ${current.id}, taken over as it is: ` +
            `remove the annotation ${Annotations.externalId} to have it replaced (a new VM allocated, ${current.id} released), or put the spec back`,
        );
      }
      const vm = await this.allocate(cr, plan.request);
      const replaced = this.afterAllocate(cr, vm, plan.request);
      try {
        await this.giveBack(cr, current.id);
      } catch (err) {
        // The replacement runs: status must name it now, or the old VM (the one status names)
        // would be the one kept alive. The old one carries the marker, so the next pass finds it
        // a leftover and gives it back; that pass comes soon, not at the new VM's renewal.
        return {
          ...replaced,
          requeueAfterMs: LEFTOVER_RETRY_MS,
          event: {
            reason: "Replaced",
            message: `${plan.why}: allocated ${vm.vm_id}; releasing ${current.id} failed (${errorMessage(err)}), it is retried`,
            warning: true,
          },
        };
      }
      return { ...replaced, event: { reason: "Replaced", message: `${plan.why}: allocated ${vm.vm_id}, released ${current.id}` } };
    }
    if (plan.action !== "renew") return {};
    // Without the list, a VM gone at its renewal is not replaced on the old snapshot: a lost
    // allocation may have left one it lacks (the next pass waits for the list). Nor where no
    // VM may be made: one taken over with the annotation (the user named that one; the next
    // pass says it is gone), or policies without Create.
    const mayReplace = cr.metadata.annotations?.[Annotations.externalId] === undefined && managementOf(cr.spec).create;
    return this.renew(cr, current, { replaceIfGone: plan.listFailed !== true && mayReplace });
  }

  /**
   * When nothing else may be done (paused, no Update, the Connection not Ready): the renewal
   * and nothing else. A replacement the spec asks for waits, but the running VM is renewed when
   * it is due, whatever the plan: losing the VM is what none of those must cause. A VM gone
   * meanwhile is not replaced.
   */
  async upkeep(cr: Sandbox, observed: Observation<SandboxStatus, SandboxPlan>): Promise<ActionResult<SandboxStatus> | undefined> {
    const vm = observed.plan?.vm;
    if (!observed.exists || observed.notReady !== undefined || vm === undefined || !(cr.spec.keepAlive ?? true)) return undefined;
    const now = this.deps.now().getTime();
    if (now < renewAtOf(cr, vm.id, Date.parse(vm.expires_at ?? "") || now, this.timedTtl(cr, vm.id))) return undefined; // observe scheduled the renewal
    return this.renew(cr, vm, { replaceIfGone: false, upkeep: true });
  }

  /**
   * `upkeep`: the renewal and nothing else (the spec's changes wait, or were refused): a TTL the
   * service refused before is not asked for again. Otherwise the spec's TTL is, and if it is
   * refused again once the VM is renewed with its own, the refusal is the reconcile's failure.
   */
  private async renew(cr: Sandbox, current: AgentVM, opts: { replaceIfGone: boolean; upkeep?: boolean }): Promise<ActionResult<SandboxStatus>> {
    let renewal: { result: ActionResult<SandboxStatus>; refused?: { err: unknown; ttl: number; instead: number } };
    try {
      const before = this.known(cr, current);
      // Due by the TTL it is renewed with, or by its own if that is later (a TTL changed, or
      // refused, since the VM's last renewal: not a late renewal).
      const lastExpiry = Date.parse(current.expires_at ?? "") || this.deps.now().getTime();
      const dueAt = Math.max(...[this.renewalTtl(cr, current.id), current.ttl_seconds ?? 0].filter((t) => t > 0).map((t) => renewAtOf(cr, current.id, lastExpiry, t)));
      const { renewed, ttl, refused } = await this.renewVM(cr, current, opts.upkeep === true);
      const now = this.deps.now();
      const expiresAt = Date.parse(renewed.expires_at ?? "") || now.getTime() + ttl * 1000;
      // An answer whose expiry is already past (a service that answers without renewing) is
      // no renewal: due again at once by it, the VM was renewed in a loop. A failure instead,
      // asked again while the VM lives as after any other.
      if (!(expiresAt > now.getTime())) {
        throw new ServiceError({ operation: "vms.renew", message: `vms.renew: the service answered the renewal of VM ${current.id} with an expiry already past (${renewed.expires_at})`, retryable: true });
      }
      const vm: AgentVM = { ...current, ...renewed, expires_at: renewed.expires_at ?? formatTime(new Date(expiresAt)) };
      this.handle.vms.put(vm);
      this.noteGranted(cr, vm.id, ttl, renewed, { expiresAt, now: now.getTime() });
      const tally: Tally = { vmId: current.id, renewals: before.renewals + 1, lastRenewedAt: formatTime(now) };
      this.deps.tallies.set(cr.metadata.uid, tally);
      this.deps.metrics?.sandboxRenewals.inc();
      this.deps.metrics?.sandboxRenewalLateness.observe(Math.max(0, now.getTime() - dueAt) / 1000);
      renewal = {
        result: {
          // No write unless a report is due: the renewal is in memory and in the metrics.
          // (The cadence changes only with a TTL refused or granted in part: otherwise no write.)
          status: { state: vm.state, ...this.report(cr, vm, tally, now.getTime()), ...this.cadence(cr, this.timedTtl(cr, vm.id)) },
          requeueAfterMs: Math.max(0, renewAtOf(cr, vm.id, expiresAt, this.timedTtl(cr, vm.id)) - now.getTime()),
          priority: true,
          // Routine: status.renewals and lastRenewedAt tell it. An Event per renewal was 2,000
          // Sandboxes x 2 a minute, all of the Event rate limit, and warnings were dropped.
          event: null,
        },
        ...(refused !== undefined && { refused: { err: refused, ttl: ttlSeconds(cr), instead: ttl } }),
      };
    } catch (err) {
      if (!(await vmGoneIndeed(this.handle, current.id, err))) throw retryWhileAlive(err, Date.parse(current.expires_at ?? ""), this.deps.now().getTime());
      // Gone between the snapshot and the renewal: replace it now rather than on the next pass
      // (not while paused: the replacement waits for the resume).
      this.handle.vms.remove(current.id);
      // Not replaced now (paused, or no client for changes): the next pass, at once, finds it
      // gone and says so (Ready=False), rather than keep saying it is renewed.
      if (!opts.replaceIfGone) return { event: null, requeueAfterMs: 0, priority: true };
      // Released by a previous process (or owner, sharding) that had allocated its replacement
      // and died before status said so: observe again now and adopt that one rather than
      // allocate a third. The read waits only for a Sandbox that moved in since the last one.
      await this.handle.vms.readSinceArrival(cr.metadata.uid);
      if (this.handle.vms.findByMarker(cr.metadata.uid).some((vm) => vm.id !== current.id && vmStateIsLive(vm.state))) {
        return { event: null, requeueAfterMs: 0, priority: true };
      }
      if (!(cr.spec.keepAlive ?? true)) return { status: { state: "expired" } };
      const { vm, request } = await this.allocateInPlaceOf(cr, current.id);
      return {
        ...this.afterAllocate(cr, vm, request),
        event: { reason: "VMReplaced", message: `VM ${current.id} was gone at renewal; allocated ${vm.vm_id}`, warning: true },
      };
    }
    const { result, refused } = renewal;
    if (refused === undefined || opts.upkeep === true) return result;
    // The VM is renewed; the spec's TTL is not applied: the reconcile fails (Stalled, the
    // service's reason) with what was done, and comes back for the next renewal.
    throw new FailedAfterChange(
      refused.err,
      result.status ?? {},
      `spec.ttlSeconds ${refused.ttl} was refused at the VM's renewal: the VM is renewed with ${refused.instead} s instead (the TTL it had, or the pool's max_vm_ttl_seconds), until spec.ttlSeconds changes`,
      false,
      // At least 1 ms: 0 would be no requeue at all, and the next renewal must come.
      { ms: Math.max(1, result.requeueAfterMs ?? 0), priority: true },
    );
  }

  /**
   * Renews `vm` with its renewalTtl (`upkeep`), or with the spec's TTL. A TTL the service
   * refuses (400: bounds it does not publish, or a pool's max_vm_ttl_seconds lowered) that is
   * not the VM's own is remembered (refusedTtls), and the VM renewed with the TTL it has.
   */
  private async renewVM(cr: Sandbox, vm: AgentVM, upkeep: boolean): Promise<{ renewed: AgentVM; ttl: number; refused?: unknown }> {
    const uid = cr.metadata.uid;
    const renewal = await renewVMFor(this.handle, vm, upkeep ? this.renewalTtl(cr, vm.id) : ttlSeconds(cr));
    if (renewal.refused !== undefined) this.deps.refusedTtls.set(uid, { vmId: vm.id, ttl: ttlSeconds(cr), instead: renewal.ttl });
    else if (renewal.ttl === ttlSeconds(cr)) this.deps.refusedTtls.delete(uid);
    return renewal;
  }

  /** The renewals of `vm` this process counted, or, for one it has not renewed, what status says. */
  private known(cr: Sandbox, vm: AgentVM): Tally {
    const tally = this.deps.tallies.get(cr.metadata.uid);
    if (tally?.vmId === vm.id) return tally;
    if (cr.status?.vmId === vm.id) return recoveredTally(cr, vm);
    return { vmId: vm.id, renewals: 0, lastRenewedAt: undefined };
  }

  /**
   * The renewal fields, when a report is due: something in them changed since status last
   * said it, and the last report is at least the status interval old (at once when `fresh`: a
   * VM that status does not name yet). Otherwise nothing, so the status writer has nothing to
   * write.
   */
  private report(cr: Sandbox, vm: AgentVM, tally: Tally, now: number, fresh = false): Partial<SandboxStatus> {
    const said = cr.status;
    const changed =
      fresh ||
      !sameInstant(said?.expiresAt, vm.expires_at) ||
      said?.renewals !== tally.renewals ||
      (tally.lastRenewedAt !== undefined && said?.lastRenewedAt !== tally.lastRenewedAt);
    if (!changed) return {};
    const last = Date.parse(said?.reportedAt ?? "");
    const due = fresh || !Number.isFinite(last) || now < last || now - last >= this.deps.statusIntervalMs;
    if (!due) return {};
    return { expiresAt: vm.expires_at, lastRenewedAt: tally.lastRenewedAt, renewals: tally.renewals, reportedAt: formatTime(new Date(now)) };
  }

  /**
   * The cadences a reader needs to judge expiresAt and reportedAt; they change only with the
   * spec, a TTL the service refused or granted in part (`ttl`: timedTtl), or the flag.
   */
  private cadence(cr: Sandbox, ttl = ttlSeconds(cr)): Partial<SandboxStatus> {
    return { renewEverySeconds: renewEverySeconds(cr, ttl), reportEverySeconds: Math.round(this.deps.statusIntervalMs / 1000) };
  }

  async cleanup(cr: Sandbox, leftovers: string[]): Promise<void> {
    for (const id of leftovers) await this.giveBack(cr, id);
  }

  async delete(cr: Sandbox): Promise<void> {
    // A fresh read: whatever a crash left behind with this resource's marker goes too.
    await this.handle.vms.refresh();
    const ids = new Set(this.handle.vms.findByMarker(cr.metadata.uid).map((v) => v.id));
    const id = sandboxExternalId(cr);
    if (id !== undefined) ids.add(id);
    for (const each of ids) await this.giveBack(cr, each);
  }

  private async allocate(cr: Sandbox, request: AllocateVMRequest): Promise<Allocation> {
    try {
      const vm = await this.handle.client.vms.allocate(request, envFromValues(cr, this.deps.store));
      this.handle.vms.put(vmOf(vm, request, this.deps.now()));
      return vm;
    } catch (err) {
      if (isOutcomeUnknown(err)) this.handle.vms.invalidate();
      throw err;
    }
  }

  /**
   * A VM as the spec asks, in place of VM `gone` (the one status names, found gone) if there is
   * one. While none can be allocated (a pool exhausted, a Skill or Secret to wait for), status
   * must not go on describing the VM that is gone (state allocated, its endpoint) nor the
   * connection Secret hand out its endpoint and token: the failure carries VM_GONE, and the
   * Secret is deleted until a VM runs again, as an AgentDeployment's is.
   */
  private async allocateInPlaceOf(cr: Sandbox, gone: string | undefined): Promise<{ vm: Allocation; request: AllocateVMRequest }> {
    try {
      const request = this.desired(cr);
      return { vm: await this.allocate(cr, request), request };
    } catch (err) {
      if (gone === undefined) throw err;
      throw new FailedAfterChange(err, VM_GONE, `VM ${gone} is gone (expired or deleted) and no replacement is allocated yet; the connection Secret is deleted until one is`, true);
    }
  }

  private afterAllocate(cr: Sandbox, vm: Allocation, request: AllocateVMRequest): ActionResult<SandboxStatus> {
    const now = this.deps.now();
    const expiresAt = Date.parse(vm.expires_at ?? "") || now.getTime() + ttlSeconds(cr) * 1000;
    // A new VM is news: reported at once, and counted from 0.
    this.deps.tallies.set(cr.metadata.uid, { vmId: vm.vm_id, renewals: 0, lastRenewedAt: formatTime(now) });
    this.noteGranted(cr, vm.vm_id, ttlSeconds(cr), {}, { expiresAt, now: now.getTime() });
    return {
      status: {
        ...statusOf(vmOf(vm, request, now)),
        endpoint: vm.endpoint,
        wsURL: vm.ws_url,
        configHash: hashOf(request),
        allocatedAt: formatTime(now),
        expiresAt: vm.expires_at ?? formatTime(new Date(expiresAt)),
        lastRenewedAt: formatTime(now),
        renewals: 0,
        reportedAt: formatTime(now),
        ...this.cadence(cr, this.timedTtl(cr, vm.vm_id)),
      },
      connectionDetails: detailsOf(vm),
      requeueAfterMs: Math.max(0, renewAtOf(cr, vm.vm_id, expiresAt, this.timedTtl(cr, vm.vm_id)) - now.getTime()),
      priority: true,
    };
  }

  /** Release (optionally recycling) or delete, per spec.onDelete; a 404 that says the VM is gone is success (vmGoneIndeed). */
  private giveBack(cr: Sandbox, vmId: string): Promise<void> {
    const vms = this.handle.client.vms;
    return removeObject(
      this.handle.vms,
      vmId,
      (id) => ((cr.spec.onDelete ?? "Release") === "Delete" ? vms.delete(id) : vms.release(id, cr.spec.recycle ?? false)),
      vmLookup(this.handle),
    );
  }
}

/**
 * Replace when the allocation the spec asks for hashes differently from the one the VM in
 * status was made with (never for a VM adopted since: its hash is not ours to compare); else
 * renew once the renewal is due.
 */
export function renewalOf(
  cr: Sandbox,
  vm: AgentVM,
  at: { now: number; renewAt: number; request: AllocateVMRequest | undefined; sameSpec: SameSpec | undefined },
): Renewal {
  if (at.request !== undefined && at.sameSpec !== undefined && madeForOtherSpec(cr, vm, at.sameSpec)) {
    const why = "tier, skills, env (or a value of an envFrom Secret), secureRuntime or orgId (the Sandbox's, else its Connection's) changed";
    return { action: "replace", why, request: at.request };
  }
  if (renewEverySeconds(cr) > 0 && at.now >= at.renewAt) return { action: "renew" };
  return { action: "none" };
}

/**
 * `vm` is the one status names, and status says it was allocated for another spec than the one
 * hashed now: it is to be replaced.
 */
function madeForOtherSpec(cr: Sandbox, vm: AgentVM, sameSpec: SameSpec): boolean {
  const recorded = cr.status?.configHash;
  return recorded !== undefined && !sameSpec(recorded, vm) && cr.status?.vmId === vm.id;
}

/**
 * Whether a 404 (`err`) of a call about VM `vmId` (a renewal, a release) means the VM is gone:
 * so the compute API says, in its error body; a bare 404 (a gateway's, a route briefly missing
 * behind a load balancer) is asked about once more by GET, as a run's VM is (runs/vm.ts), and a
 * VM that answers as ended (released, expired) is gone too (goneIndeed). Taking a VM that is
 * there for gone would replace it (a Sandbox's: a second allocated, then the first released,
 * the workload in it with it) or stop renewing it (a run's: it runs out mid-run).
 */
export function vmGoneIndeed(handle: Pick<ServiceHandle, "client">, vmId: string, err: unknown): Promise<boolean> {
  const { get, ended } = vmLookup(handle);
  return goneIndeed(err, () => get(vmId), ended);
}

/**
 * How a VM is asked about after a bare 404 (removeObject, vmGoneIndeed): by GET, and a record
 * that no longer runs (released, expired...) is one gone.
 */
export function vmLookup(handle: Pick<ServiceHandle, "client">): { get(vmId: string): Promise<AgentVM>; ended(vm: AgentVM): boolean } {
  return { get: (vmId) => handle.client.vms.get(vmId), ended: (vm) => !vmStateIsLive(vm.state) };
}

/**
 * Renews `vm` (a Sandbox's, or a run's own) for `ttl` seconds; if the service refuses that TTL
 * (a 400: bounds it does not publish), with a shorter one it may take: the VM's own, which it
 * accepted before (the spec's was raised), else the pool's `max_vm_ttl_seconds` (a maximum
 * lowered since). The TTL it was renewed for, and the refusal if there was one. Throws the
 * refusal when no shorter TTL is taken, and any other error as it is.
 */
export async function renewVMFor(handle: Pick<ServiceHandle, "client">, vm: AgentVM, ttl: number): Promise<{ renewed: AgentVM; ttl: number; refused?: unknown }> {
  // Of use until the VM runs out: a hung attempt must leave time for another before then.
  const by = { neededBy: Date.parse(vm.expires_at ?? "") || undefined };
  let refused: unknown;
  try {
    return { renewed: await handle.client.vms.renew(vm.id, ttl, by), ttl };
  } catch (err) {
    if (refusalOf(err)?.permanent !== true) throw err;
    refused = err;
  }
  let last = refused;
  const own = vm.ttl_seconds !== undefined && vm.ttl_seconds < ttl ? vm.ttl_seconds : undefined;
  for (const candidate of [own, "pool" as const]) {
    const shorter = candidate === "pool" ? await poolMaxTtl(handle) : candidate;
    if (shorter === undefined || shorter >= ttl) continue;
    try {
      return { renewed: await handle.client.vms.renew(vm.id, shorter, by), ttl: shorter, refused };
    } catch (e) {
      if (refusalOf(e)?.permanent !== true) throw e;
      last = e;
    }
  }
  throw last;
}

/** The pool's max_vm_ttl_seconds, where it can be read and is a positive integer. */
async function poolMaxTtl(handle: Pick<ServiceHandle, "client">): Promise<number | undefined> {
  const max = await handle.client.pool.config().then(
    (c) => c.max_vm_ttl_seconds,
    () => undefined,
  );
  return max !== undefined && Number.isSafeInteger(max) && max > 0 ? max : undefined;
}

function expiredCondition(id: string) {
  return { reason: "Expired", message: `VM ${id} expired; spec.keepAlive is false, so it is not replaced` };
}

/** The allocation answer as the VM record the list would show (the inventory holds records). */
function vmOf(a: Allocation, req: AllocateVMRequest, now: Date): AgentVM {
  const vm: AgentVM = {
    id: a.vm_id,
    state: a.state,
    tier: a.tier,
    skills: a.skills_loaded,
    token: a.token,
    expires_at: a.expires_at,
    allocated_at: formatTime(now),
    ttl_seconds: req.ttl_seconds,
  };
  if (req.metadata) vm.metadata = req.metadata;
  return vm;
}

/**
 * What the VM record says, but its expiry (a report's business, see report()); endpoint and
 * ws_url are not in it (see observe).
 */
function statusOf(vm: AgentVM): Partial<SandboxStatus> {
  return {
    vmId: vm.id,
    state: vm.state,
    tier: vm.tier,
    skillsLoaded: vm.skills,
    ...(vm.allocated_at ? { allocatedAt: vm.allocated_at } : {}),
  };
}

/**
 * The renewals of the VM status names, for a process that has not counted them itself (after
 * a restart or a failover): status's count, plus the renewals made after its last report and
 * lost with the process that made them. Only renewals move a VM's expiry, each by the time
 * since the one before (renewEverySeconds less the jitter, 5 % of renewBeforeSeconds on
 * average), so how far the VM's expiry moved past the reported one says how many there were.
 */
export function recoveredTally(cr: Sandbox, vm: AgentVM): Tally {
  const said = cr.status;
  const reported = Date.parse(said?.expiresAt ?? "");
  const current = Date.parse(vm.expires_at ?? "");
  const moved = current - reported;
  if (!(moved >= 1000)) return { vmId: vm.id, renewals: said?.renewals ?? 0, lastRenewedAt: said?.lastRenewedAt };
  const spacingMs = Math.max(1000, (ttlSeconds(cr) - renewBeforeSeconds(cr)) * 1000 - renewBeforeSeconds(cr) * 50);
  const missed = Math.max(1, Math.round(moved / spacingMs));
  // A renewal sets the expiry to its own time plus the TTL.
  const lastRenewedAt = formatTime(new Date(current - (vm.ttl_seconds ?? ttlSeconds(cr)) * 1000));
  return { vmId: vm.id, renewals: (said?.renewals ?? 0) + missed, lastRenewedAt };
}

/** The same instant, to the second: the service's list and its write answers may differ in precision. */
function sameInstant(a: string | undefined, b: string | undefined): boolean {
  if (a === b) return true;
  const x = Date.parse(a ?? "");
  const y = Date.parse(b ?? "");
  return Number.isFinite(x) && Number.isFinite(y) && Math.abs(x - y) < 1000;
}

function detailsOf(vm: { vm_id: string; token?: string | undefined; endpoint?: string | undefined; ws_url?: string | undefined }): ConnectionDetails {
  const details: ConnectionDetails = { vmId: vm.vm_id };
  if (vm.token) details.token = vm.token;
  if (vm.endpoint) details.endpoint = vm.endpoint;
  if (vm.ws_url) details.wsURL = vm.ws_url;
  return details;
}

function sortedEntries(m: Record<string, string>): Array<[string, string]> {
  return Object.entries(m).sort(([a], [b]) => a.localeCompare(b));
}
