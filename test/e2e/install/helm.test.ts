// The Helm chart (charts/agent-operator), with a real helm built from tools/helm (dev/helm.ts):
// it lints; it renders the same objects as manifests/ and as the single-namespace and sharded
// overlays; and `helm install` onto the real API server gives a ServiceAccount with which the
// operator makes a Connection and a Skill Ready, never refused, before `helm upgrade` narrows it
// to one namespace, then switches it to sharded mode, and `helm uninstall` removes everything
// but the CRDs.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CHART_DIR, buildHelm, helm, helmOk, helmVersion } from "../../../dev/helm.js";
import { waitCrdsEstablished } from "../../../dev/crds.js";
import { CRD_DIR } from "../../../dev/paths.js";
import { startEmulator, type Emulator } from "../../../src/emulator/index.js";
import { KubeClient } from "../../../src/runtime/kube-client.js";
import { kubectlOk, loadKubeConfig, testKubeconfig, uniqueName, useTestNamespace, waitFor } from "../support/kube.js";
import { API_KEY, apply, connectionManifest, waitForReady } from "../support/operator.js";
import {
  MANIFESTS_DIR,
  OPERATOR_NAMESPACE,
  REPO_ROOT,
  canI,
  findObject,
  kustomize,
  parseObjects,
  refusedLines,
  serviceAccountCredentials,
  startOperatorAs,
  tearDownInstalled,
  type KubeObject,
  type OperatorUnderTest,
  type PolicyRule,
} from "./support.js";

const OVERLAY_DIR = join(MANIFESTS_DIR, "overlays", "single-namespace");
const SHARDED_DIR = join(MANIFESTS_DIR, "overlays", "sharded");
const version = (JSON.parse(readFileSync(join(REPO_ROOT, "package.json"), "utf8")) as { version: string }).version;

/**
 * What may differ between the chart and manifests/, and why:
 *
 * - The Namespace object: a chart installs into the release namespace, which `helm install
 *   --create-namespace` (or the user) creates; a chart that owns its own namespace would delete
 *   it, and the release record inside it, on uninstall. docs/install.md says how to label it
 *   for the restricted Pod Security Standard, as manifests/namespace.yaml does.
 * - Helm's standard labels, on every object and on the pod template: helm.sh/chart,
 *   app.kubernetes.io/managed-by, app.kubernetes.io/instance and app.kubernetes.io/version.
 *   Selectors are not touched: they are those of manifests/, so they stay immutable-compatible.
 *
 * Nothing else: rendered as the release "agent-operator" in agent-operator-system, names and
 * namespaces are those of manifests/, and the CRDs are crds/ byte for byte.
 */
const HELM_LABELS = ["helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"];

function withoutHelmLabels(o: KubeObject): KubeObject {
  const copy = structuredClone(o);
  const strip = (labels: Record<string, string> | undefined) => {
    for (const l of HELM_LABELS) delete labels?.[l];
  };
  strip(copy.metadata.labels);
  strip((copy as { spec?: { template?: { metadata?: { labels?: Record<string, string> } } } }).spec?.template?.metadata?.labels);
  return copy;
}

const key = (o: KubeObject) => `${o.kind}/${o.metadata.namespace ?? ""}/${o.metadata.name}`;
const byKey = (objects: KubeObject[]) => new Map(objects.map((o) => [key(o), o]));

/** `helm template` of the chart as the release "agent-operator" in agent-operator-system, CRDs included. */
async function template(...args: string[]): Promise<KubeObject[]> {
  return parseObjects(await helmOk(["template", "agent-operator", CHART_DIR, "--namespace", OPERATOR_NAMESPACE, "--include-crds", ...args]));
}

