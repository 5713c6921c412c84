//! The rotating gateway (docs/gateway.md): one local port that speaks HTTP proxy (CONNECT
//! and absolute-form) and SOCKS5, leases an upstream per connection or request, dials first
//! and answers after, retries around dead upstreams and reports every outcome.
//!
//! Files. The fronts: `front` (the first byte decides), `http` (hyper's), `quick_connect`
//! (a CONNECT whose head came whole, without hyper), `socks5`, `target` (the destination
//! a client names, checked alike on every front), `routing` (username keys, token).
//! A request or tunnel: `tunnel` (CONNECT, lease to report), `relay` (its bytes),
//! `forward` (absolute-form requests), `outgoing` (a request as it goes upstream),
//! `headers` (what crosses in headers), `send` (one request on an upstream connection),
//! `deadline` (the response deadline), `plain` (plain HTTP through an HTTP upstream),
//! `driven` (an upstream HTTP/1.1 connection run by its request), `idle` (upstream
//! connections kept for the next request), `verdict` (what came back, judged and
//! reported), `screen` (the `[[ban]]` rules applied to an answer), `answer` (the gateway's
//! own HTTP answers and the `X-Proxypool-*` headers). The pool's side: `upstream` (the
//! attempt loop: lease, dial, report, try the next), `lease` (the guard that always gives
//! a lease back), `urls` (each leased URL parsed once), `counted` (bytes relayed, for
//! `/metrics` and the endpoint's statistics). Interception: `intercept` (HTTPS seen from
//! inside), `interception` (its leaves and TLS client), `secure` (one try of an
//! intercepted request), `origin` (TLS to the origin through an upstream). Bounds:
//! `limits` (deadlines and caps), `descriptors` (the descriptor budget).

mod answer;
mod counted;
mod deadline;
mod descriptors;
mod driven;
mod forward;
mod front;
mod headers;
mod http;
mod idle;
mod intercept;
mod interception;
mod lease;
mod limits;
mod origin;
mod outgoing;
mod plain;
mod quick_connect;
mod relay;
mod routing;
mod screen;
mod secure;
mod send;
mod socks5;
mod target;
mod tunnel;
mod upstream;
mod urls;
mod verdict;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::ban::BanRules;
use crate::config::GatewayConfig;
use crate::dial::Dialer;
use crate::metrics::{BanRuleMetrics, GatewayMetrics};
use crate::pool::engine::Engine;

pub use descriptors::Descriptors;
pub use idle::IdleLimits;
pub use limits::Limits;

