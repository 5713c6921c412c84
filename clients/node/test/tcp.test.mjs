// The client over the daemon's TCP listener, with the tokens' roles.
import assert from "node:assert/strict";
import { test } from "node:test";
import { inspect } from "node:util";

import * as pp from "proxypool-client";
import { fx } from "./fixtures.mjs";

test("the lease role over TCP: leases, reports, and is refused operator ops", async () => {
  const c = new pp.Client({ address: fx.tcp, token: fx.leaseToken });
  assert.equal(c.address.kind, "tcp");
  assert.equal(await c.ping(), pp.VERSION);
  const lease = await c.lease({ pool: "gw", destination: "tcp.example" });
  assert.ok(fx.pools.gw.some((e) => e.id === lease.endpoint));
  assert.deepEqual(await lease.success(), { state: "available", blame: null });
  const [status] = await c.status({ pool: "gw" });
  assert.equal(status.leases, 0);
  await assert.rejects(c.endpoints({ pool: "gw" }), (e) => e instanceof pp.Forbidden && e.code === "forbidden");
  await assert.rejects(c.request("disable", { endpoint: lease.endpoint }), pp.Forbidden);
  // The token is never in what the client shows.
  for (const shown of [String(c), inspect(c, { showHidden: true }), JSON.stringify(c)]) {
    assert.ok(!shown.includes(fx.leaseToken), shown);
  }
  await c.close();
});

test("the admin token over TCP may do operator ops; a wrong token may do nothing", async () => {
  const admin = new pp.Client({ address: fx.tcp, token: fx.adminToken });
  const list = await admin.endpoints({ pool: "gw" });
  assert.equal(list.length, fx.pools.gw.length);
  assert.ok(list.every((e) => !e.url.includes("s3cret")), "passwords redacted");
  await admin.close();
  const wrong = new pp.Client({ address: fx.tcp, token: "not-the-token-0123456789" });
  await assert.rejects(wrong.lease({ pool: "gw" }), (e) => {
    assert.ok(e instanceof pp.BadRequest, String(e));
    assert.ok(!e.message.includes("not-the-token"), e.message);
    return true;
  });
  await wrong.close();
});

test("PROXYPOOL_CONNECT and PROXYPOOL_LEASE_TOKEN find the daemon over TCP", async () => {
  const saved = { ...process.env };
  try {
    process.env.PROXYPOOL_CONNECT = fx.tcp;
    process.env.PROXYPOOL_LEASE_TOKEN = fx.leaseToken;
    const c = new pp.Client();
    assert.equal(pp.formatAddress(c.address), fx.tcp);
    assert.equal(await c.ping(), pp.VERSION);
    await c.close();
  } finally {
    process.env = saved;
  }
});
