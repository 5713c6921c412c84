//! Per-destination health of one pool (docs/destinations.md, "Pairs"): the (endpoint,
//! destination) pairs that are not `available`, and the O(1) answer "is endpoint E usable
//! for destination D".
//!
//! A destination has a view only while it has pairs; a lease for a destination without
//! one costs a single hash lookup. Pairs run the same state machine and policy as
//! endpoints ([`Health`]), stored compactly (no detail string in memory: it is persisted
//! with the transition), so a banned pair costs well under 200 bytes.
//!
//! Selection for destination D (`select.rs`) first gives a pair waiting for its trial
//! its trial lease ([`Destinations::claim_trial`]), then walks the pool's existing ready
//! queue and asks [`Destinations::leasable`] about each live item: yes → lease it; no
//! (banned, by its pair or its address, or waiting for its trial) → the item goes behind
//! its equals of its level (`Ready::round`) and the walk goes on. The rotation is what
//! keeps selection flat: without it the banned endpoints, never leased for D, would pile
//! up at the front and every lease would rescan all of them (O(banned)). With it, a pass
//! over a level of L items skips each of its B banned items once while handing out L − B
//! leases, so the amortised skips per lease are B / (L − B): 1 with 5,000 of 10,000
//! banned, whatever the pool size, and no lease scans the pool. Moving a skipped endpoint
//! behind its equals of the same lease count is within the round-robin rule for other
//! destinations. A walk stops after the level's live count, so a destination where every
//! endpoint is banned answers `exhausted` after one pass. A host whose passes skip many
//! items gets a shortlist (`super::shortlist`: a copy of the first queue from which its
//! exclusions are dropped), for a few hosts per pool only, since each costs a queue item
//! per ready endpoint; this module tells it when an exclusion ends (`lifted`) and when
//! anything that decides one changed (`changed`).

use std::collections::{BTreeSet, VecDeque};

use rustc_hash::FxHashMap;
use tokio::time::Instant;
use tracing::info;

use crate::endpoint::EndpointId;
use crate::event_kind::EventKind;
use crate::health::{cell, Health, Input, Policy, Reason, State, Step};
use crate::store::pairs::{PairRecord, PairWrite};
use crate::store::NewEvent;

mod name;
mod pair;
mod shared;
mod subnets;
mod trials;
mod views;
mod writes;

pub use name::{normalize, normalize_key, place, place_and_port, Place};
use pair::{at, Pair, NONE};
pub use subnets::{Subnet, SubnetRule};

/// Default cap on pairs per pool.
pub const DEFAULT_MAX_PAIRS: usize = 1_000_000;

/// Why a destination or a pair was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DestinationError {
    /// Nothing given.
    #[error("destination is empty; expected a host name such as \"example.com\"")]
    Empty,
    /// Not a host.
    #[error("destination {value:?} is not a host name: {why}")]
    Invalid {
        /// What was given.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The pool holds as many pairs as it may.
    #[error("pool {pool:?} holds the maximum of {cap} destination pairs")]
    CapReached {
        /// Pool.
        pool: String,
        /// The cap.
        cap: usize,
    },
}

/// What an endpoint is to a destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usable {
    /// No ban: lease it normally.
    Available,
    /// The pair's deadline passed and nobody holds its trial: it may be the trial lease.
    Trial,
    /// Cooling, disabled, or its trial is in flight: never leased for this destination.
    Banned,
}

/// A destination resolved once per operation; valid until the next `&mut` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DestRef(u32);

impl DestRef {
    /// The view's number: what a shortlist is kept by.
    pub(super) fn number(self) -> u32 {
        self.0
    }
}

/// A pair as shown to operators.
#[derive(Debug, Clone, PartialEq)]
pub struct PairHealth {
    /// Destination.
    pub destination: String,
    /// Endpoint.
    pub endpoint: EndpointId,
    /// Health (without detail: that is in the store).
    pub health: Health,
    /// HTTP status of the last failure.
    pub status: Option<u16>,
}

