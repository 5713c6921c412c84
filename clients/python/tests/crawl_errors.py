"""Provoke real download errors in Scrapy (run as a subprocess by test_scrapy.py) and
write what the classifier makes of each.

    python crawl_errors.py OUT.json NAME=PROXY|URL ...
"""

import json
import sys

import scrapy
from scrapy.crawler import CrawlerProcess

from proxypool_client import classify


class Errors(scrapy.Spider):
    name = "errors"

    def __init__(self, cases, results, **kw):
        super().__init__(**kw)
        self.cases, self.results = cases, results

    async def start(self):
        for name, (proxy, url) in self.cases.items():
            meta = {"proxy": proxy, "dont_retry": True, "download_timeout": 1.5, "handle_httpstatus_all": True, "case": name}
            yield scrapy.Request(url, meta=meta, callback=self.got, errback=self.failed, dont_filter=True)

    def got(self, response):
        c = classify(response=response)
        self.results[response.meta["case"]] = {"type": "response %d" % response.status, "class": c and list(c)}

    def failed(self, failure):
        c = classify(failure.value)
        self.results[failure.request.meta["case"]] = {
            "type": "%s.%s" % (type(failure.value).__module__, type(failure.value).__qualname__),
            "class": c and list(c),
        }


def main():
    out = sys.argv[1]
    cases = {}
    for arg in sys.argv[2:]:
        name, rest = arg.split("=", 1)
        proxy, url = rest.split("|", 1)
        cases[name] = (proxy, url)
    results = {}
    process = CrawlerProcess({"LOG_LEVEL": "WARNING", "TELNETCONSOLE_ENABLED": False, "REMOTE_CONTROL_ENABLED": False})
    process.crawl(Errors, cases=cases, results=results)
    process.start()
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
