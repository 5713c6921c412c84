"""ProxyPoolMiddleware: a real Scrapy crawl in direct-lease mode against a real daemon,
real tinyproxy (one good, one banning), a dead proxy and a SOCKS endpoint Scrapy cannot
use; the RetryMiddleware copy; gateway mode's usernames, sessions and reports."""

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
from servers import FakeGateway, Recorder, need_module
from test_protocol import LEASE, strip_ids

HERE = os.path.dirname(os.path.abspath(__file__))


def run_crawl(daemon, site, pages, *settings, env_drop=()):
    """A real crawl of ``pages`` pages of ``site`` (crawl.py) in the daemon's environment
    (less ``env_drop``): its items and stats, and its log."""
    out = os.path.join(tempfile.mkdtemp(), "out.json")
    env = {k: v for k, v in daemon.env.items() if k not in env_drop}
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")])
    args = [sys.executable, os.path.join(HERE, "crawl.py"), site.url, str(pages), out] + list(settings)
    p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and os.path.exists(out), p.stderr[-4000:]
    with open(out) as f:
        return json.load(f), p.stderr


def test_crawl_direct_mode_one_dead_one_banning(daemon, site, tinyproxy, tinyproxy_banning, microsocks, refusing_port):
    need_module("scrapy")
    good, banning, dead, socks = daemon.add(
        "http://127.0.0.1:%d" % tinyproxy.port,
        "http://127.0.0.1:%d" % tinyproxy_banning.port,
        "http://127.0.0.1:%d" % refusing_port,
        "socks5h://127.0.0.1:%d" % microsocks.port,
    )
    pages = 12
    result, log = run_crawl(daemon, site, pages)
    items, stats = result["items"], result["stats"]

    # Every page fetched, each exactly once, all through the one good proxy.
    assert sorted(i["h1"] for i in items) == sorted("/page/%d" % i for i in range(pages)), log[-3000:]
    assert {i["endpoint"] for i in items} == {good}
    # The ban and the dead proxy were reported, and the daemon acted on them.
    eps = {e["id"]: e for e in daemon.list()}
    assert (eps[dead]["state"], eps[dead]["reason"], eps[dead]["phase"]) == ("cooling", "connect_refused", "connect")
    banned = [e for e in daemon.events() if e["endpoint"] == banning and e["reason"] == "destination_status"]
    assert banned, daemon.events()
    assert eps[good]["state"] == "available"
    assert eps[socks]["streak"] == 0 and eps[socks]["state"] == "available"  # never used by Scrapy
    assert stats["proxypool/bans"] >= 1
    assert stats["proxypool/errors/connect_refused"] >= 1
    assert stats["proxypool/leases"] >= pages + 2
    assert stats["proxypool/reports/success"] == pages
    assert stats.get("proxypool/retries_exhausted", 0) == 0
    # Nothing left leased once the spider closed.
    with daemon.client(timeout=5) as c:
        assert sum(p["leases"] for p in c.status()) == 0


def crawler_for(settings):
    need_module("scrapy")
    from scrapy.utils.test import get_crawler

    return get_crawler(settings_dict=settings)


class FakeSpider(object):
    # get_retry_request only reads spider.crawler (settings and stats).
    def __init__(self, crawler):
        self.crawler = crawler


def test_retry_copy_gets_a_fresh_lease(daemon):
    """RetryMiddleware copies meta (lease id and proxy included); the copy must lease anew."""
    need_module("scrapy")
    from scrapy import Request
    from scrapy.downloadermiddlewares.retry import get_retry_request
    from scrapy.exceptions import DownloadConnectionRefusedError

    from proxypool_client.scrapy_middleware import ProxyPoolMiddleware

    a, b = daemon.add("http://127.0.0.1:1", "http://127.0.0.1:2")
    crawler = crawler_for({"PROXYPOOL_SOCKET": daemon.socket, "PROXYPOOL_MAX_RETRIES": 0})
    mw = ProxyPoolMiddleware.from_crawler(crawler)

    async def go():
        req = Request("http://127.0.0.1:9/x")
        await mw.process_request(req)
        first = (req.meta["proxy"], req.meta["proxypool_endpoint"])
        exc = DownloadConnectionRefusedError("Connection was refused by other side")
        assert await mw.process_exception(req, exc) is None  # RetryMiddleware's turn
        retry = get_retry_request(req, spider=FakeSpider(crawler), reason=exc)
        assert "proxy" not in retry.meta and "_proxypool_lease" not in retry.meta
        await mw.process_request(retry)
        second = (retry.meta["proxy"], retry.meta["proxypool_endpoint"])
        await mw.spider_closed()
        return first, second

    first, second = asyncio.run(go())
    assert first != second and {first[1], second[1]} == {a, b}
    ep = daemon.endpoint(first[1])
    assert (ep["state"], ep["reason"]) == ("cooling", "connect_refused")


