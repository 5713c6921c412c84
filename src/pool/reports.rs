//! What comes back on a lease: a report, a release, expiry, and the gateway's word that a
//! tunnel opened through it (`reached`), which proves less than a report.

use std::time::SystemTime;

use tokio::time::Instant;

use super::apply::Act;
use super::evidence::{Proof, Settle};
use super::lease_book::Lease;
use super::scoped::{ReportOn, Reported};
use super::{Ended, Outcome, PoolError, Pools};
use crate::event_kind::EventKind;
use crate::health::{Input, State};
use crate::store::Write;

impl Pools {
    /// A lease that counted in its pair's `in_flight` no longer does.
    fn end_paced(&mut self, pool: usize, l: &Lease) {
        if let Some(r) = l.paced {
            self.pools[pool].pace.end(r, l.endpoint);
        }
    }

    /// Drop a lease's hold on its endpoint; an unreported trial is abandoned. A ban trial
    /// that a tunnel carried is held for `verdict_window` first, for a report by session
    /// to decide it (docs/blame.md, "What a tunnel proves").
    pub(super) fn end_lease(&mut self, lid: u64, l: Lease, now: Instant, why: &str) -> Vec<Write> {
        let Some((_, e)) = self.entries.at(l.slot).filter(|(id, _)| *id == l.endpoint) else {
            return Vec::new();
        };
        let pool = e.pool;
        self.pools[pool].leases -= 1;
        self.end_paced(pool, &l);
        let mut writes = Vec::new();
        // Named only when an event needs it: most leases end with nothing to record.
        let named = l.pair_trial.is_some() || l.target_trial.is_some() || l.trial;
        let lease = named.then(|| l.name(lid));
        if let Some(key) = l.pair_trial.as_deref() {
            let ps = &mut self.pools[pool];
            let window = ps.cfg.blame.verdict_window;
            // A host's ban pair (the target is another key: the host with a port).
            let is_ban = l.destination.as_deref() == Some(key) && l.target.is_some();
            let held = l.reached
                && is_ban
                && !window.is_zero()
                && now
                    .checked_add(window)
                    .is_some_and(|until| ps.dests.hold(key, l.endpoint, until));
            if !held {
                let r = ps
                    .dests
                    .abandon(key, l.endpoint, why, lease.clone(), &ps.cfg.policy, now);
                writes.extend(r.writes.into_iter().map(Write::Pair));
            }
        }
        if let (Some(g), Some(t)) = (l.target_trial, l.target_key()) {
            let on = Settle {
                id: l.endpoint,
                lease: lease.clone(),
                ..Settle::default()
            };
            writes.extend(self.abandon_target_trial(pool, t, g, &on, now));
        }
        // Only this daemon's own claim is given back: a trial claimed again elsewhere is
        // not ours to end (docs/fleet.md, "Ownership").
        let ours = self.stale(&l).is_none() && !self.claimed_remotely(l.endpoint);
        if l.trial && ours {
            let ev = Act {
                kind: Some(EventKind::TrialAbandoned),
                detail: Some(why.to_string()),
                lease,
                ..Default::default()
            };
            let (_, w) = self.apply(l.endpoint, Input::Abandon, now, ev);
            writes.extend(w);
        }
        self.set_leases_at(l.slot, -1);
        writes
    }

    pub(super) fn take_lease(
        &mut self,
        name: &str,
        now: Instant,
    ) -> (Result<(u64, Lease), PoolError>, Vec<Write>) {
        let writes = self.advance(now);
        let lid = match self.leases.find(name) {
            Ok(lid) => lid,
            Err(ended) => {
                let e = match ended {
                    Some(Ended::Expired) => PoolError::LeaseExpired(name.to_string()),
                    Some(how) => PoolError::LeaseEnded {
                        lease: name.to_string(),
                        how,
                    },
                    None => PoolError::UnknownLease(name.to_string()),
                };
                return (Err(e), writes);
            }
        };
        match self.leases.take(lid) {
            Some(l) => (Ok((lid, l)), writes),
            None => (Err(PoolError::UnknownLease(name.to_string())), writes),
        }
    }