struct View {
    name: Box<str>,
    pairs: FxHashMap<EndpointId, Pair>,
    /// Pairs that became `probe_allowed`, oldest first; checked when taken (an item may
    /// be stale after a claim, enable or removal).
    trials: VecDeque<EndpointId>,
    /// `Destinations::tick` when an exclusion of this view last ended (`lifted`).
    lifted: u64,
    /// `Destinations::tick` when anything that decides `leasable` for this view last
    /// changed: an exclusion that began or ended (`changed`).
    changed: u64,
}

/// What a pair report or operator act did.
#[derive(Debug, Clone, PartialEq)]
pub struct PairStep {
    /// The state machine's answer.
    pub step: Step,
    /// The pair's state afterwards (`available` when it has no ban).
    pub state: State,
    /// What must be durable before the caller is answered.
    pub writes: Vec<PairWrite>,
}

/// What is applied to a pair: the health input, the HTTP status it came with (a ban's),
/// and the event of the act itself (`report`) when the act is recorded.
pub struct PairInput {
    pub input: Input,
    pub status: Option<u16>,
    pub act: Option<NewEvent>,
}

impl From<Input> for PairInput {
    fn from(input: Input) -> Self {
        PairInput {
            input,
            status: None,
            act: None,
        }
    }
}

/// The non-available pairs of one pool.
pub struct Destinations {
    /// The pairs in the order they last failed (stale items skipped when met): who gives
    /// way at the cap.
    failed: VecDeque<views::Failed>,
    /// The last failure's number (`Pair::touched`).
    seq: u32,
    pool: String,
    names: FxHashMap<Box<str>, u32>,
    views: Vec<Option<View>>,
    free: Vec<u32>,
    /// Origin of the pairs' millisecond deadlines.
    origin: Instant,
    /// Cooling pairs by deadline: (ticks, view, endpoint).
    deadlines: BTreeSet<(u64, u32, EndpointId)>,
    pairs: usize,
    banned: usize,
    cap: usize,
    warned: bool,
    /// The log-line budget of state changes (the pools' own, once shared).
    budget: super::budget::Budget,
    /// Bans shared by the endpoints of one exit address (docs/exit.md).
    shared: shared::Shared,
    /// Counts exclusions that began or ended (`lifted`, `changed`).
    tick: u64,
    /// `tick` when exclusions of every view may have ended or begun (an address moved).
    lifted_all: u64,
}

impl Destinations {
    /// No pairs yet; at most `cap` pairs.
    pub fn new(pool: &str, cap: usize) -> Destinations {
        Destinations {
            failed: VecDeque::new(),
            seq: 0,
            pool: pool.to_string(),
            names: FxHashMap::default(),
            views: Vec::new(),
            free: Vec::new(),
            origin: Instant::now(),
            deadlines: BTreeSet::new(),
            pairs: 0,
            banned: 0,
            cap,
            warned: false,
            budget: Default::default(),
            shared: Default::default(),
            tick: 0,
            lifted_all: 0,
        }
    }

    /// Log pair transitions within `budget` (the pools' budget of every state change).
    pub(super) fn share_budget(&mut self, budget: super::budget::Budget) {
        self.budget = budget;
    }

    /// Hold at most `cap` pairs from now on (what is held past it stays until it goes).
    pub fn set_cap(&mut self, cap: usize) {
        self.cap = cap;
    }

    /// Pairs held (banned ones and those counting towards `fall`).
    pub fn len(&self) -> usize {
        self.pairs
    }

    /// True when no pair is held.
    pub fn is_empty(&self) -> bool {
        self.pairs == 0
    }

    /// Pairs that are not `available` (the metric of active pair bans).
    pub fn banned(&self) -> usize {
        self.banned
    }

