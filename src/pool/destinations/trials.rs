//! A pair's single trial: claimed by compare-and-set (here, and against the other daemons
//! of a fleet), abandoned, held out while a tunnel's verdict is awaited.

use tokio::time::Instant;

use crate::endpoint::EndpointId;
use crate::event_kind::EventKind;
use crate::health::{Input, Policy, State, Step};
use crate::store::pairs::PairWrite;
use crate::store::NewEvent;

use super::pair::{self, NONE};
use super::{DestRef, Destinations, PairStep, Usable};

impl Destinations {
    /// Whether another daemon holds the pair's trial (claimed here, not by us, and
    /// lapsing at a deadline).
    pub fn claimed_remotely(&self, key: &str, id: EndpointId) -> bool {
        self.lookup(key)
            .and_then(|d| self.view(d.0))
            .and_then(|v| v.pairs.get(&id))
            .is_some_and(|p| {
                p.state == State::ProbeAllowed
                    && p.claimed
                    && p.epoch().is_none()
                    && p.deadline != NONE
            })
    }

    /// This daemon's confirmed claim of the pair's trial, if it holds one.
    pub fn our_claim(&self, key: &str, id: EndpointId) -> Option<crate::store::Epoch> {
        let d = self.lookup(key)?;
        let p = self.view(d.0)?.pairs.get(&id)?;
        p.claimed.then_some(p.epoch()).flatten()
    }

    /// The store confirmed the claim of the pair's trial: it is this daemon's, under
    /// `epoch`.
    pub fn claim_won(&mut self, key: &str, id: EndpointId, epoch: crate::store::Epoch) -> bool {
        let Some(d) = self.lookup(key) else {
            return false;
        };
        match self
            .views
            .get_mut(d.0 as usize)
            .and_then(Option::as_mut)
            .and_then(|v| v.pairs.get_mut(&id))
        {
            Some(p) if p.state == State::ProbeAllowed && p.claimed => {
                p.set_epoch(Some(epoch));
                true
            }
            _ => false,
        }
    }

    /// Another daemon holds the pair's trial: give up the claim taken in memory (the
    /// pair's row, read with the answer, then says how long theirs holds).
    pub fn claim_lost(&mut self, key: &str, id: EndpointId) {
        let Some(d) = self.lookup(key) else {
            return;
        };
        if let Some(mut p) = self.take(d.0, id) {
            if p.state == State::ProbeAllowed && p.epoch().is_none() {
                p.claimed = false;
            }
            self.put(d.0, id, p, true);
        }
    }

    /// Claim the trial of one pair by compare-and-set: of any number of callers at the
    /// same instant, exactly one gets `true`.
    /// The claim is taken in memory; the `Claim` write among the step's writes asks the
    /// store to confirm it (`hold`: how long it holds there), with the `trial_admitted`
    /// event written only if it does.
    pub fn try_claim(
        &mut self,
        d: DestRef,
        id: EndpointId,
        lease: Option<String>,
        hold: std::time::Duration,
        policy: &Policy,
        now: Instant,
    ) -> PairStep {
        let name = match self.view(d.0) {
            Some(v) => v.name.to_string(),
            None => return self.refused(),
        };
        let mut r = self.apply(&name, id, Input::Claim.into(), policy, now, 0.0);
        if r.step == Step::Claimed {
            r.writes.push(PairWrite::Claim(crate::store::Claim {
                on: crate::store::ClaimOn::Pair(id, name.clone()),
                hold,
                event: NewEvent {
                    endpoint: Some(id),
                    from: Some(State::ProbeAllowed),
                    to: Some(State::ProbeAllowed),
                    lease,
                    ..NewEvent::new(EventKind::TrialAdmitted)
                },
            }));
            if let Some(v) = self.views[d.0 as usize].as_mut() {
                v.trials.retain(|&e| e != id);
            }
        }
        r
    }

    /// Claim the oldest waiting trial of a destination whose endpoint `ok` accepts (the
    /// caller's endpoint-wide checks: available, under the lease cap).
    pub fn claim_trial(
        &mut self,
        d: DestRef,
        mut ok: impl FnMut(&Destinations, EndpointId) -> bool,
        lease: Option<String>,
        hold: std::time::Duration,
        policy: &Policy,
        now: Instant,
    ) -> Option<(EndpointId, PairStep)> {
        let mut i = 0;
        let mut found = None;
        loop {
            let v = self.views.get(d.0 as usize)?.as_ref()?;
            let Some(&id) = v.trials.get(i) else {
                break;
            };
            let waiting = v
                .pairs
                .get(&id)
                .is_some_and(|p| p.state == State::ProbeAllowed && !p.claimed);
            if !waiting {
                if let Some(v) = self.views[d.0 as usize].as_mut() {
                    v.trials.remove(i);
                }
            } else if ok(self, id) && self.usable(d, id) == Usable::Trial {
                // (not while another endpoint of its address holds the ban: one trial)
                found = Some(id);
                break;
            } else {
                i += 1;
            }
        }
        let id = found?;
        let r = self.try_claim(d, id, lease, hold, policy, now);
        (r.step == Step::Claimed).then_some((id, r))
    }

    /// The trial of a pair ended without an outcome: give the slot back.
    /// Only this daemon's own claim is given back (with an `Unclaim` write); another
    /// daemon's is not ours to end.
    pub fn abandon(
        &mut self,
        destination: &str,
        id: EndpointId,
        why: &str,
        lease: Option<String>,
        policy: &Policy,
        now: Instant,
    ) -> PairStep {
        let Some(epoch) = self.our_claim(destination, id) else {
            return self.refused();
        };
        let mut r = self.apply(destination, id, Input::Abandon.into(), policy, now, 0.0);
        if r.step == Step::Abandoned {
            r.writes.push(PairWrite::Unclaim(crate::store::Unclaim {
                on: crate::store::ClaimOn::Pair(id, destination.to_string()),
                epoch,
                event: NewEvent {
                    endpoint: Some(id),
                    from: Some(State::ProbeAllowed),
                    to: Some(State::ProbeAllowed),
                    detail: Some(why.to_string()),
                    lease,
                    ..NewEvent::new(EventKind::TrialAbandoned)
                },
            }));
        }
        r
    }

    /// Whether the pair (endpoint `id`, `key`) has its trial out: a report about the pair
    /// decides that trial, whoever claimed it.
    pub fn is_claimed(&self, key: &str, id: EndpointId) -> bool {
        self.lookup(key)
            .and_then(|d| self.view(d.0))
            .and_then(|v| v.pairs.get(&id))
            .is_some_and(|p| p.state == State::ProbeAllowed && p.claimed)
    }

    /// Keep a claimed trial out until `until`: the tunnel that carried it closed, and a
    /// report may still decide it (docs/blame.md, "What a tunnel proves"). Then it is
    /// given back. Returns false when the pair has no trial out.
    pub fn hold(&mut self, key: &str, id: EndpointId, until: Instant) -> bool {
        let Some(d) = self.lookup(key) else {
            return false;
        };
        let slot = d.0;
        let ticks = pair::ticks(self.origin, until);
        let Some(p) = self
            .views
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
            .and_then(|v| v.pairs.get_mut(&id))
            .filter(|p| p.state == State::ProbeAllowed && p.claimed)
        else {
            return false;
        };
        if p.deadline != NONE {
            self.deadlines.remove(&(p.deadline, slot, id));
        }
        p.deadline = ticks;
        self.deadlines.insert((ticks, slot, id));
        true
    }
}
