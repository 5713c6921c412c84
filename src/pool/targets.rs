//! What one pool knows about each target (`host:port`): which endpoints reached it lately,
//! which failed it without contrast yet, and whether it is down — with its own cooldown
//! and single trial, run by the same state machine as endpoints. Pure logic: the caller
//! passes the time in. Bounded: at most `cap` targets, the least recently used dropped,
//! and every operation is O(1) (a hash lookup and a list of at most `down_after` items).
//!
//! Target state is per process and not persisted: after a restart the first requests
//! simply find out again.

use std::hash::BuildHasher;
use std::num::NonZeroUsize;
use std::time::Duration;

use lru::LruCache;
use rustc_hash::{FxBuildHasher, FxHashMap};
use tokio::time::Instant;

use crate::endpoint::EndpointId;
use crate::health::blame::{escalates, judge, Blame, Class, Evidence, Rules, Verdict};
use crate::health::{Failure, Health, Input, Phase, Policy, Reason, State, Step};

/// Targets tracked per pool at most (about 200 bytes each).
pub const DEFAULT_MAX_TARGETS: usize = 65_536;

/// Whether a use of the target may go ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Not down: go ahead.
    Open,
    /// Down, and its cooldown is over: the caller may claim the single trial.
    Trial,
    /// Down: answer at once, dialing nothing; try again after `retry_after`.
    Down { retry_after: Duration },
}

/// What a lease for a target may do, decided in one lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Go ahead, passing over these endpoints first (they just failed the target, pending
    /// contrast; empty, without an allocation, for nearly every target).
    Go { avoid: Vec<EndpointId> },
    /// The target is down and this lease is its single trial (claimed).
    Trial,
    /// The target is down: answer at once, dialing nothing.
    Down { retry_after: Duration },
}

/// A failure through one endpoint that waits for contrast.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub endpoint: EndpointId,
    pub at: Instant,
    pub reason: Reason,
    pub phase: Option<Phase>,
    /// The failure was a probe's: once confirmed it is the endpoint's, not a pair's.
    pub probe: bool,
}

impl Pending {
    /// The failure to apply to the endpoint's pair once another endpoint reached the
    /// target.
    pub fn failure(&self, by: EndpointId) -> Failure {
        Failure {
            reason: Some(self.reason),
            phase: self.phase,
            detail: Some(format!(
                "endpoint {by} reached the target that this endpoint could not"
            )),
            ..Failure::default()
        }
    }
}

/// What a success through an endpoint changed.
#[derive(Debug, Default, PartialEq)]
pub struct Reached {
    /// The target was down (for this long) and is up again.
    pub up: Option<Duration>,
    /// Failures through other endpoints now known to be theirs: each cools its pair.
    pub confirmed: Vec<Pending>,
    /// Endpoints that, with this, failed `escalate_after` distinct targets others reach:
    /// each cools endpoint-wide.
    pub escalated: Vec<EndpointId>,
}

/// Refusals kept per target for a later contrast (most recent; older ones dropped).
const MAX_REFUSALS: usize = 8;

/// A target that is down, as shown to operators.
#[derive(Debug, Clone, PartialEq)]
pub struct DownTarget {
    pub target: String,
    /// Time until its trial (zero: the trial is due or out).
    pub retry_after: Duration,
    /// Consecutive failed trials, the one that made it down included.
    pub streak: u32,
    pub reason: Option<Reason>,
    pub phase: Option<Phase>,
    /// How long it has been down.
    pub down_for: Duration,
}

/// The decision on one failure, and what it changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    pub verdict: Verdict,
    /// The endpoint failed on `escalate_after` distinct targets others reach: it cools
    /// endpoint-wide.
    pub escalate: bool,
    /// The target went down with this failure (after `down_after` endpoints failed it),
    /// or its trial failed: how long until the next trial.
    pub down_for: Option<Duration>,
    /// Endpoints whose pending failures on the target became the target's.
    pub absolved: Vec<EndpointId>,
}

#[derive(Debug)]
struct Down {
    health: Health,
    since: Instant,
}

#[derive(Debug, Default)]
struct Target {
    /// The two most recent endpoints that reached it, distinct, newest first.
    reached: [Option<(EndpointId, Instant)>; 2],
    pending: Vec<Pending>,
    /// Endpoints that refused it (their policy) before anyone reached it: a later reach
    /// through another endpoint makes each refusal count towards escalation.
    refused: Vec<(EndpointId, Instant)>,
    down: Option<Box<Down>>,
}

impl Target {
    fn reached_by_other(&self, e: EndpointId, since: Instant) -> bool {
        self.reached
            .iter()
            .flatten()
            .any(|&(id, at)| id != e && at >= since)
    }

