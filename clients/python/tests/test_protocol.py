"""Unit tests without a daemon: request lines, replies (ids included), addresses and
discovery, and what leased() decides to send. The wire tests use a recording Unix socket
so both clients are checked byte for byte."""

import asyncio
import datetime
import json
import os
import tempfile
import urllib.error

import pytest
from servers import Recorder, need_module

from proxypool_client import (
    AsyncClient,
    BadRequest,
    Client,
    DestinationDown,
    Forbidden,
    LeaseExpired,
    Paced,
    PoolEmpty,
    PoolExhausted,
    ProtocolError,
    ProxyPoolError,
    ReportableError,
    StaleClaim,
    StoreUnavailable,
    TcpAddress,
    TooLarge,
    TransportError,
    UnixAddress,
    UnknownPool,
    calls,
    default_address,
    default_socket_path,
    parse_address,
    protocol,
)
from proxypool_client.address import resolve_token
from proxypool_client.outcome import exit_report


def line(call, request_id=1, token=None):
    return json.loads(protocol.encode(call, request_id, token))


def test_encode_sends_only_given_fields():
    raw = protocol.encode(calls.lease("p"), 7)
    assert json.loads(raw) == {"op": "lease", "pool": "p", "id": 7}
    assert raw.endswith(b"\n") and raw.count(b"\n") == 1
    # Over TCP every line carries the token.
    assert line(calls.ping(), 3, "s3cret") == {"op": "ping", "id": 3, "token": "s3cret"}


def test_encode_every_field_when_given():
    assert line(calls.lease("p", "30s", 1.5, "s1", "example.org", ("http", "https"))) == {
        "op": "lease", "pool": "p", "ttl": "30s", "wait": 1.5, "session": "s1",
        "destination": "example.org", "schemes": ["http", "https"], "id": 1,
    }
    r = calls.report("L1", "failure", reason="destination_status", phase="response_head", status=429,
                     retry_after=datetime.timedelta(seconds=7), destination="example.org", duration_ms=12.6)
    assert line(r, 2) == {
        "op": "report", "lease": "L1", "outcome": "failure", "reason": "destination_status",
        "phase": "response_head", "status": 429, "retry_after": 7.0, "destination": "example.org",
        "duration_ms": 13, "id": 2,
    }
    assert line(calls.enable(4, now=True, destination="a.org")) == {
        "op": "enable", "endpoint": 4, "now": True, "destination": "a.org", "id": 1}
    assert line(calls.disable("http://h:1", reason="rotated", pool="shops")) == {
        "op": "disable", "endpoint": "http://h:1", "reason": "rotated", "pool": "shops", "id": 1}


def test_a_lease_call_allows_for_its_wait_and_knows_how_to_give_back():
    call = calls.lease(wait="1m 30s")
    assert call.wait == 90.0
    undo = call.undo({"lease": "L9", "proxy": "http://h:1", "endpoint": 1})
    assert line(undo) == {"op": "release", "lease": "L9", "id": 1}
    assert calls.report("L", "success").undo is None


def test_report_by_session():
    r = calls.report(None, "failure", reason="destination_status", session="abc", pool="gw")
    assert line(r, 3) == {
        "op": "report", "session": "abc", "pool": "gw", "outcome": "failure",
        "reason": "destination_status", "id": 3,
    }


@pytest.mark.parametrize(
    "args,kw,msg",
    [
        ((None, "success"), {}, "lease id or a session"),
        (("L", "success"), {"session": "s"}, "not both"),
        (("L", "failure"), {}, "needs a reason"),
        (("L", "ok"), {}, "outcome"),
    ],
)
def test_report_refuses_bad_calls(args, kw, msg):
    with pytest.raises(ValueError, match=msg):
        calls.report(*args, **kw)


def test_too_large_unencodable_and_durations():
    with pytest.raises(TooLarge):
        protocol.encode(calls.raw("report", {"detail": "x" * (70 * 1024)}), 1)
    with pytest.raises(BadRequest, match="cannot encode"):
        protocol.encode(calls.raw("report", {"detail": object()}), 1)
    assert protocol.duration(datetime.timedelta(seconds=2)) == 2.0
    with pytest.raises(TypeError):
        protocol.duration(True)


