"""Every exception the package raises, and the one that tells ``leased()`` a proxy failed.

The daemon answers a failed request with an error code; each code has its class here, so
callers catch what they can act on (``PoolExhausted``: wait; ``UnknownPool``: a typo in
the configuration). A code this version does not know yet still raises, as a plain
``ProxyPoolError`` carrying that code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional, Type

from .classify import classify

if TYPE_CHECKING:
    from collections.abc import Collection

    from .models import Duration


class ProxyPoolError(Exception):
    """An error answered by the daemon, or a failure to talk to it (code ``"io"``).

    ``code`` is the daemon's error code; ``message`` its text; ``retry_after_ms`` is set
    by the codes that name a time to come back (``pool_exhausted``, ``paced``,
    ``destination_down``), and None when there is no such deadline.
    """

    code: str = "internal"

    def __init__(self, code: str, message: str, retry_after_ms: Optional[int] = None) -> None:
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message
        self.retry_after_ms = retry_after_ms


class TransportError(ProxyPoolError):
    """The daemon could not be reached, or the connection broke mid-request (code
    ``"io"``). Whether the request took effect is unknown."""


class ProtocolError(TransportError):
    """The daemon's reply could not be read, or answered another request (its ``id``
    differs). The connection is dropped: nothing it said is trusted."""


class BadRequest(ProxyPoolError):
    """The daemon refused the request as malformed (a wrong field, a wrong token)."""


class UnknownOp(ProxyPoolError):
    """The daemon does not know the op."""


class UnknownPool(ProxyPoolError):
    """No pool of that name."""


class UnknownLease(ProxyPoolError):
    """No live lease of that id (already reported, released, or never granted)."""


class LeaseExpired(ProxyPoolError):
    """The lease outlived its ``ttl``."""


class PoolExhausted(ProxyPoolError):
    """The pool has endpoints, none available now. ``retry_after_ms``: time until the
    soonest cooldown ends, or None when nothing is cooling (waiting will not help)."""


class PoolEmpty(PoolExhausted):
    """The pool has no endpoint at all: nothing will come by waiting. A subclass of
    PoolExhausted, so code written before the daemon told the two apart still catches it."""


class Paced(ProxyPoolError):
    """Every endpoint was used for this destination too recently (the pool's pacing);
    ``retry_after_ms``: when the soonest is ready."""


class DestinationDown(ProxyPoolError):
    """The destination, not the proxies, is down; ``retry_after_ms``: when the daemon
    tries it again. Never the proxy's fault: nothing is reported against an endpoint."""


class Forbidden(ProxyPoolError):
    """The token's role does not allow this op (a lease-role token asking for an
    operator op). Nothing changed."""


class StaleClaim(ProxyPoolError):
    """A trial's report came after its claim lapsed and was claimed again: ignored."""


class StoreUnavailable(ProxyPoolError):
    """The daemon cannot write its database now; nothing was acknowledged."""


class TooLarge(ProxyPoolError):
    """A request line over 64 KiB (refused before sending, or by the daemon)."""


class InternalError(ProxyPoolError):
    """A failure inside the daemon (nothing was acknowledged)."""


ERRORS: Dict[str, Type[ProxyPoolError]] = {
    "io": TransportError,
    "bad_request": BadRequest,
    "unknown_op": UnknownOp,
    "unknown_pool": UnknownPool,
    "unknown_lease": UnknownLease,
    "lease_expired": LeaseExpired,
    "pool_exhausted": PoolExhausted,
    "pool_empty": PoolEmpty,
    "paced": Paced,
    "destination_down": DestinationDown,
    "forbidden": Forbidden,
    "stale_claim": StaleClaim,
    "store_unavailable": StoreUnavailable,
    "too_large": TooLarge,
    "internal": InternalError,
}


def error_for(code: str, message: str, retry_after_ms: Optional[int] = None) -> ProxyPoolError:
    """The exception for ``code``; a code this version does not know stays a plain
    ProxyPoolError with that code."""
    return ERRORS.get(code, ProxyPoolError)(code, message, retry_after_ms)


class ReportableError(Exception):
    """An exception that tells ``leased()`` how the proxy failed.

    ``reason`` is one of the daemon's reasons (``connect_refused``, ``connect_timeout``,
    ``destination_status``, ...); ``phase``, ``status``, ``retry_after`` and ``detail``
    are optional.
    """

    def __init__(
        self,
        reason: str,
        phase: Optional[str] = None,
        status: Optional[int] = None,
        retry_after: Optional[Duration] = None,
        detail: Optional[str] = None,
    ) -> None:
        super().__init__(detail or reason)
        self.reason = reason
        self.phase = phase
        self.status = status
        self.retry_after = retry_after
        self.detail = detail

    @classmethod
    def from_response(cls, response: Any, ban_statuses: Optional[Collection[int]] = None) -> Optional[ReportableError]:
        """A ReportableError for a ban-like response, or None when it looks fine."""
        c = classify(response=response, ban_statuses=ban_statuses)
        if c is None:
            return None
        return cls(c.reason, c.phase, c.status, c.retry_after, "HTTP %s" % c.status)
