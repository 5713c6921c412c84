// Through the real gateway: URLs built by gatewayUrl() route as the username rules say,
// and classifyResponse() turns a ban into the report by session that bans one pair.
import assert from "node:assert/strict";
import { test } from "node:test";

import * as pp from "proxypool-client";
import { fx, getThrough } from "./fixtures.mjs";

const exitOf = (pool, id) => fx.pools[pool].find((e) => e.id === id)?.exit;

test("a ban seen through the gateway is classified and reported by session", async () => {
  const client = new pp.Client({ address: fx.socket });
  const url = `${fx.site}/guarded?via=gateway`;
  const token = fx.gatewayToken;
  // Sessions until one lands on the upstream the site refuses; each keeps its upstream.
  let banned = null;
  const good = [];
  for (let i = 0; i < 30 && banned === null; i++) {
    const session = `gw-${i}`;
    const proxy = pp.gatewayUrl(fx.gateway, { pool: "gw", session, token });
    const r = await getThrough(proxy, url);
    const v = pp.classifyResponse(r);
    assert.ok(v.endpoint !== null, "the gateway names the upstream it used");
    const again = await getThrough(proxy, url);
    assert.equal(pp.classifyResponse(again).endpoint, v.endpoint, "a session keeps its upstream");
    if (v.report === null) {
      assert.equal(r.status, 200);
      assert.notEqual(exitOf("gw", v.endpoint), fx.banned);
      good.push({ session, endpoint: v.endpoint });
      continue;
    }
    assert.equal(r.status, 403);
    assert.equal(exitOf("gw", v.endpoint), fx.banned);
    assert.deepEqual(v.report, {
      outcome: "failure",
      reason: "destination_status",
      phase: "response_head",
      status: 403,
      destination: "127.0.0.1",
      pool: "gw",
    });
    const answer = await client.reportSession(session, v.report.outcome, v.report);
    assert.deepEqual(answer, { state: "available", blame: "pair" });
    banned = { session, endpoint: v.endpoint, proxy };
  }
  assert.ok(banned !== null, "no session landed on the refused upstream");
  // The same session now goes out through another upstream, and gets the page.
  const moved = await getThrough(banned.proxy, url);
  assert.equal(moved.status, 200);
  assert.notEqual(pp.classifyResponse(moved).endpoint, banned.endpoint);
  // Only that pair is banned: the endpoint serves other sites, the other sessions kept theirs.
  const list = await new pp.Client({ address: fx.socket }).endpoints({ pool: "gw", destination: "127.0.0.1" });
  for (const e of list) {
    assert.equal(e.state, "available", JSON.stringify(e));
    assert.equal(e.destination_state, e.id === banned.endpoint ? "cooling" : "available", JSON.stringify(e));
  }
  for (const { session, endpoint } of good) {
    const r = await getThrough(pp.gatewayUrl(fx.gateway, { pool: "gw", session, token }), url);
    assert.equal(pp.classifyResponse(r).endpoint, endpoint, `session ${session} kept its upstream`);
  }
  await client.close();
});

test("the gateway's own answers: a wrong token, an empty pool, an unknown tag", async () => {
  const url = `${fx.site}/ok`;
  const wrong = await getThrough(pp.gatewayUrl(fx.gateway, { session: "x", token: "wrong" }), url);
  assert.equal(wrong.status, 407);
  assert.equal(pp.classifyResponse(wrong).gatewayError, "proxy_auth_required");
  const empty = await getThrough(pp.gatewayUrl(fx.gateway, { pool: "empty", token: fx.gatewayToken }), url);
  assert.equal(empty.status, 503);
  const v = pp.classifyResponse(empty);
  assert.deepEqual([v.gatewayError, v.report, v.retryAfterMs], ["pool_empty", null, null]);
  const tag = await getThrough(pp.gatewayUrl(fx.gateway, { tags: { nosuchkey: "x" }, token: fx.gatewayToken }), url);
  assert.equal(tag.status, 400);
  // Without a session or pool, the token alone routes to the gateway's own pool.
  const plain = await getThrough(pp.gatewayUrl(fx.gateway, { token: fx.gatewayToken }), url);
  assert.equal(plain.status, 200);
  assert.equal(plain.headers["x-proxypool-pool"], "gw");
});
