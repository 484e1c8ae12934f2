// Label selectors as `kubectl -l` takes them: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`,
// `k notin (a,b)`, joined by commas.

export type LabelMatcher = (labels: Record<string, string> | undefined) => boolean;

export function parseSelector(text: string): LabelMatcher {
  const terms: LabelMatcher[] = [];
  // Split on commas that are not inside parentheses.
  const parts: string[] = [];
  let depth = 0;
  let current = "";
  for (const ch of text) {
    if (ch === "(") depth++;
    if (ch === ")") depth--;
    if (ch === "," && depth === 0) {
      parts.push(current);
      current = "";
    } else current += ch;
  }
  parts.push(current);
  for (const raw of parts) {
    const part = raw.trim();
    if (part === "") continue;
    let m: RegExpExecArray | null;
    if ((m = /^([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)$/.exec(part))) {
      const [, key = "", op, list = ""] = m;
      const values = new Set(list.split(",").map((v) => v.trim()).filter((v) => v !== ""));
      terms.push(op === "in" ? (l) => l?.[key] !== undefined && values.has(l[key]) : (l) => l?.[key] === undefined || !values.has(l[key]));
    } else if ((m = /^([\w./-]+)\s*(==|=|!=)\s*([\w.-]*)$/.exec(part))) {
      const [, key = "", op, value = ""] = m;
      terms.push(op === "!=" ? (l) => l?.[key] !== value : (l) => l?.[key] === value);
    } else if ((m = /^!\s*([\w./-]+)$/.exec(part))) {
      const key = m[1] ?? "";
      terms.push((l) => l?.[key] === undefined);
    } else if ((m = /^([\w./-]+)$/.exec(part))) {
      const key = m[1] ?? "";
      terms.push((l) => l?.[key] !== undefined);
    } else {
      throw new Error(`--selector: cannot parse "${part}" (examples: app=web, tier!=dev, env in (a,b), !legacy)`);
    }
  }
  return (labels) => terms.every((t) => t(labels));
}
