//! Pacing (docs/selection.md, "Pacing"): per pool, the uses of each endpoint for each
//! host, so that a lease for a host takes only an endpoint whose (endpoint, host) pair is
//! ready. Pure: the caller passes the time in.
//!
//! Only pairs that are not ready, or that remember a slow-down, are held: a pair used at
//! `t` is kept until `t + interval` and its last lease ended, then forgotten. Hosts are
//! kept in least-recently-used order; past `max_hosts` hosts or `max_pairs` pairs the
//! least recently used host is forgotten whole (`dropped` counts them).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use lru::LruCache;
use rustc_hash::{FxBuildHasher, FxHashMap};
use tokio::time::Instant;

use crate::config::PaceConfig;
use crate::endpoint::EndpointId;

/// Hosts held per pool at most.
pub(super) const DEFAULT_MAX_HOSTS: usize = 65_536;
/// Pairs held per pool at most.
pub(super) const DEFAULT_MAX_PAIRS: usize = 1_000_000;
/// A slow-down doubles the pair's spacing, up to 2^4 = 16 times.
const MAX_EXP: u8 = 4;
/// Successes at one widening before it is halved again.
const CALM_AFTER: u8 = 4;
/// The spacing widened when the interval is shorter.
const SLOW_BASE: Duration = Duration::from_secs(1);

/// Times past this many ms since the origin move the origin forward (`Pace::rebase`):
/// a pair's ready time fits in 32 bits (24.8 days, plus the longest spacing ahead).
const REBASE_AT: u64 = 1 << 31;
/// A pair is never held back longer than this (16 × the longest interval): its ready
/// time stays within 32 bits of the origin.
const MAX_HOLD: u64 = 16 * 24 * 3600 * 1000;

/// One (endpoint, host) pair: 8 bytes (16 with its key in the host's map).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Pair {
    /// Milliseconds (since the pool's origin) from which it may be used again.
    ready: u32,
    /// Live leases of the endpoint for the host.
    in_flight: u16,
    /// The spacing is the interval × 2^exp (slow-down).
    exp: u8,
    /// Successes since the last change of `exp`.
    calm: u8,
}

/// "Nothing was ready for this host", remembered so that asking again before anything
/// changed costs no pass over the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Dry {
    /// The pool's epoch then (see `Pools::epoch`).
    pub(super) epoch: u64,
    /// What the lease asked for besides the host (schemes, tags).
    pub(super) sig: u64,
    /// When the first of the pairs passed over is ready again; `None`: only a release.
    pub(super) until: Option<u64>,
}

struct Host {
    interval: u64,
    cap: u32,
    pairs: FxHashMap<EndpointId, Pair>,
    /// (ready, endpoint) of pairs that may be forgotten then, about in time order.
    due: VecDeque<(u64, EndpointId)>,
    /// The same for pairs slowed down far beyond the interval (rare).
    late: BinaryHeap<Reverse<(u64, EndpointId)>>,
    dry: Option<Dry>,
}

impl Pair {
    fn ready(&self) -> u64 {
        u64::from(self.ready)
    }

    /// Ready at `ms` (at most `MAX_HOLD` past `now`).
    fn set_ready(&mut self, ms: u64, now: u64) {
        self.ready = ms.min(now + MAX_HOLD).min(u64::from(u32::MAX)) as u32;
    }
}

impl Host {
    fn new((interval, cap): (Duration, u32)) -> Host {
        Host {
            interval: interval.as_millis() as u64,
            cap,
            pairs: FxHashMap::default(),
            due: VecDeque::new(),
            late: BinaryHeap::new(),
            dry: None,
        }
    }

    fn binds(&self) -> bool {
        self.interval > 0 || self.cap > 0
    }

    fn ready(&self, p: &Pair, now: u64) -> bool {
        p.ready() <= now && (self.cap == 0 || u32::from(p.in_flight) < self.cap)
    }

