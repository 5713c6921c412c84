//! Ready queues: available endpoints of a pool, least leased first, round robin.

use std::collections::VecDeque;

use crate::health::State;

use super::shortlist::{Listed, Shortlists};
use super::{EntryMap, Pools};

/// Available endpoints of a pool: one FIFO queue of (slot, gen) per live-lease count.
///
/// The next pick is the front of the lowest non-empty level (least leased, then round
/// robin). Moving an endpoint pushes a new item and leaves the old one stale, dropped when
/// it reaches the front or by compaction, so every operation is O(1) amortized and walks
/// memory in order: a pool of 100,000 costs about what a pool of 100 does.
pub(super) struct Ready {
    levels: Vec<VecDeque<(u32, u64)>>,
    /// Per level: how many of its items stand for an available endpoint now (the rest
    /// are stale).
    live: Vec<usize>,
    /// Where the last random draws found their items (level, index): the one chosen is
    /// removed when its endpoint leaves the level, instead of staying there stale for a
    /// later draw to hit. An index that no longer holds the item is ignored.
    drawn: [(usize, usize); 2],
    /// The random numbers of the next two draws, drawn at the end of the last lease so
    /// that the entries they point at are already on their way into the cache (`Ahead`).
    ahead: [Option<Ahead>; 2],
    /// Copies of the first level for hosts that exclude many endpoints (`shortlist`):
    /// each item pushed to that level is pushed there too.
    short: Shortlists,
}

/// A draw made one lease early. A sampling strategy reads the entries of random
/// endpoints, each a cache miss in a large pool; drawn (and prefetched) while the caller
/// is busy with the lease just given, the next lease's candidates are usually a cache
/// hit. What is kept is the random number, not the item it pointed at: it is scaled to
/// the queue as the queue is when it is used, so the draw is uniform over that queue
/// whatever moved in between (keeping the item instead, and dropping it when it moved,
/// favours the items that did not move: the last lease's loser). A queue that changed
/// only makes the prefetch miss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ahead(u64);

/// An index in `0..len` from a uniform 64-bit number (multiply and keep the high half;
/// its bias, at most `len / 2^64`, is far below anything a draw can show).
fn scale(r: u64, len: usize) -> usize {
    ((u128::from(r) * len as u128) >> 64) as usize
}

/// How many items of a queue stay together when it is shuffled (`Ready::shuffle`).
/// Endpoints loaded one after another are neighbours in the store too (their rows share
/// pages): failures reported in the order of the leases then dirty few pages a commit.
const RUN: usize = 32;

/// The fewest runs a shuffled queue is cut into (`Ready::shuffle`).
const RUNS: usize = 16;

/// Put the runs of `items` in an order of `rng`'s (uniform), each run keeping its own
/// order. Runs are `RUN` items long, shorter in fewer than `RUNS × RUN` items (at least
/// `RUNS` runs, single items below that many), so that two processes' orders differ for a
/// few items too.
fn shuffle_runs(items: &mut [(u32, u64)], rng: &mut fastrand::Rng) {
    if items.len() < 2 {
        return;
    }
    let run = (items.len() / RUNS).clamp(1, RUN);
    let mut starts: Vec<usize> = (0..items.len()).step_by(run).collect();
    rng.shuffle(&mut starts);
    let mut out = Vec::with_capacity(items.len());
    for s in starts {
        out.extend_from_slice(&items[s..(s + run).min(items.len())]);
    }
    items.copy_from_slice(&out);
}

/// No draw (a level no pool has).
const NO_DRAW: (usize, usize) = (usize::MAX, 0);

