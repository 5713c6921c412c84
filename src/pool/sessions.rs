//! Sticky sessions (docs/leases.md, "Sticky sessions"): which endpoint a client's session
//! key goes to, per pool.
//!
//! A session goes to the endpoint with the highest rendezvous weight for its key among
//! those every daemon of a fleet agrees may serve it (available, fitting the lease, not
//! banned for its place), falling back to the next weight, so that every daemon maps a
//! key to the same endpoint with nothing shared per request (docs/fleet.md, "Sessions
//! across the fleet"). The weight is a fixed function of the key's text and the endpoint's
//! id: every daemon, of any build, computes the same.
//!
//! Ranking a pool's endpoints costs a pass over them, so the answer is remembered per key:
//! by a keyed 64-bit hash of the key (SipHash with this process's random key), not by its
//! text, so an entry costs the same whatever the client sends, and at the cap of 65,536
//! keys the table is a few MiB. A remembered answer holds while its endpoint still
//! qualifies and no endpoint that came into service since outranks it for the key (the
//! endpoints that came into service are logged in order: `Joins`).

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;

use crate::endpoint::EndpointId;

/// Session keys remembered at most.
pub(super) const MAX_SESSIONS: usize = 65_536;

/// Endpoints that came into service, remembered at most: a session last looked at before
/// the oldest of them is ranked again.
const MAX_JOINS: usize = 4096;

/// A session as the table keys it: the keyed hash of its pool's index and its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct SessionRef(u64);

/// What a session's last ranking found: 16 bytes, so that the table at its cap stays
/// within 4 MiB (`tests/session_memory.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Bound {
    /// The highest weight among the endpoints that qualified then.
    pub(super) top: EndpointId,
    /// `Joins::now()` when it was ranked or checked.
    pub(super) seen: u32,
}

/// The sessions of every pool, and the endpoints that came into service lately.
pub(super) struct Sessions {
    bound: HashMap<SessionRef, Bound>,
    /// Sessions leased the next endpoint in order, not their top (this daemon could not
    /// lease the top: its `max_leases_per_endpoint`), and that endpoint.
    fell: HashMap<SessionRef, EndpointId>,
    hasher: RandomState,
    joins: Joins,
    /// This daemon is one of a fleet: a new session goes where every daemon would send it
    /// (rendezvous), not to the least leased endpoint.
    agreed: bool,
}

/// The endpoints that came into service (became available, or a trial waiting to be
/// claimed), in order: a remembered session checks only those that came after it.
#[derive(Default)]
pub(super) struct Joins {
    log: VecDeque<EndpointId>,
    /// How many were ever logged: the number of the next one.
    next: u64,
}

impl Joins {
    fn push(&mut self, id: EndpointId) {
        if self.log.len() == MAX_JOINS {
            self.log.pop_front();
        }
        self.log.push_back(id);
        self.next += 1;
    }

    /// The number the next one will get (its low 32 bits): what a session checked up to.
    pub(super) fn now(&self) -> u32 {
        self.next as u32
    }

    /// Those logged from number `seen` on, or None when some of them are forgotten.
    pub(super) fn since(&self, seen: u32) -> Option<impl Iterator<Item = EndpointId> + '_> {
        let behind = (self.next as u32).wrapping_sub(seen) as usize;
        let skip = self.log.len().checked_sub(behind)?;
        Some(self.log.iter().skip(skip).copied())
    }
}

/// splitmix64's finalizer: every bit of the input moves every bit of the output.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The session key's part of every weight: FNV-1a of its bytes, mixed. The same on every
/// daemon (not the table's keyed hash, which differs per process).
pub(super) fn key_hash(key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    mix(h)
}

/// The rendezvous weight of endpoint `id` for a key whose [`key_hash`] is `k`.
pub(super) fn weight(k: u64, id: EndpointId) -> u64 {
    mix(k ^ mix((id as u64).wrapping_add(0x9e37_79b9_7f4a_7c15)))
}

