//! Tags as the pools hold them: every (key, value) interned to a small number, so an
//! endpoint carries a sorted slice of numbers and a lease's tags are matched without a
//! string compare; and the keys in use, which leases and gateway usernames may name.

use std::collections::BTreeSet;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::tags::Tags;

#[derive(Default)]
pub(super) struct TagIndex {
    ids: FxHashMap<(Box<str>, Box<str>), u32>,
    /// By id: its key.
    keys_of: Vec<Box<str>>,
    /// Endpoints carrying each key.
    in_use: FxHashMap<Box<str>, usize>,
    /// The keys in use, as handed out (rebuilt when one appears or goes).
    known: Arc<BTreeSet<String>>,
}

/// What a lease's tags come to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Resolved {
    /// The ids every candidate must carry (sorted; empty: any endpoint).
    Ids(Box<[u32]>),
    /// A value no endpoint has ever carried: nothing can match.
    Nothing,
}

impl TagIndex {
    /// The ids of an endpoint's `tags`, counted as in use.
    pub(super) fn intern(&mut self, tags: &Tags) -> Box<[u32]> {
        if tags.is_empty() {
            return Box::default();
        }
        let mut out: Vec<u32> = Vec::with_capacity(tags.len());
        let mut changed = false;
        for (k, v) in tags.iter() {
            let next = self.keys_of.len() as u32;
            let id = *self.ids.entry((k.into(), v.into())).or_insert(next);
            if id == next {
                self.keys_of.push(k.into());
            }
            let n = self.in_use.entry(k.into()).or_insert(0);
            changed |= *n == 0;
            *n += 1;
            out.push(id);
        }
        out.sort_unstable();
        if changed {
            self.rebuild();
        }
        out.into_boxed_slice()
    }

    /// Whether an endpoint's interned `ids` are `tags`.
    pub(super) fn same(&self, ids: &[u32], tags: &Tags) -> bool {
        ids.len() == tags.len()
            && tags.iter().all(|(k, v)| {
                self.ids
                    .get(&(Box::from(k), Box::from(v)))
                    .is_some_and(|id| ids.binary_search(id).is_ok())
            })
    }

    /// An endpoint carrying `ids` is gone (or changes its tags).
    pub(super) fn release(&mut self, ids: &[u32]) {
        let mut changed = false;
        for &id in ids {
            let Some(key) = self.keys_of.get(id as usize) else {
                continue;
            };
            if let Some(n) = self.in_use.get_mut(key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.in_use.remove(key);
                    changed = true;
                }
            }
        }
        if changed {
            self.rebuild();
        }
    }

    fn rebuild(&mut self) {
        self.known = Arc::new(self.in_use.keys().map(|k| k.to_string()).collect());
    }

    /// A lease's tags: `Err(key)` names the first key no endpoint carries.
    pub(super) fn resolve(&self, want: &Tags) -> Result<Resolved, String> {
        let mut ids = Vec::with_capacity(want.len());
        let mut nothing = false;
        for (k, v) in want.iter() {
            if !self.in_use.contains_key(k) {
                return Err(k.to_string());
            }
            match self.ids.get(&(Box::from(k), Box::from(v))) {
                Some(&id) => ids.push(id),
                None => nothing = true,
            }
        }
        if nothing {
            return Ok(Resolved::Nothing);
        }
        ids.sort_unstable();
        Ok(Resolved::Ids(ids.into_boxed_slice()))
    }

    /// Each id's (key, value), by id: interned tags read back.
    pub(super) fn names(&self) -> Vec<(&str, &str)> {
        let mut v = vec![("", ""); self.keys_of.len()];
        for ((k, val), &id) in &self.ids {
            if let Some(slot) = v.get_mut(id as usize) {
                *slot = (k, val);
            }
        }
        v
    }

    /// The keys some endpoint carries now.
    pub(super) fn known(&self) -> Arc<BTreeSet<String>> {
        self.known.clone()
    }
}

/// Whether an endpoint's sorted `has` holds every id of the sorted `want`.
pub(super) fn carries(has: &[u32], want: &[u32]) -> bool {
    want.iter().all(|w| has.binary_search(w).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(args: &[&str]) -> Tags {
        Tags::parse_args(args).unwrap()
    }

    #[test]
    fn interning_matching_and_keys_in_use() {
        let mut ix = TagIndex::default();
        let us_dc = ix.intern(&tags(&["country=us", "tier=dc"]));
        let de = ix.intern(&tags(&["country=de"]));
        let known: Vec<String> = ix.known().iter().cloned().collect();
        assert_eq!(known, ["country", "tier"]);
        let Ok(Resolved::Ids(want)) = ix.resolve(&tags(&["country=us"])) else {
            panic!()
        };
        assert!(carries(&us_dc, &want) && !carries(&de, &want));
        assert!(carries(&de, &[]));
        assert_eq!(ix.resolve(&tags(&["country=fr"])), Ok(Resolved::Nothing));
        assert_eq!(ix.resolve(&tags(&["asn=1"])), Err("asn".to_string()));
        assert_eq!(
            ix.resolve(&Tags::default()),
            Ok(Resolved::Ids(Box::default()))
        );
        // The last endpoint with `tier` goes: the key is unknown again.
        ix.release(&us_dc);
        assert_eq!(ix.resolve(&tags(&["tier=dc"])), Err("tier".to_string()));
        let known: Vec<String> = ix.known().iter().cloned().collect();
        assert_eq!(known, ["country"]);
        ix.release(&de);
        assert!(ix.known().is_empty());
    }
}
