//! Granting leases: the target's gate, sticky sessions, trials, the least leased
//! endpoint. What comes back on a lease is in `reports`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::Mode;
use crate::endpoint::EndpointId;
use crate::event_kind::EventKind;
use crate::health::{Input, State, Step};
use crate::store::Write;

use super::apply::Act;
use super::destinations::{Destinations, Usable};
use super::lease_book::Lease;
use super::pace::{Check, Visit};
use super::pair_target::target_event;
use super::scoped::{Views, Want};
use super::select::{Fit, Miss};
use super::tag_index::{carries, Resolved};
use super::targets::Admission;
use super::{PoolError, Pools};
use crate::protocol::Grant;

/// `scope` of a grant that is a pair's trial.
pub const SCOPE_DESTINATION: &str = "destination";
/// `scope` of a grant that is a down target's trial.
pub const SCOPE_TARGET: &str = "target";

/// What one lease asks for, resolved once.
struct Ask<'a> {
    p: usize,
    want: &'a Want,
    /// How long the lease lives: a trial's claim holds that long at most.
    ttl: Duration,
    views: Views,
    /// `max_leases_per_endpoint` (0: no cap).
    cap: u32,
    /// Endpoints that just failed the target, pending contrast: tried last.
    avoid: Vec<EndpointId>,
    /// The host's view when a subnet is suspect for it: its endpoints tried last.
    spare: Option<super::destinations::DestRef>,
    /// The lease's tags, interned.
    tags: Box<[u32]>,
    /// The destination host as the pool's pacing found it (one lookup per lease).
    visit: Visit,
}

impl Ask<'_> {
    fn under_cap(&self, leases: u32) -> bool {
        self.cap == 0 || leases < self.cap
    }

    fn fit(&self) -> Fit<'_> {
        Fit {
            p: self.p,
            cap: self.cap,
            want: self.want,
            tags: &self.tags,
            views: self.views,
            avoid: &self.avoid,
            spare: self.spare,
        }
    }
}

mod session;

/// What a session's lease goes to (`session`).
enum Sticky {
    /// The session's endpoint.
    Keep(Choice),
    /// It was used for the host too recently: the session waits for it.
    Paced(Option<u64>),
    /// Nothing in the pool may serve the session now.
    None,
}

/// The endpoint a lease goes to, and how.
struct Choice {
    id: EndpointId,
    /// Its slot, when the step that chose it knows it.
    slot: Option<u32>,
    /// The endpoint's single recovery attempt.
    trial: bool,
    /// The pair (host or target key) whose trial this is.
    pair_trial: Option<Arc<str>>,
}

impl Choice {
    fn plain(id: EndpointId, slot: Option<u32>) -> Choice {
        Choice {
            id,
            slot,
            trial: false,
            pair_trial: None,
        }
    }
}

impl Pools {
    /// Lease an endpoint of `pool` for `ttl`.
    pub fn lease(
        &mut self,
        pool: &str,
        ttl: Duration,
        session: Option<&str>,
        now: Instant,
    ) -> (Result<Grant, PoolError>, Vec<Write>) {
        self.lease_with(pool, ttl, session, &Want::default(), now)
    }

