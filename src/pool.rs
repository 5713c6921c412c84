//! The in-memory pools: health of every endpoint, selection, leases and trial admission.
//!
//! `Pools` is synchronous and does no I/O: every operation returns the [`Write`]s that
//! must be made durable before its caller is answered. [`engine::Engine`] wraps it in a
//! mutex and a group-committing store writer for the daemon and the CLI.

pub mod destinations;
pub mod engine;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use rustc_hash::FxHashMap;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::time::Instant;
use tracing::info;

use crate::config::{Mode, PoolConfig};
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::health::{restored_remaining, Failure, Health, Input, State, Step};
use crate::store::{EndpointRow, HealthRecord, NewEvent, Write};

/// Errors of pool operations, each mapping to a protocol error code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PoolError {
    /// No such pool.
    #[error("unknown pool {0:?}")]
    UnknownPool(String),
    /// Nothing can be leased now.
    #[error("pool {pool:?} has no endpoint available{}", retry_after.map(|d| format!(" (soonest cooldown ends in {} ms)", d.as_millis())).unwrap_or_default())]
    Exhausted {
        /// Pool.
        pool: String,
        /// Time until the soonest cooldown deadline.
        retry_after: Option<Duration>,
    },
    /// The lease id is not known.
    #[error("unknown lease {0:?}")]
    UnknownLease(String),
    /// The lease existed but expired.
    #[error("lease {0:?} expired")]
    LeaseExpired(String),
    /// No such endpoint.
    #[error("no endpoint with id {0}")]
    UnknownEndpoint(EndpointId),
    /// A lease lifetime the clock cannot represent.
    #[error("ttl {0:?} is too long")]
    InvalidTtl(Duration),
    /// A failure report without a reason.
    #[error("a failure report needs a reason (one of: {})", crate::health::Reason::ALL.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(", "))]
    MissingReason,
}

/// A granted lease.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
}

/// Counts of a pool for `status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PoolStatus {
    /// Pool.
    pub pool: String,
    /// Mode.
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
}

/// What a report did.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The use worked.
    Success,
    /// The use failed.
    Failure(Failure),
}

struct Entry {
    url: ProxyUrl,
    /// The URL with credentials, rendered once: leases hand it out on every call.
    secret: Arc<str>,
    pool: usize,
    health: Health,
    leases: u32,
    /// Bumped whenever the entry leaves or moves in the ready queues; queue items with an
    /// older value are stale.
    gen: u64,
    /// Sequence in the probe_allowed queue.
    pa_seq: u64,
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
}

/// Available endpoints of a pool: one FIFO queue of (slot, gen) per live-lease count.
///
/// The next pick is the front of the lowest non-empty level (least leased, then round
/// robin). Moving an endpoint pushes a new item and leaves the old one stale, dropped when
/// it reaches the front or by compaction, so every operation is O(1) amortized and walks
/// memory in order: a pool of 100,000 costs about what a pool of 100 does.
#[derive(Default)]
struct Ready {
    levels: Vec<VecDeque<(u32, u64)>>,
    live: Vec<usize>,
}

impl Ready {
    fn push(&mut self, level: u32, slot: u32, gen: u64) {
        let l = level as usize;
        if self.levels.len() <= l {
            self.levels.resize_with(l + 1, VecDeque::new);
            self.live.resize(l + 1, 0);
        }
        self.levels[l].push_back((slot, gen));
        self.live[l] += 1;
    }

    fn forget(&mut self, level: u32) {
        if let Some(n) = self.live.get_mut(level as usize) {
            *n = n.saturating_sub(1);
        }
    }

    fn needs_compaction(&self, level: u32) -> bool {
        let l = level as usize;
        self.levels[l].len() > 2 * self.live[l] + 64
    }
}

struct Lease {
    endpoint: EndpointId,
    slot: u32,
    expires: Instant,
    trial: bool,
}

