// The client against the real daemon over its Unix socket: typed answers, one error
// class per code, report by session, and leased() ending every lease.
import assert from "node:assert/strict";
import { test } from "node:test";

import * as pp from "proxypool-client";
import { eventually, fx } from "./fixtures.mjs";

const admin = () => new pp.Client({ address: fx.socket, timeoutMs: 10_000 });

/** A logger that keeps what it is told. */
function keeping() {
  const lines = [];
  return { lines, logger: { warn: (m) => lines.push(m), debug: () => {} } };
}

async function leasesOf(client, pool) {
  const [s] = await client.status({ pool });
  return s.leases;
}

test("lease, report, release and status: typed answers", async () => {
  const c = admin();
  const added = await c.request("add", { pool: "default", urls: ["http://u:pw@127.0.0.1:31001", "http://127.0.0.1:31002"] });
  assert.equal(added.ids.length, 2);
  const lease = await c.lease({ pool: "default", ttl: 30, destination: "shop.example", schemes: ["http"] });
  assert.match(lease.id, /^\d+-[0-9a-f]{32}$/);
  assert.ok(added.ids.includes(lease.endpoint));
  assert.equal(lease.trial, false);
  assert.equal(lease.pool, "default");
  assert.equal(lease.destination, "shop.example");
  assert.equal(lease.scheme, "http");
  assert.ok(lease.expiresInMs > 29_000 && lease.expiresInMs <= 30_000);
  assert.match(lease.proxy, /^http:\/\/(u:pw@)?127\.0\.0\.1:3100[12]$/);
  // Printing a lease never shows its proxy URL (it holds a password).
  assert.ok(!JSON.stringify(lease).includes("pw@") && !String(lease).includes("pw@"));
  const [status] = await c.status({ pool: "default" });
  assert.equal(status.pool, "default");
  assert.equal(status.mode, "static-no-ping");
  assert.equal(status.leases, 1);
  assert.equal(status.available + status.cooling + status.probeAllowed + status.disabled, 2);
  assert.equal(typeof status.raw, "object");
  const answer = await lease.failure("destination_status", { status: 403, phase: "response_head" });
  assert.deepEqual(answer, { state: "available", blame: "pair" });
  assert.equal(lease.outcome, "failure");
  const second = await c.lease({ pool: "default", destination: "shop.example" });
  assert.notEqual(second.endpoint, lease.endpoint, "the banned pair is skipped");
  await second.release();
  assert.equal(second.outcome, "released");
  await assert.rejects(c.release(second.id), (e) => e instanceof pp.UnknownLease && /already released/.test(e.message));
  const third = await c.lease({ pool: "default" });
  assert.deepEqual(await c.report(third, "success", { durationMs: 12.4 }), { state: "available", blame: null });
  assert.equal(await leasesOf(c, "default"), 0);
  const all = await c.status();
  assert.ok(all.some((p) => p.pool === "empty") && all.some((p) => p.pool === "default"));
  assert.equal(await c.ping(), (await import("proxypool-client")).VERSION);
  await c.close();
});

test("each error code the daemon answers arrives as its class", async () => {
  const c = admin();
  await assert.rejects(c.lease({ pool: "no_such_pool" }), (e) => e instanceof pp.UnknownPool && e.code === "unknown_pool");
  await assert.rejects(c.lease({ pool: "empty" }), (e) => e instanceof pp.PoolEmpty && e instanceof pp.PoolExhausted && e.retryAfterMs === null);
  await assert.rejects(c.request("no_such_op"), pp.UnknownOp);
  await assert.rejects(c.release("1-00000000000000000000000000000000"), pp.UnknownLease);
  await assert.rejects(c.lease({ pool: "default", destination: "a b" }), (e) => e instanceof pp.BadRequest && /destination/.test(e.message));
  await assert.rejects(c.lease({ session: "s".repeat(129) }), pp.BadRequest);
  // tight: one endpoint, a 10-minute cooldown.
  await c.request("add", { pool: "tight", urls: ["http://127.0.0.1:31010"] });
  const held = await c.lease({ pool: "tight" });
  await assert.rejects(c.lease({ pool: "tight" }), (e) => e instanceof pp.PoolExhausted && !(e instanceof pp.PoolEmpty) && e.retryAfterMs === null);
  await held.failure("connect_refused", { phase: "connect" });
  await assert.rejects(c.lease({ pool: "tight" }), (e) => e instanceof pp.PoolExhausted && e.retryAfterMs > 500_000 && e.retryAfterMs <= 600_000);
  // A lease that outlives its ttl.
  const short = await c.lease({ pool: "default", ttl: "300ms" });
  await eventually("the short lease expires", async () => ((await leasesOf(c, "default")) === 0 ? true : undefined));
  await assert.rejects(short.success(), pp.LeaseExpired);
  await c.close();
});

