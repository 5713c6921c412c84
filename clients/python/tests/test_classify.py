"""The classifier against the real exceptions of each library, provoked on 127.0.0.1:
a refusing port, a listener whose accept queue is full (connect timeout), a black hole
(read timeout), a server that resets, a fake proxy answering 407, real tinyproxy (auth,
bans through it) and real microsocks (dead, wrong password, closed destination)."""

import asyncio
import urllib.error
import urllib.request

import pytest
from servers import need_module

from proxypool_client import Classification, classify

SCENARIOS = {
    "refused": ("connect_refused", "connect"),
    "unaccepting": ("connect_timeout", "connect"),
    "black_hole": ("slow_response", "response_head"),
    "reset": ("connection_reset", None),
    "407_connect": ("proxy_auth_rejected", "proxy_handshake"),
    "407_plain": ("proxy_auth_rejected", "proxy_handshake"),
}
PLAIN = "http://127.0.0.1:9/page"  # never reached: the proxy fails first
TLS = "https://127.0.0.1:9/page"


@pytest.fixture
def bad_proxy(request, refusing_port):
    """(scenario, proxy URL, target URL) with the misbehaving server running."""
    import servers

    name = request.param
    if name == "refused":
        yield name, "http://127.0.0.1:%d" % refusing_port, PLAIN
        return
    factory = {
        "unaccepting": servers.Unaccepting,
        "black_hole": servers.black_hole,
        "reset": servers.resetting,
        "407_connect": servers.proxy_407,
        "407_plain": servers.proxy_407,
    }[name]
    srv = factory()
    try:
        yield name, "http://127.0.0.1:%d" % srv.port, TLS if name == "407_connect" else PLAIN
    finally:
        srv.close()


def check(name, exc=None, response=None):
    assert exc is not None or response is not None, "%s: nothing failed" % name
    c = classify(exc, response)
    want_reason, want_phase = SCENARIOS[name]
    assert c is not None, "%s: %r not classified" % (name, exc)
    assert c.reason == want_reason, "%s: %r -> %r" % (name, exc, c)
    if want_phase is not None:
        assert c.phase == want_phase, "%s: %r -> %r" % (name, exc, c)
    if name.startswith("407"):
        assert c.status in (407, None)


ALL = list(SCENARIOS)


@pytest.mark.parametrize("bad_proxy", ALL, indirect=True)
def test_requests(bad_proxy):
    requests = need_module("requests")
    name, proxy, url = bad_proxy
    try:
        r = requests.get(url, proxies={"http": proxy, "https": proxy}, timeout=(0.5, 0.5))
    except requests.RequestException as e:
        check(name, exc=e)
    else:
        check(name, response=r)


@pytest.mark.parametrize("bad_proxy", ALL, indirect=True)
def test_urllib(bad_proxy):
    name, proxy, url = bad_proxy
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy, "https": proxy}))
    try:
        r = opener.open(url, timeout=0.5)
    except (OSError, urllib.error.URLError) as e:
        check(name, exc=e)
    else:
        check(name, response=r)


@pytest.mark.parametrize("bad_proxy", ALL, indirect=True)
def test_httpx(bad_proxy):
    httpx = need_module("httpx")
    name, proxy, url = bad_proxy
    try:
        with httpx.Client(proxy=proxy, timeout=httpx.Timeout(0.5)) as c:
            r = c.get(url)
    except httpx.HTTPError as e:
        check(name, exc=e)
    else:
        check(name, response=r)


@pytest.mark.parametrize("bad_proxy", ALL, indirect=True)
def test_aiohttp(bad_proxy):
    aiohttp = need_module("aiohttp")
    name, proxy, url = bad_proxy

    async def go():
        timeout = aiohttp.ClientTimeout(total=5, sock_connect=0.5, sock_read=0.5)
        async with aiohttp.ClientSession(timeout=timeout) as s:
            try:
                async with s.get(url, proxy=proxy) as r:
                    await r.read()
                    return None, r
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                return e, None

    exc, resp = asyncio.run(go())
    check(name, exc=exc, response=resp)


# -- real SOCKS proxies (requests + PySocks) -------------------------------------------
def socks_get(proxy, url):
    requests = need_module("requests")
    need_module("socks")
    try:
        requests.get(url, proxies={"http": proxy, "https": proxy}, timeout=(2, 2))
    except requests.RequestException as e:
        return e
    pytest.fail("no error through %s" % proxy)


