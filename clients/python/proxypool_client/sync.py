"""The blocking client. Safe to share between threads: each request takes a connection
of its own (an idle one, or a new one), so replies can never cross, and every reply's id
is checked against its request's."""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
from typing import Any, Iterable, Iterator, List, Mapping, Optional, TypeVar, Union

from . import calls
from .address import AddressLike, TcpAddress, UnixAddress, parse_address, resolve_token
from .calls import EndpointRef, LeaseRef
from .discovery import default_address
from .exceptions import ProtocolError, ProxyPoolError, TransportError
from .lease import Lease
from .models import Duration, EndpointInfo, Outcome, PoolStatus, Reply
from .outcome import finish_steps
from .protocol import MAX_REPLY, Call, decode, encode

T = TypeVar("T")


class _Connection:
    """One socket to the daemon and what it has read past the last reply."""

    __slots__ = ("sock", "buf", "address")

    def __init__(self, sock: socket.socket, address: Union[UnixAddress, TcpAddress]) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.address = address

    @classmethod
    def open(cls, address: Union[UnixAddress, TcpAddress], timeout: float) -> _Connection:
        try:
            if isinstance(address, TcpAddress):
                sock = socket.create_connection((address.host, address.port), timeout=timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            else:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(timeout)
                try:
                    sock.connect(address.path)
                except BaseException:
                    sock.close()
                    raise
        except OSError as e:
            raise TransportError("io", "cannot connect to %s: %s" % (address, e)) from None
        return cls(sock, address)

    def exchange(self, line: bytes, timeout: float) -> bytes:
        """Send one request line and read one reply line within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        try:
            self.sock.settimeout(timeout)
            self.sock.sendall(line)
            scanned = 0
            while True:
                end = self.buf.find(b"\n", scanned)
                if end >= 0:
                    break
                scanned = len(self.buf)
                if scanned > MAX_REPLY:
                    raise ProtocolError("io", "reply from %s longer than %d bytes" % (self.address, MAX_REPLY))
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise socket.timeout()
                self.sock.settimeout(remaining)
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    raise TransportError("io", "the daemon closed the connection (%s)" % (self.address,))
                self.buf += chunk
        except socket.timeout:
            raise TransportError("io", "no reply from %s within %.1f s" % (self.address, timeout)) from None
        except OSError as e:
            raise TransportError("io", "socket %s: %s" % (self.address, e)) from None
        reply = bytes(self.buf[:end])
        del self.buf[: end + 1]
        return reply

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Client:
    """A client of the daemon: ``Client()`` finds it by the CLI's rule;
    ``Client("/path/proxypool.sock")`` or ``Client("tcp://HOST:PORT", token=...)`` names it.

    ``timeout`` bounds connecting and each reply (a lease's ``wait`` is added to it). One
    Client may be shared by any number of threads: each request in flight has a
    connection of its own, and idle connections are kept for reuse.
    """

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
        self._lock = threading.Lock()
        self._idle: List[_Connection] = []
        self._ids = itertools.count(1)
        self._generation = 0

    @property
    def path(self) -> Optional[str]:
        """The Unix socket's path (None over TCP)."""
        return self.address.path if isinstance(self.address, UnixAddress) else None

    def __repr__(self) -> str:
        return "%s(%r)" % (type(self).__name__, str(self.address))

    # -- transport -------------------------------------------------------------------
    def send(self, call: Call[T]) -> T:
        """Run one Call; return its parsed reply, or raise ProxyPoolError."""
        with self._lock:
            request_id = next(self._ids)
            conn = self._idle.pop() if self._idle else None
            generation = self._generation
        try:
            line = encode(call, request_id, self._token)
        except ProxyPoolError:
            if conn is not None:
                self._checkin(conn, generation)
            raise
        if conn is None:
            conn = _Connection.open(self.address, self.timeout)
        keep = False
        try:
            raw = conn.exchange(line, self.timeout + call.wait)
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
            # Anything else (a timeout, ^C mid-read) leaves the reply unread: the
            # connection is out of step and goes.
            if keep:
                self._checkin(conn, generation)
            else:
                conn.close()

    def _checkin(self, conn: _Connection, generation: int) -> None:
        with self._lock:
            if generation == self._generation and not conn.buf and len(self._idle) < self.MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the idle connections (and those in use, once their request is done).
        The client stays usable: the next request connects again."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._generation += 1
        for conn in idle:
            conn.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- ops -------------------------------------------------------------------------
    def request(self, op: str, **fields: Any) -> Reply:
        """Any op with its fields; the reply object whole."""
        return self.send(calls.raw(op, fields))

    def lease(
        self,
        pool: str = "default",
        ttl: Optional[Duration] = None,
        wait: Optional[Duration] = None,
        session: Optional[str] = None,
        destination: Optional[str] = None,
        schemes: Union[str, Iterable[str], None] = None,
        tags: Optional[Mapping[str, str]] = None,
    ) -> Lease:
        """Lease an endpoint. ``ttl``/``wait`` are seconds or strings like ``"30s"``;
        ``destination`` (a host), ``schemes`` (e.g. ``["http", "https"]``) and ``tags``
        (e.g. ``{"country": "us"}``: endpoints carrying every one) narrow the choice."""
        reply = self.send(calls.lease(pool, ttl, wait, session, destination, schemes, tags))
        return Lease(self, reply, destination, pool)

    def report(
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
        """Report how a lease went; returns the endpoint's state afterwards. Pass
        ``lease=None`` and ``session=`` (+ ``pool=``) to report on the endpoint bound to a
        session. A ``"failure"`` needs a ``reason``."""
        return self.send(calls.report(lease, outcome, reason, phase, status, retry_after, detail,
                                      destination, duration_ms, session, pool))

    def report_session(self, session: str, outcome: Outcome, pool: Optional[str] = None, **fields: Any) -> Optional[str]:
        """``report`` on the endpoint bound to ``session`` in ``pool``."""
        return self.report(None, outcome, session=session, pool=pool, **fields)

    def release(self, lease: LeaseRef) -> None:
        """Give a lease back without an outcome."""
        self.send(calls.release(lease))

    def status(self, pool: Optional[str] = None) -> List[PoolStatus]:
        """Per-pool counts by state and live leases."""
        return self.send(calls.status(pool))

    def endpoints(self, pool: Optional[str] = None, state: Optional[str] = None) -> List[EndpointInfo]:
        """The endpoints, passwords redacted."""
        return self.send(calls.endpoints(pool, state))

    def disable(self, endpoint: EndpointRef, reason: Optional[str] = None, pool: Optional[str] = None) -> Optional[str]:
        """Disable the endpoint (of ``pool``, for a URL in several pools)."""
        return self.send(calls.disable(endpoint, reason, pool))

    def enable(
        self,
        endpoint: EndpointRef,
        now: Optional[bool] = None,
        destination: Optional[str] = None,
        pool: Optional[str] = None,
    ) -> Optional[str]:
        return self.send(calls.enable(endpoint, now, destination, pool))

    def ping(self) -> str:
        """The daemon's version."""
        return self.send(calls.ping())

    # -- the context manager -----------------------------------------------------------
    def finish(self, lease: Lease, exc: Optional[BaseException] = None) -> None:
        """Send what ``leased()`` sends for a block that ended with ``exc``. Never raises
        for a report that could not be delivered (it is logged)."""
        steps = finish_steps(lease, exc)
        answer: Any = None
        error: Optional[ProxyPoolError] = None
        while True:
            try:
                call = steps.send(answer) if error is None else steps.throw(error)
            except StopIteration:
                return
            try:
                answer, error = self.send(call), None
            except ProxyPoolError as e:
                answer, error = None, e

    @contextlib.contextmanager
    def leased(
        self,
        pool: str = "default",
        ttl: Optional[Duration] = None,
        wait: Optional[Duration] = None,
        session: Optional[str] = None,
        destination: Optional[str] = None,
        schemes: Union[str, Iterable[str], None] = None,
        tags: Optional[Mapping[str, str]] = None,
    ) -> Iterator[Lease]:
        """Lease for the duration of a ``with`` block.

        Normal exit reports success. An exception reports a failure when it carries a
        proxypool ``reason`` (e.g. ReportableError) or when the classifier recognises it
        (a refused proxy, a timeout, a SOCKS error...); any other exception releases the
        lease. The exception is always re-raised; a report that cannot be delivered on a
        normal exit (lease expired, daemon restarting) is logged, never raised.
        """
        lease = self.lease(pool, ttl, wait, session, destination, schemes, tags)
        try:
            yield lease
        except BaseException as exc:
            self.finish(lease, exc)
            raise
        else:
            self.finish(lease, None)

