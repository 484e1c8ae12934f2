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
    ownerReferences?: Array<{ uid: string; controller?: boolean; kind?: string; name?: string }>;
    resourceVersion?: string;
  };
  type?: string;
  data?: Record<string, string>;
}

export const CONNECTION_SECRET_TYPE = "agentcompute.dev/connection";

export function connectionSecretName(cr: ManagedResource): string {
  return cr.spec.writeConnectionSecretTo?.name ?? `${cr.metadata.name}-agentcompute`;
}

/** Connection Secrets by the uid of the resource they are written for. */
const OWNER_INDEX = "connection-secret-owner";

/** The resource a connection Secret is written for (its controller owner), if it is one. */
export function connectionSecretOwner(secret: SecretObject): { kind: string; name: string; uid: string } | undefined {
  if (secret.type !== CONNECTION_SECRET_TYPE) return undefined;
  const owner = secret.metadata.ownerReferences?.find((o) => o.controller === true);
  return owner?.kind !== undefined && owner.name !== undefined ? { kind: owner.kind, name: owner.name, uid: owner.uid } : undefined;
}

export class ConnectionSecretWriter {
  constructor(
    private readonly kube: KubeClient,
    private readonly secrets: Informer<SecretObject>,
  ) {
    secrets.addIndex(OWNER_INDEX, (s) => {
      const owner = connectionSecretOwner(s);
      return owner === undefined ? [] : [owner.uid];
    });
  }

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
      let created = false;
      try {
        await this.kube.create(path, body, { discardResult: true });
        created = true;
      } catch (err) {
        if (!isAlreadyExists(err)) throw err;
      }
      if (!created) {
        // There, but not in the cache: created meanwhile (the cache lags behind our own
        // writes), or one the cache leaves out (a Helm release's): patched only if it is ours.
        const { items } = await this.kube.list<SecretObject>(path, { fieldSelector: `metadata.name=${name}` });
        const found = items[0];
        if (found !== undefined) assertOwned(found, cr, kind);
        await this.kube.patch(`${path}/${name}`, { data }, "merge", { discardResult: true });
      }
    } else {
      assertOwned(existing, cr, kind);
      // Observations do not always carry every detail (a list may omit the token): a key is
      // overwritten when it is given, and kept when it is not.
      const current = existing.data ?? {};
      if (!Object.entries(data).every(([k, v]) => current[k] === v)) {
        await this.kube.patch(`${path}/${name}`, { data }, "merge", { discardResult: true });
      }
    }
    // Written under another name before (spec.writeConnectionSecretTo changed): the credentials
    // must not stay behind there until the resource is deleted.
    await this.delete(this.owned(cr).filter((s) => s.metadata.name !== name));
  }

  /** Deletes the resource's Secrets when it is finalized (garbage collection may not run). */
  async remove(cr: ManagedResource): Promise<void> {
    await this.delete(this.owned(cr));
  }

  /** The connection Secrets written for `cr`, whatever their names. */
  private owned(cr: ManagedResource): SecretObject[] {
    return this.secrets.byIndex(OWNER_INDEX, cr.metadata.uid).filter((s) => s.metadata.namespace === cr.metadata.namespace);
  }

  private async delete(secrets: SecretObject[]): Promise<void> {
    for (const s of secrets) {
      try {
        await this.kube.delete(secretsPath(s.metadata.namespace, s.metadata.name));
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    }
  }
}

function isOwnedBy(secret: SecretObject, cr: ManagedResource): boolean {
  return (secret.metadata.ownerReferences ?? []).some((o) => o.uid === cr.metadata.uid);
}

function assertOwned(secret: SecretObject, cr: ManagedResource, kind: string): void {
  if (!isOwnedBy(secret, cr)) {
    throw new ForeignSecretError(secret, { kind, name: cr.metadata.name });
  }
}

export class ForeignSecretError extends StalledError {
  /** `writer`: the resource that would write it. */
  constructor(secret: SecretObject, writer: { kind: string; name: string }) {
    const { name } = secret.metadata;
    // Another resource's (a Sandbox and an AgentDeployment of one name share the default
    // name): deleted, it would be written again by its owner at once. Not an earlier
    // resource of this kind and name (deleted and made again: its Secret goes with it).
    const owner = connectionSecretOwner(secret);
    const other = owner !== undefined && (owner.name !== writer.name || owner.kind !== writer.kind);
    super(
      "SecretConflict",
      other
        ? `Secret "${name}" is the connection Secret of ${owner.kind} "${owner.name}"; set spec.writeConnectionSecretTo.name to another name`
        : `Secret "${name}" exists and is not owned by this resource; set spec.writeConnectionSecretTo.name to another name or delete that Secret`,
    );
  }
}
