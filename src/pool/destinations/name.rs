//! Destination names as pairs and targets are keyed (docs/destinations.md, "Destination
//! names"; docs/blame.md, "Targets and hosts"): the host, lower-cased, for bans; the
//! target, `host:port`, for reachability.

use std::net::Ipv6Addr;

use crate::ip_literal::{self, V4};

use super::DestinationError;

/// Where a use went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The host, as ban pairs are keyed: lower-cased, without port, brackets or a trailing
    /// dot; an IPv6 address in its canonical form.
    pub host: String,
    /// The target, as reachability is judged: `host:port` (`[v6]:port`), or the host
    /// alone when no port was given.
    pub target: String,
}

impl Place {
    /// The place of `host` — a host name, an IPv4 or an IPv6 address (brackets optional),
    /// nothing after it — at `port` (1–65535). The one rule for a destination a client
    /// names, on every front (docs/gateway.md, "Destinations").
    pub fn at(host: &str, port: u16) -> Result<Place, DestinationError> {
        let (host, attached) = split(host)?;
        if attached.is_some() {
            return Err(DestinationError::Invalid {
                value: host,
                why: "a host, not host:port",
            });
        }
        if port == 0 {
            return Err(DestinationError::Invalid {
                value: host,
                why: "port 0 is no port",
            });
        }
        let target = target_key(&host, Some(port));
        Ok(Place { host, target })
    }
}

/// A destination given as `host` or `host:port`, checked once: its place at the port it
/// names, or at `default` when it names none; `None` when it names none and there is no
/// default (a CONNECT target must have one).
pub fn place_and_port(
    dest: &str,
    default: Option<u16>,
) -> Result<Option<(Place, u16)>, DestinationError> {
    let (host, port) = split(dest)?;
    let Some(port) = port.or(default) else {
        return Ok(None);
    };
    let target = target_key(&host, Some(port));
    Ok(Some((Place { host, target }, port)))
}

/// A destination given as `host` or `host:port` (IPv6 in brackets when a port follows).
pub fn place(dest: &str) -> Result<Place, DestinationError> {
    let (host, port) = split(dest)?;
    Ok(Place {
        target: target_key(&host, port),
        host,
    })
}

/// The host a request goes to, as ban pairs are keyed (any `:port` is dropped).
pub fn normalize(dest: &str) -> Result<String, DestinationError> {
    split(dest).map(|(host, _)| host)
}

/// A stored or typed pair key, host or target, in its canonical form: what `place`
/// gives as `target` (a host keeps no port; a target keeps its own).
pub fn normalize_key(key: &str) -> Result<String, DestinationError> {
    place(key).map(|p| p.target)
}

fn target_key(host: &str, port: Option<u16>) -> String {
    match port {
        None => host.to_string(),
        Some(p) if host.contains(':') => format!("[{host}]:{p}"),
        Some(p) => format!("{host}:{p}"),
    }
}

fn split(dest: &str) -> Result<(String, Option<u16>), DestinationError> {
    let s = dest.trim();
    if s.is_empty() {
        return Err(DestinationError::Empty);
    }
    let bad = |why| DestinationError::Invalid {
        value: dest.to_string(),
        why,
    };
    if s.contains("://") || s.contains('/') {
        return Err(bad("give the host, not a URL"));
    }
    if let Some(rest) = s.strip_prefix('[') {
        let (inner, after) = rest.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
        let port = port(after, &bad)?;
        let ip: Ipv6Addr = inner.parse().map_err(|_| bad("not an IPv6 address"))?;
        return Ok((ip_literal::ipv6_key(ip), port));
    }
    if s.matches(':').count() > 1 {
        // A bare IPv6 address (no port can be told apart without brackets).
        let ip: Ipv6Addr = s.parse().map_err(|_| bad("not an IPv6 address"))?;
        return Ok((ip_literal::ipv6_key(ip), None));
    }
    let (host, port) = match s.split_once(':') {
        Some((h, p)) => (h, Some(port_number(p, &bad)?)),
        None => (s, None),
    };
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if host.is_empty() {
        return Err(bad("no host before the port"));
    }
    if host.len() > 253 {
        return Err(bad("longer than 253 characters"));
    }
    for label in host.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(bad("empty or over-long label"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(bad("only letters, digits, '-', '_' and '.' are allowed"));
        }
    }
    // One spelling of an IPv4 address, so that no other spelling evades its key.
    match ip_literal::ipv4(&host) {
        V4::Name | V4::Canonical => Ok((host, port)),
        V4::Respelled(ip) => Ok((ip.to_string(), port)),
        V4::Bad(why) => Err(bad(why)),
    }
}

