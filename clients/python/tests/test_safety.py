"""What a client must never do, against a real daemon: hand one thread another's reply,
leave a lease behind when a task is cancelled, or lose a report (or the release) to an
exception object it cannot read."""

import asyncio
import random
import threading
import time
import urllib.request
import urllib.error

import pytest

from proxypool_client import AsyncClient, Client, PoolExhausted, ReportableError


def live_leases(daemon):
    with daemon.client(timeout=5) as c:
        return sum(p["leases"] for p in c.status())


def test_one_client_shared_by_threads_never_swaps_replies(daemon):
    """Each thread leases and reports on one shared Client: every lease gets a lease and
    every report a state, and no lease is left behind."""
    ids = set(daemon.add(*["http://127.0.0.1:%d" % (20000 + i) for i in range(24)]))
    client = daemon.client(timeout=10)
    errors, done = [], []

    def work(n):
        try:
            for i in range(60):
                lease = client.lease(ttl="60s")
                assert lease.endpoint in ids and lease.proxy.startswith("http://127.0.0.1:2")
                state = client.report(lease.id, "success", duration_ms=1)
                assert state == "available", state
                assert client.ping()
            done.append(n)
        except Exception as e:  # collected: an assertion in a thread would be lost
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    client.close()
    assert errors == [] and sorted(done) == list(range(8))
    assert live_leases(daemon) == 0


def test_a_lease_cancelled_while_its_reply_is_in_flight_is_given_back(daemon):
    """The daemon granted the lease; the task is cancelled before the reply is read (the
    event loop is held until the grant, so the reply is certainly in flight)."""
    daemon.add(*["http://127.0.0.1:%d" % (21000 + i) for i in range(4)])
    watcher = daemon.client(timeout=5)

    def granted():
        return sum(p["leases"] for p in watcher.status())

    async def none_left():
        deadline = time.monotonic() + 5
        while granted():
            assert time.monotonic() < deadline, "a cancelled lease was left behind"
            await asyncio.sleep(0.01)

    async def main():
        c = AsyncClient(daemon.socket, timeout=5)
        in_flight = 0
        for _ in range(20):
            await none_left()
            task = asyncio.ensure_future(c.lease(ttl="1h"))
            for _ in range(200):
                await asyncio.sleep(0)
                if task.done():
                    break
                if granted():  # blocks the loop: the reply cannot be read meanwhile
                    task.cancel()
                    in_flight += 1
                    break
            try:
                lease = await task
            except asyncio.CancelledError:
                pass
            else:
                await lease.release()
        await c.close()
        return in_flight

    in_flight = asyncio.run(main())
    assert in_flight >= 10, in_flight  # the case under test really happened
    assert granted() == 0
    watcher.close()


def test_random_cancellations_leave_no_lease_behind(daemon):
    daemon.add(*["http://127.0.0.1:%d" % (22000 + i) for i in range(8)])
    rng = random.Random(20)

    async def one(c):
        try:
            async with c.leased(ttl="1h", wait="2s") as lease:
                await asyncio.sleep(rng.random() * 0.004)
                return lease
        except PoolExhausted:
            return None

    async def main():
        c = AsyncClient(daemon.socket, timeout=5)
        cancelled = 0
        for _ in range(200):
            task = asyncio.ensure_future(one(c))
            await asyncio.sleep(rng.random() * 0.004)
            if not task.done():
                task.cancel()
                cancelled += 1
            try:
                await task
            except asyncio.CancelledError:
                pass
        await c.close()
        return cancelled

    cancelled = asyncio.run(main())
    assert cancelled >= 50, cancelled
    assert live_leases(daemon) == 0


def test_a_huge_retry_after_does_not_cost_the_ban(daemon, site, tinyproxy):
    """A site's 70 KB Retry-After is not copied into the report: the report fits, so the
    ban is recorded instead of refused as too_large."""
    (eid,) = daemon.add("http://127.0.0.1:%d" % tinyproxy.port)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": "http://127.0.0.1:%d" % tinyproxy.port}))
    headers = {"Retry-After": "1" * (70 * 1024)}
    with daemon.client(timeout=5) as c:
        # Scoped to a destination first: the endpoint stays available.
        with pytest.raises(ReportableError):
            with c.leased(destination="shop.example") as lease:
                raise ReportableError("destination_status", status=429, retry_after="1" * (70 * 1024))
        assert lease.outcome == "failure"
        assert [p["destination"] for p in daemon.show(eid)["pairs"]] == ["shop.example"]
        with pytest.raises(urllib.error.HTTPError):
            with c.leased() as lease:
                opener.open(site.url + "/page/1", timeout=5)  # fetched fine; the ban is the site's header
                raise urllib.error.HTTPError(site.url, 429, "Too Many Requests", headers, None)
        assert lease.outcome == "failure"
    ep = daemon.endpoint(eid)
    assert (ep["state"], ep["reason"]) == ("cooling", "destination_status")
    assert live_leases(daemon) == 0


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("__str__ is broken")


class UnprintableRefusal(ConnectionRefusedError):
    def __str__(self):
        raise RuntimeError("__str__ is broken")


def test_an_exception_that_cannot_be_printed_still_ends_the_lease(daemon):
    (eid,) = daemon.add("http://127.0.0.1:3128")
    with daemon.client(timeout=5) as c:
        # Nothing to blame: released, and the caller sees their own exception.
        with pytest.raises(Unprintable):
            with c.leased() as lease:
                raise Unprintable()
        assert lease.outcome == "release"
        # A refusal that cannot be printed is still reported as one.
        with pytest.raises(UnprintableRefusal):
            with c.leased() as lease:
                raise UnprintableRefusal(111, "refused")
        assert lease.outcome == "failure"
        assert daemon.endpoint(eid)["reason"] == "connect_refused"
        c.enable(eid, now=True)

        async def main():
            ac = AsyncClient(daemon.socket, timeout=5)
            with pytest.raises(Unprintable):
                async with ac.leased() as lease:
                    raise Unprintable()
            await ac.close()
            return lease

        assert asyncio.run(main()).outcome == "release"
    assert live_leases(daemon) == 0


def test_a_cancelled_block_gives_its_lease_back_even_when_cancelled_again(daemon):
    daemon.add("http://127.0.0.1:3128")

    async def main():
        c = AsyncClient(daemon.socket, timeout=5)
        entered = asyncio.Event()

        async def work():
            async with c.leased(ttl="1h"):
                entered.set()
                await asyncio.sleep(30)

        task = asyncio.ensure_future(work())
        await entered.wait()
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()  # a second cancellation lands while the release is under way
        with pytest.raises(asyncio.CancelledError):
            await task
        await c.close()  # waits for the release that went on in the background

    asyncio.run(main())
    assert live_leases(daemon) == 0
