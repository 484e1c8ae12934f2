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
    expect(parsePlanFlags(["--help=true"])).toBe("help");
    expect(() => parsePlanFlags(["-f", "d", "--prune=maybe"])).toThrow('--prune: "maybe" is not true or false');
  });

  it("logs: --follow=false, -f=false, -f=true", () => {
    expect(parseLogsFlags(["run", "--follow=false"])).toMatchObject({ run: "run", follow: false });
    expect(parseLogsFlags(["-f=false", "run"])).toMatchObject({ follow: false });
    expect(parseLogsFlags(["-f=true", "run"])).toMatchObject({ follow: true });
    expect(parseLogsFlags(["--follow=t", "run"])).toMatchObject({ follow: true });
    expect(() => parseLogsFlags(["-f=sometimes", "run"])).toThrow('-f: "sometimes" is not true or false');
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
