// `agent-operator exec` and `kubectl agentcompute exec`, run as a user runs them (child
// processes: the real CLI, and the real kubectl finding the plugin on PATH) against a Sandbox
// the operator made Ready on the real API server and the emulator: output streamed to the right
// stream, the command's exit code, Ctrl-C killing the command in the VM (exit 130), and one
// clear line with exit 1 (or 2 for usage) when there is nothing to run it in. No secret shown.
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, request as httpRequest } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { installPluginShim, runCLI, runProcess, type RunOptions } from "../support/cli.js";
import { testKubeconfig, waitFor } from "../support/kube.js";
import type { Emulator } from "../../../src/emulator/index.js";
import { API_KEY, apply, connectionManifest, useStack, waitForReady } from "../support/operator.js";

const t = useStack("exec");

/** `agent-operator exec --kubeconfig <test> ...args` */
const exec = (args: string[], opts: RunOptions = {}) => runCLI(["exec", "--kubeconfig", testKubeconfig(), ...args], opts);
const run = runProcess;

let pluginDir: string;

describe("agent-operator exec", () => {
  beforeAll(async () => {
    await apply(`apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: box}
spec: {tier: standard, ttlSeconds: 3600}`, t.namespace);
    await waitForReady(t.stack, "sandboxes", "box", { timeoutMs: 60_000 });
    // What `npm install -g` or a krew install leaves on PATH: an executable kubectl-agentcompute.
    pluginDir = mkdtempSync(join(tmpdir(), "exec-e2e-plugin-"));
    installPluginShim(pluginDir);
  }, 120_000);

  afterAll(() => {
    if (pluginDir !== undefined) rmSync(pluginDir, { recursive: true, force: true });
  });

  it("streams stdout and stderr to their own streams and exits with the command's exit code", async () => {
    const r = await exec(["-n", t.namespace, "box", "--", "echo to-stdout; echo to-stderr >&2; exit 3"]);
    expect(r).toEqual({ code: 3, stdout: "to-stdout\n", stderr: "to-stderr\n" });

    const argv = await exec(["-n", t.namespace, "sandbox/box", "--cwd", "/workspace", "-e", "WHO=the VM", "--", "sh", "-c", 'echo "$1 from $WHO"', "sh", "it's me"]);
    expect(argv).toEqual({ code: 0, stdout: "it's me from the VM\n", stderr: "" });
  });

  it("exits 0 when the VM's agentd leaves a zero exit code out of its answers (a Go server's omitempty)", async () => {
    t.stack.emulator.setOptions({ agentdOmitEmpty: true });
    try {
      expect(await exec(["-n", t.namespace, "box", "--", "echo fine"])).toEqual({ code: 0, stdout: "fine\n", stderr: "" });
      expect((await exec(["-n", t.namespace, "box", "--", "exit 4"])).code).toBe(4);
      // An agentd that has already forgotten the command when asked how it ended: the bare end is 0.
      t.stack.emulator.injectFault({ method: "GET", path: /\/v1\/commands\/[^/]+\/status$/, times: 1, action: { status: 404, body: { code: 404, message: "command not found" } } });
      expect(await exec(["-n", t.namespace, "box", "--", "echo forgotten"])).toEqual({ code: 0, stdout: "forgotten\n", stderr: "" });
    } finally {
      t.stack.emulator.setOptions({ agentdOmitEmpty: false });
    }
  });

  it("exits with the end event's code when the VM's stream names no command id (the published format names no events)", async () => {
    t.stack.emulator.setOptions({ agentdNoStartEvent: true });
    try {
      expect(await exec(["-n", t.namespace, "box", "--", "echo hi; echo err >&2; exit 3"])).toEqual({ code: 3, stdout: "hi\n", stderr: "err\n" });
      // Nor an exit code in the end (a Go server's omitempty for 0): 0, not "no start event".
      t.stack.emulator.setOptions({ agentdOmitEmpty: true });
      expect(await exec(["-n", t.namespace, "box", "--", "echo fine"])).toEqual({ code: 0, stdout: "fine\n", stderr: "" });
    } finally {
      t.stack.emulator.setOptions({ agentdNoStartEvent: false, agentdOmitEmpty: false });
    }
  });

  it("runs as a kubectl plugin: kubectl agentcompute exec, with KUBECONFIG", async () => {
    const env = { PATH: `${pluginDir}${delimiter}${process.env.PATH ?? ""}`, KUBECONFIG: testKubeconfig() };
    const r = await run(process.env.KUBECTL ?? "kubectl", ["agentcompute", "exec", "-n", t.namespace, "box", "--", "echo via kubectl; echo oops >&2; exit 4"], { env });
    expect(r).toEqual({ code: 4, stdout: "via kubectl\n", stderr: "oops\n" });

    const help = await run(process.env.KUBECTL ?? "kubectl", ["agentcompute", "--help"], { env });
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/exec .*\n.*plan .*\n.*logs .*SandboxRun/);
    // logs through the plugin: a run that does not exist is exit 1, named with its namespace.
    const logs = await run(process.env.KUBECTL ?? "kubectl", ["agentcompute", "logs", "-n", t.namespace, "no-such-run"], { env });
    expect(logs.code).toBe(1);
    expect(logs.stderr).toContain(`SandboxRun "no-such-run" not found in namespace "${t.namespace}"`);
  });

  it("kills the command in the VM on Ctrl-C and exits 130", async () => {
    const runtime = t.stack.emulator.runtimes.get(String((await t.stack.kube.get<{ status: { vmId: string } }>(`/apis/agentcompute.dev/v1alpha1/namespaces/${t.namespace}/sandboxes/box`)).status.vmId));
    expect(runtime).toBeDefined();
    let child: ChildProcess | undefined;
    let seen = "";
    const r = await exec(["-n", t.namespace, "box", "--", "echo started; sleep 300; echo never"], {
      onStart: (c) => (child = c),
      onStdout: (s) => {
        seen += s;
        if (seen.includes("started")) child?.kill("SIGINT");
      },
    });
    expect(r.code).toBe(130);
    expect(r.stdout).toBe("started\n");
    // The command's shell and its sleep are gone from the VM.
    const sleeping = [...(runtime?.commands.values() ?? [])].filter((c) => c.spec.command.includes("sleep 300"));
    expect(sleeping).toHaveLength(1);
    await waitFor(() => sleeping[0]?.running === false, { timeoutMs: 10_000, description: "the remote command to be killed" });
    expect(sleeping[0]?.status().exit_code).toBe(137);
  });

  it("kills the command in the VM and exits 141, quietly, when its output is closed (| head)", async () => {
    const runtime = t.stack.emulator.runtimes.get(String((await t.stack.kube.get<{ status: { vmId: string } }>(`/apis/agentcompute.dev/v1alpha1/namespaces/${t.namespace}/sandboxes/box`)).status.vmId));
    let child: ChildProcess | undefined;
    // The reader goes away after the first line, as `| head -1` does; the command writes again.
    const r = await exec(["-n", t.namespace, "box", "--", "echo first; sleep 1; echo second; sleep 300; echo never"], {
      onStart: (c) => (child = c),
      onStdout: () => child?.stdout?.destroy(),
    });
    expect(r).toEqual({ code: 141, stdout: "first\n", stderr: "" });
    const sleeping = [...(runtime?.commands.values() ?? [])].filter((c) => c.spec.command.includes("echo second"));
    expect(sleeping).toHaveLength(1);
    await waitFor(() => sleeping[0]?.running === false, { timeoutMs: 10_000, description: "the remote command to be killed" });
    expect(sleeping[0]?.status().exit_code).toBe(137);
  });

  it("runs on, output and all, when only its standard error is closed (2>&1 >log | grep -m1)", async () => {
    let child: ChildProcess | undefined;
    // The stderr reader goes away at once; the command writes to both after that.
    const r = await exec(["-n", t.namespace, "box", "--", "echo err1 >&2; sleep 1; echo err2 >&2; echo out; exit 7"], {
      onStart: (c) => {
        child = c;
        child.stderr?.destroy();
      },
    });
    expect(r.code).toBe(7);
    expect(r.stdout).toBe("out\n");
  });

  it("waits for the command, and exits with its code, when its output stream is cut mid-way", async () => {
    // A proxy in front of the emulator that cuts the first command stream after its first bytes,
    // and answers the first question of how the command is doing with a 503 of its own.
    let cuts = 0;
    let refused = 0;
    const proxy = createServer((req, res) => {
      const target = new URL(req.url ?? "/", t.stack.emulator.baseURL);
      if (/\/v1\/commands\/[^/]+\/status$/.test(target.pathname) && refused++ === 0) {
        res.writeHead(503, { "content-type": "application/json" }).end(JSON.stringify({ code: 503, message: "upstream unavailable" }));
        return;
      }
      const upstream = httpRequest(target, { method: req.method, headers: { ...req.headers, host: target.host } }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        if (target.pathname.endsWith("/v1/commands/run") && cuts++ === 0) {
          answer.once("data", (chunk: Buffer) => {
            res.write(chunk);
            setTimeout(() => res.socket?.destroy(), 100);
          });
          return;
        }
        answer.pipe(res);
      });
      req.pipe(upstream);
    });
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
    try {
      await apply(
        `${connectionManifest(t.namespace, { ...t.stack.emulator, baseURL: url, authURL: `${url}/auth` } as Emulator, { name: "cutting", secretName: "cutting-credentials" })}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: cut-box}
spec: {tier: standard, ttlSeconds: 3600, connectionRef: {name: cutting}}`,
        t.namespace,
      );
      await waitForReady(t.stack, "sandboxes", "cut-box", { timeoutMs: 60_000 });
      const r = await exec(["-n", t.namespace, "cut-box", "--", "echo start; sleep 2; echo end; exit 5"]);
      expect(cuts).toBeGreaterThan(0);
      expect(refused).toBeGreaterThan(1);
      expect(r.code).toBe(5);
      // (What was printed after the cut is not shown: the stream is gone. The exit code is asked for.)
      expect("start\n".startsWith(r.stdout) || r.stdout.startsWith("start\n")).toBe(true);
      expect(r.stderr).toMatch(/the output stream of command \S+ ended early; waiting for it to finish/);
    } finally {
      proxy.closeAllConnections();
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    }
  });

  it("says in one line what is missing, with exit 1; usage errors exit 2; never a secret", async () => {
    const missing = await exec(["-n", t.namespace, "nope", "--", "true"]);
    expect(missing.code).toBe(1);
    expect(missing.stdout).toBe("");
    expect(missing.stderr).toBe(`agent-operator exec: Sandbox "nope" in namespace "${t.namespace}" not found (kubectl get sandboxes -n ${t.namespace})\n`);

    await apply(`apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: elsewhere}
spec: {tier: standard, connectionRef: {name: absent}}`, t.namespace);
    await waitForReady(t.stack, "sandboxes", "elsewhere", { status: "False", timeoutMs: 60_000 });
    const notReady = await exec(["-n", t.namespace, "elsewhere", "--", "true"]);
    expect(notReady.code).toBe(1);
    expect(notReady.stderr).toMatch(new RegExp(`^agent-operator exec: Sandbox "elsewhere" in namespace "${t.namespace}" has no running VM: Ready=False \\(ConnectionNotFound: .*\\); wait for it: kubectl wait --for=condition=Ready sandbox/elsewhere -n ${t.namespace}\\n$`));

    const usage = await exec(["-n", t.namespace, "box"]);
    expect(usage.code).toBe(2);
    expect(usage.stderr.split("\n")[0]).toBe("agent-operator exec: give the command after --, e.g. box -- ls");

    for (const r of [missing, notReady, usage]) expect(r.stdout + r.stderr).not.toContain(API_KEY);
  });

  it("says so in one line when the service refuses the Connection's credentials", async () => {
    // The service's key is rotated: the one in the Secret no longer works (the operator, with a
    // token still valid, keeps the Connection Ready meanwhile).
    t.stack.emulator.setOptions({ apiKey: "rotated-api-key-9b8e7f" });
    try {
      const r = await exec(["-n", t.namespace, "box", "--", "echo never"]);
      expect(r.code).toBe(1);
      expect(r.stdout).toBe("");
      expect(r.stderr).toMatch(new RegExp(`^agent-operator exec: Connection "default" in namespace "${t.namespace}": token: credentials refused by the token service.*\\(HTTP 401\\); check the credentials in Secret "agentcompute-credentials"\\n$`));
      expect(r.stderr).not.toContain(API_KEY);
      expect(r.stderr).not.toContain("rotated-api-key-9b8e7f");
    } finally {
      t.stack.emulator.setOptions({ apiKey: API_KEY });
    }
  });
});
