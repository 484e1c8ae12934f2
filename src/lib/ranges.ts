// Spans of a text to hide (secrets found in it), merged where they touch or overlap, so that
// two secrets that share characters go under one mask and neither leaves a piece of itself
// outside it. Neutral library: imports nothing from the rest of src/.

/** [start, end) offsets. */
export type Range = [start: number, end: number];

/** The ranges sorted, those that overlap or touch merged into one. */
export function mergeRanges(ranges: readonly Range[]): Range[] {
  const sorted = [...ranges].sort((a, b) => a[0] - b[0]);
  const merged: Range[] = [];
  for (const [s, e] of sorted) {
    const last = merged[merged.length - 1];
    if (last !== undefined && s <= last[1]) last[1] = Math.max(last[1], e);
    else merged.push([s, e]);
  }
  return merged;
}
