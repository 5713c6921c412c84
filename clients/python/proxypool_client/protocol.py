"""The lease socket protocol, without I/O: request lines in, response objects out.

One JSON object per line over a Unix socket. The sync and the asyncio client both build
their lines and read their answers here, so they cannot drift apart.
"""

import json
import re

MAX_LINE = 64 * 1024

REASONS = frozenset(
    [
        "connect_refused",
        "connect_timeout",
        "dns_failed",
        "tls_failed",
        "proxy_auth_rejected",
        "proxy_protocol_error",
        "proxy_rejected",
        "upstream_unreachable",
        "destination_status",
        "body_mismatch",
        "slow_response",
        "connection_reset",
        "operator",
        "source_removed",
    ]
)

PHASES = frozenset(
    [
        "connect",
        "proxy_tls",
        "proxy_handshake",
        "destination_tls",
        "request",
        "response_head",
        "response_body",
    ]
)


class ProxyPoolError(Exception):
    """An error answered by the daemon, or a transport failure (code ``"io"``).

    ``code`` is one of the protocol codes or ``"io"``; ``retry_after_ms`` is set for
    ``pool_exhausted`` (None when nothing is cooling).
    """

    code = "internal"

    def __init__(self, code, message, retry_after_ms=None):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message
        self.retry_after_ms = retry_after_ms


class TransportError(ProxyPoolError):
    """The socket could not be reached, or broke mid-request (code ``"io"``)."""


class BadRequest(ProxyPoolError):
    pass


class UnknownOp(ProxyPoolError):
    pass


class UnknownPool(ProxyPoolError):
    pass


class UnknownLease(ProxyPoolError):
    pass


class LeaseExpired(ProxyPoolError):
    pass


class PoolExhausted(ProxyPoolError):
    pass


class TooLarge(ProxyPoolError):
    pass


class InternalError(ProxyPoolError):
    pass


ERRORS = {
    "io": TransportError,
    "bad_request": BadRequest,
    "unknown_op": UnknownOp,
    "unknown_pool": UnknownPool,
    "unknown_lease": UnknownLease,
    "lease_expired": LeaseExpired,
    "pool_exhausted": PoolExhausted,
    "too_large": TooLarge,
    "internal": InternalError,
}


def error(code, message, retry_after_ms=None):
    """The exception class for ``code`` (unknown codes stay plain ProxyPoolError)."""
    return ERRORS.get(code, ProxyPoolError)(code, message, retry_after_ms)


def duration(value):
    """Seconds (int/float), a humantime string ("1.5s", "500ms") or a timedelta."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise TypeError("a duration is seconds or a string like '30s', not %r" % (value,))
    if isinstance(value, (int, float)):
        return value
    if hasattr(value, "total_seconds"):
        return value.total_seconds()
    raise TypeError("a duration is seconds or a string like '30s', not %r" % (value,))


def seconds(value):
    """Seconds in a duration field, for a client's own read deadline (0 when unknown)."""
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        total = 0.0
        for num, unit in re.findall(r"([0-9.]+)\s*([a-z]*)", value):
            total += float(num) * _UNITS.get(unit, 0.0)
        return total
    return 0.0


_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "secs": 1.0, "ms": 0.001, "m": 60.0, "min": 60.0, "mins": 60.0,
          "h": 3600.0, "hr": 3600.0, "hrs": 3600.0}


def encode(op, fields, request_id):
    """The request line for ``op``. Fields that are None are not sent at all, so a daemon
    that predates an optional field never sees it unless the caller uses it."""
    req = {"op": op}
    req.update((k, v) for k, v in fields.items() if v is not None)
    req["id"] = request_id
    line = json.dumps(req, separators=(",", ":")).encode("utf-8") + b"\n"
    if len(line) > MAX_LINE + 1:
        raise TooLarge("too_large", "request longer than 64 KiB")
    return line