@pytest.mark.parametrize(
    "error,cls",
    [
        ({"code": "bad_request", "message": "m"}, BadRequest),
        ({"code": "unknown_pool", "message": "m"}, UnknownPool),
        ({"code": "lease_expired", "message": "m"}, LeaseExpired),
        ({"code": "pool_empty", "message": "m"}, PoolEmpty),
        ({"code": "forbidden", "message": "m"}, Forbidden),
        ({"code": "stale_claim", "message": "m"}, StaleClaim),
        ({"code": "store_unavailable", "message": "m"}, StoreUnavailable),
        ({"code": "a_code_from_the_future", "message": "m"}, ProxyPoolError),
    ],
)
def test_decode_errors(error, cls):
    with pytest.raises(cls) as e:
        protocol.decode(json.dumps({"ok": False, "id": 1, "error": error}).encode(), 1)
    assert type(e.value) is cls and e.value.code == error["code"] and e.value.message == "m"


def test_pool_empty_is_caught_as_pool_exhausted_too():
    # Code written before the daemon told them apart keeps working.
    with pytest.raises(PoolExhausted) as e:
        protocol.decode(b'{"ok":false,"id":1,"error":{"code":"pool_empty","message":"no endpoints"}}', 1)
    assert isinstance(e.value, PoolEmpty) and e.value.retry_after_ms is None


@pytest.mark.parametrize("code,cls", [("pool_exhausted", PoolExhausted), ("paced", Paced),
                                      ("destination_down", DestinationDown)])
def test_decode_retry_after_ms(code, cls):
    raw = json.dumps({"ok": False, "id": 5, "error": {"code": code, "message": "m", "retry_after_ms": 1500}})
    with pytest.raises(cls) as e:
        protocol.decode(raw.encode(), 5)
    assert e.value.retry_after_ms == 1500


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[1]",
        b'{"ok":true,"id":2,"version":"x"}',  # another request's answer
        b'{"ok":true,"version":"x"}',  # a success must say whose it is
        b'{"ok":true,"id":"1","version":"x"}',
        b'{"id":1,"version":"x"}',  # no "ok"
        b'\xff\xfe',
    ],
)
def test_decode_refuses_what_is_not_this_requests_answer(raw):
    with pytest.raises(ProtocolError) as e:
        protocol.decode(raw, 1)
    assert e.value.code == "io" and isinstance(e.value, TransportError)


def test_decode_an_error_the_daemon_could_not_pin_to_a_request():
    # An over-long line is answered without an id: an error, never a success.
    with pytest.raises(TooLarge):
        protocol.decode(b'{"ok":false,"error":{"code":"too_large","message":"m"}}', 4)


def test_malformed_success_replies_are_protocol_errors():
    with pytest.raises(ProtocolError, match="lease"):
        calls.lease().parse({"ok": True, "id": 1, "proxy": "http://h:1", "endpoint": 1})
    with pytest.raises(ProtocolError, match="version"):
        calls.ping().parse({"ok": True, "id": 1})


# -- addresses, tokens and discovery: the CLI's rule -------------------------------------
@pytest.mark.parametrize(
    "text,want",
    [
        ("/run/pp.sock", UnixAddress("/run/pp.sock")),
        ("relative.sock", UnixAddress("relative.sock")),
        ("unix:///run/pp.sock", UnixAddress("/run/pp.sock")),
        ("tcp://127.0.0.1:7000", TcpAddress("127.0.0.1", 7000)),
        ("TCP://pool.example:7000/", TcpAddress("pool.example", 7000)),
        ("tcp://[::1]:7000", TcpAddress("::1", 7000)),
    ],
)
def test_parse_address(text, want):
    assert parse_address(text) == want
    if isinstance(want, TcpAddress):
        assert str(want).startswith("tcp://") and parse_address(str(want)) == want


@pytest.mark.parametrize(
    "text,msg",
    [
        ("tcp://127.0.0.1", "tcp://HOST:PORT"),
        ("tcp://127.0.0.1:0", "tcp://HOST:PORT"),
        ("tcp://127.0.0.1:99999", "tcp://HOST:PORT"),
        ("tcp://:7000", "tcp://HOST:PORT"),
        ("tcp://h:7000/x", "tcp://HOST:PORT"),
        ("http://h:7000", "socket path or tcp://HOST:PORT"),
        ("", "empty"),
    ],
)
def test_parse_address_refuses(text, msg):
    with pytest.raises(ValueError, match=msg):
        parse_address(text)


def test_a_token_in_the_address_is_refused_without_echoing_it():
    with pytest.raises(ValueError) as e:
        parse_address("tcp://:s3cret@127.0.0.1:7000")
    assert "s3cret" not in str(e.value) and "token" in str(e.value)


