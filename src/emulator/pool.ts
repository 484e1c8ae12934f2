// The VM pool's published configuration (models.PoolConfig) and status (models.PoolStatus).
// The emulator has no warm VMs to manage: of the config, `max_total` limits allocation (with
// the `poolSize` knob: the smaller wins) and `max_vm_ttl_seconds` bounds ttl_seconds on
// allocate and renew; the rest is stored, answered, and shapes the reported `warm` count only.
import { badRequest } from "./errors.js";
import { optionalBoolean, optionalStringArray, rejectUnknown, requiredString } from "./validate.js";
import type { JsonObject, PoolConfig, PoolStatus } from "./wire.js";

/**
 * Defaults chosen to change nothing for a client that never touches the pool: no total limit
 * (0 means unlimited), and a TTL bound of 30 days, far above the default TTL of an hour.
 * scale_up_threshold 0.7 is the published default.
 */
export const DEFAULT_POOL_CONFIG: Readonly<PoolConfig> = Object.freeze({
  default_skills: [],
  default_tier: "standard",
  idle_ttl_seconds: 600,
  max_total: 0,
  max_vm_ttl_seconds: 30 * 86_400,
  max_warm: 10,
  min_warm: 2,
  recycle: false,
  scale_up_threshold: 0.7,
});

export const defaultPoolConfig = (): PoolConfig => ({ ...DEFAULT_POOL_CONFIG, default_skills: [] });

const FIELDS = new Set(Object.keys(DEFAULT_POOL_CONFIG));
const NON_NEGATIVE = ["idle_ttl_seconds", "max_total", "max_warm", "min_warm"] as const;

const given = (body: JsonObject, k: string): boolean => body[k] !== undefined && body[k] !== null;

/** PUT /compute/v1/pool/config: any subset of the fields, each type-checked (400 naming it). */
export function parsePoolConfigPatch(body: JsonObject, strict: boolean): Partial<PoolConfig> {
  rejectUnknown(strict, body, FIELDS);
  const patch: Partial<PoolConfig> = {};
  const skills = optionalStringArray(body, "default_skills");
  if (skills !== undefined) patch.default_skills = skills;
  if (given(body, "default_tier")) patch.default_tier = requiredString(body, "default_tier");
  for (const k of NON_NEGATIVE) {
    if (!given(body, k)) continue;
    const v = body[k];
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) throw badRequest(`${k} must be a non-negative integer`);
    patch[k] = v;
  }
  if (given(body, "max_vm_ttl_seconds")) {
    const v = body["max_vm_ttl_seconds"];
    // 0 would refuse every allocation: not a configuration anyone means (D).
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v <= 0) throw badRequest("max_vm_ttl_seconds must be a positive integer");
    patch.max_vm_ttl_seconds = v;
  }
  const recycle = optionalBoolean(body, "recycle");
  if (recycle !== undefined) patch.recycle = recycle;
  if (given(body, "scale_up_threshold")) {
    const v = body["scale_up_threshold"];
    if (typeof v !== "number" || !(v >= 0 && v <= 1)) throw badRequest("scale_up_threshold must be a number within 0..1");
    patch.scale_up_threshold = v;
  }
  return patch;
}

/** The config after a patch; the pair min_warm/max_warm is checked on the result. */
export function mergePoolConfig(current: PoolConfig, patch: Partial<PoolConfig>): PoolConfig {
  const next: PoolConfig = { ...current, ...patch, default_skills: [...(patch.default_skills ?? current.default_skills)] };
  if (next.min_warm > next.max_warm) {
    throw badRequest(`min_warm must not exceed max_warm (min_warm ${next.min_warm}, max_warm ${next.max_warm})`);
  }
  return next;
}

/** The live-VM limit: max_total (0 = unlimited) and the poolSize knob; the smaller wins. */
export function allocationLimit(config: PoolConfig, poolSize: number | undefined): number | undefined {
  const limits = [poolSize, config.max_total > 0 ? config.max_total : undefined].filter((n): n is number => n !== undefined);
  return limits.length === 0 ? undefined : Math.min(...limits);
}

/**
 * allocated and by_tier count live VMs (every org: the pool is shared). A real pool keeps
 * min_warm VMs ready; the emulator reports that many, capped by max_warm and by the room
 * left under the allocation limit. total = allocated + warm.
 */
export function poolStatus(config: PoolConfig, liveTiers: Iterable<string>, poolSize: number | undefined): PoolStatus {
  const byTier: Record<string, number> = {};
  let allocated = 0;
  for (const tier of liveTiers) {
    byTier[tier] = (byTier[tier] ?? 0) + 1;
    allocated++;
  }
  const limit = allocationLimit(config, poolSize);
  const room = limit === undefined ? Infinity : Math.max(0, limit - allocated);
  const warm = Math.min(config.min_warm, config.max_warm, room);
  return { allocated, by_tier: byTier, total: allocated + warm, warm };
}
