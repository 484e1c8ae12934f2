// Helpers for the crash-safety marker (agentcompute.dev/uid in a service object's metadata).

/**
 * Of several service objects carrying one resource's marker (a crash left a duplicate), the
 * one to keep: the newest, as the service dates them.
 */
export function newest<T extends { created_at?: string; allocated_at?: string }>(items: T[]): T | undefined {
  const at = (x: T) => x.created_at ?? x.allocated_at ?? "";
  return [...items].sort((a, b) => at(b).localeCompare(at(a)))[0];
}
