//! The lines `import` reads (docs/reference.md, "Import files"): a proxy URL, or the
//! provider exports `host:port:user:pass`, `user:pass@host:port` and `host:port`, which
//! take the scheme of `--scheme`.

use crate::endpoint::{check_characters, redact_raw, EndpointError, ProxyUrl, Scheme};

/// Why a line is not an endpoint. Messages never hold a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// A URL, or a provider line turned into one, that does not parse.
    #[error(transparent)]
    Url(#[from] EndpointError),
    /// Colons that fit none of the formats (shown as `redact_raw` shows a line: at most
    /// its host and port).
    #[error("{0:?} is not a proxy: write scheme://[user[:password]@]host:port, host:port:user:pass, user:pass@host:port or host:port")]
    Format(String),
    /// A scheme followed by something else than `://` (`socks5h//user:pw@h:1080`), which
    /// would otherwise read as a user name.
    #[error("the scheme {0} is not followed by \"://\": write {0}://[user[:password]@]host:port")]
    Scheme(Scheme),
}

/// One line: `None` for a blank line or a `#` comment.
pub fn parse(line: &str, scheme: Scheme) -> Option<Result<ProxyUrl, LineError>> {
    let l = line.trim();
    if l.is_empty() || l.starts_with('#') {
        return None;
    }
    Some(
        check_characters(l)
            .map_err(LineError::from)
            .and_then(|()| to_url(l, scheme))
            .and_then(|u| ProxyUrl::parse(&u).map_err(LineError::from)),
    )
}

/// A known scheme at the start of a line without `://`, followed by `/` or `:/`.
fn mistyped_scheme(l: &str) -> Option<Scheme> {
    let end = l.find([':', '/'])?;
    let scheme: Scheme = l[..end].parse().ok()?;
    let after = &l[end..];
    (after.starts_with('/') || after.starts_with(":/")).then_some(scheme)
}

/// The line as a URL to parse.
fn to_url(l: &str, scheme: Scheme) -> Result<String, LineError> {
    let s = scheme.as_str();
    if l.contains("://") {
        return Ok(l.to_string());
    }
    if let Some(s) = mistyped_scheme(l) {
        return Err(LineError::Scheme(s));
    }
    if l.contains('@') {
        return Ok(format!("{s}://{l}"));
    }
    // `[v6]:port` or `host:port`, then optionally `:user:pass` (a password may hold ':').
    let (host, rest) = match l.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((h, rest)) => (format!("[{h}]"), rest.strip_prefix(':')),
            None => return Err(shown(l)),
        },
        None => match l.split_once(':') {
            Some((h, rest)) => (h.to_string(), Some(rest)),
            None => (l.to_string(), None),
        },
    };
    let Some(rest) = rest else {
        // No port: the URL parser says so.
        return Ok(format!("{s}://{host}"));
    };
    let mut parts = rest.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(port), None, None) => Ok(format!("{s}://{host}:{port}")),
        (Some(port), Some(user), Some(pass)) => Ok(format!("{s}://{user}:{pass}@{host}:{port}")),
        _ => Err(shown(l)),
    }
}

/// The line as an error shows it: at most its host and port (a provider line may hold a
/// password anywhere after them).
fn shown(l: &str) -> LineError {
    LineError::Format(redact_raw(l))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (line, `--scheme`, the URL it reads as or the error it names; `None`: skipped).
    type Case<'a> = (&'a str, Scheme, Option<Result<String, &'a str>>);

    #[test]
    fn provider_formats() {
        let h = Scheme::Http;
        let ok = |s: &str| Some(Ok(s.to_string()));
        let cases: &[Case] = &[
            ("", h, None),
            ("  # a comment", h, None),
            ("socks5://u:p@h:1080", h, ok("socks5://u:***@h:1080")),
            ("10.0.0.1:3128", h, ok("http://10.0.0.1:3128")),
            (
                "10.0.0.1:3128",
                Scheme::Socks5h,
                ok("socks5h://10.0.0.1:3128"),
            ),
            (
                "10.0.0.1:3128:bob:s3cret",
                h,
                ok("http://bob:***@10.0.0.1:3128"),
            ),
            (
                "10.0.0.1:3128:bob:s3:cr:et",
                h,
                ok("http://bob:***@10.0.0.1:3128"),
            ),
            (
                "bob:s3cret@proxy.example:8000",
                Scheme::Socks5,
                ok("socks5://bob:***@proxy.example:8000"),
            ),
            ("[::1]:3128:bob:pw", h, ok("http://bob:***@[::1]:3128")),
            ("[::1]:3128", h, ok("http://[::1]:3128")),
            (
                "10.0.0.1:3128:bob",
                h,
                Some(Err("\"10.0.0.1:3128:***\" is not a proxy")),
            ),
            (
                "10.0.0.1:alice:s3cret",
                h,
                Some(Err("\"10.0.0.1:***\" is not a proxy")),
            ),
            (
                "10.0.0.1:3128:alice:s3cret # comment",
                h,
                Some(Err("white space")),
            ),
            (
                "http://alice:s3cret@10.0.0.1:80 http://bob:pw@10.0.0.2:80",
                h,
                Some(Err("white space")),
            ),
            (
                "10.0.0.1:3128:alice:s3\0cret",
                h,
                Some(Err("control character")),
            ),
            (
                "10.0.0.1:3128:alice:s3%00cret",
                h,
                Some(Err("control character")),
            ),
            (
                "socks5h//alice:s3cret@h:1080",
                h,
                Some(Err("the scheme socks5h is not followed by \"://\"")),
            ),
            ("HTTP:/alice:s3cret@h:1080", h, Some(Err("write http://"))),
            ("socks5/alice:s3cret@h:1080", h, Some(Err("socks5://"))),
            (
                "alice/x:s3cret@h:1080",
                h,
                Some(Err("'/' in the user name")),
            ),
            ("10.0.0.1", h, Some(Err("missing port"))),
            ("10.0.0.1:99999:bob:pw", h, Some(Err("invalid port"))),
            ("ftp://h:21", h, Some(Err("unknown scheme"))),
            ("[::1", h, Some(Err("is not a proxy"))),
        ];
        for (line, scheme, want) in cases {
            let got = parse(line, *scheme).map(|r| r.map(|u| u.to_redacted_string()));
            match (&got, want) {
                (None, None) => {}
                (Some(Ok(u)), Some(Ok(w))) => assert_eq!(u, w, "{line}"),
                (Some(Err(e)), Some(Err(part))) => {
                    let m = e.to_string();
                    assert!(m.contains(part), "{line}: {m}");
                    assert!(!m.contains("s3cret") && !m.contains(":pw"), "{m}");
                }
                _ => panic!("{line}: got {got:?}, want {want:?}"),
            }
        }
    }
}
