#!/usr/bin/env node
// `kubectl-agentcompute`: the kubectl plugin (`kubectl agentcompute <command>`, as krew users
// expect). kubectl finds it on PATH by its name and runs it with the arguments after
// `agentcompute`; it takes kubectl's own flags (--kubeconfig, --context, -n) itself. Each
// command is the same module as `agent-operator <command>`, loaded only when called.
import { readFileSync } from "node:fs";

const PROG = "kubectl agentcompute";

type CommandModule = { main(argv: string[], prog?: string): Promise<number> };

const commands: Record<string, { summary: string; load: () => Promise<CommandModule> }> = {
  exec: { summary: "run a command in a Sandbox's VM, streaming its output", load: () => import("./commands/exec.js") },
  plan: { summary: "show what applying manifests would do in the service", load: () => import("./commands/plan.js") },
  logs: { summary: "print a SandboxRun's output; -f follows it until it ends", load: () => import("./commands/logs.js") },
};

function usage(): string {
  const lines = Object.entries(commands).map(([name, c]) => `  ${name.padEnd(10)} ${c.summary}`);
  return [
    `usage: ${PROG} <command> [flags]`,
    "",
    "commands:",
    ...lines,
    "",
    `flags: --version, --help; \`${PROG} <command> --help\` for a command's flags`,
  ].join("\n");
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === "--help" || name === "-h" || name === "help") {
    console.log(usage());
    return 0;
  }
  if (name === "--version" || name === "-v" || name === "version") {
    const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string };
    console.log(pkg.version);
    return 0;
  }
  const command = commands[name];
  if (!command) {
    console.error(`${PROG}: unknown command "${name}"\n\n${usage()}`);
    return 2;
  }
  return (await command.load()).main(rest, `${PROG} ${name}`);
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    console.error(`${PROG}: ${err instanceof Error ? err.message : String(err)}`);
    process.exitCode = 1;
  },
);
