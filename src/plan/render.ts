// The three outputs of `agent-operator plan`: text like `terraform plan`, JSON (the PlanResult
// as is), and Markdown for a pull-request comment.
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

function changeLine(c: Change): string {
  if (c.old === undefined) return `+ ${c.path}: ${show(c.new)}`;
  if (c.new === undefined) return `- ${c.path}: ${show(c.old)}`;
  return `~ ${c.path}: ${show(c.old)} -> ${show(c.new)}`;
}

function title(r: ResourcePlan): string {
  return `${r.kind} ${r.namespace}/${r.name}`;
}

function headline(r: ResourcePlan): string {
  const id = r.serviceId !== undefined ? ` (${r.serviceId})` : "";
  const why = r.reason !== undefined ? `: ${r.reason}` : "";
  return `${VERB[r.action]}${id}${why}`;
}

export function summaryLine(plan: PlanResult): string {
  const s = plan.summary;
  return `Plan: ${s.create} to create, ${s.update} to update, ${s.replace} to replace, ${s.delete} to delete.`;
}

function extraLine(plan: PlanResult): string | undefined {
  const parts: string[] = [];
  if (plan.summary.unchanged > 0) parts.push(`${plan.summary.unchanged} unchanged`);
  if (plan.summary.unknown > 0) parts.push(`${plan.summary.unknown} cannot be planned`);
  return parts.length > 0 ? `(${parts.join(", ")})` : undefined;
}

export function renderText(plan: PlanResult): string {
  const lines: string[] = [];
  if (plan.resources.length === 0) lines.push("No resources of agentcompute.dev in the manifests.", "");
  else if (!plan.changes) lines.push("No changes. The service matches the manifests.", "");
  else lines.push("agent-operator would perform the following actions (+ create, ~ update, -/+ replace, - delete, ? unknown):", "");
  for (const r of plan.resources) {
    lines.push(`${SYMBOL[r.action]} ${title(r)} ${headline(r)}`);
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
  return `${JSON.stringify(plan, null, 2)}\n`;
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
    out.push(`| \`${cell(title(r))}\` | ${MD_ACTION[r.action]} | ${cell(details.join("; "))} |`);
  }
  const withChanges = plan.resources.filter((r) => r.changes.length > 0);
  if (withChanges.length > 0) {
    out.push("", "<details><summary>Field changes</summary>", "", "```diff");
    for (const r of withChanges) {
      out.push(`${SYMBOL[r.action].trim() || "~"} ${title(r)}`);
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
