import { describe, expect, it } from "vitest";
import { parsePlanFlags } from "../../../src/commands/plan.js";
import { diffFields } from "../../../src/plan/diff.js";
import { SENSITIVE, exitCodeOf, summarize, type ResourcePlan } from "../../../src/plan/model.js";
import { render, renderJSON, renderMarkdown, renderText, showPair } from "../../../src/plan/render.js";

const base = (kind: string, name: string, action: ResourcePlan["action"]): ResourcePlan => ({ kind, namespace: "team", name, action, changes: [], notes: [] });

const PLAN = summarize([
  { ...base("Skill", "new", "create"), changes: [{ path: "spec.content", new: "hello" }] },
  { ...base("Agent", "runner", "update"), serviceId: "ag-1", changes: [{ path: "spec.image", old: "r:1", new: "r:2" }] },
  { ...base("AgentDeployment", "api", "replace"), reason: "the deploy options in the spec changed", changes: [{ path: "spec.tier", old: "standard", new: "large" }] },
  { ...base("AgentDeployment", "web", "create"), notes: ["after Agent fresh is created"] },
  { ...base("Sandbox", "old", "delete"), serviceId: "vm-9", reason: "its VM is released" },
  base("Sandbox", "box", "none"),
  { ...base("Sandbox", "x", "unknown"), reason: "ConnectionNotReady: Connection \"default\" is not Ready" },
]);

