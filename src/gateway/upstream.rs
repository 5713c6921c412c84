//! The upstream attempt loop: lease, dial through the dialer, report, try the next one.
//! Every call into the engine lives here or in `lease` (the report or release that ends a
//! lease).

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
use crate::health::Failure;
use crate::pool::engine::{Engine, EngineError};
use crate::pool::{Outcome, PoolError, Want};

/// A gateway lease lives while its connection does; the guard gives it back.
const LEASE_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// Why no upstream could be given to a client.
#[derive(Debug, thiserror::Error)]
pub(super) enum UpstreamError {
    /// Nothing leasable in the pool.
    #[error("pool {pool:?} has no endpoint available")]
    Exhausted {
        pool: String,
        retry_after: Option<Duration>,
    },
    /// Every endpoint that fits was used for the destination too recently (pacing), past
    /// the pool's `wait`.
    #[error("pool {pool:?}: every endpoint that fits was used for {host} too recently")]
    Paced {
        pool: String,
        host: String,
        retry_after: Option<Duration>,
    },
    /// The pool has no endpoint at all: waiting will not help.
    #[error("pool {pool:?} has no endpoints")]
    Empty { pool: String },
    /// The client named a pool that does not exist.
    #[error("unknown pool {0:?}")]
    UnknownPool(String),
    /// The username named a tag key no endpoint carries (or the lease cannot be asked).
    #[error("{0}")]
    BadRoute(String),
    /// Every endpoint that tried the target failed to reach it: answered at once, or after
    /// this request's own tries found it down (`endpoint`: the last one that failed).
    #[error("destination {target} is down; next trial in at most {} ms", retry_after.as_millis())]
    DestinationDown {
        target: String,
        retry_after: Duration,
        /// Its single trial is out now (`retry_after`: until it is handed back at the
        /// latest).
        trial_out: bool,
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
    /// The engine or store failed.
    #[error("internal error: {0}")]
    Internal(#[source] EngineError),
    /// The pool handed out a URL that no longer parses (it parsed when added).
    #[error("endpoint {endpoint} has an unusable URL: {source}")]
    UnusableUrl {
        endpoint: EndpointId,
        #[source]
        source: crate::endpoint::EndpointError,
    },
}

impl UpstreamError {
    /// The error as this request's tries leave it: a target they made down (or whose
    /// trial failed) names the last upstream that failed, as any answer after a dial does.
    fn after(self, tries: &Tries) -> UpstreamError {
        match self {
            UpstreamError::DestinationDown {
                target,
                retry_after,
                trial_out,
                endpoint: None,
            } => UpstreamError::DestinationDown {
                target,
                retry_after,
                trial_out,
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
}

impl Tries {
    fn new(retries: u32) -> Tries {
        Tries {
            tried: HashSet::new(),
            budget: retries as usize + 1,
            last: None,
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
            .map_err(|e| match e {
                EngineError::Pool(PoolError::Exhausted {
                    pool, retry_after, ..
                }) => UpstreamError::Exhausted { pool, retry_after },
                EngineError::Pool(PoolError::Empty { pool, .. }) => UpstreamError::Empty { pool },
                // At its max_leases the pool frees one when a lease ends: a 503 as for an
                // exhausted pool, with no time to wait.
                EngineError::Pool(PoolError::TooManyLeases { pool, .. }) => {
                    UpstreamError::Exhausted {
                        pool,
                        retry_after: None,
                    }
                }
                EngineError::Pool(PoolError::Paced {
                    pool,
                    host,
                    retry_after,
                    ..
                }) => UpstreamError::Paced {
                    pool,
                    host,
                    retry_after,
                },
                EngineError::Pool(PoolError::UnknownPool(p)) => UpstreamError::UnknownPool(p),
                EngineError::Pool(e @ PoolError::UnknownTag { .. }) => {
                    UpstreamError::BadRoute(e.to_string())
                }
                EngineError::Pool(PoolError::DestinationDown {
                    target,
                    retry_after,
                    trial_out,
                    ..
                }) => UpstreamError::DestinationDown {
                    target,
                    retry_after,
                    trial_out,
                    endpoint: None,
                },
                other => UpstreamError::Internal(other),
            })?;
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
        let metrics = self.engine.pool_metrics(&grant.pool);
        Ok(LeaseGuard::new(
            self.engine.clone(),
            self.tracker.clone(),
            grant.lease,
            grant.endpoint,
            grant.pool,
            proxy,
            metrics,
        ))
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
        let want = Want::at(Some(&target.place)).with_tags(routing.tags.clone());
        // Endpoints granted again after a try: held (so the pool hands out another) until
        // this loop ends, then released.
        let mut held = Vec::new();
        while tries.left() && held.len() <= tries.budget {
            let guard = match self.lease(routing, &want).await {
                Ok(g) => g,
                Err(UpstreamError::Exhausted { .. } | UpstreamError::Paced { .. })
                    if tries.last.is_some() =>
                {
                    break
                }
                Err(e) => return Err(e.after(tries)),
            };
            if !tries.tried.insert(guard.endpoint()) {
                held.push(guard);
                continue;
            }
            let mut route = way.route(guard.proxy());
            if let Some(conn) = way.reuse(guard.proxy(), route) {
                return Ok((guard, Link::Reused(conn)));
            }
            // One connect_timeout for the try, another way through the upstream included.
            let mut clock = Clock::start(self.connect_timeout, "gateway connect_timeout");
            let dialed = loop {
                match self
                    .dial_on(&guard, dest, route, way.carries(), &mut clock)
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
            let dialed = match dialed {
                Ok(d) => way.ready(guard.proxy(), d, clock.deadline).await,
                Err(f) => Err(f),
            };
            match dialed {
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
        let pool = routing.pool.as_deref().unwrap_or(&self.pool);
        if let Some(t) = want.target_key().filter(|_| tries.last.is_some()) {
            // The last failures made the target down: say that, not the last failure.
            if let Some(retry_after) = self.engine.target_down(pool, t) {
                return Err(UpstreamError::DestinationDown {
                    target: t.to_string(),
                    retry_after,
                    trial_out: false,
                    endpoint: tries.last.as_ref().map(|(_, e)| *e),
                });
            }
        }
        match &tries.last {
            Some((last, endpoint)) => Err(UpstreamError::AllFailed {
                last: last.clone(),
                endpoint: *endpoint,
                tried: tries.tried.len(),
            }),
            // Only endpoints already tried came back: the pool has nothing new to offer.
            None => Err(UpstreamError::Exhausted {
                pool: routing.pool.clone().unwrap_or_else(|| self.pool.clone()),
                retry_after: None,
            }),
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
