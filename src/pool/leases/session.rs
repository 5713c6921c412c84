//! A session's lease (docs/leases.md, "Sticky sessions"): the endpoint of the highest
//! rendezvous weight for the key among those every daemon of a fleet agrees may serve it,
//! the next in order when this daemon cannot lease that one (its cap), waiting for it when
//! it was used for the host too recently (its IP is the session's).

use tokio::time::Instant;

use super::{Ask, Choice, Sticky};
use crate::config::Mode;
use crate::endpoint::EndpointId;
use crate::event_kind::EventKind;
use crate::health::{Input, State, Step};
use crate::pool::apply::Act;
use crate::pool::entries::Entry;
use crate::pool::pace::Check;
use crate::pool::sessions::{key_hash, outranks, weight, Bound};
use crate::pool::tag_index::carries;
use crate::pool::Pools;
use crate::store::Write;

/// A ranking of the pool for one key: the top, and the best this daemon can lease.
struct Ranked {
    top: (u64, EndpointId),
    here: Option<EndpointId>,
}

impl Pools {
    /// Whether every daemon would let `id` serve the lease's session: available, or (in
    /// `static-no-ping`, where a lease is the trial) waiting for its trial and unclaimed;
    /// fitting the lease's schemes and tags, its pairs for the place available. Leases,
    /// pacing and targets are each daemon's own: they only pick among these.
    fn agreed(&self, ask: &Ask, id: EndpointId, e: &Entry) -> bool {
        let state = match e.health.state {
            State::Available => true,
            State::ProbeAllowed => self.trials_by_lease(ask) && !e.health.claimed,
            State::Cooling | State::Disabled => false,
        };
        state
            && e.pool == ask.p
            && ask.want.fits(e)
            && carries(&e.tags, &ask.tags)
            && self.pools[ask.p].dests_usable(ask.views, id)
    }

    fn trials_by_lease(&self, ask: &Ask) -> bool {
        !self.frozen && !ask.want.no_trial && self.pools[ask.p].cfg.mode == Mode::StaticNoPing
    }

    /// Whether this daemon can lease `id` now: under its cap (a trial has none).
    fn leasable_here(&self, ask: &Ask, e: &Entry) -> bool {
        e.health.state == State::ProbeAllowed || ask.under_cap(e.leases)
    }

    /// Every endpoint of the pool ranked for key `k`: one pass.
    fn rank(&self, ask: &Ask, k: u64) -> Option<Ranked> {
        let mut top: Option<(u64, EndpointId)> = None;
        let mut here: Option<(u64, EndpointId)> = None;
        let above = |w: u64, id: EndpointId, best: Option<(u64, EndpointId)>| {
            best.is_none_or(|(bw, bid)| outranks(w, id, bw, bid))
        };
        for (&id, e) in self.entries.iter() {
            if e.pool != ask.p || !self.agreed(ask, id, e) {
                continue;
            }
            let w = weight(k, id);
            if above(w, id, top) {
                top = Some((w, id));
            }
            if above(w, id, here) && self.leasable_here(ask, e) {
                here = Some((w, id));
            }
        }
        Some(Ranked {
            top: top?,
            here: here.map(|(_, id)| id),
        })
    }

    /// The session's remembered ranking when it still holds: nothing that came into
    /// service since outranks its top, and its top (or, when this daemon cannot lease the
    /// top, the one it fell back to) still qualifies.
    fn remembered(&self, ask: &Ask, k: u64, b: &Bound) -> Option<EndpointId> {
        let mut joined = self.sessions.joins().since(b.seen)?;
        let outranked = joined.any(|j| {
            j != b.top
                && outranks(weight(k, j), j, b.top_weight, b.top)
                && self.entries.get(&j).is_some_and(|e| self.agreed(ask, j, e))
        });
        if outranked {
            return None;
        }
        let top = self.entries.get(&b.top)?;
        if !self.agreed(ask, b.top, top) {
            return None;
        }
        if self.leasable_here(ask, top) {
            return Some(b.top);
        }
        let fell = self.entries.get(&b.id)?;
        (b.id != b.top && self.agreed(ask, b.id, fell) && self.leasable_here(ask, fell))
            .then_some(b.id)
    }

    /// The endpoint of session `key` for this lease (see the module documentation).
    pub(super) fn session_choice(
        &mut self,
        ask: &Ask,
        key: &str,
        now: Instant,
        writes: &mut Vec<Write>,
    ) -> Sticky {
        let s = self.sessions.at(ask.p, key);
        let k = key_hash(key);
        let kept = self
            .sessions
            .bound(s)
            .and_then(|b| self.remembered(ask, k, &b));
        let id = match kept {
            Some(id) => {
                self.sessions.checked(s, id);
                id
            }
            None => {
                let Some(r) = self.rank(ask, k) else {
                    self.sessions.unbind(s);
                    return Sticky::None;
                };
                let Some(id) = r.here else {
                    return Sticky::None;
                };
                let b = Bound {
                    top: r.top.1,
                    top_weight: r.top.0,
                    id,
                    seen: self.sessions.joins().now(),
                };
                let entries = &self.entries;
                self.sessions.bind(s, b, |id| {
                    entries
                        .get(&id)
                        .is_some_and(|e| e.health.state == State::Available)
                });
                id
            }
        };
        let gate = self.pools[ask.p].pace.gate(ask.visit, now);
        if let Some(Check::Blocked(at)) = gate.map(|g| g.check(id)) {
            return Sticky::Paced(at);
        }
        let waiting = self
            .entries
            .get(&id)
            .is_some_and(|e| e.health.state == State::ProbeAllowed);
        if !waiting {
            return Sticky::Keep(Choice::plain(id, None));
        }
        // The session's endpoint waits for its trial: this lease is it.
        let ev = Act {
            kind: Some(EventKind::TrialAdmitted),
            lease: Some(self.upcoming_name()),
            hold: Some(ask.ttl),
            ..Default::default()
        };
        let (step, w) = self.apply(id, Input::Claim, now, ev);
        writes.extend(w);
        match step {
            Step::Claimed => Sticky::Keep(Choice {
                trial: true,
                ..Choice::plain(id, None)
            }),
            _ => Sticky::None,
        }
    }
}