@pytest.mark.parametrize(
    "exc_name,reason",
    [
        ("scrapy.exceptions.DownloadConnectionRefusedError", "connect_refused"),
        ("twisted.internet.error.TCPTimedOutError", "connect_timeout"),
        ("twisted.web._newclient.ResponseNeverReceived", "connection_reset"),
        ("scrapy.exceptions.DownloadTimeoutError", "slow_response"),
        ("scrapy.core.downloader.handlers.http11.TunnelError", "proxy_auth_rejected"),
    ],
)
def test_scrapy_wrapped_errors_are_classified(exc_name, reason):
    need_module("scrapy")
    from scrapy.utils.misc import load_object

    from proxypool_client import classify

    cls = load_object(exc_name)
    if exc_name.endswith("ResponseNeverReceived"):
        from twisted.internet.error import ConnectionLost
        from twisted.python.failure import Failure

        exc = cls([Failure(ConnectionLost("Connection to the other side was lost"))])
    elif exc_name.endswith("TunnelError"):
        exc = cls("Could not open CONNECT tunnel with proxy 127.0.0.1:3128 [{'status': 407, 'reason': b'Proxy Authentication Required'}]")
    else:
        exc = cls("boom")
    assert classify(exc).reason == reason


# -- gateway mode: unit tests against a recording socket ---------------------------------
def gateway_mw(rec, **extra):
    from proxypool_client.scrapy_middleware import ProxyPoolMiddleware

    settings = {
        "PROXYPOOL_MODE": "gateway",
        "PROXYPOOL_GATEWAY": "http://127.0.0.1:8899",
        "PROXYPOOL_GATEWAY_TOKEN": "t0k",
        "PROXYPOOL_POOL": "shop",
        "PROXYPOOL_SOCKET": rec.path,
    }
    settings.update(extra)
    return ProxyPoolMiddleware.from_crawler(crawler_for(settings))


def test_gateway_sessions_per_slot():
    from scrapy import Request

    rec = Recorder([])
    mw = gateway_mw(rec)

    async def go():
        reqs = [Request(u) for u in ("https://a.example/1", "https://a.example/2", "https://b.example/1")]
        for r in reqs:
            await mw.process_request(r)
        return reqs

    r1, r2, r3 = asyncio.run(go())
    assert r1.meta["proxy"].startswith("http://pool-shop-session-") and r1.meta["proxy"].endswith(":t0k@127.0.0.1:8899")
    assert r1.meta["proxy"] == r2.meta["proxy"] != r3.meta["proxy"]
    assert mw.stats.get_value("proxypool/sessions") == 2
    assert rec.lines == []  # nothing to report yet


def test_gateway_proxy_stays_ours_after_httpproxy_moves_the_credentials():
    # Scrapy's HttpProxyMiddleware (750, after ours) rewrites meta["proxy"] without the
    # credentials; the response and the retry copy must still be recognised as ours.
    from scrapy import Request
    from scrapy.downloadermiddlewares.httpproxy import HttpProxyMiddleware
    from scrapy.http import Response

    rec = Recorder([])
    mw = gateway_mw(rec, PROXYPOOL_DESTINATIONS=False)
    hp = HttpProxyMiddleware()

    async def go():
        r = Request("http://a.example/1")
        await mw.process_request(r)
        hp.process_request(r)
        first = r.meta["proxypool_session"]
        retry = await mw.process_response(r, Response(r.url, status=403, request=r))
        await mw.process_request(retry)
        hp.process_request(retry)
        return r, first, retry

    r, first, retry = asyncio.run(go())
    assert r.meta["proxy"] == "http://127.0.0.1:8899" and b"Proxy-Authorization" in r.headers
    assert isinstance(retry, Request) and retry.meta["proxypool_session"] != first
    assert retry.meta["proxy"] == "http://127.0.0.1:8899"
    assert mw.stats.get_value("proxypool/bans") == 1
    import base64

    user = base64.b64decode(retry.headers[b"Proxy-Authorization"].split()[1]).decode()
    assert user == "pool-shop-session-%s:t0k" % retry.meta["proxypool_session"]


