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
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::health::blame::Blame;
use crate::health::{Reason, State};

mod histogram;
pub use histogram::AtomicHistogram;

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

macro_rules! label_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident => $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* $variant),+ }
        impl $name {
            /// Every value, in declaration order (the order of the handle arrays).
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $s),+ }
            }
        }
    };
}

label_enum! {
    /// `result` of `proxypool_leases_total`.
    LeaseResult {
        /// An ordinary lease.
        Granted => "granted",
        /// The single recovery attempt.
        Trial => "trial",
        /// Nothing to lease (after any `wait`).
        Exhausted => "exhausted",
        /// Every endpoint that fits was used for the destination too recently (pacing,
        /// after its `wait`).
        Paced => "paced",
    }
}

label_enum! {
    /// `protocol` of `proxypool_gateway_requests_total`.
    GatewayProtocol {
        /// HTTP `CONNECT`.
        HttpConnect => "http_connect",
        /// HTTP absolute-form request.
        HttpForward => "http_forward",
        /// SOCKS5 `CONNECT`.
        Socks5 => "socks5",
    }
}

label_enum! {
    /// `outcome` of `proxypool_gateway_requests_total`.
    GatewayOutcome {
        /// Served through an upstream.
        Ok => "ok",
        /// Every upstream tried failed (502 / SOCKS5 error).
        UpstreamFailed => "upstream_failed",
        /// The destination is down: answered at once, nothing dialed (502 / SOCKS5 0x04).
        DestinationDown => "destination_down",
        /// The pool had nothing to lease (503).
        Exhausted => "exhausted",
        /// Every endpoint that fits was used for the destination too recently (503,
        /// `X-Proxypool-Error: paced`).
        Paced => "paced",
        /// Out of local resources: the gateway's descriptor budget, or this machine's
        /// descriptors, memory or ports (503; nothing reported).
        LocalResources => "local_resources",
        /// Wrong or missing gateway token (407).
        Denied => "denied",
        /// Malformed request or unknown routing key.
        BadRequest => "bad_request",
        /// The gateway itself failed (store error, unusable stored URL): 500.
        Internal => "internal",
    }
}

label_enum! {
    /// `direction` of `proxypool_gateway_bytes_total`.
    Direction {
        /// Bytes from the client sent on to the upstream.
        ToUpstream => "to_upstream",
        /// Bytes from the upstream sent back to the client.
        ToClient => "to_client",
    }
}

const OUTCOMES: [&str; 2] = ["success", "failure"];
const NO_REASON: &str = "none";
const N_STATES: usize = 4;
const N_REASONS: usize = 14;
// Keeps the index arithmetic honest if a state or reason is added.
const _: () = assert!(State::ALL.len() == N_STATES && Reason::ALL.len() == N_REASONS);

fn outcome(ok: bool) -> &'static str {
    OUTCOMES[usize::from(!ok)]
}

fn state_idx(s: State) -> usize {
    s as usize
}

