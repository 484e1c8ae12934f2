// A closed output (`agent-operator plan ... | head -2`: head exits, the pipe is closed): the
// client commands (exec, logs, plan) end quietly, as a program killed by SIGPIPE does (kubectl
// and every Go program: the shell sees 141), rather than with a stack trace or "write EPIPE".
// Node ignores SIGPIPE and reports the closed pipe as an EPIPE error on the stream instead;
// this turns that error into the same exit code. exec first kills its remote command
// (whenOutputClosed), as it does on Ctrl-C.

/** 128 + SIGPIPE (13): what a shell reports for a program killed by a closed pipe. */
export const CLOSED_OUTPUT_EXIT_CODE = 141;

let installed = false;
let closed = false;
let handler: (() => void) | undefined;

/**
 * From now on, EPIPE on stdout ends the process with 141, quietly; with a handler set
 * (whenOutputClosed), the handler is called instead, once, and the command ends itself. A
 * closed stderr alone (`exec box -- make 2>&1 >build.log | grep -m1 error`) ends nothing: what
 * is said there is dropped, and the work and its output go on.
 */
export function exitOnClosedOutput(): void {
  if (installed) return;
  installed = true;
  for (const stream of [process.stdout, process.stderr]) {
    stream.on("error", (err: NodeJS.ErrnoException) => {
      // Anything else is as unexpected as it was without this listener.
      if (err.code !== "EPIPE") throw err;
      if (stream === process.stderr) return;
      const first = !closed;
      closed = true;
      if (handler === undefined) process.exit(CLOSED_OUTPUT_EXIT_CODE);
      if (first) handler();
    });
  }
}

/** Whether stdout was found closed: what is still written to it is dropped. */
export function outputClosed(): boolean {
  return closed;
}

/** Calls `fn` (once) instead of exiting when the output is found closed; returns the undo. */
export function whenOutputClosed(fn: () => void): () => void {
  handler = fn;
  return () => {
    if (handler === fn) handler = undefined;
  };
}

/**
 * Writes, and waits for a full pipe to drain, so that a slow reader slows the writer instead of
 * filling memory. Once the output is closed, the text is dropped (and a wait ends).
 */
export async function writeOut(out: NodeJS.WriteStream, text: string): Promise<void> {
  if (closed || out.destroyed) return;
  if (out.write(text)) return;
  await new Promise<void>((resolve) => {
    const done = () => {
      out.off("drain", done);
      out.off("close", done);
      out.off("error", done);
      resolve();
    };
    out.on("drain", done);
    out.on("close", done);
    out.on("error", done);
  });
}
