// The service has two error dialects: compute `{code, error_code, message}` and registry
// (and the token service) `{error, message}`. Domain code throws one ServiceError; the HTTP
// layer renders it in the dialect of the path it answers on.
import type { ComputeErrorBody, RegistryErrorBody } from "./wire.js";

export type Family = "registry" | "compute" | "auth";

export class ServiceError extends Error {
  readonly status: number;
  readonly code: string;
  readonly headers: Record<string, string>;

  constructor(status: number, code: string, message: string, headers: Record<string, string> = {}) {
    super(message);
    this.name = "ServiceError";
    this.status = status;
    this.code = code;
    this.headers = headers;
  }
}

export const badRequest = (message: string): ServiceError => new ServiceError(400, "bad_request", message);
export const notFound = (message: string): ServiceError => new ServiceError(404, "not_found", message);
export const conflict = (message: string): ServiceError => new ServiceError(409, "conflict", message);

/** The error_code / error string used when only a status is known (fault rules, random errors). */
export function defaultCode(status: number): string {
  switch (status) {
    case 400:
      return "bad_request";
    case 401:
      return "unauthorized";
    case 403:
      return "forbidden";
    case 404:
      return "not_found";
    case 405:
      return "method_not_allowed";
    case 409:
      return "conflict";
    case 413:
      return "payload_too_large";
    case 429:
      return "rate_limited";
    case 502:
      return "bad_gateway";
    case 503:
      return "service_unavailable";
    case 504:
      return "gateway_timeout";
    default:
      return status >= 500 ? "internal_error" : "error";
  }
}

export function familyOf(path: string): Family {
  if (path === "/auth" || path.startsWith("/auth/")) return "auth";
  if (path === "/registry" || path.startsWith("/registry/")) return "registry";
  return "compute";
}

export function errorBody(family: Family, status: number, code: string, message: string): ComputeErrorBody | RegistryErrorBody {
  if (family === "compute") return { code: status, error_code: code, message };
  return { error: code, message };
}
