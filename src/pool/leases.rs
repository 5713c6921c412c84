//! The lease table: granting, sticky sessions, release, report and expiry.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::config::Mode;
use crate::endpoint::EndpointId;
use crate::event_kind::EventKind;
use crate::health::{Input, State, Step};
use crate::store::Write;

use super::apply::Act;
use super::destinations::DestRef;
use super::scoped::{ReportOn, Settle, Want};
use super::{Grant, Outcome, PoolError, Pools, EXPIRED_MEMORY, MAX_SESSIONS};
use crate::health::scope::Scope;

pub(super) struct Lease {
    pub(super) endpoint: EndpointId,
    pub(super) slot: u32,
    pub(super) expires: Instant,
    /// The endpoint's single recovery attempt.
    pub(super) trial: bool,
    /// The destination the lease was taken for.
    pub(super) destination: Option<Arc<str>>,
    /// The trial of the pair (endpoint, `destination`).
    pub(super) pair_trial: bool,
}

/// What one lease asks for, resolved once.
struct Ask<'a> {
    p: usize,
    want: &'a Want,
    dref: Option<DestRef>,
    /// `max_leases_per_endpoint` (0: no cap).
    cap: u32,
}

impl Ask<'_> {
    fn under_cap(&self, leases: u32) -> bool {
        self.cap == 0 || leases < self.cap
    }
}

/// The endpoint a lease goes to, and how.
struct Choice {
    id: EndpointId,
    /// Its slot, when the step that chose it knows it.
    slot: Option<u32>,
    /// The endpoint's single recovery attempt.
    trial: bool,
    /// The trial of the pair (endpoint, destination).
    pair_trial: bool,
}

impl Choice {
    fn plain(id: EndpointId, slot: Option<u32>) -> Choice {
        Choice {
            id,
            slot,
            trial: false,
            pair_trial: false,
        }
    }
}

impl Pools {
    pub(super) fn remember_expired(&mut self, lid: u64) {
        self.expired.insert(lid, ());
        self.expired_order.push_back(lid);
        if self.expired_order.len() > EXPIRED_MEMORY {
            if let Some(old) = self.expired_order.pop_front() {
                self.expired.remove(&old);
            }
        }
    }

    /// Drop a lease's hold on its endpoint; an unreported trial is abandoned.
    pub(super) fn end_lease(
        &mut self,
        lid: u64,
        l: Lease,
        now: Instant,
        wall: SystemTime,
        why: &str,
    ) -> Vec<Write> {
        let Some((_, e)) = self.entries.at(l.slot).filter(|(id, _)| *id == l.endpoint) else {
            return Vec::new();
        };
        let pool = e.pool;
        self.pools[pool].leases -= 1;
        let mut writes = Vec::new();
        if let (true, Some(d)) = (l.pair_trial, l.destination.as_deref()) {
            let lease = Some(self.lease_name(lid));
            let ps = &mut self.pools[pool];
            let r = ps
                .dests
                .abandon(d, l.endpoint, why, lease, &ps.cfg.policy, now, wall);
            writes.extend(r.writes.into_iter().map(Write::Pair));
        }
        if l.trial {
            let ev = Act {
                kind: Some(EventKind::TrialAbandoned),
                detail: Some(why.to_string()),
                lease: Some(self.lease_name(lid)),
                ..Default::default()
            };
            let (_, w) = self.apply(l.endpoint, Input::Abandon, now, wall, ev);
            writes.extend(w);
        }
        self.set_leases_at(l.slot, -1);
        writes
    }

    pub(super) fn set_leases_at(&mut self, slot: u32, delta: i32) {
        let Some((_, e)) = self.entries.at_mut(slot) else {
            return;
        };
        let p = &mut self.pools[e.pool];
        if e.health.state == State::Available {
            // Round robin: the one just moved goes behind its equals.
            p.ready.forget(e.leases);
            e.leases = e.leases.saturating_add_signed(delta);
            self.gen += 1;
            e.gen = self.gen;
            p.ready.push(e.leases, slot, e.gen);
            let (pool, level) = (e.pool, e.leases);
            self.compact_ready(pool, level);
        } else {
            e.leases = e.leases.saturating_add_signed(delta);
        }
    }

