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
