//! The in-memory pools: health of every endpoint, selection, leases and trial admission.
//!
//! `Pools` is synchronous and does no I/O: every operation returns the [`Write`]s that
//! must be made durable before its caller is answered. [`engine::Engine`] wraps it in a
//! mutex and a group-committing store writer for the daemon and the CLI.

mod apply;
mod burst;
#[cfg(test)]
mod commit_failure_tests;
pub mod destinations;
pub mod engine;
mod entries;
mod evidence;
mod fleet;
mod id_index;
mod leases;
mod pace;
mod probes;
mod ready;
mod reconfigure;
mod reports;
pub(crate) mod scoped;
mod select;
mod sessions;
mod strategy;
mod tag_index;
pub(crate) mod targets;
mod telemetry;

pub use leases::{SCOPE_DESTINATION, SCOPE_TARGET};
pub use probes::ProbeRole;
pub use scoped::{ReportOn, Reported, Want};

use destinations::Destinations;
use entries::{Entry, EntryMap};
use leases::Lease;
use pace::Pace;
use ready::Ready;
pub use reconfigure::ReconfigureError;
use strategy::Latencies;
use tag_index::TagIndex;
use targets::Targets;
pub use telemetry::EndpointUse;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use rustc_hash::FxHashMap;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::config::PoolConfig;
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::health::{Failure, Health, State};
use crate::store::EndpointRow;

/// Errors of pool operations, each mapping to a protocol error code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PoolError {
    /// No such pool.
    #[error("unknown pool {0:?}")]
    UnknownPool(String),
    /// Endpoints exist, none can be leased now.
    #[error("pool {pool:?} has no {}endpoint available{}", filter.as_ref().map(|f| format!("{f} ")).unwrap_or_default(), retry_after.map(|d| format!(" (the soonest cooldown ends in {})", wait_text(d))).unwrap_or_else(|| " (none is cooling: every one is leased, on trial or disabled)".into()))]
    Exhausted {
        pool: String,
        /// Time until the soonest cooldown deadline (of an endpoint that fits the lease).
        retry_after: Option<Duration>,
        /// The schemes the lease asked for, as written (`socks5 or http`).
        filter: Option<String>,
    },
    /// The pool has no endpoint at all, or none of the schemes the lease asked for:
    /// nothing comes by waiting.
    #[error("{}", match filter {
        None => format!("pool {pool:?} has no endpoints: add some with `proxypool add URL --pool {pool}` (or [[endpoint]] entries in the config)"),
        Some(f) => format!("pool {pool:?} has no {f} endpoint at all: the lease asks only for schemes {f}"),
    })]
    Empty {
        pool: String,
        /// The schemes the lease asked for, when that is why.
        filter: Option<String>,
    },
    /// The target is down: nothing is dialed until its trial.
    #[error("destination {target:?} is down (every endpoint of pool {pool:?} that tried it failed to reach it); next trial in {} ms", retry_after.as_millis())]
    DestinationDown {
        pool: String,
        target: String,
        /// Time until its trial.
        retry_after: Duration,
    },
    /// The lease id is not known.
    #[error("unknown lease {0:?}")]
    UnknownLease(String),
    /// The lease existed but expired.
    #[error("lease {0:?} expired")]
    LeaseExpired(String),
    /// The lease was reported or released already: a lease takes one.
    #[error("lease {lease:?} was already {how}: a lease takes one report or release")]
    LeaseEnded { lease: String, how: Ended },
    /// No such endpoint.
    #[error("no endpoint with id {0}")]
    UnknownEndpoint(EndpointId),
    /// A lease lifetime the clock cannot represent.
    #[error("ttl {0:?} is too long")]
    InvalidTtl(Duration),
    /// A failure report without a reason.
    #[error("a failure report needs a reason (one of: {})", crate::health::Reason::ALL.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(", "))]
    MissingReason,
    /// A report by session named a session with no endpoint bound to it.
    #[error("no endpoint is bound to session {session:?} in pool {pool:?} (it was never leased, or a failure unbound it)")]
    UnknownSession { pool: String, session: String },
    /// A trial's result after its claim lapsed and the trial was claimed again (by
    /// another daemon of the fleet): it changed nothing.
    #[error(
        "stale claim: the trial of {0} lapsed and was claimed again; this result changed nothing"
    )]
    StaleClaim(String),
    /// Every endpoint that fits was used for the host too recently (docs/selection.md,
    /// "Pacing").
    #[error("pool {pool:?}: every endpoint that fits was used for {host:?} too recently (pacing){}", retry_after.map(|d| format!("; the soonest is ready in {} ms", d.as_millis())).unwrap_or_else(|| "; one is ready when a lease for it ends".into()))]
    Paced {
        pool: String,
        host: String,
        /// Time until the soonest pair passed over is ready (`None`: when a lease ends).
        retry_after: Option<Duration>,
        /// `[pool.pace] wait`: how long a request that says no `wait` waits.
        wait: Duration,
    },
    /// A lease named a tag key no endpoint carries.
    #[error("unknown tag key {key:?} (keys in use: {})", if known.is_empty() { "none".to_string() } else { known.join(", ") })]
    UnknownTag { key: String, known: Vec<String> },
}

