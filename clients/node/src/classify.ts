/**
 * What an error or an HTTP status seen through a proxy says about the proxy: the reason
 * and phase the daemon understands, or null when it blames nobody (a bug in the caller's
 * code, a 404). Node's own network errors are recognised by their `code`, walking
 * `cause` and `AggregateError` chains (undici's `fetch failed`, got's `RequestError`);
 * a proxy's refusal by the status its message names; an HTTP error by its response's
 * status. Never throws.
 */

import { DEFAULT_BAN_STATUSES, type Phase, type Reason } from "./vocabulary.js";

export interface Classification {
  readonly reason: Reason;
  readonly phase: Phase | null;
  readonly status: number | null;
  readonly retryAfter: string | null;
}

/** Longest `Retry-After` copied: an HTTP date is 29 characters. */
export const MAX_RETRY_AFTER = 64;

function c(reason: Reason, phase: Phase | null, status: number | null = null, retryAfter: string | null = null): Classification {
  return { reason, phase, status, retryAfter };
}

const BY_CODE: Readonly<Record<string, Classification>> = {
  ECONNREFUSED: c("connect_refused", "connect"),
  EHOSTUNREACH: c("connect_refused", "connect"),
  ENETUNREACH: c("connect_refused", "connect"),
  ETIMEDOUT: c("connect_timeout", "connect"),
  UND_ERR_CONNECT_TIMEOUT: c("connect_timeout", "connect"),
  ERR_SOCKET_CONNECTION_TIMEOUT: c("connect_timeout", "connect"),
  ENOTFOUND: c("dns_failed", "connect"),
  EAI_AGAIN: c("dns_failed", "connect"),
  EAI_FAIL: c("dns_failed", "connect"),
  ECONNRESET: c("connection_reset", null),
  ECONNABORTED: c("connection_reset", null),
  EPIPE: c("connection_reset", null),
  UND_ERR_SOCKET: c("connection_reset", null),
  UND_ERR_CLOSED: c("connection_reset", null),
  ERR_STREAM_PREMATURE_CLOSE: c("connection_reset", "response_body"),
  UND_ERR_HEADERS_TIMEOUT: c("slow_response", "response_head"),
  UND_ERR_BODY_TIMEOUT: c("slow_response", "response_body"),
  ERR_TLS_HANDSHAKE_TIMEOUT: c("tls_failed", null),
  ERR_TLS_CERT_ALTNAME_INVALID: c("tls_failed", null),
  DEPTH_ZERO_SELF_SIGNED_CERT: c("tls_failed", null),
  SELF_SIGNED_CERT_IN_CHAIN: c("tls_failed", null),
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: c("tls_failed", null),
  UNABLE_TO_GET_ISSUER_CERT_LOCALLY: c("tls_failed", null),
  CERT_HAS_EXPIRED: c("tls_failed", null),
  CERT_NOT_YET_VALID: c("tls_failed", null),
};

/** got's timeouts name the step that ran out of time. */
const GOT_TIMEOUT_EVENTS: Readonly<Record<string, Classification>> = {
  lookup: c("dns_failed", "connect"),
  connect: c("connect_timeout", "connect"),
  socket: c("connect_timeout", "connect"),
  secureConnect: c("tls_failed", null),
  send: c("slow_response", "request"),
  response: c("slow_response", "response_head"),
  read: c("slow_response", "response_body"),
  request: c("slow_response", null),
};

