// Where things are in the repository, for the developer tooling (scripts/, bench/, test/).
import { fileURLToPath } from "node:url";

/** Repository root (this file lives in <root>/dev), with a trailing slash. */
export const REPO_ROOT = fileURLToPath(new URL("../", import.meta.url));

/** The generated CRDs and their kustomization (`npm run crds` writes them). */
export const CRD_DIR = fileURLToPath(new URL("../crds/", import.meta.url));
