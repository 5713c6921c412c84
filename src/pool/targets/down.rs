//! A target that is down: its own health (cooldown, streak) and its single trial, which
//! is held at most the pool's trial hold whatever the lease that took it (docs/blame.md,
//! "A target that is down"). Each claim of the trial has a generation, so that only the
//! use that holds the current claim decides it or gives it back.

use std::time::Duration;

use tokio::time::Instant;

use crate::health::{Failure, Health, Input, Policy, State, Step};

/// The claim of a down target's trial: its generation, and when it is handed back if
/// nothing decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Claim {
    pub(super) gen: u32,
    pub(super) until: Instant,
}

#[derive(Debug)]
pub(super) struct Down {
    pub(super) health: Health,
    pub(super) since: Instant,
    /// Generation of the last claim of the trial.
    gen: u32,
    /// The claim out now, if any.
    claim: Option<Claim>,
}

/// Where a down target stands for one use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stand {
    /// Its cooldown is over and nobody holds its trial.
    TrialDue,
    /// Its trial is out: handed back at the latest after this long.
    TrialOut(Duration),
    /// Cooling: its trial is due after this long.
    Cooling(Duration),
}

impl Down {
    /// Down now, after `failure`: its first cooldown starts.
    pub(super) fn new(failure: &Failure, policy: &Policy, now: Instant, jitter: f64) -> Down {
        let mut health = Health::new(State::Available);
        let input = Input::Failure {
            failure: failure.clone(),
            trial: false,
        };
        health.apply(input, policy, now, jitter);
        Down {
            health,
            since: now,
            gen: 0,
            claim: None,
        }
    }

    /// Where it stands at `now` (a cooldown that ended makes its trial due).
    pub(super) fn stand(&mut self, policy: &Policy, now: Instant) -> Stand {
        let h = &mut self.health;
        if h.state == State::Cooling && h.deadline.is_none_or(|dl| dl <= now) {
            h.apply(Input::DeadlinePassed, policy, now, 0.0);
        }
        match (h.state, self.claim) {
            (State::ProbeAllowed, None) => Stand::TrialDue,
            (State::ProbeAllowed, Some(c)) => {
                Stand::TrialOut(c.until.saturating_duration_since(now))
            }
            _ => Stand::Cooling(
                h.deadline
                    .map_or(policy.cooldown.base, |dl| dl.saturating_duration_since(now)),
            ),
        }
    }

    /// Claim its trial, held for `hold` at most: of any number of callers at the same
    /// instant, exactly one gets the claim.
    pub(super) fn claim(&mut self, policy: &Policy, hold: Duration, now: Instant) -> Option<Claim> {
        if self.stand(policy, now) != Stand::TrialDue
            || self.health.apply(Input::Claim, policy, now, 0.0) != Step::Claimed
        {
            return None;
        }
        self.gen = self.gen.wrapping_add(1);
        let c = Claim {
            gen: self.gen,
            until: now.checked_add(hold).unwrap_or(now),
        };
        self.claim = Some(c);
        Some(c)
    }

    /// Whether the claim of generation `gen` is the one out now.
    pub(super) fn holds(&self, gen: u32) -> bool {
        self.claim.is_some_and(|c| c.gen == gen)
    }

    /// The claim out now, if any.
    pub(super) fn claim_out(&self) -> Option<Claim> {
        self.claim
    }

    /// The trial of generation `gen` got no answer about the target: the next use is the
    /// trial. Whether it was the claim out now.
    pub(super) fn give_back(&mut self, gen: u32, policy: &Policy, now: Instant) -> bool {
        if !self.holds(gen) {
            return false;
        }
        self.claim = None;
        self.health.apply(Input::Abandon, policy, now, 0.0);
        true
    }

    /// The trial of generation `gen` failed the same way: the next, longer cooldown.
    pub(super) fn trial_failed(
        &mut self,
        gen: u32,
        failure: &Failure,
        policy: &Policy,
        now: Instant,
        jitter: f64,
    ) -> Option<Duration> {
        if !self.holds(gen) {
            return None;
        }
        self.claim = None;
        let input = Input::Failure {
            failure: failure.clone(),
            trial: true,
        };
        match self.health.apply(input, policy, now, jitter) {
            Step::Changed { .. } => self.health.cooldown,
            _ => None,
        }
    }
}
