// Loading the manifests `agent-operator plan` is given: files, directories (their .yaml, .yml
// and .json files, as `kubectl apply -f dir`), stdin (`-`), or a kustomization rendered with
// `kubectl kustomize`. Every problem names the file (and the document in it).
import { spawn } from "node:child_process";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments, type Tags } from "yaml";
import { GROUP, VERSION, kindNames } from "../api/names.js";
import { yamlValue } from "../lib/yaml.js";
import { specProblems } from "./admission.js";

/** One object of the manifests, with where it came from. */
export interface ManifestObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  spec?: Record<string, unknown>;
  data?: Record<string, string>;
  stringData?: Record<string, string>;
  /** "file" or "file: document N". */
  source: string;
  /**
   * With -n given, the object names another namespace and its kind's scope is not known here:
   * kubectl apply -n's refusal, which the planner makes once discovery says the kind is
   * namespaced (a cluster-scoped object's namespace is ignored, as kubectl ignores it).
   */
  namespaceError?: string;
}

/** A manifest the plan cannot use; the message names the file and the problem. */
export class ManifestError extends Error {
  override readonly name = "ManifestError";
}

/** Our kinds, by `kind`. */
export const PLANNED_KINDS: ReadonlySet<string> = new Set(Object.values(kindNames).map((k) => k.kind));
const API_VERSION = `${GROUP}/${VERSION}`;

export interface Source {
  /** Shown in messages: a path, "<stdin>", or "kustomize <dir>". */
  name: string;
  text: string;
}

/** The files of `-f` arguments: a file, a directory's manifest files (sorted), or `-` for stdin. */
export function readSources(paths: string[], opts: { stdin?: () => string; recursive?: boolean } = {}): Source[] {
  const out: Source[] = [];
  for (const p of paths) {
    if (p === "-") {
      out.push({ name: "<stdin>", text: (opts.stdin ?? (() => readFileSync(0, "utf8")))() });
      continue;
    }
    let isDir: boolean;
    try {
      isDir = statSync(p).isDirectory();
    } catch {
      throw new ManifestError(`${p}: no such file or directory`);
    }
    if (isDir) out.push(...readDir(p, opts.recursive ?? false));
    else out.push({ name: p, text: readFileSync(p, "utf8") });
  }
  return out;
}

function readDir(dir: string, recursive: boolean): Source[] {
  const out: Source[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (recursive) out.push(...readDir(path, true));
    } else if (/\.(ya?ml|json)$/.test(entry.name)) {
      out.push({ name: path, text: readFileSync(path, "utf8") });
    }
  }
  return out;
}

