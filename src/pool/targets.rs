//! What one pool knows about each target (`host:port`): which endpoints failed it without
//! contrast yet, which refused it, and whether it is down — with its own cooldown and
//! single trial (`down`), run by the same state machine as endpoints. Pure logic: the
//! caller passes the time in. Bounded: at most `cap` targets, the least recently used
//! dropped, and every operation is O(1) (a hash lookup and lists of a few items).
//!
//! Contrast comes only from a success through another endpoint AFTER a failure: a
//! success from before it cannot tell "this endpoint cannot reach the target" from "the
//! target went away since" (docs/blame.md, "Contrast").
//!
//! Target state is per process and not persisted: after a restart the first requests
//! simply find out again.

use std::collections::BTreeSet;
use std::num::NonZeroUsize;
use std::time::Duration;

use lru::LruCache;
use rustc_hash::FxBuildHasher;
use tokio::time::Instant;

use crate::endpoint::EndpointId;
use crate::health::blame::{judge, Blame, Class, Evidence, Rules, Verdict};
use crate::health::{Failure, Phase, Reason, State};

mod down;
mod strikes;

use down::{Down, Stand};
use strikes::{key_hash, Strikes, MAX_STRUCK};

/// Targets tracked per pool at most (about 200 bytes each).
pub const DEFAULT_MAX_TARGETS: usize = 65_536;

/// How long a target's trial is held when the pool says nothing else (the default probe
/// `timeout`).
pub const DEFAULT_TRIAL_HOLD: Duration = Duration::from_secs(10);

/// What a lease for a target may do, decided in one lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Go ahead, passing over these endpoints first (they just failed the target, pending
    /// contrast; empty, without an allocation, for nearly every target).
    Go { avoid: Vec<EndpointId> },
    /// The target is down and this lease is its single trial: the claim's generation,
    /// which its report or release names.
    Trial(u32),
    /// The target is down: answer at once, dialing nothing. `trial_out`: its trial is
    /// under way, and `retry_after` is when it is handed back at the latest.
    /// `certificate`: it is down because its certificate failed verification through
    /// every endpoint that tried it.
    Down {
        retry_after: Duration,
        trial_out: bool,
        certificate: bool,
    },
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
    /// `Unreachable` or `Certificate`.
    pub class: Class,
    /// A certificate that chains to no trusted root (`Failure::substituted`).
    pub substituted: bool,
}

impl Pending {
    /// Once another endpoint reached the target, the failure counts against the endpoint
    /// itself rather than its pair for the target: a probe's (the probe URL is the pool's
    /// requirement), or a certificate from no trusted chain while others verify the
    /// origin's (the proxy presents its own: it tampers with TLS, for every site). A
    /// certificate of a trusted chain that failed otherwise (expired, another name) may be
    /// what one region of a CDN serves: its pair's.
    pub fn endpoint_wide(&self) -> bool {
        self.probe || (self.class == Class::Certificate && self.substituted)
    }

    /// The failure to apply once another endpoint reached the target.
    pub fn failure(&self, by: EndpointId) -> Failure {
        let detail = match (self.class, self.substituted) {
            (Class::Certificate, true) => format!("endpoint {by} verified the origin's certificate after a certificate of no trusted chain came through this endpoint: this proxy presents a certificate that is not the origin's (it tampers with TLS)"),
            (Class::Certificate, false) => format!("endpoint {by} verified the origin's certificate after it failed verification through this endpoint"),
            _ => format!("endpoint {by} reached the target after this endpoint failed to"),
        };
        Failure {
            reason: Some(self.reason),
            phase: self.phase,
            detail: Some(detail),
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

/// One failure to judge: through which endpoint, of what class, and what its use held.
#[derive(Debug, Clone, Copy)]
pub struct Failed<'a> {
    pub endpoint: EndpointId,
    pub class: Class,
    pub failure: &'a Failure,
    /// A probe's failure: once confirmed it is the endpoint's, not a pair's.
    pub probe: bool,
    /// The pool has no other endpoint to contrast with.
    pub alone: bool,
    /// The use held the target's trial, by the claim's generation.
    pub trial: Option<u32>,
    /// The use was the trial of the endpoint's own pair for the target (it cooled when
    /// another endpoint reached the target after this one failed it).
    pub pair_trial: bool,
}

/// The decision on one failure, and what it changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    pub verdict: Verdict,
    /// The target went down with this failure (after `down_after` endpoints failed it),
    /// or its trial failed: how long until the next trial.
    pub down_for: Option<Duration>,
    /// Endpoints whose pending failures on the target became the target's.
    pub absolved: Vec<EndpointId>,
}

/// What `clear` (an operator's `enable --target`) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cleared {
    /// It was down (for this long).
    pub was_down: Option<Duration>,
}

