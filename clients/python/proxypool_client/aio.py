"""The asyncio client: the same Calls as the blocking one, over asyncio streams.

Requests on one connection are answered in order, so each request in flight has a
connection of its own (idle ones are kept for reuse): a lease that waits for an endpoint
never holds up a report sent meanwhile by another task.

A cancelled call leaves nothing behind. A ``lease`` cancelled after its request went out
may still be granted: its connection is handed to a background task that reads the
answer and gives the lease back, and ``close()`` waits for those tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from typing import Any, AsyncIterator, Awaitable, Iterable, List, Mapping, Optional, Set, TypeVar, Union

from . import calls
from .address import Address, AddressLike, TcpAddress, UnixAddress, parse_address, resolve_token
from .calls import EndpointRef, LeaseRef
from .discovery import default_address
from .exceptions import ProxyPoolError, TransportError
from .lease import AsyncLease
from .models import Duration, EndpointInfo, Outcome, PoolStatus, Reply
from .outcome import finish_steps
from .protocol import MAX_REPLY, Call, decode, encode

T = TypeVar("T")

log = logging.getLogger("proxypool_client")


class _Connection:
    __slots__ = ("reader", "writer", "address", "loop")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: Address) -> None:
        self.reader = reader
        self.writer = writer
        self.address = address
        self.loop = asyncio.get_running_loop()

    @classmethod
    async def open(cls, address: Address, timeout: float) -> _Connection:
        try:
            if isinstance(address, TcpAddress):
                opening = asyncio.open_connection(address.host, address.port, limit=MAX_REPLY)
            else:
                opening = asyncio.open_unix_connection(address.path, limit=MAX_REPLY)
            reader, writer = await asyncio.wait_for(opening, timeout)
        except (OSError, asyncio.TimeoutError) as e:
            raise TransportError("io", "cannot connect to %s: %s" % (address, e or "timed out")) from None
        return cls(reader, writer, address)

    async def write(self, line: bytes) -> None:
        try:
            self.writer.write(line)
            await self.writer.drain()
        except OSError as e:
            raise TransportError("io", "socket %s: %s" % (self.address, e)) from None

    async def readline(self, timeout: float) -> bytes:
        """One reply line within ``timeout`` seconds. The deadline closes the transport
        rather than wrapping the read in ``wait_for``, whose cancellation can drop a line
        already taken from the buffer (Python < 3.12)."""
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            self.writer.transport.abort()

        handle = asyncio.get_running_loop().call_later(max(timeout, 0.0), expire)
        try:
            raw = await self.reader.readline()
        except (OSError, ValueError) as e:  # ValueError: a line over MAX_REPLY
            if expired:
                raw = b""
            else:
                raise TransportError("io", "socket %s: %s" % (self.address, e)) from None
        finally:
            handle.cancel()
        if expired:
            raise TransportError("io", "no reply from %s within %.1f s" % (self.address, timeout))
        if not raw.endswith(b"\n"):
            raise TransportError("io", "the daemon closed the connection (%s)" % (self.address,))
        return raw[:-1]

    def close(self) -> None:
        self.writer.close()


class AsyncClient:
    """``AsyncClient()`` finds the daemon by the CLI's rule; ``AsyncClient(path)`` or
    ``AsyncClient("tcp://HOST:PORT", token=...)`` names it. Safe to share between the tasks
    of one event loop."""

    #: Idle connections kept open for reuse.
    MAX_IDLE = 16

    def __init__(
        self,
        address: Optional[AddressLike] = None,
        timeout: float = 30.0,
        *,
        token: Optional[str] = None,
        path: Optional[str] = None,
    ) -> None:
        if path is not None:  # the name of the first argument before TCP addresses existed
            if address is not None:
                raise TypeError("give address or path, not both")
            address = path
        self.address = default_address() if address is None else parse_address(address)
        self._token = resolve_token(self.address, token)
        self.timeout = float(timeout)
        self._idle: List[_Connection] = []
        self._ids = itertools.count(1)
        self._background: Set[asyncio.Task[Any]] = set()

    @property
    def path(self) -> Optional[str]:
        """The Unix socket's path (None over TCP)."""
        return self.address.path if isinstance(self.address, UnixAddress) else None

    def __repr__(self) -> str:
        return "%s(%r)" % (type(self).__name__, str(self.address))

    # -- transport -------------------------------------------------------------------
    async def send(self, call: Call[T]) -> T:
        """Run one Call; return its parsed reply, or raise ProxyPoolError."""
        request_id = next(self._ids)
        line = encode(call, request_id, self._token)
        loop = asyncio.get_running_loop()
        conn: Optional[_Connection] = None
        while self._idle and conn is None:
            conn = self._idle.pop()
            if conn.loop is not loop:
                # Opened under an event loop since gone (a second asyncio.run): unusable,
                # and closing it would need that loop; its socket goes with the object.
                conn = None
        if conn is None:
            conn = await _Connection.open(self.address, self.timeout)
        deadline = loop.time() + self.timeout + call.wait
        keep = False
        try:
            try:
                await conn.write(line)
                raw = await conn.readline(deadline - loop.time())
            except asyncio.CancelledError:
                if call.undo is not None:
                    # Sent: it may be granted still. Read the answer and undo it.
                    self._spawn(self._undo(conn, request_id, call, deadline))
                    conn = None
                raise
            try:
                reply = decode(raw, request_id)
            except TransportError:
                raise
            except ProxyPoolError as e:
                keep = e.code != "too_large"  # the daemon closes after a too_large
                raise
            result = call.parse(reply)
            keep = True
            return result
        finally:
            if conn is not None:
                if keep:
                    self._checkin(conn)
                else:
                    conn.close()

    def _checkin(self, conn: _Connection) -> None:
        if len(self._idle) < self.MAX_IDLE:
            self._idle.append(conn)
        else:
            conn.close()

    async def _undo(self, conn: _Connection, request_id: int, call: Call[Any], deadline: float) -> None:
        loop = asyncio.get_running_loop()
        try:
            reply = decode(await conn.readline(deadline - loop.time()), request_id)
            call.parse(reply)
        except ProxyPoolError:
            conn.close()  # refused (nothing granted), or no readable answer
            return
        self._checkin(conn)
        if call.undo is None:
            return
        try:
            await self.send(call.undo(reply))
            log.debug("proxypool: gave back lease %s, granted after its caller was cancelled", reply.get("lease"))
        except ProxyPoolError as e:
            log.warning("proxypool: could not give back lease %s, granted after its caller was cancelled: %s",
                        reply.get("lease"), e)

    def _spawn(self, work: Awaitable[None]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def close(self) -> None:
        """Wait for the give-backs of cancelled calls, then close the idle connections.
        The client stays usable: the next request connects again."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- ops -------------------------------------------------------------------------
    async def request(self, op: str, **fields: Any) -> Reply:
        """Any op with its fields; the reply object whole."""
        return await self.send(calls.raw(op, fields))

    async def lease(
        self,
        pool: str = "default",
        ttl: Optional[Duration] = None,
        wait: Optional[Duration] = None,
        session: Optional[str] = None,
        destination: Optional[str] = None,
        schemes: Union[str, Iterable[str], None] = None,
        tags: Optional[Mapping[str, str]] = None,
    ) -> AsyncLease:
        """As ``Client.lease``."""
        reply = await self.send(calls.lease(pool, ttl, wait, session, destination, schemes, tags))
        return AsyncLease(self, reply, destination, pool)

    async def report(
        self,
        lease: Optional[LeaseRef],
        outcome: Outcome,
        reason: Optional[str] = None,
        phase: Optional[str] = None,
        status: Optional[int] = None,
        retry_after: Optional[Duration] = None,
        detail: Optional[str] = None,
        destination: Optional[str] = None,
        duration_ms: Optional[float] = None,
        session: Optional[str] = None,
        pool: Optional[str] = None,
    ) -> Optional[str]:
        """As ``Client.report``."""
        return await self.send(calls.report(lease, outcome, reason, phase, status, retry_after, detail,
                                            destination, duration_ms, session, pool))

    async def report_session(self, session: str, outcome: Outcome, pool: Optional[str] = None, **fields: Any) -> Optional[str]:
        return await self.report(None, outcome, session=session, pool=pool, **fields)

    async def release(self, lease: LeaseRef) -> None:
        await self.send(calls.release(lease))

    async def status(self, pool: Optional[str] = None) -> List[PoolStatus]:
        return await self.send(calls.status(pool))

    async def endpoints(self, pool: Optional[str] = None, state: Optional[str] = None) -> List[EndpointInfo]:
        return await self.send(calls.endpoints(pool, state))

    async def disable(
        self, endpoint: EndpointRef, reason: Optional[str] = None, pool: Optional[str] = None
    ) -> Optional[str]:
        return await self.send(calls.disable(endpoint, reason, pool))

    async def enable(
        self,
        endpoint: EndpointRef,
        now: Optional[bool] = None,
        destination: Optional[str] = None,
        pool: Optional[str] = None,
    ) -> Optional[str]:
        return await self.send(calls.enable(endpoint, now, destination, pool))

    async def ping(self) -> str:
        return await self.send(calls.ping())

    # -- the context manager -----------------------------------------------------------
    async def finish(self, lease: AsyncLease, exc: Optional[BaseException] = None) -> None:
        """As ``Client.finish``: never raises for a report that could not be delivered."""
        steps = finish_steps(lease, exc)
        answer: Any = None
        error: Optional[ProxyPoolError] = None
        while True:
            try:
                call = steps.send(answer) if error is None else steps.throw(error)
            except StopIteration:
                return
            try:
                answer, error = await self.send(call), None
            except ProxyPoolError as e:
                answer, error = None, e

    @contextlib.asynccontextmanager
    async def leased(
        self,
        pool: str = "default",
        ttl: Optional[Duration] = None,
        wait: Optional[Duration] = None,
        session: Optional[str] = None,
        destination: Optional[str] = None,
        schemes: Union[str, Iterable[str], None] = None,
        tags: Optional[Mapping[str, str]] = None,
    ) -> AsyncIterator[AsyncLease]:
        """``async with client.leased() as lease:`` -- the same rules as ``Client.leased``.
        The report or release at the end runs to completion even if the task is cancelled
        again meanwhile (in the background then; ``close()`` waits for it)."""
        lease = await self.lease(pool, ttl, wait, session, destination, schemes, tags)
        try:
            yield lease
        except BaseException as exc:
            await asyncio.shield(self._spawn(self.finish(lease, exc)))
            raise
        else:
            await asyncio.shield(self._spawn(self.finish(lease, None)))
