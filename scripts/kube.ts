// `npm run kube:up` / `npm run kube:down`: the command line of the local kube-apiserver.
// Everything it does is in dev/kube-apiserver.ts (which TypeScript callers import).
//
//   tsx scripts/kube.ts up   [--port N] [--min-request-timeout S] [--etcd-compaction-interval D]
//                            [--no-controllers] [--state-dir DIR] [--fresh]
//   tsx scripts/kube.ts down [--keep-data] [--state-dir DIR]
//   tsx scripts/kube.ts status | build | env
import { buildKubeApiserver, kubeDown, kubePaths, kubeStatus, kubeUp, type KubePathOptions } from "../dev/kube-apiserver.js";

const USAGE = `usage: tsx scripts/kube.ts <command> [options]

commands:
  up       build if needed, start in the background, wait for /readyz
             --port N                      secure port (default: previous one, else free)
             --min-request-timeout S       apiserver --min-request-timeout (default 1800)
             --etcd-compaction-interval D  apiserver --etcd-compaction-interval (default 5m)
             --no-controllers              do not run the garbage-collector/namespace controllers
             --apiserver-arg FLAG          extra kube-apiserver flag (repeatable)
             --fresh                       discard data kept by 'down --keep-data'
  down     stop and delete the data dir
             --keep-data                   keep etcd data/certs/port for the next 'up'
  status   print whether it runs and is healthy (exit 1 if not)
  build    only build the binary
  env      print 'export KUBECONFIG=...'
common:    --state-dir DIR (default .cache/kube) for an independent second instance`;

interface CliArgs {
  command: string;
  flags: Map<string, string[]>;
}

const BOOLEAN_FLAGS = new Set(["keep-data", "no-controllers", "fresh", "force", "help"]);

function parseCli(argv: string[]): CliArgs {
  const [command = "help", ...rest] = argv;
  const flags = new Map<string, string[]>();
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i] ?? "";
    if (!arg.startsWith("--")) throw new Error(`unexpected argument '${arg}'\n${USAGE}`);
    const eq = arg.indexOf("=");
    const name = eq >= 0 ? arg.slice(2, eq) : arg.slice(2);
    let value: string;
    if (eq >= 0) value = arg.slice(eq + 1);
    else if (BOOLEAN_FLAGS.has(name)) value = "true";
    else {
      const next = rest[++i];
      if (next === undefined) throw new Error(`--${name} needs a value`);
      value = next;
    }
    flags.set(name, [...(flags.get(name) ?? []), value]);
  }
  return { command, flags };
}

function flagInt(flags: Map<string, string[]>, name: string): number | undefined {
  const v = flags.get(name)?.at(-1);
  if (v === undefined) return undefined;
  const n = Number.parseInt(v, 10);
  if (!Number.isInteger(n) || n < 0) throw new Error(`--${name} must be a non-negative integer`);
  return n;
}

async function main(argv: string[]): Promise<number> {
  const { command, flags } = parseCli(argv);
  const known = new Set([
    "port", "min-request-timeout", "etcd-compaction-interval", "no-controllers", "apiserver-arg",
    "fresh", "keep-data", "state-dir", "force", "help", "timeout",
  ]);
  for (const name of flags.keys()) if (!known.has(name)) throw new Error(`unknown option --${name}\n${USAGE}`);
  const stateDir = flags.get("state-dir")?.at(-1);
  const base: KubePathOptions = stateDir !== undefined ? { stateDir } : {};
  switch (command) {
    case "up": {
      const port = flagInt(flags, "port");
      const minRequestTimeout = flagInt(flags, "min-request-timeout");
      const compaction = flags.get("etcd-compaction-interval")?.at(-1);
      const res = await kubeUp({
        ...base,
        ...(port !== undefined ? { port } : {}),
        ...(minRequestTimeout !== undefined ? { minRequestTimeout } : {}),
        ...(compaction !== undefined ? { etcdCompactionInterval: compaction } : {}),
        controllers: !flags.has("no-controllers"),
        apiserverArgs: flags.get("apiserver-arg") ?? [],
        fresh: flags.has("fresh"),
        force: flags.has("force"),
      });
      console.log(`export KUBECONFIG=${res.kubeconfig}`);
      return 0;
    }
    case "down": {
      const timeoutSec = flagInt(flags, "timeout");
      await kubeDown({ ...base, keepData: flags.has("keep-data"), ...(timeoutSec !== undefined ? { timeoutMs: timeoutSec * 1000 } : {}) });
      return 0;
    }
    case "status": {
      const s = await kubeStatus(base);
      if (!s.running) console.log("kube-apiserver is not running");
      else console.log(`kube-apiserver pid ${s.pid}: ${s.healthy ? `healthy at ${s.server}` : "running, not ready"}`);
      return s.healthy ? 0 : 1;
    }
    case "build":
      await buildKubeApiserver({ ...base, force: flags.has("force") });
      return 0;
    case "env": {
      console.log(`export KUBECONFIG=${kubePaths(base).kubeconfig}`);
      return 0;
    }
    case "help":
    case "--help":
      console.log(USAGE);
      return 0;
    default:
      console.error(`unknown command '${command}'\n${USAGE}`);
      return 2;
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err instanceof Error ? err.message : String(err));
    process.exit(1);
  },
);