#[derive(Debug, Default)]
struct Target {
    pending: Vec<Pending>,
    /// Endpoints that refused it (their policy): a later reach through another endpoint
    /// makes each refusal count towards escalation.
    refused: Vec<(EndpointId, Instant)>,
    /// Endpoints holding a strike on it (the most recent `MAX_STRUCK`), so that it can
    /// take them back.
    struck: Vec<EndpointId>,
    down: Option<Box<Down>>,
}

impl Target {
    /// `e` refused it: kept for a later contrast (the most recent `MAX_REFUSALS`).
    fn refused_by(&mut self, e: EndpointId, now: Instant) {
        self.refused.retain(|&(id, _)| id != e);
        if self.refused.len() >= MAX_REFUSALS {
            self.refused.remove(0);
        }
        self.refused.push((e, now));
    }

    /// `e` holds a strike on it now; the endpoint pushed out of the list, if any, must
    /// have its strike taken back.
    fn struck_by(&mut self, e: EndpointId) -> Option<EndpointId> {
        if self.struck.contains(&e) {
            return None;
        }
        let out = (self.struck.len() >= MAX_STRUCK).then(|| self.struck.remove(0));
        self.struck.push(e);
        out
    }
}

/// The targets of one pool.
pub struct Targets {
    map: LruCache<Box<str>, Target, FxBuildHasher>,
    rules: Rules,
    /// How long a trial is held at most, whatever the use that took it.
    hold: Duration,
    /// Trials out, by when they are handed back (an item is stale once its claim ended).
    holds: BTreeSet<(Instant, Box<str>)>,
    down: usize,
    dropped: u64,
    strikes: Strikes,
}

impl Targets {
    /// No target known yet; at most `cap` tracked.
    pub fn new(rules: Rules, cap: usize) -> Targets {
        let cap = NonZeroUsize::new(cap.max(1)).expect("at least one");
        Targets {
            map: LruCache::with_hasher(cap, FxBuildHasher),
            rules,
            hold: DEFAULT_TRIAL_HOLD,
            holds: BTreeSet::new(),
            down: 0,
            dropped: 0,
            strikes: Strikes::default(),
        }
    }

    /// New rules (a config reload); what is known stays.
    pub fn set_rules(&mut self, rules: Rules) {
        self.rules = rules;
    }

