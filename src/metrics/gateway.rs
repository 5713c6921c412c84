//! The gateway's series, resolved once.

use std::fmt;
use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::labels::{GatewayOutcome, GatewayProtocol, PoolLabels};

pub(super) const N_PROTOCOLS: usize = GatewayProtocol::ALL.len();
pub(super) const N_GATEWAY_OUTCOMES: usize = GatewayOutcome::ALL.len();

pub(super) struct GatewayHandles {
    pub(super) requests: [[Counter; N_GATEWAY_OUTCOMES]; N_PROTOCOLS],
    /// `new`, `reused`.
    pub(super) connections: [Counter; 2],
    pub(super) idle: Gauge,
    /// Intercepted connections by pool (docs/intercept.md).
    pub(super) intercepted: Family<PoolLabels, Counter>,
    /// Leaf certificates held for intercepted hosts.
    pub(super) leaves: Gauge,
}

/// The gateway's pre-resolved series.
#[derive(Clone)]
pub struct GatewayMetrics {
    pub(super) inner: Arc<GatewayHandles>,
}

impl fmt::Debug for GatewayMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatewayMetrics").finish_non_exhaustive()
    }
}

impl GatewayMetrics {
    /// A client request finished.
    pub fn request(&self, protocol: GatewayProtocol, outcome: GatewayOutcome) {
        self.inner.requests[protocol as usize][outcome as usize].inc();
    }

    /// An absolute-form request went out on a new or a reused upstream connection.
    pub fn upstream_connection(&self, reused: bool) {
        self.inner.connections[usize::from(reused)].inc();
    }

    /// A client's TLS ended at the gateway, for a connection routed to `pool`.
    pub fn intercepted(&self, pool: &str) {
        self.inner
            .intercepted
            .get_or_create(&PoolLabels {
                pool: pool.to_string(),
            })
            .inc();
    }

    /// The leaf certificates cached for intercepted hosts, as counted now.
    pub fn leaf_certificates(&self, n: usize) {
        self.inner.leaves.set(n as i64);
    }

    /// Idle upstream connections kept went up (or down) by `delta`; several gateways add
    /// into one gauge.
    pub fn idle_upstream(&self, delta: i64) {
        self.inner.idle.inc_by(delta);
    }
}
