// Boolean flags as Go programs take them. Go's flag package (controller-runtime's manifests are
// written for `run`) and kubectl's pflag (whose habits exec, logs and plan follow) also take a
// boolean as --flag=true or --flag=false (pflag: -x=false for a one-letter flag; flag: a long
// flag with one dash). Node's parseArgs takes neither; this rewrites them as it wants them. One
// helper for every command, so that they cannot drift apart.

/**
 * `argv` with the boolean flags `names` (long names, or one letter for a short flag) rewritten
 * for parseArgs: --flag=true (1, t, true, any case) becomes --flag, --flag=false (0, f, false)
 * is dropped (every boolean of the commands defaults to false, so =false is the flag left out),
 * anything else is an Error naming the flag. Arguments after "--" are left as they are.
 */
export function goBooleans(argv: readonly string[], names: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--") {
      out.push(...argv.slice(i));
      break;
    }
    const m = /^(--?)([A-Za-z][A-Za-z-]*)(?:=(.*))?$/s.exec(arg);
    const name = m?.[2];
    if (m === null || name === undefined || !names.includes(name)) {
      out.push(arg);
      continue;
    }
    // A one-letter flag is -x (--x is not it); a long one --name, or -name as Go's flag package takes it.
    const short = name.length === 1;
    if (short && m[1] !== "-") {
      out.push(arg);
      continue;
    }
    const flag = short ? `-${name}` : `--${name}`;
    const value = m[3];
    if (value === undefined || ["1", "t", "true"].includes(value.toLowerCase())) out.push(flag);
    else if (!["0", "f", "false"].includes(value.toLowerCase())) throw new Error(`${flag}: "${value}" is not true or false`);
  }
  return out;
}
