// CPU time spent by each process sharing the machine during a scenario: on two cores the API
// server, the operator and the benchmark itself (emulator, Ready tracker) compete, and where
// the seconds went says which of them a cold start is waiting for.
import { readFileSync } from "node:fs";

/** Linux reports utime/stime in clock ticks; USER_HZ is 100 on every architecture Node runs on. */
const TICKS_PER_SECOND = 100;

/** CPU seconds (user + system) a process has used so far; undefined if it is gone. */
export function processCpuSeconds(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name (field 2) may hold spaces; the fields after its closing parenthesis are fixed.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const utime = Number(fields[11]);
    const stime = Number(fields[12]);
    return (utime + stime) / TICKS_PER_SECOND;
  } catch {
    return undefined;
  }
}

/** This process's own CPU seconds. */
export function ownCpuSeconds(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

export interface CpuShare {
  /** CPU seconds over the window, per process. */
  seconds: Record<string, number>;
  /** Wall seconds of the window. */
  wallSeconds: number;
  /** Sum of all processes' CPU over what the machine's cores could give in the window (1 = saturated). */
  machineUtilisation: number;
}

/** Takes a reading now; `finish()` returns the CPU each process used since. */
export function cpuWindow(pids: Record<string, number>, cores: number): { finish(): CpuShare } {
  const read = (): Record<string, number> => {
    const out: Record<string, number> = { benchmark: ownCpuSeconds() };
    for (const [name, pid] of Object.entries(pids)) out[name] = processCpuSeconds(pid) ?? Number.NaN;
    return out;
  };
  const start = read();
  const startedAt = performance.now();
  return {
    finish(): CpuShare {
      const end = read();
      const wallSeconds = (performance.now() - startedAt) / 1000;
      const seconds = Object.fromEntries(Object.entries(end).map(([k, v]) => [k, Math.round((v - (start[k] ?? 0)) * 10) / 10]));
      const total = Object.values(seconds).reduce((a, v) => a + (Number.isFinite(v) ? v : 0), 0);
      return { seconds, wallSeconds: Math.round(wallSeconds * 10) / 10, machineUtilisation: Math.round((total / (wallSeconds * cores)) * 100) / 100 };
    },
  };
}