test("report by session: the session's endpoint, its pair banned, the session moved", async () => {
  const c = admin();
  const first = await c.lease({ pool: "default", session: "cart-1", destination: "shop2.example" });
  await first.success();
  const again = await c.lease({ pool: "default", session: "cart-1", destination: "shop2.example" });
  assert.equal(again.endpoint, first.endpoint, "sticky");
  await again.release();
  const answer = await c.reportSession("cart-1", "failure", {
    pool: "default",
    reason: "destination_status",
    phase: "response_head",
    status: 403,
    destination: "shop2.example",
  });
  assert.deepEqual(answer, { state: "available", blame: "pair" });
  await assert.rejects(
    c.reportSession("cart-1", "failure", { pool: "default", reason: "destination_status" }),
    (e) => e instanceof pp.UnknownLease && /cart-1/.test(e.message),
  );
  const moved = await c.lease({ pool: "default", session: "cart-1", destination: "shop2.example" });
  assert.notEqual(moved.endpoint, first.endpoint, "the session moved to another endpoint");
  await moved.release();
  await assert.rejects(c.reportSession("x", "failure", {}), /needs a reason/);
  await assert.rejects(c.reportSession("x", "maybe"), /outcome/);
  await c.close();
});

test("leased() ends every lease: success, a failure with its reason, a release, and never throws on exit", async () => {
  const { lines, logger } = keeping();
  const c = new pp.Client({ address: fx.socket, logger });
  const pool = "default";
  const body = await c.leased(async (lease) => `page via ${lease.endpoint}`, { pool });
  assert.match(body, /^page via \d+$/);
  const reported = await c.leased(async (lease) => {
    await lease.success({ durationMs: 5 });
    return lease.outcome;
  }, { pool });
  assert.equal(reported, "success");
  let seen;
  await assert.rejects(
    c.leased(async (lease) => {
      seen = lease;
      throw new pp.ReportableError("destination_status", { status: 429, retryAfter: "1", phase: "response_head" });
    }, { pool, destination: "shop3.example" }),
    pp.ReportableError,
  );
  assert.equal(seen.outcome, "failure");
  // A network error the classifier recognises is the proxy's failure.
  await c.request("add", { pool: "scratch", urls: ["http://127.0.0.1:31020"] });
  await assert.rejects(
    c.leased((lease) => {
      seen = lease;
      throw Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:31020"), { code: "ECONNREFUSED" });
    }, { pool: "scratch" }),
    (e) => e.code === "ECONNREFUSED",
  );
  assert.equal(seen.outcome, "failure");
  const [scratch] = await c.endpoints({ pool: "scratch" });
  assert.equal(scratch.state, "cooling");
  assert.equal(scratch.reason, "connect_refused");
  await assert.rejects(
    c.leased((lease) => {
      seen = lease;
      throw new TypeError("a bug in the parser");
    }, { pool }),
    TypeError,
  );
  assert.equal(seen.outcome, "released");
  // The function gave the lease back behind leased()'s back: the success report that
  // follows is refused, logged, and the function's result stands.
  const result = await c.leased(async (lease) => {
    await c.release(lease.id);
    return "kept";
  }, { pool });
  assert.equal(result, "kept");
  assert.ok(lines.some((l) => /could not report success/.test(l)), lines.join("\n"));
  assert.equal(await leasesOf(c, pool), 0);
  await c.close();
});
