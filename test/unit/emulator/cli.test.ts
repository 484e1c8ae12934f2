import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { parseEmulatorArgs } from "../../../src/commands/emulator.js";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const KEY = "cli-secret-key-123";

interface Running {
  child: ChildProcess;
  firstLine: Promise<string>;
  stdout: () => string;
  stderr: () => string;
  exited: Promise<number | null>;
}

const running: Running[] = [];
afterEach(() => {
  for (const r of running.splice(0)) stop(r);
});

function start(args: string[]): Running {
  // The emulator is this child itself (no npx or tsx launcher in between), so its exit is the
  // emulator's own exit, after it has closed and saved. Own process group, so that a test's
  // afterEach can stop anything it left behind.
  const child = spawn(process.execPath, ["--import", "tsx", "src/cli.ts", "emulator", ...args], { cwd: ROOT, detached: true, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
  const firstLine = new Promise<string>((resolve, reject) => {
    child.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      const nl = out.indexOf("\n");
      if (nl >= 0) resolve(out.slice(0, nl));
    });
    child.once("exit", (code) => reject(new Error(`emulator exited (${code}) before printing; stderr: ${err}`)));
  });
  firstLine.catch(() => {}); // a test that expects an early exit never awaits it
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const r = { child, firstLine, stdout: () => out, stderr: () => err, exited };
  running.push(r);
  return r;
}

function stop(r: Running, signal: NodeJS.Signals = "SIGTERM"): void {
  if (r.child.pid !== undefined && r.child.exitCode === null) {
    try {
      process.kill(-r.child.pid, signal);
    } catch {
      // already gone
    }
  }
}

describe("agent-operator emulator (CLI)", () => {
  it("prints exactly one JSON line, serves, and never prints the key", async () => {
    const r = start(["--port", "0", "--api-key", KEY]);
    const line = await r.firstLine;
    const urls = JSON.parse(line) as { baseURL: string; authURL: string };
    expect(Object.keys(urls)).toEqual(["baseURL", "authURL"]);
    expect(urls.authURL).toBe(`${urls.baseURL}/auth`);

    const tokenRes = await fetch(`${urls.authURL}/token`, { method: "POST", headers: { "X-API-Key": KEY } });
    expect(tokenRes.status).toBe(200);
    const { access_token } = (await tokenRes.json()) as { access_token: string };
    const list = await fetch(`${urls.baseURL}/compute/v1/skills`, { headers: { authorization: `Bearer ${access_token}` } });
    expect(list.status).toBe(200);
    expect(await list.json()).toEqual([]);

    stop(r, "SIGINT");
    await r.exited;
    expect(r.stdout()).toBe(`${line}\n`);
    expect(r.stdout() + r.stderr()).not.toContain(KEY);
  });

  it("saves the state file when stopped with SIGTERM", async () => {
    const dir = await mkdtemp(join(tmpdir(), "emulator-cli-"));
    try {
      const stateFile = join(dir, "state.json");
      const r = start(["--api-key", KEY, "--state-file", stateFile]);
      const { baseURL, authURL } = JSON.parse(await r.firstLine) as { baseURL: string; authURL: string };
      const { access_token } = (await (await fetch(`${authURL}/token`, { method: "POST", headers: { "X-API-Key": KEY } })).json()) as { access_token: string };
      const created = await fetch(`${baseURL}/compute/v1/skills`, {
        method: "POST",
        headers: { authorization: `Bearer ${access_token}` },
        body: JSON.stringify({ name: "from-cli", content: "c" }),
      });
      expect(created.status).toBe(201);
      stop(r, "SIGTERM");
      expect(await r.exited).toBe(0);
      const saved = JSON.parse(await readFile(stateFile, "utf8")) as { skills: { name: string }[] };
      expect(saved.skills.map((s) => s.name)).toEqual(["from-cli"]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("exits 2 naming a bad flag", async () => {
    const r = start(["--error-rate", "3"]);
    expect(await r.exited).toBe(2);
    expect(r.stderr()).toContain('--error-rate must be a number within 0..1, got "3"');
    expect(r.stdout()).toBe("");
  });
});

describe("parseEmulatorArgs", () => {
  it("maps every flag onto the emulator's options", () => {
    const opts = parseEmulatorArgs(
      [
        "--host=0.0.0.0",
        "--port=8080",
        "--api-key=k",
        "--client=a:b:c",
        "--org-id=o",
        "--token-ttl=60",
        "--omit-expires-in",
        "--agentd-omit-empty",
        "--strict-bodies",
        "--latency=5",
        "--jitter=2",
        "--error-rate=0.05",
        "--rate-limit=100",
        "--pool-size=10",
        "--state-file=/tmp/s.json",
        "--max-page-size=50",
        "--reject-tier=x",
        "--reject-tier=y",
      ],
      {},
    );
    expect(opts).toEqual({
      host: "0.0.0.0",
      port: 8080,
      apiKey: "k",
      clients: [{ clientId: "a", clientSecret: "b:c" }],
      orgId: "o",
      tokenTTLSeconds: 60,
      omitExpiresIn: true,
      agentdOmitEmpty: true,
      strictBodies: true,
      latencyMs: 5,
      jitterMs: 2,
      errorRate: 0.05,
      rateLimit: 100,
      poolSize: 10,
      stateFile: "/tmp/s.json",
      maxPageSize: 50,
      rejectTiers: ["x", "y"],
    });
  });

  it("takes the key from EMULATOR_API_KEY, answers --help, and names bad values", () => {
    expect(parseEmulatorArgs([], { EMULATOR_API_KEY: "from-env" })).toEqual({ apiKey: "from-env" });
    expect(parseEmulatorArgs(["--help"], {})).toBe("help");
    expect(() => parseEmulatorArgs(["--port", "70000"], {})).toThrow("--port must be an integer 0..65535");
    expect(() => parseEmulatorArgs(["--pool-size", "1.5"], {})).toThrow("--pool-size must be a non-negative integer");
    expect(() => parseEmulatorArgs(["--client", "nosecret"], {})).toThrow("--client must be <id>:<secret>");
    expect(() => parseEmulatorArgs(["--latency", ""], {})).toThrow("--latency must be a non-negative number");
    expect(() => parseEmulatorArgs(["--bogus"], {})).toThrow(/bogus/);
  });
});