    /// Lease an endpoint of `pool` for `ttl` that fits `want` (a place whose banned
    /// pairs are skipped and whose pacing is kept, schemes, tags). The steps, in the order
    /// docs/selection.md gives them: the target's gate (a down target is refused, or this
    /// is its single trial), the session's endpoint while it stays in service, a pair's
    /// trial for the place, the oldest waiting trial (`static-no-ping`), the pool's
    /// strategy. Each is O(1) amortized and none scans the pool, but a fleet's daemon
    /// ranking the pool for a session key it has not seen (docs/leases.md).
    pub fn lease_with(
        &mut self,
        pool: &str,
        ttl: Duration,
        session: Option<&str>,
        want: &Want,
        now: Instant,
    ) -> (Result<Grant, PoolError>, Vec<Write>) {
        let mut writes = self.advance(now);
        let Some(&p) = self.by_name.get(pool) else {
            return (Err(PoolError::UnknownPool(pool.to_string())), writes);
        };
        let (expires, tags) = match self.admit(p, pool, ttl, want, now) {
            Ok(v) => v,
            Err(e) => return (Err(e), writes),
        };
        let (target_trial, avoid) = match self.target_gate(p, want, now) {
            Ok(v) => v,
            Err(e) => return (Err(e), writes),
        };
        let ps = &mut self.pools[p];
        // The host's one lookup; pairs of it that became idle are forgotten here, before
        // anything is asked.
        let visit = match want.destination.as_deref() {
            Some(h) => ps.pace.visit(h, now),
            None => Visit::Skip,
        };
        let views = ps.views(want);
        let ask = Ask {
            p,
            want,
            ttl,
            // A hash lookup each: a place without bans has no view and costs nothing more.
            views,
            spare: views.host.filter(|&d| ps.dests.has_suspects(d)),
            cap: ps.cfg.max_leases_per_endpoint,
            avoid,
            tags,
            visit,
        };
        let choice = match self.choice(&ask, session, now, &mut writes) {
            Ok(c) => c,
            Err(miss) => {
                if let (Some(g), Some(t)) = (target_trial, want.target_key()) {
                    self.pools[p].targets.abandon_trial(t, g, now);
                }
                return (Err(self.nothing_to_lease(pool, &ask, miss, now)), writes);
            }
        };
        if let (Some(_), Some(t)) = (target_trial, want.target_key()) {
            let lease = Some(self.leases.upcoming_name());
            let why = "the down target's single trial";
            writes.push(target_event(
                t,
                Some(choice.id),
                EventKind::TrialAdmitted,
                None,
                why,
                lease,
            ));
        }
        let granted = self.grant(&ask, choice, target_trial, ttl, expires, now);
        (granted, writes)
    }

    /// A down target is refused at once (`destination_down`), dialing nothing; once its
    /// cooldown ended exactly one lease is its trial (the claim's generation). Also the
    /// endpoints that just failed the target, for the lease to pass over first.
    fn target_gate(
        &mut self,
        p: usize,
        want: &Want,
        now: Instant,
    ) -> Result<(Option<u32>, Vec<EndpointId>), PoolError> {
        let Some(t) = want.target_key() else {
            return Ok((None, Vec::new()));
        };
        match self.pools[p].targets.admit(t, now) {
            Admission::Go { avoid } => Ok((None, avoid)),
            Admission::Trial(gen) => Ok((Some(gen), Vec::new())),
            Admission::Down {
                retry_after,
                trial_out,
                certificate,
            } => Err(PoolError::DestinationDown {
                pool: self.pools[p].cfg.name.clone(),
                target: t.to_string(),
                retry_after,
                trial_out,
                certificate,
            }),
        }
    }

    /// What a lease of pool `p` is refused for before anything is asked or claimed, so
    /// that a refused lease changes nothing: a `ttl` past the clock, the pool at its
    /// `max_leases`, a tag key no endpoint carries (`bad_request`) or a value none does
    /// (exhausted). Else when it expires, and its tags interned.
    fn admit(
        &self,
        p: usize,
        pool: &str,
        ttl: Duration,
        want: &Want,
        now: Instant,
    ) -> Result<(Instant, Box<[u32]>), PoolError> {
        let expires = now.checked_add(ttl).ok_or(PoolError::InvalidTtl(ttl))?;
        let (held, max) = (self.pools[p].leases, self.pools[p].cfg.max_leases);
        if held >= max as usize {
            let pool = pool.to_string();
            return Err(PoolError::TooManyLeases { pool, max });
        }
        match self.tags.resolve(&want.tags) {
            Ok(Resolved::Ids(ids)) => Ok((expires, ids)),
            // A value no endpoint carries: nothing that fits, nothing cooling.
            Ok(Resolved::Nothing) => Err(PoolError::Exhausted {
                pool: pool.to_string(),
                retry_after: None,
                filter: Some(format!("tagged {}", want.tags)),
            }),
            Err(key) => {
                let known = self.tags.known().iter().cloned().collect();
                Err(PoolError::UnknownTag { key, known })
            }
        }
    }

    /// The endpoint of a lease that passed its gates: its session's (placed as a fleet's
    /// daemon or a daemon alone places it), else a fresh choice.
    fn choice(
        &mut self,
        ask: &Ask,
        session: Option<&str>,
        now: Instant,
        writes: &mut Vec<Write>,
    ) -> Result<Choice, Miss> {
        match session {
            Some(key) if self.sessions.agreed() => {
                match self.session_choice(ask, key, now, writes) {
                    Sticky::Keep(c) => Ok(c),
                    Sticky::Paced(at) => Err(Miss { paced: Some(at) }),
                    Sticky::None => Err(Miss::default()),
                }
            }
            Some(key) => self.spread_session(ask, key, now, writes),
            None => self.fresh_choice(ask, now, writes),
        }
    }

