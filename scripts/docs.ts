// `npm run docs` writes docs/reference/<kind>.md from the CRD schemas in src/api;
// `npm run docs:check` (run by the tests) fails when docs/reference/ is stale. The rendering
// is dev/api-reference.ts.
import { mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { referenceDir, renderReference, staleFiles } from "../dev/api-reference.js";

function main(mode: string | undefined): number {
  const wanted = renderReference();
  if (mode === "check") {
    const stale = staleFiles(referenceDir, wanted);
    if (stale.length > 0) {
      console.error(`docs/reference/ is stale against src/api or examples/: ${stale.join(", ")}\nrun: npm run docs`);
      return 1;
    }
    console.log(`docs/reference/ is up to date (${wanted.size} files)`);
    return 0;
  }
  mkdirSync(referenceDir, { recursive: true });
  for (const name of readdirSync(referenceDir)) if (name.endsWith(".md") && !wanted.has(name)) rmSync(join(referenceDir, name));
  for (const [name, content] of wanted) writeFileSync(join(referenceDir, name), content);
  console.log(`wrote ${wanted.size} files to docs/reference/`);
  return 0;
}

process.exitCode = main(process.argv[2]);
