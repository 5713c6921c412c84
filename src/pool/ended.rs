//! How the leases that ended lately ended, so that a second report or release says so.
//!
//! A ring indexed by lease id: lease ids are handed out in order, so the ring remembers
//! the end of each of the last `MEMORY` leases given, and an id's word is found without a
//! hash. Leases mostly end in about the order they were given, so consecutive ends write
//! neighbouring words, where a hash map scattered them over 2 MiB and each insert (and
//! the removal of the oldest) missed the caches on the lease path.

use super::Ended;

/// Leases whose end is remembered: 512 KiB of words.
const MEMORY: usize = 65_536;

pub(super) struct EndedLeases {
    /// Per slot: `lid << 2 | how` of the last lease of that slot that ended (0: none;
    /// lease ids start at 1).
    words: Box<[u64]>,
}

impl Default for EndedLeases {
    fn default() -> Self {
        EndedLeases {
            // Zeroed memory is mapped lazily: an idle daemon pays for the pages it uses.
            words: vec![0; MEMORY].into(),
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
    pub(super) fn remember(&mut self, lid: u64, how: Ended) {
        self.words[lid as usize % MEMORY] = lid << 2 | code(how);
    }

    pub(super) fn get(&self, lid: u64) -> Option<Ended> {
        let w = self.words[lid as usize % MEMORY];
        if w >> 2 != lid {
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

    #[test]
    fn remembers_the_last_leases_given() {
        let mut e = EndedLeases::default();
        assert_eq!(e.get(1), None);
        e.remember(1, Ended::Released);
        e.remember(2, Ended::Reported);
        e.remember(3, Ended::Expired);
        assert_eq!(e.get(1), Some(Ended::Released));
        assert_eq!(e.get(2), Some(Ended::Reported));
        assert_eq!(e.get(3), Some(Ended::Expired));
        assert_eq!(e.get(4), None, "never ended");
        // A lease given MEMORY leases later takes the slot: the older one is forgotten,
        // and neither is mistaken for the other.
        let later = 1 + MEMORY as u64;
        assert_eq!(e.get(later), None);
        e.remember(later, Ended::Reported);
        assert_eq!(e.get(later), Some(Ended::Reported));
        assert_eq!(e.get(1), None);
        assert_eq!(e.get(2), Some(Ended::Reported));
    }
}
