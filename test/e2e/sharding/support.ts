// What the sharding suites share: an admin client of the test API server (the CRDs installed)
// and fresh namespaces, deleted after the suite; a sharder's fence, written by hand.
import { afterAll, beforeAll } from "vitest";
import { leasesPath, type KubeClient } from "../../../src/runtime/kube-client.js";
import type { Lease } from "../../../src/runtime/leader-election.js";
import { fenceAnnotations } from "../../../src/sharding/succession.js";
import { installCRDs } from "../support/operator.js";
import { clientFor, createNamespace, deleteNamespace } from "../runtime/support.js";

/** Registers the suite's set-up and clean-up; `admin()` is usable from its tests on. */
export function adminAndNamespaces(prefix: string): { admin(): KubeClient; namespace(): Promise<string> } {
  let client: KubeClient | undefined;
  const namespaces: string[] = [];
  const admin = (): KubeClient => {
    if (client === undefined) throw new Error("the admin client is made in beforeAll");
    return client;
  };
  beforeAll(async () => {
    await installCRDs();
    client = clientFor();
  });
  afterAll(async () => {
    try {
      await Promise.allSettled(namespaces.map((ns) => deleteNamespace(admin(), ns)));
    } finally {
      await client?.close();
    }
  });
  return {
    admin,
    async namespace() {
      const ns = await createNamespace(admin(), prefix);
      namespaces.push(ns);
      return ns;
    },
  };
}

/** Writes member Lease `name`'s holder empty on the version read, as the sharder fences it, naming `heirs` (none: a fence of an older sharder). */
export async function fenceMemberLease(client: KubeClient, namespace: string, name: string, heirs: readonly string[] = []): Promise<void> {
  const current = await client.get<Lease>(leasesPath(namespace, name));
  const identity = current.spec?.holderIdentity ?? "";
  await client.patch(
    leasesPath(namespace, name),
    { metadata: { resourceVersion: current.metadata.resourceVersion, ...(heirs.length > 0 && { annotations: fenceAnnotations(identity, heirs, current.spec?.renewTime) }) }, spec: { holderIdentity: "" } },
    "merge",
  );
}