/// A wait as a message says it: `450ms`, else whole seconds rounded up (`2s`, `1m 5s`).
fn wait_text(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        return format!("{}ms", d.as_millis());
    }
    let secs = d.as_millis().div_ceil(1000) as u64;
    humantime::format_duration(Duration::from_secs(secs)).to_string()
}

/// A granted lease.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Grant {
    /// Lease id.
    pub lease: String,
    /// Full proxy URL with credentials.
    pub proxy: Arc<str>,
    /// Endpoint id.
    pub endpoint: EndpointId,
    /// This lease is the single recovery attempt.
    pub trial: bool,
    /// Time to live.
    pub expires_in_ms: u64,
    /// `"destination"` when the trial is a pair's, `"target"` when it is a down target's;
    /// absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The pool the endpoint came from: the one asked for, or its `fallback`.
    #[serde(default)]
    pub pool: String,
}

/// Counts of a pool for `status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct PoolStatus {
    pub pool: String,
    pub mode: String,
    /// Endpoints available.
    pub available: usize,
    /// Endpoints cooling.
    pub cooling: usize,
    /// Endpoints waiting for their single attempt.
    pub probe_allowed: usize,
    /// Endpoints disabled.
    pub disabled: usize,
    /// Live leases.
    pub leases: usize,
    /// Time until the soonest cooldown ends.
    pub next_deadline_ms: Option<u64>,
    /// Targets that are down (docs/blame.md).
    #[serde(default)]
    pub targets_down: usize,
    /// The down targets, soonest trial first (at most 50).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub down_targets: Vec<DownTargetView>,
    /// The pool's pacing state, when it paces (docs/selection.md, "Pacing").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pace: Option<PaceStatus>,
}

/// What a pool's pacing holds, as `status` shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PaceStatus {
    /// Hosts with some (endpoint, host) pair held.
    pub hosts: usize,
    /// (endpoint, host) pairs held.
    pub pairs: usize,
    /// Hosts forgotten to stay within the bounds (least recently used first), ever.
    pub hosts_dropped: u64,
    /// Lease requests answered `paced`, ever (the final answer of each, after its wait).
    pub paced: u64,
}

/// A down target as `status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct DownTargetView {
    pub target: String,
    /// Time until its trial (0: due, or out).
    pub retry_after_ms: u64,
    /// Failed trials in a row, the failures that made it down counted as one.
    pub streak: u32,
    pub reason: Option<crate::health::Reason>,
    /// How long it has been down.
    pub down_for_ms: u64,
}

/// Down targets listed per pool in `status` at most.
const DOWN_TARGETS_SHOWN: usize = 50;

/// What a report did.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The use worked.
    Success,
    /// The use failed.
    Failure(Failure),
}

