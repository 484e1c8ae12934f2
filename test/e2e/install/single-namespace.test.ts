// manifests/overlays/single-namespace on the real API server: with only the overlay's Role in
// the watched namespace (no ClusterRoleBinding), the operator still does its whole job there
// with its ServiceAccount's token, and can read nothing elsewhere.
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startEmulator, type Emulator } from "../../../src/emulator/index.js";
import { KubeClient } from "../../../src/runtime/kube-client.js";
import { kubectlOk, loadKubeConfig, useTestNamespace } from "../support/kube.js";
import { API_KEY, apply, connectionManifest, waitForReady } from "../support/operator.js";
import {
  MANIFESTS_DIR,
  applyKustomization,
  canI,
  refusedLines,
  serviceAccountCredentials,
  startOperatorAs,
  tearDownInstalled,
  type OperatorUnderTest,
  type ServiceAccountCredentials,
} from "./support.js";

const OVERLAY_DIR = join(MANIFESTS_DIR, "overlays", "single-namespace");
const ns = useTestNamespace("install-single-ns");
let sa: ServiceAccountCredentials;
let emulator: Emulator;
let op: OperatorUnderTest | undefined;
const admin = new KubeClient({ kubeConfig: loadKubeConfig() });
const stack = { kube: admin, get namespace() { return ns.name; } };

beforeAll(async () => {
  await applyKustomization(); // CRDs, namespace, ServiceAccount (as a first install would)
  // What the overlay's comments tell a user to do: name their namespace, and drop the base's
  // cluster-wide binding when switching an existing install over.
  const rendered = (await kubectlOk(["kustomize", OVERLAY_DIR]))
    .replaceAll("namespace: agents\n", `namespace: ${ns.name}\n`)
    .replaceAll("--namespace=agents", `--namespace=${ns.name}`);
  expect(rendered).toContain(`namespace: ${ns.name}`);
  await kubectlOk(["delete", "clusterrolebinding", "agent-operator", "--ignore-not-found"]);
  await kubectlOk(["apply", "-f", "-"], { input: rendered });
  sa = await serviceAccountCredentials();
  emulator = await startEmulator({ apiKey: API_KEY, strictBodies: true });
});

afterAll(async () => {
  await tearDownInstalled({ op, namespace: ns.name, emulator, admin });
  // Leave the cluster as the base installs it, for the suites that follow.
  await applyKustomization();
});

describe("the single-namespace overlay", () => {
  it("gives the ServiceAccount its rights in the watched namespace only", async () => {
    expect(await canI(sa.path, ["list", "secrets", "-n", ns.name])).toBe(true);
    expect(await canI(sa.path, ["patch", "sandboxes.agentcompute.dev", "--subresource=status", "-n", ns.name])).toBe(true);
    expect(await canI(sa.path, ["list", "secrets", "-A"])).toBe(false);
    expect(await canI(sa.path, ["list", "secrets", "-n", "default"])).toBe(false);
    expect(await canI(sa.path, ["list", "connections.agentcompute.dev", "-n", "default"])).toBe(false);
  });

  it("is enough for the operator to bring resources to Ready and delete them, never refused", async () => {
    op = await startOperatorAs({ kubeConfig: sa.kubeConfig, namespaces: [ns.name] });
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: sbx}
spec: {tier: standard, skills: [notes], ttlSeconds: 600}
---
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: notes}
spec: {content: "# Notes"}
---
${connectionManifest(ns.name, emulator)}`, ns.name);
    await waitForReady(stack, "connections", "default");
    await waitForReady(stack, "skills", "notes");
    const sbx = await waitForReady(stack, "sandboxes", "sbx");
    expect(emulator.state.vms.get(sbx.status?.vmId as string)?.state).toBe("allocated");

    await kubectlOk(["delete", "sandbox/sbx", "skill/notes", "--wait=true", "--timeout=30s"], { namespace: ns.name });
    expect(emulator.state.vms.get(sbx.status?.vmId as string)).toBeUndefined();
    expect(emulator.state.skills.get("notes")).toBeUndefined();
    expect(refusedLines(op.logs)).toEqual([]);
  });
});
