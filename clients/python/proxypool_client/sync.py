"""The blocking client: one Unix socket connection, opened lazily."""

import contextlib
import socket

from . import protocol
from .discovery import default_socket_path
from .outcome import exit_report, warn_lost_report
from .protocol import BadRequest, Lease, ProxyPoolError, TransportError


class Client(object):
    """One connection to the daemon's lease socket, reopened after an I/O error.
    Not thread-safe: give each thread its own Client."""

    def __init__(self, path=None, timeout=30.0):
        self.path = path or default_socket_path()
        self.timeout = timeout
        self._sock = None
        self._buf = b""
        self._next_id = 0

    # -- transport -------------------------------------------------------------------
    def _connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.path)
        except OSError as e:
            s.close()
            raise TransportError("io", "cannot connect to %s: %s" % (self.path, e))
        self._sock = s
        self._buf = b""

    def close(self):
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
                self._buf = b""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _readline(self):
        while b"\n" not in self._buf:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise TransportError("io", "the daemon closed the connection")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def request(self, op, **fields):
        """Send one request; return the response object, or raise ProxyPoolError."""
        self._next_id += 1
        line = protocol.encode(op, fields, self._next_id)
        if self._sock is None:
            self._connect()
        try:
            # A lease's `wait` is spent inside the daemon: allow for it.
            self._sock.settimeout(self.timeout + protocol.seconds(fields.get("wait")))
            self._sock.sendall(line)
            raw = self._readline()
        except (OSError, ProxyPoolError) as e:
            self.close()
            if isinstance(e, ProxyPoolError):
                raise
            raise TransportError("io", "socket %s: %s" % (self.path, e))
        try:
            return protocol.decode(raw)
        except TransportError:
            self.close()
            raise

    # -- ops -------------------------------------------------------------------------
    def lease(self, pool="default", ttl=None, wait=None, session=None, destination=None, schemes=None):
        """Lease an endpoint. ``ttl``/``wait`` are seconds or strings like ``"30s"``;
        ``destination`` (a host) and ``schemes`` (e.g. ``["http", "https"]``) narrow the
        choice."""
        fields = protocol.lease_fields(pool, ttl, wait, session, destination, schemes)
        return Lease(self, self.request("lease", **fields), destination)

    def report(self, lease_id, outcome, reason=None, phase=None, status=None, retry_after=None,
               detail=None, destination=None, duration_ms=None, session=None, pool=None):
        """Report how a lease went; returns the endpoint's state afterwards. Pass
        ``lease_id=None`` and ``session=`` (+ ``pool=``) to report on the endpoint bound to
        a session. A ``"failure"`` needs a ``reason``."""
        fields = protocol.report_fields(lease_id, outcome, reason, phase, status, retry_after,
                                        detail, destination, duration_ms, session, pool)
        return self.request("report", **fields).get("state")

    def report_session(self, session, outcome, pool=None, **kw):
        return self.report(None, outcome, session=session, pool=pool, **kw)

    def release(self, lease_id):
        """Give a lease back without an outcome."""
        if isinstance(lease_id, Lease):
            lease_id = lease_id.id
        self.request("release", lease=lease_id)

    def status(self, pool=None):
        """Per-pool counts by state and live leases: a list of dicts."""
        return self.request("status", pool=pool)["pools"]

    def endpoints(self, pool=None, state=None):
        """Endpoints (passwords redacted)."""
        return self.request("endpoints", pool=pool, state=state)["endpoints"]

    def disable(self, endpoint, reason=None):
        return self.request("disable", endpoint=endpoint, reason=reason).get("state")

    def enable(self, endpoint, now=None):
        return self.request("enable", endpoint=endpoint, now=now).get("state")

    def ping(self):
        """The daemon's version."""
        return self.request("ping")["version"]

    # -- the context manager -----------------------------------------------------------
    def finish(self, lease, exc=None):
        """Send what ``leased()`` sends for a block that ended with ``exc``; never raises
        for a report that could not be delivered (it is logged)."""
        if lease.outcome is not None:
            return
        action, fields = exit_report(exc)
        try:
            if action == "release":
                self.release(lease.id)
            else:
                self.report(lease.id, action, destination=lease.destination, **fields)
            lease.outcome = action
        except BadRequest as e:
            # The daemon refused the report (an unknown reason from a caller): give the
            # lease back rather than let it sit until its TTL.
            warn_lost_report(lease, "report", e)
            try:
                self.release(lease.id)
                lease.outcome = "released"
            except ProxyPoolError as e2:
                warn_lost_report(lease, "release", e2)
        except ProxyPoolError as e:
            warn_lost_report(lease, action, e)

    @contextlib.contextmanager
    def leased(self, pool="default", ttl=None, wait=None, session=None, destination=None, schemes=None):
        """Lease for the duration of a ``with`` block.

        Normal exit reports success. An exception reports a failure when it carries a
        proxypool ``reason`` (e.g. ReportableError) or when the classifier recognises it
        (a refused proxy, a timeout, a SOCKS error...); any other exception releases the
        lease. The exception is always re-raised; a report that cannot be delivered on a
        normal exit (lease expired, daemon restarting) is logged, never raised.
        """
        lease = self.lease(pool=pool, ttl=ttl, wait=wait, session=session,
                           destination=destination, schemes=schemes)
        try:
            yield lease
        except BaseException as exc:
            self.finish(lease, exc)
            raise
        else:
            self.finish(lease, None)

