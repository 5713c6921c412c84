//! Escalation's strikes: per endpoint, the distinct targets it failed that another
//! endpoint reached after the failure, since its own last success (docs/blame.md,
//! "Contrast"). A target that goes down, or is forgotten, takes its strikes back: a
//! target that turned out to be down says nothing about the endpoints that failed it.

use std::hash::BuildHasher;

use rustc_hash::{FxBuildHasher, FxHashMap};

use crate::endpoint::EndpointId;

/// Endpoints a target remembers striking it (the most recent; an older one's strike is
/// taken back when it is pushed out, so that every strike can be taken back).
pub(super) const MAX_STRUCK: usize = 64;

#[derive(Debug, Default)]
pub(super) struct Strikes {
    by_endpoint: FxHashMap<EndpointId, Vec<u64>>,
}

/// The key a strike is kept under.
pub(super) fn key_hash(target: &str) -> u64 {
    FxBuildHasher.hash_one(target)
}

impl Strikes {
    /// One more distinct target (by hash) `e` failed that others reach: true when that
    /// makes `escalate_after` (and the count starts again).
    pub(super) fn strike(&mut self, e: EndpointId, target: u64, escalate_after: u32) -> bool {
        let s = self.by_endpoint.entry(e).or_default();
        if !s.contains(&target) {
            s.push(target);
        }
        if crate::health::blame::escalates(s.len(), escalate_after) {
            self.by_endpoint.remove(&e);
            return true;
        }
        false
    }

    /// Take back `e`'s strike on `target`, if it has one.
    pub(super) fn take_back(&mut self, e: EndpointId, target: u64) {
        if let Some(s) = self.by_endpoint.get_mut(&e) {
            s.retain(|&h| h != target);
            if s.is_empty() {
                self.by_endpoint.remove(&e);
            }
        }
    }

    /// `e` reached something (or is gone): its strikes start again from zero.
    pub(super) fn clear(&mut self, e: EndpointId) {
        self.by_endpoint.remove(&e);
    }

    /// How many strikes `e` holds.
    #[cfg(test)]
    pub(super) fn of(&self, e: EndpointId) -> usize {
        self.by_endpoint.get(&e).map_or(0, Vec::len)
    }
}
