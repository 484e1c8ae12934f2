// Summarises V8 CPU profiles (node --cpu-prof; `npm run bench -- --cpu-prof` writes them to
// .cache/bench/prof/<stamp>/): self time by function, by file/package, and inclusive time of
// the heaviest call paths' frames.
//
//   npx tsx scripts/bench-profile.ts <profile.cpuprofile | directory> [--top 30]
import { readFileSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}
interface Profile {
  nodes: Node[];
  startTime: number;
  endTime: number;
  samples?: number[];
  timeDeltas?: number[];
}

function where(url: string): string {
  if (url === "") return "(native/vm)";
  const nm = url.lastIndexOf("node_modules/");
  if (nm >= 0) {
    const rest = url.slice(nm + "node_modules/".length).split("/");
    return `npm:${rest[0]?.startsWith("@") ? `${rest[0]}/${rest[1]}` : rest[0]}`;
  }
  if (url.startsWith("node:")) return url;
  const i = url.indexOf("/dist/");
  return i >= 0 ? url.slice(i + 1) : path.basename(url);
}

function summarise(file: string, top: number): void {
  const p = JSON.parse(readFileSync(file, "utf8")) as Profile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  // self time per node from samples + timeDeltas (µs)
  const self = new Map<number, number>();
  const samples = p.samples ?? [];
  const deltas = p.timeDeltas ?? [];
  for (let i = 0; i < samples.length; i++) {
    const id = samples[i] as number;
    const dt = deltas[i + 1] ?? deltas[i] ?? 0;
    self.set(id, (self.get(id) ?? 0) + dt);
  }
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const fnSelf = new Map<string, number>();
  const fileSelf = new Map<string, number>();
  const fnTotal = new Map<string, number>();
  for (const [id, us] of self) {
    const n = byId.get(id);
    if (!n) continue;
    const key = `${n.callFrame.functionName || "(anonymous)"} ${where(n.callFrame.url)}:${n.callFrame.lineNumber + 1}`;
    fnSelf.set(key, (fnSelf.get(key) ?? 0) + us);
    const w = n.callFrame.url === "" ? n.callFrame.functionName : where(n.callFrame.url);
    fileSelf.set(w, (fileSelf.get(w) ?? 0) + us);
    // inclusive: every distinct frame on the stack
    const seen = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const f = byId.get(cur);
      if (!f) break;
      const k = `${f.callFrame.functionName || "(anonymous)"} ${where(f.callFrame.url)}:${f.callFrame.lineNumber + 1}`;
      if (seen.has(k)) continue;
      seen.add(k);
      fnTotal.set(k, (fnTotal.get(k) ?? 0) + us);
    }
  }
  const pct = (us: number) => `${((100 * us) / total).toFixed(1).padStart(5)} %  ${(us / 1000).toFixed(0).padStart(7)} ms`;
  const idle = [...fnSelf.entries()].filter(([k]) => k.startsWith("(idle)")).reduce((a, [, v]) => a + v, 0);
  console.log(`\n== ${file}\nwall ${((p.endTime - p.startTime) / 1e6).toFixed(1)} s, sampled ${(total / 1e6).toFixed(1)} s, busy ${((total - idle) / 1e6).toFixed(1)} s`);
  const show = (title: string, m: Map<string, number>, n: number) => {
    console.log(`\n-- ${title}`);
    for (const [k, v] of [...m.entries()].sort((a, b) => b[1] - a[1]).slice(0, n)) console.log(`${pct(v)}  ${k}`);
  };
  show("self time by file / package", fileSelf, top);
  show("self time by function", fnSelf, top);
  show("inclusive time by function", fnTotal, top);
}

const { values, positionals } = parseArgs({ allowPositionals: true, options: { top: { type: "string", default: "30" } } });
const top = Number(values.top);
for (const target of positionals) {
  const files = statSync(target).isDirectory()
    ? readdirSync(target)
        .filter((f) => f.endsWith(".cpuprofile"))
        .map((f) => path.join(target, f))
    : [target];
  for (const f of files) summarise(f, top);
}
