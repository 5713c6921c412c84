//! How an absolute-form (plain HTTP) request travels through an HTTP(S) upstream: forwarded
//! to the proxy, or inside a tunnel to the destination that stays open for the next
//! request (`plain_http`). `auto` tunnels and falls back to forwarding, for good, through
//! an upstream that refuses such a tunnel.

use std::collections::HashSet;
use std::sync::Mutex;

use super::idle::{IdleConns, IdleKey, Sender};
use super::upstream::Way;
use crate::config::PlainHttp;
use crate::dial::{Dest, DialFailure, Route};
use crate::endpoint::ProxyUrl;
use crate::health::{Phase, Reason};

/// Upstreams remembered as refusing tunnels for plain HTTP; past this many the memory
/// starts over (each is then asked once more).
const MAX_REFUSED: usize = 100_000;

/// The gateway's `plain_http` mode and what `auto` learned.
pub(super) struct PlainRoutes {
    mode: PlainHttp,
    /// Proxy URLs (whole: an endpoint edited to another proxy is asked again).
    refused: Mutex<HashSet<String>>,
}

impl PlainRoutes {
    pub(super) fn new(mode: PlainHttp) -> PlainRoutes {
        PlainRoutes {
            mode,
            refused: Mutex::new(HashSet::new()),
        }
    }

    fn refused(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.refused.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The route through `proxy`. SOCKS upstreams tunnel whatever the route says.
    pub(super) fn route(&self, proxy: &ProxyUrl) -> Route {
        match self.mode {
            PlainHttp::Forward => Route::PlainHttp,
            PlainHttp::Tunnel => Route::Tunnel,
            PlainHttp::Auto if proxy.scheme.is_socks() => Route::Tunnel,
            PlainHttp::Auto => {
                if self.refused().contains(&proxy.to_secret_string()) {
                    Route::PlainHttp
                } else {
                    Route::Tunnel
                }
            }
        }
    }

    /// In `auto`, a proxy that answered the tunnel request with a refusal of its own (not
    /// a credentials or gateway error, which forwarding would meet as well) is remembered
    /// and the request forwarded instead.
    pub(super) fn fallback(
        &self,
        proxy: &ProxyUrl,
        route: Route,
        f: &DialFailure,
    ) -> Option<Route> {
        let refusal = f.reason == Reason::ProxyRejected
            && f.phase == Phase::ProxyHandshake
            && f.status.is_some();
        if self.mode != PlainHttp::Auto
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
        refused.insert(proxy.to_secret_string());
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
}

impl Way for PlainWay<'_> {
    /// The idle connection, and whether it forwards.
    type Conn = (Sender, bool);

    fn route(&self, proxy: &ProxyUrl) -> Route {
        self.routes.route(proxy)
    }

    fn reuse(&self, proxy: &ProxyUrl, route: Route) -> Option<(Sender, bool)> {
        let forward = forwards(proxy, route);
        let sender = self.idle.take(&IdleKey::new(proxy, self.dest, forward))?;
        Some((sender, forward))
    }

    fn fallback(&self, proxy: &ProxyUrl, route: Route, f: &DialFailure) -> Option<Route> {
        self.routes.fallback(proxy, route, f)
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
    fn routes_by_mode_and_scheme() {
        let http = proxy("http://127.0.0.1:1");
        let socks = proxy("socks5://127.0.0.1:1");
        let table = [
            (PlainHttp::Forward, &http, Route::PlainHttp),
            (PlainHttp::Tunnel, &http, Route::Tunnel),
            (PlainHttp::Auto, &http, Route::Tunnel),
            (PlainHttp::Auto, &socks, Route::Tunnel),
        ];
        for (mode, p, want) in table {
            assert_eq!(PlainRoutes::new(mode).route(p), want, "{mode:?} {p:?}");
        }
        assert!(forwards(&http, Route::PlainHttp));
        assert!(!forwards(&http, Route::Tunnel));
        assert!(!forwards(&socks, Route::PlainHttp));
    }

    #[test]
    fn auto_falls_back_on_a_refusal_only_and_remembers_it() {
        let p = proxy("http://u:pw@127.0.0.1:1");
        let table = [
            // (mode, failure, falls back)
            (
                PlainHttp::Auto,
                failure(Reason::ProxyRejected, Some(403)),
                true,
            ),
            (PlainHttp::Auto, failure(Reason::ProxyRejected, None), false),
            (
                PlainHttp::Auto,
                failure(Reason::ProxyAuthRejected, Some(407)),
                false,
            ),
            (
                PlainHttp::Auto,
                failure(Reason::UpstreamUnreachable, Some(502)),
                false,
            ),
            (
                PlainHttp::Auto,
                failure(Reason::ConnectRefused, None),
                false,
            ),
            (
                PlainHttp::Tunnel,
                failure(Reason::ProxyRejected, Some(403)),
                false,
            ),
            (
                PlainHttp::Forward,
                failure(Reason::ProxyRejected, Some(403)),
                false,
            ),
        ];
        for (mode, f, falls_back) in table {
            let routes = PlainRoutes::new(mode);
            let got = routes.fallback(&p, Route::Tunnel, &f);
            assert_eq!(got.is_some(), falls_back, "{mode:?} {f:?}");
            let now = routes.route(&p);
            if falls_back {
                assert_eq!(now, Route::PlainHttp, "remembered");
                // Another proxy (or the same one edited) is still asked for a tunnel.
                assert_eq!(
                    routes.route(&proxy("http://u:new@127.0.0.1:1")),
                    Route::Tunnel
                );
            } else {
                assert_eq!(now, PlainRoutes::new(mode).route(&p), "unchanged");
            }
        }
        let socks = proxy("socks5://127.0.0.1:1");
        let routes = PlainRoutes::new(PlainHttp::Auto);
        assert_eq!(
            routes.fallback(
                &socks,
                Route::Tunnel,
                &failure(Reason::ProxyRejected, Some(1))
            ),
            None
        );
    }
}
