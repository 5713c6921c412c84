//! What the pools tell the outside about themselves: metric series (recorded lock-free,
//! one atomic add each, by the acts that happen under the pool lock anyway), per-endpoint
//! usage statistics, and the scrape-time gauge snapshot.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::{PoolError, Pools};
use crate::endpoint::EndpointId;
use crate::health::{Reason, State};
use crate::metrics::{GaugeSnapshot, LeaseResult, Metrics, PoolGauges, PoolMetrics};
use crate::protocol::Grant;
use crate::stats::EndpointStats;

/// One endpoint's statistics and what the status page shows next to them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EndpointUse {
    pub stats: EndpointStats,
    /// Live leases on it now.
    pub live_leases: u32,
    /// Time until its cooldown ends, when cooling.
    pub cooldown_left: Option<Duration>,
}

impl Pools {
    /// Record into `metrics` from now on: every pool's series are resolved here, in
    /// pool-index order, and pools created later resolve theirs when they appear.
    pub fn attach_metrics(&mut self, metrics: Arc<Metrics>) {
        for p in &mut self.pools {
            p.metrics = Some(metrics.pool(&p.cfg.name));
        }
        self.metrics = Some(metrics);
    }

    pub(super) fn pool_metrics(&self, pool: usize) -> Option<&PoolMetrics> {
        self.pools.get(pool).and_then(|p| p.metrics.as_ref())
    }

    /// A configured pool's series by name (None for an unknown name or metrics off).
    pub fn metrics_of(&self, pool: &str) -> Option<&PoolMetrics> {
        self.by_name.get(pool).and_then(|&p| self.pool_metrics(p))
    }

    /// Count a finished lease request. `last` is false for an exhausted attempt that will
    /// wait and try again (only the request's final answer counts). Unknown pools are not
    /// counted: their names come from clients and would make the label set unbounded.
    pub fn observe_lease(
        &mut self,
        pool: &str,
        result: &Result<Grant, PoolError>,
        waited: Duration,
        last: bool,
    ) {
        if let (Err(PoolError::Paced { .. }), true, Some(&p)) =
            (result, last, self.by_name.get(pool))
        {
            // For `status`, with or without metrics.
            self.pools[p].pace.count_refused();
        }
        let Some(m) = self.by_name.get(pool).and_then(|&p| self.pool_metrics(p)) else {
            return;
        };
        match result {
            Ok(g) if g.trial => m.lease(LeaseResult::Trial, waited),
            Ok(_) => m.lease(LeaseResult::Granted, waited),
            Err(PoolError::Exhausted { .. }) if last => m.lease(LeaseResult::Exhausted, waited),
            Err(PoolError::Paced { .. }) if last => m.lease(LeaseResult::Paced, waited),
            // An empty pool answers at once, whatever the request's `wait`.
            Err(PoolError::Empty { .. }) => m.lease(LeaseResult::Empty, waited),
            Err(_) => {}
        }
    }

    /// Bytes the gateway relayed through `id` (its statistics).
    pub fn record_bytes(&mut self, id: EndpointId, sent: u64, received: u64) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.stats.record_bytes(sent, received);
        }
    }

    /// A probe transaction of `id` took `took`: the duration histogram and, for a passed
    /// probe, the latency estimate. (Its success or failure is counted by `probe_result`.)
    pub fn observe_probe(&mut self, id: EndpointId, ok: bool, took: Duration) {
        let Some(e) = self.entries.get_mut(&id) else {
            return;
        };
        if ok {
            let old = e.stats.latency_ms;
            e.stats.observe_latency(took);
            // The pool median `fastest` gives the unmeasured follows every estimate.
            self.pools[e.pool].latencies.moved(old, e.stats.latency_ms);
        }
        if let Some(m) = self.pools[e.pool].metrics.as_ref() {
            m.probe(ok, took);
        }
    }

    /// Count an outcome (report or probe) in the endpoint's statistics and, for a
    /// report, in the pool's series.
    pub(super) fn count_outcome(
        &mut self,
        id: EndpointId,
        failure: Option<Option<Reason>>,
        took: Option<Duration>,
        wall: SystemTime,
        report: bool,
    ) {
        let Some(e) = self.entries.get_mut(&id) else {
            return;
        };
        let old = e.stats.latency_ms;
        match failure {
            None => e.stats.record_success(wall, took),
            Some(_) => e.stats.record_failure(),
        }
        self.pools[e.pool].latencies.moved(old, e.stats.latency_ms);
        if !report {
            return;
        }
        if let Some(m) = self.pools[e.pool].metrics.as_ref() {
            match failure {
                None => m.report_success(),
                Some(Some(r)) => m.report_failure(r),
                // A failure always carries a reason by the time it is counted.
                Some(None) => {}
            }
        }
    }

    /// A failure, by whom it counted against; and any targets dropped meanwhile.
    pub(super) fn count_blame(&mut self, pool: usize, blame: crate::health::blame::Blame) {
        let ps = &mut self.pools[pool];
        let dropped = ps.targets.dropped();
        if let Some(m) = ps.metrics.as_ref() {
            m.failure(blame);
            if dropped > ps.targets_dropped_seen {
                m.targets_dropped(dropped - ps.targets_dropped_seen);
            }
        }
        ps.targets_dropped_seen = dropped;
    }

    /// Hosts whose pacing was forgotten since last counted (after a use was recorded).
    pub(super) fn count_pace_dropped(&mut self, pool: usize) {
        let ps = &mut self.pools[pool];
        let dropped = ps.pace.dropped();
        if dropped > ps.pace_dropped_seen {
            if let Some(m) = ps.metrics.as_ref() {
                m.pace_hosts_dropped(dropped - ps.pace_dropped_seen);
            }
            ps.pace_dropped_seen = dropped;
        }
    }

    pub(super) fn count_transition(
        &self,
        pool: usize,
        from: State,
        to: State,
        reason: Option<Reason>,
    ) {
        if let Some(m) = self.pool_metrics(pool) {
            // Recovering is not "for" the reason the endpoint once cooled for.
            let reason = if to == State::Available { None } else { reason };
            m.transition(from, to, reason);
        }
    }

    /// An endpoint's statistics, live leases and cooldown left.
    pub fn endpoint_use(&self, id: EndpointId, now: Instant) -> Option<EndpointUse> {
        let e = self.entries.get(&id)?;
        Some(EndpointUse {
            stats: e.stats,
            live_leases: e.leases,
            cooldown_left: match (e.health.state, e.health.deadline) {
                (State::Cooling, Some(d)) => Some(d.saturating_duration_since(now)),
                _ => None,
            },
        })
    }

    /// (endpoint, destination) pairs of a pool that are not available (a counter the
    /// pool's destination view keeps, so a scrape never walks the pairs).
    pub fn destination_bans(&self, pool: usize) -> u64 {
        self.pools[pool].dests.banned() as u64
    }

    /// The gauges of every pool: a copy of counts kept up to date by the indexes, so the
    /// lock is held for a few words per pool, whatever the pool's size.
    pub fn gauges(&self) -> GaugeSnapshot {
        GaugeSnapshot {
            pools: self
                .pools
                .iter()
                .enumerate()
                .map(|(i, p)| PoolGauges {
                    pool: p.cfg.name.clone(),
                    endpoints: p.index.counts().in_order(),
                    destination_bans: self.destination_bans(i),
                    targets_down: p.targets.down_count() as u64,
                    suspect_subnets: p.dests.suspect_count() as u64,
                })
                .collect(),
        }
    }
}
