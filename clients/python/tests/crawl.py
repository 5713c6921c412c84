"""A real Scrapy crawl through ProxyPoolMiddleware (run as a subprocess by test_scrapy.py).

    python crawl.py SITE_URL PAGES OUT.json [SETTING=JSON ...]
"""

import json
import sys

import scrapy
from scrapy.crawler import CrawlerProcess


class Pages(scrapy.Spider):
    name = "pages"

    def __init__(self, base, pages, **kw):
        super().__init__(**kw)
        self.base, self.pages = base, pages

    async def start(self):
        for i in range(self.pages):
            yield scrapy.Request("%s/page/%d" % (self.base, i))

    def parse(self, response):
        yield {
            "url": response.url,
            "h1": response.css("h1::text").get(),
            # Lease mode sets it on the lease; gateway mode from X-Proxypool-Endpoint.
            "endpoint": response.meta.get("proxypool_endpoint"),
        }


def main():
    base, pages, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    settings = {
        "DOWNLOADER_MIDDLEWARES": {"proxypool_client.scrapy_middleware.ProxyPoolMiddleware": 740},
        "CONCURRENT_REQUESTS": 4,
        "DOWNLOAD_TIMEOUT": 10,
        "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": False,
        "REMOTE_CONTROL_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
    }
    for arg in sys.argv[4:]:
        k, v = arg.split("=", 1)
        settings[k] = json.loads(v)
    items = []
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(Pages)

    def collect(item, response, spider):
        items.append(dict(item))

    crawler.signals.connect(collect, signal=scrapy.signals.item_scraped)
    process.crawl(crawler, base=base, pages=pages)
    process.start()
    stats = {k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, (int, str, float))}
    with open(out, "w") as f:
        json.dump({"items": items, "stats": stats}, f)


if __name__ == "__main__":
    main()
