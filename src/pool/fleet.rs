//! What the pools learn from a store that several daemons share (docs/fleet.md): claims
//! the store confirmed or refused, rows another daemon (or a CLI command) changed, and the
//! store being away. Nothing here knows which store it is: the engine hands in what the
//! store said.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::lease_book::Lease;
use super::Pools;
use crate::endpoint::EndpointId;
use crate::health::{Health, State};
use crate::store::pairs::PairRow;
use crate::store::{ClaimOn, EndpointRow, Epoch, StoredHealth};

impl Pools {
    /// This process is one daemon of a fleet: it walks its round robins in orders of its
    /// own (not the others'), and sessions go where every daemon would send them (docs/leases.md,
    /// "Sticky sessions").
    pub fn join_fleet(&mut self) {
        self.stagger();
        self.sessions.agree();
    }

    /// Whether the store is away: then no transition comes due and no trial is admitted,
    /// and ordinary leases go on from what is known (docs/fleet.md, "Faults").
    pub fn set_frozen(&mut self, frozen: bool) {
        self.frozen = frozen;
    }

    /// See [`Pools::set_frozen`].
    pub fn is_frozen(&self) -> bool {
        self.frozen
    }

    /// The store confirmed the claim `on`: the trial is this daemon's under `epoch`, and
    /// the lease that carries it (if a lease does) knows it.
    pub fn claim_won(&mut self, on: &ClaimOn, epoch: Epoch) {
        match on {
            ClaimOn::Endpoint(id) => {
                let Some(e) = self.entries.get_mut(id) else {
                    return;
                };
                if e.health.state != State::ProbeAllowed || !e.health.claimed {
                    return;
                }
                e.claim = Some(epoch);
                for l in self.leases.of_endpoint_mut(*id) {
                    if l.trial && l.epoch.is_none() {
                        l.epoch = Some(epoch);
                    }
                }
            }
            ClaimOn::Pair(id, key) => {
                let Some(p) = self.entries.get(id).map(|e| e.pool) else {
                    return;
                };
                if !self.pools[p].dests.claim_won(key, *id, epoch) {
                    return;
                }
                for l in self.leases.of_endpoint_mut(*id) {
                    let carries = l.pair_trial.as_deref() == Some(key.as_str());
                    if carries && l.pair_epoch.is_none() {
                        l.pair_epoch = Some(epoch);
                    }
                }
            }
        }
    }

    /// Another daemon holds the trial `on`: the claim taken in memory is given up, and
    /// the leases granted on it are withdrawn (their names are returned: those requests
    /// look again). The row read with the store's answer then says how long the other
    /// claim holds.
    pub fn claim_lost(&mut self, on: &ClaimOn, now: Instant) -> Vec<String> {
        let id = on.endpoint();
        let carried = self.leases.take_all(|l| {
            l.endpoint == id
                && match on {
                    ClaimOn::Endpoint(_) => l.trial && l.epoch.is_none(),
                    ClaimOn::Pair(_, key) => {
                        l.pair_trial.as_deref() == Some(key.as_str()) && l.pair_epoch.is_none()
                    }
                }
        });
        let mut names = Vec::with_capacity(carried.len());
        for (lid, l) in carried {
            names.push(l.name(lid));
            self.withdraw(l, now);
        }
        match on {
            ClaimOn::Endpoint(_) => {
                let unclaim = self.entries.get(&id).is_some_and(|e| {
                    e.health.state == State::ProbeAllowed && e.health.claimed && e.claim.is_none()
                });
                if unclaim {
                    self.unindex(id);
                    if let Some(e) = self.entries.get_mut(&id) {
                        e.health.claimed = false;
                    }
                    self.index(id);
                }
            }
            ClaimOn::Pair(_, key) => {
                if let Some(p) = self.entries.get(&id).map(|e| e.pool) {
                    self.pools[p].dests.claim_lost(key, id);
                }
            }
        }
        names
    }