impl Default for Ready {
    fn default() -> Self {
        Ready {
            levels: Vec::new(),
            live: Vec::new(),
            drawn: [NO_DRAW; 2],
            ahead: [None; 2],
            short: Shortlists::default(),
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
        if l == 0 {
            self.short.push((slot, gen));
        }
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

    /// How many levels there are (one past the most live leases any endpoint had).
    pub(super) fn levels(&self) -> usize {
        self.levels.len()
    }

    /// The level a sampling strategy draws from: the lowest with a live endpoint, under
    /// the lease cap `cap` (0: none). The least leased, as the round robin would take
    /// them, so both candidates of a duel come from one queue.
    pub(super) fn lowest_live(&self, cap: u32) -> Option<usize> {
        let levels = match cap {
            0 => self.levels.len(),
            c => self.levels.len().min(c as usize),
        };
        (0..levels).find(|&l| self.live[l] > 0)
    }

    /// One round robin pass over `level`: each item `live` accepts is offered to `take`
    /// in turn, and one it turns down goes behind its equals; stale items met on the way
    /// are dropped. The pass ends after the level's live count, so a level where nothing
    /// is taken costs one walk. The slot taken, if any (left at the front: its lease moves
    /// it to the next level).
    pub(super) fn round(
        &mut self,
        level: usize,
        mut live: impl FnMut(u32, u64) -> bool,
        mut take: impl FnMut(u32) -> bool,
    ) -> Option<u32> {
        let q = &mut self.levels[level];
        let mut seen = 0;
        while seen < self.live[level] {
            let &(slot, gen) = q.front()?;
            if !live(slot, gen) {
                q.pop_front();
                continue;
            }
            seen += 1;
            if take(slot) {
                return Some(slot);
            }
            q.rotate_left(1);
        }
        None
    }

    /// The first item `live` accepts at the lowest level that has one: (slot, level).
    /// Stale items met on the way are dropped. The plain lease's pass: one loop, no
    /// rotation (its lease moves the endpoint to the next level).
    pub(super) fn first(
        &mut self,
        mut live: impl FnMut(u32, u64, u32) -> bool,
    ) -> Option<(u32, u32)> {
        for (level, q) in self.levels.iter_mut().enumerate() {
            if self.live[level] == 0 {
                continue;
            }
            while let Some(&(slot, gen)) = q.front() {
                if live(slot, gen, level as u32) {
                    return Some((slot, level as u32));
                }
                q.pop_front();
            }
        }
        None
    }

    /// A uniformly random item of `level` that `live` and `fits` accept, within `tries`
    /// draws (stale items are drawn too). A stale item drawn is removed on the spot (the
    /// queue's last item takes its place), so no pass tidies the queue first: each stale
    /// item costs one draw, once, and a queue stays likely to hit. The first draw uses the
    /// number drawn ahead for draw `which` (the first or second of a duel: `Ahead`); where
    /// the chosen item is is kept, so that it leaves at once when its endpoint leaves
    /// the level.
    pub(super) fn sample(
        &mut self,
        level: usize,
        which: usize,
        tries: usize,
        rng: &mut fastrand::Rng,
        mut live: impl FnMut(u32, u64) -> bool,
        mut fits: impl FnMut(u32) -> bool,
    ) -> Option<u32> {
        let len = self.levels[level].len();
        let mut early = self.take_ahead(which, len);
        let q = &mut self.levels[level];
        for _ in 0..tries {
            if q.is_empty() {
                return None;
            }
            let i = early.take().unwrap_or_else(|| rng.usize(..q.len()));
            let (slot, gen) = q[i];
            if !live(slot, gen) {
                q.swap_remove_back(i);
                continue;
            }
            if fits(slot) {
                self.drawn[which & 1] = (level, i);
                return Some(slot);
            }
        }
        None
    }

    /// The index for draw `which` in a queue of `len` items, from the number drawn ahead
    /// for it (taken: each is used once).
    fn take_ahead(&mut self, which: usize, len: usize) -> Option<usize> {
        let Ahead(r) = self.ahead[which & 1].take()?;
        (len > 0).then(|| scale(r, len))
    }

    /// Draw the numbers of the next `n` draws (at most two) now; returns the slots they
    /// point at in `level` as it is now, to prefetch.
    pub(super) fn draw_ahead(
        &mut self,
        level: usize,
        n: usize,
        rng: &mut fastrand::Rng,
    ) -> [Option<u32>; 2] {
        let mut slots = [None; 2];
        let q = self.levels.get(level);
        for (which, slot) in slots.iter_mut().enumerate().take(n) {
            let r = rng.u64(..);
            self.ahead[which] = Some(Ahead(r));
            *slot = q.filter(|q| !q.is_empty()).map(|q| q[scale(r, q.len())].0);
        }
        slots
    }

    /// How many items the first level holds (live or stale).
    pub(super) fn first_len(&self) -> usize {
        self.levels.first().map_or(0, VecDeque::len)
    }

    /// Put the last `n` items of the first level (those pushed since it held
    /// `len − n`) in an order of `rng`'s, as `shuffle` puts a level: a batch of endpoints
    /// that joined in the order every daemon reads them in.
    pub(super) fn shuffle_tail(&mut self, n: usize, rng: &mut fastrand::Rng) {
        let Some(q) = self.levels.first_mut() else {
            return;
        };
        let items = q.make_contiguous();
        let start = items.len() - n.min(items.len());
        shuffle_runs(&mut items[start..], rng);
        self.drawn = [NO_DRAW; 2];
    }

    /// Put each level in an order of `rng`'s (`shuffle_runs`): the round robin then walks
    /// a permutation of the pool of this process's own.
    pub(super) fn shuffle(&mut self, rng: &mut fastrand::Rng) {
        for q in &mut self.levels {
            shuffle_runs(q.make_contiguous(), rng);
        }
        // Indexes of the last draws point elsewhere now.
        self.drawn = [NO_DRAW; 2];
    }

    /// Drop the stale items of `level` (those no longer standing for an available
    /// endpoint of `pool` with that many leases) once they outnumber the live ones.
    #[inline]
    pub(super) fn compact(&mut self, level: u32, entries: &EntryMap, pool: usize) {
        let l = level as usize;
        let keep = |(slot, gen)| live_at(entries, slot, gen, pool, level);
        if self.levels[l].len() > 2 * self.live[l] + 64 {
            self.levels[l].retain(|&item| keep(item));
        }
        if l == 0 {
            self.short.compact(self.live[0], keep);
        }
    }

    /// The shortlist of the host whose pair view is `view` (of the first level), if it
    /// has one, current: copied again from the level when something was lifted for the
    /// host (`lifted`, as `Destinations::lifted` says) after it was built (`tick`:
    /// `Destinations::tick` now).
    pub(super) fn shortlist(&mut self, view: u32, lifted: u64, tick: u64) -> Option<Listed<'_>> {
        let first = self.levels.first()?;
        self.short.get(view, lifted, tick, first)
    }

    /// A pass of these queues for the host of `view` skipped `skipped` items: a host whose
    /// passes skip many gets a shortlist (`Shortlists::owe`).
    pub(super) fn owe(&mut self, view: u32, skipped: usize, tick: u64) -> bool {
        match self.levels.first() {
            Some(first) => self.short.owe(view, skipped, tick, first),
            None => false,
        }
    }

    /// How many shortlists there are (tests).
    #[cfg(test)]
    pub(super) fn shortlists(&self) -> usize {
        self.short.len()
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
    /// Walk each pool's round robin in an order of this process's own (runs of endpoints
    /// in a random order: `shuffle_runs`). Daemons of a fleet load the same rows in the same order: walking it,
    /// they would lease the same endpoints in the same order, so that a failing one is
    /// leased by every daemon before any hears of another's failure, and every report after
    /// the first writes nothing (docs/fleet.md, "Propagation"). Starting the same order at
    /// different places is not enough: a daemon that reaches the place where another one is
    /// leasing (the others' cooled endpoints skipped, the one serving alone for a while
    /// outrunning them) walks right behind it from then on, leasing what it has just leased.
    pub(super) fn stagger(&mut self) {
        self.own_order = true;
        for p in &mut self.pools {
            p.index.ready().shuffle(&mut self.rng);
        }
    }

    /// Let `f` bring rows in (`insert_row`, `refresh_row`); on a daemon of a fleet, those
    /// that joined a round robin then go in an order of its own (`mix_new`).
    pub fn rows_joining<T>(&mut self, f: impl FnOnce(&mut Pools) -> T) -> T {
        let marks = self.ready_marks();
        let out = f(self);
        self.mix_new(&marks);
        out
    }

    /// Where each pool's round robin ends now.
    fn ready_marks(&mut self) -> Vec<usize> {
        self.pools
            .iter_mut()
            .map(|p| p.index.ready().first_len())
            .collect()
    }

    /// A daemon of a fleet (`stagger`): the endpoints that joined each pool's round robin
    /// since `marks` (rows added, or changed by another daemon, in the order every daemon
    /// reads them) go in an order of this daemon's own, so that daemons do not meet in a
    /// block of new endpoints either. A queue that was compacted meanwhile has fewer items
    /// past its mark than joined: fewer are mixed, none misplaced.
    fn mix_new(&mut self, marks: &[usize]) {
        if !self.own_order {
            return;
        }
        for (i, p) in self.pools.iter_mut().enumerate() {
            let r = p.index.ready();
            let joined = r
                .first_len()
                .saturating_sub(marks.get(i).copied().unwrap_or(0));
            r.shuffle_tail(joined, &mut self.rng);
        }
    }

    /// The least-leased available endpoint of pool `p`: (slot, live leases).
    pub(super) fn pick(&mut self, p: usize) -> Option<(u32, u32)> {
        let entries = &self.entries;
        self.pools[p]
            .index
            .ready()
            .first(|slot, gen, level| live_at(entries, slot, gen, p, level))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(r: &Ready, level: usize) -> Vec<u32> {
        r.levels[level].iter().map(|&(slot, _)| slot).collect()
    }

    #[test]
    fn a_shuffle_moves_runs_and_keeps_every_item() {
        let mut r = Ready::default();
        let n = (RUNS * RUN) as u32;
        for slot in 0..n {
            r.push(0, slot, u64::from(slot));
        }
        for slot in n..n + 4 {
            r.push(1, slot, u64::from(slot));
        }
        r.drawn[0] = (0, 3);
        r.shuffle(&mut fastrand::Rng::with_seed(5));
        let level0 = queue(&r, 0);
        // Runs of RUN slots in order, the runs in another order than they were.
        let starts: Vec<u32> = level0.chunks(RUN).map(|run| run[0]).collect();
        for run in level0.chunks(RUN) {
            assert_eq!(run[0] % RUN as u32, 0, "{level0:?}");
            assert!(run.windows(2).all(|w| w[1] == w[0] + 1), "{level0:?}");
        }
        assert_ne!(
            starts,
            (0..RUNS as u32).map(|k| k * RUN as u32).collect::<Vec<_>>()
        );
        let mut sorted = level0.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..n).collect::<Vec<_>>());
        let mut level1 = queue(&r, 1);
        level1.sort_unstable();
        assert_eq!(level1, [n, n + 1, n + 2, n + 3]);
        assert_eq!(r.live, [n as usize, 4]);
        // The draw's index is forgotten: forgetting slot 3 now removes nothing.
        r.forget(0, 3, 3);
        assert_eq!(queue(&r, 0).len(), n as usize);
    }

    /// A level of fewer than `RUNS × RUN` items is cut into `RUNS` shorter runs (single
    /// items below `RUNS`), so that a small pool is shuffled too; a remainder is a run
    /// of its own.
    #[test]
    fn a_small_level_is_shuffled_in_shorter_runs() {
        for (n, run) in [(5u32, 1usize), (20, 1), (100, 6), (511, 31), (1000, 32)] {
            let orders: Vec<Vec<u32>> = [3, 4]
                .into_iter()
                .map(|seed| {
                    let mut r = Ready::default();
                    for slot in 0..n {
                        r.push(0, slot, u64::from(slot));
                    }
                    r.shuffle(&mut fastrand::Rng::with_seed(seed));
                    queue(&r, 0)
                })
                .collect();
            assert_ne!(orders[0], orders[1], "{n} items: the same order");
            for o in &orders {
                let mut sorted = o.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "{n} items");
                // Each run in order: the item after a run's start is the next slot, up to
                // the run's length.
                let at = |slot: u32| o.iter().position(|&x| x == slot).unwrap();
                for start in (0..n).step_by(run) {
                    let len = run.min((n - start) as usize);
                    let i = at(start);
                    let got: Vec<u32> = o[i..i + len].to_vec();
                    let want: Vec<u32> = (start..start + len as u32).collect();
                    assert_eq!(got, want, "{n} items, the run from {start}");
                }
            }
        }
    }

