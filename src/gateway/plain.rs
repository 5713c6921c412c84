//! How an absolute-form (plain HTTP) request travels through an HTTP(S) upstream
//! (`plain_http`): forwarded to the proxy on a new connection each time (`forward`, the
//! default), forwarded on a connection kept open when the proxy allows it
//! (`forward-keepalive`), or inside a tunnel to the destination that stays open for the
//! next request (`tunnel`), falling back to `forward-keepalive` for a while through a proxy
//! that refuses such a tunnel.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::idle::{IdleConns, IdleKey, Sender};
use super::upstream::Way;
use crate::config::PlainHttp;
use crate::dial::{Carries, Dest, DialFailure, Dialed, Route};
use crate::endpoint::ProxyUrl;
use crate::health::{Phase, Reason};

/// How long a proxy's refusal to tunnel to a port is remembered; then it is asked again.
const REFUSAL_MEMORY: Duration = Duration::from_secs(3600);
/// Refusals remembered at most; past this many the memory starts over.
const MAX_REFUSED: usize = 100_000;

/// CONNECT answers that refuse the tunnel itself (policy: "CONNECT to this port is not
/// allowed"), as opposed to the destination being unreachable (500/502/503/504), the
/// proxy being busy (429) or the credentials (401/407) — which forwarding would meet too,
/// and which are reported as failures.
const REFUSALS: [u16; 4] = [400, 403, 405, 501];

/// The gateway's `plain_http` mode and the refusals `tunnel` has met.
pub(super) struct PlainRoutes {
    mode: PlainHttp,
    /// (proxy URL, whole so an edited endpoint is asked again; destination port) → when.
    refused: Mutex<HashMap<(String, u16), Instant>>,
}

impl PlainRoutes {
    pub(super) fn new(mode: PlainHttp) -> PlainRoutes {
        PlainRoutes {
            mode,
            refused: Mutex::new(HashMap::new()),
        }
    }

    fn refused(&self) -> std::sync::MutexGuard<'_, HashMap<(String, u16), Instant>> {
        self.refused.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether upstream connections are kept for the next request.
    pub(super) fn reuse(&self) -> bool {
        self.mode != PlainHttp::Forward
    }

    /// The route through `proxy` to `dest`. SOCKS upstreams tunnel whatever it says.
    pub(super) fn route(&self, proxy: &ProxyUrl, dest: &Dest) -> Route {
        if self.mode != PlainHttp::Tunnel {
            return Route::PlainHttp;
        }
        if proxy.scheme.is_socks() {
            return Route::Tunnel;
        }
        let mut refused = self.refused();
        // Most pools have no refusing proxy: no key to build per request then.
        if refused.is_empty() {
            return Route::Tunnel;
        }
        let key = (proxy.to_secret_string(), dest.port);
        match refused.get(&key) {
            Some(at) if at.elapsed() < REFUSAL_MEMORY => Route::PlainHttp,
            Some(_) => {
                refused.remove(&key);
                Route::Tunnel
            }
            None => Route::Tunnel,
        }
    }

    /// In `tunnel` mode, a proxy that refused the tunnel by policy is remembered (for this
    /// destination port) and the request forwarded instead, without a report.
    pub(super) fn fallback(
        &self,
        proxy: &ProxyUrl,
        dest: &Dest,
        route: Route,
        f: &DialFailure,
    ) -> Option<Route> {
        let refusal = f.reason == Reason::ProxyRejected
            && f.phase == Phase::ProxyHandshake
            && f.status.is_some_and(|s| REFUSALS.contains(&s));
        if self.mode != PlainHttp::Tunnel
            || route != Route::Tunnel
            || proxy.scheme.is_socks()
            || !refusal
        {
            return None;
        }
        let mut refused = self.refused();
        if refused.len() >= MAX_REFUSED {
            refused.clear();
        }
        refused.insert((proxy.to_secret_string(), dest.port), Instant::now());
        Some(Route::PlainHttp)
    }
}

/// True when a plain-HTTP request goes to `proxy` in absolute form; otherwise it travels
/// in a tunnel to the destination, in origin form.
pub(super) fn forwards(proxy: &ProxyUrl, route: Route) -> bool {
    !proxy.scheme.is_socks() && route == Route::PlainHttp
}

/// One absolute-form request's way through the upstreams it is granted.
pub(super) struct PlainWay<'a> {
    pub(super) routes: &'a PlainRoutes,
    pub(super) idle: &'a IdleConns,
    pub(super) dest: &'a Dest,
    /// The request's body can go out only once: only a connection idle for a very short
    /// time is worth the risk that the far side closes it just as the body is sent.
    pub(super) once_body: bool,
}

