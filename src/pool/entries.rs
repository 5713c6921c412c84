//! The entry map: every endpoint held, stored densely in load order.

use std::sync::Arc;

use crate::endpoint::{EndpointId, ProxyUrl};
use crate::health::Health;

use super::chunked::Chunked;
use super::id_index::IdIndex;
use super::prefetch::prefetch_line;

pub(super) struct Entry {
    pub(super) url: ProxyUrl,
    /// The URL with credentials, rendered once: leases hand it out on every call.
    pub(super) secret: Arc<str>,
    pub(super) pool: usize,
    pub(super) health: Health,
    pub(super) leases: u32,
    /// Bumped whenever the entry leaves or moves in the ready queues; queue items with an
    /// older value are stale.
    pub(super) gen: u64,
    /// Sequence in the probe_allowed queue.
    pub(super) pa_seq: u64,
    /// This daemon's confirmed claim of the endpoint's trial (docs/fleet.md, "Ownership"):
    /// none while unclaimed, while a claim waits for the store, or while another daemon
    /// holds it.
    pub(super) claim: Option<crate::store::Epoch>,
    /// Usage statistics (in memory: they start again at 0 when the daemon restarts).
    pub(super) stats: crate::stats::EndpointStats,
    /// Its tags, interned (`TagIndex`), sorted.
    pub(super) tags: Box<[u32]>,
    /// When it last became available (ms since the pools' origin): slow start.
    pub(super) up_since: u64,
    /// Its exit address's number in its pool (`Exits`) + 1, 0 while unknown: a lease's
    /// candidate asks its address's ban with no lookup of its own (docs/exit.md).
    pub(super) exit: u32,
    /// The change of its row memory holds (PostgreSQL's `rev`; 0 in SQLite): a write of
    /// ours that lands on another one reads the row again (docs/fleet.md, "Propagation").
    pub(super) rev: i64,
}

/// Endpoints stored densely in load order, found by id through a small index.
///
/// Round robin walks endpoints roughly in load order, so dense storage turns the walk
/// into mostly sequential memory access; a `HashMap<EndpointId, Entry>` scattered every
/// entry and cost a cache and TLB miss per pick in large pools. The slots are chunked
/// (`Chunked`): a pool that grows never moves its entries.
#[derive(Default)]
pub(super) struct EntryMap {
    index: IdIndex,
    slots: Chunked<Option<(EndpointId, Entry)>>,
    free: Vec<u32>,
}

impl EntryMap {
    pub(super) fn get(&self, id: &EndpointId) -> Option<&Entry> {
        let i = self.index.get(*id)?;
        self.slots[i as usize].as_ref().map(|(_, e)| e)
    }

    pub(super) fn get_mut(&mut self, id: &EndpointId) -> Option<&mut Entry> {
        let i = self.index.get(*id)?;
        self.slots[i as usize].as_mut().map(|(_, e)| e)
    }

    pub(super) fn slot(&self, id: &EndpointId) -> Option<u32> {
        self.index.get(*id)
    }

    pub(super) fn at(&self, slot: u32) -> Option<&(EndpointId, Entry)> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    pub(super) fn at_mut(&mut self, slot: u32) -> Option<&mut (EndpointId, Entry)> {
        self.slots.get_mut(slot as usize).and_then(Option::as_mut)
    }

    /// Ask the cache for the entry in `slot` ahead of its use (`Ahead`): every line of
    /// it, since a candidate's checks and score read fields across the whole entry.
    pub(super) fn prefetch(&self, slot: u32) {
        let Some(s) = self.slots.get(slot as usize) else {
            return;
        };
        let start = (s as *const Option<(EndpointId, Entry)>).cast::<u8>();
        let len = std::mem::size_of_val(s);
        for off in (0..len).step_by(64) {
            prefetch_line(start.wrapping_add(off));
        }
    }

    /// Ask the cache for the credentials of the entry in `slot`, which a lease hands out
    /// (an `Arc` elsewhere on the heap, read and counted by the grant): issued when a
    /// candidate is chosen, the miss overlaps the lease's bookkeeping.
    pub(super) fn prefetch_secret(&self, slot: u32) {
        if let Some((_, e)) = self.at(slot) {
            // The grant counts the `Arc` (its counts sit just before the text) and the
            // caller reads the text: both lines.
            let text = e.secret.as_ptr();
            prefetch_line(text.wrapping_sub(2 * std::mem::size_of::<usize>()));
            prefetch_line(text);
        }
    }

    pub(super) fn contains_key(&self, id: &EndpointId) -> bool {
        self.index.get(*id).is_some()
    }

    pub(super) fn insert(&mut self, id: EndpointId, e: Entry) {
        if let Some(i) = self.index.get(id) {
            self.slots[i as usize] = Some((id, e));
            return;
        }
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some((id, e));
                i
            }
            None => {
                self.slots.push(Some((id, e)));
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(id, i);
    }

    pub(super) fn remove(&mut self, id: &EndpointId) -> Option<Entry> {
        let i = self.index.remove(*id)?;
        self.free.push(i);
        self.slots[i as usize].take().map(|(_, e)| e)
    }

    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.index.len() == 0
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&EndpointId, &Entry)> {
        self.slots.iter().flatten().map(|(id, e)| (id, e))
    }
}

impl std::ops::Index<&EndpointId> for EntryMap {
    type Output = Entry;
    fn index(&self, id: &EndpointId) -> &Entry {
        self.get(id).expect("endpoint is held")
    }
}
