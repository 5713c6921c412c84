"""One classifier for what went wrong with a proxied request.

``classify(exc=None, response=None)`` returns a ``Classification(reason, phase, status,
retry_after)`` in the vocabulary of the lease socket, or None when there is nothing to
blame on the proxy (a 404, a bug in the caller's code).

It knows the exceptions of requests/urllib3/PySocks, urllib, httpx, aiohttp and
Scrapy/Twisted, and responses of all of those. No third-party module is imported: an
exception's classes are recognised by their qualified names along its MRO, so the core
stays stdlib-only and a library that is not installed costs nothing. The exception chain
is walked (``__cause__``, ``__context__`` and each library's own wrapping attributes), so
``requests.ConnectionError`` raised for a dead SOCKS proxy is seen as the refused
connection it wraps.

It never raises: it runs inside ``leased()``'s exit, where an error of its own would
replace the caller's exception and skip the lease's release. What it copies from a
response is bounded, so a report built from it always fits in a request line.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import re
import socket
import ssl
from typing import TYPE_CHECKING, Any, FrozenSet, List, NamedTuple, Optional, Set

if TYPE_CHECKING:
    from collections.abc import Collection

log = logging.getLogger("proxypool_client")


class Classification(NamedTuple):
    reason: str
    phase: Optional[str]
    status: Optional[int]
    retry_after: Optional[str]


#: The gateway's default ``ban_status``: what a site answers when it blocks a client.
DEFAULT_BAN_STATUSES: FrozenSet[int] = frozenset([403, 429])

#: Longest ``Retry-After`` copied: an HTTP date is 29 characters; anything longer is not
#: a value the daemon can use, and the daemon keeps no more than this of one either.
MAX_RETRY_AFTER = 64

_TUNNEL_STATUS = re.compile(r"(?:Tunnel connection failed:|'status':|^)\s*(\d{3})\b")
_SOCKS5_CODE = re.compile(r"^0x0?([0-9a-fA-F]{1,2})\b")


def safe_str(obj: object) -> str:
    """``str(obj)``, or a placeholder when its ``__str__`` raises."""
    try:
        return str(obj)
    except Exception:
        return "<%s: unprintable>" % type(obj).__name__


def _names(obj: object) -> Set[str]:
    return {"%s.%s" % (c.__module__, c.__qualname__) for c in type(obj).__mro__}


def _is(obj: object, *names: str) -> bool:
    have = _names(obj)
    return any(n in have for n in names)


def safe_attr(obj: object, name: str) -> Any:
    """``getattr(obj, name, None)``, also when the attribute is a property that raises."""
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def _header(headers: Any, name: str, limit: int = MAX_RETRY_AFTER) -> Optional[str]:
    """A header's value, at most ``limit`` characters (None when longer: a value that
    long is no value of the header's kind)."""
    if headers is None:
        return None
    try:
        value = headers.get(name)
    except Exception:
        return None
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    if isinstance(value, bytes):
        value = value[: limit * 4 + 1].decode("latin-1")
    if not isinstance(value, str):
        return None
    value = value[: limit * 4 + 1].strip()
    return value if value and len(value) <= limit else None


def _status_of(response: object) -> Optional[int]:
    for attr in ("status_code", "status", "code"):
        value = safe_attr(response, attr)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def classify_status(
    status: int, headers: Any = None, ban_statuses: Optional[Collection[int]] = None
) -> Optional[Classification]:
    """The classification of an HTTP status seen through a proxy, or None."""
    bans = DEFAULT_BAN_STATUSES if ban_statuses is None else frozenset(ban_statuses)
    if status == 407 or (status == 401 and _header(headers, "Proxy-Authenticate", 4096)):
        return Classification("proxy_auth_rejected", "proxy_handshake", status, None)
    if status in bans:
        return Classification("destination_status", "response_head", status, _header(headers, "Retry-After"))
    return None


def _chain(exc: BaseException, limit: int = 32) -> List[BaseException]:
    """The exception and everything it wraps, outermost first."""
    seen: Set[int] = set()
    out: List[BaseException] = []
    todo: List[Any] = [exc]
    while todo and len(out) < limit:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        if _is(e, "twisted.python.failure.Failure"):
            e = safe_attr(e, "value")
            if e is None or id(e) in seen:
                continue
        if not isinstance(e, BaseException):
            continue
        seen.add(id(e))
        out.append(e)
        nested: List[Any] = [e.__cause__, e.__context__]
        for attr in ("reason", "socket_err", "os_error", "original_error", "value"):
            v = safe_attr(e, attr)
            if isinstance(v, BaseException) or _is(v, "twisted.python.failure.Failure"):
                nested.append(v)
        reasons = safe_attr(e, "reasons")  # twisted ResponseFailed / ResponseNeverReceived
        if isinstance(reasons, (list, tuple)):
            nested.extend(reasons)
        args = safe_attr(e, "args")
        if isinstance(args, tuple):
            nested.extend(a for a in args if isinstance(a, BaseException))
        todo.extend(nested)
    return out


