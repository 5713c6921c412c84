/**
 * The rotating gateway, from a client's side: the proxy URL that routes through it (a
 * username of `key-value` segments, the token as password), and what one of its
 * responses says (the gateway's own `X-Proxypool-Error`, a ban, a `Retry-After`).
 */

import { classifyStatus, headerOf } from "./classify.js";
import { DEFAULT_BAN_STATUSES, type Phase, type Reason } from "./vocabulary.js";

export const ERROR_HEADER = "X-Proxypool-Error";
export const ENDPOINT_HEADER = "X-Proxypool-Endpoint";
export const POOL_HEADER = "X-Proxypool-Pool";

/** Longest session key the gateway (and the lease socket) takes, in bytes. */
export const MAX_SESSION_KEY = 128;

export interface GatewayRoute {
  /** Lease from this pool instead of the gateway's own `pool`. */
  pool?: string;
  /** A sticky session: one upstream for all its requests while that upstream stays available. */
  session?: string;
  /** Only upstreams carrying every one of these tags, e.g. `{ country: "us" }`. */
  tags?: Readonly<Record<string, string>>;
  /** The gateway's token (its `token` key), sent as the proxy password. */
  token?: string;
}

const RESERVED = ["pool", "session"];

function checkValue(what: string, value: string, keys: readonly string[]): void {
  if (!value) throw new TypeError(`${what} is empty`);
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f:]/.test(value)) {
    throw new TypeError(`${what} ${JSON.stringify(value)} holds a control character or ":", which a proxy username cannot carry`);
  }
  // The gateway reads a value up to the next segment that is exactly a key.
  const clash = value.split("-").find((part) => keys.includes(part));
  if (clash !== undefined) {
    throw new TypeError(`${what} ${JSON.stringify(value)} contains "-${clash}", which the gateway would read as the key ${clash}`);
  }
}

/**
 * The proxy username for `route`: `pool-<name>`, a `<key>-<value>` segment per tag (by
 * key), then `session-<id>`; empty when the route names nothing. Throws `TypeError` for
 * a value the gateway would read otherwise than meant.
 */
export function gatewayUsername(route: GatewayRoute): string {
  const tags = route.tags ?? {};
  const tagKeys = Object.keys(tags).sort();
  const keys = [...RESERVED, ...tagKeys];
  const parts: string[] = [];
  if (route.pool !== undefined) {
    checkValue("pool", route.pool, keys);
    parts.push("pool", route.pool);
  }
  for (const key of tagKeys) {
    if (!/^[a-z][a-z0-9_]{0,31}$/.test(key) || RESERVED.includes(key)) {
      throw new TypeError(`tag key ${JSON.stringify(key)} cannot be asked for through the gateway`);
    }
    const value = String(tags[key]);
    checkValue(`tag ${key}`, value, keys);
    parts.push(key, value);
  }
  if (route.session !== undefined) {
    checkValue("session", route.session, keys);
    if (Buffer.byteLength(route.session) > MAX_SESSION_KEY) {
      throw new TypeError(`session key of ${Buffer.byteLength(route.session)} bytes; at most ${MAX_SESSION_KEY}`);
    }
    parts.push("session", route.session);
  }
  return parts.join("-");
}

/**
 * The proxy URL that routes through the gateway at `gateway` (`http://HOST:PORT`,
 * `socks5://HOST:PORT`, or `HOST:PORT`) as `route` asks: the username from pool, tags
 * and session, the token as the password. Each part is percent-encoded, so any token
 * survives `new URL()` and a client's `decodeURIComponent`. Without a token the URL has
 * no password part at all (`http://session-7@host:8899`): that is also how Node's `URL`
 * writes an empty password (`new URL("http://u:@h").href` is `http://u@h/`), and a client
 * then sends `u:` as the credentials, which a gateway without a token accepts. With a
 * token and nothing to route, the username is empty (`http://:TOKEN@host:8899`); a
 * client that sends credentials only when it has a username needs `pool` set.
 */
export function gatewayUrl(gateway: string, route: GatewayRoute = {}): string {
  const text = gateway.includes("://") ? gateway : `http://${gateway}`;
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new TypeError(`gateway ${JSON.stringify(gateway)}: expected http://HOST:PORT`);
  }
  const scheme = url.protocol.slice(0, -1);
  if (!["http", "socks5", "socks5h"].includes(scheme) || !url.hostname || !url.port) {
    throw new TypeError(`gateway ${JSON.stringify(gateway)}: expected http://HOST:PORT (or socks5://HOST:PORT)`);
  }
  if (url.username || url.password || (url.pathname !== "/" && url.pathname !== "") || url.search || url.hash) {
    throw new TypeError(
      `gateway ${url.protocol}//${url.host}: give it as scheme://HOST:PORT alone; the username is built from pool, session and tags, the password is the token`,
    );
  }
  const user = encodeURIComponent(gatewayUsername(route));
  const token = route.token ? encodeURIComponent(route.token) : "";
  const userinfo = token ? `${user}:${token}@` : user ? `${user}@` : "";
  return `${scheme}://${userinfo}${url.host}`;
}

