// The human-readable side of a result: the summary table (scenario, target, measured).
import os from "node:os";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { REPO_ROOT } from "../../dev/paths.js";

export interface Row {
  scenario: string;
  target: string;
  measured: string;
  met: boolean | null;
}

export interface Machine {
  nproc: number;
  cpuModel: string;
  memoryGB: number;
  node: string;
  os: string;
  loadAverageAtStart: number[];
  /**
   * Milliseconds one core takes for a fixed piece of work like the benchmark's own (JSON in
   * and out, hashing), best of five: the same CPU model name has been seen to do the same
   * work 1.5 times slower from one day to the next, so wall and CPU times compare only
   * between runs with about the same figure here.
   */
  calibrationMs: number;
}

/** The fixed work of `calibrationMs`: a thousand resource-sized documents encoded, decoded and hashed, 20 times. */
function calibrate(): number {
  const docs = Array.from({ length: 1000 }, (_, i) => ({
    apiVersion: "agentcompute.dev/v1alpha1",
    kind: "Agent",
    metadata: { name: `agent-${i}`, namespace: "bench", labels: { app: "bench", index: String(i) }, finalizers: ["agentcompute.dev/finalizer"] },
    spec: { image: `registry.example/agent:${i}`, env: Object.fromEntries(Array.from({ length: 8 }, (_, k) => [`KEY_${k}`, `value-${i}-${k}`])) },
    status: { conditions: [{ type: "Ready", status: "True", reason: "Available", lastTransitionTime: "2026-11-23T00:00:00Z", message: "" }] },
  }));
  let best = Infinity;
  for (let round = 0; round < 5; round++) {
    const start = performance.now();
    for (let i = 0; i < 20; i++) {
      const text = JSON.stringify(docs);
      const back = JSON.parse(text) as unknown[];
      createHash("sha256").update(text).digest("hex");
      if (back.length !== docs.length) throw new Error("calibration: JSON round trip lost documents");
    }
    best = Math.min(best, performance.now() - start);
  }
  return Math.round(best);
}

export function machine(): Machine {
  return {
    nproc: os.availableParallelism(),
    cpuModel: os.cpus()[0]?.model ?? "unknown",
    memoryGB: Math.round((os.totalmem() / 1024 ** 3) * 10) / 10,
    node: process.version,
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    loadAverageAtStart: os.loadavg().map((l) => Math.round(l * 100) / 100),
    calibrationMs: calibrate(),
  };
}

export function gitCommit(): { commit: string; dirty: boolean } {
  try {
    const commit = execFileSync("git", ["rev-parse", "HEAD"], { cwd: REPO_ROOT, encoding: "utf8" }).trim();
    // What a run executes: the operator (src), the benchmark itself (bench, scripts) and the dev tooling it starts.
    const dirty = execFileSync("git", ["status", "--porcelain", "--", "src", "bench/lib", "bench/scenarios", "scripts", "dev"], { cwd: REPO_ROOT, encoding: "utf8" }).trim() !== "";
    return { commit, dirty };
  } catch {
    return { commit: "unknown", dirty: false };
  }
}

export function markdownTable(rows: readonly Row[]): string {
  const lines = ["| scenario | target | measured | met |", "|---|---|---|---|"];
  for (const r of rows) lines.push(`| ${r.scenario} | ${r.target} | ${r.measured} | ${r.met === null ? "–" : r.met ? "yes" : "**no**"} |`);
  return lines.join("\n");
}

/** The same table for a terminal. */
export function textTable(rows: readonly Row[]): string {
  const head: Row = { scenario: "scenario", target: "target", measured: "measured", met: null };
  const cells = [head, ...rows].map((r) => [r.scenario, r.target, r.measured, r === head ? "met" : r.met === null ? "-" : r.met ? "yes" : "NO"]);
  const widths = [0, 1, 2, 3].map((i) => Math.max(...cells.map((c) => (c[i] ?? "").length)));
  const fmt = (c: string[]) => c.map((v, i) => v.padEnd(widths[i] ?? 0)).join("  ");
  return [fmt(cells[0] ?? []), widths.map((w) => "-".repeat(w)).join("  "), ...cells.slice(1).map(fmt)].join("\n");
}
