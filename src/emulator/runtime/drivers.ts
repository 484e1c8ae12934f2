// The interpreters behind code contexts: a small driver per language, run as one long-lived
// process per context, that reads code blocks (one JSON line each, {"code": ...}) on its stdin
// and runs them one after another in ONE namespace, so state carries from block to block as in
// a Jupyter kernel. Output goes to the process's real stdout/stderr (so a subprocess's output
// is caught too). After each block the driver writes an end marker to both streams:
//   stdout: "\x1e" + MARK + {"status":"ok"|"error"|"interrupted","ename":..,"evalue":..} + "\n"
//   (the driver's own status; the kernel ends an interrupted block as an error, KeyboardInterrupt)
//   stderr: "\x1e" + MARK + "\n"
// MARK is a random string the emulator passes in $EMU_KERNEL_MARK (removed from the environment
// the code sees). A block is over when both markers have arrived, so no output of one block is
// ever attributed to the next. SIGINT interrupts the running block (KeyboardInterrupt) and is
// ignored between blocks. The Python driver moves its command channel off fd 0, so code that
// reads stdin reads /dev/null (the JavaScript driver cannot, and does not hand `process.stdin`
// to anything but its own reader).

export interface Driver {
  /** The language's canonical name, as a context reports it. */
  language: string;
  command: string;
  args: readonly string[];
}

// Python blocks are read as an IPython kernel (Jupyter's Python kernel) reads the commonest
// notebook syntax: a line "!cmd" runs cmd in a shell (its output streamed, as IPython's
// system()); "%pip ..." runs the kernel's own pip, "%cd DIR" changes directory, "%pwd" shows it; a
// top-level await runs on the context's event loop; display(x) shows x as the last expression
// would. Other magics are a SyntaxError, naming the magic.
const PYTHON = String.raw`
import ast, asyncio, inspect, json, os, re, shlex, signal, subprocess, sys, traceback
_mark = os.environ.pop("EMU_KERNEL_MARK", "")
_loop = asyncio.new_event_loop()

def _shell(cmd):
    sys.stdout.flush()
    sys.stderr.flush()
    subprocess.run(cmd, shell=True)

def _cd(path):
    os.chdir(os.path.expanduser(path or "~"))
    print(os.getcwd())

def display(*objs):
    for o in objs:
        if o is not None:
            print(repr(o))

_MAGICS = {"pip": lambda rest: "_shell(" + repr(shlex.quote(sys.executable) + " -m pip " + rest) + ")", "cd": lambda rest: "_cd(" + repr(rest.strip()) + ")", "pwd": lambda rest: "print(__import__('os').getcwd())"}

def _transform(code):
    # Plain Python is run as it is: a line of a valid block that starts with ! or % (a != b
    # continued, "%s" in a string) is not notebook syntax.
    try:
        ast.parse(code, "<cell>", "exec")
        return code
    except SyntaxError:
        pass
    out = []
    for line in code.split("\n"):
        m = re.match(r"^(\s*)!(?!=)(.*)$", line)
        if m:
            out.append(m.group(1) + "_shell(" + repr(m.group(2)) + ")")
            continue
        m = re.match(r"^(\s*)%(\w+)\s*(.*)$", line)
        if m:
            if m.group(2) not in _MAGICS:
                raise SyntaxError("UsageError: Line magic function %" + m.group(2) + " not found (this kernel knows %cd, %pip, %pwd)")
            out.append(m.group(1) + _MAGICS[m.group(2)](m.group(3)))
            continue
        out.append(line)
    return "\n".join(out)

def _run(code_obj):
    result = eval(code_obj, _g)
    if inspect.iscoroutine(result):
        result = _loop.run_until_complete(result)
    return result
_cmd = os.fdopen(os.dup(0), "rb")
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)
_running = False

def _on_sigint(signum, frame):
    if _running:
        raise KeyboardInterrupt()

signal.signal(signal.SIGINT, _on_sigint)
_g = {"__name__": "__main__", "__builtins__": __builtins__, "_shell": _shell, "_cd": _cd, "display": display}

def _end(status, ename="", evalue=""):
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass
    info = json.dumps({"status": status, "ename": ename, "evalue": evalue})
    os.write(1, ("\x1e" + _mark + info + "\n").encode())
    os.write(2, ("\x1e" + _mark + "\n").encode())

while True:
    try:
        line = _cmd.readline()
    except KeyboardInterrupt:
        continue
    if not line:
        break
    status, ename, evalue = "ok", "", ""
    try:
        code = _transform(json.loads(line)["code"])
        tree = ast.parse(code, "<cell>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Interactive(body=[tree.body.pop()])
        main = compile(tree, "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        tail = compile(last, "<cell>", "single", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT) if last is not None else None
        _running = True
        try:
            _run(main)
            if tail is not None:
                _run(tail)
        finally:
            _running = False
    except KeyboardInterrupt:
        status, ename = "interrupted", "KeyboardInterrupt"
        sys.stderr.write("KeyboardInterrupt\n")
    except SystemExit as e:
        status, ename, evalue = "error", "SystemExit", str(e.code)
    except SyntaxError as e:
        status, ename, evalue = "error", type(e).__name__, str(e)
        sys.stderr.write("".join(traceback.format_exception_only(type(e), e)))
    except BaseException as e:
        status, ename, evalue = "error", type(e).__name__, str(e)
        traceback.print_exception(type(e), e, e.__traceback__.tb_next if e.__traceback__ else None)
    _end(status, ename, evalue)
`;