/** A proxy's answer to CONNECT, as undici, got and proxy agents word it. */
const PROXY_STATUS =
  /\b(?:proxy|tunnel(?:ing)?)\b[^\n]{0,60}?(?:status(?: code)?:? |response:? \(|bad response: )([1-5][0-9][0-9])\b/i;

function safeGet(obj: unknown, key: string): unknown {
  if ((typeof obj !== "object" && typeof obj !== "function") || obj === null) return undefined;
  try {
    return (obj as Record<string, unknown>)[key];
  } catch {
    return undefined;
  }
}

function safeMessage(e: unknown): string {
  const m = safeGet(e, "message");
  return typeof m === "string" ? m : "";
}

/** A header's value from a `Headers`, a Node headers object, or a function (Playwright's `headers()`). */
export function headerOf(headers: unknown, name: string): string | null {
  try {
    if (headers === null || headers === undefined) return null;
    if (typeof (headers as { get?: unknown }).get === "function") {
      const v = (headers as { get(n: string): unknown }).get(name);
      return typeof v === "string" ? v : null;
    }
    if (typeof headers === "object") {
      const lower = name.toLowerCase();
      for (const [k, v] of Object.entries(headers as Record<string, unknown>)) {
        if (k.toLowerCase() !== lower) continue;
        if (typeof v === "string") return v;
        if (Array.isArray(v) && typeof v[0] === "string") return v[0];
      }
    }
  } catch {
    // an object whose accessors throw: no header
  }
  return null;
}

function retryAfterOf(headers: unknown): string | null {
  const v = headerOf(headers, "Retry-After")?.trim();
  return v && v.length <= MAX_RETRY_AFTER ? v : null;
}

/** The classification of an HTTP status seen through a proxy, or null. */
export function classifyStatus(
  status: number,
  headers?: unknown,
  banStatuses: readonly number[] = DEFAULT_BAN_STATUSES,
): Classification | null {
  if (status === 407 || (status === 401 && headerOf(headers, "Proxy-Authenticate") !== null)) {
    return c("proxy_auth_rejected", "proxy_handshake", status);
  }
  if (banStatuses.includes(status)) return c("destination_status", "response_head", status, retryAfterOf(headers));
  return null;
}

function proxyStatus(status: number): Classification {
  if (status === 401 || status === 407) return c("proxy_auth_rejected", "proxy_handshake", status);
  if (status === 502 || status === 504) return c("upstream_unreachable", "proxy_handshake", status);
  return c("proxy_rejected", "proxy_handshake", status);
}

/** The error and everything it wraps, outermost first. */
function chain(err: unknown, limit = 32): unknown[] {
  const out: unknown[] = [];
  const seen = new Set<unknown>();
  const todo: unknown[] = [err];
  while (todo.length > 0 && out.length < limit) {
    const e = todo.shift();
    if ((typeof e !== "object" && typeof e !== "function") || e === null || seen.has(e)) continue;
    seen.add(e);
    out.push(e);
    todo.push(safeGet(e, "cause"));
    const errors = safeGet(e, "errors");
    if (Array.isArray(errors)) todo.push(...errors);
  }
  return out;
}

function responseStatus(e: unknown, banStatuses: readonly number[]): Classification | null | undefined {
  const response = safeGet(e, "response");
  if (typeof response !== "object" || response === null) return undefined;
  const status = safeGet(response, "statusCode") ?? safeGet(response, "status");
  if (typeof status !== "number") return undefined;
  return classifyStatus(status, safeGet(response, "headers"), banStatuses);
}

function one(e: unknown, banStatuses: readonly number[]): Classification | null | undefined {
  const byResponse = responseStatus(e, banStatuses);
  if (byResponse !== undefined) return byResponse;
  const code = safeGet(e, "code");
  const event = safeGet(e, "event");
  if (safeGet(e, "name") === "TimeoutError" && typeof event === "string" && event in GOT_TIMEOUT_EVENTS) {
    return GOT_TIMEOUT_EVENTS[event];
  }
  const m = PROXY_STATUS.exec(safeMessage(e));
  if (m) return proxyStatus(Number(m[1]));
  if (typeof code === "string") {
    if (code in BY_CODE) return BY_CODE[code];
    if (code.startsWith("ERR_SSL_") || code.startsWith("ERR_TLS_")) return c("tls_failed", null);
  }
  return undefined;
}

/**
 * What `err` says about the proxy it went through, or null when nothing in it blames the
 * proxy (or the error cannot be read).
 */
export function classifyError(err: unknown, banStatuses: readonly number[] = DEFAULT_BAN_STATUSES): Classification | null {
  try {
    for (const e of chain(err)) {
      const found = one(e, banStatuses);
      if (found !== undefined) return found;
    }
  } catch {
    // unreadable: no verdict
  }
  return null;
}
