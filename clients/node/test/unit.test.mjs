// Pure logic, table-tested: addresses, the config reader, the wire format, errors,
// gateway URLs and responses, the classifier, and what leased() sends.
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { inspect } from "node:util";

import * as pp from "proxypool-client";
import { decode, encode } from "../dist/esm/protocol.js";
import { tableString } from "../dist/esm/toml.js";

test("addresses: socket paths, tcp://HOST:PORT, and what is refused", () => {
  const good = [
    ["/run/pp.sock", { kind: "unix", path: "/run/pp.sock" }],
    ["unix:///run/pp.sock", { kind: "unix", path: "/run/pp.sock" }],
    ["tcp://10.0.0.5:7000", { kind: "tcp", host: "10.0.0.5", port: 7000 }],
    ["tcp://[::1]:7000", { kind: "tcp", host: "::1", port: 7000 }],
    ["TCP://host.example:1/", { kind: "tcp", host: "host.example", port: 1 }],
  ];
  for (const [text, want] of good) assert.deepEqual(pp.parseAddress(text), want, text);
  for (const bad of ["", "tcp://host", "tcp://host:0", "tcp://host:65536", "tcp://host:80/x", "http://host:80"]) {
    assert.throws(() => pp.parseAddress(bad), TypeError, bad);
  }
  assert.throws(() => pp.parseAddress("tcp://user:sekrit@host:80"), (e) => {
    assert.ok(!e.message.includes("sekrit"), e.message);
    assert.match(e.message, /token/);
    return true;
  });
  assert.equal(pp.formatAddress({ kind: "tcp", host: "::1", port: 9 }), "tcp://[::1]:9");
});

test("a tcp:// client without a token is refused before anything is sent; the token never shows", () => {
  assert.throws(() => new pp.Client({ address: "tcp://127.0.0.1:9" }), /needs a token/);
  const c = new pp.Client({ address: "tcp://127.0.0.1:9", token: "sekrit-token-0123456789" });
  assert.ok(!String(c).includes("sekrit"));
  assert.ok(!JSON.stringify(c).includes("sekrit"));
  assert.ok(!inspect(c, { showHidden: true, depth: 5 }).includes("sekrit"));
});

test("the daemon is found by the CLI's rule", () => {
  const dir = mkdtempSync(join(tmpdir(), "pp-discovery-"));
  const cfg = join(dir, "proxies.toml");
  writeFileSync(cfg, '# a comment\n[store]\npath = "data/x.db"\n\n[server]\nsocket = "run/pp.sock" # here\n[[pool]]\nname = "default"\n');
  const cases = [
    [{ PROXYPOOL_CONNECT: "tcp://h:1", PROXYPOOL_SOCKET: "/s" }, { kind: "tcp", host: "h", port: 1 }],
    [{ PROXYPOOL_SOCKET: "/s", XDG_RUNTIME_DIR: "/r" }, { kind: "unix", path: "/s" }],
    [{ PROXYPOOL_CONFIG: cfg, XDG_RUNTIME_DIR: "/r" }, { kind: "unix", path: join(dir, "run/pp.sock") }],
    [{ XDG_RUNTIME_DIR: "/r", HOME: "/h", XDG_CONFIG_HOME: dir }, { kind: "unix", path: "/r/proxypool.sock" }],
    [{ PROXYPOOL_DB: "/d/shop.db", HOME: "/h", XDG_CONFIG_HOME: dir }, { kind: "unix", path: "/d/shop.sock" }],
    [{ HOME: "/h", XDG_CONFIG_HOME: dir }, { kind: "unix", path: "/h/.local/share/proxypool/proxypool.sock" }],
  ];
  for (const [env, want] of cases) assert.deepEqual(pp.defaultAddress(env), want, JSON.stringify(env));
  const noSocket = join(dir, "store-only.toml");
  writeFileSync(noSocket, "[store]\npath = 'db/pool.db'\n");
  assert.equal(pp.defaultSocketPath({ PROXYPOOL_CONFIG: noSocket }), join(dir, "db/pool.sock"));
});

test("the config reader takes one table's string and nothing else", () => {
  const text = '[server]\nsocket = "a\\u00e9\\"b"\nhttp = "x"\n[[server]]\nsocket = "array"\n[store]\npath = \'lit\'\nn = 3\n';
  assert.equal(tableString(text, "server", "socket"), 'aé"b');
  assert.equal(tableString(text, "store", "path"), "lit");
  assert.equal(tableString(text, "store", "n"), null);
  assert.equal(tableString(text, "nope", "path"), null);
});

