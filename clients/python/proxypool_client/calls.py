"""One function per op: the request it sends and how its reply is read.

Both clients run these (``Client`` blocking, ``AsyncClient`` on asyncio), so a field is
added, checked or read in one place. Optional fields are sent only when given, so a
request carries only what its caller asked for.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Protocol, Union, cast

from .models import Duration, EndpointInfo, Outcome, PoolStatus, Reply
from .protocol import Call, duration, field, seconds
from .vocabulary import REASONS


class HasId(Protocol):
    """A lease object (anything with the lease's ``id``)."""

    @property
    def id(self) -> str: ...


LeaseRef = Union[str, HasId]
EndpointRef = Union[int, str]


def lease_id(ref: LeaseRef) -> str:
    return ref if isinstance(ref, str) else ref.id


def _grant(reply: Reply) -> Reply:
    field(reply, "lease", str, "lease")
    field(reply, "proxy", str, "lease")
    field(reply, "endpoint", int, "lease")
    return reply


def _give_back(reply: Reply) -> Call[None]:
    return release(cast(str, reply["lease"]))


def lease_tags(tags: Optional[Mapping[str, str]]) -> Optional[Dict[str, str]]:
    """A lease's ``tags`` as sent: an object of strings (every one must match), or None
    for none. Keys and values are checked by the daemon (``bad_request`` naming them)."""
    if not tags:
        return None
    if not isinstance(tags, Mapping):
        raise TypeError("tags must be a mapping of tag key to value, e.g. {'country': 'us'}, not %r" % (tags,))
    return {str(k): str(v) for k, v in tags.items()}


def lease(
    pool: str = "default",
    ttl: Optional[Duration] = None,
    wait: Optional[Duration] = None,
    session: Optional[str] = None,
    destination: Optional[str] = None,
    schemes: Union[str, Iterable[str], None] = None,
    tags: Optional[Mapping[str, str]] = None,
) -> Call[Reply]:
    if isinstance(schemes, str):
        schemes = [schemes]
    fields = dict(
        pool=pool,
        ttl=duration(ttl),
        wait=duration(wait),
        session=session,
        destination=destination,
        schemes=None if schemes is None else [str(s) for s in schemes],
        tags=lease_tags(tags),
    )
    return Call("lease", fields, _grant, wait=seconds(fields["wait"]), undo=_give_back)


def _state(reply: Reply) -> Optional[str]:
    state = reply.get("state")
    return state if isinstance(state, str) else None


def report(
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
) -> Call[Optional[str]]:
    """A ``report``: by lease, or by ``session`` (+ ``pool``) when ``lease`` is None."""
    if outcome not in ("success", "failure"):
        raise ValueError("outcome is 'success' or 'failure', not %r" % (outcome,))
    if lease is None and session is None:
        raise ValueError("report needs a lease id or a session")
    if lease is not None and session is not None:
        raise ValueError("report names a lease or a session, not both")
    if outcome == "failure" and not reason:
        raise ValueError("a failure report needs a reason (one of %s)" % ", ".join(sorted(REASONS)))
    fields = dict(
        lease=None if lease is None else lease_id(lease),
        session=session,
        pool=pool,
        outcome=outcome,
        reason=reason,
        phase=phase,
        status=status,
        retry_after=duration(retry_after),
        detail=detail,
        destination=destination,
        duration_ms=None if duration_ms is None else int(round(duration_ms)),
    )
    return Call("report", fields, _state)


def _nothing(reply: Reply) -> None:
    return None


def release(lease: LeaseRef) -> Call[None]:
    return Call("release", {"lease": lease_id(lease)}, _nothing)


def _pools(reply: Reply) -> List[PoolStatus]:
    return cast(List[PoolStatus], field(reply, "pools", list, "status"))


def status(pool: Optional[str] = None) -> Call[List[PoolStatus]]:
    return Call("status", {"pool": pool}, _pools)


def _endpoints(reply: Reply) -> List[EndpointInfo]:
    return cast(List[EndpointInfo], field(reply, "endpoints", list, "endpoints"))


def endpoints(pool: Optional[str] = None, state: Optional[str] = None) -> Call[List[EndpointInfo]]:
    return Call("endpoints", {"pool": pool, "state": state}, _endpoints)


def disable(endpoint: EndpointRef, reason: Optional[str] = None, pool: Optional[str] = None) -> Call[Optional[str]]:
    return Call("disable", {"endpoint": endpoint, "reason": reason, "pool": pool}, _state)


def enable(
    endpoint: EndpointRef,
    now: Optional[bool] = None,
    destination: Optional[str] = None,
    pool: Optional[str] = None,
) -> Call[Optional[str]]:
    return Call("enable", {"endpoint": endpoint, "now": now, "destination": destination, "pool": pool}, _state)


def _version(reply: Reply) -> str:
    return cast(str, field(reply, "version", str, "ping"))


def ping() -> Call[str]:
    return Call("ping", {}, _version)


def _whole(reply: Reply) -> Reply:
    return reply


def raw(op: str, fields: Mapping[str, Any]) -> Call[Reply]:
    """Any op, its reply returned whole (``wait`` is honoured for the read deadline)."""
    return Call(op, dict(fields), _whole, wait=seconds(fields.get("wait")))