/// Whether weight `a` of endpoint `ia` ranks above weight `b` of `ib` (ties: the lower id).
pub(super) fn outranks(a: u64, ia: EndpointId, b: u64, ib: EndpointId) -> bool {
    (a, std::cmp::Reverse(ia)) > (b, std::cmp::Reverse(ib))
}

impl Sessions {
    pub(super) fn new() -> Sessions {
        Sessions {
            bound: HashMap::new(),
            fell: HashMap::new(),
            hasher: RandomState::new(),
            joins: Joins::default(),
            agreed: false,
        }
    }

    /// Place sessions as every daemon of a fleet would (see `agreed`).
    pub(super) fn agree(&mut self) {
        self.agreed = true;
    }

    pub(super) fn agreed(&self) -> bool {
        self.agreed
    }

    /// The table's name for `key` in pool `p`.
    pub(super) fn at(&self, p: usize, key: &str) -> SessionRef {
        SessionRef(self.hasher.hash_one((p as u32, key)))
    }

    /// The endpoint the session was last leased.
    pub(super) fn get(&self, s: SessionRef) -> Option<EndpointId> {
        let b = self.bound.get(&s)?;
        Some(self.fell.get(&s).copied().unwrap_or(b.top))
    }

    /// What the session's last ranking found.
    pub(super) fn bound(&self, s: SessionRef) -> Option<Bound> {
        self.bound.get(&s).copied()
    }

    /// The endpoints that came into service lately.
    pub(super) fn joins(&self) -> &Joins {
        &self.joins
    }

    /// Endpoint `id` came into service: remembered sessions it outranks move to it. Only
    /// a fleet's placement ranks (a daemon alone keeps a session where it went).
    pub(super) fn joined(&mut self, id: EndpointId) {
        if self.agreed {
            self.joins.push(id);
        }
    }

    /// Remember that `s` was ranked to `top` and leased `id`. At the cap, sessions whose
    /// top `in_service` denies are forgotten first, then all (scrapers that mint a key per
    /// request must not grow memory forever).
    pub(super) fn bind(
        &mut self,
        s: SessionRef,
        top: EndpointId,
        id: EndpointId,
        in_service: impl Fn(EndpointId) -> bool,
    ) {
        if self.bound.len() >= MAX_SESSIONS && !self.bound.contains_key(&s) {
            self.bound.retain(|_, b| in_service(b.top));
            if self.bound.len() >= MAX_SESSIONS {
                self.bound.clear();
            }
            let bound = &self.bound;
            self.fell.retain(|s, _| bound.contains_key(s));
        }
        let seen = self.joins.now();
        self.bound.insert(s, Bound { top, seen });
        self.leased(s, top, id);
    }

    /// The session's ranking still holds, checked up to now; it was leased `id`.
    pub(super) fn checked(&mut self, s: SessionRef, id: EndpointId) {
        let now = self.joins.now();
        let Some(b) = self.bound.get_mut(&s) else {
            return;
        };
        b.seen = now;
        let top = b.top;
        self.leased(s, top, id);
    }

    fn leased(&mut self, s: SessionRef, top: EndpointId, id: EndpointId) {
        if id == top {
            self.fell.remove(&s);
        } else {
            self.fell.insert(s, id);
        }
    }

    pub(super) fn unbind(&mut self, s: SessionRef) {
        self.bound.remove(&s);
        self.fell.remove(&s);
    }

