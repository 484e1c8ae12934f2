// Read access to the Secrets and ConfigMaps that resources reference, from the informer
// caches, with errors that name the field to fix. A missing object is "not ready yet", not a
// failure: GitOps may apply the Secret after the resource, and the watch brings us back.
import { NotReadyError } from "../managed/errors.js";
import type { SecretObject } from "../managed/connection-secret.js";
import type { Informer } from "../runtime/informer.js";

export interface ConfigMapObject {
  metadata: { name: string; namespace: string; resourceVersion?: string };
  data?: Record<string, string>;
  /** Values that are not UTF-8, base64 (kubectl create configmap --from-file of such a file). */
  binaryData?: Record<string, string>;
}

export class ObjectStore {
  constructor(
    private readonly secrets: Informer<SecretObject>,
    private readonly configMaps: Informer<ConfigMapObject>,
  ) {}

  /** A Secret's data, decoded as UTF-8 text. `field` names the spec field that references it. */
  secretData(namespace: string, name: string, field: string): Record<string, string> {
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(this.secret(namespace, name, field).data ?? {})) out[k] = Buffer.from(v, "base64").toString("utf8");
    return out;
  }

  /** Reads the given keys of a Secret; every one must be there. */
  secretKeys<K extends string>(namespace: string, name: string, field: string, keys: readonly K[]): Record<K, string> {
    const data = this.secretData(namespace, name, field);
    const missing = keys.filter((k) => data[k] === undefined);
    if (missing.length > 0) throw keysMissing(name, field, missing, Object.keys(data));
    return data as Record<K, string>;
  }

  /**
   * One key of a Secret as its bytes, not decoded as text: what is written as a file (a
   * keystore or a DER certificate is not UTF-8, and text would replace its bytes).
   */
  secretKeyBytes(namespace: string, name: string, field: string, key: string): Buffer {
    const data = this.secret(namespace, name, field).data ?? {};
    const value = data[key];
    if (value === undefined) throw keysMissing(name, field, [key], Object.keys(data));
    return Buffer.from(value, "base64");
  }

  private secret(namespace: string, name: string, field: string): SecretObject {
    const secret = this.secrets.get(namespace, name);
    if (secret === undefined) {
      throw new NotReadyError("SecretNotFound", `Secret "${name}" not found in namespace "${namespace}" (${field})`);
    }
    return secret;
  }

  configMapData(namespace: string, name: string, field: string): Record<string, string> {
    return this.configMap(namespace, name, field).data ?? {};
  }

  /**
   * One key of a ConfigMap as a file's content: its text, else its bytes where Kubernetes keeps
   * a value that is not UTF-8 (binaryData), written as they are, as a Secret's are
   * (secretKeyBytes); a key in neither is waited for.
   */
  configMapKeyContent(namespace: string, name: string, field: string, key: string): string | Buffer {
    const cm = this.configMap(namespace, name, field);
    const text = cm.data?.[key];
    if (text !== undefined) return text;
    const bytes = cm.binaryData?.[key];
    if (bytes !== undefined) return Buffer.from(bytes, "base64");
    throw new NotReadyError("ConfigMapKeyMissing", `ConfigMap "${name}" (${field}) lacks the key "${key}"; ${keysListed([...Object.keys(cm.data ?? {}), ...Object.keys(cm.binaryData ?? {})])}`);
  }

  private configMap(namespace: string, name: string, field: string): ConfigMapObject {
    const cm = this.configMaps.get(namespace, name);
    if (cm === undefined) {
      throw new NotReadyError("ConfigMapNotFound", `ConfigMap "${name}" not found in namespace "${namespace}" (${field})`);
    }
    return cm;
  }
}

function keysMissing(name: string, field: string, missing: readonly string[], present: readonly string[]): NotReadyError {
  return new NotReadyError("SecretKeyMissing", `Secret "${name}" (${field}) lacks the key${missing.length > 1 ? "s" : ""} ${missing.map((k) => `"${k}"`).join(", ")}; ${keysListed(present)}`);
}

/** Key names listed at most in a message (a Secret may hold many). */
const KEYS_LISTED = 10;

/**
 * A Secret's or ConfigMap's key names, sorted, for a message saying which one it lacks: a typo
 * (`api-key`, `API_KEY`) shows at once. Names only, never a value: key names are not secret.
 */
export function keysListed(keys: readonly string[]): string {
  const sorted = [...keys].sort();
  if (sorted.length === 0) return "it has no keys";
  const listed = sorted.slice(0, KEYS_LISTED).map((k) => `"${k}"`).join(", ");
  return `its keys: ${listed}${sorted.length > KEYS_LISTED ? ` and ${sorted.length - KEYS_LISTED} more` : ""}`;
}
