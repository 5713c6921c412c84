//! Lease names: the lease's number in this process and 128 random bits.
//!
//! The number finds a lease without a hash of the name; the random part makes a name
//! unguessable, so that a client holding one lease (or none) cannot report, release or
//! end another client's: a lease-role client that could guess names could cool every
//! endpoint a gateway tunnel or another scraper holds. The bits come from `rand`'s thread
//! generator (ChaCha, seeded and reseeded from the operating system), a few nanoseconds a
//! lease.

use std::fmt::Write as _;

/// Hex digits of the random part: 128 bits.
const SECRET_DIGITS: usize = 32;

/// A lease's number and its random part, as held beside the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LeaseName {
    pub(super) lid: u64,
    pub(super) secret: u128,
}

impl LeaseName {
    /// The name of lease `lid`, with fresh random bits.
    pub(super) fn draw(lid: u64) -> LeaseName {
        LeaseName {
            lid,
            secret: rand::random(),
        }
    }

    /// `<number in hex>-<32 hex digits>`.
    pub(super) fn render(&self) -> String {
        let mut s = String::with_capacity(17 + SECRET_DIGITS);
        let _ = write!(s, "{:x}-{:032x}", self.lid, self.secret);
        s
    }

    /// The parts of a name as [`LeaseName::render`] writes them; anything else is no
    /// lease of this process.
    pub(super) fn parse(name: &str) -> Option<LeaseName> {
        let (n, secret) = name.split_once('-')?;
        if n.is_empty() || n.len() > 16 || secret.len() != SECRET_DIGITS {
            return None;
        }
        let hex = |s: &str| {
            s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !hex(n) || !hex(secret) {
            return None;
        }
        Some(LeaseName {
            lid: u64::from_str_radix(n, 16).ok()?,
            secret: u128::from_str_radix(secret, 16).ok()?,
        })
    }

    /// Whether `other` names this lease: compared without an early exit, so that the
    /// time an answer takes says nothing of how much of a guess was right.
    pub(super) fn matches(&self, other: &LeaseName) -> bool {
        let diff = (self.lid ^ other.lid) as u128 | (self.secret ^ other.secret);
        std::hint::black_box(diff) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_round_trips() {
        let n = LeaseName::draw(0x2a);
        let s = n.render();
        assert!(s.starts_with("2a-"), "{s}");
        assert_eq!(s.len(), 3 + SECRET_DIGITS);
        assert_eq!(LeaseName::parse(&s), Some(n));
        let zero = LeaseName { lid: 1, secret: 7 };
        assert_eq!(zero.render(), format!("1-{}7", "0".repeat(31)));
        assert_eq!(LeaseName::parse(&zero.render()), Some(zero));
    }

    #[test]
    fn names_that_are_not_leases() {
        let cases = [
            "",
            "-",
            "1",
            "1-",
            "-0123456789abcdef0123456789abcdef",
            "1-0123456789abcdef0123456789abcde",
            "1-0123456789abcdef0123456789abcdef0",
            "1-0123456789ABCDEF0123456789abcdef",
            "+1-0123456789abcdef0123456789abcdef",
            "1-+123456789abcdef0123456789abcdef",
            "11111111111111111-0123456789abcdef0123456789abcdef",
            "1-0123456789abcdef-123456789abcdef",
            "deadbeef-1",
        ];
        for c in cases {
            assert_eq!(LeaseName::parse(c), None, "{c:?}");
        }
    }

    #[test]
    fn draws_differ_in_their_random_part() {
        let a = LeaseName::draw(1);
        let b = LeaseName::draw(1);
        assert_ne!(a.secret, b.secret);
        assert!(!a.matches(&b));
        assert!(a.matches(&a));
        // At least 122 of the 128 bits vary over a few draws (none is fixed).
        let mut ones = 0u128;
        let mut zeros = 0u128;
        for _ in 0..64 {
            let s = LeaseName::draw(1).secret;
            ones |= s;
            zeros |= !s;
        }
        assert_eq!((ones & zeros).count_ones(), 128);
    }
}
