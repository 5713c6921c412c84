//! Shortlists: for a host that many endpoints may not serve (banned there, alone or by
//! the address they leave from, or leaving from a subnet under suspicion), a copy of the
//! pool's first ready queue (the endpoints with no live lease) from which what was turned
//! down for the host is dropped, so that its leases pass over each exclusion once instead
//! of once per round of the queue (docs/selection.md, "Hosts that exclude many
//! endpoints").
//!
//! A shortlist holds every item of that queue that is not known to be excluded for its
//! host: it starts as a copy of the queue, takes every item pushed to it after, and drops
//! an item only when the item is stale, the host excludes its endpoint, or a lease of
//! the host takes it (the lease moves the endpoint to the next queue at once). An
//! exclusion that ends (a pair that recovers or is forgotten, an address's ban whose
//! holder recovers or moves, a subnet no longer suspect, an endpoint's address that
//! changes) marks the host's pairs as *lifted* (`Destinations::lifted`), and a shortlist
//! built before that is copied again before it is used. So a shortlist's pass finds
//! what the pool's own pass over that queue would, and when it finds nothing neither
//! would the pool's: the lease goes on to the pool's next queues.
//!
//! A shortlist also remembers, by slot, which endpoint it found leasable for its host and
//! when (`Destinations::changed`: anything that decides it for the host changes that
//! number), so a lease asks an endpoint's pairs, its address's ban and its subnet once
//! per change, not once per lease.
//!
//! What it costs: a push per shortlist for every endpoint that comes back to the first
//! queue (a release), a copy of that queue (16 bytes per item) and 16 bytes per slot.
//! A pool keeps at most `MAX` of them, each built only for a host whose walks skip at
//! least one item in four leases and have skipped as many items as a copy holds, and
//! drops one its host stopped using.

use std::collections::VecDeque;

use crate::endpoint::EndpointId;

/// Shortlists one pool keeps at most (the least recently used gives way).
const MAX: usize = 4;
/// Hosts whose skipped items are counted towards a shortlist, at most.
const WATCHED: usize = 8;

type Item = (u32, u64);

/// What a shortlist's pass does with a live item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// This lease takes it (and it leaves: the lease moves its endpoint to the next queue).
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
    /// Used since its last compaction: one that was not is dropped.
    busy: bool,
    queue: VecDeque<Item>,
    verified: Verified,
}

/// A shortlist as a pass uses it: its queue, and which endpoints are known to be
/// leasable for its host.
pub(super) struct Listed<'a> {
    pub(super) queue: &'a mut VecDeque<Item>,
    pub(super) verified: &'a mut Verified,
}

/// By slot: the endpoint last found leasable for the host there, and the host's
/// `Destinations::changed` then.
#[derive(Default)]
pub(super) struct Verified(Vec<(EndpointId, u64)>);

impl Verified {
    /// Whether endpoint `id` in `slot` was found leasable for the host when the host's
    /// `Destinations::changed` was `changed`, as it is now: then it is leasable still,
    /// with no lookup of its pairs, its address's ban or its subnet.
    #[inline]
    pub(super) fn holds(&self, slot: u32, id: EndpointId, changed: u64) -> bool {
        self.0.get(slot as usize) == Some(&(id, changed))
    }

    /// Endpoint `id` in `slot` is leasable for the host at `changed`.
    pub(super) fn record(&mut self, slot: u32, id: EndpointId, changed: u64) {
        let i = slot as usize;
        if self.0.len() <= i {
            self.0.resize(i + 1, (0, u64::MAX));
        }
        self.0[i] = (id, changed);
    }
}

/// A host on its way to a shortlist: the items its walks skipped, and how many walks.
#[derive(Debug, Clone, Copy)]
struct Debt {
    view: u32,
    skipped: usize,
    walks: usize,
}

/// A pool's shortlists, and the hosts on their way to one.
#[derive(Default)]
pub(super) struct Shortlists {
    lists: Vec<Shortlist>,
    /// Hosts without a shortlist whose walks skipped items, at most `WATCHED`.
    debts: Vec<Debt>,
    uses: u64,
}

impl Shortlists {
    /// An item pushed to the pool's first queue.
    #[inline]
    pub(super) fn push(&mut self, item: Item) {
        for s in &mut self.lists {
            s.queue.push_back(item);
        }
    }

    /// The pool's first queue is being compacted to about `live` items (`keep` says which
    /// stay): each shortlist too once it is as long, and a shortlist not used since its
    /// last compaction is dropped (its host went quiet).
    pub(super) fn compact(&mut self, live: usize, keep: impl Fn(Item) -> bool) {
        self.lists.retain_mut(|s| {
            if s.queue.len() <= 2 * live + 64 {
                return true;
            }
            if !std::mem::take(&mut s.busy) {
                return false;
            }
            s.queue.retain(|&i| keep(i));
            true
        });
    }

    /// `view`'s shortlist, copied again from `first` (the pool's first queue) when
    /// something was lifted for the host after it was built (`lifted` > its build's
    /// `tick`).
    pub(super) fn get(
        &mut self,
        view: u32,
        lifted: u64,
        tick: u64,
        first: &VecDeque<Item>,
    ) -> Option<Listed<'_>> {
        let s = self.lists.iter_mut().find(|s| s.view == view)?;
        if lifted > s.built {
            s.queue.clone_from(first);
            s.built = tick;
        }
        self.uses += 1;
        s.used = self.uses;
        s.busy = true;
        Some(Listed {
            queue: &mut s.queue,
            verified: &mut s.verified,
        })
    }

    /// A walk of the pool's queues for `view`'s host skipped `skipped` items. A host whose
    /// walks skip at least one item in four, once they skipped as many as the first queue
    /// holds (a copy is paid for), gets a shortlist. Whether it was made.
    pub(super) fn owe(
        &mut self,
        view: u32,
        skipped: usize,
        tick: u64,
        first: &VecDeque<Item>,
    ) -> bool {
        let at = match self.debts.iter().position(|d| d.view == view) {
            Some(i) => i,
            None if skipped == 0 => return false,
            None if self.lists.iter().any(|s| s.view == view) => return false,
            None => self.watch(view),
        };
        let d = &mut self.debts[at];
        d.skipped += skipped;
        d.walks += 1;
        if d.skipped < first.len() || d.skipped * 4 < d.walks {
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
            queue: first.clone(),
            verified: Verified::default(),
        });
        true
    }

    /// Start counting `view`'s skips: the host that skipped least so far gives way.
    fn watch(&mut self, view: u32) -> usize {
        let fresh = Debt {
            view,
            skipped: 0,
            walks: 0,
        };
        if self.debts.len() < WATCHED {
            self.debts.push(fresh);
            return self.debts.len() - 1;
        }
        let i = (0..self.debts.len())
            .min_by_key(|&i| self.debts[i].skipped)
            .expect("WATCHED > 0");
        self.debts[i] = fresh;
        i
    }

    /// How many shortlists there are (tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lists.len()
    }
}

/// One pass over a shortlist: stale items, those `judge` drops and the one it takes leave
/// it, one it passes goes behind its equals, and the pass ends after as many items as
/// the shortlist held when it began. The slot taken, if any.
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
            Verdict::Take => {
                q.pop_front();
                return Some(slot);
            }
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
