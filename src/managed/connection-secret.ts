// The Secret that receives a resource's credentials and endpoints (deployment and VM tokens):
// named by spec.writeConnectionSecretTo (default <name>-agentcompute), owned by the resource
// so that Kubernetes garbage-collects it with it, and written only when its data changes.
import { API_VERSION } from "../api/names.js";
import type { Informer } from "../runtime/informer.js";
import type { KubeClient } from "../runtime/kube-client.js";
import { isAlreadyExists, isNotFound, secretsPath } from "../runtime/kube-client.js";
import { StalledError } from "./errors.js";
import type { ManagedResource } from "./external.js";

export interface SecretObject {
  apiVersion?: string;
  kind?: string;
  metadata: {
    name: string;
    namespace: string;
    labels?: Record<string, string>;
    ownerReferences?: Array<{ uid: string; controller?: boolean }>;
    resourceVersion?: string;
  };
  type?: string;
  data?: Record<string, string>;
}

export const CONNECTION_SECRET_TYPE = "agentcompute.dev/connection";

export function connectionSecretName(cr: ManagedResource): string {
  return cr.spec.writeConnectionSecretTo?.name ?? `${cr.metadata.name}-agentcompute`;
}

export class ConnectionSecretWriter {
  constructor(
    private readonly kube: KubeClient,
    private readonly secrets: Informer<SecretObject>,
  ) {}

  async ensure(cr: ManagedResource, kind: string, details: Record<string, string>): Promise<void> {
    const name = connectionSecretName(cr);
    const namespace = cr.metadata.namespace;
    const data = Object.fromEntries(
      Object.entries(details).map(([k, v]) => [k, Buffer.from(v, "utf8").toString("base64")]),
    );
    const existing = this.secrets.get(namespace, name);
    const path = secretsPath(namespace);
    if (existing === undefined) {
      const body: SecretObject = {
        apiVersion: "v1",
        kind: "Secret",
        metadata: {
          name,
          namespace,
          labels: { "app.kubernetes.io/managed-by": "agent-operator" },
          ownerReferences: [
            {
              apiVersion: API_VERSION,
              kind,
              name: cr.metadata.name,
              uid: cr.metadata.uid,
              controller: true,
              blockOwnerDeletion: true,
            } as { uid: string; controller?: boolean },
          ],
        },
        type: CONNECTION_SECRET_TYPE,
        data,
      };
      try {
        await this.kube.create(path, body, { discardResult: true });
        return;
      } catch (err) {
        // Created meanwhile (the cache lags behind our own writes): fall through to a patch.
        if (!isAlreadyExists(err)) throw err;
      }
    } else {
      assertOwned(existing, cr);
      // Observations do not always carry every detail (a list may omit the token): a key is
      // overwritten when it is given, and kept when it is not.
      const current = existing.data ?? {};
      if (Object.entries(data).every(([k, v]) => current[k] === v)) return;
    }
    await this.kube.patch(`${path}/${name}`, { data }, "merge", { discardResult: true });
  }

  /** Deletes the Secret when its owner is finalized (garbage collection may not run). */
  async remove(cr: ManagedResource): Promise<void> {
    const name = connectionSecretName(cr);
    const existing = this.secrets.get(cr.metadata.namespace, name);
    if (existing === undefined || !isOwnedBy(existing, cr)) return;
    try {
      await this.kube.delete(secretsPath(cr.metadata.namespace, name));
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }
}

function isOwnedBy(secret: SecretObject, cr: ManagedResource): boolean {
  return (secret.metadata.ownerReferences ?? []).some((o) => o.uid === cr.metadata.uid);
}

function assertOwned(secret: SecretObject, cr: ManagedResource): void {
  if (!isOwnedBy(secret, cr)) {
    throw new ForeignSecretError(secret.metadata.name);
  }
}

export class ForeignSecretError extends StalledError {
  constructor(name: string) {
    super(
      "SecretConflict",
      `Secret "${name}" exists and is not owned by this resource; set spec.writeConnectionSecretTo.name to another name or delete that Secret`,
    );
  }
}