test("request lines: fields left out when not given, the token over TCP, too large refused", () => {
  const call = { op: "lease", fields: { pool: "p", ttl: undefined, wait: null }, parse: (r) => r, waitMs: 0 };
  assert.equal(encode(call, 7, null), '{"op":"lease","pool":"p","id":7}\n');
  assert.equal(encode(call, 7, "t"), '{"op":"lease","pool":"p","id":7,"token":"t"}\n');
  assert.throws(() => encode({ ...call, fields: { detail: "é".repeat(40000) } }, 1, null), pp.TooLarge);
  assert.throws(() => encode({ ...call, fields: { big: 1n } }, 1, null), pp.BadRequest);
});

test("what the client refuses before sending anything is a rejection with a TypeError", async () => {
  // Nothing listens there: a request that went out would fail otherwise.
  const c = new pp.Client({ address: "/nonexistent/proxypool.sock" });
  await assert.rejects(c.report("1-x", "failure", { reason: "destination_status", status: 4030 }), /HTTP status/);
  await assert.rejects(c.report("1-x", "success", { durationMs: NaN }), /durationMs/);
  await assert.rejects(c.report("1-x", "failure"), /needs a reason/);
  await assert.rejects(c.reportSession("", "failure", { reason: "destination_status" }), /session/);
  await assert.rejects(c.release(""), /lease id/);
  await assert.rejects(c.lease({ ttl: Infinity }), /ttl/);
  await assert.rejects(c.lease({ tags: ["country"] }), /tags/);
  await assert.rejects(c.ping(), (e) => e instanceof pp.TransportError && /cannot connect/.test(e.message));
});

test("answers: the id is checked, each error code has its class, retry_after_ms is read", () => {
  assert.deepEqual(decode('{"ok":true,"id":3,"version":"1"}', 3), { ok: true, id: 3, version: "1" });
  assert.throws(() => decode('{"ok":true,"id":4}', 3), pp.ProtocolError);
  assert.throws(() => decode('{"ok":true}', 3), pp.ProtocolError);
  assert.throws(() => decode("not json", 3), pp.ProtocolError);
  assert.throws(() => decode("[1]", 3), pp.ProtocolError);
  assert.throws(() => decode('{"id":3}', 3), pp.ProtocolError);
  // An over-long line is answered without an id: an error, never a success.
  assert.throws(() => decode('{"ok":false,"error":{"code":"too_large","message":"m"}}', 3), pp.TooLarge);
  for (const [code, cls] of Object.entries(pp.ERRORS)) {
    assert.throws(() => decode(JSON.stringify({ ok: false, id: 1, error: { code, message: "m" } }), 1), cls);
  }
  const e = (() => {
    try {
      decode('{"ok":false,"id":1,"error":{"code":"pool_exhausted","message":"later","retry_after_ms":1500}}', 1);
    } catch (err) {
      return err;
    }
  })();
  assert.ok(e instanceof pp.PoolExhausted && e.retryAfterMs === 1500 && e.code === "pool_exhausted" && e.detail === "later");
  assert.ok(pp.errorFor("pool_empty", "m") instanceof pp.PoolExhausted, "PoolEmpty is a PoolExhausted");
  assert.ok(pp.errorFor("io", "m") instanceof pp.TransportError);
  const unknown = pp.errorFor("brand_new", "m");
  assert.equal(unknown.constructor, pp.ProxyPoolError);
  assert.equal(unknown.code, "brand_new");
  assert.equal(unknown.name, "ProxyPoolError");
  assert.equal(pp.errorFor("paced", "m").name, "Paced");
});

