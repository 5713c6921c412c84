"""A Scrapy downloader middleware that takes its proxies from proxypool.

    DOWNLOADER_MIDDLEWARES = {"proxypool_client.scrapy_middleware.ProxyPoolMiddleware": 740}

Two modes (``PROXYPOOL_MODE``):

- ``"lease"`` (default): every request leases an endpoint (asyncio client, awaited on the
  reactor's event loop: nothing blocks the reactor), uses it as ``meta["proxy"]``, and
  reports the outcome: success, a ban (``destination_status``), or the failure the
  classifier finds in the download error. Every retry takes a fresh lease: a lease id or
  proxy this middleware put in ``meta`` is never trusted on a copy.
- ``"gateway"``: ``meta["proxy"]`` points at the rotating gateway with a per-slot
  ``session-<id>`` username (``pool-<name>-session-<id>`` with ``PROXYPOOL_POOL``) and the
  gateway token as password. A ban seen inside HTTPS is reported by session to the
  daemon, and the slot moves to a new session (so to another upstream).

A pool that cannot serve at all (no endpoint, no such pool, a token that may not lease)
closes the spider with a reason saying so; a pool that is only busy (exhausted, paced, a
destination down) is waited for and retried. Needs Scrapy 2.13+ with the asyncio reactor
(Scrapy's default). Settings are listed in ``SETTINGS`` and in docs/python-client.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Dict, Optional, Set, Tuple, Union
from urllib.parse import urlsplit

from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response
from scrapy.utils.misc import load_object

from .address import Address, parse_address, resolve_token
from .aio import AsyncClient
from .classify import Classification, classify, classify_status, safe_str
from .discovery import default_address
from .exceptions import (
    BadRequest,
    DestinationDown,
    Forbidden,
    Paced,
    PoolEmpty,
    PoolExhausted,
    ProxyPoolError,
    StoreUnavailable,
    UnknownPool,
)
from .lease import AsyncLease
from .models import PoolStatus
from .scrapy_gateway import (
    TAGS_META,
    GatewayRoute,
    endpoint_of,
    error_of,
    retry_after_seconds,
    same_proxy,
    tags_setting,
)

log = logging.getLogger("proxypool_client.scrapy")

SETTINGS: Dict[str, Any] = {
    "PROXYPOOL_ENABLED": True,
    "PROXYPOOL_MODE": "lease",  # "lease" | "gateway"
    "PROXYPOOL_CONNECT": None,  # "tcp://HOST:PORT" or a socket path; default: the CLI's rule
    "PROXYPOOL_SOCKET": None,  # the socket path (PROXYPOOL_CONNECT wins when both are set)
    "PROXYPOOL_TOKEN": None,  # over TCP; default: $PROXYPOOL_LEASE_TOKEN, else $PROXYPOOL_TOKEN
    "PROXYPOOL_POOL": None,  # lease mode: "default" when unset; gateway: the gateway's pool
    "PROXYPOOL_SCHEMES": ["http", "https"],  # lease mode: endpoint schemes Scrapy can use
    "PROXYPOOL_LEASE_TTL": None,  # default: DOWNLOAD_TIMEOUT + 30 s
    "PROXYPOOL_LEASE_WAIT": "30s",  # how long a lease may wait for a free endpoint
    "PROXYPOOL_DESTINATIONS": True,  # send the request's host as `destination`
    "PROXYPOOL_TAGS": None,  # {"country": "us"}: only endpoints with these tags; meta["proxypool_tags"] per request
    "PROXYPOOL_BAN_STATUSES": [403, 429],
    "PROXYPOOL_RESPONSE_IS_BAN": None,  # callable or dotted path: (request, response) -> bool|None
    "PROXYPOOL_MAX_RETRIES": 5,  # retries of a page after a ban or a proxy failure
    "PROXYPOOL_EXHAUSTED_RETRIES": 5,  # retries of a page the pool could not serve yet
    "PROXYPOOL_EXHAUSTED_MAX_DELAY": 60.0,  # seconds: the longest single wait before one
    "PROXYPOOL_GATEWAY": None,  # gateway mode: "http://127.0.0.1:8899"
    "PROXYPOOL_GATEWAY_TOKEN": "",
}

_LEASE = "_proxypool_lease"  # lease id this middleware set (informational; never trusted)
_PROXY = "_proxypool_proxy"  # meta["proxy"] value this middleware set
_NOT_BEFORE = "_proxypool_not_before"  # event-loop time a retried request waits for
_RETRIES = "proxypool_retries"
_WAITS = "proxypool_waits"

#: Answers that mean "come back later"; the stat each one counts.
_BUSY = {"pool_exhausted": "exhausted", "paced": "paced", "destination_down": "destination_down",
         "store_unavailable": "store_unavailable"}

#: Answers after which no request can be served: the spider closes with this reason.
_FATAL = {"pool_empty": "proxypool_pool_empty", "unknown_pool": "proxypool_unknown_pool",
          "forbidden": "proxypool_forbidden", "bad_token": "proxypool_bad_token"}


class ConfigError(ValueError):
    """A bad PROXYPOOL_* setting. Not NotConfigured: that would quietly disable the
    middleware and let the crawl go out without proxies."""


def _asyncio_ready() -> bool:
    try:
        from scrapy.utils.asyncio import is_asyncio_available
    except ImportError:  # Scrapy < 2.14
        from scrapy.utils.reactor import is_asyncio_reactor_installed as is_asyncio_available
    try:
        return bool(is_asyncio_available())
    except RuntimeError:
        return True  # no reactor yet: Scrapy installs its default, the asyncio one


def backoff(retry_after_s: Optional[float], attempt: int, max_delay: float) -> float:
    """The wait before try ``attempt + 1``: what the daemon named, else 1 s, 2 s, 4 s...;
    at most ``max_delay``, at least 50 ms (a deadline already past must not spin)."""
    delay = retry_after_s if retry_after_s is not None else float(2 ** min(attempt, 16))
    return max(0.05, min(delay, max_delay))


def _endpoints_in(p: PoolStatus) -> int:
    return (p.get("available") or 0) + (p.get("cooling") or 0) + (p.get("probe_allowed") or 0) + (p.get("disabled") or 0)


class ProxyPoolMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        if not s.getbool("PROXYPOOL_ENABLED", True):
            raise NotConfigured("PROXYPOOL_ENABLED is off")
        self.crawler = crawler
        self.stats = crawler.stats
        self.mode = s.get("PROXYPOOL_MODE", "lease")
        if self.mode not in ("lease", "gateway"):
            raise ConfigError("PROXYPOOL_MODE must be 'lease' or 'gateway', not %r" % (self.mode,))
        if not _asyncio_ready():
            raise ConfigError(
                "ProxyPoolMiddleware talks to proxypool with asyncio: set TWISTED_REACTOR = "
                "'twisted.internet.asyncioreactor.AsyncioSelectorReactor'"
            )
        self.pool: Optional[str] = s.get("PROXYPOOL_POOL")
        self.schemes = s.getlist("PROXYPOOL_SCHEMES", ["http", "https"]) or None
        ttl = s.get("PROXYPOOL_LEASE_TTL")
        self.ttl = ttl if ttl is not None else s.getfloat("DOWNLOAD_TIMEOUT", 180) + 30
        self.wait = s.get("PROXYPOOL_LEASE_WAIT", "30s")
        self.destinations = s.getbool("PROXYPOOL_DESTINATIONS", True)
        try:
            raw = s.get("PROXYPOOL_TAGS")
            # A JSON object in a string, as from the command line (-s PROXYPOOL_TAGS=...).
            raw = s.getdict("PROXYPOOL_TAGS") if isinstance(raw, str) else raw
            self.tags = tags_setting(raw, "PROXYPOOL_TAGS")
        except ValueError as e:
            raise ConfigError(str(e)) from None
        self.ban_statuses = frozenset(int(x) for x in s.getlist("PROXYPOOL_BAN_STATUSES", [403, 429]))
        cb = s.get("PROXYPOOL_RESPONSE_IS_BAN")
        self.response_is_ban_setting: Optional[Callable[[Request, Response], Optional[bool]]] = (
            load_object(cb) if isinstance(cb, str) else cb
        )
        self.max_retries = s.getint("PROXYPOOL_MAX_RETRIES", 5)
        self.exhausted_retries = s.getint("PROXYPOOL_EXHAUSTED_RETRIES", 5)
        self.exhausted_max_delay = s.getfloat("PROXYPOOL_EXHAUSTED_MAX_DELAY", 60.0)
        self.address, self.token = self._daemon(s.get("PROXYPOOL_CONNECT") or s.get("PROXYPOOL_SOCKET"),
                                                s.get("PROXYPOOL_TOKEN"))
        self._client: Optional[AsyncClient] = None
        self._live: Dict[str, Tuple[Request, AsyncLease, float]] = {}  # lease id -> (request, lease, started)
        self._closing: Optional[str] = None
        self._preflight: Optional["asyncio.Future[Optional[ProxyPoolError]]"] = None
        self._tasks: Set["asyncio.Future[Any]"] = set()
        self.gateway: Optional[GatewayRoute] = None
        if self.mode == "gateway":
            gw = s.get("PROXYPOOL_GATEWAY")
            if not gw:
                raise ConfigError("PROXYPOOL_MODE = 'gateway' needs PROXYPOOL_GATEWAY, e.g. 'http://127.0.0.1:8899'")
            try:
                self.gateway = GatewayRoute(gw, s.get("PROXYPOOL_GATEWAY_TOKEN", "") or "", self.pool)
            except ValueError as e:
                raise ConfigError(str(e)) from None
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @staticmethod
    def _daemon(connect: Optional[str], token: Optional[str]) -> Tuple[Address, Optional[str]]:
        try:
            address = parse_address(connect) if connect else default_address()
            return address, resolve_token(address, token or None)
        except ValueError as e:
            raise ConfigError("PROXYPOOL_CONNECT / PROXYPOOL_SOCKET / PROXYPOOL_TOKEN: %s" % e) from None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ProxyPoolMiddleware:
        return cls(crawler)

    # -- shared ------------------------------------------------------------------------
    @property
    def client(self) -> AsyncClient:
        if self._client is None:
            self._client = AsyncClient(self.address, timeout=10, token=self.token)
        return self._client

    def _inc(self, key: str, n: int = 1) -> None:
        assert self.stats is not None
        self.stats.inc_value("proxypool/" + key, n)

    def _is_ban(self, request: Request, response: Response) -> bool:
        for cb in (self.response_is_ban_setting, getattr(self.crawler.spider, "response_is_ban", None)):
            if cb is not None:
                verdict = cb(request, response)
                if verdict is not None:
                    return bool(verdict)
        return response.status in self.ban_statuses

    @staticmethod
    def _host(request: Request) -> Optional[str]:
        return (urlsplit(request.url).hostname or "").lower() or None

    @staticmethod
    def _ignore(message: str) -> IgnoreRequest:
        # IgnoreRequest is dropped silently by Scrapy: say why the page is lost.
        log.error("proxypool: %s", message)
        return IgnoreRequest("proxypool: " + message)

    def _fatal(self, code: str, message: str) -> IgnoreRequest:
        """Close the spider (once) with a reason naming the problem; the request is lost."""
        reason = _FATAL[code]
        if self._closing is None:
            self._closing = reason
            self._inc("closed/" + code)
            log.error("proxypool: %s; closing the spider (%s)", message, reason)
            try:
                engine = self.crawler.engine
            except RuntimeError:  # Scrapy 2.14+ before the crawl starts: nothing to close
                engine = None
            if engine is not None and engine.spider is not None:
                if hasattr(engine, "close_spider_async"):  # Scrapy 2.14+
                    task = asyncio.ensure_future(engine.close_spider_async(reason=reason))
                else:  # pragma: no cover - Scrapy 2.13
                    from scrapy.utils.defer import deferred_to_future

                    task = asyncio.ensure_future(deferred_to_future(engine.close_spider(engine.spider, reason)))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        return IgnoreRequest("proxypool: " + message)

    def _fatal_from(self, e: ProxyPoolError, pool: Optional[str]) -> IgnoreRequest:
        name = "the gateway's pool" if pool is None else "pool %r" % (pool,)
        if isinstance(e, UnknownPool):
            return self._fatal("unknown_pool", "%s does not exist (PROXYPOOL_POOL)" % name)
        if isinstance(e, PoolEmpty):
            return self._fatal("pool_empty", "%s has no endpoints: add some (proxypool add URL, or the config)" % name)
        if isinstance(e, Forbidden):
            return self._fatal("forbidden", "the daemon refused the token's role: %s" % e.message)
        return self._fatal("bad_token", "the daemon refused the token (PROXYPOOL_TOKEN): %s" % e.message)

    @staticmethod
    def _is_fatal(e: ProxyPoolError) -> bool:
        return isinstance(e, (UnknownPool, PoolEmpty, Forbidden)) or (
            isinstance(e, BadRequest) and "token" in e.message
        )

    async def _diagnose(self, pool: str) -> Optional[ProxyPoolError]:
        """PoolEmpty or UnknownPool when the daemon's ``status`` says ``pool`` cannot
        serve at all, else None (also when the daemon cannot be asked). For answers that
        do not say: a daemon that predates ``pool_empty`` answers an empty pool with
        ``pool_exhausted``, and a gateway's refused CONNECT shows only its status."""
        try:
            pools = await self.client.status(pool)
        except UnknownPool as e:
            return e
        except ProxyPoolError:
            return None
        if pools and all(_endpoints_in(p) == 0 for p in pools):
            return PoolEmpty("pool_empty", "pool %r has no endpoints" % (pool,))
        return None

    def _delay(self, retry_after_s: Optional[float], attempt: int) -> float:
        return backoff(retry_after_s, attempt, self.exhausted_max_delay)

    def _retry(self, request: Request, why: str) -> Optional[Request]:
        n = request.meta.get(_RETRIES, 0)
        if n >= self.max_retries:
            self._inc("retries_exhausted")
            log.warning("proxypool: giving up on %s after %d retries (%s)", request, n, why)
            return None
        new = request.replace(dont_filter=True)
        new.meta[_RETRIES] = n + 1
        self._clean(new)
        self._inc("retries")
        log.debug("proxypool: retrying %s (%s)", request, why)
        return new

    def _retry_later(self, request: Request, why: str, retry_after_s: Optional[float]) -> Optional[Request]:
        """A copy of ``request`` that waits before it goes out again, or None when it has
        waited ``PROXYPOOL_EXHAUSTED_RETRIES`` times already."""
        n = request.meta.get(_WAITS, 0)
        if n >= self.exhausted_retries:
            self._inc("waits_exhausted")
            log.error("proxypool: giving up on %s after %d waits (%s)", request, n, why)
            return None
        new = request.replace(dont_filter=True)
        new.meta[_WAITS] = n + 1
        new.meta[_NOT_BEFORE] = asyncio.get_running_loop().time() + self._delay(retry_after_s, n)
        self._clean(new)
        self._inc("waits")
        log.info("proxypool: %s: %s again in %.1f s", why, request, self._delay(retry_after_s, n))
        return new

    def _clean(self, request: Request) -> None:
        # What RetryMiddleware (or anyone) copies from here must not carry a used lease.
        meta = request.meta
        if _PROXY in meta:
            if same_proxy(meta.get("proxy"), meta[_PROXY]):
                meta.pop("proxy", None)
                # HttpProxyMiddleware moved our credentials into a header: they go too.
                if same_proxy(meta.get("_auth_proxy"), meta[_PROXY]):
                    meta.pop("_auth_proxy", None)
                    request.headers.pop(b"Proxy-Authorization", None)
            meta.pop(_PROXY, None)
        meta.pop(_LEASE, None)

    def _ours(self, request: Request) -> Optional[Tuple[Request, AsyncLease, float]]:
        """The live lease this very request object holds, else None."""
        lease_id = request.meta.get(_LEASE)
        entry = self._live.get(lease_id) if lease_id else None
        if entry is None or entry[0] is not request:
            return None
        return entry

    # -- downloader middleware API ---------------------------------------------------------
    async def process_request(self, request: Request, spider: Any = None) -> None:
        meta = request.meta
        if "proxy" in meta and not same_proxy(meta.get(_PROXY), meta["proxy"]):
            return None  # the spider chose its own proxy
        not_before = meta.pop(_NOT_BEFORE, None)
        if not_before is not None:
            await asyncio.sleep(max(0.0, not_before - asyncio.get_running_loop().time()))
        if self._closing is not None:
            raise IgnoreRequest("proxypool: the spider is closing (%s)" % self._closing)
        if self.mode == "gateway":
            self._gateway_proxy(request)
            return None
        if self._ours(request) is not None:
            return None
        self._clean(request)
        await self._check_pool()
        lease = await self._lease_for(request)
        self._inc("leases")
        if lease.trial:
            self._inc("trials")
        self._live[lease.id] = (request, lease, time.monotonic())
        meta["proxy"] = lease.proxy
        meta[_PROXY] = lease.proxy
        meta[_LEASE] = lease.id
        meta["proxypool_endpoint"] = lease.endpoint
        return None

    async def _check_pool(self) -> None:
        """Before the first lease, ask once whether the pool can serve at all: an empty
        pool would otherwise cost every request its ``PROXYPOOL_LEASE_WAIT``."""
        pool = self.pool or "default"
        if self._preflight is None:
            self._preflight = asyncio.ensure_future(self._diagnose(pool))
        fatal = await asyncio.shield(self._preflight)
        if fatal is not None:
            raise self._fatal_from(fatal, pool)

    async def _lease_for(self, request: Request) -> AsyncLease:
        pool = self.pool or "default"
        destination = self._host(request) if self.destinations else None
        attempt = 0
        while True:
            try:
                return await self.client.lease(pool, self.ttl, self.wait, destination=destination, schemes=self.schemes,
                                               tags=self._tags(request))
            except (PoolExhausted, Paced, DestinationDown, StoreUnavailable) as e:
                fatal: Optional[ProxyPoolError] = e if isinstance(e, PoolEmpty) else None
                if type(e) is PoolExhausted and e.retry_after_ms is None:
                    fatal = await self._diagnose(pool)
                if fatal is not None:
                    raise self._fatal_from(fatal, pool) from None
                self._inc(_BUSY[e.code])
                if attempt >= self.exhausted_retries:
                    raise self._ignore("pool %s could not serve %s after %d tries: %s"
                                       % (pool, request.url, attempt + 1, e)) from None
                retry_after = None if e.retry_after_ms is None else e.retry_after_ms / 1000.0
                delay = self._delay(retry_after, attempt)
                log.info("proxypool: %s; leasing for %s again in %.1f s", e, request.url, delay)
                self._inc("waits")
                await asyncio.sleep(delay)
                attempt += 1
            except ProxyPoolError as e:
                if self._is_fatal(e):
                    raise self._fatal_from(e, pool) from None
                self._inc("errors/daemon")
                raise self._ignore("cannot lease for %s: %s" % (request.url, e)) from None

    async def process_response(
        self, request: Request, response: Response, spider: Any = None
    ) -> Union[Request, Response]:
        if self.mode == "gateway":
            return await self._gateway_response(request, response)
        entry = self._ours(request)
        if entry is None:
            return response
        proxy_fault = classify_status(response.status, response.headers, ban_statuses=())
        if proxy_fault is not None:
            # A 407 from the proxy itself (plain-HTTP request): the proxy's failure, not a ban.
            self._inc("errors")
            self._inc("errors/" + proxy_fault.reason)
            await self._finish(request, entry, "failure", proxy_fault, detail="HTTP %d" % response.status)
            return self._retry(request, proxy_fault.reason) or response
        if self._is_ban(request, response):
            self._inc("bans")
            await self._finish(request, entry, "failure", self._ban_class(response), detail="HTTP %d" % response.status)
            return self._retry(request, "ban: HTTP %d" % response.status) or response
        await self._finish(request, entry, "success")
        return response

    def _ban_class(self, response: Response) -> Classification:
        if response.status in self.ban_statuses:
            c = classify_status(response.status, response.headers, ban_statuses=[response.status])
            assert c is not None
            return c
        # The callback saw a ban in a page with an ordinary status (a captcha page).
        return Classification("body_mismatch", "response_body", response.status, None)

    async def process_exception(
        self, request: Request, exception: BaseException, spider: Any = None
    ) -> Optional[Request]:
        if self.mode == "gateway":
            return await self._gateway_exception(request, exception)
        entry = self._ours(request)
        if entry is None:
            return None
        c = classify(exception)
        if c is None:
            await self._finish(request, entry, "release")
            return None
        self._inc("errors")
        self._inc("errors/" + c.reason)
        await self._finish(request, entry, "failure", c, "%s: %s" % (type(exception).__name__, safe_str(exception)))
        return self._retry(request, c.reason)

    async def _finish(
        self,
        request: Request,
        entry: Tuple[Request, AsyncLease, float],
        outcome: str,
        c: Optional[Classification] = None,
        detail: Optional[str] = None,
    ) -> None:
        _, lease, started = entry
        self._live.pop(lease.id, None)
        self._clean(request)
        try:
            if outcome == "release":
                await lease.release()
                self._inc("releases")
                return
            await self.client.report(
                lease,
                "success" if outcome == "success" else "failure",
                reason=c.reason if c else None,
                phase=c.phase if c else None,
                status=c.status if c else None,
                retry_after=c.retry_after if c else None,
                detail=detail[:500] if detail else None,
                destination=self._host(request) if self.destinations else None,
                duration_ms=(time.monotonic() - started) * 1000,
            )
            self._inc("reports/" + outcome)
        except ProxyPoolError as e:
            # The page is what matters; a lost report only costs the pool some knowledge.
            self._inc("errors/report")
            log.warning("proxypool: could not %s lease %s: %s", outcome, lease.id, e)

    async def spider_closed(self, spider: Any = None) -> None:
        live, self._live = self._live, {}
        for _, lease, _ in live.values():
            try:
                await lease.release()
            except ProxyPoolError:
                pass
        if self._client is not None:
            await self._client.close()

    # -- gateway mode ------------------------------------------------------------------
    def _slot(self, request: Request) -> str:
        return str(request.meta.get("download_slot") or self._host(request) or "")

    def _new_session(self, request: Request) -> None:
        assert self.gateway is not None
        self.gateway.new_session(self._slot(request))

    def gateway_username(self, session: str) -> str:
        assert self.gateway is not None
        return self.gateway.username(session)

    def _tags(self, request: Request) -> Optional[Dict[str, str]]:
        """The tags a request asks for: ``PROXYPOOL_TAGS``, each key of
        ``meta["proxypool_tags"]`` replacing the setting's (an empty value drops it)."""
        own = request.meta.get(TAGS_META)
        if own is None:
            return self.tags
        try:
            own = tags_setting(own, 'meta["%s"]' % TAGS_META)
        except ValueError as e:
            raise self._ignore(str(e)) from None
        merged = dict(self.tags or {}, **(own or {}))
        return {k: v for k, v in merged.items() if v} or None

    def _gateway_proxy(self, request: Request) -> None:
        assert self.gateway is not None
        proxy, sid, new = self.gateway.proxy_for(self._slot(request), self._tags(request))
        if new:
            self._inc("sessions")
        request.meta["proxy"] = proxy
        request.meta[_PROXY] = proxy
        request.meta["proxypool_session"] = sid

    async def _gateway_response(self, request: Request, response: Response) -> Union[Request, Response]:
        sid = request.meta.get("proxypool_session")
        if sid is None or not same_proxy(request.meta.get(_PROXY), request.meta.get("proxy")):
            return response
        endpoint = endpoint_of(response)
        if endpoint is not None:
            request.meta["proxypool_endpoint"] = endpoint
        error = error_of(response)
        if error is not None:
            return self._gateway_error(request, response, error)
        if not self._is_ban(request, response):
            return response
        self._inc("bans")
        assert self.gateway is not None
        if self.gateway.session(self._slot(request)) == sid:
            self._new_session(request)
        if urlsplit(request.url).scheme == "https":
            await self._report_session_ban(request, response, sid)
        return self._retry(request, "ban: HTTP %d" % response.status) or response

    def _gateway_error(self, request: Request, response: Response, error: str) -> Union[Request, Response]:
        """An answer the gateway made itself (``X-Proxypool-Error``)."""
        if error in ("pool_empty", "unknown_pool", "forbidden"):
            cls = {"pool_empty": PoolEmpty, "unknown_pool": UnknownPool, "forbidden": Forbidden}[error]
            raise self._fatal_from(cls(error, "HTTP %d from the gateway" % response.status), self.pool)
        if error in _BUSY:
            # Nothing to blame on an upstream (a destination that is down least of all):
            # the same session waits and goes again.
            self._inc(_BUSY[error])
            why = "the gateway answered %d %s" % (response.status, error)
            return self._retry_later(request, why, retry_after_seconds(response)) or response
        # Every upstream it tried failed, and it reported them itself: another session.
        self._inc("errors")
        self._new_session(request)
        return response

    async def _report_session_ban(self, request: Request, response: Response, sid: str) -> None:
        # Inside a CONNECT tunnel the gateway cannot see the ban: report it by session.
        c = self._ban_class(response)
        try:
            await self.client.report(
                None,
                "failure",
                session=sid,
                pool=self.pool,
                reason=c.reason,
                phase=c.phase,
                status=c.status,
                retry_after=c.retry_after,
                detail="HTTP %d" % response.status,
                destination=self._host(request) if self.destinations else None,
            )
            self._inc("reports/failure")
        except ProxyPoolError as e:
            self._inc("errors/report")
            log.warning("proxypool: could not report the ban of session %s: %s", sid, e)

    async def _gateway_exception(self, request: Request, exception: BaseException) -> Optional[Request]:
        if request.meta.get("proxypool_session") is None or not isinstance(exception, Exception):
            return None
        c = classify(exception)
        if c is None:
            return None
        if c.phase == "proxy_handshake" and c.status in (400, 503):
            # The gateway refused the CONNECT itself; its header is out of Scrapy's
            # sight, so ask the daemon (when there is one to ask) what the pool lacks.
            fatal = await self._diagnose(self.pool) if self.pool is not None else None
            if fatal is not None:
                raise self._fatal_from(fatal, self.pool)
            if c.status == 503:
                self._inc("exhausted")
                return self._retry_later(request, "the gateway answered CONNECT with 503", None)
            return None
        self._inc("errors")
        self._new_session(request)
        return None