    /// Two daemons of a fleet with the same rows: each walks an order of its own, and
    /// goes round it, every endpoint once a round.
    #[test]
    fn staggered_pools_walk_their_round_robin_in_orders_of_their_own() {
        use crate::config::PoolConfig;
        use crate::store::EndpointRow;
        let now = tokio::time::Instant::now();
        let n = RUNS * RUN;
        let rounds: Vec<Vec<i64>> = [1, 2]
            .into_iter()
            .map(|seed| {
                let mut p = Pools::new([PoolConfig::builtin("default")]);
                for id in 1..=n as i64 {
                    let url = format!("http://10.0.{}.{}:3128", id / 200, id % 200);
                    p.insert_row(&EndpointRow::fixture(id, &url, "default"), now);
                }
                p.seed(seed);
                p.stagger();
                (0..2 * n)
                    .map(|_| {
                        let (g, _) =
                            p.lease("default", std::time::Duration::from_secs(60), None, now);
                        let g = g.unwrap();
                        p.release(&g.lease, now).0.unwrap();
                        g.endpoint
                    })
                    .collect()
            })
            .collect();
        for r in &rounds {
            // Every endpoint once a round, and the second round as the first.
            assert_eq!(r[..n], r[n..], "not a round robin");
            let mut first: Vec<i64> = r[..n].to_vec();
            first.sort_unstable();
            assert_eq!(first, (1..=n as i64).collect::<Vec<_>>());
        }
        // Not the same order from another place: the runs come in different orders (a
        // rotation would keep every run's successor).
        let run_after = |r: &[i64], k: usize| {
            let at = r.iter().position(|&x| x == (k * RUN) as i64 + 1).unwrap();
            r[(at + RUN) % n]
        };
        let agree = (0..RUNS)
            .filter(|&k| run_after(&rounds[0], k) == run_after(&rounds[1], k))
            .count();
        assert!(
            agree < 5,
            "{agree} of {RUNS} runs are followed by the same: {rounds:?}"
        );
    }

