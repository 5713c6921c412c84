"""A small client for the proxypool lease socket (stdlib only).

    from proxypool_client import Client

    client = Client()                      # $PROXYPOOL_SOCKET, else $XDG_RUNTIME_DIR/proxypool.sock
    with client.leased(pool="default") as lease:
        fetch(url, proxies={"http": lease.proxy, "https": lease.proxy})
    # success is reported on normal exit; on an exception the lease is released, or a
    # failure is reported when the exception carries a `reason` (and optionally a `phase`,
    # `status`, `retry_after`, `detail`).

The protocol is one JSON object per line over a Unix socket (see the project's SPEC §7).
A Client keeps one connection, opened lazily and reopened after an I/O error. It is not
thread-safe: give each thread its own Client.
"""

import contextlib
import json
import os
import socket

__all__ = ["Client", "Lease", "ProxyPoolError", "ReportableError", "default_socket_path"]

MAX_LINE = 64 * 1024


def default_socket_path():
    """``$PROXYPOOL_SOCKET``, else ``$XDG_RUNTIME_DIR/proxypool.sock``."""
    path = os.environ.get("PROXYPOOL_SOCKET")
    if path:
        return path
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "proxypool.sock")
    raise ProxyPoolError(
        "bad_request",
        "no socket path: pass Client(path=...), or set PROXYPOOL_SOCKET or XDG_RUNTIME_DIR",
    )


class ProxyPoolError(Exception):
    """An error answered by the daemon (or a transport failure, code ``"io"``).

    ``code`` is one of the protocol codes (``bad_request``, ``unknown_op``,
    ``unknown_pool``, ``unknown_lease``, ``lease_expired``, ``pool_exhausted``,
    ``too_large``, ``internal``) or ``"io"``; ``retry_after_ms`` is set for
    ``pool_exhausted`` (None when nothing is cooling).
    """

    def __init__(self, code, message, retry_after_ms=None):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message
        self.retry_after_ms = retry_after_ms


class ReportableError(Exception):
    """An exception that tells ``Client.leased`` how the proxy failed.

    Any exception with a ``reason`` attribute works the same way; this one is a
    convenience. ``reason`` is one of the protocol reasons (``connect_refused``,
    ``connect_timeout``, ``destination_status``, ...).
    """

    def __init__(self, reason, phase=None, status=None, retry_after=None, detail=None):
        super().__init__(detail or reason)
        self.reason = reason
        self.phase = phase
        self.status = status
        self.retry_after = retry_after
        self.detail = detail


class Lease(object):
    """A granted lease: ``id``, ``proxy`` (URL with credentials), ``endpoint``,
    ``trial`` and ``expires_in_ms``. ``outcome`` is set once reported or released."""

    __slots__ = ("id", "proxy", "endpoint", "trial", "expires_in_ms", "outcome", "_client")

    def __init__(self, client, resp):
        self._client = client
        self.id = resp["lease"]
        self.proxy = resp["proxy"]
        self.endpoint = resp["endpoint"]
        self.trial = bool(resp["trial"])
        self.expires_in_ms = resp["expires_in_ms"]
        self.outcome = None

    def report(self, outcome, **kw):
        state = self._client.report(self.id, outcome, **kw)
        self.outcome = outcome
        return state

    def success(self):
        return self.report("success")

    def failure(self, reason, **kw):
        return self.report("failure", reason=reason, **kw)

    def release(self):
        self._client.release(self.id)
        self.outcome = "released"

    def __repr__(self):
        return "Lease(id=%r, endpoint=%r, trial=%r, expires_in_ms=%r)" % (
            self.id,
            self.endpoint,
            self.trial,
            self.expires_in_ms,
        )


def _duration(value):
    """Seconds (int/float) or a humantime string ("1.5s", "500ms") pass through."""
    if value is None or isinstance(value, (int, float, str)):
        return value
    if hasattr(value, "total_seconds"):  # datetime.timedelta
        return value.total_seconds()
    raise TypeError("a duration is seconds or a string like '30s', not %r" % (value,))


class Client(object):
    """One connection to the daemon's lease socket."""

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
            raise ProxyPoolError("io", "cannot connect to %s: %s" % (self.path, e))
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
                raise ProxyPoolError("io", "the daemon closed the connection")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def request(self, op, **fields):
        """Send one request; return the response object, or raise ProxyPoolError."""
        req = {"op": op}
        req.update({k: v for k, v in fields.items() if v is not None})
        self._next_id += 1
        req["id"] = self._next_id
        line = json.dumps(req, separators=(",", ":")).encode("utf-8") + b"\n"
        if len(line) > MAX_LINE + 1:
            raise ProxyPoolError("too_large", "request longer than 64 KiB")
        if self._sock is None:
            self._connect()
        try:
            self._sock.sendall(line)
            raw = self._readline()
        except (OSError, ProxyPoolError) as e:
            self.close()
            if isinstance(e, ProxyPoolError):
                raise
            raise ProxyPoolError("io", "socket %s: %s" % (self.path, e))
        try:
            resp = json.loads(raw.decode("utf-8"))
        except ValueError as e:
            self.close()
            raise ProxyPoolError("io", "unreadable reply: %s" % e)
        if not resp.get("ok"):
            err = resp.get("error") or {}
            retry = err.get("retry_after_ms", resp.get("retry_after_ms"))
            raise ProxyPoolError(
                err.get("code", "internal"), err.get("message", "daemon error"), retry
            )
        return resp

    # -- ops -------------------------------------------------------------------------
    def lease(self, pool="default", ttl=None, wait=None, session=None):
        """Lease an endpoint. ``ttl``/``wait`` are seconds or strings like ``"30s"``."""
        resp = self.request(
            "lease", pool=pool, ttl=_duration(ttl), wait=_duration(wait), session=session
        )
        return Lease(self, resp)

    def report(
        self,
        lease_id,
        outcome,
        reason=None,
        phase=None,
        status=None,
        retry_after=None,
        detail=None,
    ):
        """Report how a lease went; returns the endpoint's state afterwards.
        A ``"failure"`` needs a ``reason``."""
        if isinstance(lease_id, Lease):
            lease_id = lease_id.id
        resp = self.request(
            "report",
            lease=lease_id,
            outcome=outcome,
            reason=reason,
            phase=phase,
            status=status,
            retry_after=_duration(retry_after),
            detail=detail,
        )
        return resp["state"]

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

    def ping(self):
        """The daemon's version."""
        return self.request("ping")["version"]

    @contextlib.contextmanager
    def leased(self, pool="default", ttl=None, wait=None, session=None):
        """Lease for the duration of a ``with`` block.

        Normal exit reports success. An exception that carries a ``reason`` attribute
        reports a failure with it (plus ``phase``, ``status``, ``retry_after``,
        ``detail`` when present); any other exception releases the lease. The exception
        is always re-raised. Nothing is sent if the block already reported or released.
        """
        lease = self.lease(pool=pool, ttl=ttl, wait=wait, session=session)
        try:
            yield lease
        except BaseException as exc:
            if lease.outcome is None:
                reason = getattr(exc, "reason", None)
                try:
                    if isinstance(reason, str) and reason:
                        lease.failure(
                            reason,
                            phase=getattr(exc, "phase", None),
                            status=getattr(exc, "status", None),
                            retry_after=getattr(exc, "retry_after", None),
                            detail=getattr(exc, "detail", None) or str(exc) or None,
                        )
                    else:
                        lease.release()
                except ProxyPoolError:
                    # An expired lease cannot be reported; the original error matters more.
                    pass
            raise
        else:
            if lease.outcome is None:
                lease.success()