fn port(
    after: &str,
    bad: &impl Fn(&'static str) -> DestinationError,
) -> Result<Option<u16>, DestinationError> {
    match after.strip_prefix(':') {
        None if after.is_empty() => Ok(None),
        Some(p) => port_number(p, bad).map(Some),
        None => Err(bad("what follows the host is not a port")),
    }
}

/// The digits after a host's `:`.
fn port_number(
    p: &str,
    bad: &impl Fn(&'static str) -> DestinationError,
) -> Result<u16, DestinationError> {
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("what follows the host is not a port"));
    }
    match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(bad("port out of range")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_and_its_port_follow_the_one_rule() {
        for (dest, default, want) in [
            (
                "Example.COM:8443",
                None,
                Some(("example.com", "example.com:8443", 8443)),
            ),
            ("example.com", None, None),
            (
                "example.com",
                Some(80),
                Some(("example.com", "example.com:80", 80)),
            ),
            (
                "example.com:81",
                Some(80),
                Some(("example.com", "example.com:81", 81)),
            ),
            ("[::1]:8443", None, Some(("::1", "[::1]:8443", 8443))),
        ] {
            let got = place_and_port(dest, default).unwrap();
            let got = got
                .as_ref()
                .map(|(p, n)| (p.host.as_str(), p.target.as_str(), *n));
            assert_eq!(got, want, "{dest}");
            // The same place as the rule gives with the port spelled out.
            if let Some((_, target, port)) = want {
                let host = place(dest).unwrap().host;
                assert_eq!(Place::at(&host, port).unwrap().target, target, "{dest}");
            }
        }
        for bad in ["", "host:0", "host:x", "http://host", "a..b:80"] {
            assert!(place_and_port(bad, Some(80)).is_err(), "{bad}");
        }
    }

    #[test]
    fn places_keep_the_host_for_bans_and_the_port_for_the_target() {
        let table = [
            ("Shop.Example", "shop.example", "shop.example"),
            ("shop.example.:443", "shop.example", "shop.example:443"),
            (" shop.example:80 ", "shop.example", "shop.example:80"),
            ("[::1]:8443", "::1", "[::1]:8443"),
            ("[0:0::1]", "::1", "::1"),
            ("::1", "::1", "::1"),
            ("10.0.0.5:1080", "10.0.0.5", "10.0.0.5:1080"),
        ];
        for (given, host, target) in table {
            let p = place(given).unwrap();
            assert_eq!(
                (p.host.as_str(), p.target.as_str()),
                (host, target),
                "{given}"
            );
            assert_eq!(normalize(given).unwrap(), host);
            assert_eq!(normalize_key(given).unwrap(), target);
            // A key is its own canonical form.
            assert_eq!(normalize_key(target).unwrap(), target);
        }
        assert_eq!(
            Place::at("Shop.Example", 443).unwrap().target,
            "shop.example:443"
        );
        assert_eq!(Place::at("::1", 443).unwrap().target, "[::1]:443");
        assert_eq!(Place::at("[::1]", 443).unwrap().host, "::1");
        let (p, port) = place_and_port("[::1]:8443", None).unwrap().unwrap();
        assert_eq!(
            (p.host.as_str(), p.target.as_str(), port),
            ("::1", "[::1]:8443", 8443)
        );
        assert!(place_and_port("Shop.Example", None).unwrap().is_none());
        let (p, port) = place_and_port("Shop.Example", Some(443)).unwrap().unwrap();
        assert_eq!((p.host.as_str(), port), ("shop.example", 443));
    }

    #[test]
    fn a_place_at_a_port_takes_a_bare_host_and_a_real_port() {
        for (host, port) in [
            ("shop.example:80", 80),
            ("127.0.0.1\r\nx-injected:1\r\nx-b", 443),
            ("a\0b", 443),
            ("\u{1b}[31m.example", 443),
            ("a b", 443),
            ("", 443),
            ("shop.example", 0),
            ("[::1]:80", 80),
        ] {
            assert!(Place::at(host, port).is_err(), "{host:?} {port}");
        }
    }

    /// Every spelling of one IPv4 address is one key (and is dialed as that key), on every
    /// front: pacing, bans and targets cannot be told apart by spelling.
    #[test]
    fn ip_literals_have_one_spelling() {
        for (given, host) in [
            ("127.0.0.1", "127.0.0.1"),
            ("127.1", "127.0.0.1"),
            ("127.0.1", "127.0.0.1"),
            ("2130706433", "127.0.0.1"),
            ("0x7f.0.0.1", "127.0.0.1"),
            ("0X7F.0.0.1", "127.0.0.1"),
            ("0x7f000001", "127.0.0.1"),
            ("0177.0.0.1", "127.0.0.1"),
            ("127.000.000.001", "127.0.0.1"),
            ("127.0.0.1.", "127.0.0.1"),
            ("[::ffff:7f00:1]", "127.0.0.1"),
            ("::ffff:127.0.0.1", "127.0.0.1"),
            ("0", "0.0.0.0"),
            ("0x", "0.0.0.0"),
            ("255.255.255.255", "255.255.255.255"),
            ("4294967295", "255.255.255.255"),
            ("10.0.0.5", "10.0.0.5"),
            ("10.200.7.80", "10.200.7.80"),
            // Names whose last label is not a number stay names.
            ("1.2.3.example", "1.2.3.example"),
            ("0x7f.example", "0x7f.example"),
            ("shop.0x1g", "shop.0x1g"),
            // IPv6 that maps no IPv4 address stays IPv6.
            ("[::127.0.0.1]", "::7f00:1"),
            ("[0:0::1]", "::1"),
        ] {
            assert_eq!(normalize(given).as_deref(), Ok(host), "{given}");
            let p = place(&format!("{given}:8080")).ok();
            if !given.contains(':') {
                let want = format!("{host}:8080");
                assert_eq!(p.map(|p| p.target), Some(want), "{given}:8080");
            }
        }
        assert_eq!(Place::at("0x7f.1", 443).unwrap().target, "127.0.0.1:443");
        assert_eq!(
            Place::at("::ffff:7f00:1", 443).unwrap().target,
            "127.0.0.1:443"
        );
        assert_eq!(
            place_and_port("[::ffff:7f00:1]:80", None)
                .unwrap()
                .unwrap()
                .0
                .target,
            "127.0.0.1:80"
        );
        for bad in [
            "1.2.3.256",
            "1.2.3.4.5",
            "256.0.0.1",
            "4294967296",
            "09.0.0.1",
            "0x1.0x100.0.0",
            "1.2.65536",
            "example.123",
            "shop.0x10",
            "99999999999999999999999",
        ] {
            let err = normalize(bad).unwrap_err().to_string();
            assert!(err.contains(bad), "{bad}: {err}");
        }
    }

    #[test]
    fn bad_names_and_ports_are_refused() {
        for bad in [
            "",
            "http://shop.example/",
            "shop.example/x",
            "shop.example:",
            "shop.example:0",
            "shop.example:65536",
            "shop.example:99999",
            "shop.example:https",
            "[::1",
            "[zz::1]:80",
            "a b",
            "shop\r\nx-injected: 1",
            "..",
            ":443",
        ] {
            assert!(place(bad).is_err(), "{bad:?}");
        }
    }
}
