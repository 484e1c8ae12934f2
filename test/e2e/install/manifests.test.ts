// What manifests/ renders to (`kubectl kustomize`, no API server needed): the RBAC is exactly
// the operator's verbs, the Deployment passes flags `agent-operator run` accepts and meets the
// restricted Pod Security Standard, and the overlay keeps the same rules as Roles.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { parseRunFlags } from "../../../src/commands/run.js";
import { MANIFESTS_DIR, REPO_ROOT, findObject, kustomize, type KubeObject, type PolicyRule } from "./support.js";

const OVERLAY_DIR = join(MANIFESTS_DIR, "overlays", "single-namespace");
const version = (JSON.parse(readFileSync(join(REPO_ROOT, "package.json"), "utf8")) as { version: string }).version;

/**
 * The operator's verbs, one line per resource, and why (the code that needs them):
 * informers list + watch; finalizers are a merge patch on the resource; status a merge patch
 * on /status; connection Secrets are created, patched and deleted; Events created, then
 * their count patched; a blockOwnerDeletion owner reference needs update on <owner>/finalizers.
 */
const OPERATOR_VERBS: Record<string, string[]> = {
  "agentcompute.dev/connections": ["list", "watch", "patch"],
  "agentcompute.dev/skills": ["list", "watch", "patch"],
  "agentcompute.dev/agents": ["list", "watch", "patch"],
  "agentcompute.dev/agentdeployments": ["list", "watch", "patch"],
  "agentcompute.dev/sandboxes": ["list", "watch", "patch"],
  // A finished SandboxRun is deleted after its ttlSecondsAfterFinished, as a Job is.
  "agentcompute.dev/sandboxruns": ["list", "watch", "patch", "delete"],
  "agentcompute.dev/connections/status": ["patch"],
  "agentcompute.dev/skills/status": ["patch"],
  "agentcompute.dev/agents/status": ["patch"],
  "agentcompute.dev/agentdeployments/status": ["patch"],
  "agentcompute.dev/sandboxes/status": ["patch"],
  "agentcompute.dev/sandboxruns/status": ["patch"],
  "agentcompute.dev/agentdeployments/finalizers": ["update"],
  "agentcompute.dev/sandboxes/finalizers": ["update"],
  "agentcompute.dev/sandboxruns/finalizers": ["update"],
  "core/secrets": ["list", "watch", "create", "patch", "delete"],
  // Read: Skill contentFrom, SandboxRun files; write: the output ConfigMaps runs own.
  "core/configmaps": ["list", "watch", "create", "patch"],
  "core/events": ["create", "patch"],
};

/** Rules flattened to `group/resource -> verbs` (sorted), for comparison. */
function verbsByResource(rules: PolicyRule[]): Record<string, string[]> {
  const out: Record<string, Set<string>> = {};
  for (const r of rules) {
    for (const g of r.apiGroups ?? []) {
      for (const res of r.resources ?? []) {
        const key = `${g === "" ? "core" : g}/${res}`;
        out[key] ??= new Set();
        for (const v of r.verbs) out[key].add(v);
      }
    }
  }
  return Object.fromEntries(Object.entries(out).map(([k, v]) => [k, [...v].sort()]));
}

const sorted = (m: Record<string, string[]>) => Object.fromEntries(Object.entries(m).map(([k, v]) => [k, [...v].sort()]));
const rulesOf = (o: KubeObject) => (o.rules ?? []) as PolicyRule[];

interface Container {
  name: string;
  image: string;
  args: string[];
  env?: Array<{ name: string; value?: string; valueFrom?: { fieldRef?: { fieldPath: string } } }>;
  ports: Array<{ name: string; containerPort: number }>;
  livenessProbe: { httpGet: { path: string; port: string | number } };
  readinessProbe: { httpGet: { path: string; port: string | number } };
  resources: { requests?: Record<string, string>; limits?: Record<string, string> };
  securityContext: Record<string, unknown>;
  volumeMounts?: Array<{ name: string; mountPath: string }>;
}
interface PodSpec {
  serviceAccountName: string;
  terminationGracePeriodSeconds: number;
  securityContext: Record<string, unknown>;
  containers: Container[];
  volumes?: Array<{ name: string; emptyDir?: object }>;
}
const podSpecOf = (d: KubeObject) => (d as unknown as { spec: { template: { spec: PodSpec } } }).spec.template.spec;

