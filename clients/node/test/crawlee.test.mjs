// Crawlee's HTTP crawlers through the gateway, with the pool's ProxyConfiguration and
// its hook: Crawlee's sessions are the pool's, and the sessions Crawlee retires on a
// blocked status are reported by session.
import assert from "node:assert/strict";
import { test } from "node:test";

import { CheerioCrawler, Configuration, HttpCrawler } from "crawlee";
import { ProxyPoolConfiguration } from "proxypool-client/crawlee";
import { checkCrawl, crawl } from "./crawl.mjs";
import { fx } from "./fixtures.mjs";

const memory = () => new Configuration({ persistStorage: false, purgeOnStart: true });

test("a Cheerio crawl of 50 pages fetches every page and bans only the blocking pair, by session", async () => {
  const result = await crawl("cheerio", 50, (options, keep) =>
    new CheerioCrawler(
      {
        ...options,
        additionalMimeTypes: ["text/plain"],
        requestHandler: async ({ request, body }) => keep(request.url, String(body)),
      },
      memory(),
    ),
  );
  await checkCrawl("cheerio", result);
});

test("an HttpCrawler crawl reports its bans by session too", async () => {
  const result = await crawl("http", 20, (options, keep) =>
    new HttpCrawler(
      {
        ...options,
        additionalMimeTypes: ["text/plain"],
        requestHandler: async ({ request, body }) => keep(request.url, String(body)),
      },
      memory(),
    ),
  );
  await checkCrawl("http", result);
});

test("the configuration's URLs carry Crawlee's session as the gateway's", async () => {
  const p = new ProxyPoolConfiguration({ gateway: fx.gateway, token: fx.gatewayToken, pool: "cheerio", client: false });
  const info = await p.newProxyInfo("session_Ab1");
  assert.equal(info.username, "pool-cheerio-session-session_Ab1");
  assert.equal(info.password, fx.gatewayToken);
  assert.equal(info.url, `http://pool-cheerio-session-session_Ab1:${encodeURIComponent(fx.gatewayToken)}@${new URL(fx.gateway).host}`);
  const rotating = new URL(await p.newUrl());
  assert.equal(decodeURIComponent(rotating.username), "pool-cheerio");
  assert.throws(() => new ProxyPoolConfiguration({ gateway: fx.gateway, pool: "a-session-b", client: false }), TypeError);
  // Crawlee's browser plugins re-encode credentials with URL setters, which keep "%" as it is.
  assert.throws(() => new ProxyPoolConfiguration({ gateway: fx.gateway, token: "50%off", client: false }), /"%"/);
  assert.throws(() => new ProxyPoolConfiguration({ gateway: fx.gateway, pool: "p%41", client: false }), /"%"/);
  const options = p.crawlerOptions({ preNavigationHooks: [() => {}], maxConcurrency: 1 });
  assert.equal(options.proxyConfiguration, p);
  assert.equal(options.preNavigationHooks.length, 2);
  assert.equal(options.preNavigationHooks[0], p.preNavigationHook);
  assert.equal(options.maxConcurrency, 1);
});
