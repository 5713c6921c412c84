//! A session's lease (docs/leases.md, "Sticky sessions"). On a daemon alone: the endpoint
//! it was leased while that one serves it, else the least leased. In a fleet: the endpoint
//! of the highest rendezvous weight for the key among those every daemon agrees may serve
//! it, the next in order when this daemon cannot lease that one (its cap). Either way, an
//! endpoint used for the host too recently is waited for (its IP is the session's).

use tokio::time::Instant;

use super::{Ask, Choice, Sticky};
use crate::config::Mode;
use crate::endpoint::EndpointId;
use crate::event_kind::EventKind;
use crate::health::{Input, State, Step};
use crate::pool::apply::Act;
use crate::pool::destinations::{DestRef, Usable};
use crate::pool::entries::Entry;
use crate::pool::pace::Check;
use crate::pool::select::Miss;
use crate::pool::sessions::{key_hash, outranks, weight, Bound};
use crate::pool::tag_index::carries;
use crate::pool::Pools;
use crate::store::Write;

/// A ranking of the pool for one key: the top, and the best this daemon can lease.
struct Ranked {
    top: (u64, EndpointId),
    here: Option<EndpointId>,
}

/// How an endpoint may serve a session's lease, as every daemon sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Serve {
    No,
    /// Available, and so are its pairs for the place.
    Plain,
    /// Its own trial is waiting (`static-no-ping`: a lease is the trial).
    Trial,
    /// The pair of this view (the host's ban pair, else the target's) waits for its trial.
    PairTrial(DestRef),
}

