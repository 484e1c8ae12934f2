// What the sharding suites share: an admin client of the test API server (the CRDs installed)
// and fresh namespaces, deleted after the suite.
import { afterAll, beforeAll } from "vitest";
import type { KubeClient } from "../../../src/runtime/kube-client.js";
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
