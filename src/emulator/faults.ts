// Injected faults: rules matched in the order they were added, each consumed by `times`
// matching requests. A rule applies to /token too, so token failures can be tested.
import type { FaultAction, FaultRule } from "./options.js";

interface ActiveRule {
  method: string | undefined;
  path: RegExp | string | undefined;
  remaining: number;
  action: FaultAction;
}

export class FaultInjector {
  private rules: ActiveRule[] = [];

  add(rule: FaultRule): void {
    const times = rule.times ?? 1;
    if (!(times > 0)) throw new RangeError(`fault rule times must be positive, got ${times}`);
    validateAction(rule.action);
    this.rules.push({ method: rule.method?.toUpperCase(), path: rule.path, remaining: times, action: rule.action });
  }

  clear(): void {
    this.rules = [];
  }

  /** The action for this request, consuming one use of the first matching rule. */
  take(method: string, path: string): FaultAction | undefined {
    if (this.rules.length === 0) return undefined;
    const i = this.rules.findIndex((r) => matches(r, method, path));
    if (i < 0) return undefined;
    const rule = this.rules[i]!;
    rule.remaining -= 1;
    if (rule.remaining <= 0) this.rules.splice(i, 1);
    return rule.action;
  }
}

function matches(r: ActiveRule, method: string, path: string): boolean {
  if (r.method !== undefined && r.method !== method) return false;
  if (r.path === undefined) return true;
  if (typeof r.path === "string") return r.path === path;
  r.path.lastIndex = 0; // a /g or /y RegExp keeps state between test() calls
  return r.path.test(path);
}

function validateAction(a: FaultAction): void {
  if ("status" in a) {
    if (!Number.isInteger(a.status) || a.status < 100 || a.status > 599) throw new RangeError(`fault status must be 100..599, got ${a.status}`);
  } else if ("delayMs" in a) {
    if (!(a.delayMs >= 0)) throw new RangeError(`fault delayMs must be non-negative, got ${a.delayMs}`);
  } else if (a.drop !== "before" && a.drop !== "after") {
    throw new RangeError(`fault drop must be "before" or "after"`);
  }
}