impl Pools {
    /// How every daemon would let `id` serve the lease's session (`Serve`): available, or
    /// (in `static-no-ping`, where a lease is the trial) waiting for its trial and
    /// unclaimed; fitting the lease's schemes and tags; its pairs for the place available,
    /// or one of them waiting for its trial. Leases, pacing and targets are each daemon's
    /// own: they only pick among these.
    fn serves(&self, ask: &Ask, id: EndpointId, e: &Entry) -> Serve {
        if e.pool != ask.p || !ask.want.fits(e) || !carries(&e.tags, &ask.tags) {
            return Serve::No;
        }
        let trials = !self.frozen && !ask.want.no_trial;
        let own = match e.health.state {
            State::Available => Serve::Plain,
            State::ProbeAllowed
                if trials
                    && !e.health.claimed
                    && self.pools[ask.p].cfg.mode == Mode::StaticNoPing =>
            {
                Serve::Trial
            }
            _ => return Serve::No,
        };
        let dests = &self.pools[ask.p].dests;
        let mut out = own;
        for d in [ask.views.host, ask.views.target].into_iter().flatten() {
            match dests.usable(d, id) {
                Usable::Available => {}
                Usable::Trial if trials && out == Serve::Plain => out = Serve::PairTrial(d),
                Usable::Trial | Usable::Banned => return Serve::No,
            }
        }
        out
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
            if e.pool != ask.p || self.serves(ask, id, e) == Serve::No {
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

    /// Whether `id` may serve the session here and now.
    fn serves_here(&self, ask: &Ask, id: EndpointId) -> bool {
        self.entries
            .get(&id)
            .is_some_and(|e| self.serves(ask, id, e) != Serve::No && self.leasable_here(ask, e))
    }

    /// The session's remembered ranking when it still holds: nothing that came into
    /// service since outranks its top, and its top (or, when this daemon cannot lease the
    /// top, the one it fell back to) still qualifies.
    fn remembered(&self, ask: &Ask, k: u64, b: &Bound, id: EndpointId) -> Option<EndpointId> {
        let mut joined = self.sessions.joins().since(b.seen)?;
        let top_weight = weight(k, b.top);
        let outranked = joined.any(|j| {
            j != b.top
                && outranks(weight(k, j), j, top_weight, b.top)
                && self
                    .entries
                    .get(&j)
                    .is_some_and(|e| self.serves(ask, j, e) != Serve::No)
        });
        if outranked {
            return None;
        }
        let top = self.entries.get(&b.top)?;
        if self.serves(ask, b.top, top) == Serve::No {
            return None;
        }
        if self.leasable_here(ask, top) {
            return Some(b.top);
        }
        (id != b.top && self.serves_here(ask, id)).then_some(id)
    }

    /// A session's lease on a daemon alone: its endpoint while that one is available,
    /// under the cap, fitting the lease and not banned for the place; else where a lease
    /// without a session would go (least leased, so that concurrent sessions get endpoints
    /// of their own while there are enough), and the session stays there.
    pub(super) fn spread_session(
        &mut self,
        ask: &Ask,
        key: &str,
        now: Instant,
        writes: &mut Vec<Write>,
    ) -> Result<Choice, Miss> {
        let s = self.sessions.at(ask.p, key);
        let kept = self.sessions.get(s).filter(|&id| {
            // `Plain`: available, and so are its pairs for the place.
            self.entries
                .get(&id)
                .is_some_and(|e| ask.under_cap(e.leases) && self.serves(ask, id, e) == Serve::Plain)
        });
        if let Some(id) = kept {
            let gate = self.pools[ask.p].pace.gate(ask.visit, now);
            return match gate.map(|g| g.check(id)) {
                Some(Check::Blocked(at)) => Err(Miss { paced: Some(at) }),
                _ => Ok(Choice::plain(id, None)),
            };
        }
        let c = self.fresh_choice(ask, now, writes)?;
        let entries = &self.entries;
        self.sessions.bind(s, c.id, c.id, |id| {
            entries
                .get(&id)
                .is_some_and(|e| e.health.state == State::Available)
        });
        Ok(c)
    }

    /// The endpoint of session `key` for this lease in a fleet (see the module
    /// documentation).
    pub(super) fn session_choice(
        &mut self,
        ask: &Ask,
        key: &str,
        now: Instant,
        writes: &mut Vec<Write>,
    ) -> Sticky {
        let s = self.sessions.at(ask.p, key);
        let k = key_hash(key);
        let kept = match (self.sessions.bound(s), self.sessions.get(s)) {
            (Some(b), Some(id)) => self.remembered(ask, k, &b, id),
            _ => None,
        };
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
                let entries = &self.entries;
                self.sessions.bind(s, r.top.1, id, |id| {
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
        let serve = self
            .entries
            .get(&id)
            .map_or(Serve::No, |e| self.serves(ask, id, e));
        match serve {
            Serve::Plain => Sticky::Keep(Choice::plain(id, None)),
            Serve::Trial => self.session_trial(ask, id, now, writes),
            Serve::PairTrial(d) => self.session_pair_trial(ask, id, d, now, writes),
            Serve::No => Sticky::None,
        }
    }

    /// The session's endpoint waits for its trial: this lease is it.
    fn session_trial(
        &mut self,
        ask: &Ask,
        id: EndpointId,
        now: Instant,
        writes: &mut Vec<Write>,
    ) -> Sticky {
        let ev = Act {
            kind: Some(EventKind::TrialAdmitted),
            lease: Some(self.leases.upcoming_name()),
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

    /// The session's endpoint's pair for the place waits for its trial: this lease is it.
    fn session_pair_trial(
        &mut self,
        ask: &Ask,
        id: EndpointId,
        d: DestRef,
        now: Instant,
        writes: &mut Vec<Write>,
    ) -> Sticky {
        let key = match Some(d) == ask.views.host {
            true => ask.want.destination.clone(),
            false => ask.want.target.clone().or(ask.want.destination.clone()),
        };
        let lease = Some(self.leases.upcoming_name());
        let ps = &mut self.pools[ask.p];
        let claimed = ps
            .dests
            .claim_trial(d, |_, x| x == id, lease, ask.ttl, &ps.cfg.policy, now);
        match (claimed, key) {
            (Some((_, r)), Some(key)) => {
                writes.extend(r.writes.into_iter().map(Write::Pair));
                Sticky::Keep(Choice {
                    pair_trial: Some(key),
                    ..Choice::plain(id, None)
                })
            }
            _ => Sticky::None,
        }
    }
}
