//! Shortlists: for a host that many endpoints may not serve (banned there, alone or by
//! the address they leave from, or leaving from a subnet under suspicion), a copy of the
//! ready queues from which what was turned down for the host is dropped, so that its
//! leases pass over each exclusion once instead of once per round of the queue
//! (docs/selection.md, "Hosts that ban many endpoints").
//!
//! A shortlist holds every ready item that is not known to be excluded for its host: it
//! starts as a copy of the pool's queues, takes every item pushed to them after, and drops
//! an item only when the item is stale or the host excludes its endpoint. An exclusion
//! that ends (a pair that recovers or is forgotten, an address's ban whose holder recovers
//! or moves, a subnet no longer suspect, an endpoint's address that changes) marks the
//! host's pairs as *lifted* (`Destinations::lifted`), and a shortlist built before that
//! is built again before it is used. So a shortlist's pass finds what the pool's own pass
//! would, lowest level first; when it finds nothing the pool's pass runs as before.
//!
//! What it costs: a push per shortlist for every move between levels, and a copy of the
//! queues (about 16 bytes per endpoint and level item) per shortlist. A pool keeps at most
//! `MAX` of them, built only once a host's passes have skipped as many items as a copy
//! costs, and drops one its host stopped using.

use std::collections::VecDeque;

/// Shortlists one pool keeps at most (the least recently used gives way).
pub(super) const MAX: usize = 4;
/// Hosts whose skipped items are counted towards a shortlist, at most.
const WATCHED: usize = 8;

type Item = (u32, u64);

/// What a shortlist's pass does with a live item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// This lease takes it (left at the front: its lease moves it to the next level).
    Take,
    /// Not for this lease (its tags, pacing, slow start, ...): behind its equals.
    Pass,
    /// The host excludes it until something is lifted: out of the shortlist.
    Drop,
}

/// One host's shortlist.
struct Shortlist {
    /// The host's pair view (`DestRef`'s number).
    view: u32,
    /// `Destinations::tick` when it was copied: lifts after that make it stale.
    built: u64,
    /// When it was last used (the pool's count of uses), for the least recently used.
    used: u64,
    /// Used since the last compaction of one of its levels: one that was not is dropped.
    busy: bool,
    levels: Vec<VecDeque<Item>>,
}

/// A pool's shortlists, and the hosts on their way to one.
#[derive(Default)]
pub(super) struct Shortlists {
    lists: Vec<Shortlist>,
    /// (view, items its passes skipped) of hosts without a shortlist, at most `WATCHED`.
    debts: Vec<(u32, usize)>,
    uses: u64,
}

impl Shortlists {
    /// An item pushed to level `level` of the pool's queues.
    #[inline]
    pub(super) fn push(&mut self, level: usize, item: Item) {
        for s in &mut self.lists {
            if s.levels.len() <= level {
                s.levels.resize_with(level + 1, VecDeque::new);
            }
            s.levels[level].push_back(item);
        }
    }

    /// The pool's level `level` is being compacted to about `live` items (`keep` says which
    /// stay): each shortlist's level too once it is as long, and a shortlist not used
    /// since its last compaction is dropped (its host went quiet).
    pub(super) fn compact(&mut self, level: usize, live: usize, keep: impl Fn(Item) -> bool) {
        self.lists.retain_mut(|s| {
            let Some(q) = s.levels.get_mut(level) else {
                return true;
            };
            if q.len() <= 2 * live + 64 {
                return true;
            }
            if !std::mem::take(&mut s.busy) {
                return false;
            }
            q.retain(|&i| keep(i));
            true
        });
    }

    /// The levels of `view`'s shortlist, copied again from `queues` when something was
    /// lifted for the host after it was built (`lifted` > its build's `tick`).
    pub(super) fn get(
        &mut self,
        view: u32,
        lifted: u64,
        tick: u64,
        queues: &[VecDeque<Item>],
    ) -> Option<&mut [VecDeque<Item>]> {
        let s = self.lists.iter_mut().find(|s| s.view == view)?;
        if lifted > s.built {
            s.levels.clear();
            s.levels.extend(queues.iter().cloned());
            s.built = tick;
        }
        self.uses += 1;
        s.used = self.uses;
        s.busy = true;
        Some(&mut s.levels)
    }

    /// A pass of the pool's queues for `view`'s host skipped `skipped` items: once its
    /// passes skipped as many as the queues hold (`len`), copying them is paid for, and
    /// the host gets a shortlist. Whether it was made.
    pub(super) fn owe(
        &mut self,
        view: u32,
        skipped: usize,
        tick: u64,
        queues: &[VecDeque<Item>],
    ) -> bool {
        if skipped == 0 || self.lists.iter().any(|s| s.view == view) {
            return false;
        }
        let at = match self.debts.iter().position(|d| d.0 == view) {
            Some(i) => i,
            None if self.debts.len() < WATCHED => {
                self.debts.push((view, 0));
                self.debts.len() - 1
            }
            None => {
                // The host that skipped least so far gives way.
                let i = (0..self.debts.len())
                    .min_by_key(|&i| self.debts[i].1)
                    .expect("WATCHED > 0");
                self.debts[i] = (view, 0);
                i
            }
        };
        self.debts[at].1 += skipped;
        let len: usize = queues.iter().map(VecDeque::len).sum();
        if self.debts[at].1 < len {
            return false;
        }
        self.debts.swap_remove(at);
        if self.lists.len() >= MAX {
            let oldest = (0..self.lists.len())
                .min_by_key(|&i| self.lists[i].used)
                .expect("MAX > 0");
            self.lists.swap_remove(oldest);
        }
        self.uses += 1;
        self.lists.push(Shortlist {
            view,
            built: tick,
            used: self.uses,
            busy: true,
            levels: queues.to_vec(),
        });
        true
    }

    /// How many shortlists there are (tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lists.len()
    }
}

/// One pass over a shortlist's level: stale items and those `judge` drops leave it, one
/// it passes goes behind its equals, and the pass ends after as many items as the level
/// held when it began. The slot taken, if any.
pub(super) fn round(
    q: &mut VecDeque<Item>,
    mut live: impl FnMut(u32, u64) -> bool,
    mut judge: impl FnMut(u32) -> Verdict,
) -> Option<u32> {
    for _ in 0..q.len() {
        let &(slot, gen) = q.front()?;
        if !live(slot, gen) {
            q.pop_front();
            continue;
        }
        match judge(slot) {
            Verdict::Take => return Some(slot),
            Verdict::Pass => q.rotate_left(1),
            Verdict::Drop => {
                q.pop_front();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests;
