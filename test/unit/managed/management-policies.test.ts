import { describe, expect, it } from "vitest";
import { managementOf } from "../../../src/managed/management-policies.js";

describe("managementOf", () => {
  it("defaults to everything, with deletion left to deletionPolicy", () => {
    expect(managementOf({})).toMatchObject({ create: true, update: true, delete: true, observeOnly: false, upkeep: true });
    expect(managementOf({ deletionPolicy: "Orphan" }).delete).toBe(false);
    expect(managementOf({ managementPolicies: ["*"], deletionPolicy: "Orphan" }).delete).toBe(false);
  });

  it("[Observe] writes nothing, renews nothing", () => {
    expect(managementOf({ managementPolicies: ["Observe"] })).toMatchObject({
      create: false,
      update: false,
      delete: false,
      observeOnly: true,
      upkeep: false,
    });
    expect(managementOf({ managementPolicies: ["Observe", "LateInitialize"] }).observeOnly).toBe(true);
  });

  it("without Delete orphans whatever deletionPolicy says; without Update keeps upkeep", () => {
    expect(managementOf({ managementPolicies: ["Observe", "Create", "Update"], deletionPolicy: "Delete" }).delete).toBe(false);
    const noUpdate = managementOf({ managementPolicies: ["Observe", "Create", "Delete"] });
    expect(noUpdate).toMatchObject({ create: true, update: false, delete: true, upkeep: true, observeOnly: false });
    expect(managementOf({ managementPolicies: ["Observe", "Delete"] })).toMatchObject({ upkeep: false, observeOnly: false, delete: true });
  });

  it("names the policies as stated, for messages", () => {
    expect(managementOf({ managementPolicies: ["Observe", "Create"] }).stated).toBe("[Observe, Create]");
  });
});
