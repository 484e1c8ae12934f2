// Creating many objects on the API server at once, many requests in flight: a `kubectl apply`
// of a few hundred objects makes one GET and one write each, in sequence, and takes minutes
// on a busy machine. The benchmark's scenarios and the fault suites create their batches here.
import { allKinds } from "../src/api/index.js";
import { isAlreadyExists, resourcePath } from "../src/runtime/kube-client.js";
import { withClient, type Cluster } from "./kube-client.js";
import { forEachLimit } from "./parallel.js";

export interface Creatable {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; [key: string]: unknown };
}

const PLURAL_OF = new Map(allKinds.map((k) => [k.kind, k.plural]));

/** The collection an object is created in: our kinds by their plural, others (Secret, ConfigMap...) as `<kind>s`. */
export function collectionPath(o: Creatable): string {
  const [group, version] = o.apiVersion.includes("/") ? (o.apiVersion.split("/") as [string, string]) : ["", o.apiVersion];
  const plural = PLURAL_OF.get(o.kind) ?? `${o.kind.toLowerCase()}s`;
  return resourcePath({ group: group || undefined, version, plural, namespace: o.metadata.namespace });
}

export interface CreateAllOptions {
  /** Puts every object in this namespace (default: each object's own metadata.namespace). */
  namespace?: string;
  /** Requests in flight (default 64). */
  concurrency?: number;
  /** An object that exists already is skipped (default: an error). */
  ignoreExisting?: boolean;
}

/** Creates the objects, `concurrency` requests at a time. */
export async function createAll(cluster: Cluster, objects: readonly Creatable[], opts: CreateAllOptions = {}): Promise<void> {
  await withClient(cluster, (kube) =>
    forEachLimit(objects, opts.concurrency ?? 64, async (o) => {
      const obj = opts.namespace === undefined ? o : { ...o, metadata: { ...o.metadata, namespace: opts.namespace } };
      try {
        await kube.create(collectionPath(obj), obj);
      } catch (err) {
        if (!opts.ignoreExisting || !isAlreadyExists(err)) throw err;
      }
    }),
  );
}
