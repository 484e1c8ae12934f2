// Go-style durations ("90s", "10m", "1h30m", "500ms"), as controller-runtime's flags take them.

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Milliseconds; throws an Error naming `flag` when the text is not a duration. */
export function parseDuration(text: string, flag: string): number {
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/y;
  let total = 0;
  let pos = 0;
  while (pos < text.length) {
    re.lastIndex = pos;
    const m = re.exec(text);
    if (!m) break;
    total += Number(m[1]) * (UNITS[m[2] ?? ""] ?? 0);
    pos = re.lastIndex;
  }
  if (text.length === 0 || pos !== text.length) {
    throw new Error(`${flag}: "${text}" is not a duration (examples: 30s, 10m, 1h30m)`);
  }
  return Math.round(total);
}