impl Way for PlainWay<'_> {
    /// The idle connection, and where it leads (the key it goes back under).
    type Conn = (Sender, IdleKey);
    type Ready = Dialed;

    fn route(&self, proxy: &ProxyUrl) -> Route {
        self.routes.route(proxy, self.dest)
    }

    fn reuse(&self, proxy: &ProxyUrl, route: Route) -> Option<(Sender, IdleKey)> {
        if !self.routes.reuse() {
            return None;
        }
        let key = IdleKey::new(proxy, self.dest, forwards(proxy, route));
        let sender = self.idle.take(&key, self.once_body)?;
        Some((sender, key))
    }

    fn fallback(&self, proxy: &ProxyUrl, route: Route, f: &DialFailure) -> Option<Route> {
        self.routes.fallback(proxy, self.dest, route, f)
    }

    fn carries(&self) -> Carries {
        if self.routes.reuse() {
            Carries::More
        } else {
            Carries::OneExchange
        }
    }

    fn ready(
        &self,
        _: &ProxyUrl,
        dialed: Dialed,
        _: tokio::time::Instant,
    ) -> impl std::future::Future<Output = Result<Dialed, DialFailure>> + Send {
        std::future::ready(Ok(dialed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxy(u: &str) -> ProxyUrl {
        ProxyUrl::parse(u).unwrap()
    }

    fn failure(reason: Reason, status: Option<u16>) -> DialFailure {
        let mut f = DialFailure::new(reason, Phase::ProxyHandshake, "x");
        f.status = status;
        f
    }

    #[test]
    fn routes_and_reuse_by_mode_and_scheme() {
        let http = proxy("http://127.0.0.1:1");
        let socks = proxy("socks5://127.0.0.1:1");
        let d = Dest::new("example.com", 80);
        let table = [
            (PlainHttp::Forward, &http, Route::PlainHttp, false),
            (PlainHttp::ForwardKeepalive, &http, Route::PlainHttp, true),
            (PlainHttp::Tunnel, &http, Route::Tunnel, true),
            (PlainHttp::Tunnel, &socks, Route::Tunnel, true),
        ];
        for (mode, p, route, reuse) in table {
            let r = PlainRoutes::new(mode);
            assert_eq!(
                (r.route(p, &d), r.reuse()),
                (route, reuse),
                "{mode:?} {p:?}"
            );
        }
        assert!(forwards(&http, Route::PlainHttp));
        assert!(!forwards(&http, Route::Tunnel));
        assert!(!forwards(&socks, Route::PlainHttp));
    }

    #[test]
    fn tunnel_falls_back_on_a_policy_refusal_only() {
        let p = proxy("http://u:pw@127.0.0.1:1");
        let d80 = Dest::new("example.com", 80);
        use Reason::*;
        let table = [
            // (mode, failure, falls back)
            (PlainHttp::Tunnel, failure(ProxyRejected, Some(403)), true),
            (PlainHttp::Tunnel, failure(ProxyRejected, Some(405)), true),
            (PlainHttp::Tunnel, failure(ProxyRejected, Some(400)), true),
            (PlainHttp::Tunnel, failure(ProxyRejected, Some(501)), true),
            (PlainHttp::Tunnel, failure(ProxyRejected, Some(503)), false),
            (PlainHttp::Tunnel, failure(ProxyRejected, Some(500)), false),
            (PlainHttp::Tunnel, failure(ProxyRejected, Some(429)), false),
            (PlainHttp::Tunnel, failure(ProxyRejected, None), false),
            (
                PlainHttp::Tunnel,
                failure(ProxyAuthRejected, Some(407)),
                false,
            ),
            (
                PlainHttp::Tunnel,
                failure(UpstreamUnreachable, Some(502)),
                false,
            ),
            (PlainHttp::Tunnel, failure(ConnectRefused, None), false),
            (
                PlainHttp::ForwardKeepalive,
                failure(ProxyRejected, Some(403)),
                false,
            ),
            (PlainHttp::Forward, failure(ProxyRejected, Some(403)), false),
        ];
        for (mode, f, falls_back) in table {
            let routes = PlainRoutes::new(mode);
            let before = routes.route(&p, &d80);
            let got = routes.fallback(&p, &d80, Route::Tunnel, &f);
            assert_eq!(got.is_some(), falls_back, "{mode:?} {f:?}");
            let now = routes.route(&p, &d80);
            if falls_back {
                assert_eq!(now, Route::PlainHttp, "remembered");
                // Another port, another proxy (or the same one edited): asked again.
                assert_eq!(
                    routes.route(&p, &Dest::new("example.com", 8080)),
                    Route::Tunnel
                );
                let edited = proxy("http://u:new@127.0.0.1:1");
                assert_eq!(routes.route(&edited, &d80), Route::Tunnel);
            } else {
                assert_eq!(now, before, "unchanged");
            }
        }
        let socks = proxy("socks5://127.0.0.1:1");
        let routes = PlainRoutes::new(PlainHttp::Tunnel);
        let f = failure(ProxyRejected, Some(403));
        assert_eq!(routes.fallback(&socks, &d80, Route::Tunnel, &f), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_is_forgotten_after_an_hour() {
        let p = proxy("http://127.0.0.1:1");
        let d = Dest::new("example.com", 80);
        let routes = PlainRoutes::new(PlainHttp::Tunnel);
        let f = failure(Reason::ProxyRejected, Some(403));
        assert!(routes.fallback(&p, &d, Route::Tunnel, &f).is_some());
        tokio::time::advance(REFUSAL_MEMORY - Duration::from_millis(1)).await;
        assert_eq!(routes.route(&p, &d), Route::PlainHttp);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(routes.route(&p, &d), Route::Tunnel);
    }
}
