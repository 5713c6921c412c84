"""What ``leased()`` sends when its block ends, written once for both clients.

``finish_steps`` is a generator of Calls: a client runs each Call it yields and sends the
answer back (or throws the ProxyPoolError in), so the sync and the asyncio client follow
the same steps. Whatever happens, the lease ends reported or given back, or the loss is
logged: nothing here raises into the caller's block.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, Dict, Generator, Optional, Tuple

from . import calls
from .classify import MAX_RETRY_AFTER, classify, safe_attr, safe_str
from .exceptions import LeaseExpired, ProxyPoolError, TransportError, UnknownLease
from .protocol import Call
from .vocabulary import PHASES, REASONS

if TYPE_CHECKING:
    from .lease import BaseLease

log = logging.getLogger("proxypool_client")

#: Longest ``detail`` sent; the daemon keeps 1000 characters of one.
MAX_DETAIL = 500

Steps = Generator[Call[Any], Any, None]


def exit_report(exc: Optional[BaseException]) -> Tuple[str, Dict[str, Any]]:
    """``("success", {})``, ``("failure", fields)`` or ``("release", {})`` for a block
    that ended with ``exc`` (None for a normal exit).

    A ``reason`` attribute counts only when it is a proxypool reason: urllib's
    ``HTTPError.reason`` ("Forbidden") or ``ssl.SSLError.reason`` are not. Anything else
    goes through the classifier; what it cannot place is released, not blamed on the
    proxy (a bug in the caller's parser is not the proxy's fault). Every field copied from
    the exception is checked and bounded, so the report always fits in a request line.
    Never raises.
    """
    try:
        return _exit_report(exc)
    except Exception as e:  # an exception object too broken to read: no verdict
        log.debug("proxypool: cannot read %s: %s", type(exc).__name__, safe_str(e))
        return "release", {}


def _exit_report(exc: Optional[BaseException]) -> Tuple[str, Dict[str, Any]]:
    if exc is None:
        return "success", {}
    if not isinstance(exc, Exception):
        return "release", {}  # KeyboardInterrupt, cancellation: no verdict
    reason = safe_attr(exc, "reason")
    if isinstance(reason, str) and reason in REASONS:
        detail = safe_attr(exc, "detail")
        if not isinstance(detail, str) or not detail:
            detail = safe_str(exc)
        return "failure", dict(
            reason=reason,
            phase=_phase(safe_attr(exc, "phase")),
            status=_status(safe_attr(exc, "status")),
            retry_after=_retry_after(safe_attr(exc, "retry_after")),
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
        detail=_clip("%s: %s" % (type(exc).__name__, safe_str(exc))),
    )


def _phase(value: Any) -> Optional[str]:
    return value if isinstance(value, str) and value in PHASES else None


def _status(value: Any) -> Optional[int]:
    return value if type(value) is int and 100 <= value <= 999 else None


def _retry_after(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value if math.isfinite(value) and value >= 0 else None
    if isinstance(value, str):
        value = value[: MAX_RETRY_AFTER * 4 + 1].strip()
        return value if value and len(value) <= MAX_RETRY_AFTER else None
    seconds = safe_attr(value, "total_seconds")
    if callable(seconds):
        return _retry_after(seconds())
    return None


def _clip(text: Optional[str], limit: int = MAX_DETAIL) -> Optional[str]:
    if not text:
        return None
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def finish_steps(lease: BaseLease, exc: Optional[BaseException]) -> Steps:
    """Report (or release) ``lease`` for a block that ended with ``exc``. A report the
    daemon refuses falls back to a release; a lease the daemon no longer has, or a daemon
    that cannot be reached, is logged."""
    if lease.outcome is not None:
        return  # the block reported or released it itself
    action, fields = exit_report(exc)
    if action == "release" and exc is not None:
        _hint_missing_socks(lease, exc)
    if action != "release":
        try:
            call = calls.report(lease.id, "success" if action == "success" else "failure",
                                destination=lease.destination, **fields)
        except (TypeError, ValueError) as e:
            warn_lost_report(lease, action, e)
        else:
            try:
                yield call
                lease.outcome = action
                return
            except (LeaseExpired, UnknownLease, TransportError) as e:
                # Gone, or unreachable: a release cannot do better.
                warn_lost_report(lease, action, e)
                return
            except ProxyPoolError as e:
                # Refused (a reason it does not know, a line too large): give it back
                # rather than let it sit until its TTL.
                warn_lost_report(lease, action, e)
    try:
        yield calls.release(lease.id)
        lease.outcome = "release" if action == "release" else "released"
    except ProxyPoolError as e:
        warn_lost_report(lease, "release", e)


def _hint_missing_socks(lease: BaseLease, exc: BaseException) -> None:
    """requests without PySocks cannot use a SOCKS lease; its error blames nobody, so the
    lease is released unreported: say why, and how to avoid it."""
    if not lease.scheme.startswith("socks") or "Missing dependencies for SOCKS support" not in safe_str(exc):
        return
    hint = (
        "lease %s is a %s:// proxy, which requests cannot use without PySocks: "
        "pip install 'requests[socks]', or lease with schemes=['http', 'https']" % (lease.id, lease.scheme)
    )
    log.warning("proxypool: %s", hint)
    add_note = safe_attr(exc, "add_note")  # Python 3.11+: shown with the traceback
    if callable(add_note):
        add_note("proxypool: " + hint)


def warn_lost_report(lease: BaseLease, what: str, err: BaseException) -> None:
    # The user's work succeeded or already raised; losing our bookkeeping must not undo it.
    verb = {"success": "report success for", "failure": "report the failure of"}.get(what, what)
    log.warning("proxypool: could not %s lease %s: %s", verb, lease.id, safe_str(err))
