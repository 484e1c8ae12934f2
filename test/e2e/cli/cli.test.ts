// The client commands as a user runs them (child processes: src/cli.ts, and the kubectl plugin
// through the real kubectl) against the real API server: what they print and how they exit when
// their output is closed (`| head`), when -n is empty or disagrees with a manifest, when the API
// server cannot be reached, and under the plugin's name. No operator runs: the objects the
// commands read (a SandboxRun that has ended, one with a step running, a Sandbox) are real
// objects of a test namespace, their status written through the status subresource.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { PlanResult } from "../../../src/plan/model.js";
import { installPluginShim, runCLI, runProcess } from "../support/cli.js";
import { kubectlOk, testKubeconfig, useTestNamespace } from "../support/kube.js";
import { apply, installCRDs } from "../support/operator.js";

const ns = useTestNamespace("cli");

/** `agent-operator <args>`, without $KUBECONFIG; `closeAfterFirstChunk`: stdout closed once its first bytes arrived, as `| head -2` closes it. */
const run = (args: string[], opts: { closeAfterFirstChunk?: boolean; onStderr?: (text: string) => void } = {}) =>
  runCLI(args, { noKubeconfigEnv: true, onStderr: opts.onStderr, ...(opts.closeAfterFirstChunk && { onStdout: (_s, child) => child.stdout?.destroy() }) });
/** Another program (kubectl), without $KUBECONFIG unless `env` sets it. */
const spawnRun = (cmd: string, args: string[], opts: { env?: NodeJS.ProcessEnv } = {}) => runProcess(cmd, args, { noKubeconfigEnv: true, ...opts });

interface KubeconfigDoc {
  "current-context": string;
  contexts: Array<{ name: string; context: { cluster: string; user: string; namespace?: string } }>;
  clusters: Array<{ name: string; cluster: { server: string } }>;
  users: Array<{ name: string; user: Record<string, unknown> }>;
}

let dir: string;
let pluginDir: string;
/** The test API server's kubeconfig, one context (the current one), its namespace the test namespace. */
let kubeconfig: string;
let context: string;
let doc: KubeconfigDoc;

const skill = (name: string, namespace?: string) =>
  `apiVersion: agentcompute.dev/v1alpha1\nkind: Skill\nmetadata: {name: ${name}${namespace === undefined ? "" : `, namespace: ${namespace}`}}\nspec: {content: "${"x".repeat(100)}"}`;

const file = (name: string, text: string) => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};

/** Writes `status` through the status subresource (no operator runs to write it). */
async function setStatus(resource: string, status: unknown): Promise<void> {
  await kubectlOk(["patch", resource, "--subresource=status", "--type=merge", "-p", JSON.stringify({ status })], { namespace: ns.name });
}