def test_gateway_https_ban_is_reported_by_session_and_rotates():
    from scrapy import Request
    from scrapy.http import HtmlResponse

    rec = Recorder([{"ok": True, "state": "cooling"}])
    mw = gateway_mw(rec, PROXYPOOL_DESTINATIONS=False)

    async def go():
        req = Request("https://a.example/1")
        await mw.process_request(req)
        sid = req.meta["proxypool_session"]
        resp = HtmlResponse(req.url, status=429, headers={"Retry-After": "30"}, request=req)
        retry = await mw.process_response(req, resp)
        await mw.process_request(retry)
        return sid, retry

    sid, retry = asyncio.run(go())
    assert strip_ids(rec.lines) == [
        {"op": "report", "session": sid, "pool": "shop", "outcome": "failure", "reason": "destination_status",
         "phase": "response_head", "status": 429, "retry_after": "30", "detail": "HTTP 429"}
    ]
    assert retry.meta["proxypool_session"] != sid and retry.meta["proxypool_retries"] == 1
    assert mw.stats.get_value("proxypool/bans") == 1


def test_gateway_http_ban_rotates_without_report_and_callback_decides():
    from scrapy import Request
    from scrapy.http import HtmlResponse

    rec = Recorder([])
    seen = []

    def response_is_ban(request, response):
        seen.append(response.status)
        return b"captcha" in response.body or None

    mw = gateway_mw(rec, PROXYPOOL_RESPONSE_IS_BAN=response_is_ban)

    async def go():
        req = Request("http://a.example/1")
        await mw.process_request(req)
        sid = req.meta["proxypool_session"]
        ok = HtmlResponse(req.url, status=200, body=b"<p>fine</p>", request=req)
        assert await mw.process_response(req, ok) is ok
        ban = HtmlResponse(req.url, status=200, body=b"<p>captcha</p>", request=req)
        retry = await mw.process_response(req, ban)
        # The gateway itself failed every upstream: new session, response passed on.
        await mw.process_request(retry)
        bad = HtmlResponse(retry.url, status=502, headers={"X-Proxypool-Error": "connect_refused"}, request=retry)
        assert await mw.process_response(retry, bad) is bad
        await mw.process_request(retry)
        return sid, retry

    sid, retry = asyncio.run(go())
    assert seen == [200, 200]
    assert rec.lines == []  # plain HTTP: the gateway saw the response and judged it itself
    assert retry.meta["proxypool_session"] != sid


def test_bad_settings_are_named():
    need_module("scrapy")
    from scrapy.exceptions import NotConfigured

    from proxypool_client.scrapy_middleware import ConfigError, ProxyPoolMiddleware

    # A mistake stops the crawl: it never goes out without proxies.
    with pytest.raises(ConfigError, match="PROXYPOOL_GATEWAY"):
        ProxyPoolMiddleware.from_crawler(crawler_for({"PROXYPOOL_MODE": "gateway"}))
    with pytest.raises(ConfigError, match="host and a port"):
        ProxyPoolMiddleware.from_crawler(crawler_for({"PROXYPOOL_MODE": "gateway", "PROXYPOOL_GATEWAY": "127.0.0.1"}))
    with pytest.raises(ConfigError, match="contains '-'"):
        ProxyPoolMiddleware.from_crawler(
            crawler_for({"PROXYPOOL_MODE": "gateway", "PROXYPOOL_GATEWAY": "127.0.0.1:8899", "PROXYPOOL_POOL": "a-b"})
        )
    with pytest.raises(ConfigError, match="PROXYPOOL_MODE"):
        ProxyPoolMiddleware.from_crawler(crawler_for({"PROXYPOOL_MODE": "socks"}))
    # Switched off on purpose: Scrapy's usual NotConfigured.
    with pytest.raises(NotConfigured):
        ProxyPoolMiddleware.from_crawler(crawler_for({"PROXYPOOL_ENABLED": False}))


