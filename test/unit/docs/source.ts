// What the source says, read the way a reviewer would grep for it: the condition and Event
// reasons the controllers set, and the flags of `agent-operator run`. The docs tests hold the
// documentation to these, so a new reason or flag without its documentation fails them.
import { readFileSync, readdirSync } from "node:fs";

const ROOT = new URL("../../../", import.meta.url);
export const readRepoFile = (path: string): string => readFileSync(new URL(path, ROOT), "utf8");

function sources(dirs: string[]): Array<{ file: string; text: string }> {
  return dirs.flatMap((dir) =>
    readdirSync(new URL(dir, ROOT))
      .filter((f) => f.endsWith(".ts"))
      .map((f) => ({ file: `${dir}${f}`, text: readRepoFile(`${dir}${f}`) })),
  );
}

export interface Reasons {
  /** Reasons a condition can carry (Ready/Reconciling/Stalled). */
  conditions: Set<string>;
  /** Reasons of Events that are not also condition reasons. */
  events: Set<string>;
}

/**
 * Condition reasons: NotReadyError/StalledError (and subclasses' super calls), and every
 * `reason: "X"` that is not inside an `event: {...}` literal. Event reasons: `event: { reason }`
 * literals and events.normal/warning calls with a literal reason.
 */
export function reasonsInSource(): Reasons {
  const conditions = new Set<string>();
  const events = new Set<string>();
  // src/service/errors.ts: refusalOf names the reasons of the service's refusals, which the
  // managed reconciler sets as they are (ServiceRejected, Unauthorized).
  const files = [...sources(["src/managed/", "src/controllers/", "src/runs/"]), { text: readRepoFile("src/service/errors.ts") }];
  for (const { text } of files) {
    for (const m of text.matchAll(/(?:NotReadyError|StalledError)\(\s*"([A-Z]\w+)"/g)) conditions.add(m[1] ?? "");
    if (/extends (?:NotReadyError|StalledError)/.test(text)) {
      for (const m of text.matchAll(/super\(\s*"([A-Z]\w+)"/g)) conditions.add(m[1] ?? "");
    }
    for (const m of text.matchAll(/reason: "([A-Z]\w+)"/g)) {
      const before = text.slice(Math.max(0, (m.index ?? 0) - 60), m.index);
      (/event\s*[:=]\s*\{\s*$/.test(before) ? events : conditions).add(m[1] ?? "");
    }
    for (const m of text.matchAll(/events\.(?:normal|warning)\(\s*\w+,\s*"([A-Z]\w+)"/g)) events.add(m[1] ?? "");
    for (const m of text.matchAll(/this\.record\([^)]*?"([A-Z]\w+)"/g)) events.add(m[1] ?? "");
  }
  // A SandboxRun's reasons are named once, in RunReason (src/runs/machine.ts); those the
  // controller records only as Events (events.warning(run, RunReason.X, ...)) are Event reasons.
  const machine = readRepoFile("src/runs/machine.ts");
  const runReasons = /export const RunReason = \{([\s\S]*?)\} as const;/.exec(machine)?.[1] ?? "";
  const runController = readRepoFile("src/controllers/sandbox-run.ts");
  const asEvents = new Set([...runController.matchAll(/events\.(?:normal|warning)\(\s*\w+,\s*RunReason\.(\w+)/g)].map((m) => m[1] ?? ""));
  for (const m of runReasons.matchAll(/^\s+(\w+): "([A-Z]\w+)",/gm)) (asEvents.has(m[1] ?? "") ? events : conditions).add(m[2] ?? "");
  return { conditions, events };
}

/** The long flags listed in `agent-operator run --help`. */
export function runFlags(): string[] {
  const text = readRepoFile("src/commands/run.ts");
  const help = /const HELP = `([\s\S]*?)`;/.exec(text)?.[1] ?? "";
  return [...help.matchAll(/^\s+(--[a-z-]+)/gm)].map((m) => m[1] ?? "");
}

/** The text of a `## Heading` section of a Markdown file, up to the next `## `. */
export function section(markdown: string, heading: string): string {
  const start = markdown.indexOf(`\n## ${heading}\n`);
  if (start < 0) return "";
  const rest = markdown.slice(start + heading.length + 5);
  const end = rest.search(/\n## /);
  return end < 0 ? rest : rest.slice(0, end);
}

/** The `code` spans of the first column of the Markdown table rows of a text: | `X`, `Y` | ... */
export function tableKeys(text: string): Set<string> {
  const keys = new Set<string>();
  for (const row of text.matchAll(/^\| (`[^|]*?) \|/gm)) {
    for (const code of (row[1] ?? "").matchAll(/`([^`]+)`/g)) keys.add(code[1] ?? "");
  }
  return keys;
}
