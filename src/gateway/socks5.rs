//! The SOCKS5 front (RFC 1928, username/password RFC 1929): a small parser of our own,
//! pure and property-tested, and the exchange around it.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::debug;

use super::answer::error_outcome;
use super::relay::relay;
use super::routing::{authorize, Denied, Routing};
use super::target::Target;
use super::upstream::UpstreamError;
use super::Shared;
use crate::dial::{Dest, Route};
use crate::health::Reason;
use crate::metrics::{GatewayOutcome, GatewayProtocol};

const NO_AUTH: u8 = 0x00;
const USER_PASS: u8 = 0x02;
const NO_ACCEPTABLE: u8 = 0xFF;

/// Reply codes (RFC 1928 §6).
pub mod reply {
    /// Succeeded.
    pub const OK: u8 = 0x00;
    /// General failure (also: empty pool).
    pub const GENERAL: u8 = 0x01;
    /// Host unreachable.
    pub const HOST_UNREACHABLE: u8 = 0x04;
    /// Connection refused.
    pub const REFUSED: u8 = 0x05;
    /// Command not supported.
    pub const COMMAND: u8 = 0x07;
    /// Address type not supported.
    pub const ADDRESS_TYPE: u8 = 0x08;
}

/// Bytes a client sent that are not SOCKS5.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Wrong version byte.
    #[error("version {0:#04x}, expected 5")]
    Version(u8),
    /// A greeting that offers no method.
    #[error("no authentication method offered")]
    NoMethods,
    /// Username/password sub-negotiation with a wrong version.
    #[error("auth version {0:#04x}, expected 1")]
    AuthVersion(u8),
    /// A command other than CONNECT.
    #[error("command {0:#04x} not supported (only CONNECT)")]
    Command(u8),
    /// An address type other than IPv4, domain, IPv6.
    #[error("address type {0:#04x} not supported")]
    AddressType(u8),
    /// A domain name that is empty or not text.
    #[error("bad domain name")]
    Domain,
}

/// `Ok(None)`: more bytes needed; `Ok(Some((value, used)))`: parsed from the first `used` bytes.
pub type Parsed<T> = Result<Option<(T, usize)>, ParseError>;

/// The methods a client offers.
pub fn parse_greeting(b: &[u8]) -> Parsed<Vec<u8>> {
    let Some(&ver) = b.first() else {
        return Ok(None);
    };
    if ver != 5 {
        return Err(ParseError::Version(ver));
    }
    let Some(&n) = b.get(1) else {
        return Ok(None);
    };
    if n == 0 {
        return Err(ParseError::NoMethods);
    }
    let end = 2 + n as usize;
    if b.len() < end {
        return Ok(None);
    }
    Ok(Some((b[2..end].to_vec(), end)))
}

/// Username and password (bytes, as sent).
pub fn parse_auth(b: &[u8]) -> Parsed<(Vec<u8>, Vec<u8>)> {
    let Some(&ver) = b.first() else {
        return Ok(None);
    };
    if ver != 1 {
        return Err(ParseError::AuthVersion(ver));
    }
    let Some(&ulen) = b.get(1) else {
        return Ok(None);
    };
    let u_end = 2 + ulen as usize;
    let Some(&plen) = b.get(u_end) else {
        return Ok(None);
    };
    let p_end = u_end + 1 + plen as usize;
    if b.len() < p_end {
        return Ok(None);
    }
    Ok(Some((
        (b[2..u_end].to_vec(), b[u_end + 1..p_end].to_vec()),
        p_end,
    )))
}

