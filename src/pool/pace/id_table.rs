//! A host's pairs by endpoint id: open addressing with linear probing, each key beside
//! its value in one 16-byte slot.
//!
//! Why not a `HashMap`: a paced pool holds hundreds of thousands of pairs, far more than
//! the caches hold, and a lease looks one up at random. hashbrown reads a group of control
//! bytes and then, in another cache line, the slot: two dependent misses for the check,
//! and a third line when the lease's use is recorded. Here the check reads the line
//! holding the key and the record writes the same line. Most lookups are for pairs not
//! held (the endpoint was not used for the host lately), so the load is kept at 3/4 at
//! most: an unsuccessful search then reads a few slots, usually in one line.
//!
//! Entries leave one at a time only when their endpoint is removed (backward-shift
//! deletion keeps probe runs whole, with no tombstones); the host's tidy forgets pairs in
//! bulk with `retain`, which rebuilds the table.

use crate::endpoint::EndpointId;

/// The key of a vacant slot. An id equal to it (possible only in a hand-edited database)
/// is held apart in `odd`.
const VACANT: EndpointId = EndpointId::MIN;

/// Slots of the first table.
const FIRST: usize = 4;

pub(super) struct IdTable<V> {
    /// A power of two in length (or empty).
    slots: Box<[(EndpointId, V)]>,
    /// Slots in use (`odd` not counted).
    used: usize,
    odd: Option<V>,
    /// 64 − log2(slots): the hash's top bits index the table.
    shift: u32,
}

impl<V: Copy + Default> Default for IdTable<V> {
    fn default() -> Self {
        IdTable {
            slots: Box::new([]),
            used: 0,
            odd: None,
            shift: 64,
        }
    }
}

