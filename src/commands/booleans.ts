// Boolean flags as Go programs take them. Go's flag package (controller-runtime's manifests are
// written for `run`) and kubectl's pflag (whose habits exec, logs and plan follow) also take a
// boolean as --flag=true or --flag=false (pflag: -x=false for a one-letter flag; flag: a long
// flag with one dash). Node's parseArgs takes neither; this rewrites them as it wants them. One
// helper for every command, so that they cannot drift apart.

/** What goBooleans reads of parseArgs' options: each flag's type and one-letter alias. */
export type FlagOptions = Readonly<Record<string, { readonly type: "boolean" | "string"; readonly short?: string }>>;

/**
 * `argv` with the boolean flags of `options` (long names, and their one-letter aliases)
 * rewritten for parseArgs: --flag=true (1, t, true, any case) becomes --flag, --flag=false (0,
 * f, false) is dropped, and so is the same flag given before it (every boolean of the commands
 * defaults to false, so =false is the flag left out; the last one given counts), anything else is an Error naming the flag. The argument after a flag that takes a
 * value is that value, whatever it looks like (`-n -f=false`: the namespace "-f=false", as
 * pflag reads it; parseArgs refuses a separate value that starts with a dash, so it is handed
 * over as --namespace=-f=false). A one-letter flag given its value with "=" (-n=team) has
 * that value, as pflag reads it (parseArgs would take "=team"). The arguments after "--" are
 * left as they are.
 */
export function goBooleans(argv: readonly string[], options: FlagOptions): string[] {
  /** Boolean flags, by long name and alias: how parseArgs is given them set (each spelling). */
  const booleans = new Map<string, string[]>();
  /** Flags that take a value, by long name and alias: their long name. */
  const valued = new Map<string, string>();
  for (const [name, o] of Object.entries(options)) {
    if (o.type === "boolean") {
      const spellings = [`--${name}`, ...(o.short !== undefined ? [`-${o.short}`] : [])];
      booleans.set(name, spellings);
      if (o.short !== undefined) booleans.set(o.short, spellings);
    } else {
      valued.set(name, name);
      if (o.short !== undefined) valued.set(o.short, name);
    }
  }
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--") {
      out.push(...argv.slice(i));
      break;
    }
    const m = /^(--?)([A-Za-z][A-Za-z-]*)(?:=(.*))?$/s.exec(arg);
    const name = m?.[2];
    if (m === null || name === undefined) {
      out.push(arg);
      continue;
    }
    // A one-letter flag is -x (--x is not it); a long one --name, or -name as Go's flag package takes it.
    const short = name.length === 1;
    if (short && m[1] !== "-") {
      out.push(arg);
      continue;
    }
    const long = valued.get(name);
    if (long !== undefined && short && m[3] !== undefined) {
      // -n=team is the namespace "team", as pflag reads it; parseArgs would take "=team".
      out.push(`--${long}=${m[3]}`);
      continue;
    }
    if (long !== undefined && m[3] === undefined) {
      // Its value is the next argument, whatever it looks like.
      const value = argv[i + 1];
      if (value === undefined) out.push(arg);
      else if (value.startsWith("-")) out.push(`--${long}=${value}`);
      else out.push(arg, value);
      i++;
      continue;
    }
    if (!booleans.has(name)) {
      out.push(arg);
      continue;
    }
    const flag = short ? `-${name}` : `--${name}`;
    const value = m[3];
    if (value === undefined || ["1", "t", "true"].includes(value.toLowerCase())) out.push(flag);
    else if (["0", "f", "false"].includes(value.toLowerCase())) {
      // The last one given counts, as for any flag (a kustomize overlay appends
      // --leader-elect=false to its base's --leader-elect): it unsets the flag given before.
      const spellings = booleans.get(name) ?? [];
      for (let j = out.length - 1; j >= 0; j--) if (spellings.includes(out[j]!)) out.splice(j, 1);
    } else throw new Error(`${flag}: "${value}" is not true or false`);
  }
  return out;
}
