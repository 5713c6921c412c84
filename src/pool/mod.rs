//! The in-memory pools: health of every endpoint, selection, leases and trial admission.
//!
//! `Pools` is synchronous and does no I/O: every operation returns the [`Write`]s that
//! must be made durable before its caller is answered. [`engine::Engine`] wraps it in a
//! mutex and a group-committing store writer for the daemon and the CLI.

mod apply;
mod budget;
mod burst;
mod chunked;
#[cfg(test)]
mod commit_failure_tests;
pub mod destinations;
pub mod engine;
mod entries;
mod error;
mod evidence;
mod exit_checks;
mod exits;
mod fleet;
mod id_index;
mod lease_book;
mod leases;
mod membership;
mod pace;
mod pair_target;
mod prefetch;
mod probes;
mod ready;
mod reconfigure;
mod refusal;
mod reports;
pub(crate) mod scoped;
mod select;
mod sessions;
mod shortlist;
mod state_counts;
mod state_index;
mod status;
mod strategy;
mod tag_index;
pub(crate) mod targets;
mod telemetry;

pub use exit_checks::ExitSighting;
pub use leases::{SCOPE_DESTINATION, SCOPE_TARGET};
pub use probes::ProbeRole;
pub use scoped::{ReportOn, Reported, Want};

use destinations::Destinations;
use entries::{Entry, EntryMap};
pub use error::PoolError;
use pace::Pace;
pub use reconfigure::ReconfigureError;
pub use refusal::Refusal;
use strategy::Latencies;
use tag_index::TagIndex;
use targets::Targets;
pub use telemetry::EndpointUse;

use std::collections::HashMap;
use std::sync::Arc;

use tokio::time::Instant;

use crate::config::PoolConfig;
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::health::{Failure, Health, State};

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
    /// Its endpoints filed by state: counts and the queues each state is taken from.
    index: state_index::StateIndex,
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
    /// The endpoint whose probe is the probe target's single trial now, and the claim's
    /// generation.
    probe_trial: Option<(EndpointId, u32)>,
    /// Uses of each endpoint for each host (docs/selection.md, "Pacing").
    pace: Pace,
    /// `pace.dropped()` as last counted in the metric.
    pace_dropped_seen: u64,
    /// The latency estimates of its endpoints (the median `fastest` gives the unmeasured).
    latencies: Latencies,
    /// Each endpoint's exit address (docs/exit.md).
    exits: exits::Exits,
}

/// All pools of a process.
pub struct Pools {
    pools: Vec<PoolState>,
    by_name: HashMap<String, usize>,
    entries: EntryMap,
    /// Every live lease, and how the last ones ended.
    leases: lease_book::LeaseBook,
    /// The log-line budget of every state change (its pools' pairs and targets share it).
    budget: budget::Budget,
    sessions: sessions::Sessions,
    /// Ids removed in this process. Ids are never reused, so a row that arrives after its
    /// removal (an `add` racing a `remove`) is stale and must not come back to life.
    removed: std::collections::HashSet<EndpointId>,
    /// Source of ready-queue generations, unique for the life of the process.
    gen: u64,
    seq: u64,
    rng: fastrand::Rng,
    /// Where new pools resolve their series (see `attach_metrics`).
    metrics: Option<Arc<crate::metrics::Metrics>>,
    /// The store cannot be written (docs/fleet.md, "Faults"): no transition comes due and
    /// no trial is admitted until it is back; ordinary leases go on.
    frozen: bool,
    /// A daemon of a fleet: each round robin goes in an order of this process's own,
    /// endpoints that join it later too (`stagger`, `rows_joining`).
    own_order: bool,
    /// Endpoint tags, interned.
    tags: TagIndex,
    /// Bumped whenever an endpoint may have become a candidate it was not before (it
    /// became available, got new tags, came under its lease cap): a remembered "nothing
    /// ready" for a host holds only within one generation.
    generation: u64,
    /// Where per-entry times (`Entry::up_since`) count from.
    origin: Instant,
}

/// The subnet suspicion of a pool's `[pool.exit]`, if any.
fn subnet_rule(cfg: &PoolConfig) -> Option<destinations::SubnetRule> {
    cfg.exit.as_ref().map(|x| destinations::SubnetRule {
        after: x.subnet_after,
        window: x.subnet_window,
    })
}

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