def _proxy_status(status: int) -> Classification:
    if status in (401, 407):
        return Classification("proxy_auth_rejected", "proxy_handshake", status, None)
    if status in (502, 504):
        return Classification("upstream_unreachable", "proxy_handshake", status, None)
    return Classification("proxy_rejected", "proxy_handshake", status, None)


def _socks5_reply(code: int) -> str:
    if 3 <= code <= 6:
        return "upstream_unreachable"
    if code in (1, 2, 7, 8):
        return "proxy_rejected"
    return "proxy_protocol_error"


def _proxy_level(e: BaseException) -> Optional[Classification]:
    """SOCKS replies and refused CONNECT tunnels: the proxy's own answer."""
    msg = safe_str(e)
    if _is(e, "socks.SOCKS5AuthError"):
        return Classification("proxy_auth_rejected", "proxy_handshake", None, None)
    if _is(e, "socks.SOCKS5Error"):
        m = _SOCKS5_CODE.match(msg)
        code = int(m.group(1), 16) if m else -1
        return Classification(_socks5_reply(code), "proxy_handshake", None, None)
    if _is(e, "socks.SOCKS4Error"):
        m = _SOCKS5_CODE.match(msg)
        code = int(m.group(1), 16) if m else -1
        reason = "proxy_auth_rejected" if code in (0x5C, 0x5D) else "proxy_rejected"
        return Classification(reason, "proxy_handshake", None, None)
    if _is(e, "socks.HTTPError"):
        m = _TUNNEL_STATUS.search(msg)
        return _proxy_status(int(m.group(1))) if m else None
    if _is(e, "socks.GeneralProxyError") and safe_attr(e, "socket_err") is None:
        return Classification("proxy_protocol_error", "proxy_handshake", None, None)
    if _is(e, "aiohttp.client_exceptions.ClientHttpProxyError"):
        status = safe_attr(e, "status")
        return _proxy_status(status if isinstance(status, int) else 0)
    if _is(e, "httpx.ProxyError", "httpcore.ProxyError", "scrapy.core.downloader.handlers.http11.TunnelError"):
        m = _TUNNEL_STATUS.search(msg)
        if m:
            return _proxy_status(int(m.group(1)))
    if type(e) is OSError and msg.startswith("Tunnel connection failed"):
        m = _TUNNEL_STATUS.search(msg)  # http.client's CONNECT, under urllib and requests
        if m:
            return _proxy_status(int(m.group(1)))
    return None


_CONNECT_TIMEOUTS = (
    "requests.exceptions.ConnectTimeout",
    "urllib3.exceptions.ConnectTimeoutError",
    "httpx.ConnectTimeout",
    "httpcore.ConnectTimeout",
    "aiohttp.client_exceptions.ConnectionTimeoutError",
    "twisted.internet.error.TCPTimedOutError",
)
_READ_TIMEOUTS = (
    "requests.exceptions.ReadTimeout",
    "urllib3.exceptions.ReadTimeoutError",
    "httpx.ReadTimeout",
    "httpx.WriteTimeout",
    "httpcore.ReadTimeout",
    "aiohttp.client_exceptions.SocketTimeoutError",
    "aiohttp.client_exceptions.ServerTimeoutError",
    "scrapy.exceptions.DownloadTimeoutError",
    "twisted.internet.error.TimeoutError",
)
_REFUSED = (
    "scrapy.exceptions.DownloadConnectionRefusedError",
    "twisted.internet.error.ConnectionRefusedError",
    "twisted.internet.error.ConnectError",
    "httpx.ConnectError",
    "httpcore.ConnectError",
    "aiohttp.client_exceptions.ClientProxyConnectionError",
    "socks.ProxyConnectionError",
    "urllib3.exceptions.NewConnectionError",
)
_DNS = (
    "scrapy.exceptions.CannotResolveHostError",
    "twisted.internet.error.DNSLookupError",
    "aiohttp.client_exceptions.ClientConnectorDNSError",
    "urllib3.exceptions.NameResolutionError",
)
_RESET_HEAD = (
    "twisted.web._newclient.ResponseNeverReceived",
    "http.client.RemoteDisconnected",
    "aiohttp.client_exceptions.ServerDisconnectedError",
    "httpx.RemoteProtocolError",
    "httpcore.RemoteProtocolError",
)
_RESET_BODY = (
    "scrapy.exceptions.ResponseDataLossError",
    "twisted.web._newclient.ResponseFailed",
    "http.client.IncompleteRead",
    "urllib3.exceptions.ProtocolError",
    "aiohttp.client_exceptions.ClientPayloadError",
)
_RESET_ANY = (
    "scrapy.exceptions.DownloadFailedError",
    "twisted.internet.error.ConnectionLost",
    "twisted.internet.error.ConnectionDone",
    "httpx.ReadError",
    "httpx.WriteError",
    "httpcore.ReadError",
)
_TLS = (
    "OpenSSL.SSL.Error",
    "aiohttp.client_exceptions.ClientSSLError",
)
_HTTP_STATUS_ERRORS = (
    "urllib.error.HTTPError",
    "requests.exceptions.HTTPError",
    "httpx.HTTPStatusError",
    "aiohttp.client_exceptions.ClientResponseError",
    "scrapy.spidermiddlewares.httperror.HttpError",
)