let base: KubeObject[];
let overlay: KubeObject[];

beforeAll(async () => {
  [base, overlay] = await Promise.all([kustomize(MANIFESTS_DIR), kustomize(OVERLAY_DIR)]);
});

describe("manifests/ (the base)", () => {
  it("labels every object app.kubernetes.io/name=agent-operator", () => {
    for (const o of [...base, ...overlay]) {
      expect(o.metadata.labels?.["app.kubernetes.io/name"], `${o.kind}/${o.metadata.name}`).toBe("agent-operator");
    }
  });

  it("holds no wildcard in any Role or ClusterRole", () => {
    for (const o of [...base, ...overlay].filter((x) => x.kind === "Role" || x.kind === "ClusterRole")) {
      for (const rule of rulesOf(o)) {
        const fields = [...(rule.apiGroups ?? []), ...(rule.resources ?? []), ...rule.verbs, ...(rule.nonResourceURLs ?? [])];
        expect(fields.filter((f) => f.includes("*")), `${o.kind}/${o.metadata.name}`).toEqual([]);
      }
    }
  });

  it("grants the operator exactly the verbs it uses", () => {
    expect(verbsByResource(rulesOf(findObject(base, "ClusterRole", "agent-operator")))).toEqual(sorted(OPERATOR_VERBS));
    const le = findObject(base, "Role", "agent-operator-leader-election", "agent-operator-system");
    expect(verbsByResource(rulesOf(le))).toEqual({ "coordination.k8s.io/leases": ["create", "get", "update"] });
  });

  it("binds both roles to the ServiceAccount the Deployment runs as", () => {
    const pod = podSpecOf(findObject(base, "Deployment", "agent-operator", "agent-operator-system"));
    const subject = { kind: "ServiceAccount", name: pod.serviceAccountName, namespace: "agent-operator-system" };
    findObject(base, "ServiceAccount", pod.serviceAccountName, "agent-operator-system");
    for (const [kind, name] of [["ClusterRoleBinding", "agent-operator"], ["RoleBinding", "agent-operator-leader-election"]] as const) {
      const b = findObject(base, kind, name) as KubeObject & { subjects: unknown[]; roleRef: { kind: string; name: string } };
      expect(b.subjects).toEqual([subject]);
      findObject(base, b.roleRef.kind, b.roleRef.name);
    }
  });

  it("includes the six CRDs from crds/", () => {
    const crds = base.filter((o) => o.kind === "CustomResourceDefinition").map((o) => o.metadata.name).sort();
    expect(crds).toEqual(["agentdeployments", "agents", "connections", "sandboxes", "sandboxruns", "skills"].map((p) => `${p}.agentcompute.dev`));
  });

  it("runs the image of this version, with flags `agent-operator run` accepts", () => {
    const pod = podSpecOf(findObject(base, "Deployment", "agent-operator", "agent-operator-system"));
    const [c] = pod.containers;
    expect(c?.image).toBe(`ghcr.io/agentcompute/agent-operator:${version}`);
    expect(c?.args[0]).toBe("run");
    expect(c?.args).toContain("--leader-elect");
    expect(c?.args).toContain("--leader-election-namespace=$(POD_NAMESPACE)");
    expect(c?.env?.find((e) => e.name === "POD_NAMESPACE")?.valueFrom?.fieldRef?.fieldPath).toBe("metadata.namespace");
    // The kubelet expands $(POD_NAMESPACE); the operator then parses the flags as below.
    const flags = parseRunFlags(c?.args.slice(1).map((a) => a.replace("$(POD_NAMESPACE)", "agent-operator-system")) ?? []);
    if (flags === "help") throw new Error("the Deployment asks for --help");
    expect(flags.leaderElect).toBe(true);
    expect(flags.leaderElectionNamespace).toBe("agent-operator-system");
    expect(flags.namespaces).toEqual([]);
    // SIGKILL must not come before the operator's own shutdown deadline has passed.
    expect(pod.terminationGracePeriodSeconds * 1000).toBeGreaterThan(flags.gracefulShutdownTimeoutMs + 5_000);

    const port = (name: string) => c?.ports.find((p) => p.name === name)?.containerPort;
    expect(`:${port("health")}`).toBe(flags.healthProbeBindAddress);
    expect(`:${port("metrics")}`).toBe(flags.metricsBindAddress);
    expect(c?.livenessProbe.httpGet).toEqual({ path: "/healthz", port: "health" });
    expect(c?.readinessProbe.httpGet).toEqual({ path: "/readyz", port: "health" });
  });

  it("meets the restricted Pod Security Standard and needs no writable root filesystem", () => {
    const pod = podSpecOf(findObject(base, "Deployment", "agent-operator", "agent-operator-system"));
    const [c] = pod.containers;
    expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 65532, seccompProfile: { type: "RuntimeDefault" } });
    expect(c?.securityContext).toMatchObject({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      runAsNonRoot: true,
      capabilities: { drop: ["ALL"] },
    });
    const tmp = c?.volumeMounts?.find((m) => m.mountPath === "/tmp");
    expect(pod.volumes?.find((v) => v.name === tmp?.name)?.emptyDir).toBeDefined();
    expect(c?.resources.requests).toEqual({ cpu: "100m", memory: "128Mi" });
    expect(c?.resources.limits?.memory).toBe("256Mi");
    const ns = findObject(base, "Namespace", "agent-operator-system");
    expect(ns.metadata.labels?.["pod-security.kubernetes.io/enforce"]).toBe("restricted");
  });

  it("points the metrics Service and the PodDisruptionBudget at the operator's pods", () => {
    const d = findObject(base, "Deployment", "agent-operator") as KubeObject & {
      spec: { replicas: number; selector: { matchLabels: Record<string, string> }; template: { metadata: { labels: Record<string, string> } } };
    };
    const podLabels = d.spec.template.metadata.labels;
    expect(podLabels).toMatchObject(d.spec.selector.matchLabels);
    const svc = findObject(base, "Service", "agent-operator-metrics") as KubeObject & {
      spec: { selector: Record<string, string>; ports: Array<{ port: number; targetPort: string }> };
    };
    expect(podLabels).toMatchObject(svc.spec.selector);
    expect(svc.spec.ports).toEqual([expect.objectContaining({ name: "metrics", port: 8080, targetPort: "metrics" })]);
    const pdb = findObject(base, "PodDisruptionBudget", "agent-operator") as KubeObject & {
      spec: { maxUnavailable?: number; minAvailable?: number; selector: { matchLabels: Record<string, string> } };
    };
    expect(podLabels).toMatchObject(pdb.spec.selector.matchLabels);
    // One pod may always be evicted, whatever the replicas (scaled down to one too): a drain never blocks on the operator.
    expect(pdb.spec).toMatchObject({ maxUnavailable: 1 });
    expect(pdb.spec.minAvailable).toBeUndefined();
  });
});

