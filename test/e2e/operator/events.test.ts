// Similar Events of many objects, on the real API server: past the first ten Created Events of
// a kind in a namespace, the rest are folded into one combined Event the API server accepts and
// `kubectl get events -n <ns>` lists.
import { describe, expect, it } from "vitest";
import { kubectlOk, waitFor } from "../support/kube.js";
import { apply, useStack, waitForReady } from "../support/operator.js";

const t = useStack("events");

interface EventList {
  items: Array<{ reason: string; count?: number; message: string; involvedObject: { kind: string; name: string } }>;
}

describe("Created Events of many resources", () => {
  it("are written for the first ten, and folded into one combined Event for the rest", async () => {
    const skills = Array.from({ length: 16 }, (_, i) => `apiVersion: agentcompute.dev/v1alpha1\nkind: Skill\nmetadata: {name: folded-${i}}\nspec: {content: "v${i}"}`);
    await apply(skills.join("\n---\n"), t.namespace);
    for (let i = 0; i < 16; i++) await waitForReady(t.stack, "skills", `folded-${i}`);
    const combined = await waitFor(
      async () => {
        const list = JSON.parse(await kubectlOk(["get", "events", "-o", "json"], { namespace: t.namespace })) as EventList;
        const onSkills = list.items.filter((e) => e.reason === "Created" && e.involvedObject.kind === "Skill");
        const folded = list.items.find((e) => e.reason === "Created" && e.involvedObject.kind === "Namespace");
        return folded !== undefined && folded.count === 6 ? { onSkills, folded } : undefined;
      },
      { timeoutMs: 30_000, description: "the combined Created Event (written within 10 s)" },
    );
    expect(combined.onSkills).toHaveLength(10);
    expect(combined.folded.involvedObject.name).toBe(t.namespace);
    expect(combined.folded.message).toMatch(/^\(combined from similar events\): Created for 6 more Skill resources/);
  }, 90_000);
});
