// A crawl of the site's guarded page through the gateway, and what it must leave behind.
import assert from "node:assert/strict";

import * as pp from "proxypool-client";
import { ProxyPoolConfiguration } from "proxypool-client/crawlee";
import { events, fx } from "./fixtures.mjs";

/** The crawl's pages: the guarded page, once per page number. */
export function pages(crawl, n) {
  return Array.from({ length: n }, (_, i) => `${fx.site}/guarded?crawl=${crawl}&page=${i}`);
}

/**
 * Crawl `n` pages of `pool` with the crawler `make(options)` builds. Returns what each
 * session saw: session id → [{ status, endpoint }], and each page's body.
 */
export async function crawl(pool, n, make) {
  const proxypool = new ProxyPoolConfiguration({
    gateway: fx.gateway,
    token: fx.gatewayToken,
    pool,
    client: { address: fx.socket },
  });
  const seen = new Map();
  const bodies = new Map();
  const failed = [];
  const note = (session, status, headers) => {
    const endpoint = Number(headers["x-proxypool-endpoint"]);
    if (!seen.has(session)) seen.set(session, []);
    seen.get(session).push({ status, endpoint });
  };
  const crawler = make(
    proxypool.crawlerOptions({
      maxConcurrency: 4,
      maxRequestRetries: 6,
      sessionPoolOptions: { maxPoolSize: 8 },
      postNavigationHooks: [
        ({ session, response }) => {
          if (!response) return;
          const status = typeof response.status === "function" ? response.status() : response.statusCode;
          const headers = typeof response.headers === "function" ? response.headers() : response.headers;
          note(session.id, status, headers);
        },
      ],
      failedRequestHandler: ({ request }, error) => {
        failed.push(`${request.url}: ${error.message}`);
      },
    }),
    (url, body) => bodies.set(url, body),
  );
  const urls = pages(pool, n);
  await crawler.run(urls);
  await proxypool.flush();
  return { proxypool, seen, bodies, failed, urls };
}

/**
 * Every page fetched; the blocking upstream's pair for the site banned by session, once
 * per session that met it, and nothing else reported; every other session untouched (one
 * upstream throughout, still bound to it in the pool).
 */
export async function checkCrawl(pool, { proxypool, seen, bodies, failed, urls }) {
  assert.deepEqual(failed, [], "pages given up");
  for (const url of urls) assert.equal(bodies.get(url)?.trim(), "allowed", `${url}: ${bodies.get(url)}`);
  const ids = fx.pools[pool];
  const blocking = ids.find((e) => e.exit === fx.banned).id;
  const blocked = [...seen].filter(([, r]) => r.some((x) => x.status === 403)).map(([s]) => s);
  assert.ok(blocked.length > 0, `no session met the blocking upstream: ${JSON.stringify([...seen])}`);
  for (const [session, responses] of seen) {
    for (const r of responses) assert.equal(r.status === 403, r.endpoint === blocking, `${session}: ${JSON.stringify(r)}`);
  }
  assert.deepEqual(proxypool.stats, { reported: blocked.length, unbound: 0, failed: 0 });
  // The daemon's record: those reports, and no other failure for the site in the pool.
  const failures = (await events()).filter(
    (e) => e.kind === "report" && e.reason !== null && ids.some((i) => i.id === e.endpoint) && /^127\.0\.0\.1(:|$)/.test(e.destination ?? ""),
  );
  assert.equal(failures.length, blocked.length, JSON.stringify(failures));
  for (const e of failures) {
    assert.deepEqual(
      [e.endpoint, e.reason, e.phase, e.status, e.destination, e.blame],
      [blocking, "destination_status", "response_head", 403, "127.0.0.1", "pair"],
      JSON.stringify(e),
    );
  }
  const client = new pp.Client({ address: fx.socket });
  for (const e of await client.endpoints({ pool, destination: "127.0.0.1" })) {
    assert.equal(e.state, "available", JSON.stringify(e));
    assert.equal(e.destination_state, e.id === blocking ? "cooling" : "available", JSON.stringify(e));
  }
  // The sessions that never met the blocking upstream kept theirs, in the pool too.
  const untouched = [...seen].filter(([s]) => !blocked.includes(s));
  assert.ok(untouched.length > 0);
  for (const [session, responses] of untouched) {
    const used = new Set(responses.map((r) => r.endpoint));
    assert.equal(used.size, 1, `${session} moved: ${[...used]}`);
    const lease = await client.lease({ pool, session, destination: "127.0.0.1" });
    assert.equal(lease.endpoint, [...used][0], `${session} is still bound to its upstream`);
    await lease.release();
  }
  await client.close();
}
