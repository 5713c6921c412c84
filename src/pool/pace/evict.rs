//! What pacing forgets to stay within its bounds, and what it never forgets: a host that
//! holds a live lease or a running interval (its pairs still space or count uses) is
//! never the one let go, however many other hosts come. Past `max_hosts` hosts (or
//! `max_pairs` pairs) only idle state goes; live state past them is kept up to twice
//! each, and beyond that a lease that would need new state is answered `paced` (a
//! second later) rather than have live state forgotten (docs/selection.md, "Memory and
//! speed").

use super::slab::NIL;
use super::Pace;

/// Live hosts passed over (each moved to the front) looking for an idle one to forget:
/// a bound on the work of one new host or pair.
const SCAN: usize = 8;

/// Hosts tidied in turn past `max_pairs` (`Pace::evict`): where the next one is looked
/// for, and the hosts tidied and pairs freed in the round so far.
#[derive(Default)]
pub(super) struct Round {
    cursor: usize,
    hosts: usize,
    freed: usize,
}

impl Round {
    /// A new round from where the last one stopped.
    fn restart(&mut self) {
        self.hosts = 0;
        self.freed = 0;
    }
}

impl Pace {
    /// Hosts held at most, live ones included.
    fn hard_hosts(&self) -> usize {
        self.max_hosts.saturating_mul(2)
    }

    /// Pairs held at most, live ones included.
    pub(super) fn hard_pairs(&self) -> usize {
        self.max_pairs.saturating_mul(2)
    }

    /// Whether a host not held may be: room under the bounds, made by forgetting idle
    /// hosts when needed. No live state is forgotten for it.
    pub(super) fn room_for_host(&mut self, now: u64) -> bool {
        if self.index.len() >= self.hard_hosts() {
            self.drop_least_recent(NIL, now);
        }
        self.index.len() < self.hard_hosts() && self.pairs < self.hard_pairs()
    }

    /// At the bound of pairs: tidy hosts in turn (at most `SCAN`) until idle pairs made
    /// room below it.
    pub(super) fn free_pairs(&mut self, now: u64) {
        for _ in 0..SCAN {
            if self.pairs < self.hard_pairs() || self.index.is_empty() {
                return;
            }
            self.tidy_next(NIL, now);
        }
    }

    /// Count a pair `Host::pair` added to slot `keep` at `now` (less those its tidying
    /// forgot), and stay within the caps.
    pub(super) fn settle(&mut self, keep: u32, added: Option<usize>, now: u64) {
        if let Some(gone) = added {
            self.pairs = self.pairs + 1 - gone;
            self.evict(keep, now);
        }
    }

    /// Stay within the caps, never dropping slot `keep` (just used) nor a live host. Past
    /// `max_hosts`, the least recently used idle hosts go whole. Past `max_pairs`, hosts
    /// first forget their pairs that say nothing any more: a host's table is tidied only
    /// when it fills, so such pairs can fill the cap while the live ones are far fewer.
    /// Each new pair past the cap tidies one host, the hosts taken in turn (no lease
    /// waits for a pass over them all, so the count may pass the cap by up to one pair
    /// per host meanwhile). Only when a whole round of hosts, all past the cap, freed
    /// less than a quarter of it, and the count is still past it, do least recently used
    /// idle hosts go whole, down to three quarters of the cap.
    fn evict(&mut self, keep: u32, now: u64) {
        while self.index.len() > self.max_hosts && self.drop_least_recent(keep, now) {}
        if self.pairs <= self.max_pairs {
            // A round counts only tidies made past the cap, one after another.
            self.round.restart();
            return;
        }
        self.tidy_next(keep, now);
        if self.round.hosts >= self.index.len() {
            if self.round.freed * 4 < self.max_pairs && self.pairs > self.max_pairs {
                let low = self.max_pairs - self.max_pairs / 4;
                while self.pairs > low && self.drop_least_recent(keep, now) {}
            }
            self.round.restart();
        }
    }

    /// Forget the least recently used host that is idle at `now`, unless it is `keep`
    /// (the only one left, or the one just used: kept whole). A live host met on the way
    /// is moved to the front (it is in use), at most `SCAN` of them. Whether one went.
    fn drop_least_recent(&mut self, keep: u32, now: u64) -> bool {
        for _ in 0..SCAN {
            let last = self.tail;
            if last == NIL || last == keep {
                return false;
            }
            if self.slots[last as usize].host.live(now) {
                self.touch(last);
                continue;
            }
            self.remove_slot(last);
            self.dropped += 1;
            return true;
        }
        false
    }

    /// The next held host in slot order forgets its pairs that say nothing at `now`; a
    /// host left with none is let go (not counted as dropped: nothing it held is lost,
    /// and no lease holds its handle, since a pair in flight says something), unless it
    /// is `keep`.
    fn tidy_next(&mut self, keep: u32, now: u64) {
        for _ in 0..self.slots.len() {
            let i = self.round.cursor % self.slots.len();
            self.round.cursor = i + 1;
            let s = &mut self.slots[i];
            // A free slot's name is empty; a held host's never is.
            if s.name.is_empty() {
                continue;
            }
            let freed = s.host.forget_idle(now);
            let empty = s.host.pairs.is_empty();
            self.pairs -= freed;
            self.round.freed += freed;
            self.round.hosts += 1;
            if empty && i as u32 != keep {
                self.remove_slot(i as u32);
            }
            return;
        }
    }
}