def test_real_scrapy_download_errors_are_classified(refusing_port, black_hole, resetting, proxy_407):
    """Scrapy 2.19 wraps Twisted's errors (DownloadConnectionRefusedError,
    DownloadTimeoutError, DownloadFailedError around ResponseNeverReceived, TunnelError):
    provoked for real through misbehaving proxies."""
    need_module("scrapy")
    p = "http://127.0.0.1:%d"
    plain, tls = "http://127.0.0.1:9/", "https://127.0.0.1:9/"
    cases = {
        "refused": (p % refusing_port, plain, ["connect_refused", "connect"]),
        "black_hole": (p % black_hole.port, plain, ["slow_response", "response_head"]),
        "reset": (p % resetting.port, plain, ["connection_reset", "response_head"]),
        "407_connect": (p % proxy_407.port, tls, ["proxy_auth_rejected", "proxy_handshake"]),
        "407_plain": (p % proxy_407.port, plain, ["proxy_auth_rejected", "proxy_handshake"]),
    }
    out = os.path.join(tempfile.mkdtemp(), "errors.json")
    args = [sys.executable, os.path.join(HERE, "crawl_errors.py"), out]
    args += ["%s=%s|%s" % (name, proxy, url) for name, (proxy, url, _) in cases.items()]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out) as f:
        results = json.load(f)
    assert set(results) == set(cases), results
    for name, (_, _, want) in cases.items():
        assert results[name]["class"] and results[name]["class"][:2] == want, (name, results[name])
    assert results["refused"]["type"] == "scrapy.exceptions.DownloadConnectionRefusedError"
    assert results["reset"]["type"] == "scrapy.exceptions.DownloadFailedError"
    assert results["407_connect"]["type"].endswith("TunnelError")


def test_lease_mode_spider_ban_callback_and_exhausted_pool(daemon):
    need_module("scrapy")
    import scrapy
    from scrapy import Request
    from scrapy.exceptions import IgnoreRequest
    from scrapy.http import HtmlResponse

    from proxypool_client.scrapy_middleware import ProxyPoolMiddleware

    class Spider(scrapy.Spider):
        name = "s"

        def response_is_ban(self, request, response):
            return b"blocked" in response.body

    (eid,) = daemon.add("http://127.0.0.1:1")
    crawler = crawler_for({"PROXYPOOL_SOCKET": daemon.socket, "PROXYPOOL_LEASE_WAIT": "0s",
                           "PROXYPOOL_EXHAUSTED_RETRIES": 0})
    crawler.spider = Spider()
    mw = ProxyPoolMiddleware.from_crawler(crawler)

    async def go():
        req = Request("http://shop.example/1")
        await mw.process_request(req)
        assert req.meta["proxypool_endpoint"] == eid
        resp = HtmlResponse(req.url, status=200, body=b"you are blocked", request=req)
        retry = await mw.process_response(req, resp)
        assert isinstance(retry, Request) and "proxy" not in retry.meta
        # The only endpoint is cooling now, and this crawl waits for none: the page is
        # dropped with a reason, not hung.
        with pytest.raises(IgnoreRequest, match="could not serve"):
            await mw.process_request(retry)
        await mw.spider_closed()

    asyncio.run(go())
    # The ban was reported with the request's host: it cools the (endpoint, shop.example)
    # pair only (docs/destinations.md); the endpoint stays in service for other sites.
    assert daemon.endpoint(eid)["state"] == "available"
    pairs = json.loads(daemon.cli("show", str(eid), "--json").stdout)["pairs"]
    # A ban the callback found in a 200 page is a body mismatch, not a status.
    assert [(p["destination"], p["state"], p["reason"], p["phase"]) for p in pairs] == [
        ("shop.example", "cooling", "body_mismatch", "response_body")
    ]
    assert crawler.stats.get_value("proxypool/bans") == 1
    assert crawler.stats.get_value("proxypool/exhausted") == 1


def test_crawl_without_the_asyncio_reactor_fails_loudly(daemon, site):
    need_module("scrapy")
    out = os.path.join(tempfile.mkdtemp(), "out.json")
    env = dict(daemon.env, PYTHONPATH=os.path.dirname(HERE))
    args = [sys.executable, os.path.join(HERE, "crawl.py"), site.url, "1", out,
            'TWISTED_REACTOR="twisted.internet.pollreactor.PollReactor"']
    p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert "AsyncioSelectorReactor" in p.stderr and "ConfigError" in p.stderr, p.stderr[-3000:]
    assert site.hits == []  # nothing fetched without a proxy


