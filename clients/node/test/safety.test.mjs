// One client shared by many concurrent calls, and calls abandoned half-way: answers are
// never swapped, and nothing is left behind (the daemon's `status` counts the leases).
import assert from "node:assert/strict";
import { once } from "node:events";
import { mkdtempSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import * as pp from "proxypool-client";
import { fx } from "./fixtures.mjs";

const POOL = "safety";
/** A pool whose endpoints take one lease at a time (`max_leases_per_endpoint = 1`). */
const WAITING = "waiting";

async function leases(client, pool = POOL) {
  const [s] = await client.status({ pool });
  return s.leases;
}

/** A deterministic stream of numbers in [0, 1), so a failure can be replayed. */
function random(seed) {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

test("concurrent calls on one client never swap answers", async () => {
  const c = new pp.Client({ address: fx.socket });
  const urls = Array.from({ length: 50 }, (_, i) => `http://127.0.0.1:${32000 + i}`);
  const { ids } = await c.request("add", { pool: POOL, urls });
  const byId = new Map(ids.map((id, i) => [id, urls[i]]));
  const rounds = await Promise.all(
    Array.from({ length: 200 }, async (_, i) => {
      const lease = await c.lease({ pool: POOL, session: `s${i % 40}` });
      // Each answer belongs to its request: the proxy is the endpoint's own URL.
      assert.equal(lease.proxy, byId.get(lease.endpoint));
      const [status] = await c.status({ pool: POOL });
      assert.equal(status.pool, POOL);
      if (i % 2) await lease.release();
      else assert.equal((await lease.success()).state, "available");
      return lease.id;
    }),
  );
  assert.equal(new Set(rounds).size, 200);
  assert.equal(await leases(c), 0);
  await c.close();
});

test("an answer to another request is refused, never returned", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "pp-fake-"));
  const path = join(dir, "fake.sock");
  // A daemon out of step: it answers every request with the id of the one before.
  let last = 0;
  const server = createServer((sock) => {
    sock.on("data", (chunk) => {
      for (const line of chunk.toString().split("\n").filter(Boolean)) {
        const { id } = JSON.parse(line);
        sock.write(JSON.stringify({ ok: true, id: last, version: "x" }) + "\n");
        last = id;
      }
    });
  });
  server.listen(path);
  await once(server, "listening");
  t.after(() => server.close());
  const c = new pp.Client({ address: path });
  await assert.rejects(c.ping(), (e) => e instanceof pp.ProtocolError && /out of step/.test(e.message));
  await assert.rejects(c.ping(), pp.ProtocolError, "a new connection, and the same refusal");
  await c.close();
});

test("random aborts leave no lease behind", async (t) => {
  let gaveBack = 0;
  const logger = { warn: (m) => assert.fail(m), debug: (m) => (gaveBack += /^gave back/.test(m) ? 1 : 0) };
  const c = new pp.Client({ address: fx.socket, maxIdle: 64, logger });
  // waiting: one lease an endpoint at a time, so leases also wait, and time out waiting.
  await c.request("add", { pool: WAITING, urls: Array.from({ length: 10 }, (_, i) => `http://127.0.0.1:${34000 + i}`) });
  // Abort at any time up to twice what a round of the workers' leases takes on this
  // machine now, so that some aborts come before the answer and some after.
  const started = performance.now();
  await Promise.all(Array.from({ length: 30 }, async () => (await c.lease({ pool: WAITING, wait: "5s" })).release()));
  const span = 2 * (performance.now() - started);
  const next = random(47);
  const outcomes = { aborted: 0, granted: 0, exhausted: 0 };
  const worker = async () => {
    for (let i = 0; i < 10; i++) {
      const ac = new AbortController();
      const delay = next() * span;
      // Some before anything is sent, the others at any point after.
      if (delay < span / 20) ac.abort();
      else setTimeout(() => ac.abort(), delay);
      try {
        const asked = c.lease({ pool: WAITING, signal: ac.signal, wait: i % 3 === 0 ? "20ms" : "5s" });
        if (i % 4 === 3) {
          // Sent (on an idle connection, at once): hold this thread while the daemon answers,
          // then abort before the answer is read, as a caller that gives up late does.
          const until = performance.now() + 10;
          while (performance.now() < until);
          ac.abort();
        }
        const lease = await asked;
        outcomes.granted++;
        // Hold it a moment, so that others wait for it.
        await new Promise((r) => setTimeout(r, next() * span));
        await lease.release();
      } catch (e) {
        if (e instanceof pp.PoolExhausted) outcomes.exhausted++;
        else if (e?.name === "AbortError") outcomes.aborted++;
        else throw e;
      }
    }
  };
  await Promise.all(Array.from({ length: 30 }, worker));
  assert.ok(outcomes.aborted > 20 && outcomes.granted > 10, JSON.stringify(outcomes));
  // close() waits for the give-backs of the leases granted to callers who left.
  await c.close();
  t.diagnostic(`${JSON.stringify(outcomes)}, ${gaveBack} leases granted after their caller left, given back`);
  assert.ok(gaveBack > 0, "no lease was granted to a caller who had left: the test did not test that");
  assert.equal(await leases(c, WAITING), 0, JSON.stringify(outcomes));
  await c.close();
});