def _errno_class(e: BaseException) -> Optional[Classification]:
    code = safe_attr(e, "errno")
    if isinstance(e, ConnectionRefusedError) or code == errno.ECONNREFUSED:
        return Classification("connect_refused", "connect", None, None)
    if isinstance(e, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)) or code in (
        errno.ECONNRESET,
        errno.EPIPE,
    ):
        return Classification("connection_reset", None, None, None)
    if code in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return Classification("connect_refused", "connect", None, None)
    return None


def _http_status_error(e: BaseException, ban_statuses: Optional[Collection[int]]) -> Optional[Classification]:
    if not _is(e, *_HTTP_STATUS_ERRORS):
        return None
    response = safe_attr(e, "response")
    status = _status_of(response) if response is not None else None
    if status is not None:
        return classify_status(status, safe_attr(response, "headers"), ban_statuses)
    status = safe_attr(e, "code") if _is(e, "urllib.error.HTTPError") else safe_attr(e, "status")
    if isinstance(status, int) and not isinstance(status, bool):
        return classify_status(status, safe_attr(e, "headers") or safe_attr(e, "hdrs"), ban_statuses)
    return None


def _classify_exc(exc: BaseException, ban_statuses: Optional[Collection[int]]) -> Optional[Classification]:
    chain = _chain(exc)
    for e in chain:
        c = _http_status_error(e, ban_statuses)
        if c is not None or _is(e, *_HTTP_STATUS_ERRORS):
            return c
    for e in chain:
        c = _proxy_level(e)
        if c is not None:
            return c
    # The outermost timeout decides connect vs read: urllib3 wraps a SOCKS handshake that
    # timed out as ConnectTimeoutError although the socket error inside is the same.
    for e in chain:
        if _is(e, "urllib3.exceptions.NewConnectionError"):
            continue  # a subclass of ConnectTimeoutError for history's sake, not a timeout
        if _is(e, *_CONNECT_TIMEOUTS):
            return Classification("connect_timeout", "connect", None, None)
        if _is(e, *_READ_TIMEOUTS):
            return Classification("slow_response", "response_head", None, None)
        if _is(e, "urllib.error.URLError") and isinstance(safe_attr(e, "reason"), (socket.timeout, TimeoutError)):
            # urllib wraps only errors of connect+send; a timeout waiting for the head is raw.
            return Classification("connect_timeout", "connect", None, None)
    for e in chain:
        if _is(e, *_DNS) or isinstance(e, socket.gaierror):
            return Classification("dns_failed", "connect", None, None)
    for e in chain:
        c = _errno_class(e)
        if c is not None:
            return c
    # The most specific wrapper wins over a generic outer one: Scrapy's
    # DownloadFailedError wraps Twisted's ResponseNeverReceived, which says where.
    for names, c in (
        (_REFUSED, Classification("connect_refused", "connect", None, None)),
        (_RESET_HEAD, Classification("connection_reset", "response_head", None, None)),
        (_RESET_BODY, Classification("connection_reset", "response_body", None, None)),
        (_RESET_ANY, Classification("connection_reset", None, None, None)),
    ):
        if any(_is(e, *names) for e in chain):
            return c
    for e in chain:
        if isinstance(e, ssl.SSLError) or _is(e, *_TLS):
            return Classification("tls_failed", "destination_tls", None, None)
        if isinstance(e, (socket.timeout, TimeoutError, asyncio.TimeoutError)):
            return Classification("slow_response", "response_head", None, None)
    return None


def classify(
    exc: Optional[BaseException] = None,
    response: Any = None,
    ban_statuses: Optional[Collection[int]] = None,
) -> Optional[Classification]:
    """``Classification(reason, phase, status, retry_after)`` or None.

    ``exc``: an exception from an HTTP library (or a Twisted Failure). ``response``: a
    response object of requests, httpx, aiohttp, urllib or Scrapy; its status is checked
    against ``ban_statuses`` (default 403, 429 -> ``destination_status`` with the
    ``Retry-After`` header, when it is at most 64 characters) and 407
    (``proxy_auth_rejected``). An exception wins over a response when both are given.
    Never raises: what it cannot read it does not blame on the proxy.
    """
    try:
        if exc is not None:
            c = _classify_exc(exc, ban_statuses)
            if c is not None:
                return c
        if response is not None:
            status = _status_of(response)
            if status is not None:
                return classify_status(status, safe_attr(response, "headers"), ban_statuses)
    except Exception as e:  # a broken exception or response object: no verdict
        log.debug("proxypool: classify() could not read %s: %s", type(exc or response).__name__, safe_str(e))
    return None
