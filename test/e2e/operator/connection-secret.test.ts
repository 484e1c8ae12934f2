// A resource's connection Secret (the VM's or deployment's token and endpoint) is the operator's
// to keep: deleted or edited by someone else, it is written again at once, not at the next
// resync; written under a new name, the old one goes.
import { describe, expect, it } from "vitest";
import { kubectl, kubectlOk, waitFor } from "../support/kube.js";
import { apply, useStack, waitForReady } from "../support/operator.js";

// A resync far away: only the Secret's watch can bring the resource back in time.
const t = useStack("conn-secret", { syncPeriodMs: 600_000 });

async function secretData(name: string): Promise<Record<string, string> | undefined> {
  const res = await kubectl(["get", "secret", name, "-o", "json"], { namespace: t.namespace });
  if (res.exitCode !== 0) return undefined;
  const out = JSON.parse(res.stdout) as { data?: Record<string, string> };
  return Object.fromEntries(Object.entries(out.data ?? {}).map(([k, v]) => [k, Buffer.from(v, "base64").toString("utf8")]));
}

const sandbox = (secret?: string) => `
apiVersion: agentcompute.dev/v1alpha1
kind: Sandbox
metadata: {name: box}
spec: {tier: standard, ttlSeconds: 600${secret === undefined ? "" : `, writeConnectionSecretTo: {name: ${secret}}`}}`;

describe("connection Secrets", () => {
  it("are written again at once when deleted or edited by someone else", async () => {
    await apply(sandbox(), t.namespace);
    const vmId = (await waitForReady(t.stack, "sandboxes", "box")).status?.vmId as string;
    const written = await secretData("box-agentcompute");
    expect(written?.vmId).toBe(vmId);

    await kubectlOk(["delete", "secret", "box-agentcompute"], { namespace: t.namespace });
    await waitFor(async () => (await secretData("box-agentcompute"))?.vmId === vmId, { timeoutMs: 15_000, description: "the Secret written again" });

    await kubectlOk(["patch", "secret", "box-agentcompute", "--type=merge", "-p", JSON.stringify({ stringData: { vmId: "someone-elses" } })], { namespace: t.namespace });
    await waitFor(async () => (await secretData("box-agentcompute"))?.vmId === vmId, { timeoutMs: 15_000, description: "the Secret's data put back" });
  });

  it("move to a new name with writeConnectionSecretTo, the old one deleted", async () => {
    await apply(sandbox(), t.namespace);
    await waitFor(() => secretData("box-agentcompute"), { description: "the Secret under its default name" });
    await apply(sandbox("box-credentials"), t.namespace);
    const moved = await waitFor(() => secretData("box-credentials"), { timeoutMs: 15_000, description: "the Secret under its new name" });
    expect(moved.vmId).toBeTruthy();
    await waitFor(async () => (await secretData("box-agentcompute")) === undefined, { timeoutMs: 15_000, description: "the old Secret deleted" });
  });

  it("are never written into a Secret that is not the resource's, even one left out of the operator's cache", async () => {
    // A Helm release's Secret (not cached) under the name the Sandbox would write.
    await kubectlOk(["create", "secret", "generic", "other-agentcompute", "--type=helm.sh/release.v1", "--from-literal=release=H4sIAAAA"], { namespace: t.namespace });
    await apply(sandbox().replace("name: box", "name: other"), t.namespace);
    await waitForReady(t.stack, "sandboxes", "other", { status: "False", reason: "SecretConflict" });
    expect(await secretData("other-agentcompute")).toEqual({ release: "H4sIAAAA" });
  });
});
