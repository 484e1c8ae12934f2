#!/usr/bin/env node
// The `agent-operator` command. Each sub-command lives in src/commands/<name>.ts and is
// loaded only when called, so `agent-operator emulator` does not pay for the operator's
// Kubernetes client and vice versa.
import { readFileSync } from "node:fs";

type CommandModule = { main(argv: string[]): Promise<number> };

const commands: Record<string, { summary: string; load: () => Promise<CommandModule> }> = {
  run: { summary: "run the operator against a cluster", load: () => import("./commands/run.js") },
  exec: { summary: "run a command in a Sandbox's VM, streaming its output", load: () => import("./commands/exec.js") },
  logs: { summary: "print a SandboxRun's output; -f follows it until it ends", load: () => import("./commands/logs.js") },
  plan: { summary: "show what applying manifests would do in the service", load: () => import("./commands/plan.js") },
  emulator: {
    summary: "serve a local emulator of the Agent Registry and Compute Service",
    load: () => import("./commands/emulator.js"),
  },
};

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
    version: string;
  };
  return pkg.version;
}

function usage(): string {
  const lines = Object.entries(commands).map(([name, c]) => `  ${name.padEnd(10)} ${c.summary}`);
  return [
    "usage: agent-operator <command> [flags]",
    "",
    "commands:",
    ...lines,
    "",
    "flags: --version, --help; `agent-operator <command> --help` for a command's flags",
  ].join("\n");
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === "--help" || name === "-h" || name === "help") {
    console.log(usage());
    return 0;
  }
  if (name === "--version" || name === "-v" || name === "version") {
    console.log(version());
    return 0;
  }
  const command = commands[name];
  if (!command) {
    console.error(`agent-operator: unknown command "${name}"\n\n${usage()}`);
    return 2;
  }
  const mod = await command.load();
  return mod.main(rest);
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    console.error(`agent-operator: ${err instanceof Error ? err.message : String(err)}`);
    process.exitCode = 1;
  },
);
