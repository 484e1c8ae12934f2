// `agent-operator plan` (the real CLI, as a child process) against the real API server and the
// emulator: a Ready stack, then manifests that create, update, replace, keep and (with --prune)
// drop resources. The plan says each correctly in text and JSON, writes nothing (the emulator
// logged only GETs, besides the token; every resourceVersion in the namespace is unchanged),
// exits 2 with changes, 0 without, 1 on bad input, and never shows a Secret's value.
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { beforeAll, describe, expect, it } from "vitest";
import { kubectlOk, testKubeconfig } from "../support/kube.js";
import { API_KEY, apply, connectionManifest, useStack, waitForReady } from "../support/operator.js";
import type { PlanResult, ResourcePlan } from "../../../src/plan/model.js";
import { kubeReader } from "../../../src/plan/planner.js";

const CLI = fileURLToPath(new URL("../../../src/cli.ts", import.meta.url));
const SECRET_VALUE = "envfrom-secret-value-7Hq2zX";
const NEW_SECRET_VALUE = "envfrom-secret-value-rotated-P4kd9w";

const t = useStack("plan");

function run(args: string[], input?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["--import", "tsx", CLI, "plan", "--kubeconfig", testKubeconfig(), ...args], { stdio: ["pipe", "pipe", "pipe"] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on("data", (b: Buffer) => out.push(b));
    child.stderr.on("data", (b: Buffer) => err.push(b));
    child.on("close", (code) => resolve({ code: code ?? -1, stdout: Buffer.concat(out).toString("utf8"), stderr: Buffer.concat(err).toString("utf8") }));
    child.stdin.end(input ?? "");
  });
}

// The manifest's keys are not in sorted order (the API server's copy has them sorted): an
// unchanged Agent must still plan as unchanged, and its deployments as not redeployed.
const agent = (name: string, image: string) => `apiVersion: agentcompute.dev/v1alpha1
kind: Agent
metadata: {name: ${name}}
spec: {image: "${image}", manifest: {skills: [{inputModes: [text], id: run}], name: ${name}}}`;
const skill = (name: string, content: string) => `apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: ${name}}
spec: {content: "${content}"}`;
const deployment = (name: string, agentName: string, tier: string) => `apiVersion: agentcompute.dev/v1alpha1
kind: AgentDeployment
metadata: {name: ${name}}
spec: {agentRef: {name: ${agentName}}, tier: ${tier}, env: {LOG: info}}`;
const sandbox = (name: string, extra = "") => `apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: ${name}}
spec: {tier: standard, ttlSeconds: 3600${extra}}`;
const secret = `apiVersion: v1
kind: Secret
metadata: {name: sb-env}
stringData: {API_TOKEN: "${SECRET_VALUE}"}`;

const START = [
  secret,
  skill("notes", "v1"),
  skill("tools", "t1"),
  agent("runner", "example/runner:1"),
  agent("helper", "example/helper:1"),
  deployment("web", "runner", "standard"),
  deployment("api", "helper", "standard"),
  sandbox("box", ", envFrom: [{secretRef: {name: sb-env}}], skills: [tools]"),
  sandbox("old-box"),
];

const NEXT = [
  secret,
  skill("notes", "v2"), // update: content
  skill("tools", "t1"),
  agent("runner", "example/runner:2"), // update: image
  agent("helper", "example/helper:1"),
  deployment("web", "runner", "standard"), // redeploy once runner is updated
  deployment("api", "helper", "large"), // replace: tier
  sandbox("box", ", envFrom: [{secretRef: {name: sb-env}}], skills: [tools]"),
  // old-box dropped: deleted with --prune
  agent("fresh", "example/fresh:1"), // create
  deployment("fresh-dep", "fresh", "standard"), // create, after Agent fresh
  skill("new-skill", "n1"), // create
  sandbox("new-box", ", skills: [new-skill]"), // create, after Skill new-skill
];

/** The Connection and its Secret, as the stack applied them: part of the manifests, so --prune keeps them. */
const connection = () => connectionManifest(t.namespace, t.stack.emulator).trim();

let dir: string;
const file = (name: string, docs: string[]) => {
  const path = join(dir, name);
  writeFileSync(path, docs.join("\n---\n"));
  return path;
};

async function resourceVersions(): Promise<string> {
  const out = await kubectlOk(["get", "agentcompute,secrets,configmaps", "-o", "jsonpath={range .items[*]}{.kind}/{.metadata.name}={.metadata.resourceVersion} {end}"], { namespace: t.namespace });
  return out.split(" ").sort().join(" ");
}

function find(plan: PlanResult, kind: string, name: string): ResourcePlan {
  const r = plan.resources.find((x) => x.kind === kind && x.name === name);
  if (r === undefined) throw new Error(`${kind}/${name} not in the plan: ${JSON.stringify(plan.resources.map((x) => `${x.kind}/${x.name}`))}`);
  return r;
}

