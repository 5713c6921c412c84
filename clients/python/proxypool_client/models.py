"""The shapes of what goes over the wire, as types: durations, outcomes, and the objects
the daemon answers ``status`` and ``endpoints`` with. No behaviour lives here."""

from __future__ import annotations

import datetime
from typing import Any, Dict, Optional, Union

from typing import Literal, TypedDict

#: Seconds (int or float), a string the daemon reads (``"30s"``, ``"1m 30s"``, ``"500ms"``,
#: or a ``Retry-After`` value), or a ``timedelta``.
Duration = Union[int, float, str, datetime.timedelta]

#: What a ``report`` says about a use.
Outcome = Literal["success", "failure"]

#: One decoded reply object.
Reply = Dict[str, Any]


class PoolStatus(TypedDict, total=False):
    """One pool in the answer to ``status``."""

    pool: str
    mode: str
    available: int
    cooling: int
    probe_allowed: int
    disabled: int
    leases: int
    next_deadline_ms: Optional[int]


class EndpointInfo(TypedDict, total=False):
    """One endpoint in the answer to ``endpoints`` (its password redacted)."""

    id: int
    url: str
    pool: str
    label: Optional[str]
    source: Optional[str]
    state: str
    reason: Optional[str]
    phase: Optional[str]
    streak: int
    cooldown_until: Optional[str]
    cooldown_ms: Optional[int]
