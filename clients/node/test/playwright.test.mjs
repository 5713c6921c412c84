// PlaywrightCrawler driving Debian's Chromium (no browser download: playwright-core and
// an executablePath) through the gateway, with the pool's ProxyConfiguration and hook.
import { test } from "node:test";

import { Configuration, PlaywrightCrawler } from "crawlee";
import { chromium } from "playwright-core";
import { checkCrawl, crawl } from "./crawl.mjs";
import { fx } from "./fixtures.mjs";

test("a Playwright crawl in Chromium fetches every page and bans only the blocking pair", async (t) => {
  if (!fx.chromium) {
    t.skip("chromium is not installed (apt-get install -y chromium)");
    return;
  }
  const result = await crawl("browser", 12, (options, keep) =>
    new PlaywrightCrawler(
      {
        ...options,
        maxConcurrency: 2,
        headless: true,
        launchContext: {
          launcher: chromium,
          // A browser context per Crawlee session, each with its session's gateway URL.
          useIncognitoPages: true,
          launchOptions: { executablePath: fx.chromium, args: fx.chromiumArgs },
        },
        browserPoolOptions: { useFingerprints: false },
        requestHandler: async ({ request, page }) => keep(request.url, await page.innerText("body")),
      },
      new Configuration({ persistStorage: false, purgeOnStart: true }),
    ),
  );
  await checkCrawl("browser", result);
});