    /// Forget every session ranked or leased to `id` (the endpoint is gone).
    pub(super) fn forget_endpoint(&mut self, id: EndpointId) {
        let fell: Vec<SessionRef> = self
            .fell
            .iter()
            .filter(|(_, f)| **f == id)
            .map(|(s, _)| *s)
            .collect();
        for s in fell {
            self.unbind(s);
        }
        self.bound.retain(|_, b| b.top != id);
        let bound = &self.bound;
        self.fell.retain(|s, _| bound.contains_key(s));
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
        s.bind(a0, 7, 7, |_| true);
        assert_eq!(s.get(a0), Some(7));
        assert_eq!(s.get(s.at(1, "cart-1")), None);
        s.unbind(a0);
        assert_eq!(s.get(a0), None);
        // Full: sessions of endpoints out of service go first.
        for i in 0..MAX_SESSIONS {
            let r = s.at(0, &format!("k{i}"));
            let id = if i % 2 == 0 { 1 } else { 2 };
            s.bind(r, id, id, |_| true);
        }
        assert_eq!(s.len(), MAX_SESSIONS);
        let extra = s.at(0, "one more");
        s.bind(extra, 1, 1, |id| id == 1);
        assert_eq!(s.len(), MAX_SESSIONS / 2 + 1);
        assert_eq!(s.get(s.at(0, "k0")), Some(1));
        assert_eq!(s.get(s.at(0, "k1")), None);
        // Still full with every endpoint in service: all are forgotten.
        for i in 0..MAX_SESSIONS {
            let r = s.at(0, &format!("m{i}"));
            s.bind(r, 1, 1, |_| true);
        }
        assert!(s.len() <= MAX_SESSIONS);
        s.forget_endpoint(1);
        assert_eq!(s.len(), 0);
    }

    /// The weights are a fixed function of the key's text and the id: these values are
    /// what every daemon, of any build, computes (a change here moves every session of a
    /// fleet that runs two versions at once).
    #[test]
    fn weights_are_the_same_everywhere() {
        assert_eq!(key_hash(""), mix(0xcbf2_9ce4_8422_2325));
        let k = key_hash("session-7");
        assert_eq!(k, key_hash("session-7"));
        assert_ne!(k, key_hash("session-8"));
        assert_eq!(
            key_hash("session-7"),
            0x1588_e99b_a0c4_cb52,
            "{:#x}",
            key_hash("session-7")
        );
        assert_eq!(weight(1, 1), 0x5c52_bd40_54e9_58c9, "{:#x}", weight(1, 1));
    }

    /// Keys spread evenly: 20,000 keys over 10 endpoints put 2,000 ± 10% on each; taking
    /// one endpoint away moves only its keys, each to the next in its own order.
    #[test]
    fn keys_spread_evenly_and_only_the_keys_of_an_endpoint_that_left_move() {
        let ids: Vec<EndpointId> = (1..=10).collect();
        let top = |k: u64, ids: &[EndpointId]| {
            ids.iter()
                .copied()
                .fold(None::<(u64, EndpointId)>, |best, id| {
                    let w = weight(k, id);
                    match best {
                        Some((bw, bid)) if !outranks(w, id, bw, bid) => Some((bw, bid)),
                        _ => Some((w, id)),
                    }
                })
                .unwrap()
                .1
        };
        let mut per = [0usize; 11];
        let mut moved = 0;
        let without: Vec<EndpointId> = ids.iter().copied().filter(|&i| i != 4).collect();
        for n in 0..20_000 {
            let k = key_hash(&format!("session-{n}"));
            let t = top(k, &ids);
            per[t as usize] += 1;
            let t2 = top(k, &without);
            if t != 4 {
                assert_eq!(t, t2, "a key of another endpoint moved");
            } else {
                moved += 1;
            }
        }
        for (id, n) in per.iter().enumerate().skip(1) {
            assert!((1800..=2200).contains(n), "endpoint {id}: {n} of 20,000");
        }
        assert_eq!(moved, per[4]);
    }

    #[test]
    fn joins_are_read_from_where_a_session_looked_last() {
        let mut j = Joins::default();
        assert_eq!(j.since(0).unwrap().count(), 0);
        j.push(5);
        j.push(6);
        let seen = j.now();
        j.push(7);
        assert_eq!(j.since(seen).unwrap().collect::<Vec<_>>(), [7]);
        assert_eq!(j.since(0).unwrap().collect::<Vec<_>>(), [5, 6, 7]);
        for i in 0..MAX_JOINS as EndpointId {
            j.push(100 + i);
        }
        assert!(j.since(seen).is_none(), "forgotten: ranked again");
        assert_eq!(j.since(j.now()).unwrap().count(), 0);
    }
}
