//! The text of a PostgreSQL URL before it is read (docs/fleet.md, "Connecting"): what is
//! refused as ambiguous, how a URL is shown when it could not be read (never with its
//! password), and libpq's keywords, by which a key=value connection string is told from a
//! path.
//!
//! libpq and tokio-postgres read a URL differently where it is not percent-encoded: libpq
//! ends the user and password at the first '@' or '/', tokio-postgres at the first '@'
//! anywhere; generic URL parsers end it at a '#'. A URL whose meaning depends on the
//! reader is refused, naming what to encode, rather than read one way and shown another.

/// libpq's connection keywords (PostgreSQL 17), and tokio-postgres's `keepalives_retries`.
pub const KEYWORDS: &[&str] = &[
    "application_name",
    "channel_binding",
    "client_encoding",
    "connect_timeout",
    "dbname",
    "fallback_application_name",
    "gssdelegation",
    "gssencmode",
    "gsslib",
    "host",
    "hostaddr",
    "keepalives",
    "keepalives_count",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "krbsrvname",
    "load_balance_hosts",
    "options",
    "passfile",
    "password",
    "port",
    "replication",
    "require_auth",
    "requirepeer",
    "service",
    "ssl_max_protocol_version",
    "ssl_min_protocol_version",
    "sslcert",
    "sslcertmode",
    "sslcompression",
    "sslcrl",
    "sslcrldir",
    "sslkey",
    "sslmode",
    "sslnegotiation",
    "sslpassword",
    "sslrootcert",
    "sslsni",
    "target_session_attrs",
    "tcp_user_timeout",
    "user",
];

/// A query key libpq takes (it spells them in lower case only).
fn is_keyword(word: &str) -> bool {
    KEYWORDS.contains(&word)
}

/// Whether a key's value is a secret (`password`, `sslpassword`).
fn is_secret_key(key: &str) -> bool {
    key.to_ascii_lowercase().ends_with("password")
}

/// Whether `s` holds a libpq keyword followed by '=' (spaces around it allowed) at its
/// start, after white space or after a '/': the shape of a key=value connection string
/// (`host=db1 dbname=pool password=…`), never taken for a file name.
pub fn names_a_keyword(s: &str) -> bool {
    let b = s.as_bytes();
    s.match_indices('=').any(|(eq, _)| {
        let mut end = eq;
        while end > 0 && b[end - 1].is_ascii_whitespace() {
            end -= 1;
        }
        let mut start = end;
        while start > 0 && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_') {
            start -= 1;
        }
        let at_word_start =
            start == 0 || b[start - 1].is_ascii_whitespace() || b[start - 1] == b'/';
        start < end
            && at_word_start
            && KEYWORDS
                .iter()
                .any(|k| k.eq_ignore_ascii_case(&s[start..end]))
    })
}

/// Why `url` (a `postgres://` or `postgresql://` URL) is refused before it is read, in
/// words that never quote it; `None` when its parts are unambiguous.
pub fn problem(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    if rest.chars().any(char::is_control) {
        return Some("it holds a control character".into());
    }
    if rest.chars().any(char::is_whitespace) {
        return Some("it holds white space: write a space as %20".into());
    }
    let encoded = percent_encoding::percent_decode_str(rest).decode_utf8_lossy();
    if encoded.chars().any(char::is_control) {
        return Some("it holds a percent-encoded control character (such as %00)".into());
    }
    if rest.matches('@').count() > 1 {
        return Some(
            "it holds more than one '@': write an '@' in the user name, password, database name or an option as %40"
                .into(),
        );
    }
    if let Some(at) = rest.find('@') {
        if rest[..at].contains(['/', '?']) {
            return Some(
                "a '/' or '?' comes before the '@' (libpq and other readers would split it differently): write a '/' in the password as %2F and a '?' as %3F, or an '@' in the database name or an option as %40"
                    .into(),
            );
        }
    }
    if rest.contains('#') {
        return Some(
            "it holds a raw '#' (elsewhere the start of a fragment): write it as %23".into(),
        );
    }
    let query = rest.split_once('?').map_or("", |(_, q)| q);
    query_problem(query)
}

/// The query's parts: each `key=value`, every key a libpq keyword.
fn query_problem(query: &str) -> Option<String> {
    let mut after_secret = false;
    for part in query.split('&').filter(|p| !p.is_empty()) {
        let Some((key, _)) = part.split_once('=') else {
            return Some("an option without '=' (a raw '&' in a value? write it as %26)".into());
        };
        if !is_keyword(key) {
            // After a password a stray "key" may be the rest of it, cut at a raw '&'.
            let word = !key.is_empty()
                && key.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
                && !after_secret;
            return Some(match word {
                true => format!("unknown option {key:?}"),
                false => "an unknown option (a raw '&' in a password? write it as %26)".into(),
            });
        }
        after_secret = is_secret_key(key);
    }
    None
}

