"""Run the minimal spider of docs/python-client.md as written (run as a subprocess by
test_scrapy.py), with its start URLs pointed at a local site.

    python doc_spider.py DOCS.md OUT.json URL...
"""

import json
import sys

import scrapy
from scrapy.crawler import CrawlerProcess


def documented_spider(path):
    with open(path) as f:
        text = f.read()
    block = text.split("### A minimal spider", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    ns = {}
    exec(compile(block, path, "exec"), ns)
    (spider,) = [v for v in ns.values() if isinstance(v, type) and issubclass(v, scrapy.Spider) and v is not scrapy.Spider]
    return spider


def main():
    docs, out, urls = sys.argv[1], sys.argv[2], sys.argv[3:]
    spider = documented_spider(docs)
    spider.start_urls = urls
    items = []
    process = CrawlerProcess({"LOG_LEVEL": "INFO", "TELNETCONSOLE_ENABLED": False, "REMOTE_CONTROL_ENABLED": False})
    crawler = process.create_crawler(spider)

    def collect(item, response, spider):  # held here: signal receivers are weak references
        items.append(dict(item))

    crawler.signals.connect(collect, signal=scrapy.signals.item_scraped)
    process.crawl(crawler)
    process.start()
    stats = {k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, (int, str, float))}
    with open(out, "w") as f:
        json.dump({"items": items, "stats": stats, "settings": spider.custom_settings}, f, default=str)


if __name__ == "__main__":
    main()
