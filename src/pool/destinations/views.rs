//! The views of `Destinations` (one per destination, their slots reused) and the cap on
//! the pairs held: where a pair is put, taken from and found, and which pair gives way
//! at the cap — the one failed least recently, so that a new ban is never dropped for old
//! ones, and junk pairs (bogus hosts nobody uses again) go before what keeps failing.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use tracing::warn;

use crate::endpoint::EndpointId;
use crate::event_kind::EventKind;
use crate::health::{State, Step};
use crate::store::pairs::PairWrite;
use crate::store::NewEvent;

use super::pair::{Pair, NONE};
use super::{DestRef, DestinationError, Destinations, PairStep, View};

/// One failure in the order of failures: the pair it touched and its number then (an
/// item whose pair failed again since, or is gone, is stale).
pub(super) struct Failed {
    slot: u32,
    seq: u32,
    id: EndpointId,
}

/// Pairs whose trial is out passed over, at most, looking for one to forget.
const PASS_OVER: usize = 64;

impl Destinations {
    /// Whether the pair (`destination`, `id`) is held.
    pub(super) fn holds(&self, destination: &str, id: EndpointId) -> bool {
        self.lookup(destination)
            .and_then(|d| self.view(d.0))
            .is_some_and(|v| v.pairs.contains_key(&id))
    }

    /// The pair an input applies to, taken out of its view (a failure creates it, making
    /// room at the cap first — before the lookup: the pair forgotten may have been its
    /// destination's last): its slot, the pair, and the writes of a pair forgotten for
    /// it. `Err`: no pair, with why when the cap kept a new one out.
    pub(super) fn take_for(
        &mut self,
        destination: &str,
        id: EndpointId,
        creating: bool,
    ) -> Result<(u32, Pair, Vec<PairWrite>), Option<String>> {
        let mut writes = Vec::new();
        if creating && !self.holds(destination, id) && !self.room() {
            writes = self.make_room();
        }
        let slot = match self.lookup(destination) {
            Some(d) => d.0,
            None if creating => self.slot_for(destination),
            None => return Err(None),
        };
        match self.take(slot, id) {
            Some(p) => Ok((slot, p, writes)),
            None if creating && self.room() => Ok((slot, Pair::available(), writes)),
            None => {
                self.drop_if_empty(slot);
                Err(creating.then(|| self.cap_error().to_string()))
            }
        }
    }

    /// The pair (`slot`, `id`) failed now: its number in the order of failures.
    pub(super) fn touch(&mut self, slot: u32, id: EndpointId) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.failed.push_back(Failed {
            slot,
            seq: self.seq,
            id,
        });
        if self.failed.len() > 2 * self.pairs + 1024 {
            // Stale items are dropped in one pass once they are half: amortised O(1).
            let items = std::mem::take(&mut self.failed);
            self.failed = items.into_iter().filter(|f| self.current(f)).collect();
        }
        self.seq
    }

    fn current(&self, f: &Failed) -> bool {
        self.view(f.slot)
            .and_then(|v| v.pairs.get(&f.id))
            .is_some_and(|p| p.touched == f.seq)
    }

    /// Room for one new pair at the cap: the pair failed least recently is forgotten (one
    /// whose trial is out is passed over), its row deleted with the new pair's writes, so
    /// that memory and the database stay within the cap.
    pub(super) fn make_room(&mut self) -> Vec<PairWrite> {
        let mut passed = 0;
        while let Some(f) = self.failed.pop_front() {
            if !self.current(&f) {
                continue;
            }
            let v = self.views[f.slot as usize].as_ref().expect("current");
            if v.pairs[&f.id].claimed {
                self.failed.push_back(f);
                passed += 1;
                if passed > PASS_OVER {
                    break;
                }
                continue;
            }
            let name = v.name.to_string();
            let p = self.take(f.slot, f.id).expect("current");
            self.drop_if_empty(f.slot);
            return vec![self.forgotten(name, f.id, p)];
        }
        Vec::new()
    }

    /// The write of a pair forgotten at the cap: its row deleted, with a `state_changed`
    /// row saying why.
    fn forgotten(&self, destination: String, id: EndpointId, p: Pair) -> PairWrite {
        let detail = format!(
            "forgotten to make room for a new ban: pool {:?} holds the maximum of {} destination pairs and this one failed least recently",
            self.pool, self.cap
        );
        PairWrite::Delete {
            endpoint: id,
            destination,
            from: p.state,
            trial: None,
            event: NewEvent {
                endpoint: Some(id),
                from: Some(p.state),
                to: Some(State::Available),
                reason: p.reason,
                phase: p.phase,
                detail: Some(detail),
                ..NewEvent::new(EventKind::StateChanged)
            },
        }
    }

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
            // A new view: whatever was kept for a view of this number is not its own.
            lifted: self.next_tick(),
            changed: self.tick,
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
            // It may not come back banned (recovered, forgotten, enabled).
            self.lift(slot);
        }
        Some(p)
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// An exclusion of view `slot` may have ended: an endpoint the host refused may serve
    /// it again, so what a shortlist dropped for it must be looked at again.
    pub(super) fn lift(&mut self, slot: u32) {
        let t = self.next_tick();
        if let Some(Some(v)) = self.views.get_mut(slot as usize) {
            v.lifted = t;
            v.changed = t;
        }
    }

    /// As `lift`, for every view (an endpoint's address changed, or sharing ended): what
    /// decides `leasable` changed for every view too.
    pub(super) fn lift_all(&mut self) {
        self.lifted_all = self.next_tick();
    }

    /// Grows each time an exclusion begins or ends somewhere (and when a view is made):
    /// a shortlist is built at `tick()`.
    pub fn tick(&self) -> u64 {
        self.tick
    }

    /// When an exclusion of `d`'s host last ended, on the `tick()` count: a shortlist built
    /// before that may lack an endpoint that serves the host again.
    pub fn lifted(&self, d: DestRef) -> u64 {
        let own = self.view(d.0).map_or(u64::MAX, |v| v.lifted);
        own.max(self.lifted_all)
    }

    /// When anything that decides `leasable` for `d`'s host last changed, on the `tick()`
    /// count (an exclusion began or ended): an endpoint found leasable for the host at
    /// this value is leasable still while it stays the same.
    pub fn changed(&self, d: DestRef) -> u64 {
        let own = self.view(d.0).map_or(u64::MAX, |v| v.changed);
        own.max(self.lifted_all)
    }

    /// Insert a pair; `queue_trial`: it was not already waiting in the trial queue.
    pub(super) fn put(&mut self, slot: u32, id: EndpointId, mut p: Pair, queue_trial: bool) {
        let banned = p.state != State::Available;
        // An exclusion begins (or goes on under a new state): `changed`.
        let tick = match banned {
            true => self.next_tick(),
            false => self.tick,
        };
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
        if banned {
            self.banned += 1;
            v.changed = tick;
        }
        self.pairs += 1;
        v.pairs.insert(id, p);
        if self.pairs < self.cap {
            self.warned = false;
        }
        if banned {
            self.note_ban(slot, id);
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
                "destination pair cap reached: each new per-destination ban takes the place \
                 of the pair that failed least recently"
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
