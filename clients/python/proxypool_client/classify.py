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
"""

import asyncio
import collections
import errno
import re
import socket
import ssl

Classification = collections.namedtuple("Classification", "reason phase status retry_after")

DEFAULT_BAN_STATUSES = frozenset([403, 429, 503])

_TUNNEL_STATUS = re.compile(r"(?:Tunnel connection failed:|'status':|^)\s*(\d{3})\b")
_SOCKS5_CODE = re.compile(r"^0x0?([0-9a-fA-F]{1,2})\b")


def _names(obj):
    return {"%s.%s" % (c.__module__, c.__qualname__) for c in type(obj).__mro__}


def _is(obj, *names):
    have = _names(obj)
    return any(n in have for n in names)


def _header(headers, name):
    if headers is None:
        return None
    try:
        value = headers.get(name)
    except Exception:
        return None
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    return value.strip() if isinstance(value, str) and value.strip() else None


def _status_of(response):
    for attr in ("status_code", "status", "code"):
        value = getattr(response, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def classify_status(status, headers=None, ban_statuses=None):
    """The classification of an HTTP status seen through a proxy, or None."""
    bans = DEFAULT_BAN_STATUSES if ban_statuses is None else frozenset(ban_statuses)
    if status == 407 or (status == 401 and _header(headers, "Proxy-Authenticate")):
        return Classification("proxy_auth_rejected", "proxy_handshake", status, None)
    if status in bans:
        return Classification("destination_status", "response_head", status, _header(headers, "Retry-After"))
    return None


def _chain(exc, limit=32):
    """The exception and everything it wraps, outermost first."""
    seen, out, todo = set(), [], [exc]
    while todo and len(out) < limit:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        if _is(e, "twisted.python.failure.Failure"):
            e = e.value
            if id(e) in seen:
                continue
        seen.add(id(e))
        out.append(e)
        nested = [e.__cause__, e.__context__]
        for attr in ("reason", "socket_err", "os_error", "original_error", "value"):
            v = getattr(e, attr, None)
            if isinstance(v, BaseException) or _is(v, "twisted.python.failure.Failure"):
                nested.append(v)
        reasons = getattr(e, "reasons", None)  # twisted ResponseFailed / ResponseNeverReceived
        if isinstance(reasons, (list, tuple)):
            nested.extend(reasons)
        nested.extend(a for a in getattr(e, "args", ()) if isinstance(a, BaseException))
        todo.extend(nested)
    return out


def _proxy_status(status):
    if status in (401, 407):
        return Classification("proxy_auth_rejected", "proxy_handshake", status, None)
    if status in (502, 504):
        return Classification("upstream_unreachable", "proxy_handshake", status, None)
    return Classification("proxy_rejected", "proxy_handshake", status, None)


def _socks5_reply(code):
    if 3 <= code <= 6:
        return "upstream_unreachable"
    if code in (1, 2, 7, 8):
        return "proxy_rejected"
    return "proxy_protocol_error"


def _proxy_level(e):
    """SOCKS replies and refused CONNECT tunnels: the proxy's own answer."""
    msg = str(e)
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
    if _is(e, "socks.GeneralProxyError") and getattr(e, "socket_err", None) is None:
        return Classification("proxy_protocol_error", "proxy_handshake", None, None)
    if _is(e, "aiohttp.client_exceptions.ClientHttpProxyError"):
        return _proxy_status(getattr(e, "status", 0))
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


def _errno_class(e):
    if isinstance(e, ConnectionRefusedError) or getattr(e, "errno", None) in (errno.ECONNREFUSED,):
        return Classification("connect_refused", "connect", None, None)
    if isinstance(e, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)) or getattr(
        e, "errno", None
    ) in (errno.ECONNRESET, errno.EPIPE):
        return Classification("connection_reset", None, None, None)
    if getattr(e, "errno", None) in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return Classification("connect_refused", "connect", None, None)
    return None


def _http_status_error(e, ban_statuses):
    if not _is(e, *_HTTP_STATUS_ERRORS):
        return None
    response = getattr(e, "response", None)
    if response is not None and _status_of(response) is not None:
        return classify_status(_status_of(response), getattr(response, "headers", None), ban_statuses)
    status = getattr(e, "code", None) if _is(e, "urllib.error.HTTPError") else getattr(e, "status", None)
    if isinstance(status, int):
        return classify_status(status, getattr(e, "headers", None) or getattr(e, "hdrs", None), ban_statuses)
    return None


def _classify_exc(exc, ban_statuses):
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
        if _is(e, "urllib.error.URLError") and isinstance(getattr(e, "reason", None), (socket.timeout, TimeoutError)):
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


def classify(exc=None, response=None, ban_statuses=None):
    """``Classification(reason, phase, status, retry_after)`` or None.

    ``exc``: an exception from an HTTP library (or a Twisted Failure). ``response``: a
    response object of requests, httpx, aiohttp, urllib or Scrapy; its status is checked
    against ``ban_statuses`` (default 403, 429, 503 -> ``destination_status`` with the
    ``Retry-After`` header) and 407 (``proxy_auth_rejected``). An exception wins over a
    response when both are given.
    """
    if exc is not None:
        c = _classify_exc(exc, ban_statuses)
        if c is not None:
            return c
    if response is not None:
        status = _status_of(response)
        if status is not None:
            return classify_status(status, getattr(response, "headers", None), ban_statuses)
    return None
