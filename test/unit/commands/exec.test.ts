// `exec`'s command line: the Sandbox and the command as a user writes them, mistakes refused as
// usage errors, several arguments arriving in the VM's shell exactly as given.
import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { UsageError, commandExitCode, parseExecFlags, processExitCode, shellQuote } from "../../../src/commands/exec.js";

describe("exec: parseExecFlags", () => {
  it("takes flags, the Sandbox and the command after --", () => {
    expect(parseExecFlags(["-n", "team-a", "--context", "dev", "box", "--cwd", "/workspace/x", "-e", "A=1", "-e", "B=x=y", "--timeout", "1m", "--", "ls", "-la"])).toEqual({
      sandbox: "box",
      command: "ls -la",
      namespace: "team-a",
      kubeconfig: undefined,
      context: "dev",
      options: { cwd: "/workspace/x", envs: { A: "1", B: "x=y" }, timeoutMs: 60_000 },
    });
  });

  it("keeps one argument as a shell command line, and accepts sandbox/NAME", () => {
    const f = parseExecFlags(["sandbox/box", "--", "echo a; exit 3"]);
    // In the workspace when --cwd is not given (the published agentd API names no default), as a SandboxRun's steps are.
    expect(f).toMatchObject({ sandbox: "box", command: "echo a; exit 3", options: { cwd: "/workspace" } });
  });

  it("leaves flags after -- to the command", () => {
    expect(parseExecFlags(["box", "--", "grep", "-n", "--", "x"])).toMatchObject({ command: "grep -n -- x", namespace: undefined });
  });

  it.each([
    [[], /name the Sandbox/],
    [["box"], /give the command after --/],
    [["box", "--"], /empty/],
    [["box", "other", "--", "ls"], /unexpected argument "other"/],
    [["--bogus", "box", "--", "ls"], /bogus/],
    [["box", "-e", "NOEQUALS", "--", "ls"], /^--env \(the 1st\): no =; give KEY=VALUE$/],
    [["box", "-e", "A=1", "-e", "=sk-live-abc", "--", "ls"], /^--env \(the 2nd\): no name before the =; give KEY=VALUE$/],
    // kubectl exec's flags: said plainly, not advised to go after -- (to the command).
    [["-it", "box", "--", "bash"], /^-it: exec has no stdin nor terminal: it runs the command and prints its output; leave -it out$/],
    [["box", "-c", "main", "--", "ls"], /^-c: a Sandbox has one VM, with no containers to choose; leave -c out$/],
    [["box", "--timeout", "soon", "--", "ls"], /--timeout/],
    // 0, or less than a millisecond, would reach the VM as no timeout at all.
    [["box", "--timeout", "0", "--", "ls"], /^--timeout: "0" is less than 1ms; give a longer one \(e\.g\. 30s\), or leave --timeout out for no timeout$/],
    [["box", "--timeout", "100us", "--", "ls"], /^--timeout: "100us" is less than 1ms/],
    [["box", "--timeout=999us", "--", "ls"], /^--timeout: "999us" is less than 1ms/],
  ])("refuses %j", (argv, message) => {
    expect(() => parseExecFlags(argv)).toThrow(UsageError);
    expect(() => parseExecFlags(argv)).toThrow(message);
  });

  it("takes a timeout of 1ms or more, in whole milliseconds", () => {
    expect(parseExecFlags(["box", "--timeout", "1ms", "--", "ls"])).toMatchObject({ options: { timeoutMs: 1 } });
    expect(parseExecFlags(["box", "--timeout", "1500us", "--", "ls"])).toMatchObject({ options: { timeoutMs: 2 } });
    expect(parseExecFlags(["box", "--timeout", "1h30m", "--", "ls"])).toMatchObject({ options: { timeoutMs: 5_400_000 } });
  });

  it("answers --help", () => {
    expect(parseExecFlags(["--help"])).toBe("help");
  });
});

describe("exec: several arguments reach sh -c as given", () => {
  it.each([["printf", "%s|", "two words", "it's", "$HOME", "*", "a\nb", ""]])("%j", (...args) => {
    const line = args.map(shellQuote).join(" ");
    expect(execFileSync("/bin/sh", ["-c", line], { encoding: "utf8" })).toBe(args.slice(2).map((a) => `${a}|`).join(""));
  });
});

describe("exec: processExitCode", () => {
  it("passes 0-255 through and never turns a failure into 0", () => {
    expect(processExitCode(0)).toBe(0);
    expect(processExitCode(3)).toBe(3);
    expect(processExitCode(255)).toBe(255);
    expect(processExitCode(256)).toBe(1);
    expect(processExitCode(257)).toBe(1);
    expect(processExitCode(-1)).toBe(255);
  });
});

describe("exec: how it ends after the VM said --timeout killed the command", () => {
  it("is 124 whatever the end carries (a Go agentd's -1, or no code), so that a script does not read a timeout as success", () => {
    expect(commandExitCode({ timedOut: true, exitCode: 124 })).toBe(124);
    expect(commandExitCode({ timedOut: true, exitCode: -1 })).toBe(124);
    expect(commandExitCode({ timedOut: true })).toBe(124);
    expect(commandExitCode({ timedOut: true, exitCode: 0 })).toBe(124);
    // Without a timeout: the command's code, none being 0.
    expect(commandExitCode({ timedOut: false, exitCode: -1 })).toBe(255);
    expect(commandExitCode({ timedOut: false })).toBe(0);
  });
});
