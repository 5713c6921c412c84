//! The views of `Destinations` (one per destination, their slots reused) and the cap on
//! the pairs held: where a pair is put, taken from and found.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use tracing::warn;

use crate::endpoint::EndpointId;
use crate::health::{State, Step};

use super::pair::{Pair, NONE};
use super::{DestinationError, Destinations, PairStep, View};

impl Destinations {
    pub(super) fn view(&self, slot: u32) -> Option<&View> {
        self.views.get(slot as usize).and_then(Option::as_ref)
    }

    pub(super) fn slot_for(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.names.get(name) {
            return i;
        }
        let view = View {
            name: name.into(),
            pairs: FxHashMap::default(),
            trials: VecDeque::new(),
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.views[i as usize] = Some(view);
                i
            }
            None => {
                self.views.push(Some(view));
                (self.views.len() - 1) as u32
            }
        };
        self.names.insert(name.into(), i);
        i
    }

    pub(super) fn drop_if_empty(&mut self, slot: u32) {
        if self.view(slot).is_some_and(|v| v.pairs.is_empty()) {
            if let Some(v) = self.views[slot as usize].take() {
                self.names.remove(&v.name);
                self.free.push(slot);
            }
        }
    }

    /// Remove a pair from its view and the deadline queue (its trial item goes stale).
    pub(super) fn take(&mut self, slot: u32, id: EndpointId) -> Option<Pair> {
        let v = self.views.get_mut(slot as usize)?.as_mut()?;
        let p = v.pairs.remove(&id)?;
        if p.deadline != NONE {
            self.deadlines.remove(&(p.deadline, slot, id));
        }
        self.pairs -= 1;
        if p.state != State::Available {
            self.banned -= 1;
        }
        Some(p)
    }

    /// Insert a pair; `queue_trial`: it was not already waiting in the trial queue.
    pub(super) fn put(&mut self, slot: u32, id: EndpointId, mut p: Pair, queue_trial: bool) {
        let v = self.views[slot as usize].as_mut().expect("live view");
        match p.state {
            // A cooldown, or a trial held after its tunnel closed (`hold`).
            State::Cooling | State::ProbeAllowed
                if p.deadline != NONE && (p.claimed || p.state == State::Cooling) =>
            {
                self.deadlines.insert((p.deadline, slot, id));
            }
            State::ProbeAllowed if !p.claimed => {
                // A hold that ended gives the trial back without a deadline.
                p.deadline = NONE;
                if queue_trial {
                    v.trials.push_back(id);
                }
            }
            _ => {}
        }
        if p.state != State::Available {
            self.banned += 1;
        }
        self.pairs += 1;
        v.pairs.insert(id, p);
        if self.pairs < self.cap {
            self.warned = false;
        }
    }

    /// Whether one more pair fits; warns once each time the cap is reached.
    pub(super) fn room(&mut self) -> bool {
        if self.pairs < self.cap {
            return true;
        }
        if !self.warned {
            self.warned = true;
            warn!(
                pool = %self.pool,
                cap = self.cap,
                "destination pair cap reached: new per-destination bans are not recorded \
                 (those endpoints stay usable for their destination) until pairs recover"
            );
        }
        false
    }

    pub(super) fn cap_error(&self) -> DestinationError {
        DestinationError::CapReached {
            pool: self.pool.clone(),
            cap: self.cap,
        }
    }

    pub(super) fn refused(&self) -> PairStep {
        PairStep {
            step: Step::Refused,
            state: State::Available,
            writes: Vec::new(),
        }
    }
}
