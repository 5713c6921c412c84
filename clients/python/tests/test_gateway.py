"""Real Python clients through the rotating gateway (docs/gateway.md) of a real `proxypool serve`:
`requests` (http, https via CONNECT, socks5h via PySocks) and a real Scrapy crawl in the
middleware's gateway mode. Upstreams are real tinyproxy and microsocks, plus one dead
(nothing listens) and one that bans (tinyproxy answering 403 to everything)."""

import shutil
import time

import pytest
from conftest import Daemon
from servers import Site, free_port, need_module
from test_scrapy import run_crawl


TOKEN = "t0k-gw-0123456789ab"  # also the TCP listener's: at least 16 characters


def start_gateway(config=None, flag=False, tcp=False):
    """A daemon with a gateway on a free port, the token required; returns (daemon, port).
    ``tcp`` also opens the socket's TCP listener (with the same token: one secret for
    both today)."""
    port = free_port()
    if flag:
        d = Daemon(args=["--gateway", "127.0.0.1:%d" % port], tcp_token=TOKEN if tcp else None)
        d.env["PROXYPOOL_TOKEN"] = TOKEN
    else:
        d = Daemon(config='[[gateway]]\nlisten = "127.0.0.1:%d"\ntoken = "%s"\n%s' % (port, TOKEN, config or ""))
    return d.start(), port


def stop(d):
    d.stop()
    shutil.rmtree(d.dir, ignore_errors=True)


def leases_drain(d, limit=5.0):
    """Leases the gateway held are given back once the use ends (a guard's drop may
    finish a moment after the client saw the last byte)."""
    deadline = time.monotonic() + limit
    while True:
        with d.client(timeout=5) as c:
            n = sum(p["leases"] for p in c.status())
        if n == 0 or time.monotonic() > deadline:
            return n
        time.sleep(0.05)


def failures(d, endpoint, reason):
    return [e for e in d.events() if e["endpoint"] == endpoint and e.get("reason") == reason]


def is_ban_403(event):
    """A ban as the gateway reports it: the status (a field once events carry it; the
    detail names it either way) and the destination host."""
    return (event["phase"] == "response_head" and event.get("status", 403) == 403
            and event["detail"].startswith("gateway, destination 127.0.0.1:") and "403" in event["detail"])


@pytest.fixture
def tls_site():
    s = Site(tls=True)
    yield s
    s.close()


@pytest.fixture
def tls_site_banning_once():
    # One ban: per-destination health (docs/destinations.md) takes each banning upstream away from
    # this site, so a ban on every page would soon leave no upstream for it.
    s = Site(tls=True, ban_first=["/page/0"])
    yield s
    s.close()