/** The chart's objects equal kustomize's, but for the Namespace and Helm's labels. */
function expectSameObjects(chart: KubeObject[], kustomized: KubeObject[]): void {
  const wanted = kustomized.filter((o) => o.kind !== "Namespace");
  expect(chart.map(key).sort()).toEqual(wanted.map(key).sort());
  const rendered = byKey(chart);
  for (const o of wanted) {
    const mine = rendered.get(key(o));
    expect(mine, key(o)).toBeDefined();
    // CRDs come from crds/ as they are, with none of Helm's labels; every other object has them all.
    const helmLabels = HELM_LABELS.filter((l) => mine?.metadata.labels?.[l] !== undefined);
    expect(helmLabels, key(o)).toEqual(o.kind === "CustomResourceDefinition" ? [] : HELM_LABELS);
    expect(withoutHelmLabels(mine as KubeObject), key(o)).toEqual(o);
  }
}

interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { fieldRef?: { fieldPath: string } };
}
type Deployment = KubeObject & {
  spec: { replicas: number; template: { spec: { serviceAccountName: string; containers: Array<{ name: string; args: string[]; env: EnvVar[] }> } } };
};
type Role = KubeObject & { rules: PolicyRule[] };
type RoleBinding = KubeObject & {
  roleRef: { kind: string; name: string };
  subjects: Array<{ kind: string; name: string; namespace?: string }>;
};

/** The operator's container of the (one) Deployment among `objects`. */
function operatorContainer(objects: KubeObject[]): { name: string; replicas: number; args: string[]; env: EnvVar[] } {
  const d = objects.find((o) => o.kind === "Deployment") as Deployment | undefined;
  const c = d?.spec.template.spec.containers[0];
  if (d === undefined || c === undefined) throw new Error("no Deployment with a container among the objects");
  return { name: c.name, replicas: d.spec.replicas, args: c.args, env: c.env };
}

/**
 * `kubectl auth can-i` as a kubeconfig's user, until it gives `want`: the API server's RBAC
 * authorizer sees new or deleted bindings through its informers, a moment after helm wrote them.
 */
async function expectCan(kubeconfig: string, args: string[], want: boolean): Promise<void> {
  await waitFor(async () => (await canI(kubeconfig, args)) === want, { timeoutMs: 10_000, description: `can-i ${args.join(" ")} = ${want}` });
}

beforeAll(async () => {
  // From a cold Go module cache this downloads and compiles helm: a few minutes.
  await buildHelm({ log: (line) => console.log(`[helm] ${line}`) });
}, 1_200_000);

