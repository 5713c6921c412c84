/**
 * The wire format of the lease socket, without I/O: request lines out, answers in.
 *
 * One JSON object per line (UTF-8, `\n`), at most 64 KiB a request line. Every request
 * carries an `id` its answer echoes; an answer whose `id` is not the request's is never
 * taken for its answer. Over TCP every request also carries the `token`.
 */

import { BadRequest, ProtocolError, TooLarge, errorFor } from "./errors.js";

/** Longest request line the daemon reads, without its newline. */
export const MAX_LINE = 64 * 1024;

/**
 * Longest answer line read. Answers are not bounded by the daemon (`endpoints` of a large
 * pool is one long line); this only stops a runaway peer.
 */
export const MAX_REPLY = 64 * 1024 * 1024;

/** An answer object as the daemon sent it. */
export type Reply = Record<string, unknown>;

/** A duration field: seconds, or a string the daemon reads (`"30s"`, `"2m"`, `"1500ms"`). */
export type Duration = number | string;

/**
 * One request: its op and fields (`undefined` fields are not sent), how to read a
 * successful answer, how long the daemon may take beyond the client's timeout (a lease's
 * `wait`), and, for a call that grants something, the call that gives it back when its
 * caller is gone before the answer arrives.
 */
export interface Call<T> {
  readonly op: string;
  readonly fields: Readonly<Record<string, unknown>>;
  readonly parse: (reply: Reply) => T;
  readonly waitMs: number;
  readonly undo?: (reply: Reply) => Call<unknown>;
}

/** The request line of `call`. */
export function encode(call: Call<unknown>, id: number, token: string | null): string {
  const req: Record<string, unknown> = { op: call.op };
  for (const key in call.fields) {
    const value = call.fields[key];
    if (value !== undefined && value !== null) req[key] = value;
  }
  req.id = id;
  if (token !== null) req.token = token;
  let text: string;
  try {
    text = JSON.stringify(req);
  } catch (e) {
    throw new BadRequest("bad_request", `cannot encode the ${call.op} request: ${(e as Error).message}`);
  }
  // A UTF-16 length under the limit is under it in UTF-8 too only for ASCII; count bytes
  // only when it could matter.
  if (text.length > MAX_LINE / 3 && Buffer.byteLength(text) > MAX_LINE) {
    throw new TooLarge(
      "too_large",
      `${call.op} request of ${Buffer.byteLength(text)} bytes; the daemon reads at most ${MAX_LINE}`,
    );
  }
  return text + "\n";
}

/**
 * The answer object of one line to request `id`; throws the error it carries, or
 * `ProtocolError` when it cannot be read or answers another request.
 */
export function decode(line: string, id: number): Reply {
  let reply: unknown;
  try {
    reply = JSON.parse(line);
  } catch (e) {
    throw new ProtocolError("io", `unreadable answer: ${(e as Error).message}`);
  }
  if (typeof reply !== "object" || reply === null || Array.isArray(reply)) {
    throw new ProtocolError("io", `answer is not a JSON object: ${clip(line)}`);
  }
  const obj = reply as Reply;
  const ok = obj.ok;
  const rid = obj.id;
  if (rid !== id) {
    // The daemon answers a line it could not read without an id (an over-long one): an
    // error, so nobody can take it for a success.
    if (!(rid === undefined && ok === false)) {
      throw new ProtocolError(
        "io",
        `answer to request ${JSON.stringify(rid)} arrived for request ${id}: the connection is out of step`,
      );
    }
  }
  if (ok === true) return obj;
  if (ok !== false) throw new ProtocolError("io", `answer without "ok": ${clip(line)}`);
  const err = typeof obj.error === "object" && obj.error !== null ? (obj.error as Reply) : {};
  const code = typeof err.code === "string" ? err.code : "internal";
  const message = typeof err.message === "string" ? err.message : "daemon error";
  const retry = err.retry_after_ms ?? obj.retry_after_ms;
  throw errorFor(code, message, Number.isSafeInteger(retry) ? (retry as number) : null);
}

function clip(text: string): string {
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}

const UNITS: Record<string, number> = {
  "": 1,
  s: 1,
  sec: 1,
  secs: 1,
  ms: 0.001,
  m: 60,
  min: 60,
  mins: 60,
  h: 3600,
  hr: 3600,
  hrs: 3600,
};

/** Milliseconds in a duration field, for the client's own read deadline (0 when unknown). */
export function durationMs(value: Duration | undefined): number {
  if (typeof value === "number") return Number.isFinite(value) && value > 0 ? value * 1000 : 0;
  if (typeof value !== "string") return 0;
  let total = 0;
  for (const m of value.matchAll(/([0-9.]+)\s*([a-z]*)/g)) {
    const n = Number(m[1]);
    const unit = UNITS[m[2] ?? ""];
    if (Number.isFinite(n) && unit !== undefined) total += n * unit;
  }
  return total * 1000;
}

/** A duration as sent: seconds (a finite number, at least 0) or the daemon's string form. */
export function durationField(name: string, value: Duration | undefined): Duration | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === "string") return value;
  if (typeof value === "number" && Number.isFinite(value) && value >= 0) return value;
  throw new TypeError(`${name} is seconds (a number) or a string like "30s", not ${String(value)}`);
}