impl Outcome {
    /// A failure must say why: its reason picks the cooldown and whether the endpoint or
    /// the pair takes it.
    fn check_reason(&self) -> Result<(), PoolError> {
        match self {
            Outcome::Failure(f) if f.reason.is_none() => Err(PoolError::MissingReason),
            _ => Ok(()),
        }
    }
}

struct PoolState {
    cfg: PoolConfig,
    /// Available endpoints, by live leases, round robin within a count.
    ready: Ready,
    /// Cooling endpoints by deadline.
    cooling: BTreeSet<(Instant, EndpointId)>,
    /// Unclaimed `probe_allowed` endpoints in arrival order.
    trials: BTreeSet<(u64, EndpointId)>,
    counts: [usize; 4],
    leases: usize,
    /// Pre-resolved metric series (None when metrics are off).
    metrics: Option<crate::metrics::PoolMetrics>,
    /// Per-destination health (docs/destinations.md).
    dests: Destinations,
    /// What is known of each target (docs/blame.md).
    targets: Targets,
    /// `targets.dropped()` as last counted in the metric.
    targets_dropped_seen: u64,
    /// The target of `[pool.probe] url` (`host:port`).
    probe_target: Option<Box<str>>,
    /// The endpoint whose probe is the probe target's single trial now.
    probe_trial: Option<EndpointId>,
    /// Trials other daemons hold, by when their claims lapse (docs/fleet.md).
    remote: BTreeSet<(Instant, EndpointId)>,
    /// Uses of each endpoint for each host (docs/selection.md, "Pacing").
    pace: Pace,
    /// `pace.dropped()` as last counted in the metric.
    pace_dropped_seen: u64,
    /// The latency estimates of its endpoints (the median `fastest` gives the unmeasured).
    latencies: Latencies,
}

/// All pools of a process.
pub struct Pools {
    pools: Vec<PoolState>,
    by_name: HashMap<String, usize>,
    entries: EntryMap,
    leases: FxHashMap<u64, Lease>,
    lease_expiry: BTreeSet<(Instant, u64)>,
    /// How the leases that ended lately ended, so that a second report says so.
    ended: FxHashMap<u64, Ended>,
    ended_order: VecDeque<u64>,
    /// The log-line budget of state changes.
    burst: burst::Burst,
    sessions: sessions::Sessions,
    /// Ids removed in this process. Ids are never reused, so a row that arrives after its
    /// removal (an `add` racing a `remove`) is stale and must not come back to life.
    removed: std::collections::HashSet<EndpointId>,
    next_lease: u64,
    /// Source of ready-queue generations, unique for the life of the process.
    gen: u64,
    lease_prefix: String,
    seq: u64,
    rng: fastrand::Rng,
    /// Where new pools resolve their series (see `attach_metrics`).
    metrics: Option<Arc<crate::metrics::Metrics>>,
    /// The store cannot be written (docs/fleet.md, "Faults"): no transition comes due and
    /// no trial is admitted until it is back; ordinary leases go on.
    frozen: bool,
    /// Endpoint tags, interned.
    tags: TagIndex,
    /// Bumped whenever an endpoint may have become a candidate it was not before (it
    /// became available, got new tags, came under its lease cap): a remembered "nothing
    /// ready" for a host holds only within one epoch.
    epoch: u64,
    /// Where per-entry times (`Entry::up_since`) count from.
    origin: Instant,
}

/// Ended leases remembered at most.
const ENDED_MEMORY: usize = 65_536;

/// How a lease ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Expired,
    Reported,
    Released,
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Ended::Expired => "expired",
            Ended::Reported => "reported",
            Ended::Released => "released",
        })
    }
}

fn state_idx(s: State) -> usize {
    match s {
        State::Available => 0,
        State::Cooling => 1,
        State::ProbeAllowed => 2,
        State::Disabled => 3,
    }
}