def test_socks_dead_proxy_is_connect_refused(refusing_port):
    e = socks_get("socks5h://127.0.0.1:%d" % refusing_port, PLAIN)
    assert type(e).__name__ == "ConnectionError"  # bug 1: neither ProxyError nor a timeout
    assert classify(e) == Classification("connect_refused", "connect", None, None)


def test_socks_wrong_password_is_proxy_auth_rejected(microsocks_auth):
    e = socks_get("socks5h://alice:wrong@127.0.0.1:%d" % microsocks_auth.port, PLAIN)
    assert classify(e)[:2] == ("proxy_auth_rejected", "proxy_handshake")


def test_socks_closed_destination_is_upstream_unreachable(microsocks, refusing_port):
    e = socks_get("socks5h://127.0.0.1:%d" % microsocks.port, "http://127.0.0.1:%d/" % refusing_port)
    assert classify(e)[:2] == ("upstream_unreachable", "proxy_handshake")


def test_socks_black_hole_is_a_connect_timeout():
    import servers

    hole = servers.black_hole()
    try:
        e = socks_get("socks5h://127.0.0.1:%d" % hole.port, PLAIN)
    finally:
        hole.close()
    # urllib3 reports a SOCKS handshake that timed out as a connect timeout.
    assert classify(e)[:2] == ("connect_timeout", "connect")


# -- real tinyproxy: auth and bans seen through it ---------------------------------------
def test_tinyproxy_wrong_password(tinyproxy_auth):
    requests = need_module("requests")
    proxy = "http://alice:wrong@127.0.0.1:%d" % tinyproxy_auth.port
    with pytest.raises(requests.exceptions.ProxyError) as e:
        requests.get(TLS, proxies={"https": proxy}, timeout=2)
    # tinyproxy answers a CONNECT with bad credentials 401, not 407 (both count, docs/probe.md).
    assert classify(e.value) == Classification("proxy_auth_rejected", "proxy_handshake", 401, None)
    # On a plain request its 401 carries no Proxy-Authenticate: indistinguishable from a
    # site's own 401, so the classifier does not blame the proxy.
    r = requests.get(PLAIN, proxies={"http": proxy}, timeout=2)
    assert r.status_code == 401 and classify(response=r) is None


@pytest.mark.parametrize("status,bans", [(403, None), (429, None), (503, [503])])
def test_bans_through_tinyproxy_each_library(tinyproxy, site, status, bans):
    """403 and 429 are bans by default (the gateway's ``ban_status``); 503 only when
    asked for (``bans``): a site's 503 is more often an outage than a block."""
    requests, httpx, aiohttp = need_module("requests"), need_module("httpx"), need_module("aiohttp")
    proxy = "http://127.0.0.1:%d" % tinyproxy.port
    url = site.url + "/status/%d" % status
    retry = "7" if status in (429, 503) else None
    want = Classification("destination_status", "response_head", status, retry)

    def check(exc=None, response=None):
        assert classify(exc, response, ban_statuses=bans) == want
        if bans is not None:
            assert classify(exc, response) is None  # not by default

    r = requests.get(url, proxies={"http": proxy}, timeout=5)
    check(response=r)
    with pytest.raises(requests.HTTPError) as e:
        r.raise_for_status()
    check(e.value)

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
    with pytest.raises(urllib.error.HTTPError) as e:
        opener.open(url, timeout=5)
    check(e.value)

    with httpx.Client(proxy=proxy) as c:
        r = c.get(url)
    check(response=r)
    with pytest.raises(httpx.HTTPStatusError) as e:
        r.raise_for_status()
    check(e.value)

    async def go():
        async with aiohttp.ClientSession() as s:
            async with s.get(url, proxy=proxy) as r:
                check(response=r)
                try:
                    r.raise_for_status()
                except aiohttp.ClientResponseError as e:
                    return e

    check(asyncio.run(go()))


def test_fine_responses_and_unrelated_errors_blame_nobody(tinyproxy, site):
    requests = need_module("requests")
    r = requests.get(site.url + "/status/404", proxies={"http": "http://127.0.0.1:%d" % tinyproxy.port}, timeout=5)
    assert classify(response=r) is None
    assert classify(ValueError("bad json")) is None
    assert classify(KeyError("x")) is None
    assert classify(response=r, ban_statuses=[404]).reason == "destination_status"
