// Smoke test of the test API server: CRDs, client-node reads and watches, RBAC with
// service-account tokens, and the in-process garbage-collector / namespace controllers.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { CoreV1Api, CustomObjectsApi, KubeConfig, Watch } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  apiErrorCode,
  createTestNamespace,
  deleteTestNamespace,
  kubectl,
  kubectlOk,
  loadKubeConfig,
  uniqueName,
  useTestNamespace,
  waitFor,
} from "./support/kube.js";

const GROUP = "smoke.agentcompute.dev";
const VERSION = "v1";
const PLURAL = "widgets";
const CRD_NAME = `${PLURAL}.${GROUP}`;

const crdManifest = JSON.stringify({
  apiVersion: "apiextensions.k8s.io/v1",
  kind: "CustomResourceDefinition",
  metadata: { name: CRD_NAME },
  spec: {
    group: GROUP,
    scope: "Namespaced",
    names: { plural: PLURAL, singular: "widget", kind: "Widget", listKind: "WidgetList" },
    versions: [
      {
        name: VERSION,
        served: true,
        storage: true,
        subresources: { status: {} },
        schema: {
          openAPIV3Schema: {
            type: "object",
            properties: {
              spec: {
                type: "object",
                required: ["size"],
                properties: { size: { type: "integer", minimum: 0 }, color: { type: "string" } },
              },
              status: { type: "object", properties: { phase: { type: "string" } } },
            },
          },
        },
      },
    ],
  },
});

interface Widget {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; namespace?: string; resourceVersion?: string };
  spec?: { size?: number; color?: string };
}

function asWidget(obj: unknown): Widget {
  return (typeof obj === "object" && obj !== null ? obj : {}) as Widget;
}

const ns = useTestNamespace("kube-smoke");