def test_tokens_lease_token_first_and_never_over_unix():
    tcp = TcpAddress("127.0.0.1", 7000)
    env = {"PROXYPOOL_TOKEN": "admin", "PROXYPOOL_LEASE_TOKEN": "lease"}
    assert resolve_token(tcp, None, env) == "lease"
    assert resolve_token(tcp, None, {"PROXYPOOL_TOKEN": "admin", "PROXYPOOL_LEASE_TOKEN": ""}) == "admin"
    assert resolve_token(tcp, "given", env) == "given"
    assert resolve_token(UnixAddress("/s"), "given", env) is None
    with pytest.raises(ValueError, match="needs a token"):
        resolve_token(tcp, None, {})


def test_a_tcp_client_without_a_token_fails_before_sending(monkeypatch):
    monkeypatch.delenv("PROXYPOOL_TOKEN", raising=False)
    monkeypatch.delenv("PROXYPOOL_LEASE_TOKEN", raising=False)
    with pytest.raises(ValueError, match="PROXYPOOL_LEASE_TOKEN"):
        Client("tcp://127.0.0.1:9")
    with pytest.raises(ValueError, match="PROXYPOOL_LEASE_TOKEN"):
        AsyncClient("tcp://127.0.0.1:9")
    # The token stays out of the client's repr.
    assert "s3cret" not in repr(Client("tcp://127.0.0.1:9", token="s3cret"))


def test_discovery_connect_comes_first():
    env = {"PROXYPOOL_CONNECT": "tcp://10.0.0.5:7000", "PROXYPOOL_SOCKET": "/x/s.sock", "HOME": "/h"}
    assert default_address(env) == TcpAddress("10.0.0.5", 7000)
    assert default_address(dict(env, PROXYPOOL_CONNECT="")) == UnixAddress("/x/s.sock")
    with pytest.raises(ValueError, match="PROXYPOOL_CONNECT"):
        default_address(dict(env, PROXYPOOL_CONNECT="tcp://nowhere"))


def test_discovery_env_wins():
    env = {"PROXYPOOL_SOCKET": "/x/s.sock", "XDG_RUNTIME_DIR": "/run/u", "HOME": "/h"}
    assert default_socket_path(env) == "/x/s.sock"


def test_discovery_runtime_dir():
    env = {"PROXYPOOL_SOCKET": "", "XDG_RUNTIME_DIR": "/run/u", "HOME": "/nonexistent-home"}
    assert default_socket_path(env) == "/run/u/proxypool.sock"


def test_discovery_beside_default_database():
    # No XDG_RUNTIME_DIR (containers, cron): `serve` puts the socket beside the database.
    assert default_socket_path({"HOME": "/h"}) == "/h/.local/share/proxypool/proxypool.sock"
    assert default_socket_path({"HOME": "/h", "XDG_DATA_HOME": "/d"}) == "/d/proxypool/proxypool.sock"
    assert default_socket_path({"HOME": "/h", "PROXYPOOL_DB": "/var/lib/pp/main.db"}) == "/var/lib/pp/main.sock"
    assert default_socket_path({"HOME": "/h", "PROXYPOOL_DB": "/var/lib/pp/store"}) == "/var/lib/pp/store.sock"


def test_discovery_config_file():
    d = tempfile.mkdtemp()
    cfg = os.path.join(d, "proxies.toml")
    with open(cfg, "w") as f:
        f.write('[store]\npath = "data/x.db"\n')
    env = {"HOME": "/h", "PROXYPOOL_CONFIG": cfg}
    assert default_socket_path(env) == os.path.join(d, "data/x.sock")
    with open(cfg, "w") as f:
        f.write('[server]\nsocket = "run/pp.sock"\n')
    assert default_socket_path(dict(env, XDG_RUNTIME_DIR="/run/u")) == os.path.join(d, "run/pp.sock")
    # The default config location counts only when the file exists.
    os.makedirs(os.path.join(d, "cfg", "proxypool"))
    env = {"HOME": "/h", "XDG_CONFIG_HOME": os.path.join(d, "cfg"), "XDG_RUNTIME_DIR": "/run/u"}
    assert default_socket_path(env) == "/run/u/proxypool.sock"
    with open(os.path.join(d, "cfg", "proxypool", "proxies.toml"), "w") as f:
        f.write('[server]\nsocket = "/abs/pp.sock"\n')
    assert default_socket_path(env) == "/abs/pp.sock"


# -- what leased() sends ---------------------------------------------------------------
def test_exit_report_success_and_release():
    assert exit_report(None) == ("success", {})
    assert exit_report(ValueError("parser bug")) == ("release", {})
    assert exit_report(KeyboardInterrupt()) == ("release", {})


def test_exit_report_reportable_error():
    action, f = exit_report(ReportableError("destination_status", phase="response_head", status=429, retry_after="7"))
    assert action == "failure"
    assert (f["reason"], f["phase"], f["status"], f["retry_after"]) == ("destination_status", "response_head", 429, "7")


