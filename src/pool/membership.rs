//! Endpoints entering and leaving the pools: rows loaded or restored from the store,
//! removed, renamed, re-tagged, and the indexes (ready queues, cooling, trials) kept in
//! step with their state. An entry's filing fields (`gen`, `leases`, `pa_seq`) change
//! here and nowhere else: they say where its pool's `StateIndex` holds it.

use tokio::time::Instant;

use crate::config::PoolConfig;
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::health::{Health, State};
use crate::store::EndpointRow;

use super::state_index::Place;
use super::{Entry, Pools};

impl Pools {
    /// Load a stored endpoint: a cooling deadline is what the store read as left of it
    /// (`clamp(cooldown_until − its now, 0, cooldown_ms)`) after `now`; a trial another
    /// daemon holds stays theirs until its claim lapses.
    pub fn insert_row(&mut self, row: &EndpointRow, now: Instant) {
        if self.removed.contains(&row.id) {
            return;
        }
        let pool = match self.by_name.get(&row.pool) {
            Some(&i) => i,
            None => self.ensure_pool(PoolConfig::builtin(&row.pool)),
        };
        let mut health = Health::new(row.state);
        health.streak = row.streak;
        health.reason_streak = row.reason_streak;
        health.reason = row.reason;
        health.phase = row.phase;
        health.detail = row.detail.clone();
        health.restore_cooldown(row.cooldown_ms, row.cooldown_left, now);
        // A reloaded row (config sync, sources) keeps what the daemon saw it do.
        let (stats, up_since) = self
            .entries
            .get(&row.id)
            .map(|e| (e.stats, e.up_since))
            .unwrap_or_else(|| (Default::default(), self.ms(now)));
        self.remove_entry(row.id);
        let tags = self.tags.intern(&row.tags);
        self.pools[pool].latencies.moved(None, stats.latency_ms);
        self.entries.insert(
            row.id,
            Entry {
                url: row.url.clone(),
                secret: row.url.to_secret_string().into(),
                pool,
                health,
                leases: 0,
                gen: 0,
                pa_seq: 0,
                claim: None,
                stats,
                tags,
                up_since,
                exit: 0,
                rev: row.rev,
            },
        );
        self.generation += 1;
        self.index(row.id);
        let seen = row
            .exit_seen_at
            .as_deref()
            .and_then(crate::store::parse_time);
        self.pools[pool].exits.load(row.id, row.exit_ip, seen, now);
        self.sync_exit(pool, row.id);
        self.claimed_elsewhere(row, now);
    }

    /// New tags of a held endpoint (after `edit`).
    pub fn update_tags(&mut self, id: EndpointId, tags: &crate::tags::Tags) {
        let ids = self.tags.intern(tags);
        if let Some(e) = self.entries.get_mut(&id) {
            let old = std::mem::replace(&mut e.tags, ids);
            self.tags.release(&old);
            self.generation += 1;
        } else {
            self.tags.release(&ids);
        }
    }

    /// Make memory match the store for one endpoint after a failed commit: the stored row
    /// wins (or its absence), and so do its stored (endpoint, destination) pairs: a ban
    /// whose commit failed is not kept in memory, one that is stored comes back. Its
    /// leases go too: they may stem from a grant that failed.
    pub fn restore_row(
        &mut self,
        id: EndpointId,
        row: Option<&EndpointRow>,
        pairs: &[crate::store::pairs::PairRow],
        now: Instant,
    ) {
        if let Some(e) = self.entries.get(&id) {
            self.pools[e.pool].dests.remove_endpoint(id);
        }
        self.remove_entry(id);
        if let Some(r) = row {
            self.removed.remove(&id);
            self.insert_row(r, now);
            for pair in pairs {
                self.restore_pair(pair, now);
            }
        }
    }

    /// Forget a deleted endpoint and refuse any later row with its id.
    pub fn remove_for_good(&mut self, id: EndpointId) -> bool {
        self.removed.insert(id);
        if let Some(e) = self.entries.get(&id) {
            // The store cascades the pair rows with the endpoint's.
            self.pools[e.pool].dests.remove_endpoint(id);
            self.pools[e.pool].targets.remove_endpoint(id);
            self.pools[e.pool].pace.remove_endpoint(id);
        }
        self.remove_entry(id)
    }

