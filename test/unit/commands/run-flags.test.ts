// `agent-operator run` takes its flags as controller-runtime's managers do (Go's flag package),
// so that manifests written for them carry over.
import { describe, expect, it } from "vitest";
import { parseRunFlags } from "../../../src/commands/run.js";
import { parseDuration } from "../../../src/lib/duration.js";

const flags = (...argv: string[]) => {
  const f = parseRunFlags(argv);
  if (f === "help") throw new Error("help");
  return f;
};

describe("agent-operator run flags", () => {
  it("takes a boolean as --flag, --flag=true or --flag=false, with one dash or two", () => {
    expect(flags("--leader-elect").leaderElect).toBe(true);
    expect(flags("--leader-elect=true", "--sharding=True").leaderElect).toBe(true);
    expect(flags("-leader-elect=1", "--sharding=false")).toMatchObject({ leaderElect: true, sharding: false });
    expect(flags("--leader-elect=false").leaderElect).toBe(false);
    expect(flags().leaderElect).toBe(false);
    expect(() => flags("--leader-elect=maybe")).toThrow('--leader-elect: "maybe" is not true or false');
    // A string flag's value that looks like a boolean flag stays its value.
    expect(flags("--leader-election-id=sharding").leaderElectionId).toBe("sharding");
  });

  it("takes Go's durations", () => {
    expect(flags("--sync-period=1h0m0s").syncPeriodMs).toBe(3_600_000);
    expect(flags("--graceful-shutdown-timeout", "0").gracefulShutdownTimeoutMs).toBe(0);
    expect(parseDuration("1m30.5s", "--x")).toBe(90_500);
    expect(parseDuration("1500us", "--x")).toBe(2);
    expect(parseDuration("2µs", "--x")).toBe(0);
    expect(parseDuration("1h0m0s0us", "--x")).toBe(3_600_000);
    expect(parseDuration(".5s", "--x")).toBe(500);
    expect(() => parseDuration("5", "--sync-period")).toThrow('--sync-period: "5" is not a duration');
    expect(() => parseDuration("-1s", "--sync-period")).toThrow("is not a duration");
  });
});
