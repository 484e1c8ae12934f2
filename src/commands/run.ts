// `agent-operator run`: the operator alone, as it runs in a cluster. Flag names follow
// controller-runtime's (what operators built with kubebuilder accept), so manifests and
// muscle memory carry over.
import { parseArgs } from "node:util";
import { setupOperator } from "../controllers/index.js";
import { KubeClient } from "../runtime/kube-client.js";
import { createLogger } from "../runtime/logging.js";
import { Manager } from "../runtime/manager.js";
import { parseDuration } from "../lib/duration.js";
import { errorMessage } from "../lib/errors.js";
import { parseBindAddress } from "../runtime/probes.js";
import { goBooleans } from "./booleans.js";
import { setServiceReplica } from "../service/client.js";
import { Sharding, replicaIdentity, thisProcess } from "../sharding/index.js";
import { usageError } from "./usage.js";

const HELP = `usage: agent-operator run [flags]

Runs the operator against the cluster of --kubeconfig, else $KUBECONFIG, else ~/.kube/config,
else the in-cluster service account.

flags:
  --kubeconfig <path>                  kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)
  --namespace <ns>                     watch only this namespace; repeat for several (default: all)
  --sync-period <duration>             re-observe every resource this often, jittered (default 10m)
  --concurrency <n>                    reconciles in parallel per kind (default 8), and one more
                                       for TTL renewals alone
  --sandbox-status-interval <duration> write a Sandbox's renewals to its status at most this often (default 10m; 0: every renewal)
  --leader-elect                       elect a leader through a Lease so that only one replica acts
  --leader-election-namespace <ns>     namespace of the Lease (default: the pod's namespace)
  --leader-election-id <name>          name of the Lease (default agent-operator-leader)
  --sharding                           active-active: every replica reconciles its share of the objects (implies --leader-elect; docs/sharding.md)
  --metrics-bind-address <addr>        Prometheus /metrics (default :8080; 0 disables)
  --health-probe-bind-address <addr>   /healthz and /readyz (default :8081; 0 disables)
  --graceful-shutdown-timeout <dur>    time in-flight reconciles get on SIGTERM (default 30s; with --sharding they get no longer than the member Lease's renew deadline, 8-10s)
  --log-level <level>                  trace, debug, info, warn, error, fatal, silent (default info, or $LOG_LEVEL)
`;

export interface RunFlags {
  kubeconfig?: string;
  namespaces: string[];
  syncPeriodMs: number;
  concurrency: number;
  sandboxStatusIntervalMs: number;
  leaderElect: boolean;
  leaderElectionNamespace?: string;
  leaderElectionId: string;
  sharding: boolean;
  metricsBindAddress: string;
  healthProbeBindAddress: string;
  gracefulShutdownTimeoutMs: number;
  logLevel: string;
}

/** Parses and validates the flags; throws an Error whose message names the flag. */
export function parseRunFlags(argv: string[]): RunFlags | "help" {
  const options = {
    help: { type: "boolean", short: "h" },
    kubeconfig: { type: "string" },
    namespace: { type: "string", multiple: true },
    "sync-period": { type: "string", default: "10m" },
    concurrency: { type: "string", default: "8" },
    // The kubelet reports node status every 5 minutes (KEP-589); 10 is the sync period's
    // default, and keeps the benchmark's 60 s TTL at 0.05 status writes per renewal.
    "sandbox-status-interval": { type: "string", default: "10m" },
    "leader-elect": { type: "boolean", default: false },
    "leader-election-namespace": { type: "string" },
    "leader-election-id": { type: "string", default: "agent-operator-leader" },
    sharding: { type: "boolean", default: false },
    "metrics-bind-address": { type: "string", default: ":8080" },
    "health-probe-bind-address": { type: "string", default: ":8081" },
    "graceful-shutdown-timeout": { type: "string", default: "30s" },
    // The environment's LOG_LEVEL when the flag is not given (handy in a Deployment).
    "log-level": { type: "string" },
  } as const;
  const { values } = parseArgs({ args: goBooleans(argv, options), strict: true, options });
  if (values.help) return "help";
  const concurrency = /^\d+$/.test(values.concurrency) ? Number(values.concurrency) : NaN;
  if (!Number.isSafeInteger(concurrency) || concurrency < 1) {
    throw new Error(`--concurrency: "${values.concurrency}" is not a whole number of at least 1`);
  }
  const levels = ["trace", "debug", "info", "warn", "error", "fatal", "silent"];
  const [logLevelGiven, logLevelFrom] = values["log-level"] !== undefined ? [values["log-level"], "--log-level"] : [process.env.LOG_LEVEL ?? "info", "--log-level (from $LOG_LEVEL)"];
  // In any case, as LOG_LEVEL=DEBUG is often written.
  const logLevel = logLevelGiven.toLowerCase();
  if (!levels.includes(logLevel)) throw new Error(`${logLevelFrom}: "${logLevelGiven}" is not one of ${levels.join(", ")}`);
  // An empty value (--namespace=$(WATCH_NS) with the variable unset) would silently mean all
  // namespaces, under a Role for one.
  if ((values.namespace ?? []).some((ns) => ns.trim() === "")) throw new Error("--namespace: empty; leave the flag out to watch all namespaces");
  // goBooleans drops an explicit =false (every boolean defaults to false): read from argv.
  // The last one given counts, as for any flag.
  const noLeader = /^--?leader-elect=(0|f|false)$/i.test(argv.findLast((a) => /^--?leader-elect(=|$)/.test(a)) ?? "");
  if (values.sharding && noLeader) {
    throw new Error("--leader-elect=false: --sharding needs leader election (the leader assigns the shares); leave --leader-elect out");
  }
  if (values["leader-election-id"].trim() === "") throw new Error("--leader-election-id: empty; leave the flag out for agent-operator-leader");
  for (const flag of ["metrics-bind-address", "health-probe-bind-address"] as const) {
    if (values[flag] === "") continue; // disabled, as "0" is
    try {
      const { port } = parseBindAddress(values[flag]);
      if (port > 65_535) throw new Error(`port ${port} is not within 0..65535`);
    } catch (err) {
      throw new Error(`--${flag}: ${errorMessage(err)}`, { cause: err });
    }
  }
  const syncPeriodMs = parseDuration(values["sync-period"], "--sync-period");
  if (syncPeriodMs < 1000) throw new Error("--sync-period: must be at least 1s");
  const statusInterval = values["sandbox-status-interval"];
  const sandboxStatusIntervalMs = statusInterval === "0" ? 0 : parseDuration(statusInterval, "--sandbox-status-interval");
  return {
    kubeconfig: values.kubeconfig,
    namespaces: values.namespace ?? [],
    syncPeriodMs,
    concurrency,
    sandboxStatusIntervalMs,
    leaderElect: values["leader-elect"] || values.sharding,
    leaderElectionNamespace: values["leader-election-namespace"],
    leaderElectionId: values["leader-election-id"],
    sharding: values.sharding,
    metricsBindAddress: values["metrics-bind-address"],
    healthProbeBindAddress: values["health-probe-bind-address"],
    gracefulShutdownTimeoutMs: parseDuration(values["graceful-shutdown-timeout"], "--graceful-shutdown-timeout"),
    logLevel,
  };
}