    /// Endpoints that join a fleet daemon's pool later (added, or another daemon's) come
    /// in an order of its own too; a daemon alone keeps the order they came in.
    #[test]
    fn rows_that_join_later_take_an_order_of_the_daemons_own() {
        use crate::config::PoolConfig;
        use crate::store::EndpointRow;
        let now = tokio::time::Instant::now();
        let (old, new) = (64i64, 320i64);
        let walk = |seed: Option<u64>| -> Vec<i64> {
            let mut p = Pools::new([PoolConfig::builtin("default")]);
            let row = |id: i64| {
                let url = format!("http://10.1.{}.{}:3128", id / 200, id % 200);
                EndpointRow::fixture(id, &url, "default")
            };
            for id in 1..=old {
                p.insert_row(&row(id), now);
            }
            if let Some(seed) = seed {
                p.seed(seed);
                p.stagger();
            }
            p.rows_joining(|p| {
                for id in old + 1..=old + new {
                    p.insert_row(&row(id), now);
                }
            });
            let round: Vec<i64> = (0..old + new)
                .map(|_| {
                    let (g, _) = p.lease("default", std::time::Duration::from_secs(60), None, now);
                    let g = g.unwrap();
                    p.release(&g.lease, now).0.unwrap();
                    g.endpoint
                })
                .collect();
            let mut all = round.clone();
            all.sort_unstable();
            assert_eq!(all, (1..=old + new).collect::<Vec<_>>(), "once a round");
            round.into_iter().filter(|&id| id > old).collect()
        };
        let in_order: Vec<i64> = (old + 1..=old + new).collect();
        assert_eq!(walk(None), in_order, "a daemon alone");
        let (a, b) = (walk(Some(1)), walk(Some(2)));
        assert_ne!(a, in_order);
        assert_ne!(a, b, "two daemons, the same order of the new rows");
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
        r.drawn[0] = (0, 2);
        r.forget(0, 2, 102);
        assert_eq!(queue(&r, 0), [0, 1, 4, 3]);
        assert_eq!(r.live[0], 3);
        // A hint whose index holds another item (the queue moved) is ignored.
        r.drawn[1] = (0, 1);
        r.forget(0, 3, 103);
        assert_eq!(queue(&r, 0), [0, 1, 4, 3]);
        // Nor is an item of another generation taken for it.
        r.drawn[0] = (0, 1);
        r.forget(0, 1, 999);
        assert_eq!(queue(&r, 0), [0, 1, 4, 3]);
    }

