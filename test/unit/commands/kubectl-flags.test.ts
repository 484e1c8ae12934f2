// The client commands (plan, logs, exec) take their flags as kubectl does: a boolean as
// --flag=false or -x=false (pflag), the same way `run` takes Go's, and an empty -n (an unset
// $NS) as no -n at all, as `kubectl get pods -n ""` does (the context's namespace).
import { describe, expect, it } from "vitest";
import { parseExecFlags } from "../../../src/commands/exec.js";
import { parseLogsFlags } from "../../../src/commands/logs.js";
import { parsePlanFlags } from "../../../src/commands/plan.js";

describe("kubectl-style booleans", () => {
  it("plan: --prune=false, -R=false, --recursive=true", () => {
    expect(parsePlanFlags(["-f", "d", "--prune=false", "-R=false"])).toMatchObject({ prune: false, recursive: false });
    expect(parsePlanFlags(["-f", "d", "--prune=true", "-R=true"])).toMatchObject({ prune: true, recursive: true });
    expect(parsePlanFlags(["-f", "d", "--recursive=True", "--prune=1"])).toMatchObject({ prune: true, recursive: true });
    // The last one given counts, whichever spelling (pflag: -R and --recursive are one flag).
    expect(parsePlanFlags(["-f", "d", "-R", "--prune", "--recursive=false", "--prune=false"])).toMatchObject({ prune: false, recursive: false });
    expect(parsePlanFlags(["-f", "d", "--prune=false", "--prune"])).toMatchObject({ prune: true });
    expect(parsePlanFlags(["--help=true"])).toBe("help");
    expect(() => parsePlanFlags(["-f", "d", "--prune=maybe"])).toThrow('--prune: "maybe" is not true or false');
  });

  it("logs: --follow=false, -f=false, -f=true", () => {
    expect(parseLogsFlags(["run", "--follow=false"])).toMatchObject({ run: "run", follow: false });
    expect(parseLogsFlags(["-f=false", "run"])).toMatchObject({ follow: false });
    expect(parseLogsFlags(["-f=true", "run"])).toMatchObject({ follow: true });
    expect(parseLogsFlags(["--follow=t", "run"])).toMatchObject({ follow: true });
    // A run named as kubectl names it, by any of the kind's names.
    for (const ref of ["sandboxrun/job", "sandboxruns/job", "sbxr/job", "sbxrun.agentcompute.dev/job"]) expect(parseLogsFlags([ref])).toMatchObject({ run: "job" });
    expect(() => parseLogsFlags(["-f=sometimes", "run"])).toThrow('-f: "sometimes" is not true or false');
  });

  it("a value that looks like a boolean flag is the value of the flag before it, as pflag reads it", () => {
    // -n takes the next argument whatever it is: the namespace "-f=false", not -n with no value
    // and a dropped -f (which made the run's name the namespace and left no run named).
    expect(parseLogsFlags(["-n", "-f=false", "run"])).toMatchObject({ run: "run", follow: false, namespace: "-f=false" });
    expect(parsePlanFlags(["-l", "--prune=true", "-f", "d"])).toMatchObject({ prune: false });
    expect(parseLogsFlags(["--namespace", "team-a", "-f=true", "run"])).toMatchObject({ run: "run", follow: true, namespace: "team-a" });
  });

  it("a one-letter flag's value after = is that value (-n=team is the namespace team), as pflag reads it", () => {
    const plan = parsePlanFlags(["-f=d", "-n=team", "-o=json", "-l=app=web"]);
    expect(plan).toMatchObject({ filenames: ["d"], namespace: "team", output: "json" });
    const { selector } = plan as { selector: (labels: Record<string, string>) => boolean };
    expect([selector({ app: "web" }), selector({ app: "=web" })]).toEqual([true, false]);
    expect(parseLogsFlags(["-n=team", "run"])).toMatchObject({ run: "run", namespace: "team" });
    expect(parseExecFlags(["-n=team", "box", "--", "ls", "-n=x"])).toMatchObject({ sandbox: "box", namespace: "team", command: "ls -n=x" });
  });

  it("run: its one-letter -h=true too (Go's booleans are read from the flags it declares)", async () => {
    const { parseRunFlags } = await import("../../../src/commands/run.js");
    expect(parseRunFlags(["-h=true"])).toBe("help");
    expect(parseRunFlags(["--sharding=false", "--leader-elect=1"])).toMatchObject({ sharding: false, leaderElect: true });
  });

  it("run: the log level from $LOG_LEVEL when --log-level is not given, in any case, and a bad one named where it came from", async () => {
    const { parseRunFlags } = await import("../../../src/commands/run.js");
    const before = process.env.LOG_LEVEL;
    try {
      process.env.LOG_LEVEL = "DEBUG";
      expect(parseRunFlags([])).toMatchObject({ logLevel: "debug" });
      expect(parseRunFlags(["--log-level", "Warn"])).toMatchObject({ logLevel: "warn" });
      process.env.LOG_LEVEL = "verbose";
      expect(() => parseRunFlags([])).toThrow('--log-level (from $LOG_LEVEL): "verbose" is not one of trace, debug');
      expect(() => parseRunFlags(["--log-level=loud"])).toThrow(/^--log-level: "loud" is not one of/);
      delete process.env.LOG_LEVEL;
      expect(parseRunFlags([])).toMatchObject({ logLevel: "info" });
    } finally {
      if (before === undefined) delete process.env.LOG_LEVEL;
      else process.env.LOG_LEVEL = before;
    }
  });

  it("exec: --help=false is no help; booleans after -- are the command's", () => {
    expect(parseExecFlags(["--help=false", "box", "--", "ls", "--prune=false"])).toMatchObject({ sandbox: "box", command: "ls --prune=false" });
    expect(parseExecFlags(["-h=true"])).toBe("help");
  });
});

describe('-n "" (an unset $NS)', () => {
  it("is no -n, as kubectl takes it: the context's namespace, for plan, logs and exec", () => {
    expect(parsePlanFlags(["-f", "d", "-n", ""])).toMatchObject({ namespace: undefined });
    expect(parsePlanFlags(["-f", "d", "--namespace="])).toMatchObject({ namespace: undefined });
    expect(parseLogsFlags(["-n", "", "run"])).toMatchObject({ namespace: undefined });
    expect(parseExecFlags(["-n", "", "--context", "", "--kubeconfig", "", "box", "--", "ls"])).toMatchObject({ namespace: undefined, context: undefined, kubeconfig: undefined });
  });
});
