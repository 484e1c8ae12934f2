// Prometheus gauges of the usage each Connection reports, so dashboards see VM seconds by
// tier without reading CR status.
import { Gauge, type Registry } from "prom-client";

export class UsageGauges {
  private readonly seconds: Gauge<"connection" | "tier">;
  private readonly vms: Gauge<"connection" | "tier">;
  /** Tiers last exported per Connection, so a tier that drops out is removed too. */
  private readonly tiers = new Map<string, string[]>();

  constructor(registry: Registry) {
    this.seconds = new Gauge({
      name: "agentcompute_usage_vm_seconds",
      help: "VM seconds used in the last 30 days, by Connection and tier",
      labelNames: ["connection", "tier"],
      registers: [registry],
    });
    this.vms = new Gauge({
      name: "agentcompute_usage_vms",
      help: "VMs that ended in the last 30 days, by Connection and tier",
      labelNames: ["connection", "tier"],
      registers: [registry],
    });
  }

  set(connection: string, byTier: Array<{ tier: string; seconds: number; vmCount: number }>): void {
    this.remove(connection);
    for (const t of byTier) {
      this.seconds.set({ connection, tier: t.tier }, t.seconds);
      this.vms.set({ connection, tier: t.tier }, t.vmCount);
    }
    this.tiers.set(connection, byTier.map((t) => t.tier));
  }

  remove(connection: string): void {
    for (const tier of this.tiers.get(connection) ?? []) {
      this.seconds.remove({ connection, tier });
      this.vms.remove({ connection, tier });
    }
    this.tiers.delete(connection);
  }
}
