"""A client for the proxypool lease socket (stdlib only), an exception classifier, and a
Scrapy downloader middleware (``proxypool_client.scrapy``, needs Scrapy).

    from proxypool_client import Client

    client = Client()          # finds the daemon's socket by the same rule as the CLI
    with client.leased(pool="default") as lease:
        fetch(url, proxies=lease.proxies)

The protocol is one JSON object per line over a Unix socket; see docs/python-client.md.
"""

from .aio import AsyncClient, AsyncLease
from .classify import DEFAULT_BAN_STATUSES, Classification, classify, classify_status
from .discovery import default_db_path, default_socket_path
from .outcome import ReportableError
from .protocol import (
    PHASES,
    REASONS,
    BadRequest,
    InternalError,
    Lease,
    LeaseExpired,
    PoolExhausted,
    ProxyPoolError,
    TooLarge,
    TransportError,
    UnknownLease,
    UnknownOp,
    UnknownPool,
)
from .sync import Client

__version__ = "0.2.0"

__all__ = [
    "AsyncClient",
    "AsyncLease",
    "BadRequest",
    "Classification",
    "Client",
    "DEFAULT_BAN_STATUSES",
    "InternalError",
    "Lease",
    "LeaseExpired",
    "PHASES",
    "PoolExhausted",
    "ProxyPoolError",
    "REASONS",
    "ReportableError",
    "TooLarge",
    "TransportError",
    "UnknownLease",
    "UnknownOp",
    "UnknownPool",
    "classify",
    "classify_status",
    "default_db_path",
    "default_socket_path",
]
