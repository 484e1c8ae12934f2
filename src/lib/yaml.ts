// Reading YAML that may hold secrets (a kubeconfig's token, a Secret's stringData) without
// quoting it: the yaml library's messages quote the token at fault ("Unresolved alias ...:
// Xy9k-prod-pw", "Block scalar header includes extra characters: |Xy9k-prod-pw") and, pretty,
// the lines around it. A fault is said here by its code, in words, and where it is.
// Neutral library: imports nothing from the rest of src/.
import { visit, type Document, type ErrorCode } from "yaml";

/** What each of the library's error codes means, in words that quote nothing of the text. */
const FAULTS: Record<ErrorCode, string> = {
  ALIAS_PROPS: "an alias (*name) carries an anchor or a tag",
  BAD_ALIAS: "an empty or ambiguous anchor (&name) or alias (*name)",
  BAD_COLLECTION_TYPE: "a tag for another kind of collection",
  BAD_DIRECTIVE: "a bad directive (%)",
  BAD_DQ_ESCAPE: "a bad escape (\\) in a double-quoted string",
  BAD_INDENT: "bad indentation, or a [ or { not closed",
  BAD_PROP_ORDER: "an anchor or a tag before its indicator (- or ?)",
  BAD_SCALAR_START: "a plain value starting with a reserved character (quote it)",
  BLOCK_AS_IMPLICIT_KEY: "a mapping or sequence where a key should be",
  BLOCK_IN_FLOW: "a block collection inside [ ] or { }",
  DUPLICATE_KEY: "a key given twice in one mapping",
  IMPOSSIBLE: "text the parser cannot read",
  KEY_OVER_1024_CHARS: "a key over 1024 characters long",
  MISSING_CHAR: "a character missing (a closing quote, a comma, a space after a colon, or a - before a sequence item)",
  MULTILINE_IMPLICIT_KEY: "a key over several lines (a missing colon, or bad indentation)",
  MULTIPLE_ANCHORS: "a node with more than one anchor",
  MULTIPLE_DOCS: "more than one document",
  MULTIPLE_TAGS: "a node with more than one tag",
  NON_STRING_KEY: "a key that is not a string",
  RESOURCE_EXHAUSTION: "too many aliases (a resource exhaustion attack?)",
  TAB_AS_INDENT: "a tab used as indentation",
  TAG_RESOLVE_FAILED: "a tag that cannot be resolved",
  UNEXPECTED_TOKEN: "unexpected characters (after a block scalar's | or >, a stray comma or bracket)",
};

const at = (pos: { line: number; col: number } | undefined) => (pos === undefined ? "" : ` at line ${pos.line}, column ${pos.col}`);

/**
 * The value of a parsed YAML document; its first error, or one met resolving it (an alias
 * naming no anchor, a merge key of no mapping), thrown as `fail("<fault in words> at line L,
 * column C")`. The library's error is not kept as the cause: it quotes the text.
 */
export function yamlValue(doc: Document, text: string, fail: (fault: string) => Error): unknown {
  const problem = doc.errors[0];
  if (problem !== undefined) throw fail(`${FAULTS[problem.code]}${at(problem.linePos?.[0])}`);
  try {
    return doc.toJS();
  } catch (err) {
    throw fail(resolveFault(doc, text, err));
  }
}

/** Why toJS failed, whose errors carry neither a code nor a place. */
function resolveFault(doc: Document, text: string, err: unknown): string {
  const message = err instanceof Error ? err.message : "";
  if (message.startsWith("Unresolved alias")) {
    let offset: number | undefined;
    visit(doc, {
      Alias(_key, node) {
        if (node.resolve(doc) !== undefined) return undefined;
        offset = node.range?.[0];
        return visit.BREAK;
      },
    });
    return `an alias (*name) names no anchor (&name) set before it${at(offset === undefined ? undefined : position(text, offset))}`;
  }
  if (message.startsWith("Excessive alias count")) return FAULTS.RESOURCE_EXHAUSTION;
  if (message.startsWith("Merge sources")) return "a merge key (<<) whose value is not a mapping (or a list of them)";
  return "a value that cannot be resolved";
}

/** Line and column (from 1) of an offset in the text. */
function position(text: string, offset: number): { line: number; col: number } {
  const before = text.slice(0, offset);
  return { line: before.split("\n").length, col: offset - before.lastIndexOf("\n") };
}