    /// How long a trial is held at most (the pool's probe `timeout`); a claim out keeps
    /// the hold it was given.
    pub fn set_trial_hold(&mut self, hold: Duration) {
        self.hold = hold;
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

    /// Admit one use of `target`: the gate, the trial's claim and the endpoints to pass
    /// over, in one lookup (the lease path).
    pub fn admit(&mut self, target: &str, now: Instant) -> Admission {
        let since = self.since(now);
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
        if let Some(c) = d.claim(policy, self.hold, now) {
            self.holds.insert((c.until, target.into()));
            return Admission::Trial(c.gen);
        }
        let certificate = d.certificate();
        let (retry_after, trial_out) = match d.stand(policy, now) {
            Stand::TrialOut(left) => (left, true),
            Stand::Cooling(left) => (left, false),
            // Claimed above whenever it was due.
            Stand::TrialDue => (policy.cooldown.base, true),
        };
        Admission::Down {
            retry_after,
            trial_out,
            certificate,
        }
    }

    /// The trial of generation `gen` ended without an answer about the target: the next
    /// use is the trial. Whether that was the trial out (not one handed back already).
    pub fn abandon_trial(&mut self, target: &str, gen: u32, now: Instant) -> bool {
        let policy = &self.rules.target;
        self.map
            .peek_mut(target)
            .and_then(|t| t.down.as_mut())
            .is_some_and(|d| d.give_back(gen, policy, now))
    }

    /// Hand back every trial held past its hold at `now`: the targets whose trial went
    /// back (their next use is the trial again).
    pub fn lapse(&mut self, now: Instant) -> Vec<Box<str>> {
        let mut out = Vec::new();
        while let Some((until, _)) = self.holds.first() {
            if *until > now {
                break;
            }
            let (until, key) = self.holds.pop_first().expect("just seen");
            let policy = &self.rules.target;
            let Some(d) = self.map.peek_mut(&key).and_then(|t| t.down.as_mut()) else {
                continue;
            };
            // Stale unless the claim out now is the one this item was made for.
            match d.claim_out() {
                Some(c) if c.until == until && d.give_back(c.gen, policy, now) => out.push(key),
                _ => {}
            }
        }
        out
    }

    /// When the soonest trial out is handed back if nothing decides it.
    pub fn next_lapse(&self) -> Option<Instant> {
        self.holds.first().map(|(t, _)| *t)
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
    /// the others.
    #[cfg(test)]
    pub fn avoid(&self, target: &str, now: Instant) -> Vec<EndpointId> {
        let since = self.since(now);
        match self.map.peek(target) {
            Some(t) => t
                .pending
                .iter()
                .filter(|p| p.at >= since)
                .map(|p| p.endpoint)
                .collect(),
            None => Vec::new(),
        }
    }

    /// How many escalation strikes `e` holds.
    #[cfg(test)]
    pub fn strikes_of(&self, e: EndpointId) -> usize {
        self.strikes.of(e)
    }

    /// Endpoint `e` reached `target` and its certificate verified (an answer came back):
    /// see [`Targets::reached_as`].
    pub fn reached(&mut self, target: &str, e: EndpointId, now: Instant) -> Reached {
        self.reached_as(target, e, now, true)
    }

    /// Endpoint `e` reached `target`: a tunnel opened through it, or an answer came back.
    /// What failed it through other endpoints within `contrast_window` before this is now
    /// known to be theirs — but a certificate failure only when this reach `verified`
    /// the origin's certificate (an answer over TLS, not a tunnel's open, not a TLS
    /// handshake that broke): until then it stays pending.
    pub fn reached_as(
        &mut self,
        target: &str,
        e: EndpointId,
        now: Instant,
        verified: bool,
    ) -> Reached {
        let since = self.since(now);
        let escalate_after = self.rules.escalate_after;
        self.strikes.clear(e);
        let (t, evicted) = self.entry(target);
        let mut out = Reached::default();
        if let Some(d) = t.down.take() {
            out.up = Some(now.saturating_duration_since(d.since));
        }
        let (confirmed, kept): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut t.pending)
            .into_iter()
            .filter(|p| p.endpoint != e && p.at >= since)
            .partition(|p| verified || p.class != Class::Certificate);
        out.confirmed = confirmed;
        t.pending = kept;
        let refused: Vec<EndpointId> = std::mem::take(&mut t.refused)
            .into_iter()
            .filter(|&(id, at)| id != e && at >= since)
            .map(|(id, _)| id)
            .collect();
        // Failures that this success shows to be their endpoint's own count towards
        // escalation. A probe's or a certificate's confirmed failure cools its endpoint
        // directly.
        let late = out
            .confirmed
            .iter()
            .filter(|p| !p.endpoint_wide())
            .map(|p| p.endpoint);
        let strikers: Vec<EndpointId> = late.chain(refused).collect();
        let mut pushed_out = Vec::new();
        for &id in &strikers {
            pushed_out.extend(t.struck_by(id));
        }
        if out.up.is_some() {
            self.down -= 1;
        }
        self.evicted(evicted);
        let h = key_hash(target);
        for id in pushed_out {
            self.strikes.take_back(id, h);
        }
        for id in strikers {
            if self.strikes.strike(id, h, escalate_after) && !out.escalated.contains(&id) {
                out.escalated.push(id);
            }
        }
        out
    }

    /// Any success through `e` (a lease report, a probe): it reaches something, so its
    /// failures on targets others reach start counting again from zero.
    pub fn endpoint_succeeded(&mut self, e: EndpointId) {
        self.strikes.clear(e);
    }

    /// Forget a removed endpoint.
    pub fn remove_endpoint(&mut self, e: EndpointId) {
        self.strikes.clear(e);
    }

    /// Judge a failure on `target`; `jitter` in [-1, 1] for the target's cooldown.
    pub fn failed(&mut self, target: &str, f: Failed<'_>, now: Instant, jitter: f64) -> Judged {
        let since = self.since(now);
        let rules = &self.rules;
        let (down_after, policy) = (rules.down_after, rules.target.clone());
        let e = f.endpoint;
        let (t, evicted) = self.entry(target);
        t.pending.retain(|p| p.at >= since && p.endpoint != e);
        let ev = Evidence {
            target_down: t.down.is_some(),
            pair_trial: f.pair_trial,
            alone: f.alone,
            failing: t.pending.len() as u32 + 1,
            down_after,
        };
        let verdict = judge(f.class, f.probe, ev);
        let mut judged = Judged {
            verdict,
            down_for: None,
            absolved: Vec::new(),
        };
        let trial = f
            .trial
            .filter(|&g| t.down.as_ref().is_some_and(|d| d.holds(g)));
        let mut took_back = Vec::new();
        match verdict.blame {
            Blame::Pending => t.pending.push(Pending {
                endpoint: e,
                at: now,
                reason: f.failure.reason.unwrap_or(Reason::UpstreamUnreachable),
                phase: f.failure.phase,
                probe: f.probe,
                class: f.class,
                substituted: f.failure.substituted,
            }),
            Blame::Target if verdict.target_goes_down => {
                let d = Down::new(f.failure, &policy, now, jitter);
                judged.down_for = d.health.cooldown;
                t.down = Some(Box::new(d));
                // Freed, not kept: most down targets never see another failure.
                judged.absolved = std::mem::take(&mut t.pending)
                    .into_iter()
                    .map(|p| p.endpoint)
                    .collect();
                // A target that turned out to be down counts towards nobody's escalation.
                took_back = std::mem::take(&mut t.struck);
                t.refused.clear();
            }
            Blame::Target => {
                if let (Some(g), Some(d)) = (trial, t.down.as_mut()) {
                    judged.down_for = d.trial_failed(g, f.failure, &policy, now, jitter);
                }
            }
            Blame::Pair | Blame::Endpoint => {
                if f.class == Class::Refused {
                    t.refused_by(e, now);
                }
                if let (Some(g), Some(d)) = (trial, t.down.as_mut()) {
                    // The failure was the endpoint's (or its pair's): the target's trial
                    // got no answer about the target.
                    d.give_back(g, &policy, now);
                }
            }
        }
        if verdict.target_goes_down {
            self.down += 1;
        }
        self.evicted(evicted);
        let h = key_hash(target);
        for id in took_back {
            self.strikes.take_back(id, h);
        }
        judged
    }

    /// `enable --target`: forget what is known of `target` (down, its trial, pending
    /// failures, refusals, the strikes it gave): the next use goes ahead as for a target
    /// never seen. `None` when the target is not known.
    pub fn clear(&mut self, target: &str, now: Instant) -> Option<Cleared> {
        let t = self.map.pop(target)?;
        let was_down = t
            .down
            .as_ref()
            .map(|d| now.saturating_duration_since(d.since));
        if was_down.is_some() {
            self.down -= 1;
        }
        let h = key_hash(target);
        for id in t.struck {
            self.strikes.take_back(id, h);
        }
        Some(Cleared { was_down })
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

    /// When `target` is down: the time until its trial (while its trial is out, until
    /// that trial is handed back at the latest).
    pub fn down_for(&self, target: &str, now: Instant) -> Option<Duration> {
        let d = self.map.peek(target)?.down.as_ref()?;
        let h = &d.health;
        Some(match (h.state, h.deadline, d.claim_out()) {
            (State::Cooling, Some(dl), _) => dl.saturating_duration_since(now),
            (_, _, Some(c)) => c.until.saturating_duration_since(now),
            _ => Duration::ZERO,
        })
    }

    /// The entry of `target`, created if new; and a target dropped to make room.
    fn entry(&mut self, target: &str) -> (&mut Target, Option<(Box<str>, Target)>) {
        let mut evicted = None;
        if !self.map.contains(target) {
            evicted = self.map.push(target.into(), Target::default());
        }
        let t = self
            .map
            .get_mut(target)
            .expect("just made sure it is there");
        (t, evicted)
    }

    fn evicted(&mut self, old: Option<(Box<str>, Target)>) {
        if let Some((key, old)) = old {
            self.dropped += 1;
            if old.down.is_some() {
                self.down -= 1;
            }
            // Forgotten: nothing can take its strikes back later, so they go now.
            let h = key_hash(&key);
            for id in old.struck {
                self.strikes.take_back(id, h);
            }
        }
    }
}

#[cfg(test)]
mod tests;
