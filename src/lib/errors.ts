// What to say about a thrown value. JavaScript lets anything be thrown; logs, conditions and
// Events want a message. Neutral library: imports nothing from the rest of src/.

/**
 * The message of a thrown value: an Error's `message`, anything else as `String(value)`.
 * With `{ labelNonError: true }` a non-Error is flagged and shown as JSON ("non-Error thrown:
 * {...}"): what a reconcile loop logs for a throw that is a bug (a "panic").
 */
export function errorMessage(err: unknown, opts: { labelNonError?: boolean } = {}): string {
  if (err instanceof Error) return err.message;
  if (opts.labelNonError !== true) return String(err);
  try {
    return `non-Error thrown: ${typeof err === "string" ? err : JSON.stringify(err)}`;
  } catch {
    return "non-Error thrown";
  }
}

/**
 * JSON.parse, failing with `fail("not JSON (…)")` rather than V8's error, which quotes the
 * text around the fault ("Unexpected token 'a', \"abc…\" is not valid JSON"): text that should
 * have been JSON may be a credential (an exec plugin that prints a bare token) or carry one (a
 * Secret's watch event, a list of Secrets, a service's answer). Its length and the fault's
 * position, where V8 names one, say enough; V8's error is not kept as the cause either.
 */
export function parseJsonOr(text: string, fail: (notJson: string) => Error): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    const at = /at position (\d+)/.exec(errorMessage(err))?.[1];
    throw fail(`not JSON (${text.length} characters${at !== undefined ? `, fault at ${at}` : ""})`);
  }
}

/** How long the failure's source asked to be left alone (a Retry-After, as `retryAfterMs` anywhere in the cause chain). */
export function retryAfterOf(err: unknown): number | undefined {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 8; e = e.cause, depth++) {
    const ms = (e as { retryAfterMs?: unknown }).retryAfterMs;
    if (typeof ms === "number" && ms > 0) return ms;
  }
  return undefined;
}

/**
 * The same failure told in other words (a message with secrets masked): a new Error without
 * the original as its cause (whose message is what is being replaced), but keeping when it asked
 * to be tried again (retryAfterOf).
 */
export function retold(err: unknown, message: string): Error {
  const retryAfterMs = retryAfterOf(err);
  return Object.assign(new Error(message), retryAfterMs === undefined ? {} : { retryAfterMs });
}
