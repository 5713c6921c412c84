//! The lease table: granting, sticky sessions, release, report and expiry.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tracing::info;

use crate::config::Mode;
use crate::endpoint::EndpointId;
use crate::event_kind::EventKind;
use crate::health::{Input, State, Step};
use crate::store::Write;

use super::apply::Act;
use super::{Grant, Outcome, PoolError, Pools, EXPIRED_MEMORY, MAX_SESSIONS};

pub(super) struct Lease {
    pub(super) endpoint: EndpointId,
    pub(super) slot: u32,
    pub(super) expires: Instant,
    pub(super) trial: bool,
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
        if l.trial {
            let ev = Act {
                kind: Some(EventKind::TrialAbandoned),
                detail: Some(why.to_string()),
                lease: Some(self.lease_name(lid)),
                ..Default::default()
            };
            let (_, w) = self.apply(l.endpoint, Input::Abandon, now, wall, ev);
            self.set_leases_at(l.slot, -1);
            w
        } else {
            self.set_leases_at(l.slot, -1);
            Vec::new()
        }
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
        let mut writes = self.advance(now, wall);
        let Some(&p) = self.by_name.get(pool) else {
            return (Err(PoolError::UnknownPool(pool.to_string())), writes);
        };
        // Checked before anything is claimed, so a refused lease changes nothing.
        let Some(expires) = now.checked_add(ttl) else {
            return (Err(PoolError::InvalidTtl(ttl)), writes);
        };
        let cap = self.pools[p].cfg.max_leases_per_endpoint;
        let under_cap = |leases: u32| cap == 0 || leases < cap;
        let mut chosen: Option<(EndpointId, bool)> = None;
        let mut chosen_slot: Option<u32> = None;
        // A sticky session whose endpoint is still in service keeps it: a scraper's
        // cookies or login must not move to an unproven endpoint.
        if let Some(key) = session {
            if let Some(&id) = self.sessions.get(&(p, key.to_string())) {
                if let Some(e) = self.entries.get(&id) {
                    if e.health.state == State::Available && under_cap(e.leases) {
                        chosen = Some((id, false));
                    }
                }
            }
        }
        // Then trials, so that recovery cannot starve behind ordinary leases.
        if chosen.is_none() && self.pools[p].cfg.mode == Mode::StaticNoPing {
            if let Some(&(_, id)) = self.pools[p].trials.first() {
                let lid = self.next_lease + 1;
                let ev = Act {
                    kind: Some(EventKind::TrialAdmitted),
                    lease: Some(self.lease_name(lid)),
                    ..Default::default()
                };
                let (step, w) = self.apply(id, Input::Claim, now, wall, ev);
                writes.extend(w);
                if step == Step::Claimed {
                    chosen = Some((id, true));
                }
            }
        }
        if chosen.is_none() {
            if let Some((slot, leases)) = self.pick(p) {
                if under_cap(leases) {
                    chosen = self.entries.at(slot).map(|(id, _)| (*id, false));
                    chosen_slot = Some(slot);
                }
            }
        }
        let Some((id, trial)) = chosen else {
            let retry_after = self.pools[p]
                .cooling
                .first()
                .map(|(d, _)| d.saturating_duration_since(now));
            return (
                Err(PoolError::Exhausted {
                    pool: pool.to_string(),
                    retry_after,
                }),
                writes,
            );
        };
        if let Some(key) = session {
            if self.sessions.len() >= MAX_SESSIONS {
                // Scrapers that mint a key per request must not grow memory forever:
                // forget sessions whose endpoint left service, then all if still full.
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
        let Some(slot) = chosen_slot.or_else(|| self.entries.slot(&id)) else {
            return (Err(PoolError::UnknownEndpoint(id)), writes);
        };
        self.next_lease += 1;
        let lid = self.next_lease;
        self.leases.insert(
            lid,
            Lease {
                endpoint: id,
                slot,
                expires,
                trial,
            },
        );
        self.lease_expiry.insert((expires, lid));
        self.pools[p].leases += 1;
        self.set_leases_at(slot, 1);
        let Some((_, e)) = self.entries.at(slot) else {
            return (Err(PoolError::UnknownEndpoint(id)), writes);
        };
        let grant = Grant {
            lease: self.lease_name(lid),
            proxy: e.secret.clone(),
            endpoint: id,
            trial,
            expires_in_ms: ttl.as_millis() as u64,
        };
        (Ok(grant), writes)
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
        if let Outcome::Failure(f) = &outcome {
            if f.reason.is_none() {
                return (Err(PoolError::MissingReason), Vec::new());
            }
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
        let (input, detail, reason, phase) = match outcome {
            Outcome::Success => (Input::Success { trial: l.trial }, None, None, None),
            Outcome::Failure(f) => {
                let (d, r, ph) = (f.detail.clone(), f.reason, f.phase);
                (
                    Input::Failure {
                        failure: f,
                        trial: l.trial,
                    },
                    d,
                    r,
                    ph,
                )
            }
        };
        let success = matches!(input, Input::Success { .. });
        let (cur_state, cur_streak) = {
            let h = &self.entries[&id].health;
            (h.state, h.streak)
        };
        // A plain success on a healthy endpoint changes nothing worth a row.
        let quiet = success && cur_state == State::Available && cur_streak == 0;
        let ev = Act {
            kind: (!quiet).then_some(EventKind::Report),
            lease,
            detail: detail.or_else(|| {
                (!l.trial && cur_state != State::Available)
                    .then(|| format!("late result ignored: endpoint is {cur_state}"))
            }),
            reason,
            phase,
        };
        let (step, w) = self.apply(id, input, now, wall, ev);
        writes.extend(w);
        if let Step::Recorded { late: true } = step {
            info!(endpoint = id, state = %cur_state, "late result ignored");
        }
        self.set_leases_at(l.slot, -1);
        (Ok(self.entries[&id].health.state), writes)
    }
}
