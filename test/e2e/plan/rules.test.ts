// The plan checks the CRDs' CEL rules with a JavaScript twin of each (ValidationRule.holds, in
// src/api), having no CEL engine. Here the real API server judges the same specs (created with
// --dry-run=server, defaults applied as when stored): a spec is refused with exactly the
// messages of the rules whose twins say it breaks them, and accepted when none do. A twin that
// drifts from its rule fails here.
import { describe, expect, it } from "vitest";
import { allKinds } from "../../../src/api/index.js";
import { ruleProblems } from "../../../src/plan/admission.js";
import { kubectl, useTestNamespace } from "../support/kube.js";
import { installCRDs } from "../support/operator.js";

const ns = useTestNamespace("rules");

const CONNECTION = { baseURL: "https://api.example.com", authURL: "https://auth.example.com", credentials: { secretRef: { name: "c" } } };

const CASES: Array<[kind: string, spec: Record<string, unknown>]> = [
  ["Agent", { image: "img:1" }],
  ["Agent", {}],
  ["Agent", { managementPolicies: ["Observe"] }],
  ["Agent", { managementPolicies: ["Create"] }],
  ["Agent", { image: "img:1", managementPolicies: ["*", "Observe"] }],
  ["Agent", { image: "img:1", deletionPolicy: "Orphan", managementPolicies: ["Observe", "Delete"] }],
  ["Agent", { image: "img:1", deletionPolicy: "Orphan", managementPolicies: ["Observe", "Create"] }],
  ["AgentDeployment", { agentRef: { name: "a" } }],
  ["AgentDeployment", { agentId: "a-1" }],
  ["AgentDeployment", {}],
  ["AgentDeployment", { agentRef: { name: "a" }, agentId: "a-1" }],
  ["AgentDeployment", { agentId: "a-1", options: { name: "n", tier: "large", env: { A: "1" } } }],
  ["AgentDeployment", { agentId: "a-1", tier: "standard", skills: ["s"], options: { tier: "large", skills: ["t"], metadata: { team: "a" } } }],
  ["AgentDeployment", { agentId: "a-1", env: { A: "1" }, options: { env: { A: "2" } } }],
  ["Agent", { image: "img:1", orgId: "" }],
  ["Sandbox", { tier: "standard", orgId: "" }],
  ["Connection", { ...CONNECTION, orgId: "" }],
  ["SandboxRun", { sandboxTemplate: { tier: "standard", orgId: "" }, steps: [{ name: "s", command: "true" }] }],
  ["Sandbox", { tier: "standard" }],
  ["Sandbox", { tier: "standard", ttlSeconds: 60, renewBeforeSeconds: 60 }],
  ["Sandbox", { tier: "standard", ttlSeconds: 60, renewBeforeSeconds: 30 }],
  // Against the default ttlSeconds, applied before the rule is evaluated.
  ["Sandbox", { tier: "standard", renewBeforeSeconds: 4000 }],
  ["Sandbox", { tier: "standard", renewBeforeSeconds: 600 }],
  ["Skill", { content: "# x" }],
  ["Skill", {}],
  ["Skill", { managementPolicies: ["Observe"] }],
  ["Skill", { content: "# x", contentFrom: { configMapKeyRef: { name: "c", key: "k" } } }],
  ["Skill", { content: "# x", resources: { a: "b" }, resourcesFrom: { configMapRef: { name: "c" } } }],
];

/** Updates of a stored spec (`before`) to `after`: the transition rules, run on updates only. */
const UPDATES: Array<[kind: string, before: Record<string, unknown>, after: Record<string, unknown>]> = [
  ["Sandbox", { tier: "standard", orgId: "o" }, { tier: "standard", orgId: "" }],
  ["Sandbox", { tier: "standard" }, { tier: "standard", orgId: "" }],
  ["Sandbox", { tier: "standard", orgId: "o" }, { tier: "standard", orgId: "p" }],
  ["Sandbox", { tier: "standard", orgId: "o" }, { tier: "standard" }],
  ["Connection", { ...CONNECTION, orgId: "o" }, { ...CONNECTION, orgId: "" }],
  ["Connection", CONNECTION, { ...CONNECTION, orgId: "o" }],
];

describe("the plan's twins of the CRDs' CEL rules", () => {
  it("refuse exactly what the API server refuses, with its messages", async () => {
    await installCRDs();
    for (const [i, [kind, spec]] of CASES.entries()) {
      const object = { apiVersion: "agentcompute.dev/v1alpha1", kind, metadata: { name: `case-${i}` }, spec };
      const said = ruleProblems(kind, spec, undefined);
      const res = await kubectl(["create", "--dry-run=server", "-o", "name", "-f", "-"], { namespace: ns.name, input: JSON.stringify(object) });
      const what = `${kind} ${JSON.stringify(spec)}: ${res.stderr}`;
      expect(res.exitCode === 0, what).toBe(said.length === 0);
      const def = allKinds.find((k) => k.kind === kind);
      const twinned = [...(def?.specValidations ?? []), ...(def?.creationValidations ?? [])].filter((r) => r.holds !== undefined);
      for (const { message } of twinned) expect(res.stderr.includes(message), `${what} (${message})`).toBe(said.includes(message));
    }
  });

  it("refuse exactly the updates the API server refuses, with its messages", async () => {
    await installCRDs();
    const refused: number[] = [];
    for (const [i, [kind, before, after]] of UPDATES.entries()) {
      const object = (spec: Record<string, unknown>) => JSON.stringify({ apiVersion: "agentcompute.dev/v1alpha1", kind, metadata: { name: `update-${i}` }, spec });
      const created = await kubectl(["create", "-o", "name", "-f", "-"], { namespace: ns.name, input: object(before) });
      expect(created.exitCode, created.stderr).toBe(0);
      const said = ruleProblems(kind, after, before);
      const res = await kubectl(["replace", "--dry-run=server", "-o", "name", "-f", "-"], { namespace: ns.name, input: object(after) });
      const what = `${kind} ${JSON.stringify(before)} -> ${JSON.stringify(after)}: ${res.stderr}`;
      expect(res.exitCode === 0, what).toBe(said.length === 0);
      if (res.exitCode !== 0) refused.push(i);
      const twinned = (allKinds.find((k) => k.kind === kind)?.specValidations ?? []).filter((r) => r.holds !== undefined);
      for (const { message } of twinned) expect(res.stderr.includes(message), `${what} (${message})`).toBe(said.includes(message));
    }
    // An orgId made empty, whatever it was before; not one changed, or left out.
    expect(refused).toEqual([0, 1, 4]);
  });
});
