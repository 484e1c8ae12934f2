#!/usr/bin/env node
// `kubectl-agentcompute`: the kubectl plugin (`kubectl agentcompute <command>`, as krew users
// expect). kubectl finds it on PATH by its name and runs it with the arguments after
// `agentcompute`; it takes kubectl's own flags (--kubeconfig, --context, -n) itself. Each
// command is the same module as `agent-operator <command>` (src/commands/table.ts).
import { runCommandLine } from "./commands/table.js";

runCommandLine("kubectl agentcompute", ["exec", "plan", "logs"]);
