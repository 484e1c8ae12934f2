// What a command says when its command line is wrong: the fault (naming the flag) and where the
// flags are listed, the way kubectl and git answer a typo, rather than the whole help, whose
// forty lines would push the one line that matters off the screen.
import { errorMessage } from "../lib/errors.js";

export function usageError(prog: string, err: unknown): string {
  return `${prog}: ${fault(err)}\nRun '${prog} --help' for the flags.`;
}

/**
 * node:util parseArgs's unknown-option message goes on about positionals after '--' (advice for
 * a value that starts with '-', not for a mistyped flag): said as kubectl says it.
 */
function fault(err: unknown): string {
  const message = errorMessage(err);
  const unknown = /^Unknown option '([^']+)'/.exec(message);
  if ((err as { code?: unknown }).code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" && unknown !== null) return `unknown flag: ${unknown[1] ?? ""}`;
  return message;
}
