// `npm start`: the whole stack on this machine, no cluster or account needed. A real
// kube-apiserver (npm run kube:up), the service emulator on 127.0.0.1:8470 (the address the
// examples use), the CRDs, the examples, and the operator; progress until everything is
// Ready, then what to try next. Ctrl-C stops all three.
import { createWriteStream, mkdirSync } from "node:fs";
import { join } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import { installCrds } from "../dev/crds.js";
import { kubeDown, kubeUp } from "../dev/kube-apiserver.js";
import { kubectlOk } from "../dev/kubectl.js";
import { REPO_ROOT } from "../dev/paths.js";
import { setupOperator } from "../src/controllers/index.js";
import { startEmulator } from "../src/emulator/index.js";
import { KubeClient } from "../src/runtime/kube-client.js";
import { createLogger } from "../src/runtime/logging.js";
import { Manager } from "../src/runtime/manager.js";

const EMULATOR_PORT = Number(process.env.EMULATOR_PORT ?? 8470);
// START_NAMESPACE puts the examples in another namespace and has the operator watch only it
// (the test of this script uses it); by default the operator watches every namespace.
const NAMESPACE = process.env.START_NAMESPACE ?? "default";

function say(line: string): void {
  console.log(`[start] ${line}`);
}

interface Listed {
  items: Array<{
    kind: string;
    metadata: { name: string };
    status?: { conditions?: Array<{ type: string; status: string; reason?: string }> };
  }>;
}

async function main(): Promise<number> {
  const started = Date.now();
  // What is up so far, for Ctrl-C to stop at any point (not only once everything runs).
  const up: { kube?: Awaited<ReturnType<typeof kubeUp>>; emulator?: Awaited<ReturnType<typeof startEmulator>>; manager?: Manager; pool?: { close(): Promise<void> } } = {};
  let stopping = false;
  const stop = async (code: number) => {
    if (stopping) return;
    stopping = true;
    const parts = [...(up.manager ? ["the operator"] : []), ...(up.emulator ? ["the emulator"] : []), ...(up.kube?.started === false ? [] : ["the kube-apiserver"])];
    if (parts.length > 0) say(`stopping ${parts.length > 1 ? `${parts.slice(0, -1).join(", ")} and ${parts.at(-1) ?? ""}` : parts[0]}`);
    await up.manager?.stop();
    await up.pool?.close();
    await up.emulator?.close();
    if (up.kube?.started) await kubeDown({ log: (l) => say(l) });
    else if (up.kube !== undefined) say("the kube-apiserver was running before this and is left running: `npm run kube:down` stops it");
    process.exit(code);
  };
  let interrupted = false;
  const onSignal = () => {
    // While the API server starts, what would be stopped is not known yet: once it is up.
    if (up.kube === undefined) {
      interrupted = true;
      say("stopping once the kube-apiserver being started is up");
      return;
    }
    void stop(0);
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);

  say("bringing up a local kube-apiserver (the first run builds it from source: several minutes)");
  up.kube = await kubeUp({ log: (l) => say(l) });
  if (interrupted) await stop(0);
  const { kubeconfig } = up.kube;

  // A fresh emulator each time, like the API server's data: state kept on one side only would
  // meet resources it does not know (their names taken by objects nobody manages).
  try {
    up.emulator = await startEmulator({ port: EMULATOR_PORT });
  } catch (err) {
    if ((err as { code?: unknown }).code !== "EADDRINUSE") throw err;
    throw new Error(`port ${EMULATOR_PORT} is taken: is another \`npm start\` running? Stop it (Ctrl-C there); another port: EMULATOR_PORT=<port> (then change baseURL and authURL in examples/connection.yaml too)`, { cause: err });
  }
  const emulator = up.emulator;
  say(`service emulator on ${emulator.baseURL}`);

  say("installing the CRDs and applying examples/");
  await installCrds({ kubeconfig });
  await kubectlOk(["apply", "-n", NAMESPACE, "-k", join(REPO_ROOT, "examples")], { kubeconfig });

  const logDir = join(REPO_ROOT, ".cache");
  mkdirSync(logDir, { recursive: true });
  const logFile = join(logDir, "operator.log");
  // LOG_LEVEL as `agent-operator run` reads it (debug: every service call).
  const logger = createLogger({ level: process.env.LOG_LEVEL ?? "info", destination: createWriteStream(logFile, { flags: "a" }) });
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromFile(kubeconfig);
  const manager = new Manager({
    client: new KubeClient({ kubeConfig }),
    logger,
    namespaces: process.env.START_NAMESPACE ? [NAMESPACE] : [],
    metricsBindAddress: "127.0.0.1:0",
    healthProbeBindAddress: "127.0.0.1:0",
    handleSignals: false,
  });
  up.manager = manager;
  up.pool = setupOperator(manager, { syncPeriodMs: 60_000, concurrency: 8 }).pool;
  await manager.start();
  say(`operator running (logs: ${logFile}; metrics: http://${manager.metricsAddress()?.address ?? "?"}/metrics)`);

  let last = "";
  for (;;) {
    const listed = JSON.parse(await kubectlOk(["get", "agentcompute", "-n", NAMESPACE, "-o", "json"], { kubeconfig })) as Listed;
    const notReady = listed.items.filter((i) => i.status?.conditions?.find((c) => c.type === "Ready")?.status !== "True");
    const line = `${listed.items.length - notReady.length}/${listed.items.length} Ready${
      notReady.length > 0
        ? ` (waiting: ${notReady
            .map((i) => `${i.kind}/${i.metadata.name}${reason(i) ? ` ${reason(i)}` : ""}`)
            .join(", ")})`
        : ""
    }`;
    if (line !== last) say(line);
    last = line;
    if (listed.items.length > 0 && notReady.length === 0) break;
    await new Promise((r) => setTimeout(r, 1000));
  }
  say(`all resources Ready in ${Math.round((Date.now() - started) / 1000)} s`);
  console.log(`
Try next (in another terminal):
  export KUBECONFIG=${kubeconfig}
  kubectl get agentcompute                       # every kind at once, with Ready and ids
  kubectl describe sandbox research-sandbox      # conditions, renewals, events
  kubectl get secret research-sandbox-agentcompute -o jsonpath='{.data}'   # VM token and endpoints
  kubectl edit agent triage-bot                  # change spec.image: the deployment rolls out
  kubectl annotate agentdeployment triage-bot-prod agentcompute.dev/redeploy-at="$(date)" --overwrite
  npm run -s dev -- exec research-sandbox -- ls skills    # a command in the VM (its working directory is /workspace)
  npm run -s dev -- logs -f nightly-eval         # a SandboxRun's output
  npm run -s dev -- plan -k examples             # what applying examples/ would change now

The examples are in namespace ${NAMESPACE}; the operator's log is ${logFile} (LOG_LEVEL=debug npm start: every call).
Press Ctrl-C to stop everything.`);
  await manager.done();
  return 0;
}

function reason(i: Listed["items"][number]): string | undefined {
  return i.status?.conditions?.find((c) => c.type === "Ready")?.reason;
}

main().catch((err: unknown) => {
  console.error(`[start] failed: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