/// All pools of a process.
pub struct Pools {
    pools: Vec<PoolState>,
    by_name: HashMap<String, usize>,
    entries: EntryMap,
    leases: FxHashMap<u64, Lease>,
    lease_expiry: BTreeSet<(Instant, u64)>,
    expired: FxHashMap<u64, ()>,
    expired_order: VecDeque<u64>,
    sessions: HashMap<(usize, String), EndpointId>,
    /// Ids removed in this process. Ids are never reused, so a row that arrives after its
    /// removal (an `add` racing a `remove`) is stale and must not come back to life.
    removed: std::collections::HashSet<EndpointId>,
    next_lease: u64,
    /// Source of ready-queue generations, unique for the life of the process.
    gen: u64,
    lease_prefix: String,
    seq: u64,
    rng: fastrand::Rng,
}

const EXPIRED_MEMORY: usize = 65_536;

/// Sticky session keys remembered at most.
const MAX_SESSIONS: usize = 65_536;

/// Endpoints stored densely in load order, found by id through a small index.
///
/// Round robin walks endpoints roughly in load order, so a dense `Vec` turns the walk
/// into mostly sequential memory access; a `HashMap<EndpointId, Entry>` scattered every
/// entry and cost a cache and TLB miss per pick in large pools.
#[derive(Default)]
struct EntryMap {
    index: FxHashMap<EndpointId, u32>,
    slots: Vec<Option<(EndpointId, Entry)>>,
    free: Vec<u32>,
}

impl EntryMap {
    fn get(&self, id: &EndpointId) -> Option<&Entry> {
        let &i = self.index.get(id)?;
        self.slots[i as usize].as_ref().map(|(_, e)| e)
    }

    fn get_mut(&mut self, id: &EndpointId) -> Option<&mut Entry> {
        let &i = self.index.get(id)?;
        self.slots[i as usize].as_mut().map(|(_, e)| e)
    }

    fn slot(&self, id: &EndpointId) -> Option<u32> {
        self.index.get(id).copied()
    }

    fn at(&self, slot: u32) -> Option<&(EndpointId, Entry)> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    fn at_mut(&mut self, slot: u32) -> Option<&mut (EndpointId, Entry)> {
        self.slots.get_mut(slot as usize).and_then(Option::as_mut)
    }

    fn contains_key(&self, id: &EndpointId) -> bool {
        self.index.contains_key(id)
    }

    fn insert(&mut self, id: EndpointId, e: Entry) {
        if let Some(&i) = self.index.get(&id) {
            self.slots[i as usize] = Some((id, e));
            return;
        }
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some((id, e));
                i
            }
            None => {
                self.slots.push(Some((id, e)));
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(id, i);
    }

    fn remove(&mut self, id: &EndpointId) -> Option<Entry> {
        let i = self.index.remove(id)?;
        self.free.push(i);
        self.slots[i as usize].take().map(|(_, e)| e)
    }

    fn len(&self) -> usize {
        self.index.len()
    }

    fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn iter(&self) -> impl Iterator<Item = (&EndpointId, &Entry)> {
        self.slots.iter().flatten().map(|(id, e)| (id, e))
    }
}

impl std::ops::Index<&EndpointId> for EntryMap {
    type Output = Entry;
    fn index(&self, id: &EndpointId) -> &Entry {
        self.get(id).expect("endpoint is held")
    }
}

