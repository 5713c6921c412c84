"""A Scrapy downloader middleware that takes its proxies from proxypool.

    DOWNLOADER_MIDDLEWARES = {"proxypool_client.scrapy.ProxyPoolMiddleware": 740}

Two modes (``PROXYPOOL_MODE``):

- ``"lease"`` (default): every request leases an endpoint over the socket (asyncio client,
  awaited on the reactor's event loop: nothing blocks the reactor), uses it as
  ``meta["proxy"]``, and reports the outcome: success, a ban (``destination_status``), or
  the failure the classifier finds in the download error. Every retry takes a fresh
  lease: a lease id or proxy this middleware put in ``meta`` is never trusted on a copy.
- ``"gateway"``: ``meta["proxy"]`` points at the rotating gateway with a per-slot
  ``session-<id>`` username (``pool-<name>-session-<id>`` with ``PROXYPOOL_POOL``) and the
  gateway token as password. A ban seen inside HTTPS is reported by session over the
  socket, and the slot moves to a new session (so to another upstream).

Needs Scrapy 2.13+ with the asyncio reactor (Scrapy's default). Settings are listed in
``SETTINGS`` below and in docs/python-client.md.
"""

import logging
import secrets
import time
from urllib.parse import quote, urlsplit

from scrapy import signals
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.utils.misc import load_object

from .aio import AsyncClient
from .classify import Classification, classify, classify_status
from .protocol import BadRequest, PoolExhausted, ProxyPoolError

log = logging.getLogger("proxypool_client.scrapy")

SETTINGS = {
    "PROXYPOOL_ENABLED": True,
    "PROXYPOOL_MODE": "lease",  # "lease" | "gateway"
    "PROXYPOOL_SOCKET": None,  # default: the CLI's rule (PROXYPOOL_SOCKET env, XDG...)
    "PROXYPOOL_POOL": None,  # lease mode: "default" when unset; gateway: the gateway's pool
    "PROXYPOOL_SCHEMES": ["http", "https"],  # lease mode: endpoint schemes Scrapy can use
    "PROXYPOOL_LEASE_TTL": None,  # default: DOWNLOAD_TIMEOUT + 30 s
    "PROXYPOOL_LEASE_WAIT": "30s",  # how long a lease may wait for a free endpoint
    "PROXYPOOL_DESTINATIONS": True,  # send the request's host as `destination`
    "PROXYPOOL_BAN_STATUSES": [403, 429],
    "PROXYPOOL_RESPONSE_IS_BAN": None,  # callable or dotted path: (request, response) -> bool|None
    "PROXYPOOL_MAX_RETRIES": 5,  # retries of a page after a ban or a proxy failure
    "PROXYPOOL_GATEWAY": None,  # gateway mode: "http://127.0.0.1:8899"
    "PROXYPOOL_GATEWAY_TOKEN": "",
}

_LEASE = "_proxypool_lease"  # lease id this middleware set (informational; never trusted)
_PROXY = "_proxypool_proxy"  # meta["proxy"] value this middleware set
_RETRIES = "proxypool_retries"
_NEW_FIELDS = ("destination", "schemes", "duration_ms")


def _same_proxy(a, b):
    """Whether two proxy URLs name the same proxy. Scrapy's HttpProxyMiddleware strips the
    credentials out of ``meta["proxy"]`` (into a Proxy-Authorization header), so the URL
    this middleware set comes back without them."""
    if a is None or b is None:
        return a is b
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme.lower(), (pa.hostname or "").lower(), pa.port) == (
        pb.scheme.lower(), (pb.hostname or "").lower(), pb.port)


class ConfigError(ValueError):
    """A bad PROXYPOOL_* setting. Not NotConfigured: that would quietly disable the
    middleware and let the crawl go out without proxies."""