    pub(super) fn lease_name(&self, lid: u64) -> String {
        format!("{}-{lid:x}", self.lease_prefix)
    }

    pub(super) fn parse_lease(&self, name: &str) -> Option<u64> {
        let (prefix, n) = name.split_once('-')?;
        if prefix != self.lease_prefix {
            return None;
        }
        u64::from_str_radix(n, 16).ok()
    }

    /// Lease an endpoint of `pool` for `ttl`.
    pub fn lease(
        &mut self,
        pool: &str,
        ttl: Duration,
        session: Option<&str>,
        now: Instant,
        wall: SystemTime,
    ) -> (Result<Grant, PoolError>, Vec<Write>) {
        self.lease_with(pool, ttl, session, &Want::default(), now, wall)
    }

    /// Lease an endpoint of `pool` for `ttl` that fits `want` (a destination whose banned
    /// pairs are skipped, a set of schemes). The steps, in the order docs/leases.md
    /// ("Selection") gives them: the session's endpoint while it stays in service, a
    /// pair's trial for the destination, the oldest waiting trial (`static-no-ping`), the
    /// least leased endpoint. Each is O(1) amortized and none scans the pool.
    pub fn lease_with(
        &mut self,
        pool: &str,
        ttl: Duration,
        session: Option<&str>,
        want: &Want,
        now: Instant,
        wall: SystemTime,
    ) -> (Result<Grant, PoolError>, Vec<Write>) {
        let mut writes = self.advance(now, wall);
        let Some(&p) = self.by_name.get(pool) else {
            return (Err(PoolError::UnknownPool(pool.to_string())), writes);
        };
        // Checked before anything is claimed, so a refused lease changes nothing.
        let Some(expires) = now.checked_add(ttl) else {
            return (Err(PoolError::InvalidTtl(ttl)), writes);
        };
        let ask = Ask {
            p,
            want,
            // One hash lookup: a destination without bans has no view and costs nothing more.
            dref: want
                .destination
                .as_deref()
                .and_then(|d| self.pools[p].dests.lookup(d)),
            cap: self.pools[p].cfg.max_leases_per_endpoint,
        };
        let chosen = self
            .sticky(&ask, session)
            .or_else(|| self.pair_trial(&ask, now, wall, &mut writes))
            .or_else(|| self.oldest_trial(&ask, now, wall, &mut writes))
            .or_else(|| self.least_leased(&ask));
        let Some(choice) = chosen else {
            return (Err(self.nothing_to_lease(pool, &ask, now)), writes);
        };
        if let Some(key) = session {
            self.bind_session(p, key, choice.id);
        }
        (self.grant(&ask, choice, ttl, expires), writes)
    }

    /// A sticky session whose endpoint is still in service keeps it: a scraper's cookies
    /// or login must not move to an unproven endpoint.
    fn sticky(&self, ask: &Ask, session: Option<&str>) -> Option<Choice> {
        let id = *self.sessions.get(&(ask.p, session?.to_string()))?;
        let e = self.entries.get(&id)?;
        let keeps = e.health.state == State::Available
            && ask.under_cap(e.leases)
            && ask.want.fits(e)
            && self.pools[ask.p].dests_usable(ask.dref, id);
        keeps.then_some(Choice::plain(id, None))
    }

