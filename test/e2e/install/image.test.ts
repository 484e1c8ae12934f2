// The container image, proven without a Docker engine: the Dockerfile's settings are read and
// checked, and its runtime stage is replayed in a temporary folder (production dependencies
// installed by the deps stage's own command, dist/ built as `npm run build` builds it, crds/,
// package.json), made read-only, and started as UID 65532 exactly as the image's
// ENTRYPOINT + CMD + the Deployment's args would start it.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startEmulator, type Emulator } from "../../../src/emulator/index.js";
import { KubeClient } from "../../../src/runtime/kube-client.js";
import { loadKubeConfig, uniqueName, useTestNamespace, waitFor } from "../support/kube.js";
import { API_KEY, apply, connectionManifest, waitForReady } from "../support/operator.js";
import { all, copies, execForm, finalStage, inContext, last, pairs, parseDockerfile, runCommand, stage, type Dockerfile } from "./dockerfile.js";
import {
  MANIFESTS_DIR,
  OPERATOR_NAMESPACE,
  REPO_ROOT,
  applyKustomization,
  findObject,
  getLease,
  kustomize,
  serviceAccountCredentials,
  type KubeObject,
} from "./support.js";

const pkg = JSON.parse(readFileSync(join(REPO_ROOT, "package.json"), "utf8")) as {
  version: string;
  license: string;
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
  optionalDependencies?: Record<string, string>;
};
const lock = JSON.parse(readFileSync(join(REPO_ROOT, "package-lock.json"), "utf8")) as {
  packages: Record<string, { version?: string; dev?: boolean }>;
};
const df: Dockerfile = parseDockerfile(readFileSync(join(REPO_ROOT, "Dockerfile"), "utf8"));
const dockerignore = readFileSync(join(REPO_ROOT, ".dockerignore"), "utf8");
const runtime = finalStage(df);
const IMAGE_UID = 65532;

describe("Dockerfile", () => {
  it("builds on the Node version the project pins (its `node` devDependency)", () => {
    const pinned = lock.packages["node_modules/node"]?.version;
    expect(pinned).toMatch(/^24\./);
    expect(df.globalArgs.NODE_VERSION).toBe(pinned);
    for (const s of df.stages) expect(s.from).toBe(`node:${pinned}-bookworm-slim`);
  });

  it("builds with every dependency and ships production dependencies only", () => {
    const build = all(stage(df, "build"), "RUN").map(runCommand);
    expect(build).toContain("npm ci --ignore-scripts --no-audit --no-fund");
    expect(build).toContain("npm run build");
    expect(all(stage(df, "deps"), "RUN").map(runCommand)).toEqual(["npm ci --omit=dev --omit=optional --ignore-scripts --no-audit --no-fund"]);
    // The runtime stage installs nothing itself: it copies the two stages' results.
    expect(all(runtime, "RUN").map(runCommand).join("\n")).not.toMatch(/npm (ci|install)/);
    expect(copies(runtime)).toEqual([
      { from: "deps", sources: ["/app/node_modules"], dest: "./node_modules" },
      { from: "build", sources: ["/app/dist"], dest: "./dist" },
      { from: undefined, sources: ["package.json"], dest: "./" },
      { from: undefined, sources: ["crds"], dest: "./crds" },
    ]);
  });

  it("runs `node dist/cli.js run` as a numeric non-root user, in production mode", () => {
    expect(execForm(last(runtime, "ENTRYPOINT"))).toEqual(["node", "dist/cli.js"]);
    expect(execForm(last(runtime, "CMD"))).toEqual(["run"]);
    expect(last(runtime, "USER")?.args).toBe(`${IMAGE_UID}:${IMAGE_UID}`);
    expect(last(runtime, "WORKDIR")?.args).toBe("/app");
    expect(pairs(all(runtime, "ENV")).NODE_ENV).toBe("production");
    expect(last(runtime, "STOPSIGNAL")?.args).toBe("SIGTERM");
  });

  it("carries the OCI labels, with this version and license", () => {
    const labels = pairs(all(runtime, "LABEL"));
    const args = pairs(all(runtime, "ARG"));
    for (const key of ["title", "description", "version", "revision", "created", "source", "licenses"]) {
      expect(labels[`org.opencontainers.image.${key}`], key).toBeTruthy();
    }
    expect(labels["org.opencontainers.image.version"]).toBe("${VERSION}");
    expect(args.VERSION).toBe(pkg.version);
    expect(labels["org.opencontainers.image.licenses"]).toBe(pkg.license);
  });

  it("sends only what the stages copy to the build context (.dockerignore)", () => {
    const fromContext = df.stages.flatMap((s) => copies(s).filter((c) => c.from === undefined).flatMap((c) => c.sources));
    expect(fromContext.length).toBeGreaterThan(0);
    for (const source of fromContext) expect(inContext(dockerignore, source), source).toBe(true);
    for (const other of ["node_modules", "dist", ".cache", ".git", "test", "tools", "docs", "manifests", ".env"]) {
      expect(inContext(dockerignore, other), other).toBe(false);
    }
  });
});