# -- a pool that cannot serve: close the spider, or wait and retry -------------------------
def test_crawl_of_an_empty_pool_closes_the_spider_saying_why(daemon, site):
    need_module("scrapy")
    result, log = run_crawl(daemon, site, 3)
    assert result["items"] == [] and site.hits == []
    assert result["stats"]["finish_reason"] == "proxypool_pool_empty", log[-3000:]
    assert "pool 'default' has no endpoints" in log and "proxypool add URL" in log


def test_crawl_of_an_unknown_pool_closes_the_spider_saying_why(daemon, site):
    need_module("scrapy")
    daemon.add("http://127.0.0.1:3128")
    result, log = run_crawl(daemon, site, 3, 'PROXYPOOL_POOL="nope"')
    assert result["items"] == [] and site.hits == []
    assert result["stats"]["finish_reason"] == "proxypool_unknown_pool", log[-3000:]
    assert "pool 'nope' does not exist" in log


def error(code, retry_after_ms=None, message="m"):
    err = {"code": code, "message": message}
    if retry_after_ms is not None:
        err["retry_after_ms"] = retry_after_ms
    return {"ok": False, "error": err}


POOL_OK = {"ok": True, "pools": [{"pool": "default", "mode": "static-no-ping", "available": 1, "cooling": 0,
                                  "probe_allowed": 0, "disabled": 0, "leases": 0, "next_deadline_ms": None}]}


def lease_mw(rec, **extra):
    from proxypool_client.scrapy_middleware import ProxyPoolMiddleware

    settings = {"PROXYPOOL_SOCKET": rec.path, "PROXYPOOL_DESTINATIONS": False}
    settings.update(extra)
    return ProxyPoolMiddleware.from_crawler(crawler_for(settings))


@pytest.mark.parametrize(
    "answer,reason",
    [
        (error("pool_empty"), "pool_empty"),
        (error("unknown_pool"), "unknown_pool"),
        (error("forbidden", message="role lease may not lease"), "forbidden"),
        (error("bad_request", message="missing or wrong token"), "bad_token"),
    ],
)
def test_answers_no_request_can_get_past_close_the_spider(answer, reason):
    from scrapy import Request
    from scrapy.exceptions import IgnoreRequest

    rec = Recorder([POOL_OK, answer])
    mw = lease_mw(rec)

    async def go():
        with pytest.raises(IgnoreRequest):
            await mw.process_request(Request("http://shop.example/1"))
        # Once closing, nothing more is asked of the daemon.
        with pytest.raises(IgnoreRequest, match="closing"):
            await mw.process_request(Request("http://shop.example/2"))

    asyncio.run(go())
    assert mw._closing == "proxypool_" + reason
    assert [line["op"] for line in rec.lines] == ["status", "lease"]
    assert mw.stats.get_value("proxypool/closed/" + reason) == 1


@pytest.mark.parametrize(
    "answer,stat",
    [
        (error("paced", 300), "paced"),
        (error("destination_down", 300), "destination_down"),
        (error("pool_exhausted", 300), "exhausted"),
        (error("store_unavailable"), "store_unavailable"),
    ],
)
def test_busy_answers_are_waited_for_then_leased_again(answer, stat):
    """``retry_after_ms`` is how long to wait; without one, a backoff (capped here at
    0.3 s by PROXYPOOL_EXHAUSTED_MAX_DELAY)."""
    import time

    from scrapy import Request

    rec = Recorder([POOL_OK, answer, LEASE])
    mw = lease_mw(rec, PROXYPOOL_EXHAUSTED_MAX_DELAY=0.3)

    async def go():
        req = Request("http://shop.example/1")
        started = time.monotonic()
        await mw.process_request(req)
        return req, time.monotonic() - started

    req, took = asyncio.run(go())
    assert req.meta["proxy"] == LEASE["proxy"] and req.meta["proxypool_endpoint"] == LEASE["endpoint"]
    assert took >= 0.29, took
    assert [line["op"] for line in rec.lines] == ["status", "lease", "lease"]
    assert mw.stats.get_value("proxypool/" + stat) == 1 and mw.stats.get_value("proxypool/waits") == 1
    assert mw._closing is None


