//! The name a leaf certificate is minted for: a DNS name (from SNI or the CONNECT host)
//! or an IP literal. Anything else (an over-long name, characters no DNS name has, a name
//! that looks like an address but is none) is refused before it reaches the cache, so a
//! hostile client cannot make the gateway sign it.

use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use super::LeafError;

/// A checked, canonical leaf name: lower case, no trailing dot, IPv6 without brackets.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LeafName {
    /// A host name: a DNS SAN.
    Dns(String),
    /// An address: an IP SAN.
    Ip(IpAddr),
}

/// The longest DNS name (RFC 1035), without the trailing dot.
const MAX_NAME: usize = 253;

impl LeafName {
    /// Check `raw` (a CONNECT host, an SNI name).
    pub fn parse(raw: &str) -> Result<LeafName, LeafError> {
        let bad = |why: &'static str| LeafError::BadName {
            name: shown(raw),
            why,
        };
        let s = raw.strip_prefix('[').and_then(|r| r.strip_suffix(']'));
        if let Some(inner) = s {
            let ip: Ipv6Addr = inner.parse().map_err(|_| bad("not an IPv6 address"))?;
            return Ok(LeafName::Ip(IpAddr::V6(ip)));
        }
        if let Ok(ip) = raw.parse::<IpAddr>() {
            return Ok(LeafName::Ip(ip));
        }
        let name = raw.strip_suffix('.').unwrap_or(raw);
        if name.is_empty() {
            return Err(bad("empty"));
        }
        if name.len() > MAX_NAME {
            return Err(bad("longer than 253 characters"));
        }
        let mut last = "";
        for label in name.split('.') {
            if label.is_empty() || label.len() > 63 {
                return Err(bad("an empty label or one over 63 characters"));
            }
            let ok = label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !ok {
                return Err(bad("only letters, digits, '-', '_' and '.' are allowed"));
            }
            if label.starts_with('-') || label.ends_with('-') {
                return Err(bad("a label starts or ends with '-'"));
            }
            last = label;
        }
        // `1.2.3`, `010.1.1.1`, `0x7f.1`: no address, and no name either (no top-level
        // domain is numeric); a client would match it as neither.
        if last.bytes().all(|b| b.is_ascii_digit()) || name.starts_with("0x") && !name.contains('.')
        {
            return Err(bad("looks like an IP address but is not one"));
        }
        Ok(LeafName::Dns(name.to_ascii_lowercase()))
    }

    /// The cache key and the name shown: the host name, or the address as text.
    pub fn key(&self) -> Cow<'_, str> {
        match self {
            LeafName::Dns(n) => Cow::Borrowed(n),
            LeafName::Ip(ip) => Cow::Owned(ip.to_string()),
        }
    }
}

impl fmt::Display for LeafName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeafName::Dns(n) => f.write_str(n),
            LeafName::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// A refused name as an error shows it: at most 80 characters, control characters
/// escaped (it came from a client).
fn shown(raw: &str) -> String {
    let mut s: String = raw
        .chars()
        .take(80)
        .collect::<String>()
        .escape_debug()
        .to_string();
    if raw.chars().count() > 80 {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_table() {
        let ok = [
            ("Shop.Example", LeafName::Dns("shop.example".into())),
            ("shop.example.", LeafName::Dns("shop.example".into())),
            (
                "_dmarc.x-y.example",
                LeafName::Dns("_dmarc.x-y.example".into()),
            ),
            ("localhost", LeafName::Dns("localhost".into())),
            ("127.0.0.1", LeafName::Ip("127.0.0.1".parse().unwrap())),
            ("::1", LeafName::Ip("::1".parse().unwrap())),
            (
                "[2001:DB8::1]",
                LeafName::Ip("2001:db8::1".parse().unwrap()),
            ),
            ("a1.b2.c3", LeafName::Dns("a1.b2.c3".into())),
        ];
        for (raw, want) in ok {
            assert_eq!(LeafName::parse(raw).unwrap(), want, "{raw}");
        }
        assert_eq!(LeafName::parse("[::1]").unwrap().key(), "::1");
        let long_label = format!("{}.example", "a".repeat(64));
        let long_name = format!("{}example", "abcdefghi.".repeat(25));
        let bad = [
            "",
            ".",
            "a..b",
            "shop example",
            "shop.example/x",
            "shop.example:443",
            "-a.example",
            "a-.example",
            "é.example",
            "a\0b",
            "1.2.3",
            "010.1.1.256",
            "0x7f000001",
            "[::1",
            "[not-v6]",
            "*.example",
            long_label.as_str(),
            long_name.as_str(),
        ];
        for raw in bad {
            let e = LeafName::parse(raw).unwrap_err();
            assert!(matches!(e, LeafError::BadName { .. }), "{raw:?}: {e}");
        }
    }

    #[test]
    fn a_refused_name_is_shown_short_and_escaped() {
        let e = LeafName::parse(&format!("{}\n", "x".repeat(300))).unwrap_err();
        let text = e.to_string();
        assert!(text.len() < 200 && !text.contains('\n'), "{text}");
    }
}
