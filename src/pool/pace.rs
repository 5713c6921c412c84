//! Pacing (docs/selection.md, "Pacing"): per pool, the uses of each endpoint for each
//! host, so that a lease for a host takes only an endpoint whose (endpoint, host) pair is
//! ready. Pure: the caller passes the time in.
//!
//! A pair used at `t` says something until `t + interval` and its last lease's end (or
//! while it remembers a slow-down); after that it is forgotten when its host's table is
//! next tidied (`Host::tidy`, or `Pace::tidy_next` past the pair cap). Hosts are kept in
//! least-recently-used order; past `max_hosts` hosts the least recently used host is
//! forgotten whole (`dropped` counts them); past `max_pairs` pairs hosts first forget, in
//! turn, what says nothing any more, and only live pairs past the cap make hosts go
//! (`Pace::evict`).
//!
//! A lease finds its host once (`visit`: one hash lookup) and does everything else from
//! the handle it gets (`HostRef`: a slot in the slab of hosts and that slot's
//! generation): the ready checks, the record of its use, and its end, which the lease
//! carries the handle to. A pool whose rules bind nothing and that holds no host is not
//! looked up at all.

use std::time::Duration;

use rustc_hash::FxHashMap;
use tokio::time::Instant;

use crate::config::PaceConfig;
use crate::endpoint::EndpointId;

mod evict;
mod host;
mod id_table;
mod slab;
mod slow;
use evict::Round;
use host::Host;
pub(super) use host::{Check, Dry, Gate};
use slab::{Link, Slot, NIL};

/// Hosts held per pool at most.
pub(super) const DEFAULT_MAX_HOSTS: usize = 65_536;
/// Pairs held per pool at most.
pub(super) const DEFAULT_MAX_PAIRS: usize = 1_000_000;
/// A slow-down doubles the pair's spacing, up to 2^4 = 16 times.
const MAX_EXP: u8 = 4;
/// Successes at one widening before it is halved again.
const CALM_AFTER: u8 = 4;
/// The spacing widened when the interval is shorter.
pub(super) const SLOW_BASE: Duration = Duration::from_secs(1);

/// Times past this many ms since the origin move the origin forward (`Pace::rebase`):
/// a pair's ready time fits in 32 bits (24.8 days, plus the longest spacing ahead).
const REBASE_AT: u64 = 1 << 31;
/// A pair is never held back longer than this (16 × the longest interval): its ready
/// time stays within 32 bits of the origin.
pub(super) const MAX_HOLD: u64 = 16 * 24 * 3600 * 1000;

/// A held host, as a lease found it: its slot in the slab and the slot's generation, so
/// that a host dropped meanwhile (its slot reused) is not taken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct HostRef {
    slot: u32,
    gen: u32,
}

/// How a lease for a host stands with pacing, found with one lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Visit {
    /// Nothing is paced for it: its use is not recorded (pacing off, or no rule binds
    /// and no host is held).
    Skip,
    /// The host is not held: nothing holds an endpoint back; its use is recorded when
    /// its rule binds.
    Fresh,
    /// The host is held.
    Held(HostRef),
    /// The host is not held, and pacing holds all the live state it may: no endpoint is
    /// ready for it (asked again a second later), so that no live state is forgotten.
    Full,
}

/// The pacing state of one pool.
pub(super) struct Pace {
    cfg: Option<PaceConfig>,
    /// Some rule of `cfg` binds (an interval or an in-flight cap, the pool's or a site's):
    /// set with the config, so a pool whose rules bind nothing skips the lookup.
    binds: bool,
    index: FxHashMap<Box<str>, u32>,
    slots: Vec<Slot>,
    links: Vec<Link>,
    free: Vec<u32>,
    /// Most and least recently used slots.
    head: u32,
    tail: u32,
    pairs: usize,
    /// Pairs held with a widened spacing (a success narrows only those).
    widened: usize,
    max_hosts: usize,
    max_pairs: usize,
    dropped: u64,
    /// The round of hosts tidied past `max_pairs` so far.
    round: Round,
    /// Leases answered `paced`, ever.
    refused: u64,
    origin: Instant,
    /// The longest a slow-down holds a pair back, in ms (the pool's cooldown `max`).
    max_hold: u64,
    /// An empty host: the gate of a `Visit::Full`.
    spare: Host,
}

fn rule_binds(cfg: &PaceConfig) -> bool {
    cfg.interval > Duration::ZERO
        || cfg.in_flight > 0
        || cfg.sites.values().any(|s| {
            s.interval.is_some_and(|i| i > Duration::ZERO) || s.in_flight.is_some_and(|n| n > 0)
        })
}