    /// Undo a lease that was granted on a claim another daemon won: no event, no outcome.
    fn withdraw(&mut self, l: Lease, now: Instant) {
        let Some(p) = self
            .entries
            .at(l.slot)
            .filter(|(id, _)| *id == l.endpoint)
            .map(|(_, e)| e.pool)
        else {
            return;
        };
        self.pools[p].leases -= 1;
        if let (Some(g), Some(t)) = (l.target_trial, l.target_key()) {
            self.pools[p].targets.abandon_trial(t, g, now);
        }
        self.sessions.forget_endpoint(l.endpoint);
        self.set_leases_at(l.slot, -1);
    }

    /// Whether another daemon holds the trial of endpoint `id`.
    pub(super) fn claimed_remotely(&self, id: EndpointId) -> bool {
        self.entries
            .get(&id)
            .is_some_and(|e| self.pools[e.pool].index.is_held_remotely(id))
    }

    /// After loading `row` into its entry: a trial another daemon holds stays theirs
    /// until its claim lapses.
    pub(super) fn claimed_elsewhere(&mut self, row: &EndpointRow, now: Instant) {
        let Some(c) = row.claim.filter(|c| !c.left.is_zero()) else {
            return;
        };
        let Some(e) = self.entries.get(&row.id) else {
            return;
        };
        if e.health.state != State::ProbeAllowed || e.claim == Some(c.epoch) {
            return;
        }
        self.unindex(row.id);
        let Some(e) = self.entries.get_mut(&row.id) else {
            return;
        };
        e.health.claimed = true;
        e.claim = None;
        let p = e.pool;
        self.index(row.id);
        self.pools[p].index.held_remotely(row.id, now + c.left);
    }

    /// Trials other daemons held whose claims lapsed without news: free again.
    pub(super) fn lapse_remote_claims(&mut self, p: usize, now: Instant) {
        while let Some(id) = self.pools[p].index.lapsed_remote(now) {
            let lapsed = self.entries.get(&id).is_some_and(|e| {
                e.health.state == State::ProbeAllowed && e.health.claimed && e.claim.is_none()
            });
            if lapsed {
                self.unindex(id);
                if let Some(e) = self.entries.get_mut(&id) {
                    e.health.claimed = false;
                }
                self.index(id);
            }
        }
    }

    /// The row of an endpoint as the store holds it now (written by another daemon or a
    /// CLI command, or found changed by a write of ours): memory follows it, keeping what
    /// only this daemon knows (leases, statistics, failures counting towards `fall` while
    /// the state stays, its own claim while the row still names it). A trial this daemon
    /// held that was claimed again elsewhere is over: its lease's result will be refused.
    pub fn refresh_row(&mut self, row: &EndpointRow, now: Instant) {
        if self.removed.contains(&row.id) {
            return;
        }
        let same_pool = self
            .entries
            .get(&row.id)
            .map(|e| self.pools[e.pool].cfg.name == row.pool);
        match same_pool {
            None | Some(false) => {
                self.insert_row(row, now);
                return;
            }
            Some(true) => {}
        }
        self.follow_columns(row);
        let was_remote = self.claimed_remotely(row.id);
        self.unindex(row.id);
        let e = self.entries.get_mut(&row.id).expect("held");
        let ours = e.claim;
        let mut h = Health::new(row.state);
        h.streak = row.streak;
        h.reason_streak = row.reason_streak;
        h.reason = row.reason;
        h.phase = row.phase;
        h.detail = row.detail.clone();
        h.restore_cooldown(row.cooldown_ms, row.cooldown_left, now);
        if e.health.state == row.state {
            h.fails = e.health.fails;
        }
        let claim = row.claim;
        let mut remote_until = None;
        let mut ended = false;
        match (row.state, claim) {
            (State::ProbeAllowed, Some(c)) if ours == Some(c.epoch) => h.claimed = true,
            (State::ProbeAllowed, Some(c)) if !c.left.is_zero() => {
                h.claimed = true;
                e.claim = None;
                remote_until = Some(now + c.left);
            }
            (State::ProbeAllowed, _) => {
                // Nobody holds it in the store: only a claim of ours still waiting for the
                // store's answer stays.
                h.claimed = e.health.claimed
                    && ours.is_none()
                    && !was_remote
                    && e.health.state == State::ProbeAllowed;
                e.claim = None;
            }
            (_, c) => {
                // Not probe_allowed: whatever trial there was is over. Ended by an act that
                // was no trial (an operator's), it leaves our lease an ordinary one.
                ended = ours.is_some() && c.map(|c| c.epoch) == ours;
                e.claim = None;
            }
        }
        e.health = h;
        e.rev = row.rev;
        let p = e.pool;
        self.index(row.id);
        if let Some(until) = remote_until {
            self.pools[p].index.held_remotely(row.id, until);
        }
        if ended {
            for l in self.leases.of_endpoint_mut(row.id) {
                l.trial = false;
            }
        }
    }

