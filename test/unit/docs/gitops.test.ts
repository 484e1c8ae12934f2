// docs/gitops.md: the argocd-cm snippet is valid YAML that gives every kind the same health
// script, and the script reads the conditions and reasons the operator really writes.
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { GROUP, allKinds } from "../../../src/api/index.js";
import { readRepoFile, reasonsInSource } from "./source.js";

const gitops = readRepoFile("docs/gitops.md");

function argocdConfigMap(): { metadata: { name: string }; data: Record<string, string> } {
  const block = /```yaml\n(apiVersion: v1\nkind: ConfigMap\n[\s\S]*?)```/.exec(gitops)?.[1];
  if (block === undefined) throw new Error("no argocd-cm ConfigMap in docs/gitops.md");
  return parse(block) as { metadata: { name: string }; data: Record<string, string> };
}

describe("docs/gitops.md", () => {
  it("gives argocd-cm one health check per kind, all the same script", () => {
    const cm = argocdConfigMap();
    expect(cm.metadata.name).toBe("argocd-cm");
    expect(Object.keys(cm.data).sort()).toEqual(allKinds.map((k) => `resource.customizations.health.${GROUP}_${k.kind}`).sort());
    expect(new Set(Object.values(cm.data)).size).toBe(1);
  });

  it("bases health on observedGeneration and the Ready and Stalled conditions, with reasons that exist", () => {
    const script = Object.values(argocdConfigMap().data)[0] ?? "";
    for (const s of ["observedGeneration", '"Ready"', '"Stalled"', '"Healthy"', '"Degraded"', '"Progressing"', '"Suspended"']) {
      expect(script).toContain(s);
    }
    const { conditions } = reasonsInSource();
    for (const m of script.matchAll(/reason == "(\w+)"/g)) expect(conditions.has(m[1] ?? ""), m[1]).toBe(true);
  });

  it("names only reasons the operator sets", () => {
    const { conditions } = reasonsInSource();
    const named = [...gitops.matchAll(/`([A-Z][a-zA-Z]+)`/g)].map((m) => m[1] ?? "");
    const reasonLike = named.filter((n) => /^(Connection|Secret|ConfigMap|Waiting|Service|Expired|Name|Credentials)/.test(n));
    expect(reasonLike.length).toBeGreaterThan(3);
    for (const r of reasonLike) expect(conditions.has(r), r).toBe(true);
  });
});
