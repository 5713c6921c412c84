//! A lease held for exactly as long as a client uses its upstream.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Waker};

use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::endpoint::{EndpointId, ProxyUrl};
use crate::metrics::PoolMetrics;
use crate::pool::engine::Engine;
use crate::pool::Outcome;

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
        }
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
