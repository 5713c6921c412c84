"""The sync and asyncio clients against a real `proxypool serve`, real tinyproxy and
microsocks, and a local site."""

import asyncio
import os
import shutil
import time
import urllib.error
import urllib.request

import pytest
from servers import need_module

from proxypool_client import (
    AsyncClient,
    BadRequest,
    Client,
    Lease,
    PoolExhausted,
    ProxyPoolError,
    ReportableError,
    UnknownLease,
)


def documented_example(daemon, monkeypatch):
    """The requests example of docs/python-client.md, run as written: (fetch, client)."""
    from conftest import ROOT

    with open(os.path.join(ROOT, "docs", "python-client.md")) as f:
        text = f.read()
    block = text.split("## Sync client", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("PROXYPOOL_SOCKET", daemon.socket)  # what `Client()` finds
    ns = {}
    exec(compile(block, "docs/python-client.md", "exec"), ns)
    return ns["fetch"], ns["client"]


def test_ping_lease_report_release(daemon):
    (eid,) = daemon.add("http://py:s3cret@127.0.0.1:3128")
    with daemon.client(timeout=5) as c:
        assert c.ping()
        lease = c.lease(ttl="30s")
        assert isinstance(lease, Lease)
        assert (lease.proxy, lease.endpoint, lease.trial) == ("http://py:s3cret@127.0.0.1:3128", eid, False)
        assert c.report(lease.id, "success") == "available"
        lease = c.lease()
        c.release(lease)
        with pytest.raises(UnknownLease):
            c.release(lease)
        assert sum(p["leases"] for p in c.status()) == 0
        assert [e["id"] for e in c.endpoints()] == [eid]


def test_pool_exhausted_and_unknown_pool(daemon):
    with daemon.client(timeout=5) as c:
        with pytest.raises(PoolExhausted) as e:
            c.lease()
        assert e.value.retry_after_ms is None
        with pytest.raises(ProxyPoolError) as e:
            c.lease(pool="nope")
        assert e.value.code == "unknown_pool"


def test_bug1_documented_requests_example_reports_dead_socks_proxy(daemon, refusing_port, monkeypatch):
    need_module("socks")
    (eid,) = daemon.add("socks5h://127.0.0.1:%d" % refusing_port)
    import requests

    fetch, client = documented_example(daemon, monkeypatch)
    with pytest.raises(requests.exceptions.ConnectionError):
        fetch("http://127.0.0.1:9/")
    client.close()
    ep = daemon.endpoint(eid)
    assert (ep["state"], ep["reason"], ep["phase"]) == ("cooling", "connect_refused", "connect")


def test_documented_example_through_real_microsocks_and_tinyproxy(daemon, site, microsocks, tinyproxy, monkeypatch):
    need_module("socks")
    ids = daemon.add("socks5h://127.0.0.1:%d" % microsocks.port, "http://127.0.0.1:%d" % tinyproxy.port)
    fetch, client = documented_example(daemon, monkeypatch)
    for i in range(4):
        assert "/page/%d" % i in fetch(site.url + "/page/%d" % i)
    with pytest.raises(ReportableError):
        fetch(site.url + "/status/429")
    client.close()
    states = {e["id"]: e for e in daemon.list()}
    banned = [i for i in ids if states[i]["state"] == "cooling"]
    assert len(banned) == 1 and states[banned[0]]["reason"] == "destination_status"
    report = [e for e in daemon.events() if e["kind"] == "report" and e["endpoint"] == banned[0]]
    assert report, daemon.events()


def test_bug2_urllib_http_error_is_reported_by_status_not_by_its_reason(daemon, site, tinyproxy):
    (eid,) = daemon.add("http://127.0.0.1:%d" % tinyproxy.port)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": "http://127.0.0.1:%d" % tinyproxy.port}))
    with daemon.client(timeout=5) as c:
        with pytest.raises(urllib.error.HTTPError) as e:
            with c.leased() as lease:
                opener.open(site.url + "/status/403", timeout=5)
        assert e.value.reason == "Forbidden"
        assert lease.outcome == "failure"
        # A 404 is no verdict on the proxy: released, nothing outstanding.
        c.enable(eid, now=True)
        with pytest.raises(urllib.error.HTTPError):
            with c.leased() as lease:
                opener.open(site.url + "/status/404", timeout=5)
        assert lease.outcome == "release"
        assert sum(p["leases"] for p in c.status()) == 0
    kinds = [(e["kind"], e["reason"]) for e in daemon.events() if e["endpoint"] == eid]
    assert ("state_changed", "destination_status") in kinds, kinds


def test_bug3_successful_block_never_raises_on_exit(daemon, caplog):
    daemon.add("http://127.0.0.1:3128")
    c = daemon.client(timeout=5)
    # The lease expires while the block works: the page is kept, the loss logged.
    with c.leased(ttl="1s") as lease:
        time.sleep(1.3)
        page = "fetched"
    assert page == "fetched" and lease.outcome is None
    assert any("could not report success" in r.getMessage() and ("lease_expired" in r.getMessage() or "unknown_lease" in r.getMessage())
               for r in caplog.records), caplog.text
    # The daemon goes away during the block (a restart): still no exception on exit.
    caplog.clear()
    with c.leased() as lease:
        daemon.stop()
        page = "fetched again"
    assert page == "fetched again" and lease.outcome is None
    assert any("could not report success" in r.getMessage() and ": io: " in r.getMessage() for r in caplog.records), caplog.text
    c.close()


def test_failure_reasons_and_fallback_release(daemon):
    (eid,) = daemon.add("http://127.0.0.1:3128")
    with daemon.client(timeout=5) as c:
        with pytest.raises(ConnectionRefusedError):
            with c.leased():
                raise ConnectionRefusedError(111, "Connection refused")
        ep = daemon.endpoint(eid)
        assert (ep["state"], ep["reason"], ep["phase"]) == ("cooling", "connect_refused", "connect")
        c.enable(eid, now=True)
        # A parser bug blames nobody.
        with pytest.raises(KeyError):
            with c.leased() as lease:
                raise KeyError("title")
        assert lease.outcome == "release" and daemon.endpoint(eid)["state"] == "available"


def test_async_client_against_daemon(daemon, site, tinyproxy):
    aiohttp = need_module("aiohttp")
    (eid,) = daemon.add("http://127.0.0.1:%d" % tinyproxy.port)

    async def main():
        c = AsyncClient(daemon.socket, timeout=5)
        assert await c.ping()
        # Concurrent requests on one connection do not interleave.
        versions = await asyncio.gather(*[c.ping() for _ in range(20)])
        assert len(set(versions)) == 1
        async with aiohttp.ClientSession() as http:
            async with c.leased() as lease:
                async with http.get(site.url + "/page/1", proxy=lease.proxy) as r:
                    assert r.status == 200
            assert lease.outcome == "success"
            with pytest.raises(aiohttp.ClientResponseError):
                async with c.leased() as lease:
                    async with http.get(site.url + "/status/429", proxy=lease.proxy) as r:
                        r.raise_for_status()
            assert lease.outcome == "failure"
        await c.close()

    asyncio.run(main())
    ep = daemon.endpoint(eid)
    assert (ep["state"], ep["reason"]) == ("cooling", "destination_status")


def test_async_waiting_lease_does_not_hold_up_other_requests(daemon):
    # One endpoint, disabled: nothing is available, so the lease waits (a pool with no
    # endpoint at all would answer pool_empty at once).
    (eid,) = daemon.add("http://127.0.0.1:3128")
    daemon.cli("disable", str(eid))

    async def main():
        c = AsyncClient(daemon.socket, timeout=5)
        waiting = asyncio.ensure_future(c.lease(wait="1s"))  # nothing available: it waits
        pinging = asyncio.ensure_future(c.ping())
        done, _ = await asyncio.wait([waiting, pinging], return_when=asyncio.FIRST_COMPLETED)
        assert done == {pinging}
        with pytest.raises(PoolExhausted):
            await waiting
        await c.close()

    asyncio.run(main())


def test_documented_asyncio_example(daemon, site, tinyproxy, monkeypatch, capsys):
    need_module("aiohttp")
    from conftest import ROOT

    daemon.add("http://127.0.0.1:%d" % tinyproxy.port)
    with open(os.path.join(ROOT, "docs", "python-client.md")) as f:
        text = f.read()
    block = text.split("## asyncio client", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("PROXYPOOL_SOCKET", daemon.socket)
    ns = {}
    exec(compile(block, "docs/python-client.md", "exec"), ns)
    asyncio.run(ns["crawl"]([site.url + "/page/7"]))
    assert "/page/7" in capsys.readouterr().out


# -- the optional fields: schemes, destination, duration_ms, report by session ---------
def test_lease_with_schemes(daemon):
    daemon.add("socks5h://127.0.0.1:1080", "http://127.0.0.1:3128")
    with daemon.client(timeout=5) as c:
        lease = c.lease(schemes=["http", "https"])
        assert lease.scheme == "http"
        c.release(lease)
        with pytest.raises(BadRequest):
            c.lease(schemes=["gopher"])


def test_lease_and_report_with_destination(daemon):
    (eid,) = daemon.add("http://127.0.0.1:3128")
    with daemon.client(timeout=5) as c:
        lease = c.lease(destination="shop.example")
        assert lease.destination == "shop.example"
        lease.failure("destination_status", phase="response_head", status=403)
        # Destination-scoped: the endpoint stays available for other sites.
        assert daemon.endpoint(eid)["state"] == "available"
        assert [p["destination"] for p in daemon.show(eid)["pairs"]] == ["shop.example"]


def test_report_duration_ms(daemon):
    daemon.add("http://127.0.0.1:3128")
    with daemon.client(timeout=5) as c:
        lease = c.lease()
        assert c.report(lease.id, "success", duration_ms=120) == "available"
        with pytest.raises(BadRequest, match="duration_ms"):
            c.request("report", lease=c.lease().id, outcome="success", duration_ms=-1)


def test_report_by_session(daemon):
    (eid,) = daemon.add("http://127.0.0.1:3128")
    with daemon.client(timeout=5) as c:
        c.release(c.lease(session="s1"))
        c.report_session("s1", "failure", pool="default", reason="connect_refused", phase="connect")
        assert daemon.endpoint(eid)["state"] == "cooling"


def test_discovery_finds_the_socket_beside_the_database(daemon):
    # A daemon started without XDG_RUNTIME_DIR nor PROXYPOOL_SOCKET (cron, containers).
    daemon.stop()
    from conftest import Daemon

    d = Daemon()
    for k in ("XDG_RUNTIME_DIR", "PROXYPOOL_SOCKET", "PROXYPOOL_DB"):
        d.env.pop(k)
    d.socket = os.path.join(d.env["XDG_DATA_HOME"], "proxypool", "proxypool.sock")
    os.makedirs(os.path.dirname(d.socket))
    d.start()
    try:
        from proxypool_client import default_socket_path

        assert default_socket_path(d.env) == d.socket
        assert Client(default_socket_path(d.env), timeout=5).ping()
    finally:
        d.stop()
        shutil.rmtree(d.dir, ignore_errors=True)


@pytest.mark.parametrize(
    "case",
    ["runtime_dir", "beside_default_db", "xdg_data_home", "proxypool_db", "config_socket", "config_store", "env_socket"],
)
def test_discovery_agrees_with_the_cli(case, tmp_path):
    """Ask the real CLI which socket it would use (no daemon runs, so it names it) and
    compare with default_socket_path() in the same environment."""
    import re
    import subprocess

    from conftest import proxypool_bin

    from proxypool_client import default_socket_path

    env = {"HOME": str(tmp_path / "home"), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    cfg = tmp_path / "cfg" / "proxies.toml"
    cfg.parent.mkdir()
    if case == "runtime_dir":
        env["XDG_RUNTIME_DIR"] = str(tmp_path / "run")
    elif case == "xdg_data_home":
        env["XDG_DATA_HOME"] = str(tmp_path / "data")
    elif case == "proxypool_db":
        env["PROXYPOOL_DB"] = str(tmp_path / "db" / "main.db")
    elif case == "config_socket":
        cfg.write_text('[server]\nsocket = "run/pp.sock"\n')
        env.update(PROXYPOOL_CONFIG=str(cfg), XDG_RUNTIME_DIR=str(tmp_path / "run"))
    elif case == "config_store":
        cfg.write_text('[store]\npath = "data/store.db"\n')
        env["PROXYPOOL_CONFIG"] = str(cfg)
    elif case == "env_socket":
        env.update(PROXYPOOL_SOCKET=str(tmp_path / "s.sock"), XDG_RUNTIME_DIR=str(tmp_path / "run"))
    for d in ("home", "run", "data", "db", "cfg/data"):
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
    out = subprocess.run([proxypool_bin(), "lease"], env=env, capture_output=True, text=True, timeout=20)
    m = re.search(r"no daemon is serving on (\S+?);", out.stderr)
    assert m, out.stderr
    assert default_socket_path(env) == m.group(1)


def readme_example():
    from conftest import ROOT

    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    return text.split("### From Python", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]


def fetch_without_pysocks(daemon, block, urls):
    """Run ``block`` (it defines ``fetch``) with requests but without PySocks, as a plain
    ``pip install requests`` has it; returns the process."""
    import json
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        "sys.modules['socks'] = None  # requests without PySocks\n"
        "block, urls = json.loads(sys.argv[1])\n"
        "ns = {}\n"
        "exec(compile(block, 'README.md', 'exec'), ns)\n"
        "for url in urls:\n"
        "    print(ns['fetch'](url).count('<h1>'))\n"
    )
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(daemon.env, PYTHONPATH=src)
    return subprocess.run([sys.executable, "-c", code, json.dumps([block, urls])], env=env,
                          capture_output=True, text=True, timeout=60)


def test_readme_example_works_without_pysocks_in_a_pool_with_socks(daemon, site, microsocks, tinyproxy):
    """The README's example leases only what plain requests can use: a SOCKS endpoint in
    the pool is never handed to it."""
    need_module("requests")
    socks, http = daemon.add("socks5h://127.0.0.1:%d" % microsocks.port, "http://127.0.0.1:%d" % tinyproxy.port)
    block = readme_example()
    assert 'schemes=["http", "https"]' in block
    urls = ["%s/page/%d" % (site.url, i) for i in range(4)]
    p = fetch_without_pysocks(daemon, block, urls)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split() == ["1"] * 4
    stats = {e["id"]: e["stats"] for e in daemon.list()}
    assert (stats[socks]["leases"], stats[http]["successes"]) == (0, 4), stats
    # Without `schemes=`, the SOCKS lease fails inside requests: the log says why, and
    # how to avoid it, instead of a silent release.
    p = fetch_without_pysocks(daemon, block.replace(', schemes=["http", "https"]', ""), urls)
    assert p.returncode != 0 and "Missing dependencies for SOCKS support" in p.stderr, p.stderr[-3000:]
    assert "pip install 'requests[socks]'" in p.stderr and "schemes=['http', 'https']" in p.stderr


def test_lease_by_tags_sync_and_asyncio(daemon):
    (us,) = [int(x) for x in daemon.cli("add", "http://127.0.0.1:3128", "--tag", "country=us").stdout.split()]
    (de,) = [int(x) for x in daemon.cli("add", "http://127.0.0.1:3129", "--tag", "country=de").stdout.split()]
    with daemon.client(timeout=5) as c:
        for _ in range(3):
            with c.leased(tags={"country": "de"}) as lease:
                assert lease.endpoint == de
            lease = c.lease(tags={"country": "us"}, destination="shop.example")
            assert lease.endpoint == us
            c.release(lease)
        # A key no endpoint carries is the client's mistake, named; a value nobody
        # carries is an exhausted pool.
        with pytest.raises(BadRequest, match="contry"):
            c.lease(tags={"contry": "us"})
        with pytest.raises(PoolExhausted):
            c.lease(tags={"country": "fr"})
        with pytest.raises(TypeError):
            c.lease(tags=["country=us"])
        assert sum(p["leases"] for p in c.status()) == 0

    async def main():
        c = AsyncClient(daemon.socket, timeout=5)
        try:
            lease = await c.lease(tags={"country": "us"})
            assert lease.endpoint == us
            await c.release(lease)
            async with c.leased(tags={"country": "de"}) as lease:
                assert lease.endpoint == de
            with pytest.raises(BadRequest, match="contry"):
                await c.lease(tags={"contry": "us"})
        finally:
            await c.close()

    asyncio.run(main())
