"""The asyncio client: same protocol code as the sync one, over
``asyncio.open_unix_connection``. Requests on one connection are answered in order, so
one lock per connection keeps concurrent tasks from interleaving their lines."""

import asyncio
import contextlib

from . import protocol
from .discovery import default_socket_path
from .outcome import exit_report, warn_lost_report
from .protocol import BadRequest, Lease, ProxyPoolError, TransportError


class AsyncLease(Lease):
    __slots__ = ()

    async def report(self, outcome, **kw):
        kw.setdefault("destination", self.destination)
        state = await self._client.report(self.id, outcome, **kw)
        self.outcome = outcome
        return state

    async def success(self, **kw):
        return await self.report("success", **kw)

    async def failure(self, reason, **kw):
        return await self.report("failure", reason=reason, **kw)

    async def release(self):
        await self._client.release(self.id)
        self.outcome = "released"


class AsyncClient(object):
    """Connections to the lease socket, opened on demand. Requests on one connection are
    answered in order, so each request in flight has a connection of its own (idle ones
    are kept for reuse): a lease that waits for an endpoint never holds up a report sent
    meanwhile by another task. Safe to share between the tasks of one event loop."""

    MAX_IDLE = 8

    def __init__(self, path=None, timeout=30.0):
        self.path = path or default_socket_path()
        self.timeout = timeout
        self._idle = []
        self._next_id = 0

    async def _connect(self):
        try:
            return await asyncio.wait_for(
                asyncio.open_unix_connection(self.path, limit=protocol.MAX_LINE + 2), self.timeout
            )
        except (OSError, asyncio.TimeoutError) as e:
            raise TransportError("io", "cannot connect to %s: %s" % (self.path, e or "timed out"))

    @staticmethod
    async def _drop(conn):
        conn[1].close()
        with contextlib.suppress(Exception):
            await conn[1].wait_closed()

    async def close(self):
        idle, self._idle = self._idle, []
        for conn in idle:
            await self._drop(conn)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()
        return False

    async def request(self, op, **fields):
        """Send one request; return the response object, or raise ProxyPoolError."""
        self._next_id += 1
        line = protocol.encode(op, fields, self._next_id)
        conn = self._idle.pop() if self._idle else await self._connect()
        reader, writer = conn
        try:
            writer.write(line)
            await writer.drain()
            # A lease's `wait` is spent inside the daemon: allow for it.
            limit = self.timeout + protocol.seconds(fields.get("wait"))
            raw = await asyncio.wait_for(reader.readline(), limit)
        except (OSError, asyncio.TimeoutError, ValueError) as e:
            await self._drop(conn)
            raise TransportError("io", "socket %s: %s" % (self.path, e or "timed out"))
        except BaseException:
            # Cancelled mid-request: its answer must not reach the next user of this line.
            await self._drop(conn)
            raise
        if not raw.endswith(b"\n"):
            await self._drop(conn)
            raise TransportError("io", "the daemon closed the connection")
        try:
            resp = protocol.decode(raw)
        except TransportError:
            await self._drop(conn)
            raise
        except ProxyPoolError:
            self._keep(conn)
            raise
        self._keep(conn)
        return resp

    def _keep(self, conn):
        if len(self._idle) < self.MAX_IDLE:
            self._idle.append(conn)
        else:
            conn[1].close()

    async def lease(self, pool="default", ttl=None, wait=None, session=None, destination=None, schemes=None):
        fields = protocol.lease_fields(pool, ttl, wait, session, destination, schemes)
        return AsyncLease(self, await self.request("lease", **fields), destination)

    async def report(self, lease_id, outcome, reason=None, phase=None, status=None, retry_after=None,
                     detail=None, destination=None, duration_ms=None, session=None, pool=None):
        fields = protocol.report_fields(lease_id, outcome, reason, phase, status, retry_after,
                                        detail, destination, duration_ms, session, pool)
        return (await self.request("report", **fields)).get("state")

    async def report_session(self, session, outcome, pool=None, **kw):
        return await self.report(None, outcome, session=session, pool=pool, **kw)

    async def release(self, lease_id):
        if isinstance(lease_id, Lease):
            lease_id = lease_id.id
        await self.request("release", lease=lease_id)

    async def status(self, pool=None):
        return (await self.request("status", pool=pool))["pools"]

    async def endpoints(self, pool=None, state=None):
        return (await self.request("endpoints", pool=pool, state=state))["endpoints"]

    async def disable(self, endpoint, reason=None):
        return (await self.request("disable", endpoint=endpoint, reason=reason)).get("state")

    async def enable(self, endpoint, now=None):
        return (await self.request("enable", endpoint=endpoint, now=now)).get("state")

    async def ping(self):
        return (await self.request("ping"))["version"]

    async def finish(self, lease, exc=None):
        """As ``Client.finish``: never raises for a report that could not be delivered."""
        if lease.outcome is not None:
            return
        action, fields = exit_report(exc)
        try:
            if action == "release":
                await self.release(lease.id)
            else:
                await self.report(lease.id, action, destination=lease.destination, **fields)
            lease.outcome = action
        except BadRequest as e:
            warn_lost_report(lease, "report", e)
            try:
                await self.release(lease.id)
                lease.outcome = "released"
            except ProxyPoolError as e2:
                warn_lost_report(lease, "release", e2)
        except ProxyPoolError as e:
            warn_lost_report(lease, action, e)

    @contextlib.asynccontextmanager
    async def leased(self, pool="default", ttl=None, wait=None, session=None, destination=None, schemes=None):
        """``async with client.leased() as lease:`` -- the same rules as ``Client.leased``."""
        lease = await self.lease(pool=pool, ttl=ttl, wait=wait, session=session,
                                 destination=destination, schemes=schemes)
        try:
            yield lease
        except BaseException as exc:
            await self.finish(lease, exc)
            raise
        else:
            await self.finish(lease, None)
