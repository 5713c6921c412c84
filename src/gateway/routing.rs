//! Routing by proxy username and the gateway's own authentication. Pure logic.
//!
//! The username is the providers' convention: `key-value` segments joined by `-`, e.g.
//! `pool-eu-country-us-session-42`. The keys are `pool`, `session` and every tag key some
//! endpoint carries (docs/selection.md, "Tags"). A value runs until the next known key, so
//! pool names, session ids and tag values may contain `-` (but no segment that is itself
//! a key).

use std::collections::BTreeSet;

use crate::tags::{TagError, Tags};

/// Which pool, sticky session and tags a client asked for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Routing {
    /// `pool-<name>`; None = the gateway's pool.
    pub pool: Option<String>,
    /// `session-<id>`: one upstream for every request of the session.
    pub session: Option<String>,
    /// `<tag key>-<value>`: only endpoints carrying every one.
    pub tags: Tags,
    /// `session` is the gateway's own (an intercepted connection's, `rotate =
    /// "connection"`), not the client's: when a try fails, the request goes on through
    /// other upstreams, which a client's session never does (its address is the point).
    pub own_session: bool,
}

/// A username the gateway cannot route by.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoutingError {
    /// The first segment is not a known key.
    #[error("unknown key {key:?} in the proxy username (known keys: pool, session{})", tag_keys.iter().map(|k| format!(", {k}")).collect::<String>())]
    UnknownKey { key: String, tag_keys: Vec<String> },
    /// A key without a value.
    #[error("key {0:?} in the proxy username needs a value, e.g. {0}-NAME")]
    MissingValue(String),
    /// A key twice.
    #[error("key {0:?} appears twice in the proxy username")]
    Repeated(String),
    /// A tag segment whose value is not a tag value.
    #[error("proxy username: {0}")]
    Tag(#[from] TagError),
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

/// Parse a proxy username, `tag_keys` being the tag keys endpoints carry; the empty name
/// routes by the gateway's defaults.
pub fn parse_username(user: &str, tag_keys: &BTreeSet<String>) -> Result<Routing, RoutingError> {
    let mut r = Routing::default();
    if user.is_empty() {
        return Ok(r);
    }
    let known = |k: &str| KEYS.contains(&k) || tag_keys.contains(k);
    let mut tags = Vec::new();
    let mut parts = user.split('-').peekable();
    while let Some(key) = parts.next() {
        if !known(key) {
            return Err(RoutingError::UnknownKey {
                key: key.to_string(),
                tag_keys: tag_keys.iter().cloned().collect(),
            });
        }
        let mut value: Vec<&str> = Vec::new();
        while let Some(next) = parts.peek() {
            if known(next) && !value.is_empty() {
                break;
            }
            value.push(next);
            parts.next();
        }
        let value = value.join("-");
        if value.is_empty() {
            return Err(RoutingError::MissingValue(key.to_string()));
        }
        let slot = match key {
            "pool" => &mut r.pool,
            "session" => {
                crate::limits::check_session_key(&value)?;
                &mut r.session
            }
            _ => {
                if tags.iter().any(|(k, _)| k == key) {
                    return Err(RoutingError::Repeated(key.to_string()));
                }
                tags.push((key.to_string(), value));
                continue;
            }
        };
        if slot.replace(value).is_some() {
            return Err(RoutingError::Repeated(key.to_string()));
        }
    }
    r.tags = Tags::from_pairs(tags)?;
    Ok(r)
}

/// Check the client's credentials against the gateway token and route by the username.
pub fn authorize(
    token: Option<&str>,
    creds: Option<(&str, &str)>,
    tag_keys: &BTreeSet<String>,
) -> Result<Routing, Denied> {
    if let Some(t) = token {
        match creds {
            Some((_, pass)) if same(pass.as_bytes(), t.as_bytes()) => {}
            _ => return Err(Denied::Token),
        }
    }
    Ok(parse_username(creds.map(|c| c.0).unwrap_or(""), tag_keys)?)
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
            tags: Tags::default(),
            own_session: false,
        }
    }

    fn none() -> BTreeSet<String> {
        BTreeSet::new()
    }

    fn unknown(key: &str, tag_keys: &[&str]) -> RoutingError {
        RoutingError::UnknownKey {
            key: key.into(),
            tag_keys: tag_keys.iter().map(|k| k.to_string()).collect(),
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
            assert_eq!(parse_username(u, &none()), Ok(want), "{u:?}");
        }
        let bad = [
            ("country-us", unknown("country", &[])),
            ("pool", RoutingError::MissingValue("pool".into())),
            ("pool-", RoutingError::MissingValue("pool".into())),
            ("pool-a-pool-b", RoutingError::Repeated("pool".into())),
            ("user", unknown("user", &[])),
            (
                &format!("session-{}", "k".repeat(129)),
                RoutingError::Session(crate::limits::SessionKeyError::TooLong(129)),
            ),
        ];
        for (u, want) in bad {
            assert_eq!(parse_username(u, &none()), Err(want), "{u:?}");
        }
    }

    #[test]
    fn tag_keys_in_use_are_username_keys() {
        let keys: BTreeSet<String> = ["country", "region"].map(String::from).into();
        let tagged = |pool: Option<&str>, session: Option<&str>, tags: &[&str]| Routing {
            tags: Tags::parse_args(tags).unwrap(),
            ..r(pool, session)
        };
        let ok = [
            ("country-us", tagged(None, None, &["country=us"])),
            (
                "pool-default-country-us-session-7",
                tagged(Some("default"), Some("7"), &["country=us"]),
            ),
            // A value runs to the next key: region values hold `-`.
            (
                "region-us-east-1-country-us",
                tagged(None, None, &["country=us", "region=us-east-1"]),
            ),
        ];
        for (u, want) in ok {
            assert_eq!(parse_username(u, &keys), Ok(want), "{u:?}");
        }
        assert_eq!(
            parse_username("tier-dc", &keys),
            Err(unknown("tier", &["country", "region"]))
        );
        let e = parse_username("tier-dc", &keys).unwrap_err().to_string();
        assert!(
            e.contains("known keys: pool, session, country, region"),
            "{e}"
        );
        assert_eq!(
            parse_username("country-us-country-de", &keys),
            Err(RoutingError::Repeated("country".into()))
        );
        assert!(matches!(
            parse_username("country-u/s", &keys),
            Err(RoutingError::Tag(_))
        ));
    }

    #[test]
    fn token_on_every_credential() {
        let k = none();
        assert_eq!(authorize(None, None, &k), Ok(Routing::default()));
        assert_eq!(
            authorize(None, Some(("pool-x", "anything")), &k),
            Ok(r(Some("x"), None))
        );
        assert_eq!(authorize(Some("t"), None, &k), Err(Denied::Token));
        assert_eq!(
            authorize(Some("t"), Some(("", "u")), &k),
            Err(Denied::Token)
        );
        assert_eq!(
            authorize(Some("t"), Some(("", "tt")), &k),
            Err(Denied::Token)
        );
        assert_eq!(
            authorize(Some("t"), Some(("", "t")), &k),
            Ok(Routing::default())
        );
        assert!(matches!(
            authorize(Some("t"), Some(("bogus-1", "t")), &k),
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
