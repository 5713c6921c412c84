"""Gateway mode of the Scrapy middleware, without I/O: the proxy URL that routes a
request through the rotating gateway (one ``session-<id>`` per download slot), and what
the gateway's own answers say (``X-Proxypool-Endpoint``, ``X-Proxypool-Error``,
``Retry-After``)."""

from __future__ import annotations

import secrets
from typing import Any, Dict, Mapping, Optional, Tuple
from urllib.parse import quote, urlsplit

from scrapy.http import Response

TAGS_META = "proxypool_tags"  # request.meta key: {"country": "us"} for this request

ENDPOINT_HEADER = b"X-Proxypool-Endpoint"
ERROR_HEADER = b"X-Proxypool-Error"


def tags_setting(value: Any, where: str) -> Optional[Dict[str, str]]:
    """Tags as a setting or ``meta`` key gives them: a mapping of strings (None or empty:
    none). The daemon checks keys and values (an unknown key is ``bad_request``); here only
    the shape, and what a gateway username cannot carry ("-" splits its segments)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError("%s must be a mapping of tag key to value, e.g. {'country': 'us'}, not %r" % (where, value))
    tags = {str(k): "" if v is None else str(v) for k, v in value.items()}
    for k, v in tags.items():
        if not k or "-" in k or "-" in v:
            raise ValueError("%s: tag %r=%r cannot be asked for (a key is needed, and '-' splits gateway usernames)"
                             % (where, k, v))
    return tags or None


def same_proxy(a: Optional[str], b: Optional[str]) -> bool:
    """Whether two proxy URLs name the same proxy. Scrapy's HttpProxyMiddleware strips the
    credentials out of ``meta["proxy"]`` (into a Proxy-Authorization header), so a URL
    the middleware set comes back without them."""
    if a is None or b is None:
        return a is b
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme.lower(), (pa.hostname or "").lower(), pa.port) == (
        pb.scheme.lower(), (pb.hostname or "").lower(), pb.port)


def header(response: Response, name: bytes) -> Optional[str]:
    value = response.headers.get(name)
    if not value:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
    return text.strip() or None


def endpoint_of(response: Response) -> Optional[int]:
    """The endpoint the gateway used (plain HTTP; a tunnel's is out of Scrapy's sight)."""
    value = header(response, ENDPOINT_HEADER)
    return int(value) if value is not None and value.isdigit() else None


def error_of(response: Response) -> Optional[str]:
    """The gateway's error code when the answer is its own, else None."""
    return header(response, ERROR_HEADER)


def retry_after_seconds(response: Optional[Response]) -> Optional[float]:
    """The gateway's ``Retry-After`` (whole seconds), or None."""
    value = header(response, b"Retry-After") if response is not None else None
    return float(value) if value is not None and value.isdigit() else None


class GatewayRoute:
    """The gateway's address and token, the pool to ask for, and the session of each
    download slot."""

    def __init__(self, url: str, token: str, pool: Optional[str]) -> None:
        parts = urlsplit(url if "://" in url else "http://" + url)
        try:
            port = parts.port
        except ValueError:
            port = None
        if not parts.hostname or not port:
            raise ValueError("PROXYPOOL_GATEWAY %r needs a host and a port" % (url,))
        if pool and "-" in pool:
            # The gateway splits its username on "-" into key-value segments.
            raise ValueError("PROXYPOOL_POOL %r cannot be routed through the gateway: it contains '-'" % (pool,))
        self.scheme, self.host, self.port = parts.scheme or "http", parts.hostname, port
        self.token = token
        self.pool = pool
        self._sessions: Dict[str, str] = {}  # slot -> session id

    def username(self, session: str, tags: Optional[Mapping[str, str]] = None) -> str:
        parts = ["pool", self.pool] if self.pool else []
        # A segment per tag key (`country-us`), as the gateway reads them.
        for k in sorted(tags or {}):
            parts += [k, tags[k]]  # type: ignore[index]
        return "-".join(parts + ["session", session])

    def proxy_for(self, slot: str, tags: Optional[Mapping[str, str]] = None) -> Tuple[str, str, bool]:
        """The proxy URL for a request of ``slot`` (leasing only endpoints with ``tags``),
        its session, and whether that session is new."""
        sid = self._sessions.get(slot)
        new = sid is None
        if sid is None:
            sid = self._sessions[slot] = secrets.token_hex(6)
        user = quote(self.username(sid, tags), safe="")
        cred = "%s:%s@" % (user, quote(self.token, safe="")) if self.token else "%s:@" % user
        return "%s://%s%s:%d" % (self.scheme, cred, self.host, self.port), sid, new

    def session(self, slot: str) -> Optional[str]:
        return self._sessions.get(slot)

    def new_session(self, slot: str) -> None:
        """The slot's next request gets another session, so another upstream."""
        self._sessions.pop(slot, None)
