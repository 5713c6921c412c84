"""Both clients over the daemon's TCP listener (``--listen-tcp``, ``PROXYPOOL_TOKEN``),
host to host on loopback: the token goes with every request, a wrong one is refused,
and it never shows in an error or a repr."""

import asyncio
import os
import shutil
import subprocess
import sys

import pytest
from conftest import Daemon

from proxypool_client import AsyncClient, BadRequest, Client, TcpAddress, TransportError

TOKEN = "tcp-t0ken-for-tests"


@pytest.fixture
def tcp_daemon():
    d = Daemon(tcp_token=TOKEN).start()
    yield d
    d.stop()
    shutil.rmtree(d.dir, ignore_errors=True)


def test_sync_client_over_tcp(tcp_daemon):
    (eid,) = tcp_daemon.add("http://127.0.0.1:3128")
    with Client(tcp_daemon.tcp, timeout=5, token=TOKEN) as c:
        assert isinstance(c.address, TcpAddress) and c.path is None
        assert c.ping()
        with c.leased(ttl="30s") as lease:
            assert lease.endpoint == eid
        assert lease.outcome == "success"
        lease = c.lease(destination="shop.example")
        lease.failure("destination_status", phase="response_head", status=403)
        assert [p["destination"] for p in tcp_daemon.show(eid)["pairs"]] == ["shop.example"]
        c.release(c.lease(session="s1"))
        c.report_session("s1", "failure", pool="default", reason="destination_status",
                         destination="other.example")
        assert sum(p["leases"] for p in c.status()) == 0


def test_async_client_over_tcp(tcp_daemon):
    tcp_daemon.add("http://127.0.0.1:3128", "http://127.0.0.1:3129")

    async def main():
        c = AsyncClient(tcp_daemon.tcp, timeout=5, token=TOKEN)
        versions = await asyncio.gather(*[c.ping() for _ in range(10)])
        assert len(set(versions)) == 1
        async with c.leased() as lease:
            pass
        assert lease.outcome == "success"
        assert sum(p["leases"] for p in await c.status()) == 0
        await c.close()

    asyncio.run(main())


def test_a_wrong_token_is_refused_and_never_echoed(tcp_daemon):
    tcp_daemon.add("http://127.0.0.1:3128")
    wrong = "not-the-token-" + "x" * 8
    with Client(tcp_daemon.tcp, timeout=5, token=wrong) as c:
        with pytest.raises(BadRequest) as e:
            c.lease()
        assert "token" in e.value.message
        assert wrong not in str(e.value) and TOKEN not in str(e.value) and wrong not in repr(c)

    async def main():
        c = AsyncClient(tcp_daemon.tcp, timeout=5, token=wrong)
        with pytest.raises(BadRequest):
            await c.ping()
        await c.close()

    asyncio.run(main())
    with Client(tcp_daemon.tcp, timeout=5, token=TOKEN) as c:
        assert sum(p["leases"] for p in c.status()) == 0


def test_nothing_listening_is_a_transport_error_naming_the_address(tcp_daemon):
    from servers import free_port

    address = "tcp://127.0.0.1:%d" % free_port()
    with pytest.raises(TransportError, match=address.replace(".", r"\.")) as e:
        Client(address, timeout=2, token=TOKEN).ping()
    assert TOKEN not in str(e.value)


def test_clients_find_the_daemon_by_proxypool_connect(tcp_daemon):
    """PROXYPOOL_CONNECT comes first, with PROXYPOOL_LEASE_TOKEN or PROXYPOOL_TOKEN;
    checked in a fresh interpreter that has no socket to fall back on."""
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = (
        "import asyncio, sys; sys.path.insert(0, %r)\n"
        "from proxypool_client import AsyncClient, Client, TcpAddress\n"
        "c = Client(timeout=5)\n"
        "assert isinstance(c.address, TcpAddress), c.address\n"
        "print(c.ping())\n"
        "print(asyncio.run(AsyncClient(timeout=5).ping()))\n" % src
    )
    for env_token in ({"PROXYPOOL_TOKEN": TOKEN}, {"PROXYPOOL_LEASE_TOKEN": TOKEN, "PROXYPOOL_TOKEN": "wrong"}):
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROXYPOOL_")}
        env.update(env_token, PROXYPOOL_CONNECT=tcp_daemon.tcp, PROXYPOOL_SOCKET="/nonexistent/pp.sock")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert len(set(out.stdout.split())) == 1, out.stdout