describe("test API server", () => {
  let kc: KubeConfig;

  beforeAll(async () => {
    kc = loadKubeConfig();
    await kubectlOk(["apply", "-f", "-"], { input: crdManifest });
    await kubectlOk(["wait", "--for=condition=Established", `crd/${CRD_NAME}`, "--timeout=60s"]);
  });

  afterAll(async () => {
    await kubectl(["delete", "crd", CRD_NAME, "--ignore-not-found", "--wait=false"]);
  });

  it("serves a CRD applied with kubectl, readable and watchable through client-node", async () => {
    const name = uniqueName("widget");
    const widget = { apiVersion: `${GROUP}/${VERSION}`, kind: "Widget", metadata: { name }, spec: { size: 1, color: "red" } };
    await kubectlOk(["apply", "-f", "-"], { input: JSON.stringify(widget), namespace: ns.name });

    const custom = kc.makeApiClient(CustomObjectsApi);
    const read = asWidget(
      await custom.getNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: ns.name, plural: PLURAL, name }),
    );
    expect(read.kind).toBe("Widget");
    expect(read.metadata?.namespace).toBe(ns.name);
    expect(read.spec).toEqual({ size: 1, color: "red" });
    const rv = read.metadata?.resourceVersion;
    expect(rv).toBeTruthy();

    // Schema validation is the real apiserver's: a negative size is rejected.
    const bad = await kubectl(["apply", "-f", "-"], {
      input: JSON.stringify({ ...widget, metadata: { name: uniqueName("bad") }, spec: { size: -1 } }),
      namespace: ns.name,
    });
    expect(bad.exitCode).not.toBe(0);
    expect(bad.stderr).toMatch(/spec\.size/);

    // Watch from the version we read, then change the object with kubectl.
    const events: { type: string; widget: Widget }[] = [];
    let watchError: unknown;
    const watch = new Watch(kc);
    const abort = await watch.watch(
      `/apis/${GROUP}/${VERSION}/namespaces/${ns.name}/${PLURAL}`,
      { resourceVersion: rv, fieldSelector: `metadata.name=${name}` },
      (type: string, obj: unknown) => {
        events.push({ type, widget: asWidget(obj) });
      },
      (err: unknown) => {
        watchError = err;
      },
    );
    try {
      await kubectlOk(["patch", `${PLURAL}.${GROUP}`, name, "--type=merge", "-p", JSON.stringify({ spec: { size: 2 } })], {
        namespace: ns.name,
      });
      const modified = await waitFor(() => events.find((e) => e.type === "MODIFIED" && e.widget.spec?.size === 2), {
        timeoutMs: 20_000,
        description: "a MODIFIED watch event with spec.size=2",
      });
      expect(modified.widget.metadata?.name).toBe(name);
      expect(Number(modified.widget.metadata?.resourceVersion)).toBeGreaterThan(Number(rv));
    } finally {
      abort.abort();
    }
    expect(watchError ?? null).toBeNull();
  });

  it("authenticates service-account tokens and enforces RBAC", async () => {
    const sa = "smoke-reader";
    await kubectlOk(["create", "serviceaccount", sa], { namespace: ns.name });
    const token = (await kubectlOk(["create", "token", sa, "--duration=10m"], { namespace: ns.name })).trim();
    expect(token.split(".")).toHaveLength(3); // a signed JWT

    // A kubeconfig with only the token: the admin client certificate must not be sent.
    const cluster = kc.getCurrentCluster();
    if (cluster === null) throw new Error("no current cluster in the test kubeconfig");
    const saKc = new KubeConfig();
    saKc.loadFromClusterAndUser(cluster, { name: sa, token });
    const dir = await mkdtemp(path.join(os.tmpdir(), "kube-smoke-"));
    try {
      const saKubeconfig = path.join(dir, "kubeconfig");
      await writeFile(saKubeconfig, saKc.exportConfig(), { mode: 0o600 });
      const username = `system:serviceaccount:${ns.name}:${sa}`;

      const whoami = await kubectlOk(["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"], {
        kubeconfig: saKubeconfig,
      });
      expect(whoami).toBe(username);

      // Authenticated (403, not 401) but not allowed to list secrets.
      const denied = await kubectl(["get", "secrets"], { kubeconfig: saKubeconfig, namespace: ns.name });
      expect(denied.exitCode).not.toBe(0);
      expect(denied.stderr).toContain("Forbidden");
      expect(denied.stderr).toContain(username);
      const core = saKc.makeApiClient(CoreV1Api);
      const err: unknown = await core.listNamespacedSecret({ namespace: ns.name }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(apiErrorCode(err)).toBe(403);

      // A forged token is not authenticated at all.
      const forged = new KubeConfig();
      forged.loadFromClusterAndUser(cluster, { name: "forged", token: `${token.slice(0, -4)}AAAA` });
      const forgedErr: unknown = await forged
        .makeApiClient(CoreV1Api)
        .listNamespacedSecret({ namespace: ns.name })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(apiErrorCode(forgedErr)).toBe(401);

      // RBAC is evaluated for real: a RoleBinding grants exactly what the Role says.
      await kubectlOk(["create", "role", "secret-lister", "--verb=list", "--resource=secrets"], { namespace: ns.name });
      await kubectlOk(["create", "rolebinding", "secret-lister", "--role=secret-lister", `--serviceaccount=${ns.name}:${sa}`], {
        namespace: ns.name,
      });
      await waitFor(async () => (await kubectl(["get", "secrets"], { kubeconfig: saKubeconfig, namespace: ns.name })).exitCode === 0, {
        timeoutMs: 20_000,
        description: "the RoleBinding to take effect",
      });
      const stillDenied = await kubectl(["get", "configmaps"], { kubeconfig: saKubeconfig, namespace: ns.name });
      expect(stillDenied.exitCode).not.toBe(0);
      expect(stillDenied.stderr).toContain("Forbidden");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("runs the garbage collector (ownerReferences) and the namespace controller", async () => {
    const core = kc.makeApiClient(CoreV1Api);
    const owner = await core.createNamespacedConfigMap({
      namespace: ns.name,
      body: { metadata: { name: uniqueName("owner") }, data: { role: "owner" } },
    });
    const ownerName = owner.metadata?.name ?? "";
    const ownerUid = owner.metadata?.uid ?? "";
    const dependentName = uniqueName("dependent");
    await core.createNamespacedConfigMap({
      namespace: ns.name,
      body: {
        metadata: {
          name: dependentName,
          ownerReferences: [{ apiVersion: "v1", kind: "ConfigMap", name: ownerName, uid: ownerUid }],
        },
      },
    });
    await core.deleteNamespacedConfigMap({ namespace: ns.name, name: ownerName });
    await waitFor(
      async () => {
        try {
          await core.readNamespacedConfigMap({ namespace: ns.name, name: dependentName });
          return false;
        } catch (err) {
          if (apiErrorCode(err) === 404) return true;
          throw err;
        }
      },
      { timeoutMs: 60_000, description: "the garbage collector to delete the dependent ConfigMap" },
    );

    const doomed = await createTestNamespace("kube-smoke-doomed", kc);
    await core.createNamespacedConfigMap({ namespace: doomed, body: { metadata: { name: "content" } } });
    await deleteTestNamespace(doomed, { wait: true, timeoutMs: 60_000 }, kc);
  });
});