def test_a_pool_emptied_during_the_crawl_closes_the_spider():
    """A daemon that answers an empty pool with ``pool_exhausted`` and no deadline (one
    that predates ``pool_empty``): the middleware asks ``status`` and closes."""
    from scrapy import Request
    from scrapy.exceptions import IgnoreRequest

    empty = {"ok": True, "pools": [dict(POOL_OK["pools"][0], available=0)]}
    rec = Recorder([POOL_OK, error("pool_exhausted"), empty])
    mw = lease_mw(rec)

    async def go():
        with pytest.raises(IgnoreRequest, match="has no endpoints"):
            await mw.process_request(Request("http://shop.example/1"))

    asyncio.run(go())
    assert [line["op"] for line in rec.lines] == ["status", "lease", "status"]
    assert mw._closing == "proxypool_pool_empty"


def test_a_pool_that_stays_busy_drops_the_page_after_its_retries():
    from scrapy import Request
    from scrapy.exceptions import IgnoreRequest

    rec = Recorder([POOL_OK] + [error("paced", 10)] * 3)
    mw = lease_mw(rec, PROXYPOOL_EXHAUSTED_RETRIES=2)

    async def go():
        with pytest.raises(IgnoreRequest, match="could not serve .* after 3 tries: paced"):
            await mw.process_request(Request("http://shop.example/1"))

    asyncio.run(go())
    assert len(rec.lines) == 4 and mw._closing is None


def test_an_error_code_from_a_newer_daemon_drops_the_page_without_crashing():
    from scrapy import Request
    from scrapy.exceptions import IgnoreRequest

    rec = Recorder([POOL_OK, error("quota_exceeded", message="try tomorrow")])
    mw = lease_mw(rec)

    async def go():
        with pytest.raises(IgnoreRequest, match="quota_exceeded: try tomorrow"):
            await mw.process_request(Request("http://shop.example/1"))

    asyncio.run(go())
    assert mw.stats.get_value("proxypool/errors/daemon") == 1 and mw._closing is None


def test_an_exhausted_pool_is_waited_for_until_its_cooldown_ends():
    """A real daemon: the only endpoint cools for 1 s; the retried page waits that long
    (``retry_after_ms``) and gets it back, instead of being dropped."""
    import time

    from conftest import Daemon
    from scrapy import Request
    from scrapy.http import HtmlResponse

    from proxypool_client.scrapy_middleware import ProxyPoolMiddleware

    d = Daemon(config='[[pool]]\nname = "default"\n[pool.cooldown]\nbase = "1s"\nmax = "1s"\njitter = 0.0\n').start()
    try:
        (eid,) = d.add("http://127.0.0.1:1")
        crawler = crawler_for({"PROXYPOOL_SOCKET": d.socket, "PROXYPOOL_LEASE_WAIT": "0s",
                               "PROXYPOOL_DESTINATIONS": False})
        mw = ProxyPoolMiddleware.from_crawler(crawler)

        async def go():
            req = Request("http://shop.example/1")
            await mw.process_request(req)
            retry = await mw.process_response(req, HtmlResponse(req.url, status=429, request=req))
            assert isinstance(retry, Request)
            started = time.monotonic()
            await mw.process_request(retry)
            took = time.monotonic() - started
            assert retry.meta["proxypool_endpoint"] == eid
            await mw.process_response(retry, HtmlResponse(retry.url, status=200, request=retry))
            await mw.spider_closed()
            return took

        took = asyncio.run(go())
        assert 0.5 <= took < 10, took
        assert crawler.stats.get_value("proxypool/exhausted") == 1
        assert crawler.stats.get_value("proxypool/reports/success") == 1
        assert d.endpoint(eid)["state"] == "available"
    finally:
        d.stop()
        shutil.rmtree(d.dir, ignore_errors=True)


# -- gateway mode: the gateway's own answers, through a real crawl ------------------------
class Site(object):
    url = "http://shop.invalid"  # never resolved: the (fake) gateway answers


