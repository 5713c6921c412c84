//! `Exits`: per pool, the address each endpoint leaves from (docs/exit.md), interned so
//! that the endpoints of one address are found in O(1), and when each is checked next.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use rustc_hash::FxHashMap;
use tokio::time::Instant;

use crate::config::ExitConfig;
use crate::endpoint::EndpointId;

/// One exit address and how many endpoints of the pool leave through it.
struct Slot {
    ip: IpAddr,
    members: u32,
}

#[derive(Default)]
pub(super) struct Exits {
    cfg: Option<ExitConfig>,
    /// Endpoint → its address's slot (known addresses only).
    of: FxHashMap<EndpointId, u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    by_ip: FxHashMap<IpAddr, u32>,
    /// Endpoints in addresses with more than one member, and those addresses: `status`.
    shared_endpoints: usize,
    shared_addresses: usize,
    /// When each endpoint of the pool is checked next; the heap may hold stale items
    /// (an endpoint checked sooner than planned), skipped unless `due_at` agrees.
    due_at: FxHashMap<EndpointId, Instant>,
    due: BinaryHeap<Reverse<(Instant, EndpointId)>>,
}

/// A change of one endpoint's exit address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Moved {
    pub(super) from: Option<IpAddr>,
    pub(super) to: Option<IpAddr>,
}

impl Exits {
    pub(super) fn config(&self) -> Option<&ExitConfig> {
        self.cfg.as_ref()
    }

    /// A new `[pool.exit]` (or none: all is forgotten and nothing is shared). `held` are
    /// the pool's endpoints, checked at once when learning is switched on.
    pub(super) fn configure(
        &mut self,
        cfg: Option<ExitConfig>,
        held: impl Iterator<Item = EndpointId>,
        now: Instant,
    ) {
        let was_on = self.cfg.is_some();
        if cfg.is_none() {
            *self = Exits::default();
            return;
        }
        self.cfg = cfg;
        if !was_on {
            for id in held {
                self.schedule(id, now);
            }
        }
    }

    /// An endpoint loaded with the address the store had for it, learned at `seen`:
    /// checked again once `every` has passed since.
    pub(super) fn load(
        &mut self,
        id: EndpointId,
        ip: Option<IpAddr>,
        seen: Option<SystemTime>,
        now: Instant,
    ) {
        let Some(every) = self.cfg.as_ref().map(|c| c.every) else {
            return;
        };
        self.set(id, ip);
        let age = seen
            .and_then(|s| SystemTime::now().duration_since(s).ok())
            .filter(|_| ip.is_some());
        let left = age.map_or(Duration::ZERO, |a| every.saturating_sub(a));
        self.schedule(id, now + left);
    }

    /// Forget an endpoint (removed, or moved to another pool).
    pub(super) fn forget(&mut self, id: EndpointId) {
        self.set(id, None);
        self.due_at.remove(&id);
    }

    /// Check `id` at the next turn (it came back from a cooldown: it may have rotated).
    pub(super) fn check_soon(&mut self, id: EndpointId, now: Instant) {
        if self.cfg.is_some() && self.due_at.contains_key(&id) {
            self.schedule(id, now);
        }
    }

    /// Up to `max` endpoints whose check is due at `now`; each is planned again `every`
    /// later (a result arriving changes only the address).
    pub(super) fn take_due(&mut self, now: Instant, max: usize) -> Vec<EndpointId> {
        let Some(every) = self.cfg.as_ref().map(|c| c.every) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        while out.len() < max {
            let Some(&Reverse((at, id))) = self.due.peek() else {
                break;
            };
            if at > now {
                break;
            }
            self.due.pop();
            if self.due_at.get(&id) == Some(&at) {
                out.push(id);
                self.schedule(id, now + every);
            }
        }
        out
    }

    /// When the next check is due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.due.peek().map(|Reverse((at, _))| *at)
    }

    fn schedule(&mut self, id: EndpointId, at: Instant) {
        self.due_at.insert(id, at);
        self.due.push(Reverse((at, id)));
        // Stale items pile up only when endpoints are checked early again and again:
        // rebuilt from `due_at`, the heap is never more than twice the pool.
        if self.due.len() > 2 * self.due_at.len() + 64 {
            self.due = self
                .due_at
                .iter()
                .map(|(&id, &at)| Reverse((at, id)))
                .collect();
        }
    }

    /// Record what a check learned; the change, if it is one.
    pub(super) fn learned(&mut self, id: EndpointId, ip: Option<IpAddr>) -> Option<Moved> {
        if self.cfg.is_none() || !self.due_at.contains_key(&id) {
            return None;
        }
        let from = self.ip_of(id);
        if from == ip {
            return None;
        }
        self.set(id, ip);
        Some(Moved { from, to: ip })
    }

    /// The address `id` leaves from, when known.
    pub(super) fn ip_of(&self, id: EndpointId) -> Option<IpAddr> {
        self.of.get(&id).map(|&s| self.slots[s as usize].ip)
    }

    /// The number of `id`'s address in the pool's table, when known.
    pub(super) fn slot(&self, id: EndpointId) -> Option<u32> {
        self.of.get(&id).copied()
    }

    /// (endpoints that share an address with another, addresses they share).
    pub(super) fn sharing(&self) -> (usize, usize) {
        (self.shared_endpoints, self.shared_addresses)
    }

    /// Endpoints whose address is known.
    pub(super) fn known(&self) -> usize {
        self.of.len()
    }

    /// Addresses known.
    pub(super) fn addresses(&self) -> usize {
        self.by_ip.len()
    }

    fn set(&mut self, id: EndpointId, ip: Option<IpAddr>) {
        if let Some(s) = self.of.remove(&id) {
            self.leave(s);
        }
        if let Some(ip) = ip {
            let s = self.join(ip);
            self.of.insert(id, s);
        }
    }

    fn join(&mut self, ip: IpAddr) -> u32 {
        let s = match self.by_ip.get(&ip) {
            Some(&s) => s,
            None => {
                let slot = Slot { ip, members: 0 };
                let s = match self.free.pop() {
                    Some(s) => {
                        self.slots[s as usize] = slot;
                        s
                    }
                    None => {
                        self.slots.push(slot);
                        (self.slots.len() - 1) as u32
                    }
                };
                self.by_ip.insert(ip, s);
                s
            }
        };
        let m = &mut self.slots[s as usize].members;
        *m += 1;
        match *m {
            2 => {
                self.shared_addresses += 1;
                self.shared_endpoints += 2;
            }
            3.. => self.shared_endpoints += 1,
            _ => {}
        }
        s
    }

    fn leave(&mut self, s: u32) {
        let slot = &mut self.slots[s as usize];
        slot.members -= 1;
        match slot.members {
            1 => {
                self.shared_addresses -= 1;
                self.shared_endpoints -= 2;
            }
            2.. => self.shared_endpoints -= 1,
            0 => {
                let ip = slot.ip;
                self.by_ip.remove(&ip);
                self.free.push(s);
            }
        }
    }
}

#[cfg(test)]
mod tests;
