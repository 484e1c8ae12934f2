// `npm start` on this machine: the local API server (the one the e2e suites share), the
// emulator, the CRDs, the examples, the operator; everything Ready; Ctrl-C stops it cleanly.
import { spawn } from "node:child_process";
import { connect } from "node:net";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";
import { kubectlOk, testKubeconfig, useTestNamespace, waitFor } from "./support/kube.js";

const ns = useTestNamespace("npm-start");
const root = fileURLToPath(new URL("../..", import.meta.url));

it("brings the examples to Ready and stops cleanly on Ctrl-C", async () => {
  const child = spawn("npm", ["start", "--silent"], {
    cwd: root,
    detached: true, // its own process group, so Ctrl-C reaches npm, tsx and node alike
    env: { ...process.env, START_NAMESPACE: ns.name, KUBECONFIG: testKubeconfig() },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout.on("data", (b: Buffer) => (out += b.toString("utf8")));
  child.stderr.on("data", (b: Buffer) => (out += b.toString("utf8")));
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  try {
    await waitFor(() => out.includes("all resources Ready"), { timeoutMs: 180_000, intervalMs: 500, description: "npm start to report all Ready" }).catch(
      (err: unknown) => {
        throw new Error(`${err instanceof Error ? err.message : String(err)}; its output:\n${out}`);
      },
    );
    expect(out).toMatch(/\d+\/\d+ Ready/);
    expect(out).toContain("export KUBECONFIG=");
    expect(out).toContain("kubectl get agentcompute");
    // Tidy up while the operator still runs, so the namespace can go afterwards.
    await kubectlOk(["delete", "-k", `${root}examples`, "--wait=true", "--timeout=60s"], { namespace: ns.name });
  } finally {
    process.kill(-(child.pid as number), "SIGINT");
  }
  const code = await Promise.race([exited, new Promise<string>((r) => setTimeout(() => r("still running"), 60_000))]);
  // npm itself ends by the signal (as in a terminal); what matters is that the stack stopped.
  expect(code === 0 || code === null).toBe(true);
  // The shared API server of the e2e suites was running before: left running, and said so.
  expect(out).toContain("stopping the operator and the emulator");
  expect(out).toContain("the kube-apiserver was running before this and is left running: `npm run kube:down` stops it");
  await waitFor(async () => !(await listening(8470)), { description: "the emulator's port to be free again" });
}, 300_000);

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: "127.0.0.1", port });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}