    /// The destinations with the most banned (non-available) pairs, most first (ties by
    /// name), at most `n`: the status page's "banned on" per pool. Visits every view.
    pub fn most_banned(&self, n: usize) -> Vec<(String, usize)> {
        let mut v: Vec<(String, usize)> = self
            .views
            .iter()
            .flatten()
            .map(|v| {
                let banned = v.pairs.values().filter(|p| p.state != State::Available);
                (v.name.to_string(), banned.count())
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v.truncate(n);
        v
    }

    /// Destinations that have a view.
    pub fn destinations(&self) -> usize {
        self.names.len()
    }

    /// The view of a normalised destination, if it has any pair.
    pub fn lookup(&self, destination: &str) -> Option<DestRef> {
        self.names.get(destination).map(|&i| DestRef(i))
    }

    /// Whether endpoint `id` may be leased for the destination: one hash lookup.
    pub fn usable(&self, d: DestRef, id: EndpointId) -> Usable {
        self.shared_usable(d, id, self.own_usable(d, id))
    }

    /// What endpoint `id`'s own pair of `d` says, its address aside.
    fn own_usable(&self, d: DestRef, id: EndpointId) -> Usable {
        match self.view(d.0).and_then(|v| v.pairs.get(&id)) {
            None => Usable::Available,
            Some(p) => match (p.state, p.claimed) {
                (State::Available, _) => Usable::Available,
                (State::ProbeAllowed, false) => Usable::Trial,
                _ => Usable::Banned,
            },
        }
    }

    /// Whether the destination may have a pair waiting for its trial (a cheap test that
    /// spares the lease path the trial's lease name when there is none).
    pub fn trials_waiting(&self, d: DestRef) -> bool {
        self.view(d.0).is_some_and(|v| !v.trials.is_empty())
    }

    /// The soonest pair deadline.
    pub fn next_due(&self) -> Option<Instant> {
        self.deadlines.first().map(|(d, _, _)| at(self.origin, *d))
    }

    /// The health of one pair, if it is held.
    pub fn pair(&self, destination: &str, id: EndpointId) -> Option<PairHealth> {
        let d = self.lookup(destination)?;
        let v = self.view(d.0)?;
        v.pairs.get(&id).map(|p| PairHealth {
            destination: v.name.to_string(),
            endpoint: id,
            health: p.health(self.origin),
            status: p.status,
        })
    }

    /// The non-available pairs of an endpoint (`show ID`), by destination. Visits every
    /// view: only operator commands call it.
    pub fn pairs_of(&self, id: EndpointId) -> Vec<PairHealth> {
        let mut v: Vec<PairHealth> = self
            .views
            .iter()
            .flatten()
            .filter_map(|v| {
                let p = v.pairs.get(&id).filter(|p| p.state != State::Available)?;
                Some(PairHealth {
                    destination: v.name.to_string(),
                    endpoint: id,
                    health: p.health(self.origin),
                    status: p.status,
                })
            })
            .collect();
        v.sort_by(|a, b| a.destination.cmp(&b.destination));
        v
    }

    /// Load a stored pair (on start, or as another daemon left it), its cooling deadline
    /// `left` from `now` as the store read it. `claim`: the trial is out elsewhere for
    /// that long (docs/fleet.md, "Ownership"). What only this daemon knows of the pair
    /// (failures counting towards `fall`, its own claim while the row still shows it) is
    /// kept.
    pub fn restore(
        &mut self,
        rec: &PairRecord,
        claim: Option<crate::store::RowClaim>,
        now: Instant,
    ) -> Result<(), DestinationError> {
        let name = normalize_key(&rec.destination)?;
        let mut h = Health::new(rec.health.state);
        h.streak = rec.health.streak;
        h.reason_streak = rec.health.reason_streak;
        h.reason = rec.health.reason;
        h.phase = rec.health.phase;
        h.restore_cooldown(rec.health.cooldown_ms, rec.health.cooldown_left, now);
        let slot = self.slot_for(&name);
        let old = self.take(slot, rec.endpoint);
        if old.is_none() && !self.room() {
            self.drop_if_empty(slot);
            return Err(self.cap_error());
        }
        if let Some(o) = old.filter(|o| o.state == rec.health.state) {
            h.fails = o.fails;
        }
        let mut pair = Pair::from_health(&h, rec.status, self.origin);
        pair.touched = match old {
            Some(o) => o.touched,
            None => self.touch(slot, rec.endpoint),
        };
        let ours = old.and_then(|o| o.epoch());
        match (rec.health.state, claim) {
            (State::ProbeAllowed, Some(c)) if ours == Some(c.epoch) => {
                pair.claimed = true;
                pair.set_epoch(ours);
                pair.deadline = old.map_or(NONE, |o| o.deadline);
            }
            (State::ProbeAllowed, Some(c)) if !c.left.is_zero() => {
                // Another daemon's trial: nobody here may take it until it lapses.
                pair.claimed = true;
                pair.deadline = pair::ticks(self.origin, now + c.left);
            }
            _ => {}
        }
        self.put(slot, rec.endpoint, pair, true);
        Ok(())
    }

    /// Every pair held, as (endpoint, destination).
    pub fn keys(&self) -> Vec<(EndpointId, String)> {
        self.views
            .iter()
            .flatten()
            .flat_map(|v| v.pairs.keys().map(|&id| (id, v.name.to_string())))
            .collect()
    }

    /// The pair has no row any more (it recovered elsewhere): forget it.
    pub fn forget(&mut self, destination: &str, id: EndpointId) {
        if let Some(d) = self.lookup(destination) {
            if self.take(d.0, id).is_some() {
                self.drop_if_empty(d.0);
            }
        }
    }

    /// Apply a report or probe input on a pair (`destination` already normalised);
    /// `act` is the event of the act itself (`report`), written unless the input was
    /// refused. A failure on a pair that does not exist creates it; at the cap the pair
    /// failed least recently makes room (only when none can, every one's trial out,
    /// nothing changes and the act is recorded with a note).
    pub fn apply(
        &mut self,
        destination: &str,
        id: EndpointId,
        what: PairInput,
        policy: &Policy,
        now: Instant,
        jitter: f64,
    ) -> PairStep {
        let PairInput { input, status, act } = what;
        // Callers normalise once at the protocol boundary; a raw name would open a
        // second view for the same host.
        debug_assert_eq!(normalize_key(destination).as_deref(), Ok(destination));
        let creating = matches!(input, Input::Failure { .. });
        let (slot, pair, mut writes) = match self.take_for(destination, id, creating) {
            Ok(found) => found,
            Err(note) => return writes::nothing(destination, id, act, status, note),
        };
        let mut h = pair.health(self.origin);
        let was_waiting = pair.state == State::ProbeAllowed && !pair.claimed;
        let failure = matches!(input, Input::Failure { .. });
        let stepped = cell::step(&mut h, pair.epoch(), input, policy, now, jitter);
        let step = stepped.step.clone();
        // The pair keeps the status of the failure that banned it; the act's event
        // carries the status of this report.
        let kept = match step {
            Step::Changed { .. } if failure => status,
            _ => pair.status,
        };
        let name = self.views[slot as usize]
            .as_ref()
            .expect("slot")
            .name
            .to_string();
        writes.extend(writes::act(
            &name,
            id,
            &stepped,
            h.state,
            status,
            act.as_ref(),
        ));
        if let Step::Changed { from, to } = step {
            let trial = stepped.settles;
            let reason = h.reason.map(|r| r.as_str()).unwrap_or("-");
            if self.budget.admit(now, reason) {
                writes::log_transition(&name, id, from, to, &h);
            }
            debug_assert_eq!(to, h.state);
            writes.push(writes::transition(
                (&name, id),
                from,
                &h,
                kept,
                act,
                trial,
                now,
            ));
        }
        let mut after = Pair::from_health(&h, kept, self.origin);
        after.touched = match failure {
            true => self.touch(slot, id),
            false => pair.touched,
        };
        after.set_epoch(stepped.claim);
        if after.needed() {
            self.put(slot, id, after, !was_waiting);
        } else {
            self.drop_if_empty(slot);
        }
        PairStep {
            step,
            state: h.state,
            writes,
        }
    }

    /// `enable ID --destination D`: clear the pair (it becomes `available`).
    pub fn enable(&mut self, destination: &str, id: EndpointId) -> PairStep {
        debug_assert_eq!(normalize_key(destination).as_deref(), Ok(destination));
        let held = self.lookup(destination).and_then(|d| {
            let p = self.view(d.0)?.pairs.get(&id)?;
            (p.state != State::Available).then_some((d.0, p.state))
        });
        let Some((slot, from)) = held else {
            let mut r = self.refused();
            r.writes.push(PairWrite::Event {
                destination: destination.to_string(),
                status: None,
                event: NewEvent {
                    endpoint: Some(id),
                    from: Some(State::Available),
                    to: Some(State::Available),
                    detail: Some(
                        "enable --destination: nothing to change, pair is available".into(),
                    ),
                    ..NewEvent::new(EventKind::Operator)
                },
            });
            return r;
        };
        self.take(slot, id);
        self.drop_if_empty(slot);
        if self.budget.admit(Instant::now(), "operator") {
            info!(endpoint = id, destination, from = %from, to = "available", reason = "operator", "pair state changed");
        }
        PairStep {
            step: Step::Changed {
                from,
                to: State::Available,
            },
            state: State::Available,
            writes: vec![PairWrite::Delete {
                endpoint: id,
                destination: destination.to_string(),
                from,
                trial: None,
                event: NewEvent {
                    endpoint: Some(id),
                    from: Some(from),
                    to: Some(State::Available),
                    reason: Some(Reason::Operator),
                    detail: Some("enable --destination".into()),
                    ..NewEvent::new(EventKind::StateChanged)
                },
            }],
        }
    }

    /// Move cooling pairs whose deadline passed to `probe_allowed`, and give back the
    /// trials whose verdict window after their tunnel ended without a verdict.
    pub fn advance(&mut self, policy: &Policy, now: Instant) -> Vec<PairWrite> {
        let mut writes = Vec::new();
        while let Some(&(d, slot, id)) = self.deadlines.first() {
            if at(self.origin, d) > now {
                break;
            }
            let Some(name) = self.view(slot).map(|v| v.name.to_string()) else {
                self.deadlines.pop_first();
                continue;
            };
            let held = self.is_claimed(&name, id);
            let ours = self.our_claim(&name, id).is_some();
            let r = if held && ours {
                let why = "no report decided it within verdict_window after its tunnel closed";
                self.abandon(&name, id, why, None, policy, now)
            } else if held {
                // Another daemon's claim lapsed without news: the trial is free again.
                self.deadlines.remove(&(d, slot, id));
                if let Some(mut p) = self.take(slot, id) {
                    p.claimed = false;
                    p.deadline = NONE;
                    self.put(slot, id, p, true);
                }
                continue;
            } else {
                let input = Input::DeadlinePassed;
                self.apply(&name, id, input.into(), policy, now, 0.0)
            };
            if r.step == Step::Refused || self.deadlines.contains(&(d, slot, id)) {
                // Not a live deadline any more; never loop on it.
                self.deadlines.remove(&(d, slot, id));
            }
            writes.extend(r.writes);
        }
        writes
    }

    /// Forget an endpoint's pairs (after `remove`; the store cascades its rows).
    pub fn remove_endpoint(&mut self, id: EndpointId) {
        for slot in 0..self.views.len() as u32 {
            if self.take(slot, id).is_some() {
                self.drop_if_empty(slot);
            }
        }
    }
}

#[cfg(test)]
pub(in crate::pool) mod tests;
