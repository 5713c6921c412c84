"""A granted lease, for the sync and the asyncio client.

``Lease`` and ``AsyncLease`` hold the same data (``BaseLease``); their ``report``,
``success``, ``failure`` and ``release`` run the same ``calls`` through their client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Optional, Protocol, TypedDict, TypeVar

from . import calls
from .models import Duration, Outcome, Reply
from .protocol import Call

if TYPE_CHECKING:
    from typing_extensions import Unpack

T = TypeVar("T")


class ReportOptions(TypedDict, total=False):
    """What a report may say besides its outcome and reason (see ``Client.report``)."""

    phase: Optional[str]
    status: Optional[int]
    retry_after: Optional[Duration]
    detail: Optional[str]
    destination: Optional[str]
    duration_ms: Optional[float]


class Sender(Protocol):
    def send(self, call: Call[T]) -> T: ...


class AsyncSender(Protocol):
    async def send(self, call: Call[T]) -> T: ...


class BaseLease:
    """A granted lease: ``id``, ``proxy`` (URL with credentials), ``endpoint`` (its id),
    ``trial`` (this use is the endpoint's single recovery attempt), ``expires_in_ms``,
    ``scope`` (``"destination"`` for a destination's trial), the ``destination`` and
    ``pool`` it was asked for, and ``reply``, the daemon's whole answer. ``outcome`` is set
    once the lease was reported (``"success"``/``"failure"``) or given back
    (``"release"`` by ``leased()``, ``"released"`` by ``release()``)."""

    __slots__ = ("id", "proxy", "endpoint", "trial", "expires_in_ms", "scope", "destination", "pool", "reply", "outcome")

    def __init__(self, reply: Reply, destination: Optional[str] = None, pool: Optional[str] = None) -> None:
        self.id: str = reply["lease"]
        self.proxy: str = reply["proxy"]
        self.endpoint: int = reply["endpoint"]
        self.trial: bool = bool(reply.get("trial"))
        self.expires_in_ms: Optional[int] = reply.get("expires_in_ms")
        self.scope: Optional[str] = reply.get("scope")
        self.destination = destination
        pool_answered = reply.get("pool")
        self.pool: Optional[str] = pool_answered if isinstance(pool_answered, str) else pool
        self.reply = reply
        self.outcome: Optional[str] = None

    @property
    def scheme(self) -> str:
        """The proxy's scheme: ``http``, ``https``, ``socks5``, ``socks5h``..."""
        return self.proxy.split("://", 1)[0].lower()

    @property
    def proxies(self) -> Dict[str, str]:
        """The mapping ``requests`` takes as ``proxies=``."""
        return {"http": self.proxy, "https": self.proxy}

    def _report(self, outcome: Outcome, reason: Optional[str], options: ReportOptions) -> Call[Optional[str]]:
        options.setdefault("destination", self.destination)
        return calls.report(self.id, outcome, reason, **options)

    def __repr__(self) -> str:
        # Never the proxy URL: it carries the endpoint's password.
        return "%s(id=%r, endpoint=%r, trial=%r, expires_in_ms=%r)" % (
            type(self).__name__,
            self.id,
            self.endpoint,
            self.trial,
            self.expires_in_ms,
        )


class Lease(BaseLease):
    """A lease of the blocking ``Client``."""

    __slots__ = ("_client",)

    def __init__(self, client: Sender, reply: Reply, destination: Optional[str] = None, pool: Optional[str] = None) -> None:
        super().__init__(reply, destination, pool)
        self._client = client

    def report(self, outcome: Outcome, reason: Optional[str] = None, **options: Unpack[ReportOptions]) -> Optional[str]:
        """Report how the use went (``destination`` defaults to the lease's); returns the
        endpoint's state afterwards."""
        state = self._client.send(self._report(outcome, reason, options))
        self.outcome = outcome
        return state

    def success(self, **options: Unpack[ReportOptions]) -> Optional[str]:
        return self.report("success", **options)

    def failure(self, reason: str, **options: Unpack[ReportOptions]) -> Optional[str]:
        return self.report("failure", reason, **options)

    def release(self) -> None:
        """Give the lease back without a verdict."""
        self._client.send(calls.release(self.id))
        self.outcome = "released"


class AsyncLease(BaseLease):
    """A lease of the ``AsyncClient``: the same methods, as coroutines."""

    __slots__ = ("_client",)

    def __init__(
        self, client: AsyncSender, reply: Reply, destination: Optional[str] = None, pool: Optional[str] = None
    ) -> None:
        super().__init__(reply, destination, pool)
        self._client = client

    async def report(
        self, outcome: Outcome, reason: Optional[str] = None, **options: Unpack[ReportOptions]
    ) -> Optional[str]:
        state = await self._client.send(self._report(outcome, reason, options))
        self.outcome = outcome
        return state

    async def success(self, **options: Unpack[ReportOptions]) -> Optional[str]:
        return await self.report("success", **options)

    async def failure(self, reason: str, **options: Unpack[ReportOptions]) -> Optional[str]:
        return await self.report("failure", reason, **options)

    async def release(self) -> None:
        await self._client.send(calls.release(self.id))
        self.outcome = "released"


__all__ = ["AsyncLease", "BaseLease", "Lease", "ReportOptions"]