// ------------------------------------------------------------------------------------------
// The runtime stage, replayed

/** Node 24 to run the image's `node` with: the test runner's own if it is 24, else the pinned one. */
function node24(): string {
  if (process.versions.node.split(".")[0] === "24") return process.execPath;
  const pinned = join(REPO_ROOT, "node_modules", "node", "bin", "node");
  if (!existsSync(pinned)) throw new Error("no Node 24 found: run `npm ci`");
  return pinned;
}

/** As the image would run it: its user (when we may switch to it), its env, its WORKDIR. */
function imageSpawnOptions(appDir: string, extraEnv: Record<string, string> = {}) {
  const asImageUser = process.getuid?.() === 0;
  return {
    cwd: appDir,
    // Docker gives a UID without a passwd entry HOME=/; nothing else from our environment.
    env: { PATH: [dirname(node24()), "/usr/bin", "/bin"].join(delimiter), HOME: "/", NODE_ENV: "production", ...extraEnv },
    ...(asImageUser ? { uid: IMAGE_UID, gid: IMAGE_UID } : {}),
  };
}

function runImage(appDir: string, args: string[]): { code: number | null; stdout: string; stderr: string } {
  const [cmd, ...rest] = [...execForm(last(runtime, "ENTRYPOINT")), ...args];
  const res = spawnSync(cmd ?? "node", rest, { ...imageSpawnOptions(appDir), encoding: "utf8", timeout: 60_000 });
  return { code: res.status, stdout: res.stdout, stderr: res.stderr };
}

function sh(command: string, cwd: string): void {
  const res = spawnSync("sh", ["-c", command], { cwd, encoding: "utf8", timeout: 300_000 });
  if (res.status !== 0) throw new Error(`${command} (in ${cwd}) exited ${res.status}: ${res.stdout}${res.stderr}`);
}

/** Makes a tree read-only for everyone but root: the image's files belong to root. */
function readOnly(path: string): void {
  const st = statSync(path);
  if (st.isSymbolicLink()) return;
  if (st.isDirectory()) for (const e of readdirSync(path)) readOnly(join(path, e));
  chmodSync(path, st.mode & 0o555);
}

