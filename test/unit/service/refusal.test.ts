// refusalOf: which answers of the service are refusals, and which of them only a change of
// the spec can help (the operator reports those as Stalled).
import { describe, expect, it } from "vitest";
import { ServiceError, refusalOf } from "../../../src/service/index.js";

const http = (status: number | undefined, serviceMessage?: string, operation = "skills.create") =>
  new ServiceError({ operation, message: `${operation}: HTTP ${status}`, status, serviceMessage, retryable: false });

describe("refusalOf", () => {
  it.each([400, 413, 422])("HTTP %i: the input is refused, permanently (the same spec gets the same answer)", (status) => {
    expect(refusalOf(http(status, "why"))).toEqual({ reason: "ServiceRejected", permanent: true, message: "the service refused skills.create (HTTP " + status + "): why" });
  });

  it.each([401, 403])("HTTP %i: the credentials are refused, not permanently (they are fixed outside the resource)", (status) => {
    expect(refusalOf(http(status, "why"))).toEqual({ reason: "Unauthorized", permanent: false, message: "the service refused the credentials at skills.create (HTTP " + status + "): why" });
  });

  it("names the call and its status, with the service's words when it gave some, else in our message's", () => {
    expect(refusalOf(http(400))?.message).toBe("the service refused skills.create: HTTP 400");
  });

  it("counts the token service's answers the same way", () => {
    expect(refusalOf(http(400, "bad grant", "token"))).toMatchObject({ reason: "ServiceRejected", permanent: true });
    expect(refusalOf(http(401, "bad key", "token"))).toMatchObject({ reason: "Unauthorized", permanent: false });
  });

  it.each([404, 409, 429, 500, 502, 503, 504])("HTTP %i is not a refusal", (status) => {
    expect(refusalOf(http(status))).toBeUndefined();
  });

  it("is undefined for network failures and for anything that is not a ServiceError", () => {
    expect(refusalOf(http(undefined))).toBeUndefined();
    expect(refusalOf(Object.assign(new Error("x"), { status: 400 }))).toBeUndefined();
    expect(refusalOf("400")).toBeUndefined();
    expect(refusalOf(undefined)).toBeUndefined();
  });
});