    /// Remember to look at `id` again at `at`.
    fn due_at(&mut self, at: u64, id: EndpointId, now: u64) {
        if at <= now.saturating_add(self.interval) {
            self.due.push_back((at, id));
        } else {
            self.late.push(Reverse((at, id)));
        }
    }

    /// Forget the pairs that are ready, idle and not slowed; returns how many.
    fn prune(&mut self, now: u64) -> usize {
        let mut gone = 0;
        loop {
            let next = match (self.due.front(), self.late.peek()) {
                (Some(&(t, id)), _) if t <= now => {
                    self.due.pop_front();
                    id
                }
                (_, Some(&Reverse((t, id)))) if t <= now => {
                    self.late.pop();
                    id
                }
                _ => break,
            };
            let idle = self
                .pairs
                .get(&next)
                .is_some_and(|p| p.ready() <= now && p.in_flight == 0 && p.exp == 0);
            if idle {
                self.pairs.remove(&next);
                gone += 1;
            }
        }
        gone
    }
}

/// `interval` widened `exp` times: ×2^exp, from 1 s when the interval is shorter.
fn spacing(interval: u64, exp: u8) -> u64 {
    if exp == 0 {
        return interval;
    }
    interval.max(SLOW_BASE.as_millis() as u64) << exp
}

/// Whether an endpoint may be used for the host now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Check {
    Ready,
    /// Used too recently: ready at this time (ms since the origin), or `None` when only
    /// a release makes it ready (it is at `in_flight`).
    Blocked(Option<u64>),
}

/// What the selection consults for one lease: the host's pairs, read-only.
pub(super) struct Gate<'a> {
    host: &'a Host,
    now: u64,
}

impl Gate<'_> {
    pub(super) fn check(&self, id: EndpointId) -> Check {
        match self.host.pairs.get(&id) {
            Some(p) if !self.host.ready(p, self.now) => {
                Check::Blocked((p.ready() > self.now).then_some(p.ready()))
            }
            _ => Check::Ready,
        }
    }
}

/// A slow-down's effect on a pair, for its event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Slowed {
    /// The pair's spacing now.
    pub(super) spacing: Duration,
    /// Until when it is not used.
    pub(super) until: Duration,
}