impl Pace {
    /// Pacing by `cfg` (`None`: off), holding at most `max_hosts` hosts and `max_pairs`
    /// pairs; times count from `origin`.
    pub(super) fn new(
        cfg: Option<PaceConfig>,
        max_hosts: usize,
        max_pairs: usize,
        origin: Instant,
    ) -> Pace {
        Pace {
            binds: cfg.as_ref().is_some_and(rule_binds),
            cfg,
            index: FxHashMap::default(),
            slots: Vec::new(),
            links: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            pairs: 0,
            widened: 0,
            max_hosts: max_hosts.max(1),
            max_pairs: max_pairs.max(1),
            dropped: 0,
            round: Round::default(),
            refused: 0,
            origin,
            max_hold: MAX_HOLD,
            spare: Host::new((Duration::ZERO, 0)),
        }
    }

    /// New settings (a reload): every held host takes its new rule at once.
    pub(super) fn set_config(&mut self, cfg: Option<PaceConfig>) {
        if let Some(c) = &cfg {
            for &i in self.index.values() {
                let s = &mut self.slots[i as usize];
                let (interval, cap) = c.rule_for(&s.name);
                s.host.interval = interval.as_millis() as u64;
                s.host.cap = cap;
                s.host.dry = None;
            }
        }
        self.binds = cfg.as_ref().is_some_and(rule_binds);
        self.cfg = cfg;
    }

    /// `[pool.pace] wait`.
    pub(super) fn wait(&self) -> Duration {
        self.cfg.as_ref().map_or(Duration::ZERO, |c| c.wait)
    }

    /// Whether a 429 (or 503 with Retry-After) slows the pair down instead of banning it.
    pub(super) fn slows_down(&self) -> bool {
        self.cfg.as_ref().is_some_and(|c| c.slow_down)
    }