    /// A pair's trial is the next lease for its destination, in every mode (the prober
    /// does not know the scraper's pages).
    fn pair_trial(
        &mut self,
        ask: &Ask,
        now: Instant,
        wall: SystemTime,
        writes: &mut Vec<Write>,
    ) -> Option<Choice> {
        let d = ask
            .dref
            .filter(|&d| self.pools[ask.p].dests.trials_waiting(d))?;
        let lease = Some(self.lease_name(self.next_lease + 1));
        let entries = &self.entries;
        let ps = &mut self.pools[ask.p];
        let ok = |id: EndpointId| {
            entries.get(&id).is_some_and(|e| {
                e.health.state == State::Available && ask.under_cap(e.leases) && ask.want.fits(e)
            })
        };
        let (id, r) = ps
            .dests
            .claim_trial(d, ok, lease, &ps.cfg.policy, now, wall)?;
        writes.extend(r.writes.into_iter().map(Write::Pair));
        Some(Choice {
            pair_trial: true,
            ..Choice::plain(id, None)
        })
    }

    /// Trials before ordinary leases, so that recovery cannot starve behind them
    /// (`static-no-ping`: the lease is the probe). The oldest only: a lease never scans
    /// the trial queue.
    fn oldest_trial(
        &mut self,
        ask: &Ask,
        now: Instant,
        wall: SystemTime,
        writes: &mut Vec<Write>,
    ) -> Option<Choice> {
        if self.pools[ask.p].cfg.mode != Mode::StaticNoPing {
            return None;
        }
        let first = self.pools[ask.p].trials.first().map(|&(_, id)| id);
        let id = first.filter(|&id| {
            self.entries.get(&id).is_some_and(|e| ask.want.fits(e))
                && self.pools[ask.p].dests_usable(ask.dref, id)
        })?;
        let ev = Act {
            kind: Some(EventKind::TrialAdmitted),
            lease: Some(self.lease_name(self.next_lease + 1)),
            ..Default::default()
        };
        let (step, w) = self.apply(id, Input::Claim, now, wall, ev);
        writes.extend(w);
        (step == Step::Claimed).then_some(Choice {
            trial: true,
            ..Choice::plain(id, None)
        })
    }

    /// The least leased available endpoint (round robin among equals) under the cap.
    fn least_leased(&mut self, ask: &Ask) -> Option<Choice> {
        let picked = if ask.dref.is_none() && ask.want.schemes.is_none() {
            self.pick(ask.p)
                .filter(|&(_, leases)| ask.under_cap(leases))
        } else {
            self.pick_where(ask.p, ask.dref, ask.want, ask.cap)
        };
        let (slot, _) = picked?;
        let (id, _) = self.entries.at(slot)?;
        Some(Choice::plain(*id, Some(slot)))
    }

    /// Nothing to lease: when to ask again (the soonest cooldown end, of a pair too when
    /// the lease named a destination with bans).
    fn nothing_to_lease(&self, pool: &str, ask: &Ask, now: Instant) -> PoolError {
        let ps = &self.pools[ask.p];
        let mut soonest = ps.cooling.first().map(|(d, _)| *d);
        if ask.dref.is_some() {
            soonest = match (soonest, ps.dests.next_due()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        PoolError::Exhausted {
            pool: pool.to_string(),
            retry_after: soonest.map(|d| d.saturating_duration_since(now)),
        }
    }

    fn bind_session(&mut self, p: usize, key: &str, id: EndpointId) {
        if self.sessions.len() >= MAX_SESSIONS {
            // Scrapers that mint a key per request must not grow memory forever: forget
            // sessions whose endpoint left service, then all if still full.
            let entries = &self.entries;
            self.sessions.retain(|_, id| {
                entries
                    .get(id)
                    .is_some_and(|e| e.health.state == State::Available)
            });
            if self.sessions.len() >= MAX_SESSIONS {
                self.sessions.clear();
            }
        }
        self.sessions.insert((p, key.to_string()), id);
    }

    /// Record the lease of `choice` and count it against its endpoint.
    fn grant(
        &mut self,
        ask: &Ask,
        choice: Choice,
        ttl: Duration,
        expires: Instant,
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
        self.next_lease += 1;
        let lid = self.next_lease;
        self.leases.insert(
            lid,
            Lease {
                endpoint: id,
                slot,
                expires,
                trial,
                destination: ask.want.destination.clone(),
                pair_trial,
            },
        );
        self.lease_expiry.insert((expires, lid));
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
            lease: self.lease_name(lid),
            proxy: e.secret.clone(),
            endpoint: id,
            trial: trial || pair_trial,
            expires_in_ms: ttl.as_millis() as u64,
            scope: pair_trial.then(|| Scope::Destination.as_str().to_string()),
        })
    }