describe("charts/agent-operator", () => {
  it("is the chart of this version, with crds/ exactly as generated", () => {
    const chart = readFileSync(join(CHART_DIR, "Chart.yaml"), "utf8");
    expect(chart).toMatch(new RegExp(`^appVersion: "${version.replaceAll(".", "\\.")}"$`, "m"));
    expect(chart).toMatch(/^version: \d+\.\d+\.\d+/m);
    const generated = readdirSync(CRD_DIR).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml").sort();
    const inChart = readdirSync(join(CHART_DIR, "crds")).sort();
    expect(inChart).toEqual(generated);
    for (const f of generated) {
      expect(
        readFileSync(join(CHART_DIR, "crds", f), "utf8"),
        `charts/agent-operator/crds/${f} differs from crds/${f}: run \`npm run crds\` (it writes both)`,
      ).toBe(readFileSync(join(CRD_DIR, f), "utf8"));
    }
  });

  it("is linted clean by helm lint --strict, with default values, watchNamespaces, a ServiceMonitor and sharding", async () => {
    expect(await helmOk(["version", "--short"])).toMatch(new RegExp(`^${helmVersion().replaceAll(".", "\\.")}\\b`));
    for (const set of [
      [],
      ["--set", "watchNamespaces={agents,team-b}"],
      ["--set", "metrics.serviceMonitor.enabled=true"],
      ["--set", "sharding.enabled=true", "--set", "replicaCount=3"],
    ]) {
      const res = await helm(["lint", "--strict", CHART_DIR, ...set]);
      expect(res.exitCode, `helm lint ${set.join(" ")}:\n${res.stdout}${res.stderr}`).toBe(0);
      expect(res.stdout).toContain("0 chart(s) failed");
    }
  });

  it("renders with default values the objects of manifests/", async () => {
    const [chart, kustomized] = await Promise.all([template(), kustomize(MANIFESTS_DIR)]);
    expectSameObjects(chart, kustomized);
  });

  it("renders with watchNamespaces the objects of manifests/overlays/single-namespace", async () => {
    const [chart, kustomized] = await Promise.all([template("--set", "watchNamespaces={agents}"), kustomize(OVERLAY_DIR)]);
    expectSameObjects(chart, kustomized);
  });

  it("renders with sharding.enabled the objects of manifests/overlays/sharded, and without it none of them", async () => {
    const [chart, kustomized, plain] = await Promise.all([
      template("--set", "sharding.enabled=true", "--set", "replicaCount=3"),
      kustomize(SHARDED_DIR),
      template(),
    ]);
    expectSameObjects(chart, kustomized);

    // What makes it sharded, spelled out (the comparison above would also pass if the overlay lost it).
    const c = operatorContainer(chart);
    expect(c.replicas).toBe(3);
    expect(c.args).toEqual(expect.arrayContaining(["--sharding", "--leader-elect", "--leader-election-namespace=$(POD_NAMESPACE)"]));
    expect(c.env).toContainEqual({ name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } });
    // What says which process holds a member Lease (src/sharding/crash-report.ts), and the container it names is this one.
    expect(c.env).toContainEqual({ name: "POD_UID", valueFrom: { fieldRef: { fieldPath: "metadata.uid" } } });
    expect(c.env).toContainEqual({ name: "CONTAINER_NAME", value: c.name });
    const role = findObject(chart, "Role", "agent-operator-shard-members", OPERATOR_NAMESPACE) as Role;
    expect(role.rules).toEqual([
      { apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["list", "watch", "patch", "delete"] },
      { apiGroups: [""], resources: ["pods"], verbs: ["list", "watch"] },
    ]);
    expect(role.rules).toEqual((findObject(kustomized, "Role", "agent-operator-shard-members") as Role).rules);
    const binding = findObject(chart, "RoleBinding", "agent-operator-shard-members", OPERATOR_NAMESPACE) as RoleBinding;
    expect(binding.roleRef).toMatchObject({ kind: "Role", name: role.metadata.name });
    const sa = findObject(chart, "ServiceAccount", "agent-operator", OPERATOR_NAMESPACE);
    expect(binding.subjects).toEqual([{ kind: "ServiceAccount", name: sa.metadata.name, namespace: OPERATOR_NAMESPACE }]);
    findObject(chart, "Role", "agent-operator-leader-election", OPERATOR_NAMESPACE);

    // The default rendering has none of it.
    const d = operatorContainer(plain);
    expect(d.args).not.toContain("--sharding");
    expect(d.env.map((e) => e.name)).not.toContain("POD_NAME");
    expect(plain.filter((o) => o.metadata.name.endsWith("-shard-members"))).toEqual([]);
  });

  it("names the sharded mode's objects after the release, and implies leader election with it", async () => {
    // Leader election off in the values: --sharding turns it on in the operator, so its Role and
    // flags are rendered all the same, and three replicas are accepted.
    const objects = parseObjects(
      await helmOk([
        "template", "team", CHART_DIR, "--namespace", "ops",
        "--set", "sharding.enabled=true",
        "--set", "replicaCount=3",
        "--set", "leaderElection.enabled=false",
        "--set", "serviceAccount.name=operator",
      ]),
    );
    const c = operatorContainer(objects);
    expect(c.args).toEqual(expect.arrayContaining(["--sharding", "--leader-elect"]));
    findObject(objects, "Role", "team-agent-operator-leader-election", "ops");
    findObject(objects, "Role", "team-agent-operator-shard-members", "ops");
    const binding = findObject(objects, "RoleBinding", "team-agent-operator-shard-members", "ops") as RoleBinding;
    expect(binding.roleRef.name).toBe("team-agent-operator-shard-members");
    expect(binding.subjects).toEqual([{ kind: "ServiceAccount", name: "operator", namespace: "ops" }]);

    // One replica with sharding is rendered, but the NOTES say it does nothing. (`helm template`
    // leaves NOTES.txt out; a client-side dry run of `helm install` renders it, and asks the API
    // server only for its version.)
    const notes = async (replicas: number) =>
      helmOk(
        ["install", "team", CHART_DIR, "--namespace", "ops", "--dry-run=client", "--set", "sharding.enabled=true", "--set", `replicaCount=${replicas}`],
        { kubeconfig: testKubeconfig() },
      );
    const single = await notes(1);
    expect(single).toContain("sharding with one replica does nothing");
    expect(single).toMatch(/^ {2}replicas: 1$/m);
    const three = await notes(3);
    expect(three).not.toContain("does nothing");
    expect(three).toContain("each of the 3 replicas reconciles its own share");
  });

  it("applies the values it documents", async () => {
    const objects = await template(
      "--set", "watchNamespaces={team-a,team-b}",
      "--set", "image.tag=9.9.9",
      "--set", "replicaCount=3",
      "--set", "logLevel=debug",
      "--set", "leaderElection.id=my-lease",
      "--set", "extraArgs={--sync-period=5m}",
      "--set", "nodeSelector.pool=system",
      "--set", "metrics.serviceMonitor.enabled=true",
      "--set", "metrics.serviceMonitor.labels.release=prom",
    );
    const d = objects.find((o) => o.kind === "Deployment") as KubeObject & {
      spec: { replicas: number; template: { spec: { nodeSelector: unknown; containers: Array<{ image: string; args: string[] }> } } };
    };
    expect(d.spec.replicas).toBe(3);
    expect(d.spec.template.spec.nodeSelector).toEqual({ pool: "system" });
    const [c] = d.spec.template.spec.containers;
    expect(c?.image).toBe("ghcr.io/agentcompute/agent-operator:9.9.9");
    expect(c?.args).toEqual([
      "run",
      "--leader-elect",
      "--leader-election-namespace=$(POD_NAMESPACE)",
      "--leader-election-id=my-lease",
      "--metrics-bind-address=:8080",
      "--health-probe-bind-address=:8081",
      "--log-level=debug",
      "--namespace=team-a",
      "--namespace=team-b",
      "--sync-period=5m",
    ]);
    expect(objects.filter((o) => o.kind === "Role" && o.metadata.name === "agent-operator").map((o) => o.metadata.namespace)).toEqual(["team-a", "team-b"]);
    expect(objects.filter((o) => o.kind === "ClusterRoleBinding")).toEqual([]);
    const sm = objects.find((o) => o.kind === "ServiceMonitor") as KubeObject & {
      spec: { selector: { matchLabels: Record<string, string> }; endpoints: Array<{ port: string }> };
    };
    expect(sm.metadata.labels?.release).toBe("prom");
    expect(sm.spec.endpoints.map((e) => e.port)).toEqual(["metrics"]);
    const svc = objects.find((o) => o.kind === "Service");
    expect(svc?.metadata.labels).toMatchObject(sm.spec.selector.matchLabels);
    expect((await template()).filter((o) => o.kind === "ServiceMonitor")).toEqual([]);

    // A private CA bundle and a proxy (docs/install.md#egress-proxy-and-private-ca).
    const withCA = (
      await template(
        "--set-json", 'extraVolumes=[{"name":"corp-ca","configMap":{"name":"corp-ca"}}]',
        "--set-json", 'extraVolumeMounts=[{"name":"corp-ca","mountPath":"/etc/corp-ca","readOnly":true}]',
        "--set-json", 'extraEnv=[{"name":"NODE_EXTRA_CA_CERTS","value":"/etc/corp-ca/ca.crt"},{"name":"HTTPS_PROXY","value":"http://proxy:3128"}]',
      )
    ).find((o) => o.kind === "Deployment") as KubeObject & {
      spec: { template: { spec: { volumes: Array<{ name: string }>; containers: Array<{ env: Array<{ name: string }>; volumeMounts: Array<{ name: string; mountPath: string }> }> } } };
    };
    expect(withCA.spec.template.spec.volumes.map((v) => v.name)).toEqual(["tmp", "corp-ca"]);
    expect(withCA.spec.template.spec.containers[0]?.volumeMounts.map((m) => m.mountPath)).toEqual(["/tmp", "/etc/corp-ca"]);
    expect(withCA.spec.template.spec.containers[0]?.env.map((e) => e.name)).toEqual(expect.arrayContaining(["NODE_EXTRA_CA_CERTS", "HTTPS_PROXY"]));

    // Two replicas without leader election would both reconcile: the chart refuses.
    const refused = await helm(["template", "x", CHART_DIR, "--set", "leaderElection.enabled=false"]);
    expect(refused.exitCode).not.toBe(0);
    expect(refused.stderr).toContain("needs leaderElection.enabled");
    const single = await template("--set", "leaderElection.enabled=false", "--set", "replicaCount=1");
    expect(single.filter((o) => o.kind === "PodDisruptionBudget" || o.metadata.name.endsWith("-leader-election"))).toEqual([]);
    // Nor one after the other: a rolling update's surge pod would reconcile beside the old one.
    const strategy = (objects: KubeObject[]) => (objects.find((o) => o.kind === "Deployment") as KubeObject & { spec: { strategy: unknown } }).spec.strategy;
    expect(strategy(single)).toEqual({ type: "Recreate" });
    expect(strategy(objects)).toEqual({ type: "RollingUpdate", rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } });

    // A PodDisruptionBudget never blocks a drain, unless minAvailable is asked for.
    const pdb = (objects: KubeObject[]) => (objects.find((o) => o.kind === "PodDisruptionBudget") as KubeObject & { spec: Record<string, unknown> }).spec;
    expect(pdb(objects)).toMatchObject({ maxUnavailable: 1 });
    expect(pdb(objects)).not.toHaveProperty("minAvailable");
    const strict = pdb(await template("--set", "podDisruptionBudget.minAvailable=2", "--set", "replicaCount=3"));
    expect(strict).toMatchObject({ minAvailable: 2 });
    expect(strict).not.toHaveProperty("maxUnavailable");

    // Values with YAML's special characters reach the pod as they were given.
    const odd = operatorContainer(await template("--set", "nodeOptions=--max-old-space-size=512 --title=a: b", "--set", "leaderElection.id=lease: x"));
    expect(odd.env).toContainEqual({ name: "NODE_OPTIONS", value: "--max-old-space-size=512 --title=a: b" });
    expect(odd.args).toContain("--leader-election-id=lease: x");
  });
});