fn reason_idx(r: Option<Reason>) -> usize {
    r.map_or(0, |r| r as usize + 1)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    pool: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReportLabels {
    pool: String,
    outcome: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BlameLabels {
    pool: String,
    blame: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransitionLabels {
    pool: String,
    from: &'static str,
    to: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    pool: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GatewayLabels {
    protocol: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolDirectionLabels {
    pool: String,
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConnectionLabels {
    connection: &'static str,
}

type HistFamily<L> = Family<L, AtomicHistogram, fn() -> AtomicHistogram>;

fn probe_hist() -> AtomicHistogram {
    AtomicHistogram::new(PROBE_BUCKETS)
}

fn lease_wait_hist() -> AtomicHistogram {
    AtomicHistogram::new(LEASE_WAIT_BUCKETS)
}

/// Per-pool gauge values, taken at scrape time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolGauges {
    /// Pool name (from the config).
    pub pool: String,
    /// Endpoints by state, in `State::ALL` order.
    pub endpoints: [u64; N_STATES],
    /// (endpoint, destination) pairs that are not available.
    pub destination_bans: u64,
    /// Targets that are down.
    pub targets_down: u64,
}

/// What the gauges show at one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GaugeSnapshot {
    /// One entry per configured pool.
    pub pools: Vec<PoolGauges>,
}

impl GaugeSnapshot {
    /// Aggregate per-endpoint states (`(pool index into names, state)`) into per-pool
    /// counts, for a caller that does not keep counts itself. Entries with an index out of
    /// range are ignored.
    pub fn count_states(
        names: &[String],
        states: impl IntoIterator<Item = (usize, State)>,
    ) -> Self {
        let mut pools: Vec<PoolGauges> = names
            .iter()
            .map(|n| PoolGauges {
                pool: n.clone(),
                ..PoolGauges::default()
            })
            .collect();
        for (p, s) in states {
            if let Some(g) = pools.get_mut(p) {
                g.endpoints[state_idx(s)] += 1;
            }
        }
        GaugeSnapshot { pools }
    }
}

/// The scrape-time callback. It runs on the scraping task: it must be quick and must not
/// hold a lock the lease path needs for longer than a copy of counts.
pub type GaugeSource = Box<dyn Fn() -> GaugeSnapshot + Send + Sync>;

#[derive(Clone, Default)]
struct Gauges {
    source: Arc<OnceLock<GaugeSource>>,
}

impl fmt::Debug for Gauges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gauges")
            .field("set", &self.source.get().is_some())
            .finish()
    }
}

impl Collector for Gauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let Some(source) = self.source.get() else {
            return Ok(());
        };
        // One snapshot feeds both families, so they agree with each other.
        let snap = source();
        {
            let mut m = encoder.encode_descriptor(
                "endpoints",
                "Endpoints by health state",
                None,
                MetricType::Gauge,
            )?;
            for p in &snap.pools {
                for (s, n) in State::ALL.iter().zip(p.endpoints) {
                    let labels = [("pool", p.pool.as_str()), ("state", s.as_str())];
                    m.encode_family(&labels)?.encode_gauge(&n)?;
                }
            }
        }
        let mut m = encoder.encode_descriptor(
            "destination_bans",
            "(endpoint, destination) pairs that are cooling, waiting for a trial or disabled",
            None,
            MetricType::Gauge,
        )?;
        for p in &snap.pools {
            m.encode_family(&[("pool", p.pool.as_str())])?
                .encode_gauge(&p.destination_bans)?;
        }
        let mut m = encoder.encode_descriptor(
            "targets_down",
            "Targets (host:port) that every endpoint tried failed to reach: down, with their own cooldown",
            None,
            MetricType::Gauge,
        )?;
        for p in &snap.pools {
            m.encode_family(&[("pool", p.pool.as_str())])?
                .encode_gauge(&p.targets_down)?;
        }
        Ok(())
    }
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
            store_commit: AtomicHistogram::new(COMMIT_BUCKETS),
            store_up: Gauge::default(),
            registry: Registry::default(),
        };
        // Counter names go in without `_total`: the encoder appends it.
        registry.register("leases", "Lease requests by result", m.leases.clone());
        registry.register(
            "reports",
            "Outcome reports by outcome and failure reason",
            m.reports.clone(),
        );
        registry.register(
            "transitions",
            "Health state transitions",
            m.transitions.clone(),
        );
        registry.register(
            "failures",
            "Failures (reports and probes) by whom they counted against: endpoint, pair, target or pending",
            m.failures.clone(),
        );
        registry.register(
            "targets_dropped",
            "Targets forgotten to keep the per-pool table within its cap",
            m.targets_dropped.clone(),
        );
        registry.register(
            "pace_hosts_dropped",
            "Hosts whose pacing state was forgotten to keep the per-pool table within its cap",
            m.pace_hosts_dropped.clone(),
        );
        registry.register(
            "probe_duration_seconds",
            "Duration of probe transactions",
            m.probe_duration.clone(),
        );
        registry.register(
            "lease_wait_seconds",
            "Time a lease request took to be answered, waiting included",
            m.lease_wait.clone(),
        );
        registry.register(
            "gateway_requests",
            "Gateway client requests by front protocol and outcome",
            m.gateway_requests.clone(),
        );
        registry.register(
            "gateway_upstream_attempts",
            "Gateway attempts through an upstream endpoint",
            m.upstream_attempts.clone(),
        );
        registry.register(
            "gateway_bytes",
            "Bytes relayed by the gateway",
            m.gateway_bytes.clone(),
        );
        registry.register(
            "gateway_upstream_connections",
            "Upstream connections used for absolute-form requests: new, or reused idle ones",
            m.gateway_connections.clone(),
        );
        registry.register(
            "gateway_idle_upstream_connections",
            "Upstream connections kept open for the next absolute-form request",
            m.gateway_idle.clone(),
        );
        registry.register(
            "store_commit_seconds",
            "Duration of store commits (one group of writes)",
            m.store_commit.clone(),
        );
        registry.register(
            "store_up",
            "1 while the store answers, 0 while it cannot be reached (PostgreSQL: leases go on, writes are refused)",
            m.store_up.clone(),
        );
        m.store_up.set(1);
        registry.register_collector(Box::new(m.gauges.clone()));
        Metrics { registry, ..m }
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
            }),
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

struct PoolHandles {
    pool: String,
    leases: [Counter; LeaseResult::ALL.len()],
    report_success: Counter,
    report_failure: [OnceLock<Counter>; N_REASONS],
    transitions: Box<[OnceLock<Counter>]>,
    probe: [AtomicHistogram; 2],
    lease_wait: AtomicHistogram,
    upstream: [Counter; 2],
    failures: [Counter; N_BLAMES],
    targets_dropped: Counter,
    pace_hosts_dropped: Counter,
    gateway_bytes: [Counter; 2],
    reports: Family<ReportLabels, Counter>,
    transitions_family: Family<TransitionLabels, Counter>,
}

/// One pool's pre-resolved series. Cloning is an `Arc` clone; every method is lock-free
/// except the first use of a (from, to, reason) or failure-reason series.
#[derive(Clone)]
pub struct PoolMetrics {
    inner: Arc<PoolHandles>,
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

const N_BLAMES: usize = Blame::ALL.len();

const N_PROTOCOLS: usize = GatewayProtocol::ALL.len();
const N_GATEWAY_OUTCOMES: usize = GatewayOutcome::ALL.len();

struct GatewayHandles {
    requests: [[Counter; N_GATEWAY_OUTCOMES]; N_PROTOCOLS],
    /// `new`, `reused`.
    connections: [Counter; 2],
    idle: Gauge,
}

/// The gateway's pre-resolved series.
#[derive(Clone)]
pub struct GatewayMetrics {
    inner: Arc<GatewayHandles>,
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

    /// Idle upstream connections kept went up (or down) by `delta`; several gateways add
    /// into one gauge.
    pub fn idle_upstream(&self, delta: i64) {
        self.inner.idle.inc_by(delta);
    }
}

#[cfg(test)]
mod tests;
