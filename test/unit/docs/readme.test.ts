// README's Configuration and Troubleshooting against the code: every flag of `run`, and every
// condition and Event reason the controllers set, is explained; nothing explained is gone.
import { describe, expect, it } from "vitest";
import { readRepoFile, reasonsInSource, runFlags, section, tableKeys } from "./source.js";

const readme = readRepoFile("README.md");

describe("README: Troubleshooting", () => {
  const troubleshooting = section(readme, "Troubleshooting");
  const [conditionPart, eventPart] = troubleshooting.split("\n### Events\n");
  const documentedConditions = tableKeys(conditionPart ?? "");
  const documentedEvents = tableKeys((eventPart ?? "").split("\n### ")[0] ?? "");
  const source = reasonsInSource();

  it("finds the reasons in the source (the extraction works)", () => {
    for (const r of ["ConnectionNotReady", "WaitingForAgent", "ServiceRejected", "SecretConflict", "Expired", "Available"]) {
      expect(source.conditions.has(r), r).toBe(true);
    }
    for (const r of ["Created", "Deleted", "Replaced"]) expect(source.events.has(r), r).toBe(true);
  });

  it("explains every condition reason the operator sets", () => {
    const missing = [...source.conditions].filter((r) => !documentedConditions.has(r));
    expect(missing).toEqual([]);
  });

  it("explains no condition reason the operator no longer sets", () => {
    const stale = [...documentedConditions].filter((r) => !source.conditions.has(r));
    expect(stale).toEqual([]);
  });

  it("lists every Event reason, and only those", () => {
    // Authenticated is both a Ready reason and an Event; condition reasons also appear as
    // Warning Events, which the table of conditions covers.
    const eventsOnly = [...source.events].filter((r) => !source.conditions.has(r) || r === "Authenticated");
    expect([...documentedEvents].sort()).toEqual(eventsOnly.sort());
  });
});

describe("README: Configuration", () => {
  it("lists every flag of `agent-operator run`, and only those", () => {
    const flags = runFlags();
    expect(flags.length).toBeGreaterThan(8);
    const documented = [...tableKeys(section(readme, "Configuration"))].filter((k) => k.startsWith("--")).map((k) => k.split(" ")[0]);
    expect(documented.sort()).toEqual([...flags].sort());
  });
});
