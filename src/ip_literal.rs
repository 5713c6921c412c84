//! IP literals in host names, spelt one way (docs/destinations.md, "Destination names"):
//! `127.1`, `2130706433`, `0x7f.0.0.1`, `0177.0.0.1`, `127.000.000.001` and
//! `[::ffff:7f00:1]` are one address, so pacing, bans and targets key it as `127.0.0.1`
//! whichever way a client spells it. The IPv4 rule is the one browsers and `inet_aton`
//! share (the WHATWG URL host parser); nothing here allocates for a host that is already
//! in its one spelling.

use std::net::{Ipv4Addr, Ipv6Addr};

/// What a host name (lower case, its labels already checked) is as an IPv4 literal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum V4 {
    /// Not an address: a name (its last label is not a number).
    Name,
    /// An address, written as its one spelling already.
    Canonical,
    /// An address written another way.
    Respelled(Ipv4Addr),
    /// A number that is no address (`1.2.3.256`, `1.2.3.4.5`, `09.1.1.1`): refuse it.
    Bad(&'static str),
}

/// Whether `host` is an IPv4 literal, and how it is spelt: a name whose last label is a
/// number is an address, in one to four parts, each decimal, octal (a leading `0`) or
/// hex (`0x`), the last part filling the bytes left.
pub fn ipv4(host: &str) -> V4 {
    let last = host.rsplit('.').next().unwrap_or(host);
    if last.is_empty() || !(last.bytes().all(|b| b.is_ascii_digit()) || number(last).is_some()) {
        return V4::Name;
    }
    match parts(host) {
        Ok(_) if is_dotted_quad(host) => V4::Canonical,
        Ok(ip) => V4::Respelled(ip),
        Err(why) => V4::Bad(why),
    }
}

/// An IPv6 address as keyed: its canonical text (RFC 5952), or the IPv4 address it maps
/// (`::ffff:a.b.c.d` is `a.b.c.d` on the wire).
pub fn ipv6_key(ip: Ipv6Addr) -> String {
    match ip.to_ipv4_mapped() {
        Some(v4) => v4.to_string(),
        None => ip.to_string(),
    }
}

fn parts(host: &str) -> Result<Ipv4Addr, &'static str> {
    const WHY: &str = "a number that is not an IPv4 address";
    let mut parts = [0u64; 4];
    let mut n = 0;
    for label in host.split('.') {
        if n == 4 {
            return Err("an IPv4 address has at most four parts");
        }
        parts[n] = number(label).ok_or(WHY)?;
        n += 1;
    }
    let (init, last) = (&parts[..n - 1], parts[n - 1]);
    if init.iter().any(|&p| p > 255) || last >= 1u64 << (8 * (5 - n)) {
        return Err(WHY);
    }
    let value = init
        .iter()
        .enumerate()
        .fold(last, |acc, (i, &p)| acc | p << (8 * (3 - i)));
    Ok(Ipv4Addr::from(value as u32))
}

/// One part of an IPv4 literal: decimal, octal after a leading `0`, hex after `0x`.
fn number(part: &str) -> Option<u64> {
    let (digits, radix) = match part.strip_prefix("0x") {
        Some(h) => (h, 16),
        None if part.len() > 1 && part.starts_with('0') => (&part[1..], 8),
        None => (part, 10),
    };
    if digits.is_empty() {
        // `0x` alone is zero, as browsers read it.
        return (radix == 16).then_some(0);
    }
    // Longer than any part of an address can be: not one (and no overflow below).
    if digits.len() > 16 {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// Already the one spelling: four decimal parts 0–255 without leading zeros.
fn is_dotted_quad(host: &str) -> bool {
    let mut n = 0;
    for part in host.split('.') {
        n += 1;
        let b = part.as_bytes();
        let ok = match b.len() {
            1 => b[0].is_ascii_digit(),
            2 | 3 => {
                b[0] != b'0'
                    && b.iter().all(u8::is_ascii_digit)
                    && part.parse::<u16>().is_ok_and(|v| v <= 255)
            }
            _ => false,
        };
        if !ok || n > 4 {
            return false;
        }
    }
    n == 4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_literals_by_spelling() {
        let lo = Ipv4Addr::new(127, 0, 0, 1);
        let table = [
            ("127.0.0.1", V4::Canonical),
            ("0.0.0.0", V4::Canonical),
            ("10.200.7.80", V4::Canonical),
            ("127.1", V4::Respelled(lo)),
            ("127.0.1", V4::Respelled(lo)),
            ("2130706433", V4::Respelled(lo)),
            ("0x7f.0.0.1", V4::Respelled(lo)),
            ("0x7f000001", V4::Respelled(lo)),
            ("0177.0.0.1", V4::Respelled(lo)),
            ("127.000.000.001", V4::Respelled(lo)),
            ("0x", V4::Respelled(Ipv4Addr::UNSPECIFIED)),
            ("shop.example", V4::Name),
            ("1.2.3.example", V4::Name),
            ("shop.0x1g", V4::Name),
            ("1.2.3.256", V4::Bad("a number that is not an IPv4 address")),
            (
                "1.2.3.4.5",
                V4::Bad("an IPv4 address has at most four parts"),
            ),
            ("09.0.0.1", V4::Bad("a number that is not an IPv4 address")),
            (
                "example.123",
                V4::Bad("a number that is not an IPv4 address"),
            ),
            (
                "4294967296",
                V4::Bad("a number that is not an IPv4 address"),
            ),
        ];
        for (host, want) in table {
            assert_eq!(ipv4(host), want, "{host}");
        }
        let mapped: Ipv6Addr = "::ffff:7f00:1".parse().unwrap();
        assert_eq!(ipv6_key(mapped), "127.0.0.1");
        assert_eq!(ipv6_key("::1".parse().unwrap()), "::1");
    }
}
