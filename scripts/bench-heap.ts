// Summarises a V8 heap snapshot (`npm run bench -- --heap-snapshot` writes one at all-Ready
// to .cache/bench/heap/<stamp>/): self size and count by constructor / node type, and the size
// reachable from each field of the operator's caches (informers, inventories, the Event
// recorder, work queues...), which is about what each of them retains.
//
//   npx tsx scripts/bench-heap.ts <file.heapsnapshot> [--top 40]
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

interface Snapshot {
  snapshot: {
    meta: { node_fields: string[]; node_types: [string[], ...unknown[]]; edge_fields: string[]; edge_types: [string[], ...unknown[]] };
    node_count: number;
  };
  nodes: number[];
  edges: number[];
  strings: string[];
}

const CONTAINERS = new Set(["Informer", "Inventory", "EventRecorder", "StatusWriter", "WorkQueue", "ConnectionPool", "ManagedReconciler", "TokenBucket", "RequestLog"]);
/** Node types not followed when measuring what a cache holds (shared by everything). */
const SHARED_TYPES = new Set(["code", "hidden", "object shape", "synthetic", "native"]);

const { values, positionals } = parseArgs({ allowPositionals: true, options: { top: { type: "string", default: "40" } } });
for (const file of positionals) {
  const s = JSON.parse(readFileSync(file, "utf8")) as Snapshot;
  const { node_fields: nf, node_types: ntypes, edge_fields: ef, edge_types: etypes } = s.snapshot.meta;
  const types = ntypes[0];
  const edgeTypes = etypes[0];
  const F = nf.length;
  const E = ef.length;
  const iType = nf.indexOf("type");
  const iName = nf.indexOf("name");
  const iSize = nf.indexOf("self_size");
  const iEdges = nf.indexOf("edge_count");
  const eType = ef.indexOf("type");
  const eName = ef.indexOf("name_or_index");
  const eTo = ef.indexOf("to_node");
  const n = s.nodes.length / F;
  const firstEdge = new Uint32Array(n + 1);
  for (let i = 0, e = 0; i < n; i++) {
    firstEdge[i] = e;
    e += (s.nodes[i * F + iEdges] as number) * E;
    firstEdge[i + 1] = e;
  }
  const typeOf = (i: number) => types[s.nodes[i * F + iType] as number] ?? "?";
  const nameOf = (i: number) => s.strings[s.nodes[i * F + iName] as number] ?? "";
  const sizeOf = (i: number) => s.nodes[i * F + iSize] as number;

  /** A string node's text: a concatenated (or sliced) string's parts joined. */
  const textOf = (i: number): string => {
    if (typeOf(i) !== "concatenated string" && typeOf(i) !== "sliced string") return nameOf(i);
    let text = "";
    for (let e = firstEdge[i] as number; e < (firstEdge[i + 1] as number); e += E) {
      const field = s.strings[s.edges[e + eName] as number];
      if (field === "first" || field === "second" || field === "parent") text += textOf((s.edges[e + eTo] as number) / F);
    }
    return text;
  };

  // self size by type / constructor
  const agg = new Map<string, { size: number; count: number }>();
  let total = 0;
  for (let i = 0; i < n; i++) {
    const type = typeOf(i);
    total += sizeOf(i);
    const name = type === "object" || type === "closure" || type === "native" ? `${type}: ${nameOf(i)}` : type;
    const a = agg.get(name) ?? { size: 0, count: 0 };
    a.size += sizeOf(i);
    a.count++;
    agg.set(name, a);
  }
  console.log(`\n== ${file}: ${(total / 1048576).toFixed(1)} MB in ${n} nodes`);
  for (const [k, v] of [...agg.entries()].sort((a, b) => b[1].size - a[1].size).slice(0, Number(values.top))) {
    console.log(`${(v.size / 1048576).toFixed(2).padStart(8)} MB ${String(v.count).padStart(9)}  ${k.slice(0, 100)}`);
  }

  // what each cache field reaches (stopping at other caches and at shared node types)
  const containers: number[] = [];
  for (let i = 0; i < n; i++) if (typeOf(i) === "object" && CONTAINERS.has(nameOf(i))) containers.push(i);
  const isContainer = new Set(containers);
  const rows: Array<[string, number, number]> = [];
  for (const c of containers) {
    let label = nameOf(c);
    // an informer's path, to tell them apart
    for (let e = firstEdge[c] as number; e < (firstEdge[c + 1] as number); e += E) {
      if (edgeTypes[s.edges[e + eType] as number] !== "property") continue;
      const field = s.strings[s.edges[e + eName] as number];
      const to = (s.edges[e + eTo] as number) / F;
      if ((field === "path" || field === "name" || field === "labelSelector") && typeOf(to).endsWith("string")) label += ` ${textOf(to)}`;
    }
    for (let e = firstEdge[c] as number; e < (firstEdge[c + 1] as number); e += E) {
      if (edgeTypes[s.edges[e + eType] as number] !== "property") continue;
      const field = s.strings[s.edges[e + eName] as number] ?? "";
      const start = (s.edges[e + eTo] as number) / F;
      if (isContainer.has(start) || SHARED_TYPES.has(typeOf(start))) continue;
      const seen = new Set<number>([start]);
      const stack = [start];
      let size = 0;
      while (stack.length > 0) {
        const i = stack.pop() as number;
        size += sizeOf(i);
        for (let x = firstEdge[i] as number; x < (firstEdge[i + 1] as number); x += E) {
          const et = edgeTypes[s.edges[x + eType] as number];
          if (et === "weak" || et === "shortcut") continue;
          const to = (s.edges[x + eTo] as number) / F;
          if (seen.has(to) || isContainer.has(to) || SHARED_TYPES.has(typeOf(to))) continue;
          if (typeOf(to) === "closure" || nameOf(to) === "system / Context") continue; // functions lead everywhere
          seen.add(to);
          stack.push(to);
        }
      }
      if (size >= 256 * 1024) rows.push([`${label}.${field}`, size, seen.size]);
    }
  }
  console.log("\n-- reachable from the caches' fields (>= 0.25 MB)");
  for (const [k, size, count] of rows.sort((a, b) => b[1] - a[1])) {
    console.log(`${(size / 1048576).toFixed(2).padStart(8)} MB ${String(count).padStart(9)}  ${k.slice(0, 110)}`);
  }
}