    /// Give a lease back without an outcome (a trial is abandoned).
    pub fn release(&mut self, name: &str, now: Instant) -> (Result<(), PoolError>, Vec<Write>) {
        let (r, mut writes) = self.take_lease(name, now);
        match r {
            Ok((lid, l)) => {
                self.leases.remember(lid, &l, Ended::Released);
                writes.extend(self.end_lease(lid, l, now, "released without a report"));
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
        let (r, w) = self.report_with(name, outcome, &ReportOn::default(), now, wall);
        (r.map(|r| r.state), w)
    }

    /// Report how a lease went, for `on.place` when given, else for the place the lease
    /// was taken for; docs/blame.md decides whom a failure counts against. `on.duration`
    /// feeds the endpoint's latency estimate. Returns the endpoint's state and the blame.
    pub fn report_with(
        &mut self,
        name: &str,
        outcome: Outcome,
        on: &ReportOn,
        now: Instant,
        wall: SystemTime,
    ) -> (Result<Reported, PoolError>, Vec<Write>) {
        if let Err(e) = outcome.check_reason() {
            return (Err(e), Vec::new());
        }
        let (r, mut writes) = self.take_lease(name, now);
        let (lid, l) = match r {
            Ok(v) => v,
            Err(e) => return (Err(e), writes),
        };
        self.leases.remember(lid, &l, Ended::Reported);
        let Some(pool) = self.entries.get(&l.endpoint).map(|e| e.pool) else {
            return (Err(PoolError::UnknownLease(name.to_string())), writes);
        };
        if let Some(what) = self.stale(&l) {
            // Claimed again elsewhere since: this result changes nothing.
            writes.extend(self.end_lease(lid, l, now, "its trial was claimed again"));
            return (Err(PoolError::StaleClaim(what)), writes);
        }
        self.pools[pool].leases -= 1;
        self.end_paced(pool, &l);
        let id = l.endpoint;
        let (host, target) = match &on.place {
            Some(p) => (Some(p.host.as_str()), Some(p.target.as_str())),
            None => (l.destination.as_deref(), l.target_key()),
        };
        let settle = Settle {
            id,
            trial: l.trial,
            pair_trial: l.pair_trial.as_deref(),
            target_trial: l.target_trial,
            host,
            target,
            took: on.duration,
            lease: Some(l.name(lid)),
        };
        let settled = self.settle(settle, outcome, Proof::Answer, now, wall);
        writes.extend(settled.writes);
        self.set_leases_at(l.slot, -1);
        let answer = Reported {
            endpoint: id,
            state: self.entries[&id].health.state,
            blame: settled.blame,
        };
        (Ok(answer), writes)
    }

    /// A tunnel opened through the lease's endpoint to its target: the endpoint works and
    /// the target is reachable through it (an endpoint's or target's trial, and a
    /// target pair's, are decided), but nothing is known about a ban inside. The lease
    /// goes on; a ban trial it carries waits for a report when it ends.
    pub fn reached(
        &mut self,
        name: &str,
        now: Instant,
        wall: SystemTime,
    ) -> (Result<State, PoolError>, Vec<Write>) {
        let mut writes = self.advance(now);
        let Ok(lid) = self.leases.find(name) else {
            return (Err(PoolError::UnknownLease(name.to_string())), writes);
        };
        let Some(l) = self.leases.get(lid) else {
            return (Err(PoolError::UnknownLease(name.to_string())), writes);
        };
        if let Some(what) = self.stale(l) {
            return (Err(PoolError::StaleClaim(what)), writes);
        }
        let (id, trial, target_trial) = (l.endpoint, l.trial, l.target_trial);
        let (host, target, pair_trial) = (
            l.destination.clone(),
            l.target.clone(),
            l.pair_trial.clone(),
        );
        if !self.entries.contains_key(&id) {
            return (Err(PoolError::UnknownLease(name.to_string())), writes);
        }
        let settle = Settle {
            id,
            trial,
            pair_trial: pair_trial.as_deref(),
            target_trial,
            host: host.as_deref(),
            target: target.as_deref().or(host.as_deref()),
            took: None,
            lease: Some(l.name(lid)),
        };
        let settled = self.settle(settle, Outcome::Success, Proof::Tunnel, now, wall);
        writes.extend(settled.writes);
        if let Some(l) = self.leases.get_mut(lid) {
            l.reached = true;
            l.trial &= !settled.endpoint_trial_decided;
            if settled.target_trial_decided {
                l.target_trial = None;
            }
            if settled.pair_trial_decided {
                l.pair_trial = None;
            }
        }
        (Ok(self.entries[&id].health.state), writes)
    }
}
