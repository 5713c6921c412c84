"""What ``leased()`` sends when its block ends, shared by the sync and asyncio clients."""

import logging

from .classify import classify
from .protocol import REASONS

log = logging.getLogger("proxypool_client")


class ReportableError(Exception):
    """An exception that tells ``leased()`` how the proxy failed.

    ``reason`` is one of the protocol reasons (``connect_refused``, ``connect_timeout``,
    ``destination_status``, ...); ``phase``, ``status``, ``retry_after`` and ``detail``
    are optional.
    """

    def __init__(self, reason, phase=None, status=None, retry_after=None, detail=None):
        super().__init__(detail or reason)
        self.reason = reason
        self.phase = phase
        self.status = status
        self.retry_after = retry_after
        self.detail = detail

    @classmethod
    def from_response(cls, response, ban_statuses=None):
        """A ReportableError for a ban-like response, or None when it looks fine."""
        c = classify(response=response, ban_statuses=ban_statuses)
        if c is None:
            return None
        return cls(c.reason, c.phase, c.status, c.retry_after, "HTTP %s" % c.status)


def exit_report(exc):
    """``("success", {})``, ``("failure", fields)`` or ``("release", {})`` for a block
    that ended with ``exc`` (None for a normal exit).

    A ``reason`` attribute counts only when it is a proxypool reason: urllib's
    ``HTTPError.reason`` ("Forbidden") or ``ssl.SSLError.reason`` are not. Anything else
    goes through the classifier; what it cannot place is released, not blamed on the
    proxy (a bug in the caller's parser is not the proxy's fault).
    """
    if exc is None:
        return "success", {}
    if not isinstance(exc, Exception):
        return "release", {}  # KeyboardInterrupt, cancellation: no verdict
    reason = getattr(exc, "reason", None)
    if isinstance(reason, str) and reason in REASONS:
        detail = getattr(exc, "detail", None) or str(exc) or None
        return "failure", dict(
            reason=reason,
            phase=getattr(exc, "phase", None),
            status=getattr(exc, "status", None),
            retry_after=getattr(exc, "retry_after", None),
            detail=_clip(detail),
        )
    c = classify(exc)
    if c is None:
        return "release", {}
    return "failure", dict(
        reason=c.reason,
        phase=c.phase,
        status=c.status,
        retry_after=c.retry_after,
        detail=_clip("%s: %s" % (type(exc).__name__, exc)),
    )


def _clip(text, limit=500):
    if text is None:
        return None
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def warn_lost_report(lease, what, err):
    # The user's work succeeded or already raised; losing our bookkeeping must not undo it.
    verb = {"success": "report success for", "failure": "report the failure of"}.get(what, what)
    log.warning("proxypool: could not %s lease %s: %s", verb, lease.id, err)
