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
 * What to say about text JSON.parse refused, without quoting it: V8's message quotes the text
 * around the fault ("Unexpected token 'a', \"abc…\" is not valid JSON"), and text that should
 * have been JSON may be a credential (an exec plugin that prints a bare token) or carry one (a
 * Secret's watch event, a list of Secrets). Its position, where V8 names one, and its length say enough.
 */
export function notJsonMessage(err: unknown, text: string): string {
  const at = /at position (\d+)/.exec(errorMessage(err))?.[1];
  return `not JSON (${text.length} characters${at !== undefined ? `, fault at ${at}` : ""})`;
}