/// `url` with its password hidden, for a message about a URL that was not read: every
/// character from the first ':' of the user part to the last '@' (a raw '@', ':', '/' or
/// '#' in a password is then hidden with it; masking too much is the safe mistake), and
/// the value of every `password=` in the query, to the next `&keyword=`.
pub fn redact(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (format!("{s}://"), r),
        None => (String::new(), url),
    };
    let shown = match rest.rfind('@') {
        Some(at) => match rest[..at].find(':') {
            Some(colon) => format!("{}:***{}", &rest[..colon], &rest[at..]),
            None => rest.to_string(),
        },
        None => rest.to_string(),
    };
    format!("{scheme}{}", mask_query_secrets(&shown))
}

/// Each `password=` (and `sslpassword=`) value after a '?' or '&' becomes `***`, up to the
/// next '&' that starts a libpq keyword (a raw '&' in it is hidden too).
fn mask_query_secrets(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(['?', '&']) {
        out.push_str(&rest[..=i]);
        rest = &rest[i + 1..];
        let key_end = rest.find(['=', '&']).unwrap_or(rest.len());
        if !(rest[key_end..].starts_with('=') && is_secret_key(&rest[..key_end])) {
            continue;
        }
        out.push_str(&rest[..=key_end]);
        out.push_str(crate::redact::MASK);
        let value = &rest[key_end + 1..];
        let end = value
            .match_indices('&')
            .map(|(j, _)| j)
            .find(|&j| {
                let next = &value[j + 1..];
                next.split_once('=').is_some_and(|(k, _)| is_keyword(k))
            })
            .unwrap_or(value.len());
        rest = &value[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_value_strings_are_told_from_paths() {
        let cases = [
            ("host=127.0.0.1 password=KvSecret5 dbname=ppdb", true),
            ("dbname = ppdb password = KvSecret5", true),
            ("password=x", true),
            ("/srv/pp/password=x", true),
            ("HOST=db1", true),
            ("/var/lib/proxypool/pool.db", false),
            ("pool.db", false),
            ("a=b.db", false),
            ("/data/v=2/pool.db", false),
            ("myhost=1", false),
            ("=host", false),
        ];
        for (s, want) in cases {
            assert_eq!(names_a_keyword(s), want, "{s:?}");
        }
    }

    #[test]
    fn ambiguous_urls_are_refused_in_words_that_never_quote_them() {
        let cases: &[(&str, Option<&str>)] = &[
            ("postgresql://pp:pw@h:5432/db?sslmode=require", None),
            (
                "postgres://pp@h1,h2/db?password=p%26w&sslmode=disable",
                None,
            ),
            ("postgresql://pp:p%40ss@[::1]:5432/db", None),
            ("postgresql://h/db", None),
            ("postgresql://pp:Fl33tP@ss:w/rd#1@h/db", Some("%40")),
            ("postgresql://pp:Cfg@Pw@h/db", Some("%40")),
            ("postgresql://pp:pa/ss9@h/db", Some("%2F")),
            ("postgresql://pp:pa?ss9@h/db", Some("%3F")),
            ("postgresql://h/db?application_name=a@b", Some("%40")),
            ("postgresql://pp:pa#ss9@h/db", Some("%23")),
            ("postgresql://pp:pa ss9@h/db", Some("white space")),
            ("postgresql://pp:pa\0ss9@h/db", Some("control character")),
            ("postgresql://pp:pa%00ss9@h/db", Some("control character")),
            ("postgresql://pp@h/db?password=pa&ss9", Some("%26")),
            ("postgresql://pp@h/db?password=pa&ss9=1", Some("%26")),
            (
                "postgresql://pp@h/db?nonsense_option=1",
                Some("\"nonsense_option\""),
            ),
        ];
        for (url, want) in cases {
            let got = problem(url);
            match (want, &got) {
                (None, None) => {}
                (Some(w), Some(g)) => {
                    assert!(g.contains(w), "{url}: {g}");
                    for secret in ["ss9", "Fl33tP", "rd#1", "Cfg", "a@b"] {
                        assert!(!g.contains(secret), "{url}: {g}");
                    }
                }
                _ => panic!("{url}: {got:?}"),
            }
        }
    }

    #[test]
    fn a_url_is_shown_without_any_form_of_its_password() {
        let cases = [
            (
                "postgresql://app:pw@h1,h2/db?x=1",
                "postgresql://app:***@h1,h2/db?x=1",
            ),
            ("postgresql://app@h/db", "postgresql://app@h/db"),
            ("postgresql://h/db", "postgresql://h/db"),
            (
                "postgresql://pp:Fl33tP@ss:w/rd#1@127.0.0.1:15432/ppdb",
                "postgresql://pp:***@127.0.0.1:15432/ppdb",
            ),
            (
                "postgresql://pp@h/db?password=QuerySecret1&sslmode=bogus",
                "postgresql://pp@h/db?password=***&sslmode=bogus",
            ),
            (
                "postgresql://pp@h/db?sslmode=bogus&PASSWORD=Q1&x&sslpassword=Q2",
                "postgresql://pp@h/db?sslmode=bogus&PASSWORD=***&sslpassword=***",
            ),
            (
                "postgresql://pp@h/db?password=a&b=c&port=1",
                "postgresql://pp@h/db?password=***&port=1",
            ),
            ("postgresql://pp:a b@h/db", "postgresql://pp:***@h/db"),
        ];
        for (url, want) in cases {
            assert_eq!(redact(url), want, "{url}");
        }
    }
}