/// The destination of a CONNECT request.
pub fn parse_request(b: &[u8]) -> Parsed<Dest> {
    if b.len() < 4 {
        if let Some(&v) = b.first() {
            if v != 5 {
                return Err(ParseError::Version(v));
            }
        }
        return Ok(None);
    }
    if b[0] != 5 {
        return Err(ParseError::Version(b[0]));
    }
    let (host, at) = match b[3] {
        1 => {
            if b.len() < 8 {
                return Ok(None);
            }
            (Ipv4Addr::new(b[4], b[5], b[6], b[7]).to_string(), 8)
        }
        3 => {
            let Some(&n) = b.get(4) else {
                return Ok(None);
            };
            let end = 5 + n as usize;
            if b.len() < end {
                return Ok(None);
            }
            let name = std::str::from_utf8(&b[5..end]).map_err(|_| ParseError::Domain)?;
            if name.is_empty() || name.contains(['/', ' ', '@']) {
                return Err(ParseError::Domain);
            }
            (name.to_string(), end)
        }
        4 => {
            if b.len() < 20 {
                return Ok(None);
            }
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[4..20]);
            (Ipv6Addr::from(o).to_string(), 20)
        }
        t => return Err(ParseError::AddressType(t)),
    };
    if b.len() < at + 2 {
        return Ok(None);
    }
    // The command is judged after the whole request is in, so the reply can be sent.
    if b[1] != 1 {
        return Err(ParseError::Command(b[1]));
    }
    let port = u16::from_be_bytes([b[at], b[at + 1]]);
    Ok(Some((Dest::new(&host, port), at + 2)))
}

/// The reply code for a failed attempt (docs/gateway.md, "Retries and reports").
pub(super) fn reply_for(e: &UpstreamError) -> u8 {
    match e {
        UpstreamError::AllFailed { last, .. } => match last.reason {
            Reason::UpstreamUnreachable | Reason::DnsFailed => reply::HOST_UNREACHABLE,
            Reason::ProxyRejected | Reason::ConnectRefused => reply::REFUSED,
            _ => reply::GENERAL,
        },
        UpstreamError::DestinationDown { .. } => reply::HOST_UNREACHABLE,
        _ => reply::GENERAL,
    }
}

fn reply_bytes(code: u8) -> [u8; 10] {
    [5, code, 0, 1, 0, 0, 0, 0, 0, 0]
}

