//! Lease names: the lease's number in this process and 128 random bits.
//!
//! The number finds a lease without a hash of the name; the random part makes a name
//! unguessable, so that a client holding one lease (or none) cannot report, release or
//! end another client's: a lease-role client that could guess names could cool every
//! endpoint a gateway tunnel or another scraper holds. The bits come from `rand`'s thread
//! generator (ChaCha, seeded and reseeded from the operating system), a few nanoseconds a
//! lease.

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

    /// `<number in hex>-<32 hex digits>`. Written digit by digit into a buffer: a name
    /// is made for every lease, and the formatting machinery cost as much as the rest of
    /// a lease's bookkeeping.
    pub(super) fn render(&self) -> String {
        let mut buf = [0u8; 16 + 1 + SECRET_DIGITS];
        let n = (16 - self.lid.leading_zeros() as usize / 4).max(1);
        write_hex(&mut buf[..n], self.lid.into());
        buf[n] = b'-';
        let end = n + 1 + SECRET_DIGITS;
        write_hex(&mut buf[n + 1..end], self.secret);
        // Hex digits and a dash: always UTF-8.
        String::from_utf8(buf[..end].to_vec()).unwrap_or_default()
    }

    /// The parts of a name as [`LeaseName::render`] writes them; anything else is no
    /// lease of this process. Every lease's release and report parse one.
    pub(super) fn parse(name: &str) -> Option<LeaseName> {
        let (n, secret) = name.split_once('-')?;
        if n.is_empty() || n.len() > 16 || secret.len() != SECRET_DIGITS {
            return None;
        }
        let (high, low) = secret.as_bytes().split_at(16);
        Some(LeaseName {
            lid: read_hex(n.as_bytes())?,
            secret: u128::from(read_hex(high)?) << 64 | u128::from(read_hex(low)?),
        })
    }

    /// Whether `other` names this lease: compared without an early exit, so that the
    /// time an answer takes says nothing of how much of a guess was right.
    pub(super) fn matches(&self, other: &LeaseName) -> bool {
        let diff = (self.lid ^ other.lid) as u128 | (self.secret ^ other.secret);
        std::hint::black_box(diff) == 0
    }
}

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// `out` filled with the low hex digits of `v`, most significant first, in lower case.
fn write_hex(out: &mut [u8], mut v: u128) {
    for b in out.iter_mut().rev() {
        *b = DIGITS[(v & 0xf) as usize];
        v >>= 4;
    }
}

/// Each byte's value as a lower-case hex digit; `NOT_HEX` for every other byte (no sign,
/// no space, no upper case).
const NOT_HEX: u8 = 0x80;
const VALUES: [u8; 256] = {
    let mut t = [NOT_HEX; 256];
    let mut i = 0;
    while i < 16 {
        t[DIGITS[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// At most 16 lower-case hex digits, without a branch per digit.
fn read_hex(s: &[u8]) -> Option<u64> {
    debug_assert!(s.len() <= 16);
    let (mut v, mut bad) = (0u64, 0u8);
    for &b in s {
        let d = VALUES[b as usize];
        bad |= d;
        v = v << 4 | u64::from(d & 0xf);
    }
    (bad & NOT_HEX == 0).then_some(v)
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
    fn names_are_written_as_the_formatter_would() {
        let lids = [0, 1, 0xf, 0x10, 0x2a, 0xffff, 1 << 32, u64::MAX];
        let secrets = [0, 7, 1 << 127, u128::MAX, rand::random()];
        for lid in lids {
            for secret in secrets {
                let n = LeaseName { lid, secret };
                assert_eq!(n.render(), format!("{lid:x}-{secret:032x}"));
                assert_eq!(LeaseName::parse(&n.render()), Some(n));
            }
        }
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
            // A two-byte character across the middle of the random part, and in the number.
            "1-0123456789abcde\u{e9}0123456789abcde",
            "\u{e9}-0123456789abcdef0123456789abcdef",
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
