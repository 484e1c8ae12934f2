import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ManifestError, isPlanned, parseSources, readSources } from "../../../src/plan/manifests.js";
import { parseSelector } from "../../../src/plan/selector.js";

const skill = (name: string, ns = "") => `apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: ${name}${ns ? `, namespace: ${ns}` : ""}}
spec: {content: hi}`;

describe("manifest loading", () => {
  it("reads several documents, gives the default namespace to those without one, keeps inputs", () => {
    const text = [skill("a"), skill("b", "other"), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {k: v}", "", "---"].join("\n---\n");
    const objs = parseSources([{ name: "m.yaml", text }], "team");
    expect(objs.map((o) => `${o.kind}/${o.metadata.namespace}/${o.metadata.name}`)).toEqual(["Skill/team/a", "Skill/other/b", "ConfigMap/team/cm"]);
    expect(objs.map(isPlanned)).toEqual([true, true, false]);
    expect(objs[0]?.source).toBe("m.yaml: document 1");
    expect(objs[0]?.spec).toEqual({ content: "hi" });
  });

  it("expands a List", () => {
    const text = JSON.stringify({ apiVersion: "v1", kind: "List", items: [{ apiVersion: "agentcompute.dev/v1alpha1", kind: "Agent", metadata: { name: "x" }, spec: { image: "i" } }] });
    expect(parseSources([{ name: "l.json", text }], "ns").map((o) => o.kind)).toEqual(["Agent"]);
  });

  it("names the file and document of an unknown kind, a wrong version, bad YAML, a missing name, a duplicate", () => {
    const bad = (text: string) => () => parseSources([{ name: "f.yaml", text }], "ns");
    expect(bad(`${skill("a")}\n---\napiVersion: agentcompute.dev/v1alpha1\nkind: Agnet\nmetadata: {name: t}`)).toThrow(
      'f.yaml: document 2: Agnet "t": unknown kind "Agnet" in agentcompute.dev/v1alpha1 (known: Connection, Skill, Agent, AgentDeployment, Sandbox, SandboxRun)',
    );
    expect(bad("apiVersion: agentcompute.dev/v2\nkind: Skill\nmetadata: {name: t}")).toThrow('f.yaml: Skill "t": unknown apiVersion "agentcompute.dev/v2"');
    expect(bad("kind: Skill\nmetadata: {name: [oops")).toThrow(/^f\.yaml: not valid YAML: /);
    expect(bad("apiVersion: v1\nkind: Secret\nmetadata: {}")).toThrow("f.yaml: Secret: metadata.name is missing");
    expect(bad("apiVersion: v1\nmetadata: {name: x}")).toThrow("f.yaml: kind is missing");
    expect(bad("- a\n- b")).toThrow("f.yaml: not a Kubernetes object");
    expect(bad(`${skill("a")}\n---\n${skill("a")}`)).toThrow("f.yaml: document 2: Skill ns/a is also in f.yaml: document 1");
    expect(bad("kind: Skill\nmetadata: {name: [oops")).toThrow(ManifestError);
  });

  it("says what is wrong with bad YAML in words, with the file, document, line and column, and quotes none of it (a Secret's value)", () => {
    const secret = (password: string) => `${skill("a")}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData:\n  password: ${password}\n`;
    const refusal = (text: string) => {
      try {
        parseSources([{ name: "s.yaml", text }], "ns");
      } catch (err) {
        expect(err).toBeInstanceOf(ManifestError);
        return (err as Error).message;
      }
      return "accepted";
    };
    // A password starting with * reads as an alias; one starting with | as a block scalar's header.
    expect(refusal(secret("*Xy9k-prod-pw"))).toBe("s.yaml: document 2: not valid YAML: an alias (*name) names no anchor (&name) set before it at line 10, column 13");
    expect(refusal(secret("|Xy9k-prod-pw"))).toBe(
      "s.yaml: document 2: not valid YAML: unexpected characters (after a block scalar's | or >, a stray comma or bracket) at line 10, column 14",
    );
    expect(refusal(secret('"Xy9k\\qprod"'))).toBe("s.yaml: document 2: not valid YAML: a bad escape (\\) in a double-quoted string at line 10, column 18");
    expect(refusal("apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData:\n  <<: Xy9k-prod-pw\n")).toBe(
      "s.yaml: not valid YAML: a merge key (<<) whose value is not a mapping (or a list of them)",
    );
  });

  it("says a kustomization given with -f is planned with -k", () => {
    expect(() => parseSources([{ name: "examples/kustomization.yaml", text: "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [a.yaml]" }], "ns")).toThrow(
      "examples/kustomization.yaml: a Kustomization is kustomize's, not an object to apply: plan its directory with -k",
    );
  });

  it("refuses a label, annotation or Secret value that is not a string, as the API server does, rather than plan it as one", () => {
    const bad = (text: string) => () => parseSources([{ name: "f.yaml", text }], "ns");
    // Unquoted, `true` is a boolean: kubectl apply refuses it, so the Skill is not paused.
    expect(bad(`${skill("a")}\n---\n${skill("b").replace("{name: b}", "{name: b, annotations: {agentcompute.dev/paused: true}}")}`)).toThrow(
      'f.yaml: document 2: Skill "b": metadata.annotations["agentcompute.dev/paused"]: must be a string (quote the value)',
    );
    expect(bad(skill("a").replace("{name: a}", "{name: a, labels: {tier: 2}}"))).toThrow('f.yaml: Skill "a": metadata.labels["tier"]: must be a string (quote the value)');
    expect(bad(skill("a").replace("{name: a}", "{name: a, labels: [x]}"))).toThrow('f.yaml: Skill "a": metadata.labels: must be a mapping of strings');
    expect(bad("apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {port: 5432, tls: {on: x}}")).toThrow('f.yaml: Secret "db": stringData["port"]: must be a string (quote the value)');
    // A Secret's value is never repeated (a PIN YAML reads as a number).
    expect(bad("apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {pin: 84736251909}")).not.toThrow(/84736251909/);
    // A key without a value is an empty string, as the API server decodes it.
    expect(bad("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {empty: null}")).not.toThrow();
    // Another kind's data is its own business, and not read.
    expect(bad("apiVersion: example.com/v1\nkind: Thing\nmetadata: {name: t}\ndata: {n: 1}")).not.toThrow();
    const quoted = skill("a").replace("{name: a}", '{name: a, annotations: {agentcompute.dev/paused: "true"}}');
    expect(parseSources([{ name: "f.yaml", text: quoted }], "ns")[0]?.metadata.annotations).toEqual({ "agentcompute.dev/paused": "true" });
  });

  it("resolves YAML merge keys (<<: *anchor), as kubectl reads them", () => {
    const text = `apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: box, labels: &labels {app: web}}
spec:
  <<: [{tier: large, ttlSeconds: 600}, {tier: standard, keepAlive: true}]
  ttlSeconds: 900
  env:
    <<: *labels`;
    // The mapping's own keys win, then the first merged mapping's.
    expect(parseSources([{ name: "m.yaml", text }], "ns")[0]?.spec).toEqual({ tier: "large", keepAlive: true, ttlSeconds: 900, env: { app: "web" } });
  });

  it("reads YAML 1.1 as kubectl does (go-yaml v2): yes/no/on/off are booleans, 0755 is octal; dates and 1:30 stay strings", () => {
    const text = `apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: box}
spec:
  keepAlive: no
  secureRuntime: "no"
  recycle: On
  ttlSeconds: 0755
  metadata: {since: 2001-12-14, at: 1:30}
  <<: {tier: large}`;
    expect(parseSources([{ name: "m.yaml", text }], "ns")[0]?.spec).toEqual({
      tier: "large",
      keepAlive: false,
      secureRuntime: "no",
      recycle: true,
      ttlSeconds: 493,
      metadata: { since: "2001-12-14", at: "1:30" },
    });
    // An unquoted off is a boolean there too, which a map of strings refuses (as the API server would).
    expect(() => parseSources([{ name: "m.yaml", text: text.replace("at: 1:30", "at: 1:30, flag: off") }], "ns")).toThrow(
      'm.yaml: Sandbox "box": the API server would refuse it: spec.metadata.flag: must be string',
    );
  });

  it("refuses a spec the API server would refuse, naming each field and why; one of our kinds in another group; a name that is not one", () => {
    const sandbox = (spec: string, apiVersion = "agentcompute.dev/v1alpha1") => `apiVersion: ${apiVersion}\nkind: Sandbox\nmetadata: {name: box}\nspec: ${spec}`;
    const refusal = (text: string) => {
      try {
        parseSources([{ name: "m.yaml", text }], "ns");
      } catch (err) {
        expect(err).toBeInstanceOf(ManifestError);
        return (err as Error).message;
      }
      return "accepted";
    };
    expect(refusal(sandbox("{tier: standard, skills: foo}"))).toBe('m.yaml: Sandbox "box": the API server would refuse it: spec.skills: must be array');
    expect(refusal(sandbox('{tier: standard, ttlSeconds: "1h", env: {A: 1}}'))).toBe(
      'm.yaml: Sandbox "box": the API server would refuse it: spec.env.A: must be string; spec.ttlSeconds: must be integer',
    );
    expect(refusal(sandbox("{tierr: standard}"))).toBe('m.yaml: Sandbox "box": the API server would refuse it: spec.tierr: unknown field "tierr"; spec: must have required properties tier');
    expect(refusal(sandbox("{tier: standard, envFrom: [{secretRef: {}}]}"))).toBe(
      'm.yaml: Sandbox "box": the API server would refuse it: spec.envFrom[0].secretRef: must have required properties name',
    );
    // An enum's refusal says the value and the values it takes, as kubectl does; an index is [i], at any depth.
    expect(refusal(sandbox("{tier: standard, onDelete: Destroy}"))).toBe(
      'm.yaml: Sandbox "box": the API server would refuse it: spec.onDelete: Unsupported value: "Destroy": supported values: "Release", "Delete"',
    );
    expect(refusal(sandbox("{tier: standard, skills: [a, 3], envFrom: [{secretRef: {name: s, key: k}}]}"))).toBe(
      'm.yaml: Sandbox "box": the API server would refuse it: spec.envFrom[0].secretRef.key: unknown field "key"; spec.skills[1]: must be string',
    );
    // Empty fields (nulls) are dropped before the check, as the API server drops them.
    expect(refusal(sandbox("{tier: standard, env: null}"))).toBe("accepted");
    expect(refusal(sandbox("{tier: standard}", "agentcompute.io/v1alpha1"))).toBe('m.yaml: Sandbox "box": apiVersion "agentcompute.io/v1alpha1" serves no Sandbox: set apiVersion: agentcompute.dev/v1alpha1');
    expect(refusal(sandbox("{tier: standard}", "v1alpha1"))).toMatch(/apiVersion "v1alpha1" serves no Sandbox/);
    // Another product's kind of the same name is not ours, and not planned.
    expect(refusal(sandbox("{anything: 1}", "example.com/v1"))).toBe("accepted");
    expect(refusal("apiVersion: agentcompute.dev/v1alpha1\nkind: Skill\nmetadata: {generateName: s-}\nspec: {content: c}")).toMatch(/metadata\.name is missing \(metadata\.generateName cannot be used with kubectl apply/);
    expect(refusal("apiVersion: agentcompute.dev/v1alpha1\nkind: Skill\nmetadata: {name: 123}\nspec: {content: c}")).toMatch(/metadata\.name must be a string/);
    // In a List, the item is named; an empty List is no resource, and no error.
    const list = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: agentcompute.dev/v1alpha1, kind: Skill, metadata: {name: a}, spec: {content: c}}\n- {apiVersion: agentcompute.dev/v1alpha1, kind: Agnet, metadata: {name: b}}";
    expect(refusal(list)).toMatch(/^m\.yaml: item 2: Agnet "b": unknown kind/);
    expect(refusal("apiVersion: v1\nkind: List\nitems:")).toBe("accepted");
  });

  it("with -n given, refuses an object naming another namespace, as kubectl apply -n does; without, keeps it", () => {
    const text = [skill("a"), skill("b", "other")].join("\n---\n");
    expect(() => parseSources([{ name: "m.yaml", text }], "staging", { enforceNamespace: true })).toThrow(
      `m.yaml: document 2: Skill "b": the namespace from the provided object "other" does not match the namespace "staging". You must pass '--namespace=other' to perform this operation.`,
    );
    expect(() => parseSources([{ name: "m.yaml", text }], "staging", { enforceNamespace: true })).toThrow(ManifestError);
    expect(parseSources([{ name: "m.yaml", text: skill("b", "staging") }], "staging", { enforceNamespace: true })[0]?.metadata.namespace).toBe("staging");
    expect(parseSources([{ name: "m.yaml", text }], "staging").map((o) => o.metadata.namespace)).toEqual(["staging", "other"]);
    // Objects that are not namespaced are not held to it, as kubectl does not hold them.
    const cluster = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: r, namespace: other}\nrules: []";
    expect(() => parseSources([{ name: "c.yaml", text: cluster }], "staging", { enforceNamespace: true })).not.toThrow();
  });

  it("reads files, directories (sorted, .yaml/.yml/.json only; -R for sub-directories) and stdin", () => {
    const dir = mkdtempSync(join(tmpdir(), "plan-unit-"));
    writeFileSync(join(dir, "b.yaml"), skill("b"));
    writeFileSync(join(dir, "a.yml"), skill("a"));
    writeFileSync(join(dir, "notes.txt"), "not a manifest");
    mkdirSync(join(dir, "sub"));
    writeFileSync(join(dir, "sub", "c.json"), JSON.stringify({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "c" } }));
    expect(readSources([dir]).map((s) => s.name)).toEqual([join(dir, "a.yml"), join(dir, "b.yaml")]);
    expect(readSources([dir], { recursive: true }).map((s) => s.name)).toEqual([join(dir, "a.yml"), join(dir, "b.yaml"), join(dir, "sub", "c.json")]);
    expect(readSources(["-"], { stdin: () => skill("s") })).toEqual([{ name: "<stdin>", text: skill("s") }]);
    expect(() => readSources([join(dir, "missing.yaml")])).toThrow(`${join(dir, "missing.yaml")}: no such file or directory`);
  });
});

describe("label selectors", () => {
  it("matches as kubectl -l does", () => {
    const m = parseSelector("app=web,tier!=dev,env in (a, b),!legacy,team");
    expect(m({ app: "web", env: "a", team: "x" })).toBe(true);
    expect(m({ app: "web", env: "a", team: "x", legacy: "1" })).toBe(false);
    expect(m({ app: "web", env: "c", team: "x" })).toBe(false);
    expect(m({ app: "web", env: "a", team: "x", tier: "dev" })).toBe(false);
    expect(m(undefined)).toBe(false);
    expect(parseSelector("x notin (1)")({})).toBe(true);
    expect(() => parseSelector("a=b=c")).toThrow("--selector");
  });
});
