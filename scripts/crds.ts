// Writes crds/*.yaml from src/api (`npm run crds`), and the same CRDs into the Helm chart's
// crds/ (Helm installs what is there, so it must never lag behind), or fails when either is
// stale (`npm run crds:check`, run by the tests).
import { readdirSync, readFileSync, writeFileSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { stringify } from "yaml";
import { allKinds, GROUP } from "../src/api/index.js";
import { toCRD } from "../src/api/crd.js";
import { CRD_DIR, REPO_ROOT } from "../dev/paths.js";

/** The Helm chart's copy: the CRD files only (Helm has no use for the kustomization). */
const CHART_CRD_DIR = join(REPO_ROOT, "charts", "agent-operator", "crds");

const HEADER = "# Generated from src/api by `npm run crds`. Do not edit by hand.\n";

/** File name -> content of everything crds/ should hold. */
export function renderCRDs(): Map<string, string> {
  const files = new Map<string, string>();
  for (const kind of allKinds) {
    files.set(`${GROUP}_${kind.plural}.yaml`, HEADER + stringify(toCRD(kind), { lineWidth: 0 }));
  }
  files.set(
    "kustomization.yaml",
    HEADER +
      stringify({
        apiVersion: "kustomize.config.k8s.io/v1beta1",
        kind: "Kustomization",
        resources: [...files.keys()],
      }),
  );
  return files;
}

function main(mode: string | undefined): number {
  const all = renderCRDs();
  const crdsOnly = new Map([...all].filter(([name]) => name !== "kustomization.yaml"));
  const targets: Array<[dir: string, label: string, wanted: Map<string, string>]> = [
    [CRD_DIR, "crds/", all],
    [CHART_CRD_DIR, "charts/agent-operator/crds/", crdsOnly],
  ];
  if (mode === "check") {
    const stale = targets.flatMap(([dir, label, wanted]) => staleFiles(dir, wanted).map((f) => `${label}${f}`));
    if (stale.length > 0) {
      console.error(`CRDs are stale against src/api: ${stale.join(", ")}\nrun: npm run crds`);
      return 1;
    }
    console.log(`crds/ and the chart's crds/ are up to date (${all.size} files)`);
    return 0;
  }
  for (const [dir, label, wanted] of targets) {
    mkdirSync(dir, { recursive: true });
    for (const name of yamlFiles(dir)) if (!wanted.has(name)) rmSync(join(dir, name));
    for (const [name, content] of wanted) writeFileSync(join(dir, name), content);
    console.log(`wrote ${wanted.size} files to ${label}`);
  }
  return 0;
}

function yamlFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isFile() && e.name.endsWith(".yaml"))
    .map((e) => e.name);
}

/** Files of `dir` that differ from `wanted`, are missing, or are not generated. */
function staleFiles(dir: string, wanted: Map<string, string>): string[] {
  const present = new Set(yamlFiles(dir));
  const stale: string[] = [];
  for (const [name, content] of wanted) {
    if (!present.has(name) || readFileSync(join(dir, name), "utf8") !== content) stale.push(name);
  }
  for (const name of present) if (!wanted.has(name)) stale.push(`${name} (not generated)`);
  return stale;
}

// Only when run as a script: importing renderCRDs() (the docs generator, tests) writes nothing.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = main(process.argv[2]);
}