/** `kubectl kustomize <dir>` ($KUBECTL names another kubectl). */
export function renderKustomization(dir: string): Promise<Source> {
  const bin = process.env.KUBECTL ?? "kubectl";
  return new Promise((resolve, reject) => {
    const child = spawn(bin, ["kustomize", dir], { stdio: ["ignore", "pipe", "pipe"] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on("data", (b: Buffer) => out.push(b));
    child.stderr.on("data", (b: Buffer) => err.push(b));
    child.on("error", (e) => reject(new ManifestError(`${dir}: could not run ${bin} kustomize: ${e.message}`)));
    child.on("close", (code) => {
      if (code !== 0) {
        reject(new ManifestError(`${dir}: kubectl kustomize failed: ${Buffer.concat(err).toString("utf8").trim()}`));
        return;
      }
      resolve({ name: `kustomize ${dir}`, text: Buffer.concat(out).toString("utf8") });
    });
  });
}

/**
 * YAML as kubectl reads it (sigs.k8s.io/yaml over go-yaml v2): YAML 1.1, so `keepAlive: no` is
 * false and `mode: 0755` is 493, with merge keys (`<<: *anchor`) resolved. go-yaml v2 leaves a
 * timestamp-looking scalar a string when it decodes into interface{} (kubectl's case) and has no
 * sexagesimal numbers (`1:30`): those tags of YAML 1.1 are left out, so such values stay strings.
 */
const KUBECTL_YAML = {
  version: "1.1",
  merge: true,
  customTags: (tags: Tags) =>
    tags.filter((t) => (typeof t === "string" ? !["timestamp", "intTime", "floatTime"].includes(t) : t.tag !== "tag:yaml.org,2002:timestamp" && t.format !== "TIME")),
} as const;

export interface ParseOptions {
  /**
   * The namespace was given with -n: an object that names another one is refused, as `kubectl
   * apply -n` refuses it (rather than planned in a namespace the caller did not ask for).
   */
  enforceNamespace?: boolean;
}

/**
 * The objects of the sources. `namespace` is given to objects without one (-n, else the
 * kubeconfig context's, else "default"). Objects of our group must be of our kinds and
 * version; other kinds are kept (Secrets and ConfigMaps are read by the plan, the rest ignored).
 * YAML is read as kubectl reads it (KUBECTL_YAML): YAML 1.1, merge keys (`<<: *anchor`) resolved.
 */
export function parseSources(sources: Source[], namespace: string, opts: ParseOptions = {}): ManifestObject[] {
  const out: ManifestObject[] = [];
  const seen = new Map<string, string>();
  for (const source of sources) {
    const docs = parseAllDocuments(source.text, KUBECTL_YAML);
    if (!Array.isArray(docs)) continue; // an empty file
    docs.forEach((doc, i) => {
      const where = docs.length > 1 ? `${source.name}: document ${i + 1}` : source.name;
      // In words, never the library's message: it quotes the text, a Secret's value included.
      const value = yamlValue(doc, source.text, (fault) => new ManifestError(`${where}: not valid YAML: ${fault}`));
      if (value === null || value === undefined) return; // an empty document
      for (const [obj, at] of expandList(value, where)) {
        const m = toManifest(obj, at, namespace, opts.enforceNamespace ?? false);
        const key = `${m.kind}/${m.metadata.namespace}/${m.metadata.name}`;
        const first = seen.get(key);
        if (first !== undefined) throw new ManifestError(`${where}: ${m.kind} ${m.metadata.namespace}/${m.metadata.name} is also in ${first}`);
        seen.set(key, where);
        out.push(m);
      }
    });
  }
  return out;
}

/** The objects of a document, each with where it is: a List's items by their place in it (`item 2`). */
function expandList(value: unknown, where: string): Array<[unknown, string]> {
  if (isRecord(value) && typeof value.kind === "string" && value.kind.endsWith("List") && (Array.isArray(value.items) || value.items === null || value.items === undefined)) {
    return ((value.items ?? []) as unknown[]).map((item, i) => [item, `${where}: item ${i + 1}`]);
  }
  if (!isRecord(value)) throw new ManifestError(`${where}: not a Kubernetes object (a mapping with apiVersion, kind and metadata)`);
  return [[value, where]];
}

function toManifest(obj: unknown, where: string, namespace: string, enforceNamespace: boolean): ManifestObject {
  if (!isRecord(obj)) throw new ManifestError(`${where}: not a Kubernetes object (a mapping with apiVersion, kind and metadata)`);
  const { apiVersion, kind, metadata } = obj;
  if (typeof apiVersion !== "string" || apiVersion === "") throw new ManifestError(`${where}: apiVersion is missing`);
  if (typeof kind !== "string" || kind === "") throw new ManifestError(`${where}: kind is missing`);
  // kustomize's own file in a directory given with -f (kubectl apply -f fails on it too).
  if (apiVersion.startsWith("kustomize.config.k8s.io/")) throw new ManifestError(`${where}: a ${kind} is kustomize's, not an object to apply: plan its directory with -k`);
  if (!isRecord(metadata)) throw new ManifestError(`${where}: ${kind}: metadata.name is missing`);
  if (metadata.name === undefined || metadata.name === null || metadata.name === "") {
    // kubectl apply needs the name: it looks the object up by it.
    const hint = typeof metadata.generateName === "string" ? " (metadata.generateName cannot be used with kubectl apply: set metadata.name)" : "";
    throw new ManifestError(`${where}: ${kind}: metadata.name is missing${hint}`);
  }
  if (typeof metadata.name !== "string") throw new ManifestError(`${where}: ${kind}: metadata.name must be a string (quote it: name: "${String(metadata.name)}")`);
  const label = `${kind} "${metadata.name}"`;
  if (metadata.namespace !== undefined && metadata.namespace !== null && typeof metadata.namespace !== "string") {
    throw new ManifestError(`${where}: ${label}: metadata.namespace must be a string (quote it: namespace: "${String(metadata.namespace)}")`);
  }
  const group = apiVersion.includes("/") ? (apiVersion.split("/")[0] ?? "") : "";
  if (group === GROUP) {
    if (!PLANNED_KINDS.has(kind)) {
      throw new ManifestError(`${where}: ${label}: unknown kind "${kind}" in ${apiVersion} (known: ${[...PLANNED_KINDS].join(", ")})`);
    }
    if (apiVersion !== API_VERSION) throw new ManifestError(`${where}: ${label}: unknown apiVersion "${apiVersion}" (this operator serves ${API_VERSION})`);
    if (obj.spec !== undefined && obj.spec !== null && !isRecord(obj.spec)) throw new ManifestError(`${where}: ${label}: spec is not a mapping`);
    const problems = specProblems(kind, isRecord(obj.spec) ? obj.spec : undefined);
    if (problems.length > 0) throw new ManifestError(`${where}: ${label}: the API server would refuse it: ${problems.join("; ")}`);
  } else if (PLANNED_KINDS.has(kind) && (group === "" || group.includes("agentcompute"))) {
    // One of our kinds in a group that has none of them (a typo, or the version alone): kubectl
    // apply fails on it ("no matches for kind"); left out, it would vanish from the plan.
    throw new ManifestError(`${where}: ${label}: apiVersion "${apiVersion}" serves no ${kind}: set apiVersion: ${API_VERSION}`);
  }
  const ns = typeof metadata.namespace === "string" && metadata.namespace !== "" ? metadata.namespace : namespace;
  // kubectl apply -n refuses every namespaced object that names another namespace (in its
  // words, below); a cluster-scoped one (a Namespace, a ClusterRole) is not held to it,
  // whatever it carries. Known namespaced here: the kinds plan reads; any other kind's scope is
  // asked of discovery by the planner, which refuses it then (namespaceError).
  const refusal = `${where}: ${label}: the namespace from the provided object "${ns}" does not match the namespace "${namespace}". You must pass '--namespace=${ns}' to perform this operation.`;
  const read = apiVersion.split("/")[0] === GROUP || (apiVersion === "v1" && (kind === "Secret" || kind === "ConfigMap"));
  const foreign = enforceNamespace && ns !== namespace;
  if (foreign && read) throw new ManifestError(refusal);
  const m: ManifestObject = {
    apiVersion,
    kind,
    metadata: { name: metadata.name, namespace: ns },
    source: where,
    ...(foreign && { namespaceError: refusal }),
  };
  const at = `${where}: ${label}`;
  const labels = stringMap(metadata.labels, "metadata.labels", at);
  if (labels !== undefined) m.metadata.labels = labels;
  const annotations = stringMap(metadata.annotations, "metadata.annotations", at);
  if (annotations !== undefined) m.metadata.annotations = annotations;
  if (isRecord(obj.spec)) m.spec = obj.spec;
  // Another kind's data may be anything: only a Secret's and a ConfigMap's are read (and typed).
  if (apiVersion === "v1" && (kind === "Secret" || kind === "ConfigMap")) {
    const data = stringMap(obj.data, "data", at);
    if (data !== undefined) m.data = data;
    const stringData = stringMap(obj.stringData, "stringData", at);
    if (stringData !== undefined) m.stringData = stringData;
  }
  return m;
}

/** Whether the object is one of ours (planned), rather than an input (Secret, ConfigMap) or ignored. */
export function isPlanned(m: ManifestObject): boolean {
  return m.apiVersion === API_VERSION && PLANNED_KINDS.has(m.kind);
}

/**
 * A map of strings (labels, annotations, a Secret's data), refused as the API server refuses it
 * when a value is not a string: an unquoted `paused: true` is a boolean in YAML, which
 * `kubectl apply` cannot apply, and must not be planned as the string "true".
 */
function stringMap(value: unknown, field: string, at: string): Record<string, string> | undefined {
  if (value === undefined || value === null) return undefined;
  if (!isRecord(value)) throw new ManifestError(`${at}: ${field}: must be a mapping of strings`);
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(value)) {
    if (typeof v === "string") {
      out[k] = v;
      continue;
    }
    // `key:` with no value: the API server's decoder makes a new object's value empty (and
    // kubectl apply's merge patch removes the key from an existing one).
    if (v === null) {
      out[k] = "";
      continue;
    }
    // The value is not repeated: it may be a Secret's (a PIN read as a number), and what YAML
    // made of it (0755 read as 493) is not what was written.
    const hint = typeof v === "number" || typeof v === "boolean" ? "quote the value" : `not a ${Array.isArray(v) ? "list" : "mapping"}`;
    throw new ManifestError(`${at}: ${field}[${JSON.stringify(k)}]: must be a string (${hint})`);
  }
  return out;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
