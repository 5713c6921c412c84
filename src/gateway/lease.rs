//! A lease held for exactly as long as a client uses its upstream.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Waker};

use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::dial::reply_header;
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::metrics::PoolMetrics;
use crate::pool::engine::Engine;
use crate::pool::{ExitSighting, Outcome};
use crate::probe::exit::{parse_address, ExitCheck};

/// Gives its lease back when dropped: reported with the recorded outcome, or released
/// without one. Dropping covers every way a use ends (done, error, client gone, shutdown).
pub(super) struct LeaseGuard {
    engine: Arc<Engine>,
    /// Where a dropped guard's give-back goes on when it must wait for a commit: a task
    /// the gateway waits for.
    tracker: TaskTracker,
    lease: Option<String>,
    endpoint: EndpointId,
    /// The pool that served it (the one asked for, or its fallback).
    pool: String,
    proxy: Arc<ProxyUrl>,
    outcome: Option<Outcome>,
    /// The series of the pool that served the lease (upstream attempts, bytes relayed).
    metrics: Option<PoolMetrics>,
    counted: bool,
    /// The lease is a trial (an endpoint's, a pair's or a target's).
    trial: bool,
    /// The header its pool's provider names exit addresses in, and the address known.
    exit: Option<ExitSighting>,
    /// An address an answer named was told to the pool.
    exit_told: AtomicBool,
}

impl LeaseGuard {
    pub(super) fn new(
        engine: Arc<Engine>,
        tracker: TaskTracker,
        lease: String,
        endpoint: EndpointId,
        pool: String,
        proxy: Arc<ProxyUrl>,
        metrics: Option<PoolMetrics>,
    ) -> Self {
        LeaseGuard {
            engine,
            tracker,
            lease: Some(lease),
            endpoint,
            pool,
            proxy,
            outcome: None,
            metrics,
            counted: false,
            trial: false,
            exit: None,
            exit_told: AtomicBool::new(false),
        }
    }

    /// Read exit addresses from answers through it (`[pool.exit] header`).
    pub(super) fn with_exit(mut self, exit: Option<ExitSighting>) -> Self {
        self.exit = exit;
        self
    }

    /// The upstream answered a CONNECT with `head`: its headers may name the exit address.
    /// Only this answer is read: it is the proxy's own, where a response from a site (which
    /// could name any address, and so merge or split identities for every site) is not.
    pub(super) fn saw_connect_reply(&self, head: &[u8]) {
        if let Some(v) = self
            .exit
            .as_ref()
            .and_then(|x| reply_header(head, &x.header))
        {
            self.saw_exit(v);
        }
    }

    /// A CONNECT answer named `value` in the pool's provider header (docs/exit.md): an address
    /// other than the one known when the lease was granted is told to the pool (which
    /// compares it with the one known now), once per lease: a proxy that names a new address
    /// on every answer costs a write per lease, not one per answer.
    fn saw_exit(&self, value: &[u8]) {
        let ExitCheck::Learned(ip) = parse_address(value) else {
            return;
        };
        let known = self.exit.as_ref().and_then(|x| x.known);
        if known == Some(ip) || self.exit_told.swap(true, Ordering::Relaxed) {
            return;
        }
        let (engine, id) = (self.engine.clone(), self.endpoint);
        self.tracker.spawn(async move {
            if let Err(e) = engine.exit_sighted(id, ip).await {
                debug!(endpoint = id, error = %e, "exit address from an answer not recorded");
            }
        });
    }

    /// Marked as a trial (the grant said so).
    pub(super) fn with_trial(mut self, trial: bool) -> Self {
        self.trial = trial;
        self
    }

    pub(super) fn trial(&self) -> bool {
        self.trial
    }

    pub(super) fn endpoint(&self) -> EndpointId {
        self.endpoint
    }

    pub(super) fn pool(&self) -> &str {
        &self.pool
    }

    pub(super) fn proxy(&self) -> &ProxyUrl {
        &self.proxy
    }

    /// The series of the pool that served it.
    pub(super) fn metrics(&self) -> Option<&PoolMetrics> {
        self.metrics.as_ref()
    }

    /// What to report when the use ends. The first outcome set is the attempt's, counted
    /// now (a tunnel's success when it is established, not hours later when it closes); a
    /// later one (a response body that breaks off) changes the report only.
    pub(super) fn set_outcome(&mut self, outcome: Outcome) {
        if !self.counted {
            self.counted = true;
            if let Some(m) = &self.metrics {
                m.upstream_attempt(matches!(outcome, Outcome::Success));
            }
        }
        self.outcome = Some(outcome);
    }

    /// A tunnel opened through the lease: the endpoint works and reaches the target
    /// (decided now, for the next lease to see), nothing is known of a ban inside. The
    /// lease is released when the tunnel ends, unless an outcome is set by then.
    pub(super) async fn reached(&mut self) {
        if !self.counted {
            self.counted = true;
            if let Some(m) = &self.metrics {
                m.upstream_attempt(true);
            }
        }
        if let Some(lease) = &self.lease {
            match self.engine.reached(lease).await {
                Ok(_) => {}
                Err(e) if e.is_store_unavailable() => {
                    debug!(endpoint = self.endpoint, error = %e, "gateway tunnel not recorded");
                }
                Err(e) => {
                    warn!(endpoint = self.endpoint, error = %e, "gateway could not record its tunnel")
                }
            }
        }
    }

    /// Report (or release) now and wait for it, so the next lease sees the result.
    pub(super) async fn finish(mut self) {
        if let Some(lease) = self.lease.take() {
            give_back(&self.engine, &lease, self.endpoint, self.outcome.take()).await;
        }
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        let engine = self.engine.clone();
        let (endpoint, outcome) = (self.endpoint, self.outcome.take());
        // Without a runtime the process is stopping, and then the lease dies with the
        // in-memory table anyway.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut back = Box::pin(async move {
            give_back(&engine, &lease, endpoint, outcome).await;
        });
        // Most give-backs are done in memory with nothing to wait for: done here, at once,
        // without a task per request (a spawn, and often a wake-up of another worker
        // thread). One that must wait for a commit cannot wait in a drop: it goes on in a
        // task of the gateway's tracker, so the gateway stops only after it. A future
        // polled once may be polled on by another task: it registers the waker of each
        // poll.
        let mut cx = Context::from_waker(Waker::noop());
        if back.as_mut().poll(&mut cx).is_pending() {
            self.tracker.spawn_on(back, &rt);
        }
    }
}

/// Give a lease back: report its outcome, or release it without one.
async fn give_back(engine: &Engine, lease: &str, endpoint: EndpointId, outcome: Option<Outcome>) {
    let r = match outcome {
        Some(o) => engine.report(lease, o).await.map(|state| {
            debug!(endpoint, %state, "gateway reported");
        }),
        None => engine.release(lease).await,
    };
    match r {
        Ok(()) => {}
        // The lease ended all the same; the outage itself is logged once (docs/fleet.md,
        // "Faults"), not once per request.
        Err(e) if e.is_store_unavailable() => {
            debug!(endpoint, error = %e, "gateway lease ended; its outcome was not recorded");
        }
        Err(e) => warn!(endpoint, error = %e, "gateway could not give its lease back"),
    }
}