def _asyncio_ready():
    try:
        from scrapy.utils.asyncio import is_asyncio_available
    except ImportError:  # Scrapy < 2.14
        from scrapy.utils.reactor import is_asyncio_reactor_installed as is_asyncio_available
    try:
        return is_asyncio_available()
    except RuntimeError:
        return True  # no reactor yet: Scrapy installs its default, the asyncio one


class ProxyPoolMiddleware(object):
    def __init__(self, crawler):
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
        self.pool = s.get("PROXYPOOL_POOL")
        self.schemes = s.getlist("PROXYPOOL_SCHEMES", ["http", "https"]) or None
        ttl = s.get("PROXYPOOL_LEASE_TTL")
        self.ttl = ttl if ttl is not None else s.getfloat("DOWNLOAD_TIMEOUT", 180) + 30
        self.wait = s.get("PROXYPOOL_LEASE_WAIT", "30s")
        self.destinations = s.getbool("PROXYPOOL_DESTINATIONS", True)
        self.ban_statuses = frozenset(int(x) for x in s.getlist("PROXYPOOL_BAN_STATUSES", [403, 429]))
        cb = s.get("PROXYPOOL_RESPONSE_IS_BAN")
        self.response_is_ban_setting = load_object(cb) if isinstance(cb, str) else cb
        self.max_retries = s.getint("PROXYPOOL_MAX_RETRIES", 5)
        self.socket = s.get("PROXYPOOL_SOCKET")
        self._client = None
        self._live = {}  # lease id -> (request, lease, started)
        self._unsupported = set()  # optional fields the daemon turned down
        if self.mode == "gateway":
            gw = s.get("PROXYPOOL_GATEWAY")
            if not gw:
                raise ConfigError("PROXYPOOL_MODE = 'gateway' needs PROXYPOOL_GATEWAY, e.g. 'http://127.0.0.1:8899'")
            parts = urlsplit(gw if "://" in gw else "http://" + gw)
            if not parts.hostname or not parts.port:
                raise ConfigError("PROXYPOOL_GATEWAY %r needs a host and a port" % (gw,))
            self.gateway = (parts.scheme or "http", parts.hostname, parts.port)
            if self.pool and "-" in self.pool:
                # The gateway splits its username on "-" into key-value segments.
                raise ConfigError("PROXYPOOL_POOL %r cannot be routed through the gateway: it contains '-'" % (self.pool,))
            self.token = s.get("PROXYPOOL_GATEWAY_TOKEN", "") or ""
            self._sessions = {}  # slot -> session id
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    # -- shared ------------------------------------------------------------------------
    @property
    def client(self):
        if self._client is None:
            self._client = AsyncClient(self.socket, timeout=10)
        return self._client

    def _inc(self, key, n=1):
        self.stats.inc_value("proxypool/" + key, n)

    def _is_ban(self, request, response):
        for cb in (self.response_is_ban_setting, getattr(self.crawler.spider, "response_is_ban", None)):
            if cb is not None:
                verdict = cb(request, response)
                if verdict is not None:
                    return bool(verdict)
        return response.status in self.ban_statuses

    @staticmethod
    def _host(request):
        return (urlsplit(request.url).hostname or "").lower() or None

    async def _call(self, op, fields):
        """A request that drops optional fields an older daemon turns down (once, logged)."""
        fields = {k: v for k, v in fields.items() if k not in self._unsupported}
        while True:
            try:
                return await self.client.request(op, **{k: v for k, v in fields.items() if v is not None})
            except BadRequest as e:
                field = next((f for f in _NEW_FIELDS if fields.get(f) is not None and "unknown field `%s`" % f in e.message), None)
                if field is None:
                    raise
                if field not in self._unsupported:
                    log.warning("proxypool: the daemon does not know `%s`; sending requests without it", field)
                    self._unsupported.add(field)
                fields.pop(field)

    @staticmethod
    def _ignore(message):
        # IgnoreRequest is dropped silently by Scrapy: say why the page is lost.
        log.error("proxypool: %s", message)
        return IgnoreRequest("proxypool: " + message)

    def _retry(self, request, why):
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

    def _clean(self, request):
        # What RetryMiddleware (or anyone) copies from here must not carry a used lease.
        meta = request.meta
        if _PROXY in meta:
            if _same_proxy(meta.get("proxy"), meta[_PROXY]):
                meta.pop("proxy", None)
                # HttpProxyMiddleware moved our credentials into a header: they go too.
                if _same_proxy(meta.get("_auth_proxy"), meta[_PROXY]):
                    meta.pop("_auth_proxy", None)
                    request.headers.pop(b"Proxy-Authorization", None)
            meta.pop(_PROXY, None)
        meta.pop(_LEASE, None)

    def _ours(self, request):
        """The live lease this very request object holds, else None."""
        lease_id = request.meta.get(_LEASE)
        entry = self._live.get(lease_id) if lease_id else None
        if entry is None or entry[0] is not request:
            return None
        return entry

    # -- downloader middleware API ---------------------------------------------------------
    async def process_request(self, request, spider=None):
        meta = request.meta
        if "proxy" in meta and not _same_proxy(meta.get(_PROXY), meta["proxy"]):
            return None  # the spider chose its own proxy
        if self.mode == "gateway":
            self._gateway_proxy(request)
            return None
        if self._ours(request) is not None:
            return None
        self._clean(request)
        fields = dict(
            pool=self.pool or "default",
            ttl=self.ttl,
            wait=self.wait,
            schemes=self.schemes,
            destination=self._host(request) if self.destinations else None,
        )
        lease, unusable = None, []
        try:
            for _ in range(20):
                try:
                    resp = await self._call("lease", fields)
                except PoolExhausted as e:
                    if unusable:
                        break
                    self._inc("exhausted")
                    raise self._ignore("pool %s has no endpoint for %s: %s" % (fields["pool"], request.url, e.message))
                except ProxyPoolError as e:
                    self._inc("errors/daemon")
                    raise self._ignore("cannot lease for %s: %s" % (request.url, e))
                scheme = resp["proxy"].split("://", 1)[0].lower()
                if not self.schemes or "schemes" not in self._unsupported or scheme in self.schemes:
                    lease = resp
                    break
                # An older daemon ignored `schemes`: keep the SOCKS lease until a usable
                # one comes, so that the daemon offers another endpoint meanwhile.
                unusable.append(resp["lease"])
        finally:
            for lease_id in unusable:
                try:
                    await self._call("release", {"lease": lease_id})
                except ProxyPoolError:
                    pass
        if lease is None:
            raise self._ignore("no %s endpoint in pool %s" % ("/".join(self.schemes), fields["pool"]))
        self._inc("leases")
        if lease.get("trial"):
            self._inc("trials")
        self._live[lease["lease"]] = (request, lease, time.monotonic())
        meta["proxy"] = lease["proxy"]
        meta[_PROXY] = lease["proxy"]
        meta[_LEASE] = lease["lease"]
        meta["proxypool_endpoint"] = lease["endpoint"]
        return None

    async def process_response(self, request, response, spider=None):
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
            await self._finish(request, entry, "failure", *proxy_fault, detail="HTTP %d" % response.status)
            return self._retry(request, proxy_fault.reason) or response
        if self._is_ban(request, response):
            self._inc("bans")
            c = self._ban_class(response)
            await self._finish(request, entry, "failure", *c, detail="HTTP %d" % response.status)
            return self._retry(request, "ban: HTTP %d" % response.status) or response
        await self._finish(request, entry, "success")
        return response

    def _ban_class(self, response):
        if response.status in self.ban_statuses:
            return classify_status(response.status, response.headers, ban_statuses=[response.status])
        # The callback saw a ban in a page with an ordinary status (a captcha page).
        return Classification("body_mismatch", "response_body", response.status, None)

    async def process_exception(self, request, exception, spider=None):
        if self.mode == "gateway":
            if isinstance(exception, Exception) and classify(exception) is not None:
                self._inc("errors")
                self._new_session(request)
            return None
        entry = self._ours(request)
        if entry is None:
            return None
        c = classify(exception)
        if c is None:
            await self._finish(request, entry, "release")
            return None
        self._inc("errors")
        self._inc("errors/" + c.reason)
        await self._finish(request, entry, "failure", c.reason, c.phase, c.status, c.retry_after,
                           "%s: %s" % (type(exception).__name__, exception))
        return self._retry(request, c.reason)

    async def _finish(self, request, entry, outcome, reason=None, phase=None, status=None, retry_after=None, detail=None):
        _, lease, started = entry
        self._live.pop(lease["lease"], None)
        self._clean(request)
        try:
            if outcome == "release":
                await self._call("release", {"lease": lease["lease"]})
                self._inc("releases")
                return
            fields = dict(
                lease=lease["lease"],
                outcome=outcome,
                reason=reason,
                phase=phase,
                status=status,
                retry_after=retry_after,
                detail=detail[:500] if detail else None,
                destination=self._host(request) if self.destinations else None,
                duration_ms=int((time.monotonic() - started) * 1000),
            )
            await self._call("report", fields)
            self._inc("reports/" + outcome)
        except ProxyPoolError as e:
            # The page is what matters; a lost report only costs the pool some knowledge.
            self._inc("errors/report")
            log.warning("proxypool: could not %s lease %s: %s", outcome, lease["lease"], e)

    async def spider_closed(self, spider=None):
        live, self._live = self._live, {}
        for _, lease, _ in live.values():
            try:
                await self.client.release(lease["lease"])
            except ProxyPoolError:
                pass
        if self._client is not None:
            await self._client.close()

    # -- gateway mode ------------------------------------------------------------------
    def _slot(self, request):
        return request.meta.get("download_slot") or self._host(request) or ""

    def _session(self, request):
        slot = self._slot(request)
        sid = self._sessions.get(slot)
        if sid is None:
            sid = self._sessions[slot] = secrets.token_hex(6)
            self._inc("sessions")
        return sid

    def _new_session(self, request):
        self._sessions.pop(self._slot(request), None)

    def gateway_username(self, session):
        parts = ["pool", self.pool] if self.pool else []
        return "-".join(parts + ["session", session])

    def _gateway_proxy(self, request):
        sid = self._session(request)
        scheme, host, port = self.gateway
        user = quote(self.gateway_username(sid), safe="")
        cred = "%s:%s@" % (user, quote(self.token, safe="")) if self.token else "%s:@" % user
        proxy = "%s://%s%s:%d" % (scheme, cred, host, port)
        request.meta["proxy"] = proxy
        request.meta[_PROXY] = proxy
        request.meta["proxypool_session"] = sid

    async def _gateway_response(self, request, response):
        sid = request.meta.get("proxypool_session")
        if sid is None or not _same_proxy(request.meta.get(_PROXY), request.meta.get("proxy")):
            return response
        if response.headers.get(b"X-Proxypool-Error"):
            # Every upstream the gateway tried failed; it reported them itself.
            self._inc("errors")
            self._new_session(request)
            return response
        if not self._is_ban(request, response):
            return response
        self._inc("bans")
        if self._sessions.get(self._slot(request)) == sid:
            self._new_session(request)
        if urlsplit(request.url).scheme == "https":
            # Inside a CONNECT tunnel the gateway cannot see the ban: report it by session.
            c = self._ban_class(response)
            fields = dict(
                session=sid,
                pool=self.pool,
                outcome="failure",
                reason=c.reason,
                phase=c.phase,
                status=c.status,
                retry_after=c.retry_after,
                detail="HTTP %d" % response.status,
                destination=self._host(request) if self.destinations else None,
            )
            try:
                await self._call("report", fields)
                self._inc("reports/failure")
            except ProxyPoolError as e:
                self._inc("errors/report")
                log.warning("proxypool: could not report the ban of session %s: %s", sid, e)
        return self._retry(request, "ban: HTTP %d" % response.status) or response