impl Pools {
    /// Pools from their configs (the `default` pool should be among them).
    pub fn new(configs: impl IntoIterator<Item = PoolConfig>) -> Pools {
        let mut p = Pools {
            pools: Vec::new(),
            by_name: HashMap::new(),
            entries: EntryMap::default(),
            leases: lease_book::LeaseBook::default(),
            budget: budget::Budget::default(),
            sessions: sessions::Sessions::new(),
            removed: std::collections::HashSet::new(),
            gen: 0,
            seq: 0,
            rng: fastrand::Rng::new(),
            metrics: None,
            frozen: false,
            own_order: false,
            tags: TagIndex::default(),
            generation: 0,
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

    /// Hold at most `cap` destination pairs in `pool` (tests: the cap's behaviour without
    /// a million pairs).
    pub fn cap_pairs(&mut self, pool: &str, cap: usize) {
        if let Some(&p) = self.by_name.get(pool) {
            self.pools[p].dests.set_cap(cap);
        }
    }

    fn ensure_pool(&mut self, cfg: PoolConfig) -> usize {
        if let Some(&i) = self.by_name.get(&cfg.name) {
            let ps = &mut self.pools[i];
            ps.targets.set_rules(cfg.blame.clone());
            ps.targets.set_trial_hold(cfg.trial_hold());
            ps.probe_target = probes::probe_target(cfg.probe.url.as_deref());
            ps.pace.set_config(cfg.pace.clone());
            ps.pace.set_max_hold(cfg.policy.cooldown.max);
            let held = self
                .entries
                .iter()
                .filter(|(_, e)| e.pool == i)
                .map(|(&id, _)| id);
            let held: Vec<EndpointId> = held.collect();
            ps.exits
                .configure(cfg.exit.clone(), held.iter().copied(), Instant::now());
            ps.dests.set_subnet_rule(subnet_rule(&cfg));
            if cfg.exit.is_none() {
                ps.dests.clear_exits();
            }
            ps.cfg = cfg;
            // New prefix lengths group the addresses anew.
            for id in held {
                let exit = ps.sync_exit(id);
                if let Some(e) = self.entries.get_mut(&id) {
                    e.exit = exit;
                }
            }
            // New caps, rules or strategies: what was remembered as nothing ready is stale.
            self.generation += 1;
            return i;
        }
        let i = self.pools.len();
        let name = cfg.name.clone();
        let rules = cfg.blame.clone();
        let probe_target = probes::probe_target(cfg.probe.url.as_deref());
        let mut dests = Destinations::new(&name, destinations::DEFAULT_MAX_PAIRS);
        dests.share_budget(self.budget.clone());
        let mut targets = Targets::new(rules, targets::DEFAULT_MAX_TARGETS);
        targets.set_trial_hold(cfg.trial_hold());
        let mut pace = Pace::new(
            cfg.pace.clone(),
            pace::DEFAULT_MAX_HOSTS,
            pace::DEFAULT_MAX_PAIRS,
            self.origin,
        );
        pace.set_max_hold(cfg.policy.cooldown.max);
        self.by_name.insert(cfg.name.clone(), i);
        self.pools.push(PoolState {
            cfg,
            index: state_index::StateIndex::default(),
            leases: 0,
            metrics: None,
            dests,
            targets,
            targets_dropped_seen: 0,
            probe_target,
            probe_trial: None,
            pace,
            pace_dropped_seen: 0,
            latencies: Latencies::default(),
            exits: exits::Exits::default(),
        });
        let exit = self.pools[i].cfg.exit.clone();
        let rule = subnet_rule(&self.pools[i].cfg);
        self.pools[i].dests.set_subnet_rule(rule);
        self.pools[i]
            .exits
            .configure(exit, std::iter::empty(), Instant::now());
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

    /// Milliseconds since the pools' origin.
    pub(super) fn ms(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.origin).as_millis() as u64
    }

    /// The pacing state `pool` holds: (hosts, pairs) (docs/selection.md, "Memory and
    /// speed").
    pub fn pace_held(&self, pool: &str) -> Option<(usize, usize)> {
        let ps = &self.pools[*self.by_name.get(pool)?];
        Some((ps.pace.hosts(), ps.pace.pairs()))
    }

    /// Whether a socket lease of `pool` may live `ttl` (its `max_ttl`); an unknown pool
    /// is left to the lease to refuse.
    pub fn check_ttl(&self, pool: &str, ttl: std::time::Duration) -> Result<(), PoolError> {
        let Some(&p) = self.by_name.get(pool) else {
            return Ok(());
        };
        let cfg = &self.pools[p].cfg;
        if ttl > cfg.max_ttl {
            return Err(PoolError::TtlOverMax {
                pool: cfg.name.clone(),
                ttl,
                max: cfg.max_ttl,
            });
        }
        Ok(())
    }

    /// Forget session `key` in pool `pool` and in its fallback: the gateway's own session
    /// of an intercepted connection that ended, so that such sessions do not fill the
    /// table a client's sessions share (docs/intercept.md).
    pub fn forget_session(&mut self, pool: &str, key: &str) {
        let fallback = self.fallback(pool);
        for name in std::iter::once(pool).chain(fallback.as_deref()) {
            if let Some(&p) = self.by_name.get(name) {
                let s = self.sessions.at(p, key);
                self.sessions.unbind(s);
            }
        }
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
        let lease = self.leases.next_expiry();
        if self.frozen {
            // Nothing persisted comes due while the store is away.
            return lease;
        }
        let cool = self.pools.iter().filter_map(|p| p.index.next_due()).min();
        let pairs = self
            .pools
            .iter()
            .flat_map(|p| [p.dests.next_due(), p.targets.next_lapse()])
            .flatten()
            .min();
        let cool = match (cool, pairs) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // A held summary of state-change lines is written when its second is over.
        [cool, lease, self.budget.due()].into_iter().flatten().min()
    }

    /// Whether every endpoint of a pool is cooling or disabled: nothing is available and
    /// nothing awaits its recovery attempt. A configured pool with no endpoint at all
    /// (e.g. a sniffing pool whose startup sniff failed) is exhausted too.
    pub fn exhausted(&self, pool: &str) -> bool {
        let Some(&p) = self.by_name.get(pool) else {
            return false;
        };
        self.pools[p].index.counts().exhausted()
    }

    /// What a start-up restored, as one log line: counts by state, the cooldowns that
    /// ended while the daemon was stopped (they end on the first tick) and the pairs.
    pub fn log_restored(&self, now: Instant) {
        let sum = |s: State| {
            self.pools
                .iter()
                .map(|p| p.index.counts().of(s))
                .sum::<usize>()
        };
        let overdue: usize = self
            .pools
            .iter()
            .map(|p| p.index.cooling().take_while(|(d, _)| *d <= now).count())
            .sum();
        let pairs: usize = self.pools.iter().map(|p| p.dests.len()).sum();
        tracing::info!(
            endpoints = self.entries.len(),
            available = sum(State::Available),
            cooling = sum(State::Cooling),
            cooldown_ended_while_stopped = overdue,
            probe_allowed = sum(State::ProbeAllowed),
            disabled = sum(State::Disabled),
            pairs,
            "restored from the store"
        );
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