describe("plan rendering", () => {
  it("counts and exits as terraform plan -detailed-exitcode", () => {
    expect(PLAN.summary).toEqual({ create: 2, update: 1, replace: 1, delete: 1, unchanged: 1, unknown: 1 });
    expect(PLAN.changes).toBe(true);
    expect(exitCodeOf(PLAN)).toBe(2);
    const quiet = summarize([base("Skill", "a", "none")]);
    expect(exitCodeOf(quiet)).toBe(0);
    // Only unknowns: cannot promise there are no changes.
    expect(exitCodeOf(summarize([base("Skill", "a", "unknown")]))).toBe(2);
    // Nothing in the service, but a resource's spec changes: a change.
    const specOnly = summarize([{ ...base("Sandbox", "a", "none"), specChanged: true, changes: [{ path: "spec.keepAlive", old: true, new: false }] }]);
    expect(specOnly.summary.unchanged).toBe(1);
    expect(specOnly.changes).toBe(true);
    expect(exitCodeOf(specOnly)).toBe(2);
  });

  it("text: a symbol and a verb per resource, field changes old -> new, notes, the summary line", () => {
    const text = renderText(PLAN);
    expect(text).toContain('  + Skill team/new will be created\n      + spec.content: "hello"\n');
    expect(text).toContain('  ~ Agent team/runner will be updated in place (ag-1)\n      ~ spec.image: "r:1" -> "r:2"\n');
    expect(text).toContain("-/+ AgentDeployment team/api must be replaced: the deploy options in the spec changed\n");
    expect(text).toContain("  + AgentDeployment team/web will be created\n      # after Agent fresh is created\n");
    expect(text).toContain("  - Sandbox team/old will be deleted (vm-9): its VM is released\n");
    expect(text).toContain("    Sandbox team/box no changes\n");
    expect(text).toContain('  ? Sandbox team/x cannot be planned: ConnectionNotReady: Connection "default" is not Ready\n');
    expect(text).toContain("Plan: 2 to create, 1 to update, 1 to replace, 1 to delete.\n(1 unchanged, 1 cannot be planned)\n");
    expect(renderText(summarize([base("Skill", "a", "none")]))).toMatch(/^No changes\. .*\n[\s\S]*Plan: 0 to create, 0 to update, 0 to replace, 0 to delete\.\n\(1 unchanged\)\n$/);
  });

  it("json: the documented shape", () => {
    const parsed = JSON.parse(renderJSON(PLAN)) as Record<string, unknown>;
    expect(Object.keys(parsed)).toEqual(["formatVersion", "resources", "summary", "changes"]);
    expect(parsed.formatVersion).toBe(1);
    expect((parsed.resources as ResourcePlan[])[1]).toEqual({
      kind: "Agent",
      namespace: "team",
      name: "runner",
      action: "update",
      serviceId: "ag-1",
      changes: [{ path: "spec.image", old: "r:1", new: "r:2" }],
      notes: [],
    });
    expect(render(PLAN, "json")).toBe(renderJSON(PLAN));
  });

  it("markdown: the summary in bold, a table, field changes in a diff block; pipes escaped", () => {
    const md = renderMarkdown(summarize([...PLAN.resources, { ...base("Skill", "pipe", "update"), reason: "a | b" }]));
    expect(md).toContain("### agent-operator plan");
    expect(md).toContain("**Plan: 2 to create, 2 to update, 1 to replace, 1 to delete.** (1 unchanged, 1 cannot be planned)");
    expect(md).toContain("| `AgentDeployment team/api` | ♻️ replace | the deploy options in the spec changed |");
    expect(md).toContain("| `Sandbox team/old` | 🗑️ delete | its VM is released; service object `vm-9` |");
    expect(md).toContain("a \\| b");
    // Unchanged resources are counted, not listed.
    expect(md).not.toContain("team/box");
    expect(md).toContain('```diff\n+ Skill team/new\n  + spec.content: "hello"\n~ Agent team/runner\n  ! spec.image: "r:1" -> "r:2"');
  });

  it("shows secret-looking fields as (sensitive), never their values; cuts long values", () => {
    const changes = diffFields({ a: { token: "t1", keep: 1 } }, { a: { token: "t2", keep: 1 }, password: "p" }, "spec");
    expect(changes).toEqual([
      { path: "spec.a.token", old: SENSITIVE, new: SENSITIVE },
      { path: "spec.password", new: SENSITIVE },
    ]);
    const text = renderText(summarize([{ ...base("Agent", "a", "update"), changes }]));
    expect(text).toContain("~ spec.a.token: (sensitive) -> (sensitive)");
    expect(text).not.toContain("t1");
    const long = renderText(summarize([{ ...base("Skill", "s", "update"), changes: [{ path: "spec.content", old: "x".repeat(200), new: "y" }] }]));
    expect(long).toContain(`"${"x".repeat(78)}…`);
  });

  it("hides fields by how their names end, whatever the case and separators: githubToken, db_password, client_secret, api-key, credentials", () => {
    const secrets = { githubToken: "v1", db_password: "v2", client_secret: "v3", "api-key": "v4", credentials: { user: "v5" }, PRIVATE_KEY: "v6" };
    const changes = diffFields(undefined, { manifest: { authentication: secrets }, maxTokens: 5, tokenizer: "bpe" }, "spec");
    const text = renderText(summarize([{ ...base("Agent", "a", "create"), changes }]));
    for (const v of ["v1", "v2", "v3", "v4", "v5", "v6"]) expect(text).not.toContain(`"${v}"`);
    // A reference to a Secret is no secret: a Connection's credentials.secretRef.name is shown.
    expect(diffFields({ credentials: { secretRef: { name: "old" } } }, { credentials: { secretRef: { name: "new" } } }, "spec")).toEqual([
      { path: "spec.credentials.secretRef.name", old: "old", new: "new" },
    ]);
    // Names that only contain such a word are shown.
    expect(text).toContain("spec.maxTokens: 5");
    expect(text).toContain('spec.tokenizer: "bpe"');
  });

  it("hides the env variables secrets are usually given in, and a URL's password, in plain spec values", () => {
    const env = { AWS_SECRET_ACCESS_KEY: "v1", STRIPE_KEY: "v2", GH_PAT: "v3", DB_PWD: "v4", DB_PASS: "v5", GPG_PASSPHRASE: "v6", DATABASE_URL: "postgres://app:pw-in-url@db:5432/x", CACHE_URL: "redis://u:p@ss@cache/0", MODE: "prod", PWD: "/workspace" };
    const changes = diffFields(undefined, { env, publicKey: "ssh-ed25519 AAAA" }, "spec");
    const text = renderText(summarize([{ ...base("Sandbox", "s", "create"), changes }]));
    for (const v of ["v1", "v2", "v3", "v4", "v5", "v6", "pw-in-url", "ss@cache"]) expect(text).not.toContain(v);
    expect(text).toContain('spec.env.DATABASE_URL: "postgres://app:(sensitive)@db:5432/x"');
    expect(text).toContain('spec.env.CACHE_URL: "redis://u:(sensitive)@cache/0"');
    expect(text).toContain('spec.env.MODE: "prod"');
    // Not secrets: the shell's working directory, a public key.
    expect(text).toContain('spec.env.PWD: "/workspace"');
    expect(text).toContain('spec.publicKey: "ssh-ed25519 AAAA"');
  });

  it("hides secret-looking fields at any depth: in arrays, inside objects, under a secret-looking key; in every output", () => {
    expect(diffFields(undefined, { options: { registries: [{ host: "h", password: "p-in-array" }] }, auth: { token: { value: "t-under" } } }, "spec")).toEqual([
      { path: "spec.auth.token.value", new: SENSITIVE },
      { path: "spec.options.registries", new: [{ host: "h", password: SENSITIVE }] },
    ]);
    // Changes built by hand (not by diffFields) are redacted by the outputs all the same.
    const plan = summarize([{ ...base("Agent", "a", "update"), changes: [{ path: "spec.manifest", old: { auth: { apiKey: "k-old" } }, new: { list: [{ clientSecret: "cs-new" }] } }] }]);
    for (const out of [renderText(plan), renderJSON(plan), renderMarkdown(plan)]) {
      expect(out).not.toMatch(/k-old|cs-new/);
      expect(out).toContain(SENSITIVE);
    }
  });

  it("shows long values that differ only past the cut around their first difference, on both sides", () => {
    const image = `registry.example.com/team/${"a".repeat(80)}/runner`;
    const text = renderText(summarize([{ ...base("Agent", "long", "update"), changes: [{ path: "spec.image", old: `${image}:1.2.3`, new: `${image}:1.2.4` }] }]));
    const line = text.split("\n").find((l) => l.includes("spec.image")) ?? "";
    const [, old, next] = /~ spec\.image: (.*) -> (.*)$/.exec(line) ?? [];
    expect(old).not.toBe(next);
    expect(old).toMatch(/^….*runner:1\.2\.3"$/);
    expect(next).toMatch(/^….*runner:1\.2\.4"$/);
    expect(showPair(`${"b".repeat(100)}x${"c".repeat(100)}`, `${"b".repeat(100)}y${"c".repeat(100)}`)).toEqual([
      `…${"b".repeat(20)}x${"c".repeat(57)}…`,
      `…${"b".repeat(20)}y${"c".repeat(57)}…`,
    ]);
    // Values that differ within the cut are cut as before.
    expect(showPair("x".repeat(200), "y")).toEqual([`"${"x".repeat(78)}…`, '"y"']);
  });

  it("diffs leaves, arrays as one value", () => {
    expect(diffFields({ env: { A: "1" }, skills: ["a"] }, { env: { A: "2", B: "3" }, skills: ["a", "b"] }, "spec")).toEqual([
      { path: "spec.env.A", old: "1", new: "2" },
      { path: "spec.env.B", new: "3" },
      { path: "spec.skills", old: ["a"], new: ["a", "b"] },
    ]);
  });
});

describe("plan flags", () => {
  it("takes kubectl's flags", () => {
    const f = parsePlanFlags(["-f", "a.yaml", "--filename", "-", "-n", "ns", "--prune", "-l", "app=x", "-o", "markdown", "--context", "c"]);
    expect(f).toMatchObject({ filenames: ["a.yaml", "-"], namespace: "ns", prune: true, output: "markdown", context: "c" });
    expect(parsePlanFlags(["-k", "dir"])).toMatchObject({ kustomize: "dir", filenames: [], output: "text" });
    expect(parsePlanFlags(["--help"])).toBe("help");
  });

  it("refuses what makes no sense, naming the flag", () => {
    expect(() => parsePlanFlags([])).toThrow("give the manifests with -f FILENAME or -k DIRECTORY");
    expect(() => parsePlanFlags(["-f", "a", "-k", "b"])).toThrow("-f and -k cannot be used together");
    expect(() => parsePlanFlags(["-f", "a", "-o", "yaml"])).toThrow('--output: "yaml" is not one of text, json, markdown');
    expect(() => parsePlanFlags(["-f", "a", "--bogus"])).toThrow();
    expect(() => parsePlanFlags(["-f", "a", "extra"])).toThrow('unexpected argument "extra"');
  });
});
