//! Prometheus metrics (docs/observability.md, "Metrics"), built on the `prometheus-client`
//! registry.
//!
//! Hot path: a family's `get_or_create` takes a read lock and hashes the label set, so
//! the engine never calls it per lease. [`Metrics::pool`] resolves a pool's series once
//! into a [`PoolMetrics`] of plain handles (a `Counter` is an `Arc<AtomicU64>` shared with
//! the registry); the lease path then costs one relaxed atomic add. Series whose label
//! space is larger (transitions, failure reasons) are resolved on first use into a
//! `OnceLock` slot and lock-free afterwards. Histograms are [`AtomicHistogram`]s: the
//! crate's own `Histogram` takes a mutex on every observation.
//!
//! Gauges that describe the whole pool (`proxypool_endpoints`, `proxypool_destination_bans`)
//! are not kept up to date by the hot path: a [`GaugeSource`] callback returns a
//! [`GaugeSnapshot`] at scrape time.
//!
//! Labels are bounded: pool names come from the config (never from a client's request),
//! the rest are closed enums. A URL, host, session or password is never a label.

use std::fmt;
use std::sync::{Arc, OnceLock};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::health::blame::Blame;

mod ban;
mod gateway;
mod gauges;
mod histogram;
mod labels;
mod pool;

pub use ban::BanRuleMetrics;
use ban::RuleLabels;
use gateway::GatewayHandles;
pub use gateway::GatewayMetrics;
use gauges::Gauges;
pub use gauges::{GaugeSnapshot, GaugeSource, PoolGauges};
pub use histogram::AtomicHistogram;
use labels::*;
pub use labels::{Direction, GatewayOutcome, GatewayProtocol, LeaseResult};
use pool::PoolHandles;
pub use pool::PoolMetrics;

/// `Content-Type` of [`Metrics::encode`]'s output (Prometheus text format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Probe transactions: a local destination answers in milliseconds, a slow proxy takes
/// seconds, and the probe timeout is usually 10-30 s.
pub const PROBE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0,
];
/// Lease waits: most leases answer at once (sub-millisecond); `wait` lets a scraper queue
/// for up to a cooldown, i.e. seconds to minutes.
pub const LEASE_WAIT_BUCKETS: &[f64] = &[
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0,
];
/// Store commits: an fsync-less WAL commit takes ~100 µs, a synchronous one milliseconds,
/// a stalled disk seconds.
pub const COMMIT_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0,
];

type HistFamily<L> = Family<L, AtomicHistogram, fn() -> AtomicHistogram>;

fn probe_hist() -> AtomicHistogram {
    AtomicHistogram::new(PROBE_BUCKETS)
}

fn lease_wait_hist() -> AtomicHistogram {
    AtomicHistogram::new(LEASE_WAIT_BUCKETS)
}

