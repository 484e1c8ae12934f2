// The commands, and the one way a command line is dispatched to them: `agent-operator <command>`
// (src/cli.ts) and the kubectl plugin `kubectl agentcompute <command>` (src/kubectl-plugin.ts)
// offer subsets of one table. Each command's module is loaded only when called, so
// `agent-operator emulator` does not pay for the operator's Kubernetes client and vice versa.
import { readFileSync } from "node:fs";

type CommandModule = { main(argv: string[], prog?: string): Promise<number> };

const COMMANDS = {
  run: { summary: "run the operator against a cluster", load: () => import("./run.js") },
  exec: { summary: "run a command in a Sandbox's VM, streaming its output", load: () => import("./exec.js") },
  logs: { summary: "print a SandboxRun's output; -f follows it until it ends", load: () => import("./logs.js") },
  plan: { summary: "show what applying manifests would do in the service", load: () => import("./plan.js") },
  emulator: { summary: "serve a local emulator of the Agent Registry and Compute Service", load: () => import("./emulator.js") },
} satisfies Record<string, { summary: string; load: () => Promise<CommandModule> }>;

export type CommandName = keyof typeof COMMANDS;

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string };
  return pkg.version;
}

function usage(prog: string, names: readonly CommandName[]): string {
  return [
    `usage: ${prog} <command> [flags]`,
    "",
    "commands:",
    ...names.map((name) => `  ${name.padEnd(10)} ${COMMANDS[name].summary}`),
    "",
    `flags: --version, --help; \`${prog} <command> --help\` for a command's flags`,
  ].join("\n");
}

async function dispatch(prog: string, names: readonly CommandName[], argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === "--help" || name === "-h" || name === "help") {
    console.log(usage(prog, names));
    return 0;
  }
  if (name === "--version" || name === "-v" || name === "version") {
    console.log(version());
    return 0;
  }
  if (!(names as readonly string[]).includes(name)) {
    console.error(`${prog}: unknown command "${name}"\n\n${usage(prog, names)}`);
    return 2;
  }
  const mod: CommandModule = await COMMANDS[name as CommandName].load();
  return mod.main(rest, `${prog} ${name}`);
}

/** The Node.js major version the commands need (package.json's engines): their HTTP client fails on older ones, obscurely. */
export const MIN_NODE_MAJOR = 24;

/** Why this Node.js cannot run the commands, if it cannot. */
export function nodeTooOld(prog: string, version: string = process.versions.node): string | undefined {
  if (Number(version.split(".")[0]) >= MIN_NODE_MAJOR) return undefined;
  return `${prog}: needs Node.js ${MIN_NODE_MAJOR} or later, not ${version} (from a checkout, \`npm run -s dev -- <command>\` runs the Node.js ${MIN_NODE_MAJOR} that npm ci installed)`;
}

/** Runs the command line with `names` of the table; sets the exit code (1 and the message on a throw). */
export function runCommandLine(prog: string, names: readonly CommandName[]): void {
  const tooOld = nodeTooOld(prog);
  if (tooOld !== undefined) {
    console.error(tooOld);
    process.exitCode = 1;
    return;
  }
  dispatch(prog, names, process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (err: unknown) => {
      console.error(`${prog}: ${err instanceof Error ? err.message : String(err)}`);
      process.exitCode = 1;
    },
  );
}