impl Pools {
    /// Pools from their configs (the `default` pool should be among them).
    pub fn new(configs: impl IntoIterator<Item = PoolConfig>) -> Pools {
        let mut p = Pools {
            pools: Vec::new(),
            by_name: HashMap::new(),
            entries: EntryMap::default(),
            leases: FxHashMap::default(),
            lease_expiry: BTreeSet::new(),
            ended: FxHashMap::default(),
            ended_order: VecDeque::new(),
            burst: burst::Burst::new(burst::LINES_PER_SECOND),
            sessions: sessions::Sessions::new(),
            removed: std::collections::HashSet::new(),
            next_lease: 0,
            gen: 0,
            lease_prefix: format!("{:08x}", fastrand::u32(..)),
            seq: 0,
            rng: fastrand::Rng::new(),
            metrics: None,
            frozen: false,
            tags: TagIndex::default(),
            epoch: 0,
            origin: Instant::now(),
        };
        for c in configs {
            p.ensure_pool(c);
        }
        p
    }

    /// Use a fixed jitter seed (tests).
    pub fn seed(&mut self, seed: u64) {
        self.rng = fastrand::Rng::with_seed(seed);
    }

    fn ensure_pool(&mut self, cfg: PoolConfig) -> usize {
        if let Some(&i) = self.by_name.get(&cfg.name) {
            let ps = &mut self.pools[i];
            ps.targets.set_rules(cfg.blame.clone());
            ps.probe_target = probes::probe_target(cfg.probe.url.as_deref());
            ps.pace.set_config(cfg.pace.clone());
            ps.cfg = cfg;
            // New caps, rules or strategies: what was remembered as nothing ready is stale.
            self.epoch += 1;
            return i;
        }
        let i = self.pools.len();
        let name = cfg.name.clone();
        let rules = cfg.blame.clone();
        let probe_target = probes::probe_target(cfg.probe.url.as_deref());
        let pace = Pace::new(
            cfg.pace.clone(),
            pace::DEFAULT_MAX_HOSTS,
            pace::DEFAULT_MAX_PAIRS,
            self.origin,
        );
        self.by_name.insert(cfg.name.clone(), i);
        self.pools.push(PoolState {
            cfg,
            ready: Ready::default(),
            cooling: BTreeSet::new(),
            trials: BTreeSet::new(),
            counts: [0; 4],
            leases: 0,
            metrics: None,
            dests: Destinations::new(&name, destinations::DEFAULT_MAX_PAIRS),
            targets: Targets::new(rules, targets::DEFAULT_MAX_TARGETS),
            targets_dropped_seen: 0,
            probe_target,
            probe_trial: None,
            remote: BTreeSet::new(),
            pace,
            pace_dropped_seen: 0,
            latencies: Latencies::default(),
        });
        if let Some(m) = &self.metrics {
            self.pools[i].metrics = Some(m.pool(&self.pools[i].cfg.name));
        }
        i
    }

    /// Config of a pool.
    pub fn pool_config(&self, name: &str) -> Option<&PoolConfig> {
        self.by_name.get(name).map(|&i| &self.pools[i].cfg)
    }

    /// Names of all pools.
    pub fn pool_names(&self) -> Vec<String> {
        (0..self.pools.len())
            .filter(|&i| self.is_current(i))
            .map(|i| self.pools[i].cfg.name.clone())
            .collect()
    }

    /// Number of endpoints held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no endpoint is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Load a stored endpoint: a cooling deadline is what the store read as left of it
    /// (`clamp(cooldown_until − its now, 0, cooldown_ms)`) after `now`; a trial another
    /// daemon holds stays theirs until its claim lapses.
    pub fn insert_row(&mut self, row: &EndpointRow, now: Instant) {
        if self.removed.contains(&row.id) {
            return;
        }
        let pool = match self.by_name.get(&row.pool) {
            Some(&i) => i,
            None => self.ensure_pool(PoolConfig::builtin(&row.pool)),
        };
        let mut health = Health::new(row.state);
        health.streak = row.streak;
        health.reason_streak = row.reason_streak;
        health.reason = row.reason;
        health.phase = row.phase;
        health.detail = row.detail.clone();
        health.restore_cooldown(row.cooldown_ms, row.cooldown_left, now);
        // A reloaded row (config sync, sources) keeps what the daemon saw it do.
        let (stats, up_since) = self
            .entries
            .get(&row.id)
            .map(|e| (e.stats, e.up_since))
            .unwrap_or_else(|| (Default::default(), self.ms(now)));
        self.remove_entry(row.id);
        let tags = self.tags.intern(&row.tags);
        self.pools[pool].latencies.moved(None, stats.latency_ms);
        self.entries.insert(
            row.id,
            Entry {
                url: row.url.clone(),
                secret: row.url.to_secret_string().into(),
                pool,
                health,
                leases: 0,
                gen: 0,
                pa_seq: 0,
                claim: None,
                stats,
                tags,
                up_since,
            },
        );
        self.epoch += 1;
        self.index(row.id);
        self.claimed_elsewhere(row, now);
    }

