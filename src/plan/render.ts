// The three outputs of `agent-operator plan`: text like `terraform plan`, JSON (the PlanResult
// as is), and Markdown for a pull-request comment.
import { redactChange } from "./diff.js";
import { SENSITIVE, type Action, type Change, type PlanResult, type ResourcePlan } from "./model.js";

const SYMBOL: Record<Action, string> = {
  create: "  +",
  update: "  ~",
  replace: "-/+",
  delete: "  -",
  none: "   ",
  unknown: "  ?",
};

const VERB: Record<Action, string> = {
  create: "will be created",
  update: "will be updated in place",
  replace: "must be replaced",
  delete: "will be deleted",
  none: "no changes",
  unknown: "cannot be planned",
};

/** A value as shown: JSON, long strings cut to `max` characters. */
export function show(v: unknown, max = 80): string {
  if (v === SENSITIVE) return SENSITIVE;
  const text = JSON.stringify(v) ?? "null";
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/**
 * Two values as shown side by side (`old -> new`): each cut as `show` cuts it, unless that
 * makes them read the same (they differ past the cut): then both show the same region, around
 * their first difference, with "…" where text is left out.
 */
export function showPair(a: unknown, b: unknown, max = 80): [string, string] {
  const [cutA, cutB] = [show(a, max), show(b, max)];
  if (cutA !== cutB || a === SENSITIVE || b === SENSITIVE) return [cutA, cutB];
  const [x, y] = [JSON.stringify(a) ?? "null", JSON.stringify(b) ?? "null"];
  let at = 0;
  while (at < x.length && at < y.length && x[at] === y[at]) at++;
  // Some of what comes before the difference, for context; the rest of the room after it.
  const start = Math.max(0, at - Math.floor(max / 4));
  const width = max - 2;
  const region = (text: string) => `${start > 0 ? "…" : ""}${text.slice(start, start + width)}${start + width < text.length ? "…" : ""}`;
  return [region(x), region(y)];
}

function changeLine(change: Change): string {
  const c = redactChange(change);
  if (c.old === undefined) return `+ ${c.path}: ${show(c.new)}`;
  if (c.new === undefined) return `- ${c.path}: ${show(c.old)}`;
  const [old, next] = showPair(c.old, c.new);
  return `~ ${c.path}: ${old} -> ${next}`;
}

/** A `none` whose spec changes (nothing in the service now) is shown as a change, of the resource. */
const SPEC_ONLY = { symbol: "  ~", verb: "changes in the cluster only", markdown: "📝 cluster only" };

function symbolOf(r: ResourcePlan): string {
  return r.specChanged === true ? SPEC_ONLY.symbol : SYMBOL[r.action];
}

function title(r: ResourcePlan): string {
  return `${r.kind} ${r.namespace}/${r.name}`;
}

function headline(r: ResourcePlan): string {
  const id = r.serviceId !== undefined ? ` (${r.serviceId})` : "";
  const why = r.reason !== undefined ? `: ${r.reason}` : "";
  return `${r.specChanged === true ? SPEC_ONLY.verb : VERB[r.action]}${id}${why}`;
}

export function summaryLine(plan: PlanResult): string {
  const s = plan.summary;
  return `Plan: ${s.create} to create, ${s.update} to update, ${s.replace} to replace, ${s.delete} to delete.`;
}

function extraLine(plan: PlanResult): string | undefined {
  const parts: string[] = [];
  const specOnly = plan.resources.filter((r) => r.specChanged === true).length;
  if (plan.summary.unchanged - specOnly > 0) parts.push(`${plan.summary.unchanged - specOnly} unchanged`);
  if (specOnly > 0) parts.push(`${specOnly} changed in the cluster only`);
  if (plan.summary.unknown > 0) parts.push(`${plan.summary.unknown} cannot be planned`);
  return parts.length > 0 ? `(${parts.join(", ")})` : undefined;
}

export function renderText(plan: PlanResult): string {
  const lines: string[] = [];
  if (plan.resources.length === 0) lines.push("No resources of agentcompute.dev in the manifests.", "");
  else if (!plan.changes) lines.push("No changes. The service matches the manifests.", "");
  else lines.push("agent-operator would perform the following actions (+ create, ~ update, -/+ replace, - delete, ? unknown):", "");
  for (const r of plan.resources) {
    lines.push(`${symbolOf(r)} ${title(r)} ${headline(r)}`);
    for (const c of r.changes) lines.push(`      ${changeLine(c)}`);
    for (const n of r.notes) lines.push(`      # ${n}`);
  }
  if (plan.resources.length > 0) lines.push("");
  lines.push(summaryLine(plan));
  const extra = extraLine(plan);
  if (extra !== undefined) lines.push(extra);
  return `${lines.join("\n")}\n`;
}

export function renderJSON(plan: PlanResult): string {
  // Redacted here too, whoever built the changes: no secret value reaches any output.
  const resources = plan.resources.map((r) => ({ ...r, changes: r.changes.map(redactChange) }));
  return `${JSON.stringify({ ...plan, resources }, null, 2)}\n`;
}

const MD_ACTION: Record<Action, string> = {
  create: "➕ create",
  update: "🔄 update",
  replace: "♻️ replace",
  delete: "🗑️ delete",
  none: "no changes",
  unknown: "❓ cannot be planned",
};

function cell(text: string): string {
  return text.replace(/\|/g, "\\|").replace(/\n/g, " ");
}

export function renderMarkdown(plan: PlanResult): string {
  const out: string[] = ["### agent-operator plan", "", `**${summaryLine(plan)}**${extraLine(plan) !== undefined ? ` ${extraLine(plan) ?? ""}` : ""}`, ""];
  if (plan.resources.length === 0) {
    out.push("No resources of agentcompute.dev in the manifests.");
    return `${out.join("\n")}\n`;
  }
  // Unchanged resources are only counted (a pull request's comment is about what changes).
  const listed = plan.resources.filter((r) => r.action !== "none" || r.notes.length > 0 || r.reason !== undefined);
  if (listed.length === 0) out.push("No changes. The service matches the manifests.");
  else out.push("| Resource | Action | Details |", "|---|---|---|");
  for (const r of listed) {
    const details = [r.reason, r.serviceId !== undefined ? `service object \`${r.serviceId}\`` : undefined, ...r.notes].filter((x): x is string => x !== undefined);
    out.push(`| \`${cell(title(r))}\` | ${r.specChanged === true ? SPEC_ONLY.markdown : MD_ACTION[r.action]} | ${cell(details.join("; "))} |`);
  }
  const withChanges = plan.resources.filter((r) => r.changes.length > 0);
  if (withChanges.length > 0) {
    out.push("", "<details><summary>Field changes</summary>", "", "```diff");
    for (const r of withChanges) {
      out.push(`${symbolOf(r).trim() || "~"} ${title(r)}`);
      for (const c of r.changes) out.push(`  ${changeLine(c).replace(/^~/, "!")}`);
    }
    out.push("```", "", "</details>");
  }
  return `${out.join("\n")}\n`;
}

export function render(plan: PlanResult, output: "text" | "json" | "markdown"): string {
  switch (output) {
    case "json":
      return renderJSON(plan);
    case "markdown":
      return renderMarkdown(plan);
    case "text":
      return renderText(plan);
  }
}
