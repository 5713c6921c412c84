//! The slab of held hosts and their least-recently-used order: a host's slot, its
//! neighbours kept apart from the slots (moving a host to the front touches 8 bytes of
//! each neighbour, not its whole slot), slots reused under a new generation.

use std::time::Duration;

use super::host::Host;
use super::{HostRef, Pace};

/// No slot (an end of the least-recently-used list).
pub(super) const NIL: u32 = u32::MAX;

/// One slot of the slab: a host, or a free slot (its name empty, its maps freed).
pub(super) struct Slot {
    pub(super) name: Box<str>,
    pub(super) gen: u32,
    pub(super) host: Host,
}

/// A slot's neighbours in least-recently-used order.
#[derive(Clone, Copy)]
pub(super) struct Link {
    /// More recently used.
    pub(super) prev: u32,
    /// Less recently used.
    pub(super) next: u32,
}

impl Pace {
    fn unlink(&mut self, i: u32) {
        let Link { prev, next } = self.links[i as usize];
        match prev {
            NIL => self.head = next,
            p => self.links[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.links[n as usize].prev = prev,
        }
    }

    fn push_front(&mut self, i: u32) {
        self.links[i as usize] = Link {
            prev: NIL,
            next: self.head,
        };
        match self.head {
            NIL => self.tail = i,
            h => self.links[h as usize].prev = i,
        }
        self.head = i;
    }

    /// Mark slot `i` the most recently used.
    pub(super) fn touch(&mut self, i: u32) {
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
    }

    /// Hold `host` (not held yet) with its rule; its handle.
    pub(super) fn insert(&mut self, host: &str, h: Host) -> HostRef {
        let i = match self.free.pop() {
            Some(i) => {
                let s = &mut self.slots[i as usize];
                s.name = host.into();
                s.host = h;
                i
            }
            None => {
                let i = self.slots.len() as u32;
                self.slots.push(Slot {
                    name: host.into(),
                    gen: 0,
                    host: h,
                });
                self.links.push(Link {
                    prev: NIL,
                    next: NIL,
                });
                i
            }
        };
        self.index.insert(host.into(), i);
        self.push_front(i);
        HostRef {
            slot: i,
            gen: self.slots[i as usize].gen,
        }
    }

    /// Forget the host in slot `i` whole; its slot is free for another (a new
    /// generation, so handles to this one find nothing).
    pub(super) fn remove_slot(&mut self, i: u32) {
        self.unlink(i);
        let s = &mut self.slots[i as usize];
        let name = std::mem::take(&mut s.name);
        let h = std::mem::replace(&mut s.host, Host::new((Duration::ZERO, 0)));
        s.gen = s.gen.wrapping_add(1);
        self.index.remove(&name);
        self.pairs -= h.pairs.len();
        self.widened -= h.pairs.values().filter(|p| p.exp > 0).count();
        self.free.push(i);
    }
}
