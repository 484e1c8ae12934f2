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
    // The last one given counts (a kustomize overlay or the chart's extraArgs appends
    // --flag=false to a base that sets the flag).
    expect(flags("--leader-elect", "--leader-elect=false").leaderElect).toBe(false);
    expect(flags("--leader-elect", "-leader-elect=false", "--leader-elect").leaderElect).toBe(true);
    expect(flags("--sharding", "--sharding=false")).toMatchObject({ sharding: false, leaderElect: false });
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
    expect(() => parseDuration("5", "--sync-period")).toThrow('--sync-period: "5" is not a duration (a unit is needed: 5s?)');
    expect(() => parseDuration("-1s", "--sync-period")).toThrow('--sync-period: "-1s" is not a duration (it cannot be negative)');
  });

  it("refuses, naming the flag, what would only fail once running or mean something else than written", () => {
    // An unset variable in --namespace=$(WATCH_NS) would watch every namespace, under a Role for one.
    expect(() => flags("--namespace", "")).toThrow("--namespace: empty; leave the flag out to watch all namespaces");
    expect(() => flags("--namespace=a", "--namespace= ")).toThrow("--namespace: empty");
    expect(() => flags("--leader-election-id=")).toThrow("--leader-election-id: empty");
    expect(() => flags("--health-probe-bind-address", "127.0.0.1:99999")).toThrow("--health-probe-bind-address: port 99999 is not within 0..65535");
    expect(() => flags("--metrics-bind-address", "garbage")).toThrow('--metrics-bind-address: invalid bind address "garbage"');
    expect(flags("--metrics-bind-address", "0", "--health-probe-bind-address", "[::1]:8081")).toMatchObject({ metricsBindAddress: "0" });
    for (const n of ["1e3", "0x10", "2.0", "0"]) expect(() => flags("--concurrency", n)).toThrow(`--concurrency: "${n}" is not a whole number of at least 1`);
    expect(flags("--concurrency", "16").concurrency).toBe(16);
    // --sharding needs the leader (it assigns the shares): implied, and an explicit false refused.
    expect(flags("--sharding").leaderElect).toBe(true);
    expect(() => flags("--sharding", "--leader-elect=false")).toThrow("--leader-elect=false: --sharding needs leader election");
    expect(flags("--leader-elect=false", "--leader-elect", "--sharding").leaderElect).toBe(true); // the last one counts
    // An empty bind address is off, as "0" is.
    expect(flags("--metrics-bind-address=", "--health-probe-bind-address=0")).toMatchObject({ metricsBindAddress: "", healthProbeBindAddress: "0" });
  });
});
