//! The upstream attempt loop: lease, dial through the dialer, report, try the next one.
//! The engine calls that decide which upstream a request goes through are here; `lease`
//! ends a lease (its report or release), `counted` records the bytes each endpoint
//! relayed, and the gateway reads its metrics handles once at start.

use std::collections::{BTreeSet, HashSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::task::TaskTracker;
use tracing::info;

use super::counted::{Counted, Counter};
use super::lease::LeaseGuard;
use super::routing::Routing;
use super::target::Target;
use super::urls::ParsedUrls;
use crate::config::GatewayConfig;
use crate::dial::{Carries, Clock, Dest, DialFailure, Dialed, Dialer, Route};
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::health::{Failure, Phase, Reason};
use crate::pool::engine::{Engine, EngineError};
use crate::pool::Refusal;
use crate::pool::{Outcome, PoolError, Want};
use crate::protocol::ErrorCode;

/// A gateway lease lives while its connection does; the guard gives it back.
const LEASE_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// Why no upstream could be given to a client.
#[derive(Debug, thiserror::Error)]
pub(super) enum UpstreamError {
    /// The pool refused the lease, or the engine failed: answered with the code of the
    /// protocol's one mapping (`Refusal`). `endpoint`: for a target that is down, the
    /// last upstream this request's tries found it down through.
    #[error("{error}")]
    Refused {
        error: EngineError,
        endpoint: Option<EndpointId>,
    },
    /// Every upstream tried failed; the last failure (of `endpoint`) explains it.
    #[error("{tried} upstream(s) tried; the last failed: {last}")]
    AllFailed {
        last: DialFailure,
        endpoint: EndpointId,
        tried: usize,
    },
    /// This machine is short of descriptors, memory or local ports (the gateway's own
    /// descriptor budget included): nothing is reported against any upstream.
    #[error("out of local resources: {0}")]
    Local(String),
    /// The pool handed out a URL that no longer parses (it parsed when added).
    #[error("endpoint {endpoint} has an unusable URL: {source}")]
    UnusableUrl {
        endpoint: EndpointId,
        #[source]
        source: crate::endpoint::EndpointError,
    },
}

impl From<EngineError> for UpstreamError {
    fn from(error: EngineError) -> Self {
        UpstreamError::Refused {
            error,
            endpoint: None,
        }
    }
}

impl From<PoolError> for UpstreamError {
    fn from(e: PoolError) -> Self {
        EngineError::Pool(e).into()
    }
}

impl UpstreamError {
    /// The refusal's code and time, for a refusal.
    pub(super) fn refusal(&self) -> Option<Refusal> {
        match self {
            UpstreamError::Refused { error, .. } => Some(error.into()),
            _ => None,
        }
    }

    /// Nothing can be leased now (exhausted or paced): after tries, the last failure says
    /// more.
    fn nothing_now(&self) -> bool {
        self.refusal()
            .is_some_and(|r| matches!(r.code, ErrorCode::PoolExhausted | ErrorCode::Paced))
    }

    /// The error as this request's tries leave it: a target they made down (or whose
    /// trial failed) names the last upstream that failed, as any answer after a dial does.
    fn after(self, tries: &Tries) -> UpstreamError {
        match self {
            UpstreamError::Refused {
                error: error @ EngineError::Pool(PoolError::DestinationDown { .. }),
                endpoint: None,
            } => UpstreamError::Refused {
                error,
                endpoint: tries.last.as_ref().map(|(_, e)| *e),
            },
            other => other,
        }
    }
}

/// How one client request goes through each upstream the pool grants it.
pub(super) trait Way {
    /// An idle connection that can stand for a dial.
    type Conn;
    /// A new connection made ready for the request.
    type Ready;
    /// The route through `proxy`.
    fn route(&self, proxy: &ProxyUrl) -> Route;
    /// An idle connection through `proxy` on `route`, if one is kept.
    fn reuse(&self, proxy: &ProxyUrl, route: Route) -> Option<Self::Conn>;
    /// After `failure` on `route`: another route through the same upstream, tried at once
    /// and without a report (the upstream refused a way, not the destination).
    fn fallback(&self, proxy: &ProxyUrl, route: Route, failure: &DialFailure) -> Option<Route>;
    /// Whether a new connection carries one request or is kept (`TCP_QUICKACK` or not).
    fn carries(&self) -> Carries;
    /// A dialed connection made ready for the request before `deadline` (TLS with the
    /// origin, for an intercepted one): a failure is the try's, reported as a dial's and
    /// followed by the next upstream whatever the request's method, since nothing of the
    /// request has gone out yet.
    fn ready(
        &self,
        proxy: &ProxyUrl,
        dialed: Dialed,
        deadline: tokio::time::Instant,
    ) -> impl std::future::Future<Output = Result<Self::Ready, DialFailure>> + Send;
}

/// Always the same route, never an idle connection.
struct Fixed(Route);

impl Way for Fixed {
    type Conn = Infallible;
    type Ready = Dialed;
    fn route(&self, _: &ProxyUrl) -> Route {
        self.0
    }
    fn reuse(&self, _: &ProxyUrl, _: Route) -> Option<Infallible> {
        None
    }
    fn fallback(&self, _: &ProxyUrl, _: Route, _: &DialFailure) -> Option<Route> {
        None
    }
    fn carries(&self) -> Carries {
        // A tunnel carries whatever the client sends through it.
        Carries::More
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

/// How one try reached the destination.
pub(super) enum Link<S, D = Dialed> {
    /// A new connection through the granted upstream.
    Dialed(D),
    /// An idle connection of the granted upstream, open to the same place.
    Reused(S),
}

/// The tries of one client request: one budget (`retries` + 1 upstreams) for the whole
/// request, whatever spends it (a failed dial, a re-send after an answer); an upstream is
/// never tried twice; the last failure names what went wrong when nothing worked.
pub(super) struct Tries {
    tried: HashSet<EndpointId>,
    budget: usize,
    last: Option<(DialFailure, EndpointId)>,
    /// A trial was among the tries: no other is asked for (trials come before ordinary
    /// leases, so a few dead endpoints waiting for theirs would take every try).
    had_trial: bool,
}

impl Tries {
    fn new(retries: u32) -> Tries {
        Tries {
            tried: HashSet::new(),
            budget: retries as usize + 1,
            last: None,
            had_trial: false,
        }
    }

    /// Whether another upstream may still be tried.
    pub(super) fn left(&self) -> bool {
        self.tried.len() < self.budget
    }
}

/// The gateway's side of the pool.
pub(super) struct Upstream {
    engine: Arc<Engine>,
    dialer: Dialer,
    pool: String,
    retries: u32,
    connect_timeout: Duration,
    /// The gateway's tasks: a dropped lease whose give-back must wait for a commit goes on
    /// in one of them, which the gateway waits for before it stops.
    tracker: TaskTracker,
    urls: ParsedUrls,
}

impl Upstream {
    pub(super) fn new(
        engine: Arc<Engine>,
        dialer: Dialer,
        cfg: &GatewayConfig,
        tracker: TaskTracker,
    ) -> Upstream {
        Upstream {
            engine,
            dialer,
            pool: cfg.pool.clone(),
            retries: cfg.retries,
            connect_timeout: cfg.connect_timeout,
            tracker,
            urls: ParsedUrls::default(),
        }
    }

    /// A fresh budget, for one client request.
    pub(super) fn tries(&self) -> Tries {
        Tries::new(self.retries)
    }

    /// The routing's session is the gateway's own and is done with: forget it.
    pub(super) fn session_done(&self, routing: &Routing) {
        if let (true, Some(key)) = (routing.own_session, routing.session.as_deref()) {
            let pool = routing.pool.as_deref().unwrap_or(&self.pool);
            self.engine.forget_session(pool, key);
        }
    }

    async fn lease(&self, routing: &Routing, want: &Want) -> Result<LeaseGuard, UpstreamError> {
        let pool = routing.pool.as_deref().unwrap_or(&self.pool);
        let grant = self
            .engine
            .lease_with(
                pool,
                LEASE_TTL,
                routing.session.as_deref(),
                Duration::ZERO,
                want,
            )
            .await
            .map_err(UpstreamError::from)?;
        // The pool only holds URLs that parsed when they were added.
        let proxy = match self.urls.get(grant.endpoint, &grant.proxy) {
            Ok(p) => p,
            Err(source) => {
                // Give the lease back: nothing will use it.
                let _ = self.engine.release(&grant.lease).await;
                return Err(UpstreamError::UnusableUrl {
                    endpoint: grant.endpoint,
                    source,
                });
            }
        };
        // Counted against the pool that served it (a fallback's, maybe).
        let (metrics, exit) = self.engine.beside_lease(&grant.pool, grant.endpoint);
        Ok(LeaseGuard::new(
            self.engine.clone(),
            self.tracker.clone(),
            grant.lease,
            grant.endpoint,
            grant.pool,
            proxy,
            metrics,
        )
        .with_trial(grant.trial)
        .with_exit(exit))
    }

    /// Connect to `dest` through the first upstream that gets there, trying at most
    /// `retries` more after connect-phase failures, each reported as a probe would.
    pub(super) async fn connect(
        &self,
        routing: &Routing,
        target: &Target,
        route: Route,
    ) -> Result<(LeaseGuard, Dialed), UpstreamError> {
        let mut tries = self.tries();
        let (guard, link) = self
            .connect_or_reuse(routing, target, &mut tries, &Fixed(route))
            .await?;
        match link {
            Link::Dialed(d) => Ok((guard, d)),
            Link::Reused(never) => match never {},
        }
    }

    /// As `connect`, on the budget of `tries` (which a client request may have spent
    /// partly already), with `way` choosing the route through each granted upstream,
    /// offering an idle connection of its own instead of a dial, or another route after a
    /// refusal.
    pub(super) async fn connect_or_reuse<W: Way>(
        &self,
        routing: &Routing,
        target: &Target,
        tries: &mut Tries,
        way: &W,
    ) -> Result<(LeaseGuard, Link<W::Conn, W::Ready>), UpstreamError> {
        // Leases for the place skip its banned pairs and refuse a target that is down;
        // their reports are judged by docs/blame.md.
        let dest = &target.dest;
        let mut want = Want::at(Some(&target.place)).with_tags(routing.tags.clone());
        // Endpoints granted again after a try: held (so the pool hands out another) until
        // this loop ends, then released.
        let mut held = Vec::new();
        // After a failed try, a session of the gateway's own lets the request go on
        // through another upstream (the session moves once its endpoint cools).
        let unbound = routing.own_session.then(|| Routing {
            session: None,
            ..routing.clone()
        });
        while tries.left() && held.len() <= tries.budget {
            let this = match (&unbound, &tries.last) {
                (Some(r), Some(_)) => r,
                _ => routing,
            };
            want.no_trial = tries.had_trial;
            let guard = match self.lease(this, &want).await {
                Ok(g) => g,
                Err(e) if e.nothing_now() && tries.last.is_some() => break,
                Err(e) => return Err(e.after(tries)),
            };
            tries.had_trial |= guard.trial();
            if !tries.tried.insert(guard.endpoint()) {
                held.push(guard);
                continue;
            }
            let route = way.route(guard.proxy());
            if let Some(conn) = way.reuse(guard.proxy(), route) {
                return Ok((guard, Link::Reused(conn)));
            }
            match self.dial_ready(&guard, dest, route, way).await {
                Ok(d) => return Ok((guard, Link::Dialed(d))),
                Err(f) if f.local => {
                    // Our own shortage says nothing of the upstream: the lease goes back
                    // unreported, and no other upstream is tried (it would meet the same).
                    info!(endpoint = guard.endpoint(), detail = %f.detail,
                        "gateway cannot dial on this machine; nothing reported");
                    guard.finish().await;
                    return Err(UpstreamError::Local(f.detail));
                }
                Err(f) => {
                    info!(endpoint = guard.endpoint(), reason = %f.reason, phase = %f.phase,
                        attempt = tries.tried.len(), "gateway upstream failed; trying another");
                    self.fail(guard, f, &dest.host, tries).await;
                }
            }
        }
        drop(held);
        Err(self.spent(routing, &want, tries))
    }

    /// Dial `dest` through the granted upstream and make the link ready (`way`'s TLS to
    /// the origin, say), within one `connect_timeout`, another route through the upstream
    /// included when `way` offers one after a refusal.
    async fn dial_ready<W: Way>(
        &self,
        guard: &LeaseGuard,
        dest: &Dest,
        mut route: Route,
        way: &W,
    ) -> Result<W::Ready, DialFailure> {
        let mut clock = Clock::start(self.connect_timeout, "gateway connect_timeout");
        let dialed = loop {
            match self
                .dial_on(guard, dest, route, way.carries(), &mut clock)
                .await
            {
                Err(f) => match way.fallback(guard.proxy(), route, &f) {
                    Some(other) if other != route => {
                        info!(endpoint = guard.endpoint(), status = f.status,
                            "gateway upstream refuses tunnels to this port; forwarding through it instead");
                        route = other;
                    }
                    _ => break Err(f),
                },
                ok => break ok,
            }
        };
        way.ready(guard.proxy(), dialed?, clock.deadline).await
    }

    /// Why a request's tries ended without a link: the target they made down, the last
    /// failure, or a pool with nothing new to offer.
    fn spent(&self, routing: &Routing, want: &Want, tries: &Tries) -> UpstreamError {
        let pool = routing.pool.as_deref().unwrap_or(&self.pool);
        if let Some(t) = want.target_key().filter(|_| tries.last.is_some()) {
            // The last failures made the target down: say that, not the last failure.
            if let Some(retry_after) = self.engine.target_down(pool, t) {
                let certificate = tries.last.as_ref().is_some_and(|(f, _)| {
                    f.reason == Reason::TlsFailed && f.phase == Phase::DestinationTls
                });
                let down = PoolError::DestinationDown {
                    pool: pool.to_string(),
                    target: t.to_string(),
                    retry_after,
                    trial_out: false,
                    certificate,
                };
                return UpstreamError::Refused {
                    error: down.into(),
                    endpoint: tries.last.as_ref().map(|(_, e)| *e),
                };
            }
        }
        match &tries.last {
            Some((last, endpoint)) => UpstreamError::AllFailed {
                last: last.clone(),
                endpoint: *endpoint,
                tried: tries.tried.len(),
            },
            // Only endpoints already tried came back: the pool has nothing new to offer.
            None => PoolError::Exhausted {
                pool: pool.to_string(),
                retry_after: None,
                filter: None,
            }
            .into(),
        }
    }

    /// One dial through the lease's endpoint within `connect_timeout`.
    pub(super) async fn dial(
        &self,
        guard: &LeaseGuard,
        dest: &Dest,
        route: Route,
        carries: Carries,
    ) -> Result<Dialed, DialFailure> {
        let mut clock = Clock::start(self.connect_timeout, "gateway connect_timeout");
        self.dial_on(guard, dest, route, carries, &mut clock).await
    }

    async fn dial_on(
        &self,
        guard: &LeaseGuard,
        dest: &Dest,
        route: Route,
        carries: Carries,
        clock: &mut Clock,
    ) -> Result<Dialed, DialFailure> {
        let mut d = self
            .dialer
            .dial(guard.proxy(), dest, route, carries, clock)
            .await?;
        let head = std::mem::take(&mut d.connect_head);
        if !head.is_empty() {
            guard.saw_connect_reply(&head);
        }
        // Counted from here: tunnel payload, or the forwarded request and response; the
        // handshake to the upstream is not relayed traffic.
        let to = Counter {
            engine: Some(self.engine.clone()),
            endpoint: guard.endpoint(),
            pool: guard.metrics().cloned(),
        };
        d.io = Box::new(Counted::new(d.io, to));
        Ok(d)
    }

    /// The tag keys endpoints carry: what a username may name besides pool and session.
    pub(super) fn tag_keys(&self) -> Arc<BTreeSet<String>> {
        self.engine.tag_keys()
    }

    /// Report a failure seen on the way to `destination` and wait for it to be recorded;
    /// it is the request's last failure now.
    pub(super) async fn fail(
        &self,
        mut guard: LeaseGuard,
        f: DialFailure,
        destination: &str,
        tries: &mut Tries,
    ) {
        let endpoint = guard.endpoint();
        guard.set_outcome(failure_outcome(f.clone(), destination));
        guard.finish().await;
        tries.last = Some((f, endpoint));
    }
}

/// The report for a failure on the way to `destination`. The lease was taken for the
/// place, so the report is judged by docs/blame.md, "What each answer means"; the
/// detail names it as well.
pub(super) fn failure_outcome(f: DialFailure, destination: &str) -> Outcome {
    let mut failure = Failure::from(f);
    failure.detail = Some(format!(
        "gateway, destination {destination}: {}",
        failure.detail.unwrap_or_default()
    ));
    Outcome::Failure(failure)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::{Phase, Reason};

    #[test]
    fn failures_keep_reason_phase_status_and_name_the_destination() {
        let mut f = DialFailure::new(Reason::ProxyRejected, Phase::ProxyHandshake, "403");
        f.status = Some(403);
        let Outcome::Failure(out) = failure_outcome(f, "example.com") else {
            panic!("not a failure");
        };
        assert_eq!(
            (out.reason, out.phase, out.status),
            (
                Some(Reason::ProxyRejected),
                Some(Phase::ProxyHandshake),
                Some(403)
            )
        );
        assert_eq!(
            out.detail.as_deref(),
            Some("gateway, destination example.com: 403")
        );
    }
}