describe("agent-operator plan", () => {
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "plan-e2e-"));
    await apply(START.join("\n---\n"), t.namespace);
    for (const [plural, name] of [
      ["skills", "notes"],
      ["skills", "tools"],
      ["agents", "runner"],
      ["agents", "helper"],
      ["agentdeployments", "web"],
      ["agentdeployments", "api"],
      ["sandboxes", "box"],
      ["sandboxes", "old-box"],
    ] as const) {
      await waitForReady(t.stack, plural, name, { timeoutMs: 60_000 });
    }
  }, 180_000);

  it("plans creates, updates, a replace and a prune, and writes nothing", async () => {
    const manifests = file("next.yaml", [connection(), ...NEXT]);
    const rvBefore = await resourceVersions();
    const from = t.stack.emulator.requests.length;

    const json = await run(["-f", manifests, "-n", t.namespace, "--prune", "-o", "json"]);
    expect(json.stderr).toBe("");
    expect(json.code).toBe(2);
    const plan = JSON.parse(json.stdout) as PlanResult;
    expect(plan.summary).toMatchObject({ create: 4, update: 3, replace: 1, delete: 1 });

    expect(find(plan, "Skill", "notes")).toMatchObject({ action: "update", changes: [{ path: "spec.content", old: "v1", new: "v2" }] });
    expect(find(plan, "Agent", "runner")).toMatchObject({
      action: "update",
      changes: [{ path: "spec.image", old: "example/runner:1", new: "example/runner:2" }],
    });
    const web = find(plan, "AgentDeployment", "web");
    expect(web.action).toBe("update");
    expect(web.reason).toContain("redeploy");
    expect(web.notes).toContain("after Agent runner is updated");
    const api = find(plan, "AgentDeployment", "api");
    expect(api).toMatchObject({ action: "replace", changes: [{ path: "spec.tier", old: "standard", new: "large" }] });
    expect(api.reason).toContain("deploy options in the spec changed");
    expect(find(plan, "AgentDeployment", "fresh-dep")).toMatchObject({ action: "create", notes: ["after Agent fresh is created"] });
    expect(find(plan, "Sandbox", "new-box")).toMatchObject({ action: "create", notes: ["after Skill new-skill is created"] });
    expect(find(plan, "Agent", "fresh").action).toBe("create");
    expect(find(plan, "Skill", "new-skill").action).toBe("create");
    for (const [kind, name] of [
      ["Skill", "tools"],
      ["Agent", "helper"],
      ["Sandbox", "box"],
    ]) {
      expect(find(plan, kind ?? "", name ?? "").action, `${kind}/${name}`).toBe("none");
    }
    expect(find(plan, "Sandbox", "old-box")).toMatchObject({ action: "delete", reason: "its VM is released" });

    const text = await run(["-f", manifests, "-n", t.namespace, "--prune"]);
    expect(text.code).toBe(2);
    expect(text.stdout).toContain("Plan: 4 to create, 3 to update, 1 to replace, 1 to delete.");
    expect(text.stdout).toMatch(/ {2}~ Agent \S+\/runner will be updated in place/);
    expect(text.stdout).toContain('~ spec.image: "example/runner:1" -> "example/runner:2"');
    expect(text.stdout).toMatch(/-\/\+ AgentDeployment \S+\/api must be replaced/);
    expect(text.stdout).toMatch(/ {2}\+ Sandbox \S+\/new-box will be created/);
    expect(text.stdout).toMatch(/ {2}- Sandbox \S+\/old-box will be deleted/);

    const markdown = await run(["-f", manifests, "-n", t.namespace, "--prune", "-o", "markdown"]);
    expect(markdown.code).toBe(2);
    expect(markdown.stdout).toContain("**Plan: 4 to create, 3 to update, 1 to replace, 1 to delete.**");

    // Without --prune, nothing is deleted.
    const noPrune = JSON.parse((await run(["-f", manifests, "-n", t.namespace, "-o", "json"])).stdout) as PlanResult;
    expect(noPrune.summary.delete).toBe(0);

    // Nothing written: only GETs reached the service (and token requests), and the cluster is as it was.
    const during = t.stack.emulator.requests.slice(from);
    expect(during.length).toBeGreaterThan(0);
    const writes = during.filter((r) => r.method !== "GET" && r.operation !== "token");
    expect(writes, JSON.stringify(writes)).toEqual([]);
    expect(await resourceVersions()).toBe(rvBefore);

    // Secret values never appear, in any output.
    for (const out of [json, text, markdown]) {
      expect(out.stdout).not.toContain(SECRET_VALUE);
      expect(out.stdout).not.toContain(API_KEY);
      expect(out.stderr).not.toContain(SECRET_VALUE);
    }
  }, 120_000);

  it("learns from the API server's discovery which kinds live in no namespace", async () => {
    const reader = kubeReader(t.stack.kube);
    // An IngressClass is cluster-scoped and not among the kinds the planner knows by name.
    expect(await reader.namespaced?.("networking.k8s.io/v1", "IngressClass")).toBe(false);
    expect(await reader.namespaced?.("v1", "Namespace")).toBe(false);
    expect(await reader.namespaced?.("apps/v1", "Deployment")).toBe(true);
    expect(await reader.namespaced?.("v1", "Pod")).toBe(true);
    expect(await reader.namespaced?.("example.com/v1", "Widget")).toBeUndefined();
  });

  it("exits 0 for the manifests as applied (stdin), and says so", async () => {
    const res = await run(["-f", "-", "-n", t.namespace, "--prune"], [connection(), ...START].join("\n---\n"));
    expect(res.stderr).toBe("");
    expect(res.stdout).toContain("No changes.");
    expect(res.stdout).toContain("Plan: 0 to create, 0 to update, 0 to replace, 0 to delete.");
    expect(res.code).toBe(0);
  }, 60_000);

  it("renders a kustomization (-k) as the same plan", async () => {
    const kdir = join(dir, "overlay");
    mkdirSync(kdir);
    writeFileSync(join(kdir, "stack.yaml"), [connection(), ...NEXT].join("\n---\n"));
    writeFileSync(join(kdir, "kustomization.yaml"), `namespace: ${t.namespace}\nresources: [stack.yaml]\n`);
    const res = await run(["-k", kdir, "--prune", "-o", "json"]);
    expect(res.stderr).toBe("");
    expect(res.code).toBe(2);
    expect((JSON.parse(res.stdout) as PlanResult).summary).toMatchObject({ create: 4, update: 3, replace: 1, delete: 1 });
  }, 60_000);

  it("replaces a Sandbox whose envFrom Secret value changes, showing neither value", async () => {
    const changed = [connection(), ...START.map((d) => (d === secret ? d.replace(SECRET_VALUE, NEW_SECRET_VALUE) : d))];
    const outputs = await Promise.all(["text", "json", "markdown"].map((o) => run(["-f", "-", "-n", t.namespace, "-o", o], changed.join("\n---\n"))));
    const plan = JSON.parse(outputs[1]?.stdout ?? "") as PlanResult;
    expect(plan.summary).toMatchObject({ create: 0, update: 0, replace: 1, delete: 0 });
    expect(find(plan, "Sandbox", "box")).toMatchObject({ action: "replace", changes: [{ path: "env from Secrets sb-env", old: "(sensitive)", new: "(sensitive)" }] });
    for (const out of outputs) {
      expect(out.code).toBe(2);
      for (const value of [SECRET_VALUE, NEW_SECRET_VALUE, API_KEY]) {
        expect(out.stdout).not.toContain(value);
        expect(out.stderr).not.toContain(value);
      }
    }
  }, 60_000);

  it("says per resource that its Connection is missing", async () => {
    const other = `apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: notes}
spec: {content: "v9", connectionRef: {name: nowhere}}`;
    const res = await run(["-f", file("conn.yaml", [other]), "-n", t.namespace, "-o", "json"]);
    expect(res.code).toBe(2);
    const plan = JSON.parse(res.stdout) as PlanResult;
    expect(find(plan, "Skill", "notes")).toMatchObject({ action: "unknown" });
    expect(find(plan, "Skill", "notes").reason).toContain('ConnectionNotFound: Connection "nowhere" not found');
  }, 60_000);

  it("exits 1 naming the file for an unknown kind or bad YAML", async () => {
    const unknown = file("unknown.yaml", [skill("ok", "x"), "apiVersion: agentcompute.dev/v1alpha1\nkind: Agnet\nmetadata: {name: typo}\nspec: {}"]);
    const res = await run(["-f", unknown, "-n", t.namespace]);
    expect(res.code).toBe(1);
    expect(res.stdout).toBe("");
    expect(res.stderr).toContain(`${unknown}: document 2: Agnet "typo": unknown kind "Agnet"`);

    const bad = file("bad.yaml", ["kind: Skill\nmetadata: {name: [unclosed"]);
    const res2 = await run(["-f", bad, "-n", t.namespace]);
    expect(res2.code).toBe(1);
    expect(res2.stderr).toContain(`${bad}: not valid YAML`);

    const missing = await run(["-f", join(dir, "nope.yaml")]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("nope.yaml: no such file or directory");

    // No objects at all: an error (as kubectl apply's), not "no changes" that would pass a CI check.
    const repo = join(dir, "repo");
    mkdirSync(join(repo, "prod"), { recursive: true });
    writeFileSync(join(repo, "prod", "skill.yaml"), skill("nested", "x"));
    const nested = await run(["-f", repo, "-n", t.namespace]);
    expect(nested.code).toBe(1);
    expect(nested.stdout).toBe("");
    expect(nested.stderr).toContain(`no objects in -f ${repo} (${repo} has sub-directories: add -R to read them)`);
    const empty = await run(["-f", "-", "-n", t.namespace], "\n");
    expect(empty.code).toBe(1);
    expect(empty.stderr).toContain("no objects in -f -");
    // A selector that matches none of them (a mistyped label): the same.
    const unmatched = await run(["-f", join(repo, "prod"), "-n", t.namespace, "-l", "app=typo"]);
    expect(unmatched.code).toBe(1);
    expect(unmatched.stdout).toBe("");
    expect(unmatched.stderr).toContain("-l matches none of the 1 object(s) in the manifests");
    expect((await run(["-f", repo, "-R", "-n", t.namespace])).code).toBe(2);
  }, 60_000);
});