/// The pacing state of one pool.
pub(super) struct Pace {
    cfg: Option<PaceConfig>,
    hosts: LruCache<Box<str>, Host, FxBuildHasher>,
    pairs: usize,
    max_hosts: usize,
    max_pairs: usize,
    dropped: u64,
    origin: Instant,
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
            cfg,
            hosts: LruCache::unbounded_with_hasher(FxBuildHasher),
            pairs: 0,
            max_hosts: max_hosts.max(1),
            max_pairs: max_pairs.max(1),
            dropped: 0,
            origin,
        }
    }

    /// New settings (a reload): every held host takes its new rule at once.
    pub(super) fn set_config(&mut self, cfg: Option<PaceConfig>) {
        if let Some(c) = &cfg {
            for (name, h) in self.hosts.iter_mut() {
                let (interval, cap) = c.rule_for(name);
                h.interval = interval.as_millis() as u64;
                h.cap = cap;
                h.dry = None;
            }
        }
        self.cfg = cfg;
    }

    pub(super) fn is_on(&self) -> bool {
        self.cfg.is_some()
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
        for (_, h) in self.hosts.iter_mut() {
            for p in h.pairs.values_mut() {
                p.ready = p.ready().saturating_sub(shift) as u32;
            }
            for (t, _) in h.due.iter_mut() {
                *t = t.saturating_sub(shift);
            }
            h.late = h
                .late
                .drain()
                .map(|Reverse((t, id))| Reverse((t.saturating_sub(shift), id)))
                .collect();
            h.dry = None;
        }
    }

    pub(super) fn instant(&self, ms: u64) -> Instant {
        self.origin + Duration::from_millis(ms)
    }

    /// Before a lease for `host`: forget its pairs that became idle, and mark it used.
    /// Returns whether any pair of it is held (else nothing is paced for it now).
    pub(super) fn prepare(&mut self, host: &str, now: Instant) -> bool {
        let now = self.now_ms(now);
        let Some(h) = self.hosts.get_mut(host) else {
            return false;
        };
        let gone = h.prune(now);
        let held = !h.pairs.is_empty();
        self.pairs -= gone;
        held
    }

    /// The gate to check endpoints by for `host` (after `prepare`), or `None` when nothing
    /// is paced for it.
    pub(super) fn gate(&self, host: &str, now: Instant) -> Option<Gate<'_>> {
        let host = self.hosts.peek(host).filter(|h| !h.pairs.is_empty())?;
        Some(Gate {
            host,
            now: self.ms(now),
        })
    }

    /// The remembered "nothing ready" of `host`, if it still holds for a lease asking
    /// `sig` at pool `epoch`: when to ask again (`Some(None)`: after a release).
    pub(super) fn dry(
        &self,
        host: &str,
        epoch: u64,
        sig: u64,
        now: Instant,
    ) -> Option<Option<u64>> {
        let d = self.hosts.peek(host)?.dry?;
        let now = self.ms(now);
        let holds = d.epoch == epoch && d.sig == sig && d.until.is_none_or(|u| now < u);
        holds.then_some(d.until)
    }

    /// Remember that nothing was ready for `host`.
    pub(super) fn set_dry(&mut self, host: &str, dry: Dry) {
        if let Some(h) = self.hosts.peek_mut(host) {
            h.dry = Some(dry);
        }
    }

    /// A lease of `id` for `host` was granted at `now`. Returns whether it counts in the
    /// pair's `in_flight` (its end must then be told with `end`).
    pub(super) fn record(&mut self, host: &str, id: EndpointId, now: Instant) -> bool {
        if self.cfg.is_none() {
            return false;
        }
        let now = self.now_ms(now);
        let Some(cfg) = &self.cfg else {
            return false;
        };
        if !self.hosts.contains(host) {
            let rule = cfg.rule_for(host);
            let h = Host::new(rule);
            if !h.binds() {
                // Nothing to space and nothing to count: nothing held.
                return false;
            }
            self.hosts.put(host.into(), h);
        }
        let Some(h) = self.hosts.get_mut(host) else {
            return false;
        };
        let added = !h.pairs.contains_key(&id);
        let interval = h.interval;
        let p = h.pairs.entry(id).or_default();
        let next = now + spacing(interval, p.exp);
        p.set_ready(p.ready().max(next), now);
        p.in_flight = p.in_flight.saturating_add(1);
        let at = p.ready();
        h.due_at(at, id, now);
        if added {
            self.pairs += 1;
            self.evict(host);
        }
        true
    }

    /// A lease counted by `record` ended (report, release or expiry).
    pub(super) fn end(&mut self, host: &str, id: EndpointId, now: Instant) {
        let now = self.now_ms(now);
        let Some(h) = self.hosts.peek_mut(host) else {
            return;
        };
        // A release may make the endpoint ready: what was remembered as dry is not.
        h.dry = None;
        let Some(p) = h.pairs.get_mut(&id) else {
            return;
        };
        p.in_flight = p.in_flight.saturating_sub(1);
        // Still spaced: the look at `ready` that `record` scheduled finds it idle then.
        // Past it, that look found it busy and kept it: look again now.
        if p.in_flight == 0 && p.ready() <= now {
            h.due_at(now, id, now);
        }
    }

    /// A lease counted by `record` is dropped with its endpoint's entry (no time known):
    /// it no longer counts.
    pub(super) fn forget_lease(&mut self, host: &str, id: EndpointId) {
        let Some(h) = self.hosts.peek_mut(host) else {
            return;
        };
        h.dry = None;
        if let Some(p) = h.pairs.get_mut(&id) {
            p.in_flight = p.in_flight.saturating_sub(1);
            if p.in_flight == 0 {
                let at = p.ready();
                h.late.push(Reverse((at, id)));
            }
        }
    }

    /// The host answered 429 (or 503 with Retry-After) through `id`: its spacing doubles
    /// (up to 16×) and it is not used before `retry_after`.
    pub(super) fn slow_down(
        &mut self,
        host: &str,
        id: EndpointId,
        retry_after: Option<Duration>,
        now: Instant,
    ) -> Option<Slowed> {
        self.cfg.as_ref()?;
        let at = self.now_ms(now);
        let cfg = self.cfg.as_ref()?;
        if !self.hosts.contains(host) {
            let rule = cfg.rule_for(host);
            self.hosts.put(host.into(), Host::new(rule));
        }
        let h = self.hosts.get_mut(host)?;
        let added = !h.pairs.contains_key(&id);
        let interval = h.interval;
        let p = h.pairs.entry(id).or_default();
        p.exp = (p.exp + 1).min(MAX_EXP);
        p.calm = 0;
        let spacing = spacing(interval, p.exp);
        let hold = retry_after.map_or(0, |d| d.as_millis() as u64);
        p.set_ready(p.ready().max(at + spacing.max(hold)), at);
        let until = p.ready();
        h.dry = None;
        h.due_at(until, id, at);
        if added {
            self.pairs += 1;
            self.evict(host);
        }
        Some(Slowed {
            spacing: Duration::from_millis(spacing),
            until: Duration::from_millis(until - at),
        })
    }

    /// The host answered through `id`: a widened spacing narrows again after
    /// `CALM_AFTER` of these in a row.
    pub(super) fn success(&mut self, host: &str, id: EndpointId, now: Instant) {
        let now = self.now_ms(now);
        let Some(h) = self.hosts.peek_mut(host) else {
            return;
        };
        let Some(p) = h.pairs.get_mut(&id) else {
            return;
        };
        if p.exp == 0 {
            return;
        }
        p.calm += 1;
        if p.calm >= CALM_AFTER {
            p.exp -= 1;
            p.calm = 0;
            if p.exp == 0 {
                let at = p.ready().max(now);
                h.due_at(at, id, now);
            }
        }
    }

    /// The endpoint is gone: its pairs too.
    pub(super) fn remove_endpoint(&mut self, id: EndpointId) {
        for (_, h) in self.hosts.iter_mut() {
            if h.pairs.remove(&id).is_some() {
                self.pairs -= 1;
            }
        }
    }

    /// Forget least recently used hosts (never `keep`, just used) past the caps.
    fn evict(&mut self, keep: &str) {
        while self.hosts.len() > self.max_hosts || self.pairs > self.max_pairs {
            let Some((name, h)) = self.hosts.pop_lru() else {
                return;
            };
            if &*name == keep {
                // The only host left: keep it whole.
                self.hosts.put(name, h);
                return;
            }
            self.pairs -= h.pairs.len();
            self.dropped += 1;
        }
    }

    /// Hosts forgotten to stay within the caps, ever.
    pub(super) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Pairs held.
    pub(super) fn pairs(&self) -> usize {
        self.pairs
    }

    /// Hosts held.
    pub(super) fn hosts(&self) -> usize {
        self.hosts.len()
    }

    /// How a pair stands, for tests and the status of a pair: (ready in ms from now,
    /// in flight, widening exponent).
    #[cfg(test)]
    fn pair(&self, host: &str, id: EndpointId, now: Instant) -> Option<(u64, u16, u8)> {
        let now = self.ms(now);
        let p = self.hosts.peek(host)?.pairs.get(&id)?;
        Some((p.ready().saturating_sub(now), p.in_flight, p.exp))
    }
}

#[cfg(test)]
mod tests;