/// Fibonacci hashing: ids are mostly consecutive, and a multiply spreads them evenly.
fn home(id: EndpointId, shift: u32) -> usize {
    ((id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> shift) as usize
}

fn limit(slots: usize) -> usize {
    slots - slots / 4
}

impl<V: Copy + Default> IdTable<V> {
    pub(super) fn len(&self) -> usize {
        self.used + usize::from(self.odd.is_some())
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries it holds without growing.
    pub(super) fn capacity(&self) -> usize {
        if self.slots.is_empty() {
            0
        } else {
            limit(self.slots.len())
        }
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// `Ok` the slot holding `id`, or `Err` the vacant slot ending its run (where it would
    /// go). The table must have slots.
    fn probe(&self, id: EndpointId) -> Result<usize, usize> {
        let mask = self.mask();
        let mut i = home(id, self.shift);
        loop {
            match self.slots[i].0 {
                k if k == id => return Ok(i),
                VACANT => return Err(i),
                _ => i = (i + 1) & mask,
            }
        }
    }

    /// The slot holding `id`, if any.
    fn find(&self, id: EndpointId) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        self.probe(id).ok()
    }

    pub(super) fn get(&self, id: EndpointId) -> Option<&V> {
        if id == VACANT {
            return self.odd.as_ref();
        }
        self.find(id).map(|i| &self.slots[i].1)
    }

    pub(super) fn get_mut(&mut self, id: EndpointId) -> Option<&mut V> {
        if id == VACANT {
            return self.odd.as_mut();
        }
        self.find(id).map(|i| &mut self.slots[i].1)
    }

    pub(super) fn contains_key(&self, id: EndpointId) -> bool {
        self.get(id).is_some()
    }

    /// The value of `id`, a default one put in when it held none (growing the table when
    /// full); and whether it was put in.
    pub(super) fn get_or_insert(&mut self, id: EndpointId) -> (&mut V, bool) {
        if id == VACANT {
            let new = self.odd.is_none();
            return (self.odd.get_or_insert_with(V::default), new);
        }
        if self.used >= self.capacity() {
            self.reserve(1);
        }
        match self.probe(id) {
            Ok(i) => (&mut self.slots[i].1, false),
            Err(i) => {
                self.slots[i] = (id, V::default());
                self.used += 1;
                (&mut self.slots[i].1, true)
            }
        }
    }

    pub(super) fn remove(&mut self, id: EndpointId) -> Option<V> {
        if id == VACANT {
            return self.odd.take();
        }
        let mut hole = self.find(id)?;
        let gone = self.slots[hole].1;
        self.slots[hole].0 = VACANT;
        self.used -= 1;
        // Backward shift: move up every later entry of the run whose home is not between
        // the hole and it, so no search stops early at the hole.
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let k = self.slots[j].0;
            if k == VACANT {
                return Some(gone);
            }
            let h = home(k, self.shift);
            // Whether `h` lies cyclically in (hole, j]: then the entry stays.
            let stays = if hole <= j {
                hole < h && h <= j
            } else {
                hole < h || h <= j
            };
            if !stays {
                self.slots[hole] = self.slots[j];
                self.slots[j].0 = VACANT;
                hole = j;
            }
        }
    }

    /// Room for `more` entries beyond those held: the table doubles until they fit.
    fn reserve(&mut self, more: usize) {
        if self.used + more > self.capacity() {
            self.rebuild(self.used + more, |_| true);
        }
    }

    /// Keep only the entries `keep` says yes to, with room for as many more beyond them as
    /// `room` answers for the number kept (the table never shrinks): one counting pass
    /// and one rebuild.
    pub(super) fn retain(
        &mut self,
        mut keep: impl FnMut(&V) -> bool,
        room: impl FnOnce(usize) -> usize,
    ) {
        if self.odd.as_ref().is_some_and(|v| !keep(v)) {
            self.odd = None;
        }
        let kept = self
            .slots
            .iter()
            .filter(|s| s.0 != VACANT && keep(&s.1))
            .count();
        let more = room(kept + usize::from(self.odd.is_some()));
        if kept == self.used && kept + more <= self.capacity() {
            // Nothing goes and nothing must grow: no rebuild.
            return;
        }
        self.rebuild(kept + more, keep);
    }

    /// Put the kept entries into a table of at least the present size, doubled until
    /// `need` of them fit.
    fn rebuild(&mut self, need: usize, mut keep: impl FnMut(&V) -> bool) {
        let mut slots = self.slots.len().max(FIRST);
        while limit(slots) < need {
            slots *= 2;
        }
        let old = std::mem::replace(&mut self.slots, vec![(VACANT, V::default()); slots].into());
        self.shift = 64 - slots.trailing_zeros();
        self.used = 0;
        for &(k, v) in old.iter() {
            if k == VACANT || !keep(&v) {
                continue;
            }
            let (Ok(i) | Err(i)) = self.probe(k);
            self.slots[i] = (k, v);
            self.used += 1;
        }
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &V> {
        self.slots
            .iter()
            .filter(|s| s.0 != VACANT)
            .map(|s| &s.1)
            .chain(self.odd.as_ref())
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.slots
            .iter_mut()
            .filter(|s| s.0 != VACANT)
            .map(|s| &mut s.1)
            .chain(self.odd.as_mut())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Random inserts, updates, removals and retains, mirrored in a `HashMap`: both must
    /// hold the same entries after every step, clustered ids and the vacant key included.
    #[test]
    fn behaves_as_a_map() {
        let mut rng = fastrand::Rng::with_seed(5);
        for range in [16i64, 200, 5_000] {
            let mut t: IdTable<u32> = IdTable::default();
            let mut m: HashMap<EndpointId, u32> = HashMap::new();
            for step in 0..20_000u32 {
                let id = match rng.u8(..50) {
                    0 => VACANT,
                    _ => rng.i64(0..range),
                };
                match rng.u8(..10) {
                    0..=4 => {
                        let (v, new) = t.get_or_insert(id);
                        assert_eq!(new, !m.contains_key(&id), "step {step}");
                        *v = step;
                        m.insert(id, step);
                    }
                    5..=7 => assert_eq!(t.remove(id), m.remove(&id), "step {step}"),
                    8 => {
                        let cut = rng.u32(..=step.max(1));
                        t.retain(|&v| v >= cut, |_| 0);
                        m.retain(|_, v| *v >= cut);
                    }
                    _ => assert_eq!(t.get(id), m.get(&id), "step {step}"),
                }
                assert_eq!(t.len(), m.len(), "step {step}");
                assert!(t.used <= t.capacity());
            }
            for (k, v) in &m {
                assert_eq!(t.get(*k), Some(v));
            }
            let mut vals: Vec<u32> = t.values().copied().collect();
            let mut want: Vec<u32> = m.values().copied().collect();
            vals.sort_unstable();
            want.sort_unstable();
            assert_eq!(vals, want);
        }
    }

    /// Keys whose homes collide and wrap past the table's end still shift back whole.
    #[test]
    fn removal_keeps_wrapped_runs_reachable() {
        let mut t: IdTable<u8> = IdTable::default();
        t.reserve(6);
        let last = t.slots.len() - 1;
        let ids: Vec<EndpointId> = (0..100_000)
            .filter(|&id| home(id, t.shift) == last)
            .take(4)
            .collect();
        for &id in &ids {
            *t.get_or_insert(id).0 = 1;
        }
        assert_eq!(t.remove(ids[0]), Some(1));
        for &id in &ids[1..] {
            assert_eq!(t.get(id), Some(&1), "{id} still found");
        }
    }
}