    /// Milliseconds since the pools' origin.
    pub(super) fn ms(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.origin).as_millis() as u64
    }

    /// New tags of a held endpoint (after `edit`).
    pub fn update_tags(&mut self, id: EndpointId, tags: &crate::tags::Tags) {
        let ids = self.tags.intern(tags);
        if let Some(e) = self.entries.get_mut(&id) {
            let old = std::mem::replace(&mut e.tags, ids);
            self.tags.release(&old);
            self.epoch += 1;
        } else {
            self.tags.release(&ids);
        }
    }

    /// The pacing state `pool` holds: (hosts, pairs) (docs/selection.md, "Memory and
    /// speed").
    pub fn pace_held(&self, pool: &str) -> Option<(usize, usize)> {
        let ps = &self.pools[*self.by_name.get(pool)?];
        Some((ps.pace.hosts(), ps.pace.pairs()))
    }

    /// The pool `pool` falls back to, if it names one.
    pub fn fallback(&self, pool: &str) -> Option<String> {
        let &p = self.by_name.get(pool)?;
        self.pools[p].cfg.fallback.clone()
    }

    /// The tag keys some endpoint carries (what a gateway username may name).
    pub fn tag_keys(&self) -> Arc<std::collections::BTreeSet<String>> {
        self.tags.known()
    }

    /// Make memory match the store for one endpoint after a failed commit: the stored row
    /// wins (or its absence), and so do its stored (endpoint, destination) pairs: a ban
    /// whose commit failed is not kept in memory, one that is stored comes back. Its
    /// leases go too: they may stem from a grant that failed.
    pub fn restore_row(
        &mut self,
        id: EndpointId,
        row: Option<&EndpointRow>,
        pairs: &[crate::store::pairs::PairRow],
        now: Instant,
    ) {
        if let Some(e) = self.entries.get(&id) {
            self.pools[e.pool].dests.remove_endpoint(id);
        }
        self.remove_entry(id);
        if let Some(r) = row {
            self.removed.remove(&id);
            self.insert_row(r, now);
            for pair in pairs {
                self.restore_pair(pair, now);
            }
        }
    }

    /// Forget a deleted endpoint and refuse any later row with its id.
    pub fn remove_for_good(&mut self, id: EndpointId) -> bool {
        self.removed.insert(id);
        if let Some(e) = self.entries.get(&id) {
            // The store cascades the pair rows with the endpoint's.
            self.pools[e.pool].dests.remove_endpoint(id);
            self.pools[e.pool].targets.remove_endpoint(id);
            self.pools[e.pool].pace.remove_endpoint(id);
        }
        self.remove_entry(id)
    }

    /// Forget an endpoint (after `remove`), with its leases.
    pub fn remove_entry(&mut self, id: EndpointId) -> bool {
        if !self.entries.contains_key(&id) {
            return false;
        }
        self.unindex(id);
        let lease_ids: Vec<u64> = self
            .leases
            .iter()
            .filter(|(_, l)| l.endpoint == id)
            .map(|(k, _)| *k)
            .collect();
        for k in lease_ids {
            if let Some(l) = self.leases.remove(&k) {
                self.lease_expiry.remove(&(l.expires, k));
                let p = self.entries[&id].pool;
                self.pools[p].leases -= 1;
                if let Some(r) = l.paced {
                    self.pools[p].pace.forget_lease(r, id);
                }
            }
        }
        self.sessions.forget_endpoint(id);
        if let Some(e) = self.entries.remove(&id) {
            self.tags.release(&e.tags);
            self.pools[e.pool].latencies.moved(e.stats.latency_ms, None);
        }
        true
    }

    /// Update the URL (password, label changes) of a held endpoint.
    pub fn update_url(&mut self, id: EndpointId, url: ProxyUrl) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.secret = url.to_secret_string().into();
            e.url = url;
        }
    }

    /// Current health of an endpoint.
    pub fn health(&self, id: EndpointId) -> Option<&Health> {
        self.entries.get(&id).map(|e| &e.health)
    }

    /// Pool name of an endpoint.
    pub fn pool_of(&self, id: EndpointId) -> Option<&str> {
        self.entries
            .get(&id)
            .map(|e| self.pools[e.pool].cfg.name.as_str())
    }

    /// URL of an endpoint.
    pub fn url(&self, id: EndpointId) -> Option<&ProxyUrl> {
        self.entries.get(&id).map(|e| &e.url)
    }

    fn unindex(&mut self, id: EndpointId) {
        let Some(e) = self.entries.get_mut(&id) else {
            return;
        };
        let p = &mut self.pools[e.pool];
        p.counts[state_idx(e.health.state)] -= 1;
        match e.health.state {
            State::Available => {
                p.ready.forget(e.leases);
                self.gen += 1;
                e.gen = self.gen;
            }
            State::Cooling => {
                if let Some(d) = e.health.deadline {
                    p.cooling.remove(&(d, id));
                }
            }
            State::ProbeAllowed => {
                p.trials.remove(&(e.pa_seq, id));
                p.remote.retain(|&(_, r)| r != id);
            }
            State::Disabled => {}
        }
    }

    fn index(&mut self, id: EndpointId) {
        self.seq += 1;
        let seq = self.seq;
        let Some(slot) = self.entries.slot(&id) else {
            return;
        };
        let Some((_, e)) = self.entries.at_mut(slot) else {
            return;
        };
        let p = &mut self.pools[e.pool];
        p.counts[state_idx(e.health.state)] += 1;
        match e.health.state {
            State::Available => {
                self.gen += 1;
                e.gen = self.gen;
                p.ready.push(e.leases, slot, e.gen);
                let (pool, level) = (e.pool, e.leases);
                self.compact_ready(pool, level);
            }
            State::Cooling => {
                let d = e.health.deadline.unwrap_or_else(Instant::now);
                e.health.deadline = Some(d);
                p.cooling.insert((d, id));
            }
            State::ProbeAllowed => {
                if !e.health.claimed {
                    e.pa_seq = seq;
                    p.trials.insert((seq, id));
                }
            }
            State::Disabled => {}
        }
    }

    /// Available endpoints of a pool (for periodic checks), in id order.
    pub fn available_ids(&self, pool: &str) -> Vec<EndpointId> {
        let Some(&p) = self.by_name.get(pool) else {
            return Vec::new();
        };
        let mut v: Vec<EndpointId> = self
            .entries
            .iter()
            .filter(|(_, e)| e.pool == p && e.health.state == State::Available)
            .map(|(id, _)| *id)
            .collect();
        v.sort_unstable();
        v
    }

    /// The soonest moment something is due (a cooldown deadline, a lease expiry, a held
    /// log summary).
    pub fn next_due(&self) -> Option<Instant> {
        let lease = self.lease_expiry.first().map(|(d, _)| *d);
        if self.frozen {
            // Nothing persisted comes due while the store is away.
            return lease;
        }
        let cool = self
            .pools
            .iter()
            .filter_map(|p| {
                let c = p.cooling.first().map(|(d, _)| *d);
                let r = p.remote.first().map(|(d, _)| *d);
                match (c, r) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            })
            .min();
        let pairs = self.pools.iter().filter_map(|p| p.dests.next_due()).min();
        let cool = match (cool, pairs) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // A held summary of state-change lines is written when its second is over.
        [cool, lease, self.burst.due()].into_iter().flatten().min()
    }

    /// Whether every endpoint of a pool is cooling or disabled: nothing is available and
    /// nothing awaits its recovery attempt. A configured pool with no endpoint at all
    /// (e.g. a sniffing pool whose startup sniff failed) is exhausted too.
    pub fn exhausted(&self, pool: &str) -> bool {
        let Some(&p) = self.by_name.get(pool) else {
            return false;
        };
        let c = &self.pools[p].counts;
        c[0] == 0 && c[2] == 0
    }

    /// What a start-up restored, as one log line: counts by state, the cooldowns that
    /// ended while the daemon was stopped (they end on the first tick) and the pairs.
    pub fn log_restored(&self, now: Instant) {
        let sum = |i: usize| self.pools.iter().map(|p| p.counts[i]).sum::<usize>();
        let overdue: usize = self
            .pools
            .iter()
            .map(|p| p.cooling.iter().take_while(|(d, _)| *d <= now).count())
            .sum();
        let pairs: usize = self.pools.iter().map(|p| p.dests.len()).sum();
        tracing::info!(
            endpoints = self.entries.len(),
            available = sum(0),
            cooling = sum(1),
            cooldown_ended_while_stopped = overdue,
            probe_allowed = sum(2),
            disabled = sum(3),
            pairs,
            "restored from the store"
        );
    }

    /// Counts by state for one or every pool.
    pub fn status(&self, pool: Option<&str>, now: Instant) -> Result<Vec<PoolStatus>, PoolError> {
        let idx: Vec<usize> = match pool {
            Some(name) => vec![*self
                .by_name
                .get(name)
                .ok_or_else(|| PoolError::UnknownPool(name.to_string()))?],
            None => (0..self.pools.len())
                .filter(|&i| self.is_current(i))
                .collect(),
        };
        Ok(idx
            .into_iter()
            .map(|i| {
                let p = &self.pools[i];
                PoolStatus {
                    pool: p.cfg.name.clone(),
                    mode: p.cfg.mode.to_string(),
                    available: p.counts[0],
                    cooling: p.counts[1],
                    probe_allowed: p.counts[2],
                    disabled: p.counts[3],
                    leases: p.leases,
                    next_deadline_ms: p
                        .cooling
                        .first()
                        .map(|(d, _)| d.saturating_duration_since(now).as_millis() as u64),
                    targets_down: p.targets.down_count(),
                    down_targets: p
                        .targets
                        .down_list(now, DOWN_TARGETS_SHOWN)
                        .into_iter()
                        .map(|t| DownTargetView {
                            retry_after_ms: t.retry_after.as_millis() as u64,
                            down_for_ms: t.down_for.as_millis() as u64,
                            target: t.target,
                            streak: t.streak,
                            reason: t.reason,
                        })
                        .collect(),
                    pace: p.pace.status(),
                }
            })
            .collect())
    }

    /// Endpoint ids of a pool (or all), in id order.
    pub fn ids(&self, pool: Option<&str>) -> Vec<EndpointId> {
        let p = pool.and_then(|n| self.by_name.get(n).copied());
        if pool.is_some() && p.is_none() {
            return Vec::new();
        }
        let mut v: Vec<EndpointId> = self
            .entries
            .iter()
            .filter(|(_, e)| p.is_none_or(|p| e.pool == p))
            .map(|(id, _)| *id)
            .collect();
        v.sort_unstable();
        v
    }
}

#[cfg(test)]
mod outcome_tests {
    use super::{Outcome, PoolError};
    use crate::health::{Failure, Reason};

    #[test]
    fn only_a_failure_without_a_reason_is_refused() {
        let failure = |reason| {
            Outcome::Failure(Failure {
                reason,
                ..Default::default()
            })
        };
        assert!(Outcome::Success.check_reason().is_ok());
        assert!(failure(Some(Reason::ConnectTimeout)).check_reason().is_ok());
        assert!(matches!(
            failure(None).check_reason(),
            Err(PoolError::MissingReason)
        ));
    }
}
