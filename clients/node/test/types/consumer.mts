// What an ES-module user writes; it must type-check against the published .d.ts files.
import {
  Client,
  type Lease,
  PoolExhausted,
  type PoolStatus,
  ReportableError,
  type ReportAnswer,
  classifyResponse,
  gatewayUrl,
} from "proxypool-client";
import { ProxyPoolConfiguration } from "proxypool-client/crawlee";
import { CheerioCrawler, PlaywrightCrawler, type PlaywrightCrawlerOptions } from "crawlee";

export async function use(signal: AbortSignal): Promise<string> {
  const client = new Client({ address: "tcp://127.0.0.1:7000", token: "t".repeat(16) });
  const lease: Lease = await client.lease({ pool: "default", wait: "5s", destination: "shop.example", signal });
  const answer: ReportAnswer = await lease.failure("destination_status", { status: 403 });
  const pools: PoolStatus[] = await client.status({ signal });
  const body = await client.leased(async (l) => `${l.proxy} ${answer.state} ${pools[0]?.leases}`, { schemes: ["http"] });
  try {
    await client.lease();
  } catch (e) {
    if (e instanceof PoolExhausted && e.retryAfterMs !== null) return String(e.retryAfterMs);
  }
  const verdict = classifyResponse({ status: 403, headers: new Headers() });
  if (verdict.report) await client.reportSession("s1", verdict.report.outcome, verdict.report);
  const config = new ProxyPoolConfiguration({ gateway: "http://127.0.0.1:8899", client });
  const url: string = await config.newUrl("s1");
  // The options with the configuration and its hook go to any Crawlee crawler as they are.
  new CheerioCrawler({
    proxyConfiguration: config,
    preNavigationHooks: [config.preNavigationHook],
    requestHandler: async ({ $ }) => void $("title").text(),
  });
  new PlaywrightCrawler(
    config.crawlerOptions<PlaywrightCrawlerOptions>({
      preNavigationHooks: [async ({ page }) => void (await page.title())],
      requestHandler: async ({ page }) => void (await page.title()),
    }),
  );
  const err = new ReportableError("slow_response", { phase: "response_body" });
  return body + url + gatewayUrl("127.0.0.1:8899", { session: "x" }) + err.reason;
}
