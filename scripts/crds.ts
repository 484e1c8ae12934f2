// Writes crds/*.yaml from src/api (`npm run crds`), or fails when crds/ is stale
// (`npm run crds:check`, run by the tests).
import { readdirSync, readFileSync, writeFileSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { stringify } from "yaml";
import { allKinds, GROUP } from "../src/api/index.js";
import { toCRD } from "../src/api/crd.js";
import { CRD_DIR } from "../dev/paths.js";

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
  const wanted = renderCRDs();
  const present = new Set(readdirSync(CRD_DIR, { withFileTypes: true }).filter((e) => e.isFile()).map((e) => e.name));
  if (mode === "check") {
    const stale: string[] = [];
    for (const [name, content] of wanted) {
      if (!present.has(name) || readFileSync(join(CRD_DIR, name), "utf8") !== content) stale.push(name);
    }
    for (const name of present) if (!wanted.has(name) && name.endsWith(".yaml")) stale.push(`${name} (not generated)`);
    if (stale.length > 0) {
      console.error(`crds/ is stale against src/api: ${stale.join(", ")}\nrun: npm run crds`);
      return 1;
    }
    console.log(`crds/ is up to date (${wanted.size} files)`);
    return 0;
  }
  mkdirSync(CRD_DIR, { recursive: true });
  for (const name of present) if (!wanted.has(name) && name.endsWith(".yaml")) rmSync(join(CRD_DIR, name));
  for (const [name, content] of wanted) writeFileSync(join(CRD_DIR, name), content);
  console.log(`wrote ${wanted.size} files to crds/`);
  return 0;
}

// Only when run as a script: importing renderCRDs() (the docs generator, tests) writes nothing.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = main(process.argv[2]);
}