/// Whether a ready-queue item still stands for an available endpoint of `pool` with
/// `level` live leases. Generations are unique for the life of the process (never reset
/// when a slot is reused), so an item left by a removed endpoint can never match.
fn live_at(entries: &EntryMap, slot: u32, gen: u64, pool: usize, level: u32) -> bool {
    entries.at(slot).is_some_and(|(_, e)| {
        e.gen == gen && e.pool == pool && e.leases == level && e.health.state == State::Available
    })
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
            expired: FxHashMap::default(),
            expired_order: VecDeque::new(),
            sessions: HashMap::new(),
            removed: std::collections::HashSet::new(),
            next_lease: 0,
            gen: 0,
            lease_prefix: format!("{:08x}", fastrand::u32(..)),
            seq: 0,
            rng: fastrand::Rng::new(),
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
            self.pools[i].cfg = cfg;
            return i;
        }
        let i = self.pools.len();
        self.by_name.insert(cfg.name.clone(), i);
        self.pools.push(PoolState {
            cfg,
            ready: Ready::default(),
            cooling: BTreeSet::new(),
            trials: BTreeSet::new(),
            counts: [0; 4],
            leases: 0,
        });
        i
    }

    /// Config of a pool.
    pub fn pool_config(&self, name: &str) -> Option<&PoolConfig> {
        self.by_name.get(name).map(|&i| &self.pools[i].cfg)
    }

    /// Names of all pools.
    pub fn pool_names(&self) -> Vec<String> {
        self.pools.iter().map(|p| p.cfg.name.clone()).collect()
    }

    /// Number of endpoints held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no endpoint is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Load a stored endpoint. Cooling deadlines are rebuilt as
    /// `clamp(cooldown_until − now_wall, 0, cooldown_ms)` from `now`.
    pub fn insert_row(&mut self, row: &EndpointRow, now: Instant, wall: SystemTime) {
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
        health.cooldown = row.cooldown_ms.map(Duration::from_millis);
        if row.state == State::Cooling {
            let len = health.cooldown.unwrap_or(Duration::ZERO);
            let remaining = row
                .cooldown_until
                .map(|u| restored_remaining(u, wall, len))
                .unwrap_or(Duration::ZERO);
            health.deadline = Some(now + remaining);
        }
        self.remove_entry(row.id);
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
            },
        );
        self.index(row.id);
    }

    /// Forget a deleted endpoint and refuse any later row with its id.
    pub fn remove_for_good(&mut self, id: EndpointId) -> bool {
        self.removed.insert(id);
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
            }
        }
        self.sessions.retain(|_, v| *v != id);
        self.entries.remove(&id);
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

    /// Apply an input to an endpoint, keeping indexes in sync; returns the step and the
    /// writes that record it.
    fn apply(
        &mut self,
        id: EndpointId,
        input: Input,
        now: Instant,
        wall: SystemTime,
        event: NewEvent,
    ) -> (Step, Vec<Write>) {
        let jitter = self.rng.f64() * 2.0 - 1.0;
        self.unindex(id);
        let e = self
            .entries
            .get_mut(&id)
            .expect("caller checked the endpoint");
        let from = e.health.state;
        // Disjoint fields: the policy is borrowed, not cloned, on every transition.
        let policy = &self.pools[e.pool].cfg.policy;
        let step = e.health.apply(input, policy, now, jitter);
        let h = &e.health;
        let mut writes = Vec::new();
        // The act itself (report, probe, trial admission) is one row... unless it was
        // refused: a claim or abandon that did not happen is not an event.
        if !event.kind.is_empty() && step != Step::Refused {
            writes.push(Write::Event(NewEvent {
                endpoint: Some(id),
                from: Some(from),
                to: Some(h.state),
                ..event.clone()
            }));
        }
        // ...and every change of the persisted state is a `state_changed` row.
        if let Step::Changed { from, to } = &step {
            info!(
                endpoint = id,
                from = %from,
                to = %to,
                reason = h.reason.map(|r| r.as_str()).unwrap_or("-"),
                phase = h.phase.map(|p| p.as_str()).unwrap_or("-"),
                "state changed"
            );
            let rec = HealthRecord {
                id,
                state: h.state,
                reason: h.reason,
                phase: h.phase,
                detail: h.detail.clone(),
                streak: h.streak,
                reason_streak: h.reason_streak,
                cooldown_ms: h.cooldown.map(|d| d.as_millis() as u64),
                cooldown_until: match (h.state, h.deadline) {
                    (State::Cooling, Some(d)) => Some(wall + d.saturating_duration_since(now)),
                    _ => None,
                },
            };
            let ev = NewEvent {
                endpoint: Some(id),
                kind: "state_changed",
                from: Some(*from),
                to: Some(*to),
                reason: h.reason,
                phase: h.phase,
                detail: event.detail.or_else(|| h.detail.clone()),
                lease: event.lease,
            };
            writes.push(Write::Transition(rec, ev));
        }
        self.index(id);
        (step, writes)
    }

    /// Move cooling endpoints whose deadline passed to `probe_allowed` and expire leases.
    pub fn advance(&mut self, now: Instant, wall: SystemTime) -> Vec<Write> {
        let mut writes = Vec::new();
        for p in 0..self.pools.len() {
            while let Some(&(d, id)) = self.pools[p].cooling.first() {
                if d > now {
                    break;
                }
                let (_, w) = self.apply(id, Input::DeadlinePassed, now, wall, NewEvent::default());
                writes.extend(w);
            }
        }
        while let Some(&(exp, lid)) = self.lease_expiry.first() {
            if exp > now {
                break;
            }
            self.lease_expiry.pop_first();
            if let Some(l) = self.leases.remove(&lid) {
                self.remember_expired(lid);
                writes.extend(self.end_lease(lid, l, now, wall, "lease expired"));
            }
        }
        writes
    }

    fn remember_expired(&mut self, lid: u64) {
        self.expired.insert(lid, ());
        self.expired_order.push_back(lid);
        if self.expired_order.len() > EXPIRED_MEMORY {
            if let Some(old) = self.expired_order.pop_front() {
                self.expired.remove(&old);
            }
        }
    }

    /// Drop a lease's hold on its endpoint; an unreported trial is abandoned.
    fn end_lease(
        &mut self,
        lid: u64,
        l: Lease,
        now: Instant,
        wall: SystemTime,
        why: &str,
    ) -> Vec<Write> {
        let Some((_, e)) = self.entries.at(l.slot).filter(|(id, _)| *id == l.endpoint) else {
            return Vec::new();
        };
        let pool = e.pool;
        self.pools[pool].leases -= 1;
        if l.trial {
            let ev = NewEvent {
                kind: "trial_abandoned",
                detail: Some(why.to_string()),
                lease: Some(self.lease_name(lid)),
                ..Default::default()
            };
            let (_, w) = self.apply(l.endpoint, Input::Abandon, now, wall, ev);
            self.set_leases_at(l.slot, -1);
            w
        } else {
            self.set_leases_at(l.slot, -1);
            Vec::new()
        }
    }

    fn set_leases_at(&mut self, slot: u32, delta: i32) {
        let Some((_, e)) = self.entries.at_mut(slot) else {
            return;
        };
        let p = &mut self.pools[e.pool];
        if e.health.state == State::Available {
            // Round robin: the one just moved goes behind its equals.
            p.ready.forget(e.leases);
            e.leases = e.leases.saturating_add_signed(delta);
            self.gen += 1;
            e.gen = self.gen;
            p.ready.push(e.leases, slot, e.gen);
            let (pool, level) = (e.pool, e.leases);
            self.compact_ready(pool, level);
        } else {
            e.leases = e.leases.saturating_add_signed(delta);
        }
    }

    /// Drop stale queue items once they outnumber the live ones.
    fn compact_ready(&mut self, pool: usize, level: u32) {
        if !self.pools[pool].ready.needs_compaction(level) {
            return;
        }
        let entries = &self.entries;
        self.pools[pool].ready.levels[level as usize]
            .retain(|&(slot, gen)| live_at(entries, slot, gen, pool, level));
    }

    /// The least-leased available endpoint of pool `p`: (slot, live leases).
    fn pick(&mut self, p: usize) -> Option<(u32, u32)> {
        let entries = &self.entries;
        let ready = &mut self.pools[p].ready;
        for level in 0..ready.levels.len() {
            if ready.live[level] == 0 {
                continue;
            }
            let q = &mut ready.levels[level];
            while let Some(&(slot, gen)) = q.front() {
                if live_at(entries, slot, gen, p, level as u32) {
                    return Some((slot, level as u32));
                }
                q.pop_front();
            }
        }
        None
    }

    fn lease_name(&self, lid: u64) -> String {
        format!("{}-{lid:x}", self.lease_prefix)
    }

    fn parse_lease(&self, name: &str) -> Option<u64> {
        let (prefix, n) = name.split_once('-')?;
        if prefix != self.lease_prefix {
            return None;
        }
        u64::from_str_radix(n, 16).ok()
    }

    /// Lease an endpoint of `pool` for `ttl`.
    pub fn lease(
        &mut self,
        pool: &str,
        ttl: Duration,
        session: Option<&str>,
        now: Instant,
        wall: SystemTime,
    ) -> (Result<Grant, PoolError>, Vec<Write>) {
        let mut writes = self.advance(now, wall);
        let Some(&p) = self.by_name.get(pool) else {
            return (Err(PoolError::UnknownPool(pool.to_string())), writes);
        };
        // Checked before anything is claimed, so a refused lease changes nothing.
        let Some(expires) = now.checked_add(ttl) else {
            return (Err(PoolError::InvalidTtl(ttl)), writes);
        };
        let cap = self.pools[p].cfg.max_leases_per_endpoint;
        let under_cap = |leases: u32| cap == 0 || leases < cap;
        let mut chosen: Option<(EndpointId, bool)> = None;
        let mut chosen_slot: Option<u32> = None;
        // A sticky session whose endpoint is still in service keeps it: a scraper's
        // cookies or login must not move to an unproven endpoint.
        if let Some(key) = session {
            if let Some(&id) = self.sessions.get(&(p, key.to_string())) {
                if let Some(e) = self.entries.get(&id) {
                    if e.health.state == State::Available && under_cap(e.leases) {
                        chosen = Some((id, false));
                    }
                }
            }
        }
        // Then trials, so that recovery cannot starve behind ordinary leases.
        if chosen.is_none() && self.pools[p].cfg.mode == Mode::StaticNoPing {
            if let Some(&(_, id)) = self.pools[p].trials.first() {
                let lid = self.next_lease + 1;
                let ev = NewEvent {
                    kind: "trial_admitted",
                    lease: Some(self.lease_name(lid)),
                    ..Default::default()
                };
                let (step, w) = self.apply(id, Input::Claim, now, wall, ev);
                writes.extend(w);
                if step == Step::Claimed {
                    chosen = Some((id, true));
                }
            }
        }
        if chosen.is_none() {
            if let Some((slot, leases)) = self.pick(p) {
                if under_cap(leases) {
                    chosen = self.entries.at(slot).map(|(id, _)| (*id, false));
                    chosen_slot = Some(slot);
                }
            }
        }
        let Some((id, trial)) = chosen else {
            let retry_after = self.pools[p]
                .cooling
                .first()
                .map(|(d, _)| d.saturating_duration_since(now));
            return (
                Err(PoolError::Exhausted {
                    pool: pool.to_string(),
                    retry_after,
                }),
                writes,
            );
        };
        if let Some(key) = session {
            if self.sessions.len() >= MAX_SESSIONS {
                // Scrapers that mint a key per request must not grow memory forever:
                // forget sessions whose endpoint left service, then all if still full.
                let entries = &self.entries;
                self.sessions.retain(|_, id| {
                    entries
                        .get(id)
                        .is_some_and(|e| e.health.state == State::Available)
                });
                if self.sessions.len() >= MAX_SESSIONS {
                    self.sessions.clear();
                }
            }
            self.sessions.insert((p, key.to_string()), id);
        }
        let Some(slot) = chosen_slot.or_else(|| self.entries.slot(&id)) else {
            return (Err(PoolError::UnknownEndpoint(id)), writes);
        };
        self.next_lease += 1;
        let lid = self.next_lease;
        self.leases.insert(
            lid,
            Lease {
                endpoint: id,
                slot,
                expires,
                trial,
            },
        );
        self.lease_expiry.insert((expires, lid));
        self.pools[p].leases += 1;
        self.set_leases_at(slot, 1);
        let Some((_, e)) = self.entries.at(slot) else {
            return (Err(PoolError::UnknownEndpoint(id)), writes);
        };
        let grant = Grant {
            lease: self.lease_name(lid),
            proxy: e.secret.clone(),
            endpoint: id,
            trial,
            expires_in_ms: ttl.as_millis() as u64,
        };
        (Ok(grant), writes)
    }

    fn take_lease(
        &mut self,
        name: &str,
        now: Instant,
        wall: SystemTime,
    ) -> (Result<(u64, Lease), PoolError>, Vec<Write>) {
        let writes = self.advance(now, wall);
        let Some(lid) = self.parse_lease(name) else {
            return (Err(PoolError::UnknownLease(name.to_string())), writes);
        };
        match self.leases.remove(&lid) {
            Some(l) => {
                self.lease_expiry.remove(&(l.expires, lid));
                (Ok((lid, l)), writes)
            }
            None if self.expired.contains_key(&lid) => {
                (Err(PoolError::LeaseExpired(name.to_string())), writes)
            }
            None => (Err(PoolError::UnknownLease(name.to_string())), writes),
        }
    }

    /// Give a lease back without an outcome (a trial is abandoned).
    pub fn release(
        &mut self,
        name: &str,
        now: Instant,
        wall: SystemTime,
    ) -> (Result<(), PoolError>, Vec<Write>) {
        let (r, mut writes) = self.take_lease(name, now, wall);
        match r {
            Ok((lid, l)) => {
                writes.extend(self.end_lease(lid, l, now, wall, "released without a report"));
                (Ok(()), writes)
            }
            Err(e) => (Err(e), writes),
        }
    }

    /// Report how a lease went; returns the endpoint's state afterwards.
    pub fn report(
        &mut self,
        name: &str,
        outcome: Outcome,
        now: Instant,
        wall: SystemTime,
    ) -> (Result<State, PoolError>, Vec<Write>) {
        if let Outcome::Failure(f) = &outcome {
            if f.reason.is_none() {
                return (Err(PoolError::MissingReason), Vec::new());
            }
        }
        let (r, mut writes) = self.take_lease(name, now, wall);
        let (lid, l) = match r {
            Ok(v) => v,
            Err(e) => return (Err(e), writes),
        };
        let Some(e) = self.entries.get(&l.endpoint) else {
            return (Err(PoolError::UnknownLease(name.to_string())), writes);
        };
        self.pools[e.pool].leases -= 1;
        let id = l.endpoint;
        let lease = Some(self.lease_name(lid));
        let (input, detail, reason, phase) = match outcome {
            Outcome::Success => (Input::Success { trial: l.trial }, None, None, None),
            Outcome::Failure(f) => {
                let (d, r, ph) = (f.detail.clone(), f.reason, f.phase);
                (
                    Input::Failure {
                        failure: f,
                        trial: l.trial,
                    },
                    d,
                    r,
                    ph,
                )
            }
        };
        let success = matches!(input, Input::Success { .. });
        let (cur_state, cur_streak) = {
            let h = &self.entries[&id].health;
            (h.state, h.streak)
        };
        // A plain success on a healthy endpoint changes nothing worth a row.
        let quiet = success && cur_state == State::Available && cur_streak == 0;
        let ev = NewEvent {
            kind: if quiet { "" } else { "report" },
            lease,
            detail: detail.or_else(|| {
                (!l.trial && cur_state != State::Available)
                    .then(|| format!("late result ignored: endpoint is {cur_state}"))
            }),
            reason,
            phase,
            ..Default::default()
        };
        let (step, w) = self.apply(id, input, now, wall, ev);
        writes.extend(w);
        if let Step::Recorded { late: true } = step {
            info!(endpoint = id, state = %cur_state, "late result ignored");
        }
        self.set_leases_at(l.slot, -1);
        (Ok(self.entries[&id].health.state), writes)
    }

    /// Operator / source / prober input on an endpoint by id.
    pub fn input(
        &mut self,
        id: EndpointId,
        input: Input,
        kind: &'static str,
        detail: Option<String>,
        now: Instant,
        wall: SystemTime,
    ) -> (Result<(Step, State), PoolError>, Vec<Write>) {
        let mut writes = self.advance(now, wall);
        if !self.entries.contains_key(&id) {
            return (Err(PoolError::UnknownEndpoint(id)), writes);
        }
        let was_claimed = self.entries[&id].health.claimed;
        let operator = match &input {
            Input::Disable { .. } => Some("disable"),
            Input::Enable { now: false } => Some("enable"),
            Input::Enable { now: true } => Some("enable --now"),
            _ => None,
        };
        let ev = NewEvent {
            kind,
            detail,
            ..Default::default()
        };
        let (step, w) = self.apply(id, input, now, wall, ev);
        writes.extend(w);
        if let (Step::Refused, Some(action)) = (&step, operator) {
            // Every operator action leaves a row, also one that found nothing to change.
            let h = &self.entries[&id].health;
            writes.push(Write::Event(NewEvent {
                endpoint: Some(id),
                kind: "operator",
                from: Some(h.state),
                to: Some(h.state),
                reason: h.reason,
                detail: Some(format!(
                    "{action}: nothing to change, endpoint is {}",
                    h.state
                )),
                ..Default::default()
            }));
        }
        if was_claimed && !self.entries[&id].health.claimed {
            // An operator action ended an in-flight trial: its lease no longer is one.
            for l in self.leases.values_mut().filter(|l| l.endpoint == id) {
                l.trial = false;
            }
        }
        (Ok((step, self.entries[&id].health.state)), writes)
    }

    /// Claim the recovery attempt of the next `probe_allowed` endpoint of a pool (prober).
    pub fn claim_next(
        &mut self,
        pool: &str,
        now: Instant,
        wall: SystemTime,
    ) -> (Option<(EndpointId, ProxyUrl)>, Vec<Write>) {
        let mut writes = self.advance(now, wall);
        let Some(&p) = self.by_name.get(pool) else {
            return (None, writes);
        };
        let Some(&(_, id)) = self.pools[p].trials.first() else {
            return (None, writes);
        };
        let ev = NewEvent {
            kind: "trial_admitted",
            detail: Some("probe".into()),
            ..Default::default()
        };
        let (step, w) = self.apply(id, Input::Claim, now, wall, ev);
        writes.extend(w);
        if step == Step::Claimed {
            (Some((id, self.entries[&id].url.clone())), writes)
        } else {
            (None, writes)
        }
    }

    /// Try to claim one specific endpoint's recovery attempt.
    pub fn try_claim(
        &mut self,
        id: EndpointId,
        now: Instant,
        wall: SystemTime,
    ) -> (bool, Vec<Write>) {
        let mut writes = self.advance(now, wall);
        if !self.entries.contains_key(&id) {
            return (false, writes);
        }
        let ev = NewEvent {
            kind: "trial_admitted",
            ..Default::default()
        };
        let (step, w) = self.apply(id, Input::Claim, now, wall, ev);
        writes.extend(w);
        (step == Step::Claimed, writes)
    }

    /// Record a probe result; `trial` when it was a claimed recovery attempt.
    pub fn probe_result(
        &mut self,
        id: EndpointId,
        outcome: Outcome,
        trial: bool,
        detail: Option<String>,
        now: Instant,
        wall: SystemTime,
    ) -> (Result<State, PoolError>, Vec<Write>) {
        let mut writes = self.advance(now, wall);
        if !self.entries.contains_key(&id) {
            return (Err(PoolError::UnknownEndpoint(id)), writes);
        }
        let (input, kind, reason, phase) = match outcome {
            Outcome::Success => (Input::Success { trial }, "probe_success", None, None),
            Outcome::Failure(f) => {
                let (r, ph) = (f.reason, f.phase);
                (Input::Failure { failure: f, trial }, "probe_failure", r, ph)
            }
        };
        let ev = NewEvent {
            kind,
            reason,
            phase,
            detail,
            ..Default::default()
        };
        let (_, w) = self.apply(id, input, now, wall, ev);
        writes.extend(w);
        (Ok(self.entries[&id].health.state), writes)
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

    /// The soonest moment something is due (a cooldown deadline or a lease expiry).
    pub fn next_due(&self) -> Option<Instant> {
        let cool = self
            .pools
            .iter()
            .filter_map(|p| p.cooling.first().map(|(d, _)| *d))
            .min();
        let lease = self.lease_expiry.first().map(|(d, _)| *d);
        match (cool, lease) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
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

    /// Counts by state for one or every pool.
    pub fn status(&self, pool: Option<&str>, now: Instant) -> Result<Vec<PoolStatus>, PoolError> {
        let idx: Vec<usize> = match pool {
            Some(name) => vec![*self
                .by_name
                .get(name)
                .ok_or_else(|| PoolError::UnknownPool(name.to_string()))?],
            None => (0..self.pools.len()).collect(),
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
