//! How the leases that ended lately ended, so that a second report or release says so.
//!
//! A ring indexed by lease number: numbers are handed out in order, so the ring remembers
//! the end of each of the last `MEMORY` leases given, and an id's word is found without a
//! hash. Leases mostly end in about the order they were given, so consecutive ends write
//! neighbouring words, where a hash map scattered them over 2 MiB and each insert (and
//! the removal of the oldest) missed the caches on the lease path.

use super::name::LeaseName;
use crate::pool::Ended;

/// Leases whose end is remembered: 1 MiB of words.
const MEMORY: usize = 65_536;

pub(super) struct EndedLeases {
    /// Per slot: `lid << 2 | how` of the last lease of that slot that ended (0: none;
    /// lease numbers start at 1), and the low half of its name's random part, so that a
    /// guessed name is told it is unknown, not how another client's lease ended.
    words: Box<[(u64, u64)]>,
}

impl Default for EndedLeases {
    fn default() -> Self {
        EndedLeases {
            // Zeroed memory is mapped lazily: an idle daemon pays for the pages it uses.
            words: vec![(0, 0); MEMORY].into(),
        }
    }
}

fn code(how: Ended) -> u64 {
    match how {
        Ended::Expired => 1,
        Ended::Reported => 2,
        Ended::Released => 3,
    }
}

impl EndedLeases {
    pub(super) fn remember(&mut self, name: LeaseName, how: Ended) {
        self.words[name.lid as usize % MEMORY] = (name.lid << 2 | code(how), name.secret as u64);
    }

    pub(super) fn get(&self, name: LeaseName) -> Option<Ended> {
        let (w, secret) = self.words[name.lid as usize % MEMORY];
        if w >> 2 != name.lid || secret != name.secret as u64 {
            return None;
        }
        match w & 3 {
            1 => Some(Ended::Expired),
            2 => Some(Ended::Reported),
            3 => Some(Ended::Released),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(lid: u64) -> LeaseName {
        LeaseName {
            lid,
            secret: u128::from(lid) * 0x9e37_79b9_7f4a_7c15,
        }
    }

    #[test]
    fn remembers_the_last_leases_given() {
        let mut e = EndedLeases::default();
        assert_eq!(e.get(n(1)), None);
        e.remember(n(1), Ended::Released);
        e.remember(n(2), Ended::Reported);
        e.remember(n(3), Ended::Expired);
        assert_eq!(e.get(n(1)), Some(Ended::Released));
        assert_eq!(e.get(n(2)), Some(Ended::Reported));
        assert_eq!(e.get(n(3)), Some(Ended::Expired));
        assert_eq!(e.get(n(4)), None, "never ended");
        // A lease given MEMORY leases later takes the slot: the older one is forgotten,
        // and neither is mistaken for the other.
        let later = 1 + MEMORY as u64;
        assert_eq!(e.get(n(later)), None);
        e.remember(n(later), Ended::Reported);
        assert_eq!(e.get(n(later)), Some(Ended::Reported));
        assert_eq!(e.get(n(1)), None);
        assert_eq!(e.get(n(2)), Some(Ended::Reported));
    }

    #[test]
    fn a_guessed_name_learns_nothing() {
        let mut e = EndedLeases::default();
        e.remember(n(5), Ended::Reported);
        let guess = LeaseName {
            lid: 5,
            secret: n(5).secret ^ 1,
        };
        assert_eq!(e.get(guess), None);
    }
}
