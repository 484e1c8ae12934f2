// A dependency-free SVG line chart: Ready resources over time against the ideal line the
// service's rate limit allows.

export interface Series {
  name: string;
  color: string;
  points: Array<[number, number]>;
  dashed?: boolean;
  width?: number;
}

export interface ChartOptions {
  title: string;
  subtitle?: string;
  xLabel: string;
  yLabel: string;
  series: Series[];
  /** Vertical markers (e.g. the bound and 1.15 x the bound). */
  markers?: Array<{ x: number; label: string; color: string }>;
  width?: number;
  height?: number;
}

function niceStep(range: number, ticks: number): number {
  const raw = range / Math.max(1, ticks);
  const mag = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

const esc = (s: string): string => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

export function lineChart(o: ChartOptions): string {
  const W = o.width ?? 900;
  const H = o.height ?? 520;
  const m = { left: 70, right: 20, top: o.subtitle ? 62 : 44, bottom: 90 };
  const pw = W - m.left - m.right;
  const ph = H - m.top - m.bottom;
  const all = o.series.flatMap((s) => s.points);
  const xMax = Math.max(1e-9, ...all.map((p) => p[0]), ...(o.markers ?? []).map((k) => k.x));
  const yMax = Math.max(1e-9, ...all.map((p) => p[1]));
  const xStep = niceStep(xMax, 10);
  const yStep = niceStep(yMax, 8);
  const xTop = Math.ceil(xMax / xStep) * xStep;
  const yTop = Math.ceil(yMax / yStep) * yStep;
  const X = (x: number) => m.left + (x / xTop) * pw;
  const Y = (y: number) => m.top + ph - (y / yTop) * ph;
  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`);
  parts.push(`<rect width="${W}" height="${H}" fill="white"/>`);
  parts.push(`<text x="${W / 2}" y="22" text-anchor="middle" font-size="16" font-weight="bold">${esc(o.title)}</text>`);
  if (o.subtitle) parts.push(`<text x="${W / 2}" y="42" text-anchor="middle" fill="#555">${esc(o.subtitle)}</text>`);
  for (let x = 0; x <= xTop + 1e-9; x += xStep) {
    parts.push(`<line x1="${X(x)}" y1="${m.top}" x2="${X(x)}" y2="${m.top + ph}" stroke="#eee"/>`);
    parts.push(`<text x="${X(x)}" y="${m.top + ph + 16}" text-anchor="middle">${+x.toFixed(3)}</text>`);
  }
  for (let y = 0; y <= yTop + 1e-9; y += yStep) {
    parts.push(`<line x1="${m.left}" y1="${Y(y)}" x2="${m.left + pw}" y2="${Y(y)}" stroke="#eee"/>`);
    parts.push(`<text x="${m.left - 6}" y="${Y(y) + 4}" text-anchor="end">${+y.toFixed(3)}</text>`);
  }
  parts.push(`<rect x="${m.left}" y="${m.top}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`);
  parts.push(`<text x="${m.left + pw / 2}" y="${m.top + ph + 36}" text-anchor="middle">${esc(o.xLabel)}</text>`);
  parts.push(`<text transform="translate(16 ${m.top + ph / 2}) rotate(-90)" text-anchor="middle">${esc(o.yLabel)}</text>`);
  for (const k of o.markers ?? []) {
    parts.push(`<line x1="${X(k.x)}" y1="${m.top}" x2="${X(k.x)}" y2="${m.top + ph}" stroke="${k.color}" stroke-dasharray="2 3"/>`);
    parts.push(`<text x="${X(k.x) + 3}" y="${m.top + 12}" fill="${k.color}" font-size="11">${esc(k.label)}</text>`);
  }
  for (const s of o.series) {
    if (s.points.length === 0) continue;
    const d = s.points.map((p, i) => `${i === 0 ? "M" : "L"}${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join("");
    parts.push(
      `<path d="${d}" fill="none" stroke="${s.color}" stroke-width="${s.width ?? 2}"${s.dashed ? ' stroke-dasharray="6 4"' : ""}/>`,
    );
  }
  // legend under the plot
  let lx = m.left;
  const ly = m.top + ph + 62;
  for (const s of o.series) {
    parts.push(`<line x1="${lx}" y1="${ly}" x2="${lx + 24}" y2="${ly}" stroke="${s.color}" stroke-width="${s.width ?? 2}"${s.dashed ? ' stroke-dasharray="6 4"' : ""}/>`);
    parts.push(`<text x="${lx + 30}" y="${ly + 4}">${esc(s.name)}</text>`);
    lx += 40 + s.name.length * 7;
  }
  parts.push("</svg>");
  return `${parts.join("\n")}\n`;
}

/** Cumulative count over time from a list of event times (seconds), thinned to at most ~400 points. */
export function cumulative(times: readonly number[]): Array<[number, number]> {
  const sorted = [...times].sort((a, b) => a - b);
  const step = Math.max(1, Math.floor(sorted.length / 400));
  const pts: Array<[number, number]> = [[0, 0]];
  for (let i = 0; i < sorted.length; i += step) pts.push([sorted[i] as number, i + 1]);
  if (sorted.length > 0) pts.push([sorted[sorted.length - 1] as number, sorted.length]);
  return pts;
}