    /// Forget an endpoint (after `remove`), with its leases.
    pub fn remove_entry(&mut self, id: EndpointId) -> bool {
        if !self.entries.contains_key(&id) {
            return false;
        }
        self.unindex(id);
        let p = self.entries[&id].pool;
        for (_, l) in self.leases.take_all(|l| l.endpoint == id) {
            self.pools[p].leases -= 1;
            if let Some(r) = l.paced {
                self.pools[p].pace.end(r, id);
            }
        }
        self.sessions.forget_endpoint(id);
        if let Some(e) = self.entries.remove(&id) {
            self.pools[e.pool].exits.forget(id);
            self.pools[e.pool].dests.set_exit(id, None);
            self.tags.release(&e.tags);
            self.pools[e.pool].latencies.moved(e.stats.latency_ms, None);
        }
        true
    }

    /// Update the URL (password, label changes) of a held endpoint.
    pub fn update_url(&mut self, id: EndpointId, url: ProxyUrl) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.secret = url.to_secret_string().into();
            e.url = url;
        }
    }

    /// Endpoint in `slot` holds `delta` more live leases. An available one moves to the
    /// ready queue of its new count, behind its equals (round robin); one back under its
    /// pool's lease cap makes the candidates new (`generation`).
    pub(super) fn set_leases_at(&mut self, slot: u32, delta: i32) {
        let Some((_, e)) = self.entries.at_mut(slot) else {
            return;
        };
        let p = &mut self.pools[e.pool];
        let cap = p.cfg.max_leases_per_endpoint;
        if delta < 0 && cap != 0 && e.leases == cap {
            // Under its cap again: a candidate it was not.
            self.generation += 1;
        }
        if e.health.state == State::Available {
            // Round robin: the one just moved goes behind its equals.
            p.index.ready().forget(e.leases, slot, e.gen);
            e.leases = e.leases.saturating_add_signed(delta);
            self.gen += 1;
            e.gen = self.gen;
            p.index.ready().push(e.leases, slot, e.gen);
            let (pool, level) = (e.pool, e.leases);
            self.compact_ready(pool, level);
        } else {
            e.leases = e.leases.saturating_add_signed(delta);
        }
    }

    /// Drop stale queue items once they outnumber the live ones.
    fn compact_ready(&mut self, pool: usize, level: u32) {
        self.pools[pool]
            .index
            .ready()
            .compact(level, &self.entries, pool);
    }

    pub(super) fn unindex(&mut self, id: EndpointId) {
        let Some(slot) = self.entries.slot(&id) else {
            return;
        };
        let Some((_, e)) = self.entries.at_mut(slot) else {
            return;
        };
        self.pools[e.pool].index.leave(&place(id, slot, e));
        if e.health.state == State::Available {
            // Its queue items are stale from now on.
            self.gen += 1;
            e.gen = self.gen;
        }
    }

    pub(super) fn index(&mut self, id: EndpointId) {
        self.seq += 1;
        let seq = self.seq;
        let Some(slot) = self.entries.slot(&id) else {
            return;
        };
        let Some((_, e)) = self.entries.at_mut(slot) else {
            return;
        };
        // Sessions it may outrank look again (`sessions`): available, or a trial waiting.
        if e.health.state == State::Available
            || (e.health.state == State::ProbeAllowed && !e.health.claimed)
        {
            self.sessions.joined(id);
        }
        match e.health.state {
            State::Available => {
                self.gen += 1;
                e.gen = self.gen;
            }
            State::Cooling => {
                e.health.deadline = Some(e.health.deadline.unwrap_or_else(Instant::now));
            }
            State::ProbeAllowed if !e.health.claimed => e.pa_seq = seq,
            State::ProbeAllowed | State::Disabled => {}
        }
        let (pool, level) = (e.pool, e.leases);
        self.pools[pool].index.enter(&place(id, slot, e));
        if e.health.state == State::Available {
            self.compact_ready(pool, level);
        }
    }
}

/// Where entry `e` (endpoint `id` in `slot`) is filed in its pool's index as it is now.
fn place(id: EndpointId, slot: u32, e: &Entry) -> Place {
    Place {
        id,
        slot,
        state: e.health.state,
        leases: e.leases,
        gen: e.gen,
        deadline: e.health.deadline,
        pa_seq: e.pa_seq,
        claimed: e.health.claimed,
    }
}
