//! One pool's series, resolved once so the lease path costs one atomic add.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::histogram::AtomicHistogram;
use super::labels::{
    reason_idx, state_idx, Direction, LeaseResult, ReportLabels, TransitionLabels, NO_REASON,
    N_BLAMES, N_REASONS, N_STATES, OUTCOMES,
};
use crate::health::blame::Blame;
use crate::health::{Reason, State};

pub(super) struct PoolHandles {
    pub(super) pool: String,
    pub(super) leases: [Counter; LeaseResult::ALL.len()],
    pub(super) report_success: Counter,
    pub(super) report_failure: [OnceLock<Counter>; N_REASONS],
    pub(super) transitions: Box<[OnceLock<Counter>]>,
    pub(super) probe: [AtomicHistogram; 2],
    pub(super) lease_wait: AtomicHistogram,
    pub(super) upstream: [Counter; 2],
    pub(super) failures: [Counter; N_BLAMES],
    pub(super) targets_dropped: Counter,
    pub(super) pace_hosts_dropped: Counter,
    pub(super) gateway_bytes: [Counter; 2],
    pub(super) reports: Family<ReportLabels, Counter>,
    pub(super) transitions_family: Family<TransitionLabels, Counter>,
}

/// One pool's pre-resolved series. Cloning is an `Arc` clone; every method is lock-free
/// except the first use of a (from, to, reason) or failure-reason series.
#[derive(Clone)]
pub struct PoolMetrics {
    pub(super) inner: Arc<PoolHandles>,
}

impl fmt::Debug for PoolMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolMetrics")
            .field("pool", &self.inner.pool)
            .finish()
    }
}

impl PoolMetrics {
    /// A lease request finished with `result` after `waited`.
    pub fn lease(&self, result: LeaseResult, waited: Duration) {
        self.inner.leases[result as usize].inc();
        self.inner.lease_wait.observe_duration(waited);
    }

    /// A success report.
    pub fn report_success(&self) {
        self.inner.report_success.inc();
    }

    /// A failure report with its reason.
    pub fn report_failure(&self, reason: Reason) {
        let h = &self.inner;
        h.report_failure[reason as usize]
            .get_or_init(|| {
                h.reports.get_or_create_owned(&ReportLabels {
                    pool: h.pool.clone(),
                    outcome: OUTCOMES[1],
                    reason: reason.as_str(),
                })
            })
            .inc();
    }

    /// A persisted state change.
    pub fn transition(&self, from: State, to: State, reason: Option<Reason>) {
        let h = &self.inner;
        let i = (state_idx(from) * N_STATES + state_idx(to)) * (N_REASONS + 1) + reason_idx(reason);
        h.transitions[i]
            .get_or_init(|| {
                h.transitions_family.get_or_create_owned(&TransitionLabels {
                    pool: h.pool.clone(),
                    from: from.as_str(),
                    to: to.as_str(),
                    reason: reason.map_or(NO_REASON, |r| r.as_str()),
                })
            })
            .inc();
    }

    /// A probe transaction finished.
    pub fn probe(&self, ok: bool, took: Duration) {
        self.inner.probe[usize::from(!ok)].observe_duration(took);
    }

    /// A gateway attempt through one of this pool's upstreams.
    pub fn upstream_attempt(&self, ok: bool) {
        self.inner.upstream[usize::from(!ok)].inc();
    }

    /// A failure, by whom it counted against.
    pub fn failure(&self, blame: Blame) {
        self.inner.failures[blame as usize].inc();
    }

    /// `n` more targets forgotten to stay within the cap.
    pub fn targets_dropped(&self, n: u64) {
        self.inner.targets_dropped.inc_by(n);
    }

    /// Bytes the gateway relayed through an endpoint of the pool, in one direction.
    pub fn gateway_bytes(&self, direction: Direction, n: u64) {
        self.inner.gateway_bytes[direction as usize].inc_by(n);
    }

    /// `n` more hosts' pacing forgotten to stay within the cap.
    pub fn pace_hosts_dropped(&self, n: u64) {
        self.inner.pace_hosts_dropped.inc_by(n);
    }
}