/** A loopback port nothing listens on: bound, then closed. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

beforeAll(async () => {
  await installCRDs();
  dir = mkdtempSync(join(tmpdir(), "cli-e2e-"));
  // The test API server's address and credentials (inlined), its current context only; the
  // context's namespace becomes the test namespace, for -n "" to resolve to.
  doc = JSON.parse(await kubectlOk(["config", "view", "--raw", "--minify", "--flatten", "-o", "json"])) as KubeconfigDoc;
  context = doc["current-context"];
  doc.contexts[0]!.context.namespace = ns.name;
  kubeconfig = file("kubeconfig", JSON.stringify(doc));

  await apply(
    `apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: box}
spec: {tier: standard, ttlSeconds: 3600}
---
apiVersion: agentcompute.dev/v1alpha1
kind: SandboxRun
metadata: {name: big}
spec: {sandboxRef: {name: box}, steps: [{name: dump, command: "cat big"}]}
---
apiVersion: agentcompute.dev/v1alpha1
kind: SandboxRun
metadata: {name: busy}
spec: {sandboxRef: {name: box}, steps: [{name: build, command: make}]}`,
    ns.name,
  );
  // Some 900 KB of output (a ConfigMap holds at most 1 MiB): more than a pipe holds. Created, not
  // applied: kubectl apply would copy it into an annotation, which holds far less.
  await kubectlOk(["create", "-f", "-"], {
    namespace: ns.name,
    input: JSON.stringify({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "big-output" }, data: { dump: "line of output\n".repeat(60_000) } }),
  });
  await setStatus("sandboxrun/big", {
    phase: "Succeeded",
    attempts: 1,
    outputConfigMap: "big-output",
    steps: [{ name: "dump", startedAt: "2026-11-25T00:00:00Z", finishedAt: "2026-11-25T00:00:01Z", exitCode: 0 }],
  });
  await setStatus("sandboxrun/busy", {
    phase: "Running",
    attempts: 1,
    steps: [{ name: "build", commandId: "c1", startedAt: "2026-11-25T00:00:00Z" }],
    conditions: [{ type: "Ready", status: "False", reason: "Running", message: 'step 1/1 "build" is running', lastTransitionTime: "2026-11-25T00:00:00Z" }],
  });

  // What `npm install -g` or a krew install leaves on PATH: an executable kubectl-agentcompute.
  pluginDir = mkdtempSync(join(tmpdir(), "cli-e2e-plugin-"));
  installPluginShim(pluginDir);
}, 120_000);

afterAll(() => {
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  if (pluginDir !== undefined) rmSync(pluginDir, { recursive: true, force: true });
});

describe("a closed output (| head)", () => {
  it("ends plan quietly with 141, as a program killed by SIGPIPE", async () => {
    // Some 400 KB of plan: more than a pipe holds, so plan is still writing when it is closed.
    const many = file("many.yaml", Array.from({ length: 1500 }, (_, i) => skill(`s-${i}`)).join("\n---\n"));
    const r = await run(["plan", "--kubeconfig", testKubeconfig(), "-n", ns.name, "-f", many], { closeAfterFirstChunk: true });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(141);
    expect(r.stdout).toMatch(/^agent-operator would perform the following actions/);
  });

  it("ends logs quietly with 141", async () => {
    const r = await run(["logs", "--kubeconfig", testKubeconfig(), "-n", ns.name, "big"], { closeAfterFirstChunk: true });
    expect(r.stderr).toBe('--- step "dump" (attempt 1, exit code 0) ---\n');
    expect(r.code).toBe(141);
  });
});

describe("logs without -f", () => {
  it("says a running step is still running, its output not printed yet, and that -f follows it", async () => {
    const r = await run(["logs", "--kubeconfig", testKubeconfig(), "-n", ns.name, "busy"]);
    expect(r).toEqual({
      code: 0,
      stdout: "",
      stderr: '--- step "build" (attempt 1) is still running; its output is not printed yet (-f follows the run and prints it once the step has ended) ---\n',
    });
  });
});

describe("exec into a Sandbox that is not Ready", () => {
  it("goes to its VM while the VM runs (as kubectl exec needs a running container, not a Ready one), saying why it is not Ready; refuses an expired one, and one on its way out", async () => {
    await apply(
      `apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: kept}
spec: {tier: standard}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: ended}
spec: {tier: standard, keepAlive: false}`,
      ns.name,
    );
    const notReady = (reason: string, message: string) => [{ type: "Ready", status: "False", reason, message, lastTransitionTime: "2026-11-25T00:00:00Z" }];
    await setStatus("sandbox/kept", { vmId: "vm-kept", state: "allocated", conditions: notReady("ServiceUnavailable", "the VM list could not be read") });
    await setStatus("sandbox/ended", { vmId: "vm-ended", state: "expired", conditions: notReady("Expired", "VM vm-ended expired; spec.keepAlive is false, so it is not replaced") });
    const kept = await run(["exec", "--kubeconfig", testKubeconfig(), "-n", ns.name, "kept", "--", "true"]);
    const [said, next] = kept.stderr.split("\n");
    expect(said).toBe(
      `agent-operator exec: Sandbox "kept" in namespace "${ns.name}" is not Ready: Ready=False (ServiceUnavailable: the VM list could not be read); running in its VM vm-kept all the same`,
    );
    // On to the VM: here, no Connection (no operator, no service) stops it.
    expect(next).toMatch(/Connection "default"/);
    expect(kept.code).toBe(1);
    const ended = await run(["exec", "--kubeconfig", testKubeconfig(), "-n", ns.name, "ended", "--", "true"]);
    expect(ended).toMatchObject({ code: 1, stderr: expect.stringMatching(/^agent-operator exec: Sandbox "ended" in namespace "[^"]+" has no running VM: Ready=False \(Expired: /) });
    // A VM on its way out: being replaced, or no longer the one the adoption annotation names.
    await setStatus("sandbox/ended", { vmId: "vm-old", state: "allocated", conditions: notReady("Replacing", "VM vm-old was allocated for another spec, and is replaced") });
    const replacing = await run(["exec", "--kubeconfig", testKubeconfig(), "-n", ns.name, "ended", "--", "true"]);
    expect(replacing).toMatchObject({ code: 1, stderr: expect.stringMatching(/has no running VM it keeps: Ready=False \(Replacing: /) });
    await kubectlOk(["annotate", "sandbox/kept", "agentcompute.dev/external-id=vm-other"], { namespace: ns.name });
    const adopting = await run(["exec", "--kubeconfig", testKubeconfig(), "-n", ns.name, "kept", "--", "true"]);
    expect(adopting).toMatchObject({ code: 1, stderr: expect.stringMatching(/^agent-operator exec: Sandbox "kept" in namespace "[^"]+" has no running VM it keeps: /) });
  });
});

describe("logs -f of a run deleted while followed", () => {
  it("says it was deleted (with ttlSecondsAfterFinished 0, that this deletes it as it ends, and the fix), not that it was never there; exit 1", async () => {
    await apply(
      `apiVersion: agentcompute.dev/v1alpha1
kind: SandboxRun
metadata: {name: brief}
spec: {sandboxRef: {name: box}, ttlSecondsAfterFinished: 0, steps: [{name: check, command: "true"}]}`,
      ns.name,
    );
    await setStatus("sandboxrun/brief", {
      phase: "Running",
      attempts: 1,
      steps: [{ name: "check", commandId: "c2", startedAt: "2026-11-25T00:00:00Z" }],
      conditions: [{ type: "Ready", status: "False", reason: "Running", message: 'step 1/1 "check" is running', lastTransitionTime: "2026-11-25T00:00:00Z" }],
    });
    let deleting: Promise<string> | undefined;
    const r = await run(["logs", "--kubeconfig", testKubeconfig(), "-n", ns.name, "-f", "brief"], {
      // Followed (it said the step runs): then deleted, as its TTL of 0 deletes it as it ends.
      onStderr: (text) => {
        if (deleting === undefined && text.includes('step "check"')) deleting = kubectlOk(["delete", "sandboxrun", "brief", "--wait=false"], { namespace: ns.name });
      },
    });
    await deleting;
    expect(r.code).toBe(1);
    expect(r.stderr.split("\n").at(-2)).toBe(
      "sandboxrun/brief was deleted before its end could be read: its spec.ttlSecondsAfterFinished is 0, which deletes it, and its output, as it ends; give it a few seconds (e.g. 60) to be followed to its end",
    );
  });
});

describe('-n "" (an unset $NS)', () => {
  it("is the context's namespace, as kubectl takes it, for plan, exec and logs", async () => {
    const r = await run(["plan", "--kubeconfig", kubeconfig, "-n", "", "-f", file("one.yaml", skill("one")), "-o", "json"]);
    expect(r.stderr).toBe("");
    expect((JSON.parse(r.stdout) as PlanResult).resources.map((x) => `${x.namespace}/${x.name}`)).toEqual([`${ns.name}/one`]);
    // The Sandbox and the SandboxRun of the context's namespace are found (and nothing elsewhere has their names).
    const exec = await run(["exec", "--kubeconfig", kubeconfig, "-n", "", "box", "--", "ls"]);
    expect(exec).toMatchObject({
      code: 1,
      stderr: `agent-operator exec: Sandbox "box" in namespace "${ns.name}" has no running VM: no Ready condition yet; wait for it: kubectl wait --for=condition=Ready sandbox/box -n ${ns.name}\n`,
    });
    const logs = await run(["logs", "--kubeconfig", kubeconfig, "-n", "", "busy"]);
    expect(logs).toEqual({
      code: 0,
      stdout: "",
      stderr: '--- step "build" (attempt 1) is still running; its output is not printed yet (-f follows the run and prints it once the step has ended) ---\n',
    });
    const missing = await run(["logs", "--kubeconfig", kubeconfig, "-n", "", "nothing"]);
    expect(missing.stderr).toBe(`agent-operator logs: SandboxRun "nothing" not found in namespace "${ns.name}" (kubectl get sandboxruns -n ${ns.name})\n`);
  });
});

describe("plan -n with a manifest of another namespace", () => {
  it("is refused as kubectl apply -n refuses it, naming the file and document (exit 1)", async () => {
    const path = file("other.yaml", `${skill("mine")}\n---\n${skill("theirs", "production")}`);
    const r = await run(["plan", "--kubeconfig", kubeconfig, "-n", ns.name, "-f", path]);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr).toBe(
      `agent-operator plan: bad manifest: ${path}: document 2: Skill "theirs": the namespace from the provided object "production" does not match the namespace "${ns.name}". You must pass '--namespace=production' to perform this operation.\n`,
    );
    // So does kubectl apply -n itself (nothing is created).
    const kubectlSays = await spawnRun(process.env.KUBECTL ?? "kubectl", ["apply", "--dry-run=server", "--kubeconfig", kubeconfig, "-n", ns.name, "-f", path]);
    expect(kubectlSays.code).not.toBe(0);
    expect(kubectlSays.stderr).toContain(`the namespace from the provided object "production" does not match the namespace "${ns.name}". You must pass '--namespace=production' to perform this operation.`);
    // Without -n, each object keeps its own namespace.
    const ok = await run(["plan", "--kubeconfig", kubeconfig, "-f", path, "-o", "json"]);
    expect((JSON.parse(ok.stdout) as PlanResult).resources.map((x) => x.namespace)).toEqual([ns.name, "production"]);
  });
});

describe("an API server that cannot be reached", () => {
  it("is named, with its URL, the kubeconfig and the context, by plan, logs and exec; no credentials shown", async () => {
    // The test API server's kubeconfig (its credentials, and a token besides), its server a
    // loopback port nothing listens on.
    const port = await closedPort();
    const token = "kubeconfig-token-never-shown-5Zq";
    const down: KubeconfigDoc = JSON.parse(JSON.stringify(doc)) as KubeconfigDoc;
    down.clusters[0]!.cluster.server = `https://127.0.0.1:${port}`;
    down.users[0]!.user.token = token;
    const credentials = Object.values(down.users[0]!.user).filter((v): v is string => typeof v === "string" && v.length >= 16);
    const unreachable = file("kubeconfig-down", JSON.stringify(down));

    const said = `cannot reach the API server https://127.0.0.1:${port} (kubeconfig ${unreachable}, context "${context}"): connect ECONNREFUSED 127.0.0.1:${port}`;
    const plan = await run(["plan", "--kubeconfig", unreachable, "-f", file("reach.yaml", skill("one"))]);
    expect(plan).toMatchObject({ code: 1, stdout: "", stderr: `agent-operator plan: ${said}\n` });
    const logs = await run(["logs", "--kubeconfig", unreachable, "some-run"]);
    expect(logs).toMatchObject({ code: 1, stderr: `agent-operator logs: ${said}\n` });
    const exec = await run(["exec", "--kubeconfig", unreachable, "box", "--", "ls"]);
    expect(exec).toMatchObject({ code: 1, stderr: `agent-operator exec: cannot read Sandbox "box" in namespace "${ns.name}": ${said}\n` });
    expect(credentials).toContain(token);
    for (const r of [plan, logs, exec]) for (const secret of credentials) expect(r.stderr).not.toContain(secret);
  });
});

describe("a wrong command line", () => {
  it("is answered in two lines, the fault naming the flag and where the flags are listed, not the whole help", async () => {
    const cases: Array<[string[], number, RegExp]> = [
      [["run", "--concurrency", "abc"], 2, /^agent-operator run: --concurrency: "abc" is not a whole number/],
      [["plan", "-f", "x.yaml", "-o", "yml"], 1, /^agent-operator plan: --output: "yml" is not one of text, json, markdown$/],
      [["exec", "box"], 2, /^agent-operator exec: give the command after --/],
      [["logs", "--bogus", "r"], 2, /^agent-operator logs: unknown flag: --bogus$/],
      [["emulator", "--port", "x"], 2, /^agent-operator emulator: --port/],
    ];
    for (const [args, code, fault] of cases) {
      const r = await run(args);
      expect(r.code, args.join(" ")).toBe(code);
      const [first, hint, ...rest] = r.stderr.split("\n");
      expect(first, args.join(" ")).toMatch(fault);
      expect(hint).toBe(`Run 'agent-operator ${args[0] ?? ""} --help' for the flags.`);
      expect(rest).toEqual([""]);
      expect(r.stdout).toBe("");
    }
  });
});

describe("the kubectl plugin", () => {
  it("names plan as kubectl agentcompute plan in its errors and usage", async () => {
    const kubectlBin = process.env.KUBECTL ?? "kubectl";
    const env = { PATH: `${pluginDir}${delimiter}${process.env.PATH ?? ""}`, KUBECONFIG: kubeconfig };
    const r = await spawnRun(kubectlBin, ["agentcompute", "plan", "--bogus"], { env });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^kubectl agentcompute plan: unknown flag: --bogus\nRun 'kubectl agentcompute plan --help' for the flags\.\n$/);
    expect(r.stderr).not.toContain("agent-operator plan");
    const help = await spawnRun(kubectlBin, ["agentcompute", "plan", "--help"], { env });
    expect(help.stdout).toMatch(/^usage: kubectl agentcompute plan /);
    const bad = await spawnRun(kubectlBin, ["agentcompute", "plan", "-f", join(dir, "missing.yaml")], { env });
    expect(bad.stderr).toBe(`kubectl agentcompute plan: bad manifest: ${join(dir, "missing.yaml")}: no such file or directory\n`);
    // And a plan through the plugin, against the real API server (KUBECONFIG, its context's namespace).
    const ok = await spawnRun(kubectlBin, ["agentcompute", "plan", "-f", file("plugin.yaml", skill("via-plugin")), "-o", "json"], { env });
    expect(ok.stderr).toBe("");
    expect((JSON.parse(ok.stdout) as PlanResult).resources.map((x) => `${x.namespace}/${x.name}`)).toEqual([`${ns.name}/via-plugin`]);
  });
});
