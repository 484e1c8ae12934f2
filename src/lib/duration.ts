// Go-style durations ("90s", "10m", "1h30m", "500ms", "1h0m0s", "0"), as controller-runtime's
// flags take them (Go's time.ParseDuration, without a sign).

const UNITS: Record<string, number> = { ns: 1e-6, us: 1e-3, "µs": 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Milliseconds, in whole milliseconds; throws an Error naming `flag` when the text is not a duration. */
export function parseDuration(text: string, flag: string): number {
  return Math.round(durationMs(text, flag));
}

/**
 * Milliseconds as written, not rounded (100us is 0.1): for a flag that must refuse what would
 * round to 0. Throws an Error naming `flag` when the text is not a duration.
 */
export function durationMs(text: string, flag: string): number {
  if (text === "0") return 0;
  // Longer units first: "ms" before "m".
  const re = /(\d+(?:\.\d+)?|\.\d+)(ns|us|µs|ms|s|m|h)/y;
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
    // The likely slips, said: a bare number (Go wants a unit) and a negative one.
    const hint = /^\d+(\.\d+)?$/.test(text) ? ` (a unit is needed: ${text}s?)` : text.startsWith("-") ? " (it cannot be negative)" : "";
    throw new Error(`${flag}: "${text}" is not a duration${hint} (examples: 30s, 10m, 1h30m)`);
  }
  return total;
}