test("leased() whose function is aborted releases its lease", async () => {
  const c = new pp.Client({ address: fx.socket });
  const ac = new AbortController();
  let seen;
  await assert.rejects(
    c.leased(async (lease) => {
      seen = lease;
      ac.abort();
      ac.signal.throwIfAborted();
    }, { pool: POOL }),
    (e) => e.name === "AbortError",
  );
  assert.equal(seen.outcome, "released");
  await assert.rejects(c.lease({ pool: POOL, signal: ac.signal }), (e) => e.name === "AbortError");
  assert.equal(await leases(c), 0);
  await c.close();
});

test("a lease aborted while it waits is never granted", async () => {
  const c = new pp.Client({ address: fx.socket });
  const [status] = await c.status({ pool: WAITING });
  // Hold every endpoint, so the next lease waits.
  const held = await Promise.all(Array.from({ length: status.available }, () => c.lease({ pool: WAITING })));
  await assert.rejects(c.lease({ pool: WAITING }), (e) => e instanceof pp.PoolExhausted && !(e instanceof pp.PoolEmpty));
  const ac = new AbortController();
  const waiting = c.lease({ pool: WAITING, wait: "30s", signal: ac.signal });
  const started = Date.now();
  setTimeout(() => ac.abort(), 100);
  await assert.rejects(waiting, (e) => e.name === "AbortError");
  assert.ok(Date.now() - started < 10_000, "the abort answered at once");
  // close() returns once the daemon has answered the abandoned lease: it gave up its wait.
  await c.close();
  assert.ok(Date.now() - started < 10_000, "the daemon gave the wait up at once");
  // Free the endpoints: a lease still waiting in the daemon would take one now.
  await Promise.all(held.map((l) => l.release()));
  assert.equal(await leases(c, WAITING), 0);
  const [after] = await c.status({ pool: WAITING });
  assert.equal(after.available, status.available);
  await c.close();
});

/** A fake daemon that grants every lease `delayMs` late and records what it is sent. */
async function slowDaemon(delayMs) {
  const dir = mkdtempSync(join(tmpdir(), "pp-slow-"));
  const path = join(dir, "slow.sock");
  const seen = [];
  // allowHalfOpen: it still answers a client that shut down its sending side.
  const server = createServer({ allowHalfOpen: true }, (sock) => {
    let buf = "";
    sock.on("data", (chunk) => {
      buf += chunk;
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const req = JSON.parse(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
        seen.push(req);
        const answer =
          req.op === "lease"
            ? { ok: true, id: req.id, lease: `1-${"ab".repeat(16)}`, proxy: "http://127.0.0.1:1", endpoint: 1 }
            : { ok: true, id: req.id };
        setTimeout(() => sock.writable && sock.write(JSON.stringify(answer) + "\n"), req.op === "lease" ? delayMs : 0);
      }
    });
    sock.on("end", () => setTimeout(() => sock.end(), delayMs * 2));
  });
  server.listen(path);
  await once(server, "listening");
  return { path, seen, close: () => server.close() };
}

test("a lease that times out, or is aborted in flight, is given back when granted late", async (t) => {
  const fake = await slowDaemon(300);
  t.after(() => fake.close());
  const c = new pp.Client({ address: fake.path, timeoutMs: 100 });
  await assert.rejects(c.lease(), (e) => e instanceof pp.TransportError && /no answer/.test(e.message));
  const ac = new AbortController();
  const aborted = c.lease({ signal: ac.signal });
  setTimeout(() => ac.abort(), 20);
  await assert.rejects(aborted, (e) => e.name === "AbortError");
  await c.close(); // waits for the give-backs
  const ops = fake.seen.map((r) => r.op);
  assert.deepEqual(ops, ["lease", "lease", "release", "release"], JSON.stringify(fake.seen));
  assert.deepEqual(fake.seen.filter((r) => r.op === "release").map((r) => r.lease), [`1-${"ab".repeat(16)}`, `1-${"ab".repeat(16)}`]);
});
