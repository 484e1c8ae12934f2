// How failures are sorted (src/managed/errors.ts classify, src/service tlsErrorCode): what
// stalls (only a change of the spec helps) and what is retried with backoff.
import { describe, expect, it } from "vitest";
import { NotReadyError, StalledError, classify } from "../../../src/managed/errors.js";
import { ServiceError, tlsErrorCode } from "../../../src/service/index.js";
import { TransportError } from "../../../src/service/http.js";

const http = (status: number, retryable = false) =>
  new ServiceError({ operation: "skills.create", message: `skills.create: HTTP ${status}`, status, serviceMessage: "why", retryable });

describe("classify", () => {
  it.each([400, 413, 422])("stalls on HTTP %i: the same spec gets the same answer", (status) => {
    expect(classify(http(status))).toEqual({ kind: "stalled", reason: "ServiceRejected", message: `the service refused skills.create (HTTP ${status}): why` });
  });

  it.each([429, 500, 502, 503])("retries HTTP %i with backoff", (status) => {
    expect(classify(http(status, true))).toMatchObject({ kind: "transient", reason: "ServiceUnavailable" });
  });

  it("says what made an outcome unknown, in the client's words", () => {
    const refused = new ServiceError({ operation: "commands.run", message: "commands.run: the VM refused the command: SpawnError: no shell", retryable: false, outcomeUnknown: true });
    expect(classify(refused)).toEqual({
      kind: "transient",
      reason: "OutcomeUnknown",
      message: "commands.run: the VM refused the command: SpawnError: no shell; outcome unknown; looked up before it is tried again",
    });
    const cut = new ServiceError({ operation: "skills.create", message: "skills.create: connection lost (the request may have taken effect (outcome unknown))", retryable: true, outcomeUnknown: true });
    expect(classify(cut).message).toBe("skills.create: connection lost (the request may have taken effect (outcome unknown)); looked up before it is tried again");
  });

  it("keeps the reasons of NotReady and Stalled errors", () => {
    expect(classify(new NotReadyError("WaitingForAgent", "m"))).toEqual({ kind: "notReady", reason: "WaitingForAgent", message: "m", dependencyProgressing: false });
    expect(classify(new NotReadyError("WaitingForAgent", "m", true))).toMatchObject({ kind: "notReady", dependencyProgressing: true });
    expect(classify(new StalledError("NameTaken", "m"))).toEqual({ kind: "stalled", reason: "NameTaken", message: "m" });
  });
});

describe("tlsErrorCode", () => {
  const network = (code: string, permanent: boolean) =>
    new ServiceError({
      operation: "token",
      message: "token: failed",
      retryable: !permanent,
      cause: new TransportError("failed", "no", permanent, false, code, undefined),
    });

  it("names the verification failure of a network error", () => {
    expect(tlsErrorCode(network("DEPTH_ZERO_SELF_SIGNED_CERT", true))).toBe("DEPTH_ZERO_SELF_SIGNED_CERT");
    expect(tlsErrorCode(network("ERR_TLS_CERT_ALTNAME_INVALID", true))).toBe("ERR_TLS_CERT_ALTNAME_INVALID");
  });

  it("is undefined for other failures", () => {
    expect(tlsErrorCode(network("ECONNREFUSED", false))).toBeUndefined();
    expect(tlsErrorCode(http(500))).toBeUndefined();
    expect(tlsErrorCode(new Error("x"))).toBeUndefined();
  });
});