def test_exit_report_http_error_reason_is_not_a_proxypool_reason():
    # HTTPError.reason is 'Forbidden', not a reason of the protocol; the status is what
    # counts (403 is a ban), and a 404 blames nobody.
    e = urllib.error.HTTPError("http://x/", 403, "Forbidden", {}, None)
    action, f = exit_report(e)
    assert action == "failure" and f["reason"] == "destination_status" and f["status"] == 403
    e = urllib.error.HTTPError("http://x/", 404, "Not Found", {}, None)
    assert exit_report(e) == ("release", {})


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("__str__ is broken")


class BrokenAttributes(Exception):
    reason = "connect_refused"

    @property
    def phase(self):
        raise RuntimeError("phase is broken")

    status = "four hundred"
    retry_after = object()
    detail = 42


def test_exit_report_bounds_and_checks_what_it_copies():
    huge = "1" * (70 * 1024)
    action, f = exit_report(ReportableError("destination_status", phase="nowhere", status=70000,
                                            retry_after=huge, detail="d" * 5000))
    assert action == "failure" and f["reason"] == "destination_status"
    assert f["phase"] is None and f["status"] is None and f["retry_after"] is None
    assert len(f["detail"]) == 500
    assert exit_report(ReportableError("slow_response", retry_after=float("nan")))[1]["retry_after"] is None
    assert exit_report(ReportableError("slow_response", retry_after=datetime.timedelta(seconds=3)))[1]["retry_after"] == 3.0
    # Attributes that raise or have the wrong type are left out, not fatal.
    action, f = exit_report(BrokenAttributes("refused by the proxy"))
    assert action == "failure" and f["reason"] == "connect_refused"
    assert f["phase"] is None and f["status"] is None and f["retry_after"] is None
    assert f["detail"] == "refused by the proxy"  # from str(), since `detail` is not text


def test_exit_report_survives_an_exception_whose_str_raises():
    assert exit_report(Unprintable()) == ("release", {})

    class RefusedButUnprintable(ConnectionRefusedError):
        def __str__(self):
            raise RuntimeError("broken")

    action, f = exit_report(RefusedButUnprintable(111, "refused"))
    assert action == "failure" and f["reason"] == "connect_refused" and "unprintable" in f["detail"]
    with pytest.raises(RuntimeError):
        str(RefusedButUnprintable())


# -- both clients on the wire ----------------------------------------------------------
LEASE = {"ok": True, "lease": "L1", "proxy": "http://u:p@127.0.0.1:1", "endpoint": 3, "trial": False,
         "expires_in_ms": 60000}


def strip_ids(lines):
    return [{k: v for k, v in line.items() if k != "id"} for line in lines]


def test_sync_client_wire():
    rec = Recorder([LEASE, {"ok": True, "state": "available"}])
    c = Client(rec.path)
    with c.leased(pool="p", destination="example.org", schemes=["http"]) as lease:
        assert lease.proxies == {"http": lease.proxy, "https": lease.proxy}
        assert "u:p" not in repr(lease)
    assert strip_ids(rec.lines) == [
        {"op": "lease", "pool": "p", "destination": "example.org", "schemes": ["http"]},
        {"op": "report", "lease": "L1", "outcome": "success", "destination": "example.org"},
    ]
    assert len({line["id"] for line in rec.lines}) == 2  # a fresh id per request


def test_sync_client_success_never_raises_on_exit(caplog):
    # The report at the end of a successful block fails (lease expired, daemon
    # restarting): the block's result is kept, the failure is logged.
    rec = Recorder([LEASE, {"ok": False, "error": {"code": "lease_expired", "message": "gone"}}, LEASE, "close"])
    c = Client(rec.path, timeout=5)
    with c.leased() as lease:
        page = "the page"
    assert page == "the page" and lease.outcome is None
    assert "lease_expired" in caplog.text
    with c.leased():
        page = "second page"
    assert "the daemon closed the connection" in caplog.text


def test_sync_client_refused_report_falls_back_to_release():
    # A reason the daemon refuses must not leave the lease hanging until its TTL.
    rec = Recorder([LEASE, {"ok": False, "error": {"code": "bad_request", "message": "unknown reason"}}, {"ok": True}])
    c = Client(rec.path)
    with pytest.raises(ReportableError):
        with c.leased() as lease:
            raise ReportableError("connect_refused")
    assert [line["op"] for line in rec.lines] == ["lease", "report", "release"]
    assert lease.outcome == "released"