    pub(super) fn take_lease(
        &mut self,
        name: &str,
        now: Instant,
        wall: SystemTime,
    ) -> (Result<(u64, Lease), PoolError>, Vec<Write>) {
        let writes = self.advance(now, wall);
        let Some(lid) = self.parse_lease(name) else {
            return (Err(PoolError::UnknownLease(name.to_string())), writes);
        };
        match self.leases.remove(&lid) {
            Some(l) => {
                self.lease_expiry.remove(&(l.expires, lid));
                (Ok((lid, l)), writes)
            }
            None if self.expired.contains_key(&lid) => {
                (Err(PoolError::LeaseExpired(name.to_string())), writes)
            }
            None => (Err(PoolError::UnknownLease(name.to_string())), writes),
        }
    }

    /// Give a lease back without an outcome (a trial is abandoned).
    pub fn release(
        &mut self,
        name: &str,
        now: Instant,
        wall: SystemTime,
    ) -> (Result<(), PoolError>, Vec<Write>) {
        let (r, mut writes) = self.take_lease(name, now, wall);
        match r {
            Ok((lid, l)) => {
                writes.extend(self.end_lease(lid, l, now, wall, "released without a report"));
                (Ok(()), writes)
            }
            Err(e) => (Err(e), writes),
        }
    }

    /// Report how a lease went; returns the endpoint's state afterwards.
    pub fn report(
        &mut self,
        name: &str,
        outcome: Outcome,
        now: Instant,
        wall: SystemTime,
    ) -> (Result<State, PoolError>, Vec<Write>) {
        self.report_with(name, outcome, &ReportOn::default(), now, wall)
    }

    /// Report how a lease went, for `on.destination` (normalised) when given, else for the
    /// destination the lease was taken for; the failure's scope (docs/destinations.md, "The
    /// scoping rule") decides whether the endpoint or the pair takes it. `on.duration`
    /// feeds the endpoint's latency estimate. Returns the endpoint's state.
    pub fn report_with(
        &mut self,
        name: &str,
        outcome: Outcome,
        on: &ReportOn,
        now: Instant,
        wall: SystemTime,
    ) -> (Result<State, PoolError>, Vec<Write>) {
        if let Err(e) = outcome.check_reason() {
            return (Err(e), Vec::new());
        }
        let (r, mut writes) = self.take_lease(name, now, wall);
        let (lid, l) = match r {
            Ok(v) => v,
            Err(e) => return (Err(e), writes),
        };
        let Some(e) = self.entries.get(&l.endpoint) else {
            return (Err(PoolError::UnknownLease(name.to_string())), writes);
        };
        self.pools[e.pool].leases -= 1;
        let id = l.endpoint;
        let lease = Some(self.lease_name(lid));
        let destination = on.destination.as_deref().or(l.destination.as_deref());
        let pair_trial = l
            .destination
            .as_deref()
            .filter(|_| l.pair_trial)
            .map(str::to_string);
        let on = Settle {
            id,
            trial: l.trial,
            pair_trial: pair_trial.as_deref(),
            destination,
            took: on.duration,
            lease,
        };
        writes.extend(self.settle(on, outcome, now, wall));
        self.set_leases_at(l.slot, -1);
        (Ok(self.entries[&id].health.state), writes)
    }
}