def test_requests_http_https_socks5h_through_the_gateway(site, tls_site, tinyproxy, microsocks, tinyproxy_banning,
                                                         refusing_port):
    requests = need_module("requests")
    need_module("socks")
    # retry_status: a plain-HTTP 403 is re-sent through another upstream, so the client
    # gets every page although one upstream bans.
    d, port = start_gateway("retries = 3\nretry_status = [403]\n")
    try:
        dead, banning, good, socks = d.add(
            "http://127.0.0.1:%d" % refusing_port,
            "http://127.0.0.1:%d" % tinyproxy_banning.port,
            "http://127.0.0.1:%d" % tinyproxy.port,
            "socks5h://127.0.0.1:%d" % microsocks.port,
        )
        http_proxy = "http://pool-default:%s@127.0.0.1:%d" % (TOKEN, port)
        socks_proxy = "socks5h://pool-default:%s@127.0.0.1:%d" % (TOKEN, port)
        used = []
        # One keep-alive client session: the gateway still picks an upstream per request.
        with requests.Session() as s:
            s.proxies = {"http": http_proxy, "https": http_proxy}
            for i in range(8):
                r = s.get("%s/page/%d" % (site.url, i), timeout=20)
                assert r.status_code == 200, (r.status_code, r.headers, r.text)
                assert "<h1>/page/%d</h1>" % i in r.text
                used.append(int(r.headers["X-Proxypool-Endpoint"]))
            for i in range(6):
                r = s.get("%s/page/tls%d" % (tls_site.url, i), timeout=20, verify=tls_site.cert)
                assert r.status_code == 200 and "<h1>/page/tls%d</h1>" % i in r.text, (r.status_code, r.text)
        # socks5h: the host name goes to the gateway unresolved, and on to the upstream.
        with requests.Session() as s:
            s.proxies = {"http": socks_proxy, "https": socks_proxy}
            for i in range(4):
                r = s.get("http://localhost:%d/page/s%d" % (site.port, i), timeout=20)
                assert r.status_code == 200 and "<h1>/page/s%d</h1>" % i in r.text, (r.status_code, r.text)
                r = s.get("https://localhost:%d/page/st%d" % (tls_site.port, i), timeout=20, verify=tls_site.cert)
                assert r.status_code == 200 and "<h1>/page/st%d</h1>" % i in r.text, (r.status_code, r.text)
        # Rotation on one keep-alive connection, and only working upstreams answered.
        assert set(used) == {good, socks}, used
        # Without the token: 407 and nothing else, on both HTTP paths.
        r = requests.get(site.url + "/page/x", proxies={"http": "http://127.0.0.1:%d" % port}, timeout=10)
        assert r.status_code == 407 and "Proxy-Authenticate" in r.headers
        with pytest.raises(requests.exceptions.ProxyError):
            requests.get(tls_site.url + "/page/x", proxies={"https": "http://127.0.0.1:%d" % port},
                         timeout=10, verify=tls_site.cert)
        # The gateway reported the dead upstream as a probe would, and the ban.
        eps = {e["id"]: e for e in d.list()}
        assert (eps[dead]["state"], eps[dead]["reason"], eps[dead]["phase"]) == ("cooling", "connect_refused", "connect")
        assert failures(d, dead, "connect_refused"), d.events()
        bans = failures(d, banning, "destination_status")
        assert bans and all(is_ban_403(b) for b in bans), d.events()
        # A proxy that refuses a site (its 403s, to plain HTTP and to CONNECT) loses that
        # site, not every other one (docs/blame.md): its pairs cool, it stays available.
        assert eps[banning]["state"] == "available", eps[banning]
        refused = failures(d, banning, "proxy_rejected")
        assert refused and all(e.get("blame") == "pair" for e in refused), d.events()
        assert all(b.get("blame") == "pair" for b in bans), d.events()
        assert eps[good]["state"] == "available" and eps[socks]["state"] == "available"
        assert leases_drain(d) == 0
        log = d.log_text()
        assert TOKEN not in log
    finally:
        stop(d)


def gateway_settings(port, *extra):
    return [
        'PROXYPOOL_MODE="gateway"',
        'PROXYPOOL_GATEWAY="http://127.0.0.1:%d"' % port,
        'PROXYPOOL_GATEWAY_TOKEN="%s"' % TOKEN,
    ] + list(extra)


