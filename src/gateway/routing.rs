//! Routing by proxy username and the gateway's own authentication. Pure logic.
//!
//! The username is the providers' convention: `key-value` segments joined by `-`, e.g.
//! `pool-eu-session-42`. A value runs until the next known key, so pool names and session
//! ids may contain `-` (but no segment that is itself `pool` or `session`).

/// Which pool and sticky session a client asked for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Routing {
    /// `pool-<name>`; None = the gateway's pool.
    pub pool: Option<String>,
    /// `session-<id>`: one upstream for every request of the session.
    pub session: Option<String>,
}

/// A username the gateway cannot route by.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoutingError {
    /// The first segment is not a known key.
    #[error("unknown key {0:?} in the proxy username (known keys: pool, session)")]
    UnknownKey(String),
    /// A key without a value.
    #[error("key {0:?} in the proxy username needs a value, e.g. {0}-NAME")]
    MissingValue(String),
    /// A key twice.
    #[error("key {0:?} appears twice in the proxy username")]
    Repeated(String),
    /// A session key the pools do not take (too long, control characters).
    #[error("session in the proxy username: {0}")]
    Session(#[from] crate::limits::SessionKeyError),
}

/// Why a client is turned away before anything is leased.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// No credentials, or not the gateway's token (HTTP 407, SOCKS5 auth failure).
    #[error("the gateway needs its token as the proxy password")]
    Token,
    /// The username does not parse (HTTP 400, SOCKS5 auth failure).
    #[error(transparent)]
    Username(#[from] RoutingError),
}

const KEYS: [&str; 2] = ["pool", "session"];

/// Parse a proxy username; the empty name routes by the gateway's defaults.
pub fn parse_username(user: &str) -> Result<Routing, RoutingError> {
    let mut r = Routing::default();
    if user.is_empty() {
        return Ok(r);
    }
    let mut parts = user.split('-').peekable();
    while let Some(key) = parts.next() {
        if !KEYS.contains(&key) {
            return Err(RoutingError::UnknownKey(key.to_string()));
        }
        let mut value: Vec<&str> = Vec::new();
        while let Some(next) = parts.peek() {
            if KEYS.contains(next) && !value.is_empty() {
                break;
            }
            value.push(next);
            parts.next();
        }
        let value = value.join("-");
        if value.is_empty() {
            return Err(RoutingError::MissingValue(key.to_string()));
        }
        let slot = if key == "pool" {
            &mut r.pool
        } else {
            crate::limits::check_session_key(&value)?;
            &mut r.session
        };
        if slot.replace(value).is_some() {
            return Err(RoutingError::Repeated(key.to_string()));
        }
    }
    Ok(r)
}

/// Check the client's credentials against the gateway token and route by the username.
pub fn authorize(token: Option<&str>, creds: Option<(&str, &str)>) -> Result<Routing, Denied> {
    if let Some(t) = token {
        match creds {
            Some((_, pass)) if same(pass.as_bytes(), t.as_bytes()) => {}
            _ => return Err(Denied::Token),
        }
    }
    Ok(parse_username(creds.map(|c| c.0).unwrap_or(""))?)
}

/// Comparison whose time does not depend on where the inputs differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `user:password` from a `Basic` credentials header value.
pub fn basic_credentials(value: &str) -> Option<(String, String)> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = crate::dial::base64_decode(rest.trim())?;
    let text = String::from_utf8(raw).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(pool: Option<&str>, session: Option<&str>) -> Routing {
        Routing {
            pool: pool.map(str::to_string),
            session: session.map(str::to_string),
        }
    }

    #[test]
    fn usernames() {
        let ok = [
            ("", r(None, None)),
            ("pool-eu", r(Some("eu"), None)),
            ("session-42", r(None, Some("42"))),
            ("pool-eu-session-42", r(Some("eu"), Some("42"))),
            (
                "session-a-b-c-pool-us-east",
                r(Some("us-east"), Some("a-b-c")),
            ),
            // A value may itself be a key's name when it is the first segment after a key.
            ("session-pool", r(None, Some("pool"))),
        ];
        for (u, want) in ok {
            assert_eq!(parse_username(u), Ok(want), "{u:?}");
        }
        let bad = [
            ("country-us", RoutingError::UnknownKey("country".into())),
            ("pool", RoutingError::MissingValue("pool".into())),
            ("pool-", RoutingError::MissingValue("pool".into())),
            ("pool-a-pool-b", RoutingError::Repeated("pool".into())),
            ("user", RoutingError::UnknownKey("user".into())),
            (
                &format!("session-{}", "k".repeat(129)),
                RoutingError::Session(crate::limits::SessionKeyError::TooLong(129)),
            ),
        ];
        for (u, want) in bad {
            assert_eq!(parse_username(u), Err(want), "{u:?}");
        }
    }

    #[test]
    fn token_on_every_credential() {
        assert_eq!(authorize(None, None), Ok(Routing::default()));
        assert_eq!(
            authorize(None, Some(("pool-x", "anything"))),
            Ok(r(Some("x"), None))
        );
        assert_eq!(authorize(Some("t"), None), Err(Denied::Token));
        assert_eq!(authorize(Some("t"), Some(("", "u"))), Err(Denied::Token));
        assert_eq!(authorize(Some("t"), Some(("", "tt"))), Err(Denied::Token));
        assert_eq!(
            authorize(Some("t"), Some(("", "t"))),
            Ok(Routing::default())
        );
        assert!(matches!(
            authorize(Some("t"), Some(("bogus-1", "t"))),
            Err(Denied::Username(_))
        ));
    }

    #[test]
    fn basic_headers() {
        // "pool-a:s3cret"
        assert_eq!(
            basic_credentials("Basic cG9vbC1hOnMzY3JldA=="),
            Some(("pool-a".into(), "s3cret".into()))
        );
        assert_eq!(
            basic_credentials("basic  cG9vbC1hOnMzY3JldA=="),
            Some(("pool-a".into(), "s3cret".into()))
        );
        assert_eq!(basic_credentials("Bearer x"), None);
        assert_eq!(basic_credentials("Basic !!!"), None);
    }
}