    /// A lease's endpoint when no session says: a waiting trial first (the pair's, then,
    /// in `static-no-ping`, the endpoint's), else the least leased.
    fn fresh_choice(
        &mut self,
        ask: &Ask,
        now: Instant,
        writes: &mut Vec<Write>,
    ) -> Result<Choice, Miss> {
        match self.pair_trial(ask, now, writes) {
            Some(c) => Ok(c),
            None => match self.oldest_trial(ask, now, writes) {
                Some(c) => Ok(c),
                None => self.least_leased(ask, now),
            },
        }
    }

    /// A pair's trial is the next lease for its place, in every mode (the prober does not
    /// know the scraper's pages): the host's ban pairs first, then the target's.
    fn pair_trial(&mut self, ask: &Ask, now: Instant, writes: &mut Vec<Write>) -> Option<Choice> {
        let keys = [
            (ask.views.host, ask.want.destination.as_ref()),
            (ask.views.target, ask.want.target.as_ref()),
        ];
        for (i, (view, key)) in keys.into_iter().enumerate() {
            let (Some(d), Some(key)) = (view, key) else {
                continue;
            };
            if self.frozen || ask.want.no_trial || !self.pools[ask.p].dests.trials_waiting(d) {
                continue;
            }
            // The place's other view must not ban the endpoint.
            let other = if i == 0 {
                ask.views.target
            } else {
                ask.views.host
            };
            let lease = Some(self.leases.upcoming_name());
            let entries = &self.entries;
            let ps = &mut self.pools[ask.p];
            let gate = ps.pace.gate(ask.visit, now);
            let ok = |dests: &Destinations, id: EndpointId| {
                entries.get(&id).is_some_and(|e| {
                    e.health.state == State::Available
                        && ask.under_cap(e.leases)
                        && ask.want.fits(e)
                        && carries(&e.tags, &ask.tags)
                        && other.is_none_or(|o| dests.usable(o, id) == Usable::Available)
                        && gate.as_ref().is_none_or(|g| g.check(id) == Check::Ready)
                })
            };
            let claimed = ps
                .dests
                .claim_trial(d, ok, lease, ask.ttl, &ps.cfg.policy, now);
            if let Some((id, r)) = claimed {
                writes.extend(r.writes.into_iter().map(Write::Pair));
                return Some(Choice {
                    pair_trial: Some(key.clone()),
                    ..Choice::plain(id, None)
                });
            }
        }
        None
    }

    /// Trials before ordinary leases, so that recovery cannot starve behind them
    /// (`static-no-ping`: the lease is the probe). The oldest only: a lease never scans
    /// the trial queue.
    fn oldest_trial(&mut self, ask: &Ask, now: Instant, writes: &mut Vec<Write>) -> Option<Choice> {
        if self.frozen || ask.want.no_trial || self.pools[ask.p].cfg.mode != Mode::StaticNoPing {
            return None;
        }
        let first = self.pools[ask.p].index.oldest_trial();
        let ps = &self.pools[ask.p];
        let gate = ps.pace.gate(ask.visit, now);
        let id = first.filter(|&id| {
            self.entries
                .get(&id)
                .is_some_and(|e| ask.want.fits(e) && carries(&e.tags, &ask.tags))
                && ps.dests_usable(ask.views, id)
                && gate.as_ref().is_none_or(|g| g.check(id) == Check::Ready)
        })?;
        let ev = Act {
            kind: Some(EventKind::TrialAdmitted),
            lease: Some(self.leases.upcoming_name()),
            hold: Some(ask.ttl),
            ..Default::default()
        };
        let (step, w) = self.apply(id, Input::Claim, now, ev);
        writes.extend(w);
        (step == Step::Claimed).then_some(Choice {
            trial: true,
            ..Choice::plain(id, None)
        })
    }

