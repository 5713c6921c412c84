"""Unit tests without a daemon: request encoding, response decoding, socket discovery,
and what leased() decides to send. The wire tests use a recording Unix socket so both
clients are checked byte for byte."""

import asyncio
import json
import os
import socket
import tempfile
import threading
import urllib.error

import pytest

from proxypool_client import (
    AsyncClient,
    BadRequest,
    Client,
    LeaseExpired,
    PoolExhausted,
    ProxyPoolError,
    ReportableError,
    TooLarge,
    TransportError,
    UnknownPool,
    default_socket_path,
)
from proxypool_client import protocol
from proxypool_client.outcome import exit_report


def test_encode_sends_only_given_fields():
    line = protocol.encode("lease", protocol.lease_fields("p", None, None, None, None, None), 7)
    assert json.loads(line) == {"op": "lease", "pool": "p", "id": 7}
    assert line.endswith(b"\n") and line.count(b"\n") == 1


def test_encode_new_fields_when_given():
    f = protocol.lease_fields("p", "30s", 1.5, "s1", "example.org", ("http", "https"))
    assert json.loads(protocol.encode("lease", f, 1)) == {
        "op": "lease", "pool": "p", "ttl": "30s", "wait": 1.5, "session": "s1",
        "destination": "example.org", "schemes": ["http", "https"], "id": 1,
    }
    r = protocol.report_fields("L1", "failure", reason="destination_status", phase="response_head", status=429,
                               retry_after="7", destination="example.org", duration_ms=12.6)
    assert json.loads(protocol.encode("report", r, 2)) == {
        "op": "report", "lease": "L1", "outcome": "failure", "reason": "destination_status",
        "phase": "response_head", "status": 429, "retry_after": "7", "destination": "example.org",
        "duration_ms": 13, "id": 2,
    }


def test_report_by_session():
    r = protocol.report_fields(None, "failure", reason="destination_status", session="abc", pool="gw")
    assert json.loads(protocol.encode("report", r, 3)) == {
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
def test_report_fields_refuses_bad_calls(args, kw, msg):
    with pytest.raises(ValueError, match=msg):
        protocol.report_fields(*args, **kw)


def test_too_large_and_durations():
    with pytest.raises(TooLarge):
        protocol.encode("report", {"detail": "x" * (70 * 1024)}, 1)
    import datetime

    assert protocol.duration(datetime.timedelta(seconds=2)) == 2.0
    with pytest.raises(TypeError):
        protocol.duration(True)


@pytest.mark.parametrize(
    "raw,cls,code",
    [
        (b'{"ok":false,"error":{"code":"bad_request","message":"m"}}', BadRequest, "bad_request"),
        (b'{"ok":false,"error":{"code":"unknown_pool","message":"m"}}', UnknownPool, "unknown_pool"),
        (b'{"ok":false,"error":{"code":"lease_expired","message":"m"}}', LeaseExpired, "lease_expired"),
        (b'{"ok":false,"error":{"code":"new_code","message":"m"}}', ProxyPoolError, "new_code"),
        (b"not json", TransportError, "io"),
        (b"[1]", TransportError, "io"),
    ],
)
def test_decode_errors(raw, cls, code):
    with pytest.raises(cls) as e:
        protocol.decode(raw)
    assert e.value.code == code


def test_decode_pool_exhausted_retry_after():
    with pytest.raises(PoolExhausted) as e:
        protocol.decode(b'{"ok":false,"error":{"code":"pool_exhausted","message":"m","retry_after_ms":1500}}')
    assert e.value.retry_after_ms == 1500


# -- socket discovery: the CLI's rule (src/cli.rs Context::resolve, src/config.rs) -------
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
    # Bug 2: HTTPError.reason is 'Forbidden', not a reason of the protocol; the status is
    # what counts (403 is a ban), and a 404 blames nobody.
    e = urllib.error.HTTPError("http://x/", 403, "Forbidden", {}, None)
    action, f = exit_report(e)
    assert action == "failure" and f["reason"] == "destination_status" and f["status"] == 403
    e = urllib.error.HTTPError("http://x/", 404, "Not Found", {}, None)
    assert exit_report(e) == ("release", {})


# -- both clients on the wire ----------------------------------------------------------
class Recorder(object):
    """A Unix socket that records request lines and answers from a script."""

    def __init__(self, answers):
        self.path = os.path.join(tempfile.mkdtemp(), "rec.sock")
        self.lines, self.answers = [], list(answers)
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(self.path)
        self.sock.listen(4)
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            f = conn.makefile("rwb")
            for line in f:
                req = json.loads(line)
                self.lines.append(req)
                ans = self.answers.pop(0) if self.answers else {"ok": True}
                if ans == "close":
                    f.close()
                    conn.close()
                    break
                f.write((json.dumps(dict(ans, id=req.get("id"))) + "\n").encode())
                f.flush()


LEASE = {"ok": True, "lease": "L1", "proxy": "http://u:p@127.0.0.1:1", "endpoint": 3, "trial": False,
         "expires_in_ms": 60000}


def strip_ids(lines):
    return [{k: v for k, v in line.items() if k != "id"} for line in lines]


def test_sync_client_wire():
    rec = Recorder([LEASE, {"ok": True, "state": "available"}])
    c = Client(rec.path)
    with c.leased(pool="p", destination="example.org", schemes=["http"]) as lease:
        assert lease.proxies == {"http": lease.proxy, "https": lease.proxy}
    assert strip_ids(rec.lines) == [
        {"op": "lease", "pool": "p", "destination": "example.org", "schemes": ["http"]},
        {"op": "report", "lease": "L1", "outcome": "success", "destination": "example.org"},
    ]


def test_sync_client_success_never_raises_on_exit(caplog):
    # Bug 3: the report at the end of a successful block fails (lease expired, daemon
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


def test_sync_client_bad_report_falls_back_to_release():
    # A reason the daemon refuses must not leave the lease hanging until its TTL.
    rec = Recorder([LEASE, {"ok": False, "error": {"code": "bad_request", "message": "unknown reason"}}, {"ok": True}])
    c = Client(rec.path)
    with pytest.raises(ReportableError):
        with c.leased():
            raise ReportableError("connect_refused")
    assert [line["op"] for line in rec.lines] == ["lease", "report", "release"]


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
        "bad = [m for m in ('requests', 'urllib3', 'socks', 'httpx', 'aiohttp', 'scrapy', 'twisted') if m in sys.modules]; "
        "assert not bad, bad" % src
    )
    subprocess.run([sys.executable, "-I", "-c", code], check=True, timeout=30)
