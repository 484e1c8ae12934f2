#!/usr/bin/env node
// The `agent-operator` command. Each sub-command lives in src/commands/<name>.ts; the table and
// the dispatch are src/commands/table.ts, shared with the kubectl plugin.
import { runCommandLine } from "./commands/table.js";

runCommandLine("agent-operator", ["run", "exec", "logs", "plan", "emulator"]);