    /// Down, after `down_after` endpoints failed it: its own cooldown starts. Returns the
    /// cooldown and the endpoints whose pending failures are now the target's.
    fn go_down(
        &mut self,
        failure: &Failure,
        policy: &Policy,
        now: Instant,
        jitter: f64,
    ) -> (Option<Duration>, Vec<EndpointId>) {
        let mut h = Health::new(State::Available);
        let input = Input::Failure {
            failure: failure.clone(),
            trial: false,
        };
        h.apply(input, policy, now, jitter);
        let cooldown = h.cooldown;
        self.down = Some(Box::new(Down {
            health: h,
            since: now,
        }));
        // Freed, not kept: most down targets never see another failure.
        let absolved = std::mem::take(&mut self.pending)
            .into_iter()
            .map(|p| p.endpoint)
            .collect();
        (cooldown, absolved)
    }

    /// Its trial failed the same way: the next, longer cooldown.
    fn trial_failed(
        &mut self,
        failure: &Failure,
        policy: &Policy,
        now: Instant,
        jitter: f64,
    ) -> Option<Duration> {
        let d = self.down.as_mut()?;
        let input = Input::Failure {
            failure: failure.clone(),
            trial: true,
        };
        match d.health.apply(input, policy, now, jitter) {
            Step::Changed { .. } => d.health.cooldown,
            _ => None,
        }
    }

    /// Its trial got no answer about it: the next use is the trial.
    fn give_back_trial(&mut self, policy: &Policy, now: Instant) {
        if let Some(d) = self.down.as_mut() {
            d.health.apply(Input::Abandon, policy, now, 0.0);
        }
    }

    /// `e` refused it before anyone reached it: kept for a later contrast (the most
    /// recent `MAX_REFUSALS`).
    fn refused_by(&mut self, e: EndpointId, now: Instant) {
        self.refused.retain(|&(id, _)| id != e);
        if self.refused.len() >= MAX_REFUSALS {
            self.refused.remove(0);
        }
        self.refused.push((e, now));
    }

    fn note_reached(&mut self, e: EndpointId, now: Instant) {
        if self.reached[0].is_some_and(|(id, _)| id != e) {
            self.reached[1] = self.reached[0];
        }
        self.reached[0] = Some((e, now));
    }
}

/// The targets of one pool.
pub struct Targets {
    map: LruCache<Box<str>, Target, FxBuildHasher>,
    rules: Rules,
    down: usize,
    dropped: u64,
    /// Per endpoint: hashes of the distinct targets it failed that others reached, since
    /// its last success (at most `escalate_after`).
    strikes: FxHashMap<EndpointId, Vec<u64>>,
}

impl Targets {
    /// No target known yet; at most `cap` tracked.
    pub fn new(rules: Rules, cap: usize) -> Targets {
        let cap = NonZeroUsize::new(cap.max(1)).expect("at least one");
        Targets {
            map: LruCache::with_hasher(cap, FxBuildHasher),
            rules,
            down: 0,
            dropped: 0,
            strikes: FxHashMap::default(),
        }
    }

    /// New rules (a config reload); what is known stays.
    pub fn set_rules(&mut self, rules: Rules) {
        self.rules = rules;
    }

    /// Targets known.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Targets that are down.
    pub fn down_count(&self) -> usize {
        self.down
    }