def test_a_report_of_a_stale_claim_is_logged_not_raised(caplog):
    rec = Recorder([dict(LEASE, trial=True), {"ok": False, "error": {"code": "stale_claim", "message": "claimed again"}},
                    {"ok": True}])
    with Client(rec.path) as c:
        with c.leased() as lease:
            pass
    assert "stale_claim" in caplog.text and lease.outcome == "released"


def test_async_client_wire():
    rec = Recorder([LEASE, {"ok": True, "state": "cooling"}, {"ok": True, "state": "cooling"}])

    async def main():
        c = AsyncClient(rec.path)
        with pytest.raises(ReportableError):
            async with c.leased(schemes=["http", "https"]):
                raise ReportableError("destination_status", status=429, retry_after="7")
        await c.report_session("s1", "failure", pool="gw", reason="destination_status", destination="a.org")
        await c.close()

    asyncio.run(main())
    assert strip_ids(rec.lines) == [
        {"op": "lease", "pool": "default", "schemes": ["http", "https"]},
        {"op": "report", "lease": "L1", "outcome": "failure", "reason": "destination_status", "status": 429,
         "retry_after": "7", "detail": "destination_status"},
        {"op": "report", "session": "s1", "pool": "gw", "outcome": "failure", "reason": "destination_status",
         "destination": "a.org"},
    ]


def test_a_reply_for_another_request_is_an_error_and_the_connection_goes():
    """Never a silently wrong answer: a reply whose id is not the request's raises, and
    the next request gets a connection of its own."""
    for make in (Client, AsyncClient):
        rec = Recorder([{"ok": True, "id": 999, "version": "stale"}, {"ok": True, "version": "0.2.0"}])

        def ping(c):
            return asyncio.run(c.ping()) if isinstance(c, AsyncClient) else c.ping()

        c = make(rec.path, timeout=5)
        with pytest.raises(TransportError, match="out of step"):
            ping(c)
        assert ping(c) == "0.2.0"


def test_replies_longer_than_a_request_line_are_read():
    # `endpoints` of a large pool is one long line.
    many = [{"id": i, "url": "http://h%d.example:3128" % i, "state": "available"} for i in range(5000)]
    assert len(json.dumps(many)) > 4 * protocol.MAX_LINE
    rec = Recorder([{"ok": True, "endpoints": many}, {"ok": True, "endpoints": many}])
    assert len(Client(rec.path, timeout=5).endpoints()) == 5000

    async def main():
        c = AsyncClient(rec.path, timeout=5)
        try:
            return await c.endpoints()
        finally:
            await c.close()

    assert len(asyncio.run(main())) == 5000


def test_seconds_for_read_deadlines():
    assert protocol.seconds("1m 30s") == 90.0
    assert protocol.seconds("500ms") == 0.5
    assert protocol.seconds(2) == 2.0
    assert protocol.seconds(None) == 0.0


def test_core_imports_no_third_party_library():
    import subprocess
    import sys

    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = (
        "import sys; sys.path.insert(0, %r); import proxypool_client; "
        "from proxypool_client import classify; classify(ValueError()); "
        "bad = [m for m in ('requests', 'urllib3', 'socks', 'httpx', 'aiohttp', 'scrapy', 'twisted', "
        "'typing_extensions') if m in sys.modules]; "
        "assert not bad, bad" % src
    )
    subprocess.run([sys.executable, "-I", "-c", code], check=True, timeout=30)


def test_the_old_middleware_path_still_loads():
    import subprocess
    import sys

    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = (
        "import sys, warnings; sys.path.insert(0, %r); warnings.simplefilter('error'); "
        "from scrapy.utils.misc import load_object\n"
        "try:\n    load_object('proxypool_client.scrapy.ProxyPoolMiddleware')\n"
        "except DeprecationWarning as e:\n    assert 'scrapy_middleware' in str(e), e\n"
        "else:\n    raise SystemExit('no DeprecationWarning')\n"
        "warnings.simplefilter('ignore')\n"
        "import proxypool_client.scrapy as old, proxypool_client.scrapy_middleware as new\n"
        "assert old.ProxyPoolMiddleware is new.ProxyPoolMiddleware" % src
    )
    need_module("scrapy")
    subprocess.run([sys.executable, "-I", "-c", code], check=True, timeout=60)


def test_an_async_client_outlives_its_event_loop():
    """Scripts call ``asyncio.run`` more than once with one client: a connection opened
    under a loop that is gone is not reused."""
    rec = Recorder([{"ok": True, "version": "0.2.0"}] * 2)
    c = AsyncClient(rec.path, timeout=5)
    assert asyncio.run(c.ping()) == "0.2.0"
    assert asyncio.run(c.ping()) == "0.2.0"
