"""A client for the proxypool daemon (stdlib only), an exception classifier, and a Scrapy
downloader middleware (``proxypool_client.scrapy_middleware``, needs Scrapy).

    from proxypool_client import Client

    client = Client()          # finds the daemon by the same rule as the CLI
    with client.leased(pool="default", schemes=["http", "https"]) as lease:
        fetch(url, proxies=lease.proxies)

The protocol is one JSON object per line over a Unix socket or TCP; see
docs/python-client.md.
"""

from ._version import __version__
from .address import Address, TcpAddress, UnixAddress, parse_address
from .aio import AsyncClient
from .classify import DEFAULT_BAN_STATUSES, Classification, classify, classify_status
from .discovery import default_address, default_db_path, default_socket_path
from .exceptions import (
    BadRequest,
    DestinationDown,
    Forbidden,
    InternalError,
    LeaseExpired,
    Paced,
    PoolEmpty,
    PoolExhausted,
    ProtocolError,
    ProxyPoolError,
    ReportableError,
    StaleClaim,
    StoreUnavailable,
    TooLarge,
    TransportError,
    UnknownLease,
    UnknownOp,
    UnknownPool,
)
from .lease import AsyncLease, BaseLease, Lease, ReportOptions
from .models import Duration, EndpointInfo, Outcome, PoolStatus
from .sync import Client
from .vocabulary import PHASES, REASONS

__all__ = [
    "Address",
    "AsyncClient",
    "AsyncLease",
    "BadRequest",
    "BaseLease",
    "Classification",
    "Client",
    "DEFAULT_BAN_STATUSES",
    "DestinationDown",
    "Duration",
    "EndpointInfo",
    "Forbidden",
    "InternalError",
    "Lease",
    "LeaseExpired",
    "Outcome",
    "PHASES",
    "Paced",
    "PoolEmpty",
    "PoolExhausted",
    "PoolStatus",
    "ProtocolError",
    "ProxyPoolError",
    "REASONS",
    "ReportOptions",
    "ReportableError",
    "StaleClaim",
    "StoreUnavailable",
    "TcpAddress",
    "TooLarge",
    "TransportError",
    "UnixAddress",
    "UnknownLease",
    "UnknownOp",
    "UnknownPool",
    "__version__",
    "classify",
    "classify_status",
    "default_address",
    "default_db_path",
    "default_socket_path",
    "parse_address",
]