const JAVASCRIPT = String.raw`
const vm = require("node:vm");
const fs = require("node:fs");
const util = require("node:util");
const readline = require("node:readline");
const { createRequire } = require("node:module");
const mark = process.env.EMU_KERNEL_MARK || "";
delete process.env.EMU_KERNEL_MARK;
const ctx = vm.createContext({
  console, process, Buffer, URL, URLSearchParams, TextEncoder, TextDecoder, AbortController,
  fetch, structuredClone, queueMicrotask, setTimeout, clearTimeout, setInterval, clearInterval,
  setImmediate, clearImmediate, require: createRequire(process.cwd() + "/"),
});
const end = (status, ename = "", evalue = "") => {
  fs.writeSync(1, "\x1e" + mark + JSON.stringify({ status, ename, evalue }) + "\n");
  fs.writeSync(2, "\x1e" + mark + "\n");
};
let interruptWait = null;
process.on("SIGINT", () => { if (interruptWait) interruptWait(); });
process.on("unhandledRejection", (r) => process.stderr.write("Unhandled rejection: " + (r && r.stack ? r.stack : String(r)) + "\n"));
process.on("uncaughtException", (e) => process.stderr.write("Uncaught exception: " + (e && e.stack ? e.stack : String(e)) + "\n"));
(async () => {
  for await (const line of readline.createInterface({ input: process.stdin })) {
    let status = "ok", ename = "", evalue = "";
    try {
      const code = JSON.parse(line).code;
      let value = vm.runInContext(code, ctx, { filename: "<cell>", breakOnSigint: true });
      if (value !== null && typeof value === "object" && typeof value.then === "function") {
        value = await new Promise((resolve, reject) => {
          interruptWait = () => reject(Object.assign(new Error("interrupted"), { name: "KeyboardInterrupt" }));
          value.then(resolve, reject);
        });
      }
      if (value !== undefined) process.stdout.write(util.inspect(value) + "\n");
    } catch (e) {
      const interrupted = e && (e.name === "KeyboardInterrupt" || e.code === "ERR_SCRIPT_EXECUTION_INTERRUPTED");
      status = interrupted ? "interrupted" : "error";
      ename = interrupted ? "KeyboardInterrupt" : (e && e.name) || "Error";
      evalue = interrupted ? "" : (e && e.message) || String(e);
      process.stderr.write((e && e.stack ? e.stack : String(e)) + "\n");
    } finally {
      interruptWait = null;
    }
    end(status, ename, evalue);
  }
})();
`;

const DRIVERS: Record<string, Driver> = {
  python: { language: "python", command: "python3", args: ["-u", "-c", PYTHON] },
  javascript: { language: "javascript", command: process.execPath, args: ["-e", JAVASCRIPT] },
};

const ALIASES: Record<string, string> = {
  python: "python",
  python3: "python",
  py: "python",
  javascript: "javascript",
  js: "javascript",
  node: "javascript",
  nodejs: "javascript",
};

/** The driver for a language name (case-insensitive, with aliases); undefined if unsupported. */
export function driverFor(language: string): Driver | undefined {
  const name = ALIASES[language.toLowerCase()];
  return name !== undefined ? DRIVERS[name] : undefined;
}

export const SUPPORTED_LANGUAGES = Object.keys(DRIVERS);