def decode(raw):
    """The response object of one line; raises the ProxyPoolError subclass it carries."""
    try:
        resp = json.loads(raw.decode("utf-8"))
    except ValueError as e:
        raise TransportError("io", "unreadable reply: %s" % e)
    if not isinstance(resp, dict):
        raise TransportError("io", "reply is not a JSON object: %r" % (resp,))
    if not resp.get("ok"):
        err = resp.get("error") or {}
        retry = err.get("retry_after_ms", resp.get("retry_after_ms"))
        raise error(err.get("code", "internal"), err.get("message", "daemon error"), retry)
    return resp


def lease_fields(pool, ttl, wait, session, destination, schemes):
    if schemes is not None:
        if isinstance(schemes, str):
            schemes = [schemes]
        schemes = [str(s) for s in schemes]
    return dict(
        pool=pool,
        ttl=duration(ttl),
        wait=duration(wait),
        session=session,
        destination=destination,
        schemes=schemes,
    )


def report_fields(
    lease_id,
    outcome,
    reason=None,
    phase=None,
    status=None,
    retry_after=None,
    detail=None,
    destination=None,
    duration_ms=None,
    session=None,
    pool=None,
):
    """Fields of a ``report``: by lease id, or by ``session`` (+ ``pool``) when
    ``lease_id`` is None (SPEC §13)."""
    if outcome not in ("success", "failure"):
        raise ValueError("outcome is 'success' or 'failure', not %r" % (outcome,))
    if lease_id is None and session is None:
        raise ValueError("report needs a lease id or a session")
    if lease_id is not None and session is not None:
        raise ValueError("report names a lease or a session, not both")
    if outcome == "failure" and not reason:
        raise ValueError("a failure report needs a reason (one of %s)" % ", ".join(sorted(REASONS)))
    if isinstance(lease_id, Lease):
        lease_id = lease_id.id
    if duration_ms is not None:
        duration_ms = int(round(duration_ms))
    return dict(
        lease=lease_id,
        session=session,
        pool=pool,
        outcome=outcome,
        reason=reason,
        phase=phase,
        status=status,
        retry_after=duration(retry_after),
        detail=detail,
        destination=destination,
        duration_ms=duration_ms,
    )


class Lease(object):
    """A granted lease: ``id``, ``proxy`` (URL with credentials), ``endpoint``,
    ``trial``, ``expires_in_ms``, ``scope`` (``"destination"`` for a pair's trial) and
    the ``destination`` it was asked for. ``outcome`` is set once reported or released."""

    __slots__ = (
        "id",
        "proxy",
        "endpoint",
        "trial",
        "expires_in_ms",
        "scope",
        "destination",
        "outcome",
        "_client",
    )

    def __init__(self, client, resp, destination=None):
        self._client = client
        self.id = resp["lease"]
        self.proxy = resp["proxy"]
        self.endpoint = resp["endpoint"]
        self.trial = bool(resp.get("trial"))
        self.expires_in_ms = resp.get("expires_in_ms")
        self.scope = resp.get("scope")
        self.destination = destination
        self.outcome = None

    def report(self, outcome, **kw):
        kw.setdefault("destination", self.destination)
        state = self._client.report(self.id, outcome, **kw)
        self.outcome = outcome
        return state

    def success(self, **kw):
        return self.report("success", **kw)

    def failure(self, reason, **kw):
        return self.report("failure", reason=reason, **kw)

    def release(self):
        self._client.release(self.id)
        self.outcome = "released"

    @property
    def scheme(self):
        return self.proxy.split("://", 1)[0].lower()

    @property
    def proxies(self):
        """The mapping ``requests`` takes as ``proxies=``."""
        return {"http": self.proxy, "https": self.proxy}

    def __repr__(self):
        return "Lease(id=%r, endpoint=%r, trial=%r, expires_in_ms=%r)" % (
            self.id,
            self.endpoint,
            self.trial,
            self.expires_in_ms,
        )
