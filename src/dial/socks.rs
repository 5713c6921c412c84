//! SOCKS4/4a/5/5h handshakes and the classification of their replies.

use tokio_socks::tcp::{Socks4Stream, Socks5Stream};
use tokio_socks::TargetAddr;

use super::progress::{Progress, Socks5Watch};
use super::{tcp, BoxIo, Dest, DialFailure};
use crate::endpoint::{ProxyUrl, Scheme};
use crate::health::{Phase, Reason};

pub(super) async fn handshake(
    io: BoxIo,
    proxy: &ProxyUrl,
    dest: &Dest,
    progress: &Progress,
) -> Result<BoxIo, DialFailure> {
    let phase = Phase::ProxyHandshake;
    let user = proxy.user.as_deref();
    // RFC 1929 has no empty password; a bare user name means no authentication.
    let pass = proxy.password.as_deref().filter(|p| !p.is_empty());
    let v5 = matches!(proxy.scheme, Scheme::Socks5 | Scheme::Socks5h);
    let remote_dns = matches!(proxy.scheme, Scheme::Socks5h | Scheme::Socks4a);
    let target = match dest.target_addr() {
        TargetAddr::Domain(..) if !remote_dns => {
            progress.resolving();
            let ip = tcp::resolve_destination(dest, !v5).await?;
            progress.greeting();
            TargetAddr::Ip(ip)
        }
        t => t,
    };
    let res = if v5 {
        let io = Socks5Watch::new(io, progress.clone());
        match (user, pass) {
            (Some(u), Some(p)) => {
                Socks5Stream::connect_with_password_and_socket(io, target, u, p).await
            }
            _ => Socks5Stream::connect_with_socket(io, target).await,
        }
        .map(|s| s.into_inner().inner)
    } else {
        // SOCKS4 has no greeting: its first bytes are the connect request.
        progress.asked();
        match user {
            Some(u) => Socks4Stream::connect_with_userid_and_socket(io, target, u).await,
            None => Socks4Stream::connect_with_socket(io, target).await,
        }
        .map(|s| Box::new(s.into_inner()) as BoxIo)
    };
    res.map_err(|e| {
        let (reason, detail) = classify_socks(&e, v5);
        DialFailure::new(reason, phase, detail)
    })
}

/// The reason for a SOCKS5 reply code other than 0 (RFC 1928 §6). docs/blame.md has the
/// table of whom each counts against.
pub fn socks5_reply_reason(code: u8) -> Reason {
    match code {
        // The proxy tried and could not get there: general failure (what microsocks
        // answers for a name it cannot resolve), network or host unreachable, connection
        // refused by the target, TTL expired. The same target through other endpoints
        // decides whether this endpoint or the target is at fault.
        1 | 3..=6 => Reason::UpstreamUnreachable,
        // Not allowed by the proxy's rules (dante's `socks block`): its policy for this
        // target.
        2 => Reason::ProxyRejected,
        // Command or address type not supported: the proxy does not speak what we sent.
        _ => Reason::ProxyProtocolError,
    }
}

/// The reason for a SOCKS4 reply code other than 90.
pub fn socks4_reply_reason(code: u8) -> Reason {
    match code {
        // "Request rejected or failed": SOCKS4 says no more than that the connect did not
        // happen, so it is judged like a SOCKS5 general failure.
        91 => Reason::UpstreamUnreachable,
        92 | 93 => Reason::ProxyAuthRejected,
        _ => Reason::ProxyProtocolError,
    }
}

/// Map a tokio-socks error to (reason, detail); the detail carries the reply code.
pub fn classify_socks(e: &tokio_socks::Error, v5: bool) -> (Reason, String) {
    use tokio_socks::Error as E;
    let ver = if v5 { "SOCKS5" } else { "SOCKS4" };
    let code = |c: u8| {
        let reason = if v5 {
            socks5_reply_reason(c)
        } else {
            socks4_reply_reason(c)
        };
        (reason, format!("{ver} reply code {c}: {e}"))
    };
    match e {
        E::Io(io) => (Reason::ConnectionReset, format!("{ver} handshake: {io}")),
        E::GeneralSocksServerFailure if !v5 => code(91),
        E::IdentdAuthFailure => code(92),
        E::InvalidUserIdAuthFailure => code(93),
        E::GeneralSocksServerFailure => code(1),
        E::ConnectionNotAllowedByRuleset => code(2),
        E::NetworkUnreachable => code(3),
        E::HostUnreachable => code(4),
        E::ConnectionRefused => code(5),
        E::TtlExpired => code(6),
        E::CommandNotSupported => code(7),
        E::AddressTypeNotSupported => code(8),
        E::PasswordAuthFailure(c) => (
            Reason::ProxyAuthRejected,
            format!("{ver} username/password rejected (status {c})"),
        ),
        E::NoAcceptableAuthMethods => (
            Reason::ProxyAuthRejected,
            format!("{ver}: no acceptable authentication method"),
        ),
        E::AuthorizationRequired => (
            Reason::ProxyAuthRejected,
            format!("{ver}: proxy requires username/password"),
        ),
        E::InvalidAuthValues(m) => (
            Reason::ProxyAuthRejected,
            format!("{ver}: credentials unusable: {m}"),
        ),
        // Reply codes past 8 come back from tokio-socks as UnknownAuthMethod.
        E::InvalidResponseVersion
        | E::InvalidReservedByte
        | E::UnknownAddressType
        | E::UnknownAuthMethod
        | E::UnknownError
        | E::InvalidTargetAddress(_)
        | E::ParseError(_)
        | E::ProxyServerUnreachable => (
            Reason::ProxyProtocolError,
            format!("{ver} protocol error: {e}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn socks_reply_codes() {
        use Reason::*;
        let v5 = [
            (1, UpstreamUnreachable),
            (2, ProxyRejected),
            (3, UpstreamUnreachable),
            (4, UpstreamUnreachable),
            (5, UpstreamUnreachable),
            (6, UpstreamUnreachable),
            (7, ProxyProtocolError),
            (8, ProxyProtocolError),
            (9, ProxyProtocolError),
            (255, ProxyProtocolError),
        ];
        for (c, r) in v5 {
            assert_eq!(socks5_reply_reason(c), r, "code {c}");
        }
        assert_eq!(socks4_reply_reason(91), UpstreamUnreachable);
        assert_eq!(socks4_reply_reason(92), ProxyAuthRejected);
        assert_eq!(socks4_reply_reason(93), ProxyAuthRejected);
        assert_eq!(socks4_reply_reason(17), ProxyProtocolError);
    }

    #[test]
    fn socks_errors_carry_the_code() {
        let (r, d) = classify_socks(&tokio_socks::Error::HostUnreachable, true);
        assert_eq!(r, Reason::UpstreamUnreachable);
        assert!(d.contains("code 4"), "{d}");
        let (r, d) = classify_socks(&tokio_socks::Error::GeneralSocksServerFailure, false);
        assert_eq!(r, Reason::UpstreamUnreachable);
        assert!(d.contains("91"), "{d}");
        let (r, _) = classify_socks(&tokio_socks::Error::PasswordAuthFailure(1), true);
        assert_eq!(r, Reason::ProxyAuthRejected);
        let (r, _) = classify_socks(&tokio_socks::Error::InvalidResponseVersion, true);
        assert_eq!(r, Reason::ProxyProtocolError);
        let eof = io::Error::from(io::ErrorKind::UnexpectedEof);
        let (r, _) = classify_socks(&tokio_socks::Error::Io(eof), true);
        assert_eq!(r, Reason::ConnectionReset);
    }
}