test("gateway URLs: the username rules, the token as password, any token through new URL()", () => {
  const gw = "http://127.0.0.1:8899";
  const cases = [
    [{}, "http://127.0.0.1:8899"],
    [{ token: "t" }, "http://:t@127.0.0.1:8899"],
    [{ session: "7" }, "http://session-7@127.0.0.1:8899"],
    [{ pool: "eu", session: "cart1", token: "t" }, "http://pool-eu-session-cart1:t@127.0.0.1:8899"],
    [{ pool: "default", tags: { tier: "dc", country: "us" }, session: "7" }, "http://pool-default-country-us-tier-dc-session-7@127.0.0.1:8899"],
    [{ tags: { region: "us-east-1" } }, "http://region-us-east-1@127.0.0.1:8899"],
  ];
  for (const [route, want] of cases) assert.equal(pp.gatewayUrl(gw, route), want, JSON.stringify(route));
  assert.equal(pp.gatewayUrl("127.0.0.1:1", { session: "s" }), "http://session-s@127.0.0.1:1");
  assert.equal(pp.gatewayUrl("socks5://127.0.0.1:1", { session: "s" }), "socks5://session-s@127.0.0.1:1");
  for (const token of ["a%b", "p@ss:w/rd#?", "é ü", "%41"]) {
    const url = new URL(pp.gatewayUrl(gw, { session: "s-1", token }));
    assert.equal(decodeURIComponent(url.password), token);
    assert.equal(decodeURIComponent(url.username), "session-s-1");
  }
  const refused = [
    [gw, { pool: "a-session-b" }],
    [gw, { session: "x-pool-y" }],
    [gw, { tags: { country: "us-tier-x", tier: "dc" } }],
    [gw, { tags: { "bad-key": "x" } }],
    [gw, { tags: { session: "x" } }],
    [gw, { session: "" }],
    [gw, { session: "a:b" }],
    [gw, { session: "a\nb" }],
    [gw, { session: "x".repeat(129) }],
    ["http://user:pw@127.0.0.1:8899", {}],
    ["http://127.0.0.1", {}],
    ["ftp://127.0.0.1:21", {}],
    ["http://127.0.0.1:8899/path", {}],
  ];
  for (const [g, route] of refused) assert.throws(() => pp.gatewayUrl(g, route), TypeError, JSON.stringify([g, route]));
  assert.ok(!String((() => { try { pp.gatewayUrl("http://u:topsecret@h:1"); } catch (e) { return e.message; } })()).includes("topsecret"));
});

test("gateway responses: its own answers, bans with Retry-After, and nothing to report", () => {
  const H = (o) => new Headers(o);
  const cases = [
    [{ status: 200, headers: H({}) }, null, null],
    [{ status: 404, headers: H({}) }, null, null],
    [{ status: 503, headers: H({ "X-Proxypool-Error": "pool_exhausted", "Retry-After": "7" }) }, null, "pool_exhausted"],
    [{ status: 502, headers: H({ "x-proxypool-error": "destination_down" }) }, null, "destination_down"],
    [{ status: 407, headers: H({ "Proxy-Authenticate": 'Basic realm="proxypool"' }) }, null, "proxy_auth_required"],
    [{ statusCode: 403, headers: { "x-proxypool-pool": "eu" }, url: "http://Shop.Example:8080/x" },
      { outcome: "failure", reason: "destination_status", phase: "response_head", status: 403, destination: "shop.example", pool: "eu" }, null],
    [{ status: () => 429, headers: () => ({ "retry-after": "30" }), url: () => "https://a.example/" },
      { outcome: "failure", reason: "destination_status", phase: "response_head", status: 429, retryAfter: "30", destination: "a.example" }, null],
  ];
  for (const [response, report, gatewayError] of cases) {
    const v = pp.classifyResponse(response);
    assert.deepEqual(v.report, report, JSON.stringify(response));
    assert.equal(v.gatewayError, gatewayError);
  }
  assert.equal(pp.classifyResponse({ status: 503, headers: H({ "X-Proxypool-Error": "paced", "Retry-After": "7" }) }).retryAfterMs, 7000);
  assert.equal(pp.classifyResponse({ status: 200, headers: H({ "X-Proxypool-Endpoint": "12" }) }).endpoint, 12);
  assert.equal(pp.classifyResponse({ status: 500, headers: {} }, { banStatuses: [500] }).report.status, 500);
  assert.equal(pp.classifyResponse({ status: 403, headers: {} }, { destination: "d.example" }).report.destination, "d.example");
  const now = Date.parse("Wed, 21 Oct 2026 07:28:00 GMT");
  assert.equal(pp.retryAfterMs("Wed, 21 Oct 2026 07:28:30 GMT", now), 30_000);
  assert.equal(pp.retryAfterMs("Wed, 21 Oct 2026 07:27:00 GMT", now), 0);
  assert.equal(pp.retryAfterMs("soon", now), null);
});

