//! Sticky sessions: which endpoint a client's session key is bound to, per pool
//! (docs/leases.md, "Sticky sessions").
//!
//! A key is remembered by a keyed 64-bit hash of it (SipHash with this process's random
//! key), not by its text: an entry costs the same 24 bytes whatever the client sends, and
//! at the cap of 65,536 keys the table is about 3 MiB. Two keys share a hash with odds of
//! about one in 10^10 at the cap, and then only share an endpoint; nobody outside the
//! process can aim at that, since the hash key is random.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;

use crate::endpoint::EndpointId;

/// Session keys remembered at most.
pub(super) const MAX_SESSIONS: usize = 65_536;

/// A session as the table keys it: the pool's index and the key's hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct SessionRef {
    pool: u32,
    key: u64,
}

/// The bound sessions of every pool.
pub(super) struct Sessions {
    bound: HashMap<SessionRef, EndpointId>,
    hasher: RandomState,
}

impl Sessions {
    pub(super) fn new() -> Sessions {
        Sessions {
            bound: HashMap::new(),
            hasher: RandomState::new(),
        }
    }

    /// The table's name for `key` in pool `p`.
    pub(super) fn at(&self, p: usize, key: &str) -> SessionRef {
        SessionRef {
            pool: p as u32,
            key: self.hasher.hash_one(key),
        }
    }

    pub(super) fn get(&self, s: SessionRef) -> Option<EndpointId> {
        self.bound.get(&s).copied()
    }

    /// Bind `s` to `id`. At the cap, sessions whose endpoint `in_service` denies are
    /// forgotten first, then all (scrapers that mint a key per request must not grow
    /// memory forever).
    pub(super) fn bind(
        &mut self,
        s: SessionRef,
        id: EndpointId,
        in_service: impl Fn(EndpointId) -> bool,
    ) {
        if self.bound.len() >= MAX_SESSIONS && !self.bound.contains_key(&s) {
            self.bound.retain(|_, id| in_service(*id));
            if self.bound.len() >= MAX_SESSIONS {
                self.bound.clear();
            }
        }
        self.bound.insert(s, id);
    }

    pub(super) fn unbind(&mut self, s: SessionRef) {
        self.bound.remove(&s);
    }

    /// Forget every session bound to `id` (the endpoint is gone).
    pub(super) fn forget_endpoint(&mut self, id: EndpointId) {
        self.bound.retain(|_, v| *v != id);
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.bound.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_bind_per_pool_and_the_table_never_passes_its_cap() {
        let mut s = Sessions::new();
        let a0 = s.at(0, "cart-1");
        assert_eq!(a0, s.at(0, "cart-1"), "the same key, the same session");
        assert_ne!(a0, s.at(1, "cart-1"), "per pool");
        assert_ne!(a0, s.at(0, "cart-2"));
        s.bind(a0, 7, |_| true);
        assert_eq!(s.get(a0), Some(7));
        assert_eq!(s.get(s.at(1, "cart-1")), None);
        s.unbind(a0);
        assert_eq!(s.get(a0), None);
        // Full: sessions of endpoints out of service go first.
        for i in 0..MAX_SESSIONS {
            let r = s.at(0, &format!("k{i}"));
            s.bind(r, if i % 2 == 0 { 1 } else { 2 }, |_| true);
        }
        assert_eq!(s.len(), MAX_SESSIONS);
        let extra = s.at(0, "one more");
        s.bind(extra, 1, |id| id == 1);
        assert_eq!(s.len(), MAX_SESSIONS / 2 + 1);
        assert_eq!(s.get(s.at(0, "k0")), Some(1));
        assert_eq!(s.get(s.at(0, "k1")), None);
        // Still full with every endpoint in service: all are forgotten.
        for i in 0..MAX_SESSIONS {
            let r = s.at(0, &format!("m{i}"));
            s.bind(r, 1, |_| true);
        }
        assert!(s.len() <= MAX_SESSIONS);
        s.forget_endpoint(1);
        assert_eq!(s.len(), 0);
    }
}
