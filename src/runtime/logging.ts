// Structured JSON logs to stdout (pino), with secrets redacted by path.
//
// Redaction is a safety net: code must not log secrets in the first place (log error
// messages, not objects; never a Secret's data, a spec's env, or a service token).
import { pino, type Logger, type LoggerOptions } from "pino";
import { REDACTED, REDACT_PATHS } from "../lib/redact-paths.js";

export type { Logger } from "pino";

export type LogLevel = "fatal" | "error" | "warn" | "info" | "debug" | "trace" | "silent";

export interface CreateLoggerOptions {
  level?: LogLevel | string;
  /** Fields on every line (default: name "agent-operator"). */
  base?: Record<string, unknown>;
  /** Destination stream (default stdout). Tests pass a sink. */
  destination?: pino.DestinationStream;
  /** Extra redaction paths. */
  redact?: string[];
}

export function createLogger(opts: CreateLoggerOptions = {}): Logger {
  const options: LoggerOptions = {
    // In any case, as the run command takes it (LOG_LEVEL=DEBUG is often written).
    level: (opts.level ?? process.env.LOG_LEVEL ?? "info").toLowerCase(),
    base: { name: "agent-operator", ...(opts.base ?? {}) },
    // ISO timestamps read better in `kubectl logs` than epoch millis.
    timestamp: pino.stdTimeFunctions.isoTime,
    // Level as a string ("info"), which log pipelines match on more readily than 30.
    formatters: { level: (label) => ({ level: label }) },
    redact: { paths: [...REDACT_PATHS, ...(opts.redact ?? [])], censor: REDACTED },
  };
  return opts.destination ? pino(options, opts.destination) : pino(options);
}

/** A logger that drops everything (tests, libraries used without one). */
export function silentLogger(): Logger {
  return pino({ level: "silent" });
}