    pub(super) fn ms(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.origin).as_millis() as u64
    }

    /// `ms(now)`, first moving the origin forward when times would outgrow a pair's 32
    /// bits (every 24.8 days of uptime; O(pairs) then, nothing otherwise).
    fn now_ms(&mut self, now: Instant) -> u64 {
        let ms = self.ms(now);
        if ms < REBASE_AT {
            return ms;
        }
        self.rebase(ms);
        self.ms(now)
    }

    /// Move the origin `shift` ms forward: every held time is that much smaller (times
    /// already past become 0: past either way).
    fn rebase(&mut self, shift: u64) {
        self.origin += Duration::from_millis(shift);
        for &i in self.index.values() {
            let h = &mut self.slots[i as usize].host;
            for p in h.pairs.values_mut() {
                p.ready = p.ready().saturating_sub(shift) as u32;
            }
            h.busy_until = h.busy_until.saturating_sub(shift);
            h.dry = None;
        }
    }

    pub(super) fn instant(&self, ms: u64) -> Instant {
        self.origin + Duration::from_millis(ms)
    }

    fn host(&self, r: HostRef) -> Option<&Host> {
        self.slots
            .get(r.slot as usize)
            .filter(|s| s.gen == r.gen)
            .map(|s| &s.host)
    }

    fn host_mut(&mut self, r: HostRef) -> Option<&mut Host> {
        self.slots
            .get_mut(r.slot as usize)
            .filter(|s| s.gen == r.gen)
            .map(|s| &mut s.host)
    }

    /// The one lookup of a lease for `host`: whether pacing holds anything for it (and its
    /// handle then). A held host becomes the most recently used and forgets its pairs that
    /// became idle.
    pub(super) fn visit(&mut self, host: &str, now: Instant) -> Visit {
        if self.cfg.is_none() || (!self.binds && self.index.is_empty()) {
            return Visit::Skip;
        }
        let ms = self.now_ms(now);
        if self.pairs >= self.hard_pairs() {
            // At the bound: idle pairs make room before anything is refused.
            self.free_pairs(ms);
        }
        let Some(&i) = self.index.get(host) else {
            return match (self.binds, self.binds && self.room_for_host(ms)) {
                (false, _) => Visit::Skip,
                (true, true) => Visit::Fresh,
                (true, false) => Visit::Full,
            };
        };
        self.touch(i);
        Visit::Held(HostRef {
            slot: i,
            gen: self.slots[i as usize].gen,
        })
    }

    /// The gate to check endpoints by for a visited host, or `None` when nothing holds
    /// an endpoint back for it.
    pub(super) fn gate(&self, v: Visit, now: Instant) -> Option<Gate<'_>> {
        let (host, full) = match v {
            Visit::Held(r) => (self.host(r)?, self.pairs >= self.hard_pairs()),
            Visit::Full => (&self.spare, true),
            Visit::Skip | Visit::Fresh => return None,
        };
        if host.pairs.is_empty() && !full {
            return None;
        }
        Some(Gate {
            host,
            now: self.ms(now),
            full,
        })
    }

    /// The remembered "nothing ready" of a visited host, if it still holds for a lease
    /// asking `sig` at the pool's `generation`: when to ask again (`Some(None)`: after a release).
    pub(super) fn dry(
        &self,
        v: Visit,
        generation: u64,
        sig: u64,
        now: Instant,
    ) -> Option<Option<u64>> {
        let Visit::Held(r) = v else { return None };
        let d = self.host(r)?.dry?;
        let now = self.ms(now);
        let holds = d.generation == generation && d.sig == sig && d.until.is_none_or(|u| now < u);
        holds.then_some(d.until)
    }

    /// Remember that nothing was ready for a visited host.
    pub(super) fn set_dry(&mut self, v: Visit, dry: Dry) {
        if let Visit::Held(r) = v {
            if let Some(h) = self.host_mut(r) {
                h.dry = Some(dry);
            }
        }
    }

    /// A lease answered `paced` (for `status`).
    pub(super) fn count_refused(&mut self) {
        self.refused += 1;
    }

    /// A lease of `id` for `host` (as `visit` found it) was granted at `now`. Returns the
    /// host's handle when the lease counts in the pair's `in_flight` (its end must then
    /// be told with `end`).
    pub(super) fn record(
        &mut self,
        v: Visit,
        host: &str,
        id: EndpointId,
        now: Instant,
    ) -> Option<HostRef> {
        let r = match v {
            Visit::Skip | Visit::Full => return None,
            Visit::Held(r) => r,
            Visit::Fresh => {
                let h = Host::new(self.cfg.as_ref()?.rule_for(host));
                if !h.binds() {
                    // Nothing to space and nothing to count: nothing held.
                    return None;
                }
                self.insert(host, h)
            }
        };
        let now = self.now_ms(now);
        let max_hold = self.max_hold;
        let h = self.host_mut(r)?;
        let interval = h.interval;
        let counted = h.cap > 0;
        let (p, added) = h.pair(id, now);
        let next = now + slow::capped(interval, p.exp, max_hold);
        p.set_ready(p.ready().max(next), now);
        if counted {
            p.in_flight = p.in_flight.saturating_add(1);
        }
        let ready = p.ready();
        h.busy_until = h.busy_until.max(ready);
        h.leases += u32::from(counted);
        self.settle(r.slot, added, now);
        // Without an in-flight cap a lease's end readies nothing: it is not told.
        counted.then_some(r)
    }

    /// A lease counted by `record` ended (report, release, expiry, or its endpoint's
    /// entry dropped).
    pub(super) fn end(&mut self, r: HostRef, id: EndpointId) {
        let Some(h) = self.host_mut(r) else {
            // Dropped meanwhile: nothing of it is held.
            return;
        };
        // A release may make the endpoint ready: what was remembered as dry is not.
        h.dry = None;
        if let Some(p) = h.pairs.get_mut(id).filter(|p| p.in_flight > 0) {
            p.in_flight -= 1;
            h.leases = h.leases.saturating_sub(1);
        }
    }

    /// The endpoint is gone: its pairs too.
    pub(super) fn remove_endpoint(&mut self, id: EndpointId) {
        for &i in self.index.values() {
            let h = &mut self.slots[i as usize].host;
            if let Some(p) = h.pairs.remove(id) {
                h.leases = h.leases.saturating_sub(u32::from(p.in_flight));
                self.pairs -= 1;
                if p.exp > 0 {
                    self.widened -= 1;
                }
            }
        }
    }

    /// Hosts forgotten to stay within the caps, ever.
    pub(super) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// What `status` shows of it, when the pool paces.
    pub(super) fn status(&self) -> Option<crate::protocol::PaceStatus> {
        self.cfg.as_ref()?;
        Some(crate::protocol::PaceStatus {
            hosts: self.index.len(),
            pairs: self.pairs,
            hosts_dropped: self.dropped,
            paced: self.refused,
        })
    }

    /// Pairs held.
    pub(super) fn pairs(&self) -> usize {
        self.pairs
    }

    /// Hosts held.
    pub(super) fn hosts(&self) -> usize {
        self.index.len()
    }

    /// How a pair stands, for tests: (ready in ms from now, in flight, widening exponent).
    #[cfg(test)]
    fn pair(&self, host: &str, id: EndpointId, now: Instant) -> Option<(u64, u16, u8)> {
        let now = self.ms(now);
        let &i = self.index.get(host)?;
        let p = self.slots[i as usize].host.pairs.get(id)?;
        Some((p.ready().saturating_sub(now), p.in_flight, p.exp))
    }
}

#[cfg(test)]
mod tests;