    /// Targets forgotten to stay within the cap.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    fn since(&self, now: Instant) -> Instant {
        now.checked_sub(self.rules.contrast_window).unwrap_or(now)
    }

    /// Whether a use of `target` may go ahead now. Brings a down target whose cooldown
    /// ended to its trial.
    pub fn gate(&mut self, target: &str, now: Instant) -> Gate {
        let base = self.rules.target.cooldown.base;
        let Some(t) = self.map.get_mut(target) else {
            return Gate::Open;
        };
        let Some(d) = t.down.as_mut() else {
            return Gate::Open;
        };
        let h = &mut d.health;
        if h.state == State::Cooling && h.deadline.is_none_or(|dl| dl <= now) {
            h.apply(Input::DeadlinePassed, &self.rules.target, now, 0.0);
        }
        match (h.state, h.claimed) {
            (State::ProbeAllowed, false) => Gate::Trial,
            // The trial is out: its answer is at most a dial away.
            (State::ProbeAllowed, true) => Gate::Down { retry_after: base },
            _ => Gate::Down {
                retry_after: h
                    .deadline
                    .map_or(base, |dl| dl.saturating_duration_since(now)),
            },
        }
    }

    /// Admit one use of `target`: the gate, the trial's claim and the endpoints to pass
    /// over, in one lookup (the lease path).
    pub fn admit(&mut self, target: &str, now: Instant) -> Admission {
        let since = self.since(now);
        let base = self.rules.target.cooldown.base;
        let policy = &self.rules.target;
        let Some(t) = self.map.get_mut(target) else {
            return Admission::Go { avoid: Vec::new() };
        };
        let Some(d) = t.down.as_mut() else {
            let avoid = t
                .pending
                .iter()
                .filter(|p| p.at >= since)
                .map(|p| p.endpoint)
                .collect();
            return Admission::Go { avoid };
        };
        let h = &mut d.health;
        if h.state == State::Cooling && h.deadline.is_none_or(|dl| dl <= now) {
            h.apply(Input::DeadlinePassed, policy, now, 0.0);
        }
        match (h.state, h.claimed) {
            (State::ProbeAllowed, false)
                if h.apply(Input::Claim, policy, now, 0.0) == Step::Claimed =>
            {
                Admission::Trial
            }
            (State::ProbeAllowed, _) => Admission::Down { retry_after: base },
            _ => Admission::Down {
                retry_after: h
                    .deadline
                    .map_or(base, |dl| dl.saturating_duration_since(now)),
            },
        }
    }

    /// Claim the single trial of a down target whose cooldown ended: of any number of
    /// callers at the same instant, exactly one gets `true`.
    pub fn claim_trial(&mut self, target: &str, now: Instant) -> bool {
        if self.gate(target, now) != Gate::Trial {
            return false;
        }
        let policy = &self.rules.target;
        self.map
            .get_mut(target)
            .and_then(|t| t.down.as_mut())
            .is_some_and(|d| d.health.apply(Input::Claim, policy, now, 0.0) == Step::Claimed)
    }

    /// The trial ended without an answer about the target: the next use is the trial.
    pub fn abandon_trial(&mut self, target: &str, now: Instant) {
        let policy = &self.rules.target;
        if let Some(d) = self.map.peek_mut(target).and_then(|t| t.down.as_mut()) {
            d.health.apply(Input::Abandon, policy, now, 0.0);
        }
    }

    /// Endpoint `e` failed `target` earlier without contrast: prefer other endpoints for
    /// it for now.
    #[cfg(test)]
    pub fn prefers_other(&self, target: &str, e: EndpointId, now: Instant) -> bool {
        let since = self.since(now);
        self.map
            .peek(target)
            .is_some_and(|t| t.pending.iter().any(|p| p.endpoint == e && p.at >= since))
    }

    /// Endpoints whose failures on `target` wait for contrast: a lease for it prefers
    /// the others. Empty (and no allocation) for nearly every target.
    #[cfg(test)]
    pub fn avoid(&self, target: &str, now: Instant) -> Vec<EndpointId> {
        let since = self.since(now);
        match self.map.peek(target) {
            Some(t) if !t.pending.is_empty() => t
                .pending
                .iter()
                .filter(|p| p.at >= since)
                .map(|p| p.endpoint)
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Endpoint `e` reached `target`: a tunnel opened through it, or an answer came back.
    pub fn reached(&mut self, target: &str, e: EndpointId, now: Instant) -> Reached {
        let since = self.since(now);
        let escalate_after = self.rules.escalate_after;
        self.strikes.remove(&e);
        let (t, evicted) = self.entry(target);
        let mut out = Reached::default();
        t.note_reached(e, now);
        if let Some(d) = t.down.take() {
            out.up = Some(now.saturating_duration_since(d.since));
        }
        out.confirmed = std::mem::take(&mut t.pending)
            .into_iter()
            .filter(|p| p.endpoint != e && p.at >= since)
            .collect();
        let refused: Vec<EndpointId> = std::mem::take(&mut t.refused)
            .into_iter()
            .filter(|&(id, at)| id != e && at >= since)
            .map(|(id, _)| id)
            .collect();
        if out.up.is_some() {
            self.down -= 1;
        }
        self.evicted(evicted);
        // Failures that this success shows to be their endpoint's own count towards
        // escalation, as if the contrast had been there when they happened.
        let h = key_hash(target);
        let late = out
            .confirmed
            .iter()
            .filter(|p| !p.probe)
            .map(|p| p.endpoint);
        for id in late.chain(refused) {
            if self.strike(id, h, escalate_after) && !out.escalated.contains(&id) {
                out.escalated.push(id);
            }
        }
        out
    }

    /// One more distinct target `e` failed that others reach; true when that escalates.
    fn strike(&mut self, e: EndpointId, target_hash: u64, escalate_after: u32) -> bool {
        let s = self.strikes.entry(e).or_default();
        if !s.contains(&target_hash) {
            s.push(target_hash);
        }
        if escalates(s.len(), escalate_after) {
            self.strikes.remove(&e);
            return true;
        }
        false
    }

    /// Any success through `e` (a lease report, a probe): it reaches something, so its
    /// failures on targets others reach start counting again from zero.
    pub fn endpoint_succeeded(&mut self, e: EndpointId) {
        self.strikes.remove(&e);
    }

    /// Forget a removed endpoint.
    pub fn remove_endpoint(&mut self, e: EndpointId) {
        self.strikes.remove(&e);
    }

    /// Judge a failure of `class` through `e` on `target`. `alone`: the pool has no other
    /// endpoint to contrast with; `trial`: the use was the target's single trial;
    /// `jitter` in [-1, 1] for the target's cooldown.
    #[allow(clippy::too_many_arguments)]
    pub fn failed(
        &mut self,
        target: &str,
        e: EndpointId,
        class: Class,
        failure: &Failure,
        probe: bool,
        alone: bool,
        trial: bool,
        now: Instant,
        jitter: f64,
    ) -> Judged {
        let since = self.since(now);
        let rules = self.rules.clone();
        let (t, evicted) = self.entry(target);
        t.pending.retain(|p| p.at >= since && p.endpoint != e);
        let failing = t.pending.len() as u32 + 1;
        let ev = Evidence {
            target_down: t.down.is_some(),
            reached_by_other: t.reached_by_other(e, since),
            alone,
            failing,
            down_after: rules.down_after,
        };
        let verdict = judge(class, probe, ev);
        let mut judged = Judged {
            verdict,
            escalate: false,
            down_for: None,
            absolved: Vec::new(),
        };
        match verdict.blame {
            Blame::Pending => t.pending.push(Pending {
                endpoint: e,
                at: now,
                reason: failure.reason.unwrap_or(Reason::UpstreamUnreachable),
                phase: failure.phase,
                probe,
            }),
            Blame::Target if verdict.target_goes_down => {
                (judged.down_for, judged.absolved) = t.go_down(failure, &rules.target, now, jitter);
            }
            Blame::Target if trial => {
                judged.down_for = t.trial_failed(failure, &rules.target, now, jitter);
            }
            Blame::Target => {}
            Blame::Pair | Blame::Endpoint => {
                if class == Class::Refused && !verdict.contrasted {
                    t.refused_by(e, now);
                }
                if trial {
                    // The failure was the endpoint's (or its pair's): the target's trial
                    // got no answer about the target.
                    t.give_back_trial(&rules.target, now);
                }
            }
        }
        if verdict.target_goes_down {
            self.down += 1;
        }
        if verdict.contrasted {
            judged.escalate = self.strike(e, key_hash(target), rules.escalate_after);
        }
        self.evicted(evicted);
        judged
    }

    /// The targets that are down, soonest trial first, at most `limit`.
    pub fn down_list(&self, now: Instant, limit: usize) -> Vec<DownTarget> {
        if self.down == 0 {
            return Vec::new();
        }
        let mut v: Vec<DownTarget> = self
            .map
            .iter()
            .filter_map(|(k, t)| {
                let d = t.down.as_ref()?;
                let h = &d.health;
                Some(DownTarget {
                    target: k.to_string(),
                    retry_after: match h.state {
                        State::Cooling => h
                            .deadline
                            .map_or(Duration::ZERO, |dl| dl.saturating_duration_since(now)),
                        _ => Duration::ZERO,
                    },
                    streak: h.streak,
                    reason: h.reason,
                    phase: h.phase,
                    down_for: now.saturating_duration_since(d.since),
                })
            })
            .collect();
        v.sort_by(|a, b| (a.retry_after, &a.target).cmp(&(b.retry_after, &b.target)));
        v.truncate(limit);
        v
    }

    /// The time until the trial of `target`, when it is down.
    pub fn down_for(&self, target: &str, now: Instant) -> Option<Duration> {
        let d = self.map.peek(target)?.down.as_ref()?;
        let h = &d.health;
        Some(match (h.state, h.deadline) {
            (State::Cooling, Some(dl)) => dl.saturating_duration_since(now),
            _ => self.rules.target.cooldown.base,
        })
    }

    /// The entry of `target`, created if new; and a target dropped to make room.
    fn entry(&mut self, target: &str) -> (&mut Target, Option<Target>) {
        let mut evicted = None;
        if !self.map.contains(target) {
            if let Some((_, old)) = self.map.push(target.into(), Target::default()) {
                evicted = Some(old);
            }
        }
        let t = self
            .map
            .get_mut(target)
            .expect("just made sure it is there");
        (t, evicted)
    }

    fn evicted(&mut self, old: Option<Target>) {
        if let Some(old) = old {
            self.dropped += 1;
            if old.down.is_some() {
                self.down -= 1;
            }
        }
    }
}

fn key_hash(target: &str) -> u64 {
    FxBuildHasher.hash_one(target)
}

#[cfg(test)]
mod tests;
