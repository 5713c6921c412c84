//! Where each endpoint of a pool is filed by its state: counted, and queued where the
//! next step looks for it (available: the ready queues; cooling: by deadline; waiting for
//! its recovery attempt: in arrival order; its trial held by another daemon: by when that
//! claim lapses). `membership` files an endpoint on every change of state and takes it
//! out before one. Besides that, only the ready queues are reached from outside (through
//! `ready()`, whose own methods keep them sound: a selection's pass, a move between
//! levels when live leases change) and the trials held elsewhere (the fleet's claims).

use std::collections::BTreeSet;

use tokio::time::Instant;

use crate::endpoint::EndpointId;
use crate::health::State;

use super::ready::Ready;
use super::state_counts::StateCounts;

#[derive(Default)]
pub(super) struct StateIndex {
    counts: StateCounts,
    /// Available endpoints, by live leases, round robin within a count.
    ready: Ready,
    /// Cooling endpoints by deadline.
    cooling: BTreeSet<(Instant, EndpointId)>,
    /// Unclaimed `probe_allowed` endpoints in arrival order.
    trials: BTreeSet<(u64, EndpointId)>,
    /// Trials other daemons hold, by when their claims lapse (docs/fleet.md).
    remote: BTreeSet<(Instant, EndpointId)>,
}

/// What an endpoint is filed under: its state and the keys of the queue it is in.
pub(super) struct Place {
    pub(super) id: EndpointId,
    pub(super) slot: u32,
    pub(super) state: State,
    /// Available: its live leases (its level) and its queue generation.
    pub(super) leases: u32,
    pub(super) gen: u64,
    /// Cooling: its deadline.
    pub(super) deadline: Option<Instant>,
    /// Waiting for its recovery attempt: its arrival number, and whether the attempt is
    /// claimed (then it is not queued).
    pub(super) pa_seq: u64,
    pub(super) claimed: bool,
}

impl StateIndex {
    /// File an endpoint that is at `at` now.
    pub(super) fn enter(&mut self, at: &Place) {
        self.counts.add(at.state);
        match at.state {
            State::Available => self.ready.push(at.leases, at.slot, at.gen),
            State::Cooling => {
                if let Some(d) = at.deadline {
                    self.cooling.insert((d, at.id));
                }
            }
            State::ProbeAllowed => {
                if !at.claimed {
                    self.trials.insert((at.pa_seq, at.id));
                }
            }
            State::Disabled => {}
        }
    }

    /// Take out an endpoint filed at `at`, before it changes.
    pub(super) fn leave(&mut self, at: &Place) {
        self.counts.remove(at.state);
        match at.state {
            State::Available => self.ready.forget(at.leases, at.slot, at.gen),
            State::Cooling => {
                if let Some(d) = at.deadline {
                    self.cooling.remove(&(d, at.id));
                }
            }
            State::ProbeAllowed => {
                self.trials.remove(&(at.pa_seq, at.id));
                self.remote.retain(|&(_, r)| r != at.id);
            }
            State::Disabled => {}
        }
    }

    pub(super) fn counts(&self) -> &StateCounts {
        &self.counts
    }

    /// The ready queues, for a selection's pass and for an endpoint whose live leases
    /// changed (it moves level).
    pub(super) fn ready(&mut self) -> &mut Ready {
        &mut self.ready
    }

    /// Cooling endpoints, soonest deadline first.
    pub(super) fn cooling(&self) -> impl Iterator<Item = (Instant, EndpointId)> + '_ {
        self.cooling.iter().copied()
    }

    /// The cooling endpoint whose deadline is soonest.
    pub(super) fn next_cooling(&self) -> Option<(Instant, EndpointId)> {
        self.cooling.first().copied()
    }

    /// The endpoint that has waited longest for its recovery attempt.
    pub(super) fn oldest_trial(&self) -> Option<EndpointId> {
        self.trials.first().map(|&(_, id)| id)
    }

    /// Another daemon holds `id`'s trial until `until`.
    pub(super) fn held_remotely(&mut self, id: EndpointId, until: Instant) {
        self.remote.insert((until, id));
    }

    /// Whether another daemon holds `id`'s trial.
    pub(super) fn is_held_remotely(&self, id: EndpointId) -> bool {
        self.remote.iter().any(|&(_, r)| r == id)
    }

    /// The next trial held elsewhere whose claim lapsed by `now`, no longer held.
    pub(super) fn lapsed_remote(&mut self, now: Instant) -> Option<EndpointId> {
        let &(d, id) = self.remote.first()?;
        if d > now {
            return None;
        }
        self.remote.pop_first();
        Some(id)
    }

    /// The soonest a cooldown ends or a claim held elsewhere lapses.
    pub(super) fn next_due(&self) -> Option<Instant> {
        let c = self.cooling.first().map(|(d, _)| *d);
        let r = self.remote.first().map(|(d, _)| *d);
        c.into_iter().chain(r).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(id: EndpointId, state: State, t: Instant) -> Place {
        Place {
            id,
            slot: id as u32,
            state,
            leases: 0,
            gen: id as u64,
            deadline: (state == State::Cooling).then_some(t),
            pa_seq: id as u64,
            claimed: false,
        }
    }

    /// Each state files the endpoint where its next step looks, and `leave` undoes
    /// `enter` exactly.
    #[test]
    fn enter_and_leave_by_state() {
        let t = Instant::now();
        let mut x = StateIndex::default();
        let places = [
            at(1, State::Available, t),
            at(2, State::Cooling, t + std::time::Duration::from_secs(5)),
            at(3, State::ProbeAllowed, t),
            at(4, State::Disabled, t),
        ];
        for p in &places {
            x.enter(p);
        }
        assert_eq!(x.counts().in_order(), [1, 1, 1, 1]);
        assert_eq!(x.cooling().map(|(_, id)| id).collect::<Vec<_>>(), [2]);
        assert_eq!(x.oldest_trial(), Some(3));
        assert_eq!(x.next_due(), Some(t + std::time::Duration::from_secs(5)));
        x.held_remotely(3, t + std::time::Duration::from_secs(1));
        assert!(x.is_held_remotely(3));
        assert_eq!(x.next_due(), Some(t + std::time::Duration::from_secs(1)));
        assert_eq!(x.lapsed_remote(t), None, "not lapsed yet");
        for p in &places {
            x.leave(p);
        }
        assert_eq!(x.counts().total(), 0);
        assert_eq!(x.cooling().count(), 0);
        assert_eq!(x.oldest_trial(), None);
        assert!(
            !x.is_held_remotely(3),
            "leaving probe_allowed ends a remote hold"
        );
        assert_eq!(x.next_due(), None);
    }

    #[test]
    fn a_claimed_trial_is_counted_not_queued_and_remote_holds_lapse_in_order() {
        let t = Instant::now();
        let mut x = StateIndex::default();
        let mut p = at(7, State::ProbeAllowed, t);
        p.claimed = true;
        x.enter(&p);
        assert_eq!(x.counts().of(State::ProbeAllowed), 1);
        assert_eq!(x.oldest_trial(), None);
        x.held_remotely(7, t + std::time::Duration::from_secs(2));
        x.held_remotely(8, t + std::time::Duration::from_secs(1));
        let later = t + std::time::Duration::from_secs(3);
        assert_eq!(x.lapsed_remote(later), Some(8));
        assert_eq!(x.lapsed_remote(later), Some(7));
        assert_eq!(x.lapsed_remote(later), None);
    }
}