describe("the runtime stage, replayed in a read-only folder", () => {
  let root: string;
  let app: string;

  beforeAll(() => {
    root = mkdtempSync(join(tmpdir(), "agent-operator-image-"));
    chmodSync(root, 0o755);
    app = join(root, "app");
    mkdirSync(app);
    // deps stage: the package files, then its own `npm ci` line (plus --prefer-offline: use
    // the local npm cache where it can).
    const deps = join(root, "deps");
    cpSync(join(REPO_ROOT, "package.json"), join(deps, "package.json"));
    cpSync(join(REPO_ROOT, "package-lock.json"), join(deps, "package-lock.json"));
    const install = all(stage(df, "deps"), "RUN").map(runCommand);
    for (const command of install) sh(`${command} --prefer-offline --loglevel=error`, deps);
    // build stage: `npm run build` is tsc -p tsconfig.build.json; same compiler, other outDir.
    sh(`"${node24()}" "${join(REPO_ROOT, "node_modules", "typescript", "bin", "tsc")}" -p tsconfig.build.json --outDir "${join(root, "dist")}"`, REPO_ROOT);
    // runtime stage: its COPY lines, from the stages above or the build context.
    const stageDirs: Record<string, string> = { deps, build: root };
    for (const c of copies(runtime)) {
      for (const source of c.sources) {
        const from = c.from === undefined ? join(REPO_ROOT, source) : join(stageDirs[c.from] ?? "", source.replace(/^\/app\//, ""));
        const dest = c.dest.endsWith("/") ? join(app, c.dest, source.split("/").at(-1) ?? "") : join(app, c.dest);
        cpSync(from, dest, { recursive: true });
      }
    }
    readOnly(app);
  }, 600_000);

  afterAll(() => {
    if (root) {
      chmodSync(root, 0o755);
      rmSync(root, { recursive: true, force: true });
    }
  });

  it("holds the production dependencies and none of the development ones (not even `node`)", () => {
    const modules = join(app, "node_modules");
    for (const dep of Object.keys(pkg.dependencies)) expect(existsSync(join(modules, dep)), dep).toBe(true);
    // Development-only packages (the lockfile's "dev": true), e.g. typescript, vitest, node;
    // @types/node stays: a production dependency depends on it.
    const devOnly = Object.entries(lock.packages).filter(([path, p]) => p.dev === true && /^node_modules\/(@[^/]+\/)?[^/]+$/.test(path));
    expect(devOnly.map(([path]) => path)).toEqual(expect.arrayContaining(["node_modules/node", "node_modules/typescript", "node_modules/vitest"]));
    for (const [path] of devOnly) expect(existsSync(join(app, path)), path).toBe(false);
    expect(existsSync(join(modules, ".bin", "node"))).toBe(false);
    // Nor the optional one, which only a legacy auth-provider kubeconfig needs (~80 MB).
    expect(Object.keys(pkg.optionalDependencies ?? {})).toEqual(["@kubernetes/client-node"]);
    expect(existsSync(join(modules, "@kubernetes", "client-node"))).toBe(false);
    expect(readdirSync(app).sort()).toEqual(["crds", "dist", "node_modules", "package.json"]);
  });

  it("answers --version and `run --help` through its ENTRYPOINT", () => {
    const version = runImage(app, ["--version"]);
    expect(version.stderr).toBe("");
    expect(version.code).toBe(0);
    expect(version.stdout.trim()).toBe(pkg.version);
    const help = runImage(app, [...execForm(last(runtime, "CMD")), "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("usage: agent-operator run [flags]");
    expect(help.stdout).toContain("--leader-elect");
  });

  describe("started as the Deployment starts it", () => {
    const ns = useTestNamespace("install-image");
    let emulator: Emulator;
    let child: ChildProcess | undefined;
    let exited: Promise<number | null>;
    const lines: string[] = [];
    let stderr = "";
    const leaseName = uniqueName("agent-operator-image");
    const admin = new KubeClient({ kubeConfig: loadKubeConfig() });

    beforeAll(async () => {
      await applyKustomization();
      emulator = await startEmulator({ apiKey: API_KEY, strictBodies: true });
    });

    afterAll(async () => {
      if (child && child.exitCode === null) child.kill("SIGKILL");
      await emulator?.close();
      await admin.close();
    });

    it("serves its probes and metrics, leads, and reconciles, as UID 65532 with the ServiceAccount's token", async () => {
      const objects: KubeObject[] = await kustomize(MANIFESTS_DIR);
      const deployment = findObject(objects, "Deployment", "agent-operator", OPERATOR_NAMESPACE) as KubeObject & {
        spec: { template: { spec: { containers: Array<{ args: string[]; env?: Array<{ name: string; value?: string }> }> } } };
      };
      const container = deployment.spec.template.spec.containers[0];
      if (!container) throw new Error("the Deployment has no container");
      // The Deployment's args as the kubelet expands them, with what a shared test machine
      // needs instead: free ports, this suite's namespace only, a Lease of its own, and the
      // ServiceAccount's token in a kubeconfig (there is no pod to mount it into).
      const args = container.args
        .map((a) => a.replace("$(POD_NAMESPACE)", OPERATOR_NAMESPACE))
        .filter((a) => !/^--(metrics-bind-address|health-probe-bind-address)=/.test(a));
      const credentials = await serviceAccountCredentials({ dir: root });
      args.push(
        "--metrics-bind-address=127.0.0.1:0",
        "--health-probe-bind-address=127.0.0.1:0",
        `--namespace=${ns.name}`,
        `--leader-election-id=${leaseName}`,
        `--kubeconfig=${credentials.path}`,
      );
      const env = Object.fromEntries((container.env ?? []).filter((e) => e.value !== undefined).map((e) => [e.name, e.value as string]));
      const [cmd, ...rest] = execForm(last(runtime, "ENTRYPOINT"));
      const proc = spawn(cmd ?? "node", [...rest, ...args], { ...imageSpawnOptions(app, env), stdio: ["ignore", "pipe", "pipe"] });
      child = proc;
      exited = new Promise((resolve) => proc.on("exit", (code) => resolve(code)));
      let buffered = "";
      proc.stdout?.on("data", (b: Buffer) => {
        buffered += b.toString("utf8");
        const parts = buffered.split("\n");
        buffered = parts.pop() ?? "";
        lines.push(...parts.filter((l) => l !== ""));
      });
      proc.stderr?.on("data", (b: Buffer) => (stderr += b.toString("utf8")));

      // Polls `probe` while the process runs; its exit ends the wait at once, with its output.
      const whileRunning = async <T>(probe: () => Promise<T | undefined> | T | undefined, description: string, timeoutMs = 60_000): Promise<T> => {
        const result = await waitFor(
          async () => (proc.exitCode !== null || proc.signalCode !== null ? { exited: true as const } : ((await probe()) ?? undefined)),
          { timeoutMs, description },
        );
        if (typeof result === "object" && result !== null && "exited" in result) {
          throw new Error(`the operator exited (${proc.exitCode ?? proc.signalCode}) while waiting for ${description}:\n${stderr}${lines.slice(-20).join("\n")}`);
        }
        return result as T;
      };
      const started = await whileRunning(() => {
        const line = lines.find((l) => l.includes('"msg":"operator started"'));
        return line ? (JSON.parse(line) as { metrics: string; health: string }) : undefined;
      }, "the log line 'operator started'");
      const get = async (address: string, path: string) => {
        const res = await fetch(`http://${address}${path}`);
        return { status: res.status, body: await res.text() };
      };
      expect(await get(started.health, "/healthz")).toMatchObject({ status: 200 });
      await whileRunning(async () => (await get(started.health, "/readyz")).status === 200 || undefined, "/readyz 200");
      await whileRunning(
        async () => (await get(started.metrics, "/metrics")).body.includes(`leader_election_master_status{name="${leaseName}"} 1`) || undefined,
        "leadership (leader_election_master_status 1)",
        40_000,
      );
      expect((await getLease(leaseName)).spec?.holderIdentity).toBeTruthy();

      await apply(connectionManifest(ns.name, emulator), ns.name);
      await waitForReady({ kube: admin, namespace: ns.name }, "connections", "default");
      expect(proc.exitCode).toBeNull();
      const metrics = (await get(started.metrics, "/metrics")).body;
      expect(metrics).toMatch(/controller_runtime_reconcile_total\{controller="connection",result="(success|requeue_after)"\} [1-9]/);
      expect(metrics).toContain("agentcompute_service_token_requests_total");
    });

    it("exits 0 on SIGTERM, after releasing the Lease", async () => {
      if (!child) throw new Error("the operator was not started");
      if (child.exitCode !== null) throw new Error(`the operator had already exited (${child.exitCode}): ${stderr}`);
      child.kill("SIGTERM");
      const code = await exited;
      expect(code, `${stderr}\n${lines.slice(-20).join("\n")}`).toBe(0);
      expect(lines.some((l) => l.includes('"msg":"operator stopped"'))).toBe(true);
      expect((await getLease(leaseName)).spec?.holderIdentity ?? "").toBe("");
      // Nothing on stderr: no warning about a file it could not write, no stack trace.
      expect(stderr).toBe("");
      expect(lines.filter((l) => /"level":"(error|fatal)"|forbidden/i.test(l))).toEqual([]);
    });
  });
});