/// The process's registry and every family docs/observability.md, "Metrics", lists.
pub struct Metrics {
    registry: Registry,
    gauges: Gauges,
    leases: Family<LeaseLabels, Counter>,
    reports: Family<ReportLabels, Counter>,
    transitions: Family<TransitionLabels, Counter>,
    failures: Family<BlameLabels, Counter>,
    targets_dropped: Family<PoolLabels, Counter>,
    pace_hosts_dropped: Family<PoolLabels, Counter>,
    probe_duration: HistFamily<OutcomeLabels>,
    lease_wait: HistFamily<PoolLabels>,
    gateway_requests: Family<GatewayLabels, Counter>,
    upstream_attempts: Family<OutcomeLabels, Counter>,
    gateway_bytes: Family<PoolDirectionLabels, Counter>,
    gateway_connections: Family<ConnectionLabels, Counter>,
    gateway_idle: Gauge,
    gateway_intercepted: Family<PoolLabels, Counter>,
    gateway_leaves: Gauge,
    ban_rule_matches: Family<RuleLabels, Counter>,
    store_commit: AtomicHistogram,
    store_up: Gauge,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A registry with every family registered and no series yet.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("proxypool");
        let m = Metrics {
            gauges: Gauges::default(),
            leases: Family::default(),
            reports: Family::default(),
            transitions: Family::default(),
            failures: Family::default(),
            targets_dropped: Family::default(),
            pace_hosts_dropped: Family::default(),
            probe_duration: Family::new_with_constructor(probe_hist),
            lease_wait: Family::new_with_constructor(lease_wait_hist),
            gateway_requests: Family::default(),
            upstream_attempts: Family::default(),
            gateway_bytes: Family::default(),
            gateway_connections: Family::default(),
            gateway_idle: Gauge::default(),
            gateway_intercepted: Family::default(),
            gateway_leaves: Gauge::default(),
            ban_rule_matches: Family::default(),
            store_commit: AtomicHistogram::new(COMMIT_BUCKETS),
            store_up: Gauge::default(),
            registry: Registry::default(),
        };
        // Counter names go in without `_total`: the encoder appends it.
        m.register_pool_families(&mut registry);
        m.register_gateway_families(&mut registry);
        m.register_store_families(&mut registry);
        m.store_up.set(1);
        registry.register_collector(Box::new(m.gauges.clone()));
        Metrics { registry, ..m }
    }

    /// The pools' families: leases, reports, transitions, failures, probes.
    fn register_pool_families(&self, registry: &mut Registry) {
        registry.register("leases", "Lease requests by result", self.leases.clone());
        registry.register(
            "reports",
            "Outcome reports by outcome and failure reason",
            self.reports.clone(),
        );
        registry.register(
            "transitions",
            "Health state transitions",
            self.transitions.clone(),
        );
        registry.register(
            "failures",
            "Failures (reports and probes) by whom they counted against: endpoint, pair, target or pending",
            self.failures.clone(),
        );
        registry.register(
            "targets_dropped",
            "Targets forgotten to keep the per-pool table within its cap",
            self.targets_dropped.clone(),
        );
        registry.register(
            "pace_hosts_dropped",
            "Hosts whose pacing state was forgotten to keep the per-pool table within its cap",
            self.pace_hosts_dropped.clone(),
        );
        registry.register(
            "probe_duration_seconds",
            "Duration of probe transactions",
            self.probe_duration.clone(),
        );
        registry.register(
            "lease_wait_seconds",
            "Time a lease request took to be answered, waiting included",
            self.lease_wait.clone(),
        );
    }

    /// The gateways' families: requests, upstream attempts and connections, bytes,
    /// interception, ban rules.
    fn register_gateway_families(&self, registry: &mut Registry) {
        registry.register(
            "gateway_requests",
            "Gateway client requests by front protocol and outcome",
            self.gateway_requests.clone(),
        );
        registry.register(
            "gateway_upstream_attempts",
            "Gateway attempts through an upstream endpoint",
            self.upstream_attempts.clone(),
        );
        registry.register(
            "gateway_bytes",
            "Bytes relayed by the gateway",
            self.gateway_bytes.clone(),
        );
        registry.register(
            "gateway_upstream_connections",
            "Upstream connections used for absolute-form requests: new, or reused idle ones",
            self.gateway_connections.clone(),
        );
        registry.register(
            "gateway_idle_upstream_connections",
            "Upstream connections kept open for the next absolute-form request",
            self.gateway_idle.clone(),
        );
        registry.register(
            "gateway_intercepted",
            "Client connections whose TLS the gateway ended (intercept), by the pool they were routed to",
            self.gateway_intercepted.clone(),
        );
        registry.register(
            "gateway_leaf_certificates",
            "Leaf certificates held in memory for intercepted hosts",
            self.gateway_leaves.clone(),
        );
        registry.register(
            "ban_rule_matches",
            "Answers a [[ban]] rule matched (each reported as a ban of the endpoint for the host), by rule",
            self.ban_rule_matches.clone(),
        );
    }

    /// The store's families: commit times, and whether it answers.
    fn register_store_families(&self, registry: &mut Registry) {
        registry.register(
            "store_commit_seconds",
            "Duration of store commits (one group of writes)",
            self.store_commit.clone(),
        );
        registry.register(
            "store_up",
            "1 while the store answers, 0 while it cannot be reached (PostgreSQL: leases go on, writes are refused)",
            self.store_up.clone(),
        );
    }

    /// Whether the store answers (`proxypool_store_up`).
    pub fn set_store_up(&self, up: bool) {
        self.store_up.set(i64::from(up));
    }

    /// Set the scrape-time source of the gauges (once; later calls are ignored and return
    /// false). Until it is set the gauges are absent from the exposition.
    pub fn set_gauge_source(&self, source: GaugeSource) -> bool {
        self.gauges.source.set(source).is_ok()
    }

    /// Resolve a configured pool's series. Call once per pool and keep the result; the
    /// lease and report series start at 0 so `rate()` works from the first scrape.
    pub fn pool(&self, pool: &str) -> PoolMetrics {
        let lbl = |result: LeaseResult| LeaseLabels {
            pool: pool.to_string(),
            result: result.as_str(),
        };
        let outcome_lbl = |ok: bool| OutcomeLabels {
            pool: pool.to_string(),
            outcome: outcome(ok),
        };
        PoolMetrics {
            inner: Arc::new(PoolHandles {
                pool: pool.to_string(),
                leases: std::array::from_fn(|i| {
                    self.leases.get_or_create_owned(&lbl(LeaseResult::ALL[i]))
                }),
                report_success: self.reports.get_or_create_owned(&ReportLabels {
                    pool: pool.to_string(),
                    outcome: OUTCOMES[0],
                    reason: NO_REASON,
                }),
                report_failure: std::array::from_fn(|_| OnceLock::new()),
                transitions: (0..N_STATES * N_STATES * (N_REASONS + 1))
                    .map(|_| OnceLock::new())
                    .collect(),
                probe: [true, false]
                    .map(|ok| self.probe_duration.get_or_create_owned(&outcome_lbl(ok))),
                lease_wait: self.lease_wait.get_or_create_owned(&PoolLabels {
                    pool: pool.to_string(),
                }),
                upstream: [true, false]
                    .map(|ok| self.upstream_attempts.get_or_create_owned(&outcome_lbl(ok))),
                failures: std::array::from_fn(|i| {
                    self.failures.get_or_create_owned(&BlameLabels {
                        pool: pool.to_string(),
                        blame: Blame::ALL[i].as_str(),
                    })
                }),
                targets_dropped: self.targets_dropped.get_or_create_owned(&PoolLabels {
                    pool: pool.to_string(),
                }),
                pace_hosts_dropped: self.pace_hosts_dropped.get_or_create_owned(&PoolLabels {
                    pool: pool.to_string(),
                }),
                gateway_bytes: std::array::from_fn(|d| {
                    self.gateway_bytes
                        .get_or_create_owned(&PoolDirectionLabels {
                            pool: pool.to_string(),
                            direction: Direction::ALL[d].as_str(),
                        })
                }),
                reports: self.reports.clone(),
                transitions_family: self.transitions.clone(),
            }),
        }
    }

    /// The gateway's series (all created at 0).
    pub fn gateway(&self) -> GatewayMetrics {
        GatewayMetrics {
            inner: Arc::new(GatewayHandles {
                requests: std::array::from_fn(|p| {
                    std::array::from_fn(|o| {
                        self.gateway_requests.get_or_create_owned(&GatewayLabels {
                            protocol: GatewayProtocol::ALL[p].as_str(),
                            outcome: GatewayOutcome::ALL[o].as_str(),
                        })
                    })
                }),
                connections: ["new", "reused"].map(|c| {
                    self.gateway_connections
                        .get_or_create_owned(&ConnectionLabels { connection: c })
                }),
                idle: self.gateway_idle.clone(),
                intercepted: self.gateway_intercepted.clone(),
                leaves: self.gateway_leaves.clone(),
            }),
        }
    }

    /// The `[[ban]]` rules' series, in the order of `names`, created at 0.
    pub fn ban_rules<'a>(&self, names: impl Iterator<Item = &'a str>) -> BanRuleMetrics {
        BanRuleMetrics {
            counters: names
                .map(|rule| {
                    self.ban_rule_matches.get_or_create_owned(&RuleLabels {
                        rule: rule.to_string(),
                    })
                })
                .collect(),
        }
    }

    /// `proxypool_store_commit_seconds`; clone it into the store writer.
    pub fn store_commit(&self) -> AtomicHistogram {
        self.store_commit.clone()
    }

    /// The Prometheus text exposition of every family.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail; a collector error would leave a truncated but
        // well-formed prefix, which is better than no answer at all.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests;
