// Summarises a V8 heap snapshot (`npm run bench -- --heap-snapshot` writes one at all-Ready
// to .cache/bench/heap/<stamp>/): self size and count by constructor / node type.
//
//   npx tsx scripts/bench-heap.ts <file.heapsnapshot> [--top 40]
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] }; node_count: number };
  nodes: number[];
  strings: string[];
}

const { values, positionals } = parseArgs({ allowPositionals: true, options: { top: { type: "string", default: "40" } } });
for (const file of positionals) {
  const s = JSON.parse(readFileSync(file, "utf8")) as Snapshot;
  const fields = s.snapshot.meta.node_fields;
  const types = s.snapshot.meta.node_types[0];
  const F = fields.length;
  const iType = fields.indexOf("type");
  const iName = fields.indexOf("name");
  const iSize = fields.indexOf("self_size");
  const agg = new Map<string, { size: number; count: number }>();
  let total = 0;
  for (let i = 0; i < s.nodes.length; i += F) {
    const type = types[s.nodes[i + iType] as number] ?? "?";
    const size = s.nodes[i + iSize] as number;
    total += size;
    let name = type;
    if (type === "object" || type === "closure" || type === "native") name = `${type}: ${s.strings[s.nodes[i + iName] as number]}`;
    const a = agg.get(name) ?? { size: 0, count: 0 };
    a.size += size;
    a.count++;
    agg.set(name, a);
  }
  console.log(`\n== ${file}: ${(total / 1048576).toFixed(1)} MB in ${s.snapshot.node_count} nodes`);
  for (const [k, v] of [...agg.entries()].sort((a, b) => b[1].size - a[1].size).slice(0, Number(values.top))) {
    console.log(`${(v.size / 1048576).toFixed(2).padStart(8)} MB ${String(v.count).padStart(9)}  ${k.slice(0, 100)}`);
  }
}