describe("helm install onto the API server", () => {
  const releaseNs = useTestNamespace("helm-release");
  const ns = useTestNamespace("helm-agents");
  // Not "agent-operator": the other install suites keep manifests/ applied, whose cluster-wide
  // objects have that name; Helm refuses to take over objects it did not create.
  const release = uniqueName("helm-e2e");
  const fullname = `${release}-agent-operator`;
  const kubeconfig = testKubeconfig();
  const admin = new KubeClient({ kubeConfig: loadKubeConfig() });
  const stack = { kube: admin, get namespace() { return ns.name; } };
  let emulator: Emulator | undefined;
  let op: OperatorUnderTest | undefined;
  let installed = false;

  const instanceObjects = async (kinds: string, namespaced: boolean) =>
    (JSON.parse(
      await kubectlOk(["get", kinds, ...(namespaced ? ["-n", releaseNs.name] : []), "-l", `app.kubernetes.io/instance=${release}`, "-o", "json"]),
    ) as { items: KubeObject[] }).items.map((o) => `${o.kind}/${o.metadata.name}`).sort();

  beforeAll(async () => {
    // As docs/install.md tells users: the release namespace enforces the restricted level.
    await kubectlOk(["label", "namespace", releaseNs.name, "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/warn=restricted"]);
    emulator = await startEmulator({ apiKey: API_KEY, strictBodies: true });
  });

  afterAll(async () => {
    await tearDownInstalled({ op, namespace: ns.name, emulator, admin });
    if (installed) await helm(["uninstall", release, "--namespace", releaseNs.name], { kubeconfig });
  });

  it("installs the chart into the release namespace, CRDs included, with no Pod Security warning", async () => {
    const res = await helm(["install", release, CHART_DIR, "--namespace", releaseNs.name], { kubeconfig, timeoutMs: 180_000 });
    expect(res.exitCode, res.stderr).toBe(0);
    installed = true;
    expect(res.stderr).not.toMatch(/PodSecurity|would violate/i);
    expect(res.stdout).toContain("STATUS: deployed");
    await waitCrdsEstablished({ kubeconfig });
    expect(await instanceObjects("serviceaccounts,deployments,services,poddisruptionbudgets,roles,rolebindings", true)).toEqual([
      `Deployment/${fullname}`,
      `PodDisruptionBudget/${fullname}`,
      `Role/${fullname}-leader-election`,
      `RoleBinding/${fullname}-leader-election`,
      `Service/${fullname}-metrics`,
      `ServiceAccount/${fullname}`,
    ]);
    expect(await instanceObjects("clusterroles,clusterrolebindings", false)).toEqual([
      `ClusterRole/${fullname}`,
      `ClusterRole/${fullname}-edit`,
      `ClusterRole/${fullname}-view`,
      `ClusterRoleBinding/${fullname}`,
    ]);
  });

  it("gives the operator, with its ServiceAccount's token, all it needs: a Connection and a Skill turn Ready", async () => {
    const sa = await serviceAccountCredentials({ namespace: releaseNs.name, name: fullname });
    await expectCan(sa.path, ["list", "secrets", "-A"], true);
    await expectCan(sa.path, ["update", "leases", "-n", releaseNs.name], true);
    await expectCan(sa.path, ["update", "leases", "-n", ns.name], false);

    op = await startOperatorAs({ kubeConfig: sa.kubeConfig, namespaces: [ns.name], leaseNamespace: releaseNs.name });
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: notes}
spec: {content: "# Notes"}
---
${connectionManifest(ns.name, emulator as Emulator)}`, ns.name);
    await waitForReady(stack, "connections", "default");
    await waitForReady(stack, "skills", "notes");
    expect(emulator?.state.skills.get("notes")).toBeDefined();
    expect(refusedLines(op.logs)).toEqual([]);
  });

  it("narrows the operator to the watched namespace with helm upgrade --set watchNamespaces", async () => {
    const res = await helm(["upgrade", release, CHART_DIR, "--namespace", releaseNs.name, "--set", `watchNamespaces={${ns.name}}`], { kubeconfig });
    expect(res.exitCode, res.stderr).toBe(0);
    const sa = await serviceAccountCredentials({ namespace: releaseNs.name, name: fullname });
    await expectCan(sa.path, ["list", "secrets", "-A"], false);
    await expectCan(sa.path, ["list", "secrets", "-n", ns.name], true);
    expect(await instanceObjects("clusterroles,clusterrolebindings", false)).toEqual([`ClusterRole/${fullname}-edit`, `ClusterRole/${fullname}-view`]);
    const args = JSON.parse(await kubectlOk(["get", "deployment", fullname, "-n", releaseNs.name, "-o", "jsonpath={.spec.template.spec.containers[0].args}"])) as string[];
    expect(args).toContain(`--namespace=${ns.name}`);

    // The operator (its informers already running) goes on working with the Role alone, and
    // removes what it created when the Skill goes.
    await apply(`
apiVersion: agentcompute.dev/v1alpha1
kind: Skill
metadata: {name: more-notes}
spec: {content: "# More notes"}`, ns.name);
    await waitForReady(stack, "skills", "more-notes");
    await kubectlOk(["delete", "skill/notes", "skill/more-notes", "--wait=true", "--timeout=30s"], { namespace: ns.name });
    expect(emulator?.state.skills.get("notes")).toBeUndefined();
    expect(refusedLines(op?.logs ?? [])).toEqual([]);
  });

  it("switches to sharded mode with helm upgrade --set sharding.enabled=true, its member Leases allowed in the release namespace only", async () => {
    const res = await helm(
      ["upgrade", release, CHART_DIR, "--namespace", releaseNs.name, "--reset-then-reuse-values", "--set", "sharding.enabled=true", "--set", "replicaCount=3"],
      { kubeconfig },
    );
    expect(res.exitCode, res.stderr).toBe(0);
    expect(res.stderr).not.toMatch(/PodSecurity|would violate/i);
    expect(res.stdout).toContain("each of the 3 replicas reconciles its own share");
    expect(await instanceObjects("roles,rolebindings", true)).toEqual([
      `Role/${fullname}-leader-election`,
      `Role/${fullname}-shard-members`,
      `RoleBinding/${fullname}-leader-election`,
      `RoleBinding/${fullname}-shard-members`,
    ]);
    const stored = JSON.parse(await kubectlOk(["get", "deployment", fullname, "-n", releaseNs.name, "-o", "json"])) as Deployment;
    const c = operatorContainer([stored]);
    expect(c.replicas).toBe(3);
    expect(c.args).toEqual(expect.arrayContaining(["--sharding", "--leader-elect", `--namespace=${ns.name}`]));
    // The API server defaults the fieldRef's apiVersion (v1).
    expect(c.env.find((e) => e.name === "POD_NAME")?.valueFrom?.fieldRef).toMatchObject({ fieldPath: "metadata.name" });

    // What a replica does with member Leases (docs/sharding.md), as the chart's ServiceAccount:
    // create and renew its own, the sharder lists and watches them, a stopping replica deletes
    // its own. In the release namespace only.
    const sa = await serviceAccountCredentials({ namespace: releaseNs.name, name: fullname });
    for (const verb of ["get", "create", "update", "patch", "list", "watch", "delete"]) {
      await expectCan(sa.path, [verb, "leases.coordination.k8s.io", "-n", releaseNs.name], true);
      await expectCan(sa.path, [verb, "leases.coordination.k8s.io", "-n", ns.name], false);
    }
    await expectCan(sa.path, ["list", "leases.coordination.k8s.io", "-A"], false);
    // The replicas' Pods, read for the kubelet's report of a crash (src/sharding/crash-report.ts): there only, and never written.
    for (const verb of ["list", "watch"]) {
      await expectCan(sa.path, [verb, "pods", "-n", releaseNs.name], true);
      await expectCan(sa.path, [verb, "pods", "-n", ns.name], false);
    }
    for (const verb of ["create", "patch", "delete"]) await expectCan(sa.path, [verb, "pods", "-n", releaseNs.name], false);
    await expectCan(sa.path, ["patch", "pods/status", "-n", releaseNs.name], false);
  });

  it("removes everything but the CRDs with helm uninstall", async () => {
    await kubectlOk(["delete", "connection/default", "--wait=true", "--timeout=30s"], { namespace: ns.name });
    await op?.stop();
    op = undefined;
    const res = await helm(["uninstall", release, "--namespace", releaseNs.name, "--wait"], { kubeconfig });
    expect(res.exitCode, res.stderr).toBe(0);
    installed = false;
    expect(await instanceObjects("serviceaccounts,deployments,services,poddisruptionbudgets,roles,rolebindings", true)).toEqual([]);
    expect(await instanceObjects("clusterroles,clusterrolebindings", false)).toEqual([]);
    const roles = JSON.parse(await kubectlOk(["get", "roles", "-n", ns.name, "-o", "json"])) as { items: KubeObject[] };
    expect(roles.items.map((o) => o.metadata.name)).not.toContain(fullname);
    // Helm never deletes what crds/ installed (the resources of every namespace would go with them).
    const crds = (await kubectlOk(["get", "crd", "-o", "name"])).split("\n");
    expect(crds).toContain("customresourcedefinition.apiextensions.k8s.io/skills.agentcompute.dev");
  });
});
