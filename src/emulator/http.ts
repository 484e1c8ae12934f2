// Low-level HTTP plumbing: reading a bounded body, parsing it, writing a response.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { JsonObject } from "./wire.js";
import { badRequest } from "./errors.js";
import { isObject } from "./validate.js";

export const MAX_BODY_BYTES = 1 << 20;

/** The whole body, or "too_large" (read to the end, so the connection stays usable). */
export function readBody(req: IncomingMessage, limit = MAX_BODY_BYTES): Promise<Buffer | "too_large"> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limit) chunks.push(chunk);
    });
    req.on("end", () => {
      settled = true;
      resolve(size > limit ? "too_large" : Buffer.concat(chunks));
    });
    req.on("error", (err) => {
      settled = true;
      reject(err);
    });
    // A client that aborts mid-body may emit neither "end" nor "error".
    req.on("close", () => {
      if (!settled) reject(new Error("request aborted"));
    });
  });
}

/**
 * Lazily parsed JSON object body: only handlers that take a body pay for (and 400 on) it. An
 * empty body is `{}`, unless `required` names the published model of an operation whose
 * requestBody is `required: true`: then it is a 400 naming the missing body (decision 25).
 */
export function bodyParser(raw: Buffer): (required?: string) => JsonObject {
  let parsed: JsonObject | undefined;
  return (required) => {
    if (parsed) return parsed;
    const text = raw.toString("utf8");
    if (text.trim() === "") {
      if (required !== undefined) throw badRequest(`request body is required: a JSON object (${required})`);
      return (parsed = {});
    }
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      throw badRequest(`malformed JSON body: ${(err as Error).message}`);
    }
    if (!isObject(value)) throw badRequest("request body must be a JSON object");
    return (parsed = value);
  };
}

/**
 * A body written over time (a server-sent event stream, a file): `send` writes the status and
 * headers, then hands the response over. Nothing happens before `writeTo`, so an answer that is
 * never sent (a dropped connection) leaves nothing behind.
 */
export abstract class StreamBody {
  abstract readonly contentType: string;
  /** Extra headers (content-length, content-disposition, ...). */
  readonly headers: Record<string, string> = {};
  /** Write the body and end `res`; stop when `res` closes. */
  abstract writeTo(res: ServerResponse): void;
}

/** Objects go out as JSON; a string (a fault rule's raw body) goes out as is; a StreamBody streams. */
export function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.destroyed || res.writableEnded) return;
  if (body instanceof StreamBody) {
    res.writeHead(status, { "content-type": body.contentType, ...body.headers, ...headers });
    body.writeTo(res);
    return;
  }
  if (status === 204 || status === 304 || body === undefined) {
    res.writeHead(status, headers);
    res.end();
    return;
  }
  const isText = typeof body === "string";
  const text = isText ? body : JSON.stringify(body);
  res.writeHead(status, {
    "content-type": isText ? "text/plain; charset=utf-8" : "application/json",
    "content-length": String(Buffer.byteLength(text)),
    ...headers,
  });
  res.end(text);
}
