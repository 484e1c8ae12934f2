// How a secret value may be written in text that quotes it: one list, for the service clients'
// scrubbing of error text (src/service/errors.ts, scrub) and the runs' masking of output and
// messages (src/runs/output.ts, mask), so that neither misses a form the other knows. Neutral
// library: imports nothing from the rest of src/.

/**
 * A secret as it is written: itself; inside a JSON string (escaped quotes and backslashes, and
 * `<`, `>`, `&` as \u003c, \u003e, \u0026, as Go's encoder writes them); in a URL, as a path
 * segment or a query value, as JavaScript (URLSearchParams) and Go (url.QueryEscape: `~` kept,
 * `!'()*` escaped, space as +) write them. Duplicates are left in (most values have few forms).
 */
export function writtenForms(secret: string): string[] {
  if (secret === "") return [];
  const json = JSON.stringify(secret).slice(1, -1);
  const goJson = json.replace(/[<>&]/g, (c) => `\\u00${c.charCodeAt(0).toString(16)}`);
  const uri = encodeURIComponent(secret);
  const query = new URLSearchParams({ s: secret }).toString().slice(2);
  const goQuery = uri.replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`).replace(/%20/g, "+");
  return [secret, json, goJson, uri, query, goQuery];
}