    /// The pool's strategy (`select`) over the available endpoints under the cap that fit
    /// the lease and are ready for its host.
    fn least_leased(&mut self, ask: &Ask, now: Instant) -> Result<Choice, Miss> {
        let (slot, _) = self.choose(&ask.fit(), ask.visit, now)?;
        let (id, _) = self.entries.at(slot).ok_or(Miss::default())?;
        Ok(Choice::plain(*id, Some(slot)))
    }

    /// Nothing to lease: paced when an endpoint that fits was passed over for the host
    /// (when to ask again: the soonest such pair is ready); a pool without an endpoint
    /// that fits says so (waiting will not help); else when to ask again, the soonest
    /// cooldown end of an endpoint that fits (of a pair too when the lease named a
    /// destination with bans).
    fn nothing_to_lease(&self, pool: &str, ask: &Ask, miss: Miss, now: Instant) -> PoolError {
        let ps = &self.pools[ask.p];
        if let (Some(at), Some(host)) = (miss.paced, ask.want.destination.as_deref()) {
            return PoolError::Paced {
                pool: pool.to_string(),
                host: host.to_string(),
                retry_after: at.map(|ms| ps.pace.instant(ms).saturating_duration_since(now)),
                wait: ps.pace.wait(),
            };
        }
        let filter = ask.want.schemes_text();
        let fits = |id: &EndpointId| self.entries.get(id).is_some_and(|e| ask.want.fits(e));
        let none_fit = match ask.want.schemes {
            None => ps.index.counts().total() == 0,
            // Only when a scheme was asked for: a scan, on this refusal alone.
            Some(_) => !self
                .entries
                .iter()
                .any(|(_, e)| e.pool == ask.p && ask.want.fits(e)),
        };
        if none_fit {
            return PoolError::Empty {
                pool: pool.to_string(),
                filter,
            };
        }
        let mut soonest = match ask.want.schemes {
            None => ps.index.next_cooling().map(|(d, _)| d),
            Some(_) => ps.index.cooling().find(|(_, id)| fits(id)).map(|(d, _)| d),
        };
        if ask.views.any() {
            soonest = match (soonest, ps.dests.next_due()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        PoolError::Exhausted {
            pool: pool.to_string(),
            retry_after: soonest.map(|d| d.saturating_duration_since(now)),
            filter,
        }
    }

    /// Record the lease of `choice` and count it against its endpoint.
    fn grant(
        &mut self,
        ask: &Ask,
        choice: Choice,
        target_trial: Option<u32>,
        ttl: Duration,
        expires: Instant,
        now: Instant,
    ) -> Result<Grant, PoolError> {
        let Choice {
            id,
            slot,
            trial,
            pair_trial,
        } = choice;
        let slot = slot
            .or_else(|| self.entries.slot(&id))
            .ok_or(PoolError::UnknownEndpoint(id))?;
        // Every use for a host counts while the pool paces, also one chosen while nothing
        // of the host was held (the first).
        let paced = match (ask.visit, ask.want.destination.as_deref()) {
            (Visit::Skip, _) | (_, None) => None,
            (v, Some(h)) => self.pools[ask.p].pace.record(v, h, id, now),
        };
        if paced.is_some() {
            self.count_pace_dropped(ask.p);
        }
        let (_, lease) = self.leases.open(Lease {
            secret: 0,
            endpoint: id,
            slot,
            expires,
            trial,
            epoch: None,
            pair_epoch: None,
            destination: ask.want.destination.clone(),
            target: ask.want.target.clone(),
            pair_trial: pair_trial.clone(),
            target_trial,
            reached: false,
            paced,
        });
        self.pools[ask.p].leases += 1;
        self.set_leases_at(slot, 1);
        if let Some((_, e)) = self.entries.at_mut(slot) {
            e.stats.record_lease();
        }
        let (_, e) = self
            .entries
            .at(slot)
            .ok_or(PoolError::UnknownEndpoint(id))?;
        Ok(Grant {
            lease,
            proxy: e.secret.clone(),
            endpoint: id,
            trial: trial || pair_trial.is_some() || target_trial.is_some(),
            expires_in_ms: ttl.as_millis() as u64,
            scope: if target_trial.is_some() {
                Some(SCOPE_TARGET.to_string())
            } else {
                pair_trial.map(|_| SCOPE_DESTINATION.to_string())
            },
            pool: self.pools[ask.p].cfg.name.clone(),
        })
    }
}