    #[test]
    fn a_number_drawn_ahead_is_taken_once_and_scaled_to_the_queue_as_it_is_then() {
        let mut r = Ready::default();
        for slot in 0..8 {
            r.push(0, slot, 100 + u64::from(slot));
        }
        let mut rng = fastrand::Rng::with_seed(7);
        let [a, b] = r.draw_ahead(0, 2, &mut rng);
        let Some(Ahead(n)) = r.ahead[0] else {
            panic!("nothing drawn ahead")
        };
        // The slot to prefetch is the one the number points at now.
        assert_eq!(a, Some(r.levels[0][scale(n, 8)].0));
        assert!(b.is_some());
        // Used with the queue's length at the time, once.
        assert_eq!(r.take_ahead(0, 3), Some(scale(n, 3)));
        assert_eq!(r.take_ahead(0, 3), None);
        // An empty queue uses nothing; one draw leaves the second empty.
        assert_eq!(r.take_ahead(1, 0), None);
        let [c, none] = r.draw_ahead(0, 1, &mut rng);
        assert!(c.is_some() && none.is_none());
        assert_eq!(r.ahead[1], None);
        // A level with no queue still draws (the number is good for any queue).
        assert_eq!(r.draw_ahead(5, 2, &mut rng), [None, None]);
        assert!(r.ahead[0].is_some() && r.ahead[1].is_some());
    }

    #[test]
    fn scaled_numbers_cover_the_queue_evenly() {
        let mut rng = fastrand::Rng::with_seed(11);
        let mut counts = [0u32; 3];
        for _ in 0..30_000 {
            counts[scale(rng.u64(..), 3)] += 1;
        }
        assert!(
            counts.iter().all(|&c| (9_500..10_500).contains(&c)),
            "{counts:?}"
        );
        assert_eq!(scale(u64::MAX, 10), 9);
        assert_eq!(scale(0, 10), 0);
    }
}
