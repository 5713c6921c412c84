//! The destination a client names, checked the same way on every front (CONNECT,
//! absolute-form, SOCKS5) before anything is leased: a host name, an IPv4 or an IPv6
//! address, and a port 1–65535 (docs/gateway.md, "Destinations"). The rule itself is the
//! pool's (`Place`), so the gateway, the socket and the pairs agree on every name.

use hyper::Uri;

use crate::dial::Dest;
use crate::pool::destinations::{place_and_port, DestinationError, Place};

/// A destination that passed the check: where to dial, and the place leases are for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target {
    pub(super) dest: Dest,
    pub(super) place: Place,
}

/// Why a named destination was refused (HTTP 400, SOCKS5 reply `0x01`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum BadTarget {
    /// Not a host name or address, or not a port.
    #[error(transparent)]
    Name(#[from] DestinationError),
    /// A CONNECT target without its port.
    #[error("CONNECT needs host:port (a port 1-65535)")]
    NoPort,
    /// A request target without a host.
    #[error("the URL has no host")]
    NoHost,
}

impl Target {
    /// The target of a CONNECT request (`host:port`, port required).
    pub(super) fn connect(uri: &Uri) -> Result<Target, BadTarget> {
        let authority = uri.authority().ok_or(BadTarget::NoHost)?;
        Target::named(authority.as_str(), None)
    }

    /// The target of an absolute-form request: its authority without userinfo, port 80
    /// when none is given.
    pub(super) fn url(uri: &Uri) -> Result<Target, BadTarget> {
        let authority = uri.authority().ok_or(BadTarget::NoHost)?.as_str();
        let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
        if authority.is_empty() {
            return Err(BadTarget::NoHost);
        }
        Target::named(authority, Some(80))
    }

    /// `host[:port]` checked once (at `default` when it names no port).
    fn named(authority: &str, default: Option<u16>) -> Result<Target, BadTarget> {
        let (place, port) = place_and_port(authority, default)?.ok_or(BadTarget::NoPort)?;
        Ok(Target {
            dest: Dest::new(&place.host, port),
            place,
        })
    }

    /// The authority a request inside an intercepted connection names (`Host`, or
    /// HTTP/2's `:authority`), at `port` when it names none.
    pub(super) fn inside(authority: &str, port: u16) -> Result<Target, BadTarget> {
        Target::named(authority, Some(port))
    }

    /// A SOCKS5 request's address and port (a domain as sent, or an address).
    pub(super) fn socks(host: &str, port: u16) -> Result<Target, BadTarget> {
        Target::at(host, port)
    }

    fn at(host: &str, port: u16) -> Result<Target, BadTarget> {
        let place = Place::at(host, port)?;
        Ok(Target {
            dest: Dest::new(&place.host, port),
            place,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(s: &str) -> Uri {
        s.parse().unwrap()
    }

    #[test]
    fn connect_targets() {
        let ok = [
            ("example.com:443", "example.com", 443),
            ("Example.COM:8443", "example.com", 8443),
            ("[::1]:8443", "::1", 8443),
            ("127.0.0.1:1", "127.0.0.1", 1),
        ];
        for (given, host, port) in ok {
            let t = Target::connect(&uri(given)).unwrap();
            assert_eq!((t.dest.host.as_str(), t.dest.port), (host, port), "{given}");
        }
        for bad in [
            "127.0.0.1",
            "127.0.0.1:",
            "127.0.0.1:0",
            "127.0.0.1:65536",
            "127.0.0.1:99999",
            "example.com:https",
            "user@example.com:443",
        ] {
            // Some of these hyper does not even parse: refused either way.
            if let Ok(u) = bad.parse::<Uri>() {
                assert!(Target::connect(&u).is_err(), "{bad}");
            }
        }
        assert_eq!(
            Target::connect(&uri("127.0.0.1")),
            Err(BadTarget::NoPort),
            "no default port for CONNECT"
        );
    }

    #[test]
    fn url_targets() {
        let t = Target::url(&uri("http://Shop.Example/x")).unwrap();
        assert_eq!((t.dest.host.as_str(), t.dest.port), ("shop.example", 80));
        assert_eq!(t.place.target, "shop.example:80");
        let t = Target::url(&uri("http://u:pw@127.0.0.1:8080/")).unwrap();
        assert_eq!((t.dest.host.as_str(), t.dest.port), ("127.0.0.1", 8080));
        for bad in [
            "http://127.0.0.1:99999/",
            "http://127.0.0.1:0/",
            "/relative",
        ] {
            assert!(Target::url(&uri(bad)).is_err(), "{bad}");
        }
    }

    /// Six spellings of one address are one destination on every front, and the
    /// upstream is asked for that one spelling.
    #[test]
    fn every_spelling_of_an_address_is_one_target() {
        let spellings = [
            "127.1",
            "2130706433",
            "0x7f.0.0.1",
            "0177.0.0.1",
            "127.000.000.001",
            "[::ffff:7f00:1]",
        ];
        for s in spellings {
            let c = Target::connect(&uri(&format!("{s}:8443"))).unwrap();
            let u = Target::url(&uri(&format!("http://{s}:8443/x"))).unwrap();
            let bare = s.trim_start_matches('[').trim_end_matches(']');
            let k = Target::socks(bare, 8443).unwrap();
            for t in [c, u, k] {
                assert_eq!(t.place.target, "127.0.0.1:8443", "{s}");
                assert_eq!(t.place.host, "127.0.0.1", "{s}");
                assert_eq!(t.dest.host, "127.0.0.1", "{s}: dialed by its one spelling");
            }
        }
        for bad in ["1.2.3.256:80", "127.0.0.1.5:80"] {
            assert!(Target::connect(&uri(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn socks_names() {
        assert!(Target::socks("localhost", 80).is_ok());
        assert!(Target::socks("::1", 80).is_ok());
        for (bad, port) in [
            ("127.0.0.1\r\nx-injected:1\r\nx-b", 18081),
            ("a\0b", 80),
            ("\u{1b}[31m.example", 80),
            ("host:80", 80),
            ("localhost", 0),
        ] {
            assert!(Target::socks(bad, port).is_err(), "{bad:?}");
        }
    }
}