    /// What an operator or another daemon changed of a held endpoint's row besides its
    /// health: its URL (a rotated password), its tags, its exit address.
    fn follow_columns(&mut self, row: &EndpointRow) {
        let Some(e) = self.entries.get(&row.id) else {
            return;
        };
        let (url_moved, retagged) = (e.url != row.url, !self.tags.same(&e.tags, &row.tags));
        if url_moved {
            self.update_url(row.id, row.url.clone());
        }
        if retagged {
            self.update_tags(row.id, &row.tags);
        }
        if let Some(p) = self.entries.get(&row.id).map(|e| e.pool) {
            // Another daemon learned it (docs/exit.md, "Stored").
            self.pools[p].exits.learned(row.id, row.exit_ip);
            self.sync_exit(p, row.id);
        }
    }

    /// A write of ours of endpoint `id`'s row was committed as change `seq` over the row's
    /// change `before`: whether memory held that one (then it holds `seq` now). If not, the
    /// write landed on a change memory has not read (another writer's edit of the URL or
    /// tags, or its claim or exit address, committed just before the write or while it
    /// waited), and the row as it is now carries that change under `seq`: read it again.
    pub fn wrote_over(&mut self, id: EndpointId, before: i64, seq: i64) -> bool {
        match self.entries.get_mut(&id) {
            Some(e) if e.rev == before => {
                e.rev = e.rev.max(seq);
                true
            }
            Some(_) => false,
            // Gone from memory: nothing to read.
            None => true,
        }
    }

    /// A pair row as the store holds it now.
    pub fn refresh_pair(&mut self, row: &PairRow, now: Instant) {
        let Some(p) = self.entries.get(&row.record.endpoint).map(|e| e.pool) else {
            return;
        };
        if let Err(e) = self.pools[p].dests.restore(&row.record, row.claim, now) {
            tracing::warn!(endpoint = row.record.endpoint, error = %e, "pair not followed");
        }
    }

    /// The pair (`id`, `destination`) has no row any more: it is available.
    pub fn forget_pair(&mut self, id: EndpointId, destination: &str) {
        if let Some(p) = self.entries.get(&id).map(|e| e.pool) {
            self.pools[p].dests.forget(destination, id);
        }
    }

    /// The claims this daemon holds now, each with how long its trial may still run (the
    /// lease's time left, or the probe's), for the store to keep them from lapsing.
    pub fn claims_held(&self, now: Instant) -> Vec<(ClaimOn, Epoch, Duration)> {
        let mut out = Vec::new();
        let mut by_lease = std::collections::HashSet::new();
        for (_, l) in self.leases.iter() {
            let left = l.expires.saturating_duration_since(now);
            let Some(e) = self.entries.get(&l.endpoint) else {
                continue;
            };
            if let (true, Some(epoch)) = (l.trial, l.epoch) {
                if e.claim == Some(epoch) {
                    out.push((ClaimOn::Endpoint(l.endpoint), epoch, left));
                    by_lease.insert(l.endpoint);
                }
            }
            if let (Some(key), Some(epoch)) = (l.pair_trial.as_deref(), l.pair_epoch) {
                if self.pools[e.pool].dests.our_claim(key, l.endpoint) == Some(epoch) {
                    out.push((ClaimOn::Pair(l.endpoint, key.to_string()), epoch, left));
                }
            }
        }
        // The prober's claims: no lease carries them.
        for (id, e) in self.entries.iter() {
            if let (Some(epoch), false) = (e.claim, by_lease.contains(id)) {
                let hold = self.pools[e.pool].cfg.trial_hold();
                out.push((ClaimOn::Endpoint(*id), epoch, hold));
            }
        }
        out
    }

