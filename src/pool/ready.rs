//! Ready queues: available endpoints of a pool, least leased first, round robin.

use std::collections::VecDeque;

use crate::health::State;

use super::{EntryMap, Pools};

/// Available endpoints of a pool: one FIFO queue of (slot, gen) per live-lease count.
///
/// The next pick is the front of the lowest non-empty level (least leased, then round
/// robin). Moving an endpoint pushes a new item and leaves the old one stale, dropped when
/// it reaches the front or by compaction, so every operation is O(1) amortized and walks
/// memory in order: a pool of 100,000 costs about what a pool of 100 does.
pub(super) struct Ready {
    pub(super) levels: Vec<VecDeque<(u32, u64)>>,
    pub(super) live: Vec<usize>,
    /// Where the last random draws found their items (level, index): the one chosen is
    /// removed when its endpoint leaves the level, instead of staying there stale for a
    /// later draw to hit. An index that no longer holds the item is ignored.
    pub(super) drawn: [(usize, usize); 2],
}

/// No draw (a level no pool has).
const NO_DRAW: (usize, usize) = (usize::MAX, 0);

impl Default for Ready {
    fn default() -> Self {
        Ready {
            levels: Vec::new(),
            live: Vec::new(),
            drawn: [NO_DRAW; 2],
        }
    }
}

impl Ready {
    pub(super) fn push(&mut self, level: u32, slot: u32, gen: u64) {
        let l = level as usize;
        if self.levels.len() <= l {
            self.levels.resize_with(l + 1, VecDeque::new);
            self.live.resize(l + 1, 0);
        }
        self.levels[l].push_back((slot, gen));
        self.live[l] += 1;
    }

    /// The endpoint in `slot`, queued at `level` as `gen`, left that level.
    pub(super) fn forget(&mut self, level: u32, slot: u32, gen: u64) {
        let l = level as usize;
        if let Some(n) = self.live.get_mut(l) {
            *n = n.saturating_sub(1);
        }
        for (dl, i) in self.drawn {
            if dl == l && self.levels[l].get(i) == Some(&(slot, gen)) {
                self.levels[l].swap_remove_back(i);
                self.drawn = [NO_DRAW; 2];
                return;
            }
        }
    }

    /// A random draw found its item at `index` of `level` (`which`: the first or second
    /// of a duel).
    pub(super) fn drew(&mut self, which: usize, level: usize, index: usize) {
        self.drawn[which & 1] = (level, index);
    }

    pub(super) fn needs_compaction(&self, level: u32) -> bool {
        let l = level as usize;
        self.levels[l].len() > 2 * self.live[l] + 64
    }
}

/// Whether a ready-queue item still stands for an available endpoint of `pool` with
/// `level` live leases. Generations are unique for the life of the process (never reset
/// when a slot is reused), so an item left by a removed endpoint can never match.
pub(super) fn live_at(entries: &EntryMap, slot: u32, gen: u64, pool: usize, level: u32) -> bool {
    entries.at(slot).is_some_and(|(_, e)| {
        e.gen == gen && e.pool == pool && e.leases == level && e.health.state == State::Available
    })
}

impl Pools {
    /// Drop stale queue items once they outnumber the live ones.
    pub(super) fn compact_ready(&mut self, pool: usize, level: u32) {
        if !self.pools[pool].ready.needs_compaction(level) {
            return;
        }
        let entries = &self.entries;
        self.pools[pool].ready.levels[level as usize]
            .retain(|&(slot, gen)| live_at(entries, slot, gen, pool, level));
    }

    /// The least-leased available endpoint of pool `p`: (slot, live leases).
    pub(super) fn pick(&mut self, p: usize) -> Option<(u32, u32)> {
        let entries = &self.entries;
        let ready = &mut self.pools[p].ready;
        for level in 0..ready.levels.len() {
            if ready.live[level] == 0 {
                continue;
            }
            let q = &mut ready.levels[level];
            while let Some(&(slot, gen)) = q.front() {
                if live_at(entries, slot, gen, p, level as u32) {
                    return Some((slot, level as u32));
                }
                q.pop_front();
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(r: &Ready, level: usize) -> Vec<u32> {
        r.levels[level].iter().map(|&(slot, _)| slot).collect()
    }

    #[test]
    fn a_drawn_item_goes_with_its_endpoint_and_nothing_else_moves() {
        let mut r = Ready::default();
        for slot in 0..5 {
            r.push(0, slot, 100 + u64::from(slot));
        }
        // Without a draw (least leased), leaving a level reorders nothing: the item
        // stays, stale, where the walk drops it.
        r.forget(0, 0, 100);
        assert_eq!(queue(&r, 0), [0, 1, 2, 3, 4]);
        assert_eq!(r.live[0], 4);
        // A draw found slot 2 at index 2: it leaves with its endpoint.
        r.drew(0, 0, 2);
        r.forget(0, 2, 102);
        assert_eq!(queue(&r, 0), [0, 1, 4, 3]);
        assert_eq!(r.live[0], 3);
        // A hint whose index holds another item (the queue moved) is ignored.
        r.drew(1, 0, 1);
        r.forget(0, 3, 103);
        assert_eq!(queue(&r, 0), [0, 1, 4, 3]);
        // Nor is an item of another generation taken for it.
        r.drew(0, 0, 1);
        r.forget(0, 1, 999);
        assert_eq!(queue(&r, 0), [0, 1, 4, 3]);
    }
}
