// An upgrade that adds validation rules must not strand what is stored already. The API server
// did not ratchet validation on status writes before Kubernetes 1.33 (kubernetes#129503; the
// tests run 1.32): a spec rule added in an upgrade refuses every status write of an object it
// would refuse, and the operator could no longer report on it. The SandboxRun template rules
// are therefore checked at creation only (creationValidations). This file installs the CRD as
// it was before them, stores a run they refuse, upgrades, and writes its status as the operator
// does. It changes a cluster-scoped CRD: e2e files run one at a time, and it puts ours back.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { toCRD } from "../../../src/api/crd.js";
import { sandboxRunKind } from "../../../src/api/sandbox-run.js";
import { installCrds } from "../../../dev/crds.js";
import { kubectl, kubectlOk, testKubeconfig, useTestNamespace, waitFor } from "../support/kube.js";

const ns = useTestNamespace("crd-upgrade");

const storedBefore = `apiVersion: agentcompute.dev/v1alpha1
kind: SandboxRun
metadata: {name: stored-before}
spec:
  sandboxTemplate: {tier: standard, deletionPolicy: Orphan, managementPolicies: [Observe, Create]}
  steps: [{name: s, command: "true"}]
`;

async function applyCRD(crd: object): Promise<void> {
  await kubectlOk(["apply", "--server-side", "--force-conflicts", "-f", "-"], { input: JSON.stringify(crd) });
  await kubectlOk(["wait", "--for=condition=Established", "--timeout=60s", `crd/${sandboxRunKind.plural}.agentcompute.dev`]);
}

beforeAll(async () => {
  await installCrds({ kubeconfig: testKubeconfig() });
});

afterAll(async () => {
  await installCrds({ kubeconfig: testKubeconfig() });
});

describe("SandboxRun CRD upgrade", () => {
  it("a run stored before the template rules keeps its status writes; a new one like it is refused", async () => {
    // The CRD has no creation rules before the upgrade, and the run is stored as it is.
    await applyCRD(toCRD({ ...sandboxRunKind, creationValidations: [] }));
    await kubectlOk(["create", "-f", "-"], { namespace: ns.name, input: storedBefore });
    await installCrds({ kubeconfig: testKubeconfig() });
    // The same spec created after the upgrade is refused, naming the fields (waited for: the
    // API server takes up a changed CRD's validation a moment after it is Established).
    const createdAfter = storedBefore.replace("stored-before", "created-after");
    const refusal = await waitFor(async () => {
      const res = await kubectl(["create", "--dry-run=server", "-f", "-"], { namespace: ns.name, input: createdAfter });
      return res.exitCode !== 0 && res.stderr;
    }, { description: "the upgraded CRD to refuse the template's fields" });
    expect(refusal).toMatch(/spec\.sandboxTemplate\.deletionPolicy: a run's own VM/);
    expect(refusal).toMatch(/spec\.sandboxTemplate\.managementPolicies: a run's own VM/);

    // The run stored before: its status is written as the operator writes it, and its metadata.
    for (const phase of ["Running", "Succeeded"]) {
      await kubectlOk(["patch", "sandboxrun", "stored-before", "--subresource", "status", "--type", "merge", "-p", JSON.stringify({ status: { phase } })], {
        namespace: ns.name,
      });
    }
    const got = JSON.parse(await kubectlOk(["get", "sandboxrun", "stored-before", "-o", "json"], { namespace: ns.name })) as { status?: { phase?: string } };
    expect(got.status?.phase).toBe("Succeeded");
    await kubectlOk(["label", "sandboxrun", "stored-before", "agentcompute.dev/test=yes"], { namespace: ns.name });
  });
});