@pytest.mark.parametrize(
    "script,finish,items,stat",
    [
        ([(503, {"X-Proxypool-Error": "pool_exhausted", "Retry-After": "1"}, b"busy")], "finished", 1, "exhausted"),
        ([(503, {"X-Proxypool-Error": "pool_exhausted"}, b"busy")], "finished", 1, "exhausted"),
        ([(503, {"X-Proxypool-Error": "paced", "Retry-After": "2"}, b"paced")], "finished", 1, "paced"),
        ([(502, {"X-Proxypool-Error": "destination_down", "Retry-After": "1"}, b"down")], "finished", 1,
         "destination_down"),
        ([(503, {"X-Proxypool-Error": "pool_empty"}, b"empty")], "proxypool_pool_empty", 0, "closed/pool_empty"),
        ([(400, {"X-Proxypool-Error": "unknown_pool"}, b"no such pool")], "proxypool_unknown_pool", 0,
         "closed/unknown_pool"),
    ],
)
def test_gateway_answers_wait_retry_or_close(daemon, script, finish, items, stat):
    need_module("scrapy")
    gw = FakeGateway(script)
    try:
        settings = ['PROXYPOOL_MODE="gateway"', 'PROXYPOOL_GATEWAY="%s"' % gw.url, "PROXYPOOL_EXHAUSTED_MAX_DELAY=0.2",
                    "CONCURRENT_REQUESTS=1"]
        result, log = run_crawl(daemon, Site, 1, *settings)
    finally:
        gw.close()
    stats = result["stats"]
    assert stats["finish_reason"] == finish, log[-3000:]
    assert len(result["items"]) == items and stats["proxypool/" + stat] == 1, (result, log[-3000:])
    if items:
        # The endpoint is the gateway's X-Proxypool-Endpoint, and the wait kept the
        # session: nothing was blamed on an upstream.
        assert result["items"][0]["endpoint"] == 7
        assert len(gw.hits) == 2 and gw.hits[0] == gw.hits[1], gw.hits
        assert stats.get("proxypool/errors", 0) == 0 and stats["proxypool/sessions"] == 1


# -- over TCP -------------------------------------------------------------------------------
def test_crawl_in_lease_mode_over_tcp(site, tinyproxy):
    """The middleware on another host: PROXYPOOL_CONNECT and PROXYPOOL_TOKEN settings, no
    socket and no token in the environment."""
    need_module("scrapy")
    from conftest import Daemon

    token = "crawl-over-tcp-token"
    d = Daemon(tcp_token=token).start()
    try:
        (good,) = d.add("http://127.0.0.1:%d" % tinyproxy.port)
        result, log = run_crawl(d, site, 4, 'PROXYPOOL_CONNECT="%s"' % d.tcp, 'PROXYPOOL_TOKEN="%s"' % token,
                                env_drop=("PROXYPOOL_SOCKET", "PROXYPOOL_TOKEN", "XDG_RUNTIME_DIR"))
        assert sorted(i["h1"] for i in result["items"]) == ["/page/%d" % i for i in range(4)], log[-3000:]
        assert {i["endpoint"] for i in result["items"]} == {good}
        assert result["stats"]["proxypool/reports/success"] == 4
        assert token not in log
        with d.client(timeout=5) as c:
            assert sum(p["leases"] for p in c.status()) == 0
    finally:
        d.stop()
        shutil.rmtree(d.dir, ignore_errors=True)


def test_a_bad_daemon_address_stops_the_crawl_before_it_starts():
    need_module("scrapy")
    from proxypool_client.scrapy_middleware import ConfigError, ProxyPoolMiddleware

    with pytest.raises(ConfigError, match="tcp://HOST:PORT"):
        ProxyPoolMiddleware.from_crawler(crawler_for({"PROXYPOOL_CONNECT": "tcp://127.0.0.1"}))
    with pytest.raises(ConfigError, match="needs a token"):
        ProxyPoolMiddleware.from_crawler(crawler_for({"PROXYPOOL_CONNECT": "tcp://127.0.0.1:7000",
                                                      "PROXYPOOL_TOKEN": ""}))