test("the classifier: Node's network errors, proxies' refusals, HTTP errors, and nothing else", () => {
  const err = (message, props = {}) => Object.assign(new Error(message), props);
  const fetchFailed = (cause) => Object.assign(new TypeError("fetch failed"), { cause });
  const cases = [
    [err("connect ECONNREFUSED 127.0.0.1:3128", { code: "ECONNREFUSED" }), "connect_refused", "connect"],
    [fetchFailed(err("x", { code: "UND_ERR_CONNECT_TIMEOUT" })), "connect_timeout", "connect"],
    [fetchFailed(new AggregateError([err("a", { code: "ENOTFOUND" })])), "dns_failed", "connect"],
    [err("socket hang up", { code: "ECONNRESET" }), "connection_reset", null],
    [err("x", { code: "UND_ERR_HEADERS_TIMEOUT" }), "slow_response", "response_head"],
    [err("x", { code: "ERR_SSL_WRONG_VERSION_NUMBER" }), "tls_failed", null],
    [err("Timeout awaiting 'response' for 5000ms", { name: "TimeoutError", code: "ETIMEDOUT", event: "response" }), "slow_response", "response_head"],
    [err("Proxy response (407) !== 200 when HTTP Tunneling", { code: "UND_ERR_ABORTED" }), "proxy_auth_rejected", "proxy_handshake"],
    [err("The proxy server rejected the request with status code 502 (Bad Gateway)"), "upstream_unreachable", "proxy_handshake"],
    [err("The proxy server rejected the request with status code 403 (Forbidden)"), "proxy_rejected", "proxy_handshake"],
    [err("Response code 403 (Forbidden)", { response: { statusCode: 403, headers: { "retry-after": "9" } } }), "destination_status", "response_head"],
    [err("HTTP 407", { response: { status: 407, headers: new Headers() } }), "proxy_auth_rejected", "proxy_handshake"],
  ];
  for (const [e, reason, phase] of cases) {
    const c = pp.classifyError(e);
    assert.ok(c, `${e.message}: no classification`);
    assert.equal(c.reason, reason, e.message);
    assert.equal(c.phase, phase, e.message);
  }
  assert.equal(pp.classifyError(err("x", { response: { statusCode: 403, headers: { "retry-after": "9" } } })).retryAfter, "9");
  const none = [
    new Error("a bug in the parser"),
    err("Response code 404", { response: { statusCode: 404, headers: {} } }),
    err("connect ECONNREFUSED to proxy 127.0.0.1:3128"),
    null,
    "a string",
    Object.defineProperty({}, "code", { get() { throw new Error("unreadable"); } }),
  ];
  for (const e of none) assert.equal(pp.classifyError(e), null, String(e?.message ?? e));
  const loop = err("loop");
  loop.cause = loop;
  assert.equal(pp.classifyError(loop), null);
});

test("what leased() sends for each way its function ends", () => {
  const err = (message, props = {}) => Object.assign(new Error(message), props);
  const abort = new DOMException("This operation was aborted", "AbortError");
  const cases = [
    [null, "success", {}],
    [{ error: new pp.ReportableError("destination_status", { status: 429, retryAfter: "30", phase: "response_head" }) },
      "failure", { reason: "destination_status", phase: "response_head", status: 429, retryAfter: "30", detail: "destination_status" }],
    [{ error: err("Forbidden", { reason: "Forbidden" }) }, "release", {}],
    [{ error: err("bad", { reason: "slow_response", phase: "warp", status: 42, retryAfter: "x".repeat(65) }) },
      "failure", { reason: "slow_response", detail: "bad" }],
    [{ error: err("connect ECONNREFUSED", { code: "ECONNREFUSED" }) }, "failure",
      { reason: "connect_refused", phase: "connect", detail: "Error: connect ECONNREFUSED" }],
    [{ error: new TypeError("cannot read x of undefined") }, "release", {}],
    [{ error: abort }, "release", {}],
    [{ error: Object.defineProperty({}, "reason", { get() { throw new Error("boom"); } }) }, "release", {}],
  ];
  for (const [exit, action, details] of cases) {
    assert.deepEqual(pp.exitReport(exit), [action, details], String(exit?.error?.message));
  }
  const [, long] = pp.exitReport({ error: err("y".repeat(2000), { reason: "body_mismatch" }) });
  assert.equal(long.detail.length, 500);
  const fromResponse = pp.ReportableError.fromResponse({ status: 429, headers: new Headers({ "Retry-After": "12" }) });
  assert.equal(fromResponse.reason, "destination_status");
  assert.equal(fromResponse.retryAfter, "12");
  assert.equal(pp.ReportableError.fromResponse({ status: 200, headers: new Headers() }), null);
});
