// What `agent-operator run` loads. The CRD schemas (TypeBox, src/api/schema.ts and the kinds'
// modules built on it) and @kubernetes/client-node are for crds/, the docs and the dev tools;
// loaded by the operator they cost ~20 MB of RSS each replica carries for nothing. A value
// import of the wrong module (a helper next to a schema) brings them back silently, as the
// SandboxRun's heldConnection did, so the module graph is checked here in a child process.
import { execFile } from "node:child_process";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { REPO_ROOT } from "../../../dev/paths.js";

const execFileAsync = promisify(execFile);

// Loads what `run` loads (src/cli.ts imports the command's module on demand, and the command
// imports the controllers) and prints every module URL that was loaded.
const PROBE = `
import { registerHooks } from "node:module";
const loaded = [];
registerHooks({ load(url, context, next) { loaded.push(url); return next(url, context); } });
await import("./src/commands/run.ts");
await import("./src/controllers/index.ts");
await import("./src/sharding/index.ts");
console.log(JSON.stringify(loaded));
`;

describe("agent-operator run", () => {
  it("loads neither the CRD schemas nor @kubernetes/client-node", async () => {
    const { stdout } = await execFileAsync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", PROBE], { cwd: REPO_ROOT });
    const root = pathToFileURL(REPO_ROOT).href.replace(/\/?$/, "/");
    const loaded = (JSON.parse(stdout) as string[]).map((u) => u.replace(root, ""));
    // The probe works: the operator's own modules were seen.
    expect(loaded).toContain("src/controllers/sandbox-run.ts");
    const schemaModules = loaded.filter((u) => /node_modules\/(typebox|@kubernetes\/client-node)\/|^src\/api\/(schema|common|index)\.ts$/.test(u));
    expect(schemaModules).toEqual([]);
  });
});