describe("manifests/overlays/single-namespace", () => {
  it("drops the cluster-wide role and binding, and watches only the named namespace", () => {
    expect(overlay.filter((o) => o.kind === "ClusterRoleBinding")).toEqual([]);
    expect(overlay.filter((o) => o.kind === "ClusterRole").map((o) => o.metadata.name).sort()).toEqual([
      "agent-operator-edit",
      "agent-operator-view",
    ]);
    const [c] = podSpecOf(findObject(overlay, "Deployment", "agent-operator")).containers;
    const flags = parseRunFlags(c?.args.slice(1).map((a) => a.replace("$(POD_NAMESPACE)", "agent-operator-system")) ?? []);
    if (flags === "help") throw new Error("the Deployment asks for --help");
    expect(flags.namespaces).toEqual(["agents"]);
  });

  it("grants in that namespace exactly what the base grants cluster-wide", () => {
    const role = findObject(overlay, "Role", "agent-operator", "agents");
    const clusterRole = findObject(base, "ClusterRole", "agent-operator");
    expect(verbsByResource(rulesOf(role))).toEqual(verbsByResource(rulesOf(clusterRole)));
    const binding = findObject(overlay, "RoleBinding", "agent-operator", "agents") as KubeObject & { subjects: unknown[] };
    expect(binding.subjects).toEqual([{ kind: "ServiceAccount", name: "agent-operator", namespace: "agent-operator-system" }]);
  });
});
