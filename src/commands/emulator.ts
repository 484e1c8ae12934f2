// `agent-operator emulator`: serve the local emulator of the service until SIGINT/SIGTERM.
// stdout carries exactly one line of JSON ({baseURL, authURL}) so scripts can read where it
// listens; everything else goes to stderr. The API key is never printed.
import { parseArgs } from "node:util";
import { startEmulator, type EmulatorOptions } from "../emulator/index.js";
import { usageError } from "./usage.js";

const HELP = `usage: agent-operator emulator [flags]

Serve a local emulator of the Agent Registry and Compute Service. Prints one line of JSON
{"baseURL": ..., "authURL": ...} on stdout, then serves until SIGINT or SIGTERM.

The emulator RUNS WHAT IT IS SENT (commands and code sent to its VMs) as the user running it:
never make it listen on an interface other machines can reach.

flags:
  --host <addr>            interface to listen on (default 127.0.0.1)
  --port <n>               port (default 0: a free port)
  --api-key <key>          accepted X-API-Key (default: $EMULATOR_API_KEY, else "emulator-api-key")
  --client <id:secret>     accepted client_credentials pair (repeatable)
  --org-id <id>            the caller's org (default org-emulator)
  --token-ttl <s>          token lifetime in seconds (default 900)
  --omit-expires-in        answer /token without expires_in
  --agentd-omit-empty      agentd leaves zero values out of its answers (a Go server's omitempty)
  --agentd-no-start-event  agentd's command streams carry no start event (no command id)
  --agentd-background-streams  a background command's stream goes on until the command ends
  --strict-bodies          refuse (400) request fields the published models lack, rather than drop them
  --latency <ms>           added to every response (default 0)
  --jitter <ms>            uniform extra 0..ms per response (default 0)
  --error-rate <0..1>      fraction of service calls that fail (500 or dropped connection)
  --rate-limit <rps>       requests per second over service calls; beyond it 429 + Retry-After
  --pool-size <n>          max live VMs; allocate answers 503 beyond it (default unlimited)
  --state-file <path>      load at start, save on change and on exit
  --max-page-size <n>      cap on list limits, silently (default none)
  --reject-tier <tier>     a tier allocate rejects with 400 (repeatable; default unknown-tier)
  --runtime-dir <path>     where the VMs' workspaces live (default: a temp dir, removed on exit)
  --output-limit <bytes>   output kept per command or code block (default 1048576)
  -h, --help               show this help`;

class UsageError extends Error {}

function number(flag: string, raw: string | undefined, check: (n: number) => boolean, want: string): number | undefined {
  if (raw === undefined) return undefined;
  const n = raw.trim() === "" ? NaN : Number(raw);
  if (!Number.isFinite(n) || !check(n)) throw new UsageError(`--${flag} must be ${want}, got "${raw}"`);
  return n;
}

const isInt = (n: number): boolean => Number.isInteger(n);

export function parseEmulatorArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): EmulatorOptions | "help" {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        host: { type: "string" },
        port: { type: "string" },
        "api-key": { type: "string" },
        client: { type: "string", multiple: true },
        "org-id": { type: "string" },
        "token-ttl": { type: "string" },
        "omit-expires-in": { type: "boolean" },
        "agentd-omit-empty": { type: "boolean" },
        "agentd-no-start-event": { type: "boolean" },
        "agentd-background-streams": { type: "boolean" },
        "strict-bodies": { type: "boolean" },
        latency: { type: "string" },
        jitter: { type: "string" },
        "error-rate": { type: "string" },
        "rate-limit": { type: "string" },
        "pool-size": { type: "string" },
        "state-file": { type: "string" },
        "max-page-size": { type: "string" },
        "reject-tier": { type: "string", multiple: true },
        "runtime-dir": { type: "string" },
        "output-limit": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    }));
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (values.help) return "help";

  const opts: EmulatorOptions = {};
  const set = <K extends keyof EmulatorOptions>(key: K, v: EmulatorOptions[K] | undefined): void => {
    if (v !== undefined) opts[key] = v;
  };
  set("host", values.host);
  set("port", number("port", values.port, (n) => isInt(n) && n >= 0 && n <= 65535, "an integer 0..65535"));
  const apiKey = values["api-key"] ?? env["EMULATOR_API_KEY"];
  if (apiKey === "") throw new UsageError("--api-key must not be empty");
  set("apiKey", apiKey);
  if (values.client) {
    opts.clients = values.client.map((pair) => {
      const i = pair.indexOf(":");
      if (i <= 0 || i === pair.length - 1) throw new UsageError(`--client must be <id>:<secret>, got a value without both parts`);
      return { clientId: pair.slice(0, i), clientSecret: pair.slice(i + 1) };
    });
  }
  set("orgId", values["org-id"]);
  set("tokenTTLSeconds", number("token-ttl", values["token-ttl"], (n) => isInt(n) && n > 0, "a positive integer"));
  if (values["omit-expires-in"]) opts.omitExpiresIn = true;
  if (values["agentd-omit-empty"]) opts.agentdOmitEmpty = true;
  if (values["agentd-no-start-event"]) opts.agentdNoStartEvent = true;
  if (values["agentd-background-streams"]) opts.agentdBackgroundStreams = true;
  if (values["strict-bodies"]) opts.strictBodies = true;
  set("latencyMs", number("latency", values.latency, (n) => n >= 0, "a non-negative number"));
  set("jitterMs", number("jitter", values.jitter, (n) => n >= 0, "a non-negative number"));
  set("errorRate", number("error-rate", values["error-rate"], (n) => n >= 0 && n <= 1, "a number within 0..1"));
  set("rateLimit", number("rate-limit", values["rate-limit"], (n) => n > 0, "a positive number"));
  set("poolSize", number("pool-size", values["pool-size"], (n) => isInt(n) && n >= 0, "a non-negative integer"));
  set("stateFile", values["state-file"]);
  set("maxPageSize", number("max-page-size", values["max-page-size"], (n) => isInt(n) && n > 0, "a positive integer"));
  set("rejectTiers", values["reject-tier"]);
  set("runtimeDir", values["runtime-dir"]);
  set("outputLimitBytes", number("output-limit", values["output-limit"], (n) => isInt(n) && n > 0, "a positive integer"));
  return opts;
}

export async function main(argv: string[]): Promise<number> {
  let opts: EmulatorOptions | "help";
  try {
    opts = parseEmulatorArgs(argv);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    console.error(usageError("agent-operator emulator", err));
    return 2;
  }
  if (opts === "help") {
    console.log(HELP);
    return 0;
  }

  const emulator = await startEmulator(opts);
  process.stdout.write(`${JSON.stringify({ baseURL: emulator.baseURL, authURL: emulator.authURL })}\n`);
  console.error(`agent-operator emulator: serving ${emulator.baseURL}${opts.stateFile ? ` (state file ${opts.stateFile})` : ""}`);
  if (opts.host !== undefined && !/^(127\.|::1$|\[::1\]$|localhost$)/.test(opts.host)) {
    console.error(`agent-operator emulator: WARNING: listening on ${opts.host}, not loopback; the emulator runs any command it is sent as this user`);
  }

  const signal = await new Promise<NodeJS.Signals>((resolve) => {
    process.once("SIGINT", () => resolve("SIGINT"));
    process.once("SIGTERM", () => resolve("SIGTERM"));
  });
  console.error(`agent-operator emulator: ${signal}, closing`);
  await emulator.close();
  return 0;
}