export async function main(argv: string[]): Promise<number> {
  let flags: RunFlags | "help";
  try {
    flags = parseRunFlags(argv);
  } catch (err) {
    console.error(usageError("agent-operator run", err));
    return 2;
  }
  if (flags === "help") {
    console.log(HELP);
    return 0;
  }
  const logger = createLogger({ level: flags.logLevel });
  // Sharded mode: the replica's identity (POD_NAME, else hostname-pid) names its share, its
  // member Lease and, in the User-Agent, its calls to the service.
  const sharding = flags.sharding ? new Sharding({ identity: replicaIdentity(), leaseName: flags.leaderElectionId, logger, process: thisProcess() }) : undefined;
  if (sharding) setServiceReplica(sharding.identity);
  const client = KubeClient.fromKubeconfig(flags.kubeconfig);
  const leaseNamespace = flags.leaderElectionNamespace ?? client.currentNamespace() ?? "default";
  // The runtime's own kubeconfig loader (same resolution as kubectl: --kubeconfig, $KUBECONFIG,
  // ~/.kube/config, in-cluster): importing @kubernetes/client-node for it would cost ~60 MB of RSS.
  const manager = new Manager({
    client,
    logger,
    namespaces: flags.namespaces,
    metricsBindAddress: flags.metricsBindAddress,
    healthProbeBindAddress: flags.healthProbeBindAddress,
    gracefulShutdownTimeoutMs: flags.gracefulShutdownTimeoutMs,
    leaderElection: flags.leaderElect ? { namespace: flags.leaderElectionNamespace, name: flags.leaderElectionId } : false,
    ...sharding?.managerOptions(),
  });
  sharding?.bind(manager);
  const operator = setupOperator(manager, {
    syncPeriodMs: flags.syncPeriodMs,
    concurrency: flags.concurrency,
    sandboxStatusIntervalMs: flags.sandboxStatusIntervalMs,
    ...(sharding && { sharding: sharding.operatorOptions() }),
  });
  sharding?.attach(manager, operator, leaseNamespace);
  await manager.start();
  await sharding?.join();
  logger.info(
    {
      metrics: manager.metricsAddress()?.address,
      health: manager.healthAddress()?.address,
      namespaces: flags.namespaces.length > 0 ? flags.namespaces : "all",
      leaderElection: flags.leaderElect,
      ...(sharding && { sharding: true, identity: sharding.identity }),
    },
    "operator started",
  );
  const reason = await manager.done();
  const code = reason === "error" || reason === "leadership-lost" ? 1 : 0;
  if (manager.abandonedWork()) {
    // Reconciles that outlived --graceful-shutdown-timeout were abandoned, not ended: the
    // process ends now, as controller-runtime's does, so that none writes after its Lease has
    // run out. Not after closing the service clients: that waits for the calls in flight.
    logger.warn({ reason }, "operator stopped; ending the process under reconciles that outlived the grace period");
    process.exit(code);
  }
  await operator.pool.close();
  logger.info({ reason }, "operator stopped");
  return code;
}
