// Building a Go program of tools/ (the kube-apiserver, helm) from its pinned modules: one Go
// environment for all of them (shared module and build caches under .cache/go, the committed
// go.sum, no cgo), a stamp so that an unchanged program is not rebuilt, a cross-process lock
// so that parallel test processes build once, and a progress line a minute for the long cold
// builds.
import { execFile, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { closeSync, existsSync, openSync, readFileSync } from "node:fs";
import { mkdir, rename, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { countPackages, readText, tail, withLock } from "./process.js";

const execFileAsync = promisify(execFile);

export interface GoProgram {
  /** For messages: "kube-apiserver", "helm". */
  name: string;
  /** Repository root (paths in messages are relative to it). */
  root: string;
  /** The Go module that is built. */
  toolDir: string;
  /** GOMODCACHE and GOCACHE live under here. */
  goDir: string;
  binary: string;
  buildStamp: string;
  buildLog: string;
  /** `go build` arguments writing to `output` (the package to build last). */
  buildArgs(output: string, parallel: number): string[];
  /** Files of toolDir whose content determines the binary (go.mod, go.sum, *.go). */
  sources(): string[];
  /** Whether this build will start without cached modules (for the time it announces). */
  cold(): boolean;
  /** How long a cold and a cached build take, in words. */
  expect: { cold: string; cached: string };
}

export function goEnv(goDir: string): NodeJS.ProcessEnv {
  return {
    ...process.env,
    GOMODCACHE: path.join(goDir, "mod"),
    GOCACHE: path.join(goDir, "build"),
    GOTOOLCHAIN: "local",
    // go.sum is committed: a build must not rewrite tools/*/go.{mod,sum}.
    GOFLAGS: "-mod=readonly -buildvcs=false",
    CGO_ENABLED: "0",
  };
}

async function goVersion(p: GoProgram): Promise<string> {
  try {
    const { stdout } = await execFileAsync("go", ["version"], { env: goEnv(p.goDir) });
    return stdout.trim();
  } catch (err) {
    throw new Error(`the Go toolchain is needed to build ${p.name}, and 'go version' failed: ${err instanceof Error ? err.message : String(err)}`, {
      cause: err,
    });
  }
}

/** Hash of everything that determines the binary: its sources, the toolchain and the flags. */
async function sourceHash(p: GoProgram): Promise<string> {
  const h = createHash("sha256");
  h.update(await goVersion(p));
  h.update(p.buildArgs("OUT", 0).join("\0"));
  for (const f of [...p.sources()].sort()) {
    h.update(`\0${f}\0`);
    h.update(readFileSync(path.join(p.toolDir, f)));
  }
  return h.digest("hex");
}

/** Builds the program if its sources, the toolchain or the flags changed; returns its path. */
export async function buildGoProgram(p: GoProgram, opts: { force?: boolean; log: (line: string) => void }): Promise<string> {
  const { log } = opts;
  const hash = await sourceHash(p);
  const upToDate = (): boolean => existsSync(p.binary) && readText(p.buildStamp)?.trim() === hash;
  if (!opts.force && upToDate()) return p.binary;
  const binDir = path.dirname(p.binary);
  await mkdir(binDir, { recursive: true });
  return withLock(path.join(binDir, "build.lock"), async () => {
    // Another process may have built it while we waited for the lock.
    if (!opts.force && upToDate()) return p.binary;
    const where = path.relative(p.root, p.toolDir);
    log(
      `building ${p.name} from ${where} (${p.cold() ? p.expect.cold : p.expect.cached}; log: ${path.relative(process.cwd(), p.buildLog) || p.buildLog})`,
    );
    const started = Date.now();
    const tmpOut = `${p.binary}.tmp-${process.pid}`;
    const logFd = openSync(p.buildLog, "w");
    let exit: number | null;
    try {
      const child = spawn("go", p.buildArgs(tmpOut, Math.max(1, os.availableParallelism())), {
        cwd: p.toolDir,
        env: goEnv(p.goDir),
        stdio: ["ignore", logFd, logFd],
      });
      const ticker = setInterval(() => {
        log(`  still building ${p.name}: ${formatDuration(Date.now() - started)} elapsed, ${countPackages(p.buildLog)} packages compiled`);
      }, 60_000);
      try {
        exit = await new Promise<number | null>((resolve, reject) => {
          child.once("error", reject);
          child.once("exit", (code) => resolve(code));
        });
      } finally {
        clearInterval(ticker);
      }
    } finally {
      closeSync(logFd);
    }
    if (exit !== 0) {
      await rm(tmpOut, { force: true });
      throw new Error(`go build of ${p.name} failed (exit ${exit}); last lines of ${p.buildLog}:\n${tail(p.buildLog, 30)}`);
    }
    await rename(tmpOut, p.binary);
    await writeFile(p.buildStamp, `${hash}\n`);
    log(`built ${path.relative(p.root, p.binary)} in ${formatDuration(Date.now() - started)}`);
    return p.binary;
  });
}

export function formatDuration(ms: number): string {
  const s = Math.round(ms / 1000);
  if (s < 60) return `${(ms / 1000).toFixed(1)}s`;
  return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
}
