//! Endpoint id → slot in the entry map.
//!
//! Ids are small, dense and only grow (SQLite hands them out one above the largest ever
//! used), so a table indexed by id in pages of `PAGE` ids serves them. A hash map had to
//! rehash all its entries whenever it doubled: at a million endpoints one such growth held
//! the pool lock for over 100 ms in the middle of an import, stalling every lease.
//! Growing pages costs one small allocation per `PAGE` ids; a page whose ids were all
//! removed is freed. Ids outside the paged range (only a hand-edited database has them) go
//! to a hash map.

use rustc_hash::FxHashMap;

use crate::endpoint::EndpointId;

const PAGE_BITS: u32 = 12;
const PAGE: usize = 1 << PAGE_BITS;

/// Ids at or above this are kept in the map: the page table then stays at most 2^19
/// entries (24 bytes each: 12 MiB) whatever id a database holds.
const PAGED_LIMIT: EndpointId = 1 << 31;

struct Page {
    /// slot + 1 per id of the page; 0 = none.
    slots: Box<[u32]>,
    used: u32,
}

#[derive(Default)]
pub(super) struct IdIndex {
    pages: Vec<Option<Page>>,
    other: FxHashMap<EndpointId, u32>,
    len: usize,
}

fn paged(id: EndpointId) -> Option<(usize, usize)> {
    (0..PAGED_LIMIT)
        .contains(&id)
        .then_some(((id >> PAGE_BITS) as usize, (id as usize) & (PAGE - 1)))
}

impl IdIndex {
    pub(super) fn get(&self, id: EndpointId) -> Option<u32> {
        match paged(id) {
            Some((p, i)) => {
                let v = self.pages.get(p)?.as_ref()?.slots[i];
                v.checked_sub(1)
            }
            None => self.other.get(&id).copied(),
        }
    }

    /// Set the slot of `id`; returns the previous one.
    pub(super) fn insert(&mut self, id: EndpointId, slot: u32) -> Option<u32> {
        debug_assert!(slot < u32::MAX, "slot + 1 must fit");
        let old = match paged(id) {
            Some((p, i)) => {
                if self.pages.len() <= p {
                    self.pages.resize_with(p + 1, || None);
                }
                let page = self.pages[p].get_or_insert_with(|| Page {
                    slots: vec![0; PAGE].into_boxed_slice(),
                    used: 0,
                });
                let old = std::mem::replace(&mut page.slots[i], slot + 1).checked_sub(1);
                if old.is_none() {
                    page.used += 1;
                }
                old
            }
            None => self.other.insert(id, slot),
        };
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    pub(super) fn remove(&mut self, id: EndpointId) -> Option<u32> {
        let old = match paged(id) {
            Some((p, i)) => {
                let entry = self.pages.get_mut(p)?;
                let page = entry.as_mut()?;
                let old = std::mem::take(&mut page.slots[i]).checked_sub(1)?;
                page.used -= 1;
                if page.used == 0 {
                    *entry = None;
                }
                Some(old)
            }
            None => self.other.remove(&id),
        };
        if old.is_some() {
            self.len -= 1;
        }
        old
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_like_a_map_across_pages_and_odd_ids() {
        let mut ix = IdIndex::default();
        let mut model = std::collections::HashMap::new();
        let mut rng = fastrand::Rng::with_seed(7);
        let odd = [0, -1, i64::MIN, PAGED_LIMIT - 1, PAGED_LIMIT, i64::MAX];
        for step in 0..20_000u32 {
            let id = if step % 50 == 0 {
                odd[rng.usize(..odd.len())]
            } else {
                rng.i64(1..3 * PAGE as i64)
            };
            if rng.bool() {
                assert_eq!(ix.insert(id, step), model.insert(id, step), "insert {id}");
            } else {
                assert_eq!(ix.remove(id), model.remove(&id), "remove {id}");
            }
            assert_eq!(ix.get(id), model.get(&id).copied(), "get {id}");
            assert_eq!(ix.len(), model.len());
        }
        for (&id, &slot) in &model {
            assert_eq!(ix.get(id), Some(slot));
        }
    }

    #[test]
    fn an_emptied_page_is_freed() {
        let mut ix = IdIndex::default();
        for id in 0..PAGE as i64 * 2 {
            ix.insert(id, id as u32);
        }
        for id in 0..PAGE as i64 {
            ix.remove(id);
        }
        assert!(ix.pages[0].is_none());
        assert!(ix.pages[1].is_some());
        assert_eq!(ix.len(), PAGE);
        assert_eq!(ix.get(PAGE as i64 + 5), Some(PAGE as u32 + 5));
    }
}