def test_scrapy_crawl_in_gateway_mode_one_dead_one_banning(site, tinyproxy, microsocks, tinyproxy_banning,
                                                          refusing_port):
    need_module("scrapy")
    d, port = start_gateway(flag=True)
    try:
        # Added first, so the first sessions land on them (least leased, then round robin).
        dead, banning, good, socks = d.add(
            "http://127.0.0.1:%d" % refusing_port,
            "http://127.0.0.1:%d" % tinyproxy_banning.port,
            "http://127.0.0.1:%d" % tinyproxy.port,
            "socks5h://127.0.0.1:%d" % microsocks.port,
        )
        pages = 12
        result, log = run_crawl(d, site, pages, *gateway_settings(port))
        items, stats = result["items"], result["stats"]
        # Every page, each once, answered through a working upstream (Scrapy cannot use a
        # SOCKS proxy itself; through the gateway it can).
        assert sorted(i["h1"] for i in items) == sorted("/page/%d" % i for i in range(pages)), log[-3000:]
        assert {i["endpoint"] for i in items} <= {good, socks}, items
        # The gateway retried around the dead upstream and reported it; the plain-HTTP ban
        # was reported by the gateway (the middleware only moved the session and retried).
        eps = {e["id"]: e for e in d.list()}
        assert (eps[dead]["state"], eps[dead]["reason"], eps[dead]["phase"]) == ("cooling", "connect_refused", "connect")
        dead_events = failures(d, dead, "connect_refused")
        assert dead_events and "gateway" in (dead_events[0].get("detail") or ""), d.events()
        bans = failures(d, banning, "destination_status")
        assert bans and all(is_ban_403(b) for b in bans), d.events()
        # The ban is scoped to this site (docs/destinations.md): the upstream stays available for others.
        assert eps[banning]["state"] == "available"
        pairs = d.show(banning)["pairs"]
        assert [(p["destination"], p["state"]) for p in pairs] == [("127.0.0.1", "cooling")], pairs
        assert stats["proxypool/bans"] >= 1
        assert stats.get("proxypool/errors/report", 0) == 0  # plain HTTP: nothing to report by session
        assert stats.get("proxypool/retries_exhausted", 0) == 0
        assert stats["downloader/response_status_count/200"] == pages
        assert leases_drain(d) == 0
    finally:
        stop(d)


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_scrapy_https_ban_inside_the_tunnel_is_reported_by_session(tls_site_banning_once, tinyproxy, microsocks,
                                                                   transport):
    """Over TCP, the scraper is on another host: it reports by session with the token,
    and has no socket to fall back on."""
    need_module("scrapy")
    d, port = start_gateway(flag=True, tcp=transport == "tcp")
    try:
        good, socks = d.add("http://127.0.0.1:%d" % tinyproxy.port, "socks5h://127.0.0.1:%d" % microsocks.port)
        pages = 6
        extra, drop = [], ()
        if transport == "tcp":
            extra = ['PROXYPOOL_CONNECT="%s"' % d.tcp, 'PROXYPOOL_TOKEN="%s"' % TOKEN]
            drop = ("PROXYPOOL_SOCKET", "PROXYPOOL_TOKEN", "XDG_RUNTIME_DIR")
        result, log = run_crawl(d, tls_site_banning_once, pages, *gateway_settings(port, *extra), env_drop=drop)
        items, stats = result["items"], result["stats"]
        assert sorted(i["h1"] for i in items) == sorted("/page/%d" % i for i in range(pages)), log[-3000:]
        # The first answer of /page/0 was a 403 inside TLS: the middleware reported it by
        # session, and the pair (that upstream, this site) is banned, not the upstream.
        assert stats["proxypool/bans"] == 1
        assert stats["proxypool/reports/failure"] == 1
        assert stats.get("proxypool/errors/report", 0) == 0, log[-3000:]
        bans = [e for e in d.events() if e.get("reason") == "destination_status" and e["kind"] == "report"]
        assert len(bans) == 1 and bans[0]["endpoint"] in (good, socks), bans
        assert bans[0].get("destination") == "127.0.0.1", bans
        banned = d.show(bans[0]["endpoint"])
        assert [p["destination"] for p in banned["pairs"]] == ["127.0.0.1"], banned
        assert banned["state"] == "available", banned
        assert leases_drain(d) == 0
    finally:
        stop(d)


def test_scrapy_through_the_gateway_to_an_unknown_pool_closes_the_spider(site, tinyproxy):
    """The gateway answers 400 ``unknown_pool`` (plain HTTP: the header is visible): the
    crawl ends with that reason instead of finishing with no items."""
    need_module("scrapy")
    d, port = start_gateway(flag=True)
    try:
        d.add("http://127.0.0.1:%d" % tinyproxy.port)
        result, log = run_crawl(d, site, 3, *gateway_settings(port, 'PROXYPOOL_POOL="nope"'))
        assert result["items"] == [] and site.hits == []
        assert result["stats"]["finish_reason"] == "proxypool_unknown_pool", log[-3000:]
        assert leases_drain(d) == 0
    finally:
        stop(d)