    /// Whether the lease's trial was claimed again elsewhere since it was granted: its
    /// result must change nothing (docs/fleet.md, "Ownership"). Names whose trial.
    pub(super) fn stale(&self, l: &Lease) -> Option<String> {
        let e = self.entries.get(&l.endpoint)?;
        if let (true, Some(epoch)) = (l.trial, l.epoch) {
            if e.claim != Some(epoch) {
                return Some(format!("endpoint {}", l.endpoint));
            }
        }
        if let (Some(key), Some(epoch)) = (l.pair_trial.as_deref(), l.pair_epoch) {
            if self.pools[e.pool].dests.our_claim(key, l.endpoint) != Some(epoch) {
                return Some(format!("endpoint {} for {key}", l.endpoint));
            }
        }
        None
    }

    /// What memory holds of the endpoints of `pool` (all: None), those in `state` when
    /// given, as rows by id: what a fleet's views show while its database is away. Memory
    /// holds no label, source or times: they are empty.
    pub fn memory_rows(
        &self,
        pool: Option<&str>,
        state: Option<State>,
        now: Instant,
        wall: SystemTime,
    ) -> Vec<EndpointRow> {
        let p = match pool.map(|name| self.by_name.get(name)) {
            Some(None) => return Vec::new(),
            Some(Some(&p)) => Some(p),
            None => None,
        };
        let names = self.tags.names();
        let mut out: Vec<EndpointRow> = self
            .entries
            .iter()
            .filter(|(_, e)| p.is_none_or(|p| e.pool == p))
            .filter(|(_, e)| state.is_none_or(|s| e.health.state == s))
            .map(|(id, e)| {
                let tags = e
                    .tags
                    .iter()
                    .filter_map(|&t| names.get(t as usize).copied());
                EndpointRow {
                    label: None,
                    source: None,
                    tags: crate::tags::Tags::from_pairs(tags).unwrap_or_default(),
                    ..EndpointRow::fixture_of(*id, e.url.clone(), &self.pools[e.pool].cfg.name)
                }
                .with_health(StoredHealth::of(&e.health, now), wall)
            })
            .collect();
        out.sort_by_key(|r| r.id);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PoolConfig;

    const ID: EndpointId = 7;

    /// A pool holding endpoint `ID` as read at change `rev`.
    fn holding(rev: i64) -> Pools {
        let mut p = Pools::new([PoolConfig::builtin("default")]);
        let mut row = EndpointRow::fixture(ID, "http://10.0.0.7:3128", "default");
        row.rev = rev;
        p.insert_row(&row, Instant::now());
        p
    }

    /// A write of ours committed as change 9 over the row's change `before`, with memory
    /// holding the row at `held` (None: not held): whether memory holds the change it
    /// wrote over, and the change memory holds after.
    #[test]
    fn a_write_over_a_change_memory_has_not_read_reads_the_row_again() {
        let cases = [
            ("over the change memory holds", Some(5), 5, true, Some(9)),
            (
                "over another writer's change memory missed",
                Some(5),
                6,
                false,
                Some(5),
            ),
            ("over the first load's change", Some(0), 0, true, Some(9)),
            ("an endpoint gone from memory", None, 6, true, None),
        ];
        for (what, held, before, seen, after) in cases {
            let mut p = match held {
                Some(rev) => holding(rev),
                None => Pools::new([PoolConfig::builtin("default")]),
            };
            assert_eq!(p.wrote_over(ID, before, 9), seen, "{what}");
            assert_eq!(p.entries.get(&ID).map(|e| e.rev), after, "{what}");
        }
    }

    /// A row read from the store replaces what memory holds of the URL and tags, and its
    /// change is the one memory holds now.
    #[test]
    fn a_row_read_again_brings_its_url_tags_and_change() {
        let mut p = holding(5);
        let mut row = EndpointRow::fixture(ID, "http://10.0.0.7:3129", "default");
        row.rev = 8;
        row.tags = crate::tags::Tags::from_column(Some(r#"{"tier":"dc"}"#)).unwrap();
        p.refresh_row(&row, Instant::now());
        let e = p.entries.get(&ID).unwrap();
        assert_eq!((e.url.port, e.rev), (3129, 8));
        assert!(p.tags.same(&e.tags, &row.tags));
        assert!(!p.tags.same(&e.tags, &crate::tags::Tags::default()));
    }
}
