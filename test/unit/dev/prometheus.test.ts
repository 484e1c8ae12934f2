// dev/prometheus.ts reads what prom-client (the operator's /metrics) writes.
import { Counter, Histogram, Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { by, delta, histogramQuantile, parseMetrics, sum, sumMetric } from "../../../dev/prometheus.js";

async function scrape(fill: (c: Counter, h: Histogram) => void): Promise<string> {
  const registry = new Registry();
  const c = new Counter({ name: "requests_total", help: "Requests.", labelNames: ["method", "path"], registers: [registry] });
  const h = new Histogram({ name: "latency_seconds", help: "Latency.", buckets: [0.1, 1, 10], registers: [registry] });
  fill(c, h);
  return registry.metrics();
}

describe("dev/prometheus", () => {
  it("reads samples, label escapes included, and sums and groups them", async () => {
    const text = await scrape((c) => {
      c.inc({ method: "GET", path: "/a" }, 2);
      c.inc({ method: "PUT", path: "/a" }, 3);
      c.inc({ method: "PUT", path: 'say "hi"\\\n' }, 5);
    });
    const samples = parseMetrics(text);
    expect(samples.filter((s) => s.name === "requests_total")).toHaveLength(3);
    expect(samples.some((s) => s.labels.path === 'say "hi"\\\n')).toBe(true);
    expect(sum(samples, "requests_total")).toBe(10);
    expect(sum(samples, "requests_total", { method: "PUT" })).toBe(8);
    expect(sum(samples, "requests_total", { method: (m) => m !== "GET", path: "/a" })).toBe(3);
    expect(by(samples, "requests_total", "method")).toEqual({ GET: 2, PUT: 8 });
    expect(sumMetric(text, "requests_total", { method: "GET" })).toBe(2);
    expect(sumMetric(text, "absent_total")).toBe(0);
  });

  it("takes differences between scrapes and quantiles of histograms", async () => {
    const before = parseMetrics(await scrape((c) => c.inc({ method: "GET", path: "/" }, 1)));
    const after = parseMetrics(
      await scrape((c, h) => {
        c.inc({ method: "GET", path: "/" }, 4);
        c.inc({ method: "PUT", path: "/" }, 1);
        for (const v of [0.05, 0.5, 0.5, 5]) h.observe(v);
      }),
    );
    const d = delta(before, after);
    expect(sum(d, "requests_total", { method: "GET" })).toBe(3);
    expect(sum(d, "requests_total", { method: "PUT" })).toBe(1);
    expect(sum(after, "latency_seconds_count")).toBe(4);
    // 4 observations: rank 2 of the median falls in (0.1, 1], which holds the 2nd and 3rd.
    expect(histogramQuantile(after, "latency_seconds", 0.5)).toBeCloseTo(0.55);
    expect(histogramQuantile(after, "latency_seconds", 1)).toBe(10);
    expect(histogramQuantile(before, "latency_seconds", 0.5)).toBeNaN();
  });
});