/** A report by session, ready for `client.reportSession(session, report.outcome, report)`. */
export interface SessionReport {
  readonly outcome: "failure";
  readonly reason: Reason;
  readonly phase: Phase;
  readonly status: number;
  readonly retryAfter?: string;
  readonly destination?: string;
  /** The pool that served the response (`X-Proxypool-Pool`), when the gateway said. */
  readonly pool?: string;
}

export interface ResponseVerdict {
  readonly status: number;
  /**
   * What to report by session for this response: a ban (`destination_status`), or null
   * when there is nothing to blame on the session's upstream (a good answer, or the
   * gateway's own answer, which it has reported itself where there was something to).
   */
  readonly report: SessionReport | null;
  /** The gateway's own error code (`pool_exhausted`, `paced`, `destination_down`, `proxy_auth_required`...), when the answer is its own. */
  readonly gatewayError: string | null;
  /** `Retry-After` in milliseconds (seconds or an HTTP date), when the response has one. */
  readonly retryAfterMs: number | null;
  /** The upstream the gateway used (`X-Proxypool-Endpoint`), when it says. */
  readonly endpoint: number | null;
}

/** A response as fetch, got, undici, Node's `http` or Playwright give it. */
export type ResponseLike =
  | { status: number | (() => number); headers?: unknown; url?: string | (() => string) }
  | { statusCode?: number; headers?: unknown; url?: string };

/** `obj[key]`, or what it answers when it is a method (Playwright's `status()`, `headers()`, `url()`). */
function read(obj: object, key: string): unknown {
  const v = (obj as Record<string, unknown>)[key];
  return typeof v === "function" ? (v as () => unknown).call(obj) : v;
}

/** `Retry-After` as milliseconds from `now`: delay-seconds or an HTTP date; null when absent or unreadable. */
export function retryAfterMs(value: string | null, now: number = Date.now()): number | null {
  if (value === null) return null;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

/** The host a response came from (for a report's `destination`), when its URL is known. */
function hostOf(url: string | undefined): string | undefined {
  if (!url) return undefined;
  try {
    return new URL(url).hostname || undefined;
  } catch {
    return undefined;
  }
}

/**
 * What a response that came through the gateway says: the gateway's own answer
 * (`X-Proxypool-Error`, or its `407` for a wrong token), a ban by the site (a status in
 * `banStatuses`, default 403 and 429, the gateway's defaults) with its `Retry-After`, or
 * nothing to report. `destination` defaults to the response URL's host.
 */
export function classifyResponse(
  response: ResponseLike,
  options: { banStatuses?: readonly number[]; destination?: string } = {},
): ResponseVerdict {
  const status = Number(read(response, "statusCode") ?? read(response, "status"));
  const headers = read(response, "headers");
  const retryHeader = headerOf(headers, "Retry-After");
  const endpointText = headerOf(headers, ENDPOINT_HEADER);
  const endpoint = endpointText !== null && /^\d+$/.test(endpointText.trim()) ? Number(endpointText) : null;
  const base = { status, retryAfterMs: retryAfterMs(retryHeader), endpoint };
  const gatewayError = headerOf(headers, ERROR_HEADER)?.trim() || null;
  if (gatewayError !== null) return { ...base, report: null, gatewayError };
  // The gateway refuses a missing or wrong token with 407 (and says so in its header).
  if (status === 407) return { ...base, report: null, gatewayError: "proxy_auth_required" };
  const found = classifyStatus(status, headers, options.banStatuses ?? DEFAULT_BAN_STATUSES);
  if (found === null || found.reason !== "destination_status") return { ...base, report: null, gatewayError: null };
  const url = read(response, "url");
  const destination = options.destination ?? hostOf(typeof url === "string" ? url : undefined);
  const pool = headerOf(headers, POOL_HEADER)?.trim();
  const report: SessionReport = {
    outcome: "failure",
    reason: "destination_status",
    phase: "response_head",
    status,
    ...(found.retryAfter !== null ? { retryAfter: found.retryAfter } : {}),
    ...(destination !== undefined ? { destination } : {}),
    ...(pool ? { pool } : {}),
  };
  return { ...base, report, gatewayError: null };
}