/// Read until `parse` has a value; the rest of the buffer stays in `buf`.
async fn read_parsed<T>(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    parse: fn(&[u8]) -> Parsed<T>,
) -> Result<T, String> {
    loop {
        match parse(buf) {
            Ok(Some((v, used))) => {
                buf.drain(..used);
                return Ok(v);
            }
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        if buf.len() > 1024 {
            return Err("SOCKS5 message too long".into());
        }
        let mut chunk = [0u8; 512];
        let n = s.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("client closed during the SOCKS5 handshake".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Why a SOCKS5 negotiation ended without a request to serve.
struct Refused {
    /// What the request counts as, when the gateway answered a refusal; `None` when the
    /// client went away or sent nothing usable (no request to count).
    outcome: Option<GatewayOutcome>,
    why: String,
}

impl Refused {
    fn gone(why: impl Into<String>) -> Refused {
        Refused {
            outcome: None,
            why: why.into(),
        }
    }

    fn answered(outcome: GatewayOutcome, why: impl Into<String>) -> Refused {
        Refused {
            outcome: Some(outcome),
            why: why.into(),
        }
    }
}

/// Greeting, authentication and request; an answer is written for every refusal.
async fn negotiate(
    shared: &Shared,
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> Result<(Routing, Target), Refused> {
    let methods = read_parsed(s, buf, parse_greeting)
        .await
        .map_err(Refused::gone)?;
    let token = shared.cfg.token.as_deref();
    // Username/password when offered, so the username can route even without a token.
    let method = if methods.contains(&USER_PASS) {
        USER_PASS
    } else if token.is_none() && methods.contains(&NO_AUTH) {
        NO_AUTH
    } else {
        NO_ACCEPTABLE
    };
    s.write_all(&[5, method])
        .await
        .map_err(|e| Refused::gone(e.to_string()))?;
    let routing = match method {
        NO_AUTH => Routing::default(),
        USER_PASS => {
            let (u, p) = read_parsed(s, buf, parse_auth)
                .await
                .map_err(Refused::gone)?;
            let (u, p) = (String::from_utf8_lossy(&u), String::from_utf8_lossy(&p));
            match authorize(token, Some((&u, &p)), &shared.upstream.tag_keys()) {
                Ok(r) => {
                    s.write_all(&[1, 0])
                        .await
                        .map_err(|e| Refused::gone(e.to_string()))?;
                    r
                }
                Err(e) => {
                    let _ = s.write_all(&[1, 1]).await;
                    let outcome = match e {
                        Denied::Token => GatewayOutcome::Denied,
                        Denied::Username(_) => GatewayOutcome::BadRequest,
                    };
                    return Err(Refused::answered(
                        outcome,
                        format!("SOCKS5 authentication refused: {e}"),
                    ));
                }
            }
        }
        _ => {
            return Err(Refused::answered(
                GatewayOutcome::Denied,
                "SOCKS5 client offered no acceptable method",
            ))
        }
    };
    match read_parsed(s, buf, parse_request).await {
        Ok(dest) => match Target::socks(&dest.host, dest.port) {
            Ok(target) => Ok((routing, target)),
            Err(e) => {
                // Not a name or address to pass on (control characters, a port inside
                // it, port 0): refused before anything is leased.
                let _ = s.write_all(&reply_bytes(reply::GENERAL)).await;
                Err(Refused::answered(GatewayOutcome::BadRequest, e.to_string()))
            }
        },
        Err(e) => {
            let code = if e.contains("command") {
                reply::COMMAND
            } else if e.contains("address type") {
                reply::ADDRESS_TYPE
            } else {
                reply::GENERAL
            };
            let _ = s.write_all(&reply_bytes(code)).await;
            Err(Refused::answered(GatewayOutcome::BadRequest, e))
        }
    }
}

/// Serve one client connection that starts with 0x05.
pub(super) async fn serve(shared: Arc<Shared>, mut s: TcpStream) {
    let mut buf = Vec::new();
    let negotiated = tokio::time::timeout(
        shared.limits.first_request,
        negotiate(&shared, &mut s, &mut buf),
    )
    .await;
    let count = |outcome| shared.metrics.request(GatewayProtocol::Socks5, outcome);
    let (routing, target) = match negotiated {
        Ok(Ok(v)) => v,
        Ok(Err(r)) => {
            if let Some(outcome) = r.outcome {
                count(outcome);
            }
            return debug!(error = %r.why, "gateway SOCKS5 client refused");
        }
        Err(_) => return debug!("gateway SOCKS5 client too slow; closed"),
    };
    if shared.intercepts(&target) {
        // Granted at once: the upstream is chosen per request inside.
        count(GatewayOutcome::Ok);
        if s.write_all(&reply_bytes(reply::OK)).await.is_ok() {
            super::intercept::serve(shared.clone(), s, buf, target, routing).await;
        }
        return;
    }
    let (mut guard, dialed) = match shared
        .upstream
        .connect(&routing, &target, Route::Tunnel)
        .await
    {
        Ok(v) => v,
        Err(e) => {
            debug!(error = %e, "gateway SOCKS5 request failed");
            count(error_outcome(&e));
            let _ = s.write_all(&reply_bytes(reply_for(&e))).await;
            return;
        }
    };
    guard.reached().await;
    count(GatewayOutcome::Ok);
    if s.write_all(&reply_bytes(reply::OK)).await.is_err() {
        return;
    }
    // Bytes the client sent right after its request belong to the tunnel: they go first.
    let r = relay(s, dialed.io, buf, shared.cfg.half_close_timeout).await;
    debug!(endpoint = guard.endpoint(), result = ?r.map_err(|e| e.kind()), "gateway SOCKS5 tunnel closed");
    // Reported here rather than by the guard's drop: no extra task per tunnel.
    guard.finish().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode(dest: &Dest) -> Vec<u8> {
        let mut b = vec![5, 1, 0];
        if let Ok(ip) = dest.host.parse::<Ipv4Addr>() {
            b.push(1);
            b.extend_from_slice(&ip.octets());
        } else if let Ok(ip) = dest.host.parse::<Ipv6Addr>() {
            b.push(4);
            b.extend_from_slice(&ip.octets());
        } else {
            b.push(3);
            b.push(dest.host.len() as u8);
            b.extend_from_slice(dest.host.as_bytes());
        }
        b.extend_from_slice(&dest.port.to_be_bytes());
        b
    }

    #[test]
    fn requests_table() {
        let cases: Vec<(&[u8], Parsed<Dest>)> = vec![
            (
                &[5, 1, 0, 1, 127, 0, 0, 1, 0, 80],
                Ok(Some((Dest::new("127.0.0.1", 80), 10))),
            ),
            (
                &[5, 1, 0, 3, 3, b'a', b'.', b'b', 1, 187],
                Ok(Some((Dest::new("a.b", 443), 10))),
            ),
            (&[5, 1, 0, 1, 127, 0], Ok(None)),
            (&[4, 1, 0, 1], Err(ParseError::Version(4))),
            (
                &[5, 2, 0, 1, 127, 0, 0, 1, 0, 80],
                Err(ParseError::Command(2)),
            ),
            (&[5, 1, 0, 9, 0, 0], Err(ParseError::AddressType(9))),
            (&[5, 1, 0, 3, 0, 0, 80], Err(ParseError::Domain)),
        ];
        for (bytes, want) in cases {
            assert_eq!(parse_request(bytes), want, "{bytes:?}");
        }
        let mut v6 = vec![5, 1, 0, 4];
        v6.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        v6.extend_from_slice(&[0x1f, 0x90]);
        assert_eq!(parse_request(&v6), Ok(Some((Dest::new("::1", 8080), 22))));
    }

    #[test]
    fn greetings_and_auth() {
        assert_eq!(parse_greeting(&[5, 2, 0, 2]), Ok(Some((vec![0, 2], 4))));
        assert_eq!(parse_greeting(&[5, 2, 0]), Ok(None));
        assert_eq!(parse_greeting(&[5, 0]), Err(ParseError::NoMethods));
        assert_eq!(parse_greeting(&[4, 1, 0]), Err(ParseError::Version(4)));
        assert_eq!(
            parse_auth(&[1, 1, b'u', 2, b'p', b'w']),
            Ok(Some(((b"u".to_vec(), b"pw".to_vec()), 6)))
        );
        assert_eq!(parse_auth(&[1, 1, b'u', 2, b'p']), Ok(None));
        assert_eq!(parse_auth(&[5, 1]), Err(ParseError::AuthVersion(5)));
    }

    proptest! {
        #[test]
        fn parsers_never_panic_and_never_overrun(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(Some((_, used))) = parse_greeting(&bytes) { prop_assert!(used <= bytes.len()); }
            if let Ok(Some((_, used))) = parse_auth(&bytes) { prop_assert!(used <= bytes.len()); }
            if let Ok(Some((_, used))) = parse_request(&bytes) { prop_assert!(used <= bytes.len()); }
        }

        #[test]
        fn requests_round_trip_at_any_split(
            v4 in any::<[u8; 4]>(),
            v6 in any::<[u8; 16]>(),
            name in "[a-z0-9]{1,20}(\\.[a-z0-9]{1,20}){0,3}",
            which in 0u8..3,
            port in any::<u16>(),
            split in any::<prop::sample::Index>(),
            tail in proptest::collection::vec(any::<u8>(), 0..8),
        ) {
            let host = match which {
                0 => Ipv4Addr::from(v4).to_string(),
                1 => Ipv6Addr::from(v6).to_string(),
                _ => name,
            };
            let dest = Dest::new(&host, port);
            let mut wire = encode(&dest);
            let len = wire.len();
            let cut = split.index(len);
            prop_assert_eq!(parse_request(&wire[..cut]), Ok(None));
            wire.extend_from_slice(&tail);
            prop_assert_eq!(parse_request(&wire), Ok(Some((dest, len))));
        }
    }
}