def test_the_documented_spider_crawls_through_the_pool(daemon, site, tinyproxy):
    """The minimal spider of docs/python-client.md, run as written (only its start URLs
    point at the local site): every page through the pool, each reported."""
    need_module("scrapy")
    from conftest import ROOT

    (good,) = daemon.add("http://127.0.0.1:%d" % tinyproxy.port)
    out = os.path.join(tempfile.mkdtemp(), "out.json")
    urls = ["%s/page/%d" % (site.url, i) for i in range(3)]
    env = dict(daemon.env, PYTHONPATH=os.path.dirname(HERE))
    args = [sys.executable, os.path.join(HERE, "doc_spider.py"), os.path.join(ROOT, "docs", "python-client.md"), out]
    p = subprocess.run(args + urls, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and os.path.exists(out), p.stderr[-4000:]
    with open(out) as f:
        result = json.load(f)
    assert "proxypool_client.scrapy_middleware.ProxyPoolMiddleware" in result["settings"]["DOWNLOADER_MIDDLEWARES"]
    assert sorted(i["url"] for i in result["items"]) == urls, p.stderr[-3000:]
    assert {i["endpoint"] for i in result["items"]} == {good}
    assert result["stats"]["finish_reason"] == "finished"
    assert result["stats"]["proxypool/reports/success"] == 3
    assert sorted(site.hits) == ["/page/%d" % i for i in range(3)]


@pytest.mark.parametrize(
    "retry_after,attempt,max_delay,want",
    [
        (None, 0, 60, 1.0), (None, 1, 60, 2.0), (None, 3, 60, 8.0), (None, 10, 60, 60.0), (None, 500, 60, 60.0),
        (1.5, 0, 60, 1.5), (1.5, 7, 60, 1.5), (3600.0, 0, 60, 60.0), (0.0, 0, 60, 0.05), (None, 0, 0.3, 0.3),
    ],
)
def test_backoff(retry_after, attempt, max_delay, want):
    need_module("scrapy")
    from proxypool_client.scrapy_middleware import backoff

    assert backoff(retry_after, attempt, max_delay) == want


def test_tags_by_setting_and_by_request_meta_in_lease_mode(daemon):
    need_module("scrapy")
    from scrapy import Request
    from scrapy.exceptions import IgnoreRequest

    from proxypool_client.scrapy_middleware import ConfigError, ProxyPoolMiddleware

    (us,) = [int(x) for x in daemon.cli("add", "http://127.0.0.1:1", "--tag", "country=us").stdout.split()]
    (de,) = [int(x) for x in daemon.cli("add", "http://127.0.0.1:2", "--tag", "country=de").stdout.split()]
    crawler = crawler_for({"PROXYPOOL_SOCKET": daemon.socket, "PROXYPOOL_LEASE_WAIT": "0s",
                           "PROXYPOOL_EXHAUSTED_RETRIES": 0, "PROXYPOOL_TAGS": {"country": "us"}})
    mw = ProxyPoolMiddleware.from_crawler(crawler)

    async def go():
        got = []
        for meta in ({}, {"proxypool_tags": {"country": "de"}}, {}, {"proxypool_tags": {"country": None}}):
            req = Request("http://shop.example/%d" % len(got), meta=dict(meta))
            await mw.process_request(req)
            got.append(req.meta["proxypool_endpoint"])
            await mw._live.pop(req.meta["_proxypool_lease"])[1].release()
        # A key nobody carries drops the page, naming the key.
        req = Request("http://shop.example/x", meta={"proxypool_tags": {"contry": "us"}})
        with pytest.raises(IgnoreRequest, match="contry"):
            await mw.process_request(req)
        req = Request("http://shop.example/y", meta={"proxypool_tags": "country=us"})
        with pytest.raises(IgnoreRequest, match="mapping"):
            await mw.process_request(req)
        await mw.spider_closed()
        return got

    got = asyncio.run(go())
    assert got[:3] == [us, de, us], got
    assert got[3] in (us, de)
    with pytest.raises(ConfigError, match="PROXYPOOL_TAGS"):
        ProxyPoolMiddleware.from_crawler(crawler_for({"PROXYPOOL_TAGS": ["country=us"]}))
    with daemon.client(timeout=5) as c:
        assert sum(p["leases"] for p in c.status()) == 0


def test_gateway_usernames_carry_tags():
    from scrapy import Request

    rec = Recorder([])
    mw = gateway_mw(rec, PROXYPOOL_TAGS='{"country": "us"}')

    async def go():
        a = Request("https://a.example/1")
        b = Request("https://b.example/1", meta={"proxypool_tags": {"tier": "res"}})
        for r in (a, b):
            await mw.process_request(r)
        return a, b

    a, b = asyncio.run(go())
    assert a.meta["proxy"].startswith("http://pool-shop-country-us-session-"), a.meta["proxy"]
    assert b.meta["proxy"].startswith("http://pool-shop-country-us-tier-res-session-"), b.meta["proxy"]
