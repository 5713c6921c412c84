//! Who may read: loopback by default; anything else needs a bearer token of its own
//! (never the lease socket's tokens: a Prometheus job is not an operator).

use std::net::SocketAddr;

use hyper::header::{HeaderMap, AUTHORIZATION};

/// The environment variable holding the token.
pub const TOKEN_ENV: &str = "PROXYPOOL_HTTP_TOKEN";

/// A listener address that must not be used as configured (CLI exit 2).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HttpConfigError {
    /// Non-loopback without a token.
    #[error("http address {0} is not a loopback address: set {TOKEN_ENV} (or [server] http_token_file) so readers must send `Authorization: Bearer <token>`, or listen on 127.0.0.1")]
    TokenRequired(SocketAddr),
    /// A token of white space only: no reader can send it (a bearer token is trimmed).
    #[error(
        "the http token ({TOKEN_ENV} or [server] http_token_file) is blank: give a real secret"
    )]
    BlankToken,
}

/// Whether `addr` may be served with `token`: loopback always, anything else only with a
/// non-empty token (the page lists every endpoint of every pool).
pub fn check_bind(addr: SocketAddr, token: Option<&str>) -> Result<(), HttpConfigError> {
    if token.is_some_and(|t| !t.is_empty() && t.trim().is_empty()) {
        return Err(HttpConfigError::BlankToken);
    }
    if addr.ip().is_loopback() || token.is_some_and(|t| !t.is_empty()) {
        Ok(())
    } else {
        Err(HttpConfigError::TokenRequired(addr))
    }
}

/// `Authorization: Bearer <token>` with the right token, compared in constant time.
pub(super) fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    let Some(v) = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let Some((scheme, given)) = v.trim().split_once(' ') else {
        return false;
    };
    scheme.eq_ignore_ascii_case("bearer")
        && constant_time_eq(given.trim().as_bytes(), token.as_bytes())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_rules() {
        // (address, token, allowed)
        let cases = [
            ("127.0.0.1:9464", None, true),
            ("127.8.0.1:9464", None, true),
            ("[::1]:9464", None, true),
            ("0.0.0.0:9464", None, false),
            ("0.0.0.0:9464", Some(""), false),
            ("0.0.0.0:9464", Some("s3cret"), true),
            ("192.0.2.7:80", None, false),
            ("[::]:9464", Some("t"), true),
            ("0.0.0.0:9464", Some("  "), false),
            ("127.0.0.1:9464", Some(" "), false),
        ];
        for (addr, token, ok) in cases {
            let addr: SocketAddr = addr.parse().unwrap();
            let r = check_bind(addr, token);
            assert_eq!(r.is_ok(), ok, "{addr} {token:?}");
            if r == Err(HttpConfigError::BlankToken) {
                assert!(
                    token.is_some_and(|t| t.trim().is_empty()),
                    "{addr} {token:?}"
                );
            } else if let Err(e) = r {
                assert!(e.to_string().contains("PROXYPOOL_HTTP_TOKEN"), "{e}");
                assert!(e.to_string().contains(&addr.to_string()), "{e}");
            }
        }
    }

    #[test]
    fn bearer_header_forms() {
        let cases = [
            (Some("Bearer s3cret"), true),
            (Some("bearer  s3cret "), true),
            (Some("Bearer s3cre"), false),
            (Some("Bearer s3cretX"), false),
            (Some("Basic s3cret"), false),
            (Some("s3cret"), false),
            (None, false),
        ];
        for (h, ok) in cases {
            let mut m = HeaderMap::new();
            if let Some(h) = h {
                m.insert(AUTHORIZATION, h.parse().unwrap());
            }
            assert_eq!(bearer_matches(&m, "s3cret"), ok, "{h:?}");
        }
    }
}