/// A gateway that cannot start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The listen address could not be bound.
    #[error("gateway cannot listen on {addr}: {source}")]
    Bind {
        /// Address.
        addr: SocketAddr,
        /// OS error.
        source: std::io::Error,
    },
    /// The TLS client for https upstreams could not be built.
    #[error("gateway TLS setup: {0}")]
    Tls(#[from] crate::dial::TlsSetupError),
    /// The TLS client for intercepted origins could not be built (`[tls] extra_roots`).
    #[error(transparent)]
    Roots(#[from] crate::tls::RootsError),
    /// The TLS server intercepted clients meet could not be built.
    #[error("gateway TLS server setup: {0}")]
    Front(#[source] rustls::Error),
}

/// What a client connection holds while it is in use (a tunnel outlives its HTTP
/// connection task): one of the `max_connections` slots, and its descriptors of the budget.
type Slot = Arc<(OwnedSemaphorePermit, OwnedSemaphorePermit)>;

/// Refusals (`503` for want of descriptors) answered at once at most; beyond, a new
/// connection is closed without an answer.
const MAX_REFUSING: usize = 64;

/// What every connection of one gateway shares.
struct Shared {
    cfg: GatewayConfig,
    limits: Limits,
    upstream: upstream::Upstream,
    idle: Arc<idle::IdleConns>,
    plain: plain::PlainRoutes,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    metrics: GatewayMetrics,
    /// The `[[ban]]` rules every answer the gateway sees is judged by.
    bans: BanRules,
    ban_metrics: BanRuleMetrics,
    /// The hosts it sees inside of (docs/intercept.md), when `intercept` names any.
    intercept: Option<interception::Interception>,
}

impl Shared {
    /// Whether a CONNECT to `target` is intercepted: its TLS ends here.
    fn intercepts(&self, target: &target::Target) -> bool {
        let host = &target.dest.host;
        self.intercept.is_some()
            && self.cfg.intercepts(host, target.dest.port)
            // A name TLS cannot carry (a label that ends in `-`, say) could never verify:
            // it is tunnelled, not reported against every upstream as a certificate.
            && rustls::pki_types::ServerName::try_from(host.as_str()).is_ok()
    }
}

/// A bound gateway, ready to run.
pub struct Gateway {
    listener: TcpListener,
    cfg: GatewayConfig,
    limits: Limits,
    engine: Arc<Engine>,
    dialer: Dialer,
    fds: Descriptors,
    bans: BanRules,
    intercept: Option<interception::Interception>,
}

impl Gateway {
    /// Bind the listen address (so a taken port fails `serve` at start).
    pub async fn bind(cfg: GatewayConfig, engine: Arc<Engine>) -> Result<Gateway, GatewayError> {
        let listener =
            TcpListener::bind(cfg.listen)
                .await
                .map_err(|source| GatewayError::Bind {
                    addr: cfg.listen,
                    source,
                })?;
        // Accepted sockets inherit these on Linux (elsewhere `front::serve` sets them).
        front::client_options(&socket2::SockRef::from(&listener));
        let dialer = Dialer::new(crate::dial::connector(cfg.ca_file.as_deref())?);
        Ok(Gateway {
            listener,
            cfg,
            limits: Limits::default(),
            engine,
            dialer,
            fds: Descriptors::unlimited(),
            bans: BanRules::default(),
            intercept: None,
        })
    }

    /// Terminate the TLS of the hosts `intercept` names with leaves from `leaves`, and
    /// verify origins against the built-in roots and `extra_roots` (not the gateway's
    /// `insecure_origins`, which are logged here). Nothing to do when `intercept` is empty.
    pub fn with_interception(
        mut self,
        leaves: &Arc<crate::tls::Leaves>,
        extra_roots: Option<&std::path::Path>,
    ) -> Result<Gateway, GatewayError> {
        if self.cfg.intercept.is_empty() {
            return Ok(self);
        }
        let front = crate::tls::FrontTls::new(leaves.clone()).map_err(GatewayError::Front)?;
        let origin = crate::tls::origin_config(extra_roots, &self.cfg.insecure_origins)?;
        if !self.cfg.insecure_origins.is_empty() {
            warn!(
                gateway = %self.cfg.listen,
                hosts = %self.cfg.insecure_origins.entries().join(","),
                "insecure_origins: these origins' certificates are NOT verified"
            );
        }
        self.intercept = Some(interception::Interception::new(front, origin));
        Ok(self)
    }

    /// Hold client and idle upstream connections within `fds` (shared by the daemon's
    /// gateways).
    pub fn with_descriptors(mut self, fds: Descriptors) -> Gateway {
        self.fds = fds;
        self
    }

    /// Judge answers by `bans` (the config's `[[ban]]` rules).
    pub fn with_bans(mut self, bans: BanRules) -> Gateway {
        self.bans = bans;
        self
    }

    /// Replace the default limits.
    pub fn with_limits(mut self, limits: Limits) -> Gateway {
        self.limits = limits;
        self
    }

    /// The bound address (the port, when `listen` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or(self.cfg.listen)
    }

    /// Accept clients until `shutdown`; then close every connection and return once all
    /// their leases are given back.
    pub async fn run(self, shutdown: CancellationToken) {
        let addr = self.local_addr();
        let slots = Arc::new(Semaphore::new(self.cfg.max_connections));
        let metrics = self.engine.metrics().gateway();
        let ban_metrics = self.engine.metrics().ban_rules(self.bans.names());
        let tracker = TaskTracker::new();
        let shared = Arc::new(Shared {
            upstream: upstream::Upstream::new(self.engine, self.dialer, &self.cfg, tracker.clone()),
            idle: idle::IdleConns::new(
                self.limits.upstream_idle,
                metrics.clone(),
                self.fds.clone(),
            ),
            plain: plain::PlainRoutes::new(self.cfg.plain_http),
            metrics,
            bans: self.bans,
            ban_metrics,
            intercept: self.intercept.map(|i| i.with_descriptors(self.fds.clone())),
            cfg: self.cfg,
            limits: self.limits,
            tracker,
            shutdown: shutdown.clone(),
        });
        info!(%addr, pool = %shared.cfg.pool, auth = shared.cfg.token.is_some(), "gateway listening");
        let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
        let idle = shared.idle.clone();
        let sweeper = tokio::spawn({
            let stop = shutdown.clone();
            async move { idle.sweep_until(stop).await }
        });
        loop {
            let (stream, peer) = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = self.listener.accept() => match r {
                    Ok(v) => v,
                    Err(e) => {
                        // Out of file descriptors and the like: wait a little, keep serving.
                        warn!(error = %e, "gateway accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let Ok(permit) = slots.clone().try_acquire_owned() else {
                debug!(%peer, "gateway at max_connections; connection closed");
                continue;
            };
            let Some(fds) = self.fds.client() else {
                // Over the descriptor budget: the lease socket and the HTTP listener keep
                // theirs. The client hears why, if an answer can be spared.
                if let Ok(r) = refusing.clone().try_acquire_owned() {
                    let metrics = shared.metrics.clone();
                    tokio::spawn(async move {
                        front::refuse(stream, &metrics).await;
                        drop(r);
                    });
                }
                continue;
            };
            // A tunnel outlives its HTTP connection task: the slot goes with it.
            let slot = Arc::new((permit, fds));
            // Boxed: a client connection's state (hyper's connection among it) runs to
            // kilobytes, which the task's wrappers would otherwise copy at each move. It
            // ends itself when the gateway stops.
            let serve = Box::pin(front::serve(shared.clone(), stream, slot));
            shared.tracker.spawn(serve);
        }
        shared.tracker.close();
        shared.tracker.wait().await;
        let _ = sweeper.await;
        info!(%addr, "gateway stopped");
    }
}
