//! One host's pacing: its rule, the pairs it holds and when each may be forgotten, and
//! the read-only gate a lease's selection consults.

use std::time::Duration;

use super::id_table::IdTable;
use super::{MAX_HOLD, SLOW_BASE};
use crate::endpoint::EndpointId;

/// One (endpoint, host) pair: 8 bytes (16 with its key in the host's table).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Pair {
    /// Milliseconds (since the pool's origin) from which it may be used again.
    pub(super) ready: u32,
    /// Live leases of the endpoint for the host.
    pub(super) in_flight: u16,
    /// The spacing is the interval × 2^exp (slow-down).
    pub(super) exp: u8,
    /// Successes since the last change of `exp`.
    pub(super) calm: u8,
}

/// "Nothing was ready for this host", remembered so that asking again before anything
/// changed costs no pass over the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::pool) struct Dry {
    /// The pool's candidate generation then (see `Pools::generation`).
    pub(in crate::pool) generation: u64,
    /// What the lease asked for besides the host (schemes, tags).
    pub(in crate::pool) sig: u64,
    /// When the first of the pairs passed over is ready again; `None`: only a release.
    pub(in crate::pool) until: Option<u64>,
}

pub(super) struct Host {
    pub(super) interval: u64,
    pub(super) cap: u32,
    /// Pairs past their spacing, idle and not slowed stay here until the table is tidied
    /// (`tidy`, when it would grow): forgetting one the moment it is ready would cost a
    /// lookup of a pair nobody asks about.
    pub(super) pairs: IdTable<Pair>,
    pub(super) dry: Option<Dry>,
    /// Live leases its pairs count (their `in_flight`, summed).
    pub(super) leases: u32,
    /// The latest ready time (ms) any of its pairs was given: an interval or a slow-down
    /// runs until then.
    pub(super) busy_until: u64,
}

impl Pair {
    pub(super) fn ready(&self) -> u64 {
        u64::from(self.ready)
    }

    /// Ready at `ms` (at most `MAX_HOLD` past `now`).
    pub(super) fn set_ready(&mut self, ms: u64, now: u64) {
        self.ready = ms.min(now + MAX_HOLD).min(u64::from(u32::MAX)) as u32;
    }

    /// Whether it still says anything at `now`: not ready yet, in flight, or slowed.
    pub(super) fn holds(&self, now: u64) -> bool {
        self.ready() > now || self.in_flight > 0 || self.exp > 0
    }
}

impl Host {
    pub(super) fn new((interval, cap): (Duration, u32)) -> Host {
        Host {
            interval: interval.as_millis() as u64,
            cap,
            pairs: IdTable::default(),
            dry: None,
            leases: 0,
            busy_until: 0,
        }
    }

    pub(super) fn binds(&self) -> bool {
        self.interval > 0 || self.cap > 0
    }

    /// Whether it holds anything live at `now`: a lease in flight, or a pair not ready
    /// yet. Such a host is never forgotten (`Pace::evict`).
    pub(super) fn live(&self, now: u64) -> bool {
        self.leases > 0 || self.busy_until > now
    }

    pub(super) fn ready(&self, p: &Pair, now: u64) -> bool {
        p.ready() <= now && (self.cap == 0 || u32::from(p.in_flight) < self.cap)
    }

    /// The pair of `id`, new when none is held (the table tidied first); with, for a new
    /// one, how many pairs the tidying forgot.
    pub(super) fn pair(&mut self, id: EndpointId, now: u64) -> (&mut Pair, Option<usize>) {
        // One lookup unless the table is full: only then may a new pair need a tidy first.
        let full = self.pairs.len() >= self.pairs.capacity();
        let gone = if full && !self.pairs.contains_key(id) {
            self.tidy(now)
        } else {
            0
        };
        match self.pairs.get_or_insert(id) {
            (p, false) => (p, None),
            (p, true) => (p, Some(gone)),
        }
    }

    /// Forget the pairs that say nothing at `now`; how many went.
    pub(super) fn forget_idle(&mut self, now: u64) -> usize {
        let before = self.pairs.len();
        self.pairs.retain(|p| p.holds(now), |_| 0);
        before - self.pairs.len()
    }

    /// Before a new pair goes in: when the table is full, forget the pairs that say
    /// nothing any more; when that frees less than a quarter, double the table, so that
    /// a pass over C pairs comes at most once per C/4 new ones. Returns how many went.
    fn tidy(&mut self, now: u64) -> usize {
        let cap = self.pairs.capacity();
        if self.pairs.len() < cap {
            return 0;
        }
        let before = self.pairs.len();
        let mut gone = 0;
        self.pairs.retain(
            |p| p.holds(now),
            |kept| {
                gone = before - kept;
                if gone < cap / 4 {
                    cap
                } else {
                    0
                }
            },
        );
        gone
    }
}

/// `interval` widened `exp` times: ×2^exp, from 1 s when the interval is shorter.
pub(super) fn spacing(interval: u64, exp: u8) -> u64 {
    if exp == 0 {
        return interval;
    }
    interval.max(SLOW_BASE.as_millis() as u64) << exp
}

/// Whether an endpoint may be used for the host now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::pool) enum Check {
    Ready,
    /// Used too recently: ready at this time (ms since the origin), or `None` when only
    /// a release makes it ready (it is at `in_flight`).
    Blocked(Option<u64>),
}

/// What the selection consults for one lease: the host's pairs, read-only.
pub(in crate::pool) struct Gate<'a> {
    pub(super) host: &'a Host,
    pub(super) now: u64,
    /// Pacing holds all the live state it may: an endpoint with no pair here would need
    /// a new one, so it is not ready (asked again `FULL_RETRY` later).
    pub(super) full: bool,
}

/// When a lease refused for want of room in pacing asks again (ms).
const FULL_RETRY: u64 = 1000;

impl Gate<'_> {
    pub(in crate::pool) fn check(&self, id: EndpointId) -> Check {
        match self.host.pairs.get(id) {
            Some(p) if !self.host.ready(p, self.now) => {
                // At `in_flight`, its interval passing frees nothing: only a lease's end.
                let full = self.host.cap > 0 && u32::from(p.in_flight) >= self.host.cap;
                Check::Blocked((p.ready() > self.now && !full).then_some(p.ready()))
            }
            None if self.full => Check::Blocked(Some(self.now + FULL_RETRY)),
            _ => Check::Ready,
        }
    }
}

/// A slow-down's effect on a pair, for its event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::pool) struct Slowed {
    /// The pair's spacing now.
    pub(in crate::pool) spacing: Duration,
    /// Until when it is not used.
    pub(in crate::pool) until: Duration,
}
