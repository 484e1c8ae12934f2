// A small reader of the project's Dockerfile: enough of the syntax (comments, line
// continuations, ARG defaults, stages, JSON-form ENTRYPOINT/CMD, LABEL/ENV pairs) for tests
// to check the image's settings and to replay its steps without a Docker engine.

export interface Instruction {
  /** Upper-case keyword: FROM, RUN, COPY, ... */
  keyword: string;
  /** Everything after the keyword, continuations joined. */
  args: string;
}

export interface Stage {
  name: string | undefined;
  /** The image, with global ARG defaults substituted. */
  from: string;
  instructions: Instruction[];
}

export interface Dockerfile {
  /** ARGs declared before the first FROM, with their defaults. */
  globalArgs: Record<string, string>;
  stages: Stage[];
}

export function parseDockerfile(text: string): Dockerfile {
  const instructions: Instruction[] = [];
  let pending = "";
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line.startsWith("#") || (line === "" && pending === "")) continue; // comments (also inside continuations)
    if (line.endsWith("\\")) {
      pending += `${line.slice(0, -1).trim()} `;
      continue;
    }
    const full = (pending + line).trim();
    pending = "";
    if (full === "") continue;
    const m = /^(\S+)\s*(.*)$/.exec(full);
    if (m) instructions.push({ keyword: (m[1] ?? "").toUpperCase(), args: m[2] ?? "" });
  }
  const globalArgs: Record<string, string> = {};
  const stages: Stage[] = [];
  for (const ins of instructions) {
    if (ins.keyword === "FROM") {
      const m = /^(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?$/i.exec(ins.args);
      if (!m) throw new Error(`unreadable FROM: ${ins.args}`);
      stages.push({ name: m[2], from: substitute(m[1] ?? "", globalArgs), instructions: [] });
    } else if (stages.length === 0) {
      if (ins.keyword !== "ARG") throw new Error(`${ins.keyword} before the first FROM`);
      Object.assign(globalArgs, argDefault(ins.args));
    } else {
      stages.at(-1)?.instructions.push(ins);
    }
  }
  return { globalArgs, stages };
}

export function stage(df: Dockerfile, name: string): Stage {
  const s = df.stages.find((x) => x.name === name);
  if (!s) throw new Error(`no stage "${name}" in the Dockerfile`);
  return s;
}

export function finalStage(df: Dockerfile): Stage {
  const s = df.stages.at(-1);
  if (!s) throw new Error("the Dockerfile has no stage");
  return s;
}

export function all(s: Stage, keyword: string): Instruction[] {
  return s.instructions.filter((i) => i.keyword === keyword);
}

/** The last instruction of a kind (the one that takes effect for ENTRYPOINT, CMD, USER, WORKDIR). */
export function last(s: Stage, keyword: string): Instruction | undefined {
  return all(s, keyword).at(-1);
}

/** An ENTRYPOINT or CMD in exec (JSON) form; throws for the shell form. */
export function execForm(ins: Instruction | undefined): string[] {
  if (!ins) return [];
  const parsed: unknown = JSON.parse(ins.args);
  if (!Array.isArray(parsed) || !parsed.every((x) => typeof x === "string")) throw new Error(`${ins.keyword} is not in exec form`);
  return parsed as string[];
}

/** `KEY=value` pairs of LABEL / ENV / ARG instructions (quotes removed). */
export function pairs(instructions: Instruction[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const ins of instructions) {
    for (const m of ins.args.matchAll(/([\w.-]+)=("(?:[^"\\]|\\.)*"|\S+)/g)) {
      const value = m[2] ?? "";
      out[m[1] ?? ""] = value.startsWith('"') ? value.slice(1, -1).replace(/\\(.)/g, "$1") : value;
    }
  }
  return out;
}

/** The command of a RUN, without its --mount/--network flags. */
export function runCommand(ins: Instruction): string {
  return ins.args.replace(/^(?:--\S+\s+)*/, "");
}

export interface Copy {
  from: string | undefined;
  sources: string[];
  dest: string;
}

export function copies(s: Stage): Copy[] {
  return all(s, "COPY").map((ins) => {
    const words = ins.args.split(/\s+/);
    let from: string | undefined;
    while (words[0]?.startsWith("--")) {
      const flag = words.shift() ?? "";
      if (flag.startsWith("--from=")) from = flag.slice("--from=".length);
    }
    const dest = words.pop();
    if (dest === undefined || words.length === 0) throw new Error(`unreadable COPY: ${ins.args}`);
    return { from, sources: words, dest };
  });
}

function argDefault(args: string): Record<string, string> {
  const m = /^(\w+)(?:=(.*))?$/.exec(args.trim());
  return m ? { [m[1] ?? ""]: m[2] ?? "" } : {};
}

function substitute(s: string, vars: Record<string, string>): string {
  return s.replace(/\$\{(\w+)\}|\$(\w+)/g, (_, a: string | undefined, b: string | undefined) => vars[a ?? b ?? ""] ?? "");
}

/**
 * Whether .dockerignore lets `path` into the build context: patterns apply in order, the last
 * one that matches decides, `!` re-includes. Supports the forms this project uses (`*`,
 * `name`, `dir/`), not the whole Go filepath.Match syntax.
 */
export function inContext(dockerignore: string, path: string): boolean {
  let included = true;
  for (const raw of dockerignore.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const negate = line.startsWith("!");
    const pattern = (negate ? line.slice(1) : line).replace(/^\/+|\/+$/g, "");
    const top = path.replace(/^\.\//, "").replace(/\/+$/, "");
    // "*" matches every top-level name, and excluding a directory excludes what it holds.
    const matches = pattern === "*" || top === pattern || top.startsWith(`${pattern}/`);
    if (matches) included = negate;
  }
  return included;
}
