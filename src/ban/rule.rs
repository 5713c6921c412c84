//! One `[[ban]]` rule compiled from what the config says, and its conditions.

use std::sync::Arc;

use hyper::header::HeaderName;
use hyper::HeaderMap;
use regex::bytes::{Regex, RegexBuilder};

use super::builtin;
use super::DEFAULT_BODY_BYTES;
use super::{Ban, BanEntry, BanError, BanKind, MAX_BODY_BYTES, REGEX_SIZE_LIMIT};

/// A pattern's text at most (what a config line can sensibly hold).
const MAX_PATTERN: usize = 4096;
/// A rule's name at most.
const MAX_NAME: usize = 64;

/// A rule ready to judge answers.
pub(super) struct Rule {
    pub(super) name: Arc<str>,
    kind: BanKind,
    status: Vec<u16>,
    header: Option<(HeaderName, Regex)>,
    body: Option<(Regex, usize)>,
    hosts: Vec<Host>,
}

/// One `host` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    Exact(String),
    /// `*.shop.example` kept as `.shop.example`: names under it, not itself.
    Under(String),
}

impl Rule {
    /// Host, status and header all hold (the conditions a rule lacks hold).
    pub(super) fn head_matches(&self, host: &str, status: u16, headers: &HeaderMap) -> bool {
        (self.hosts.is_empty() || self.hosts.iter().any(|h| h.matches(host)))
            && (self.status.is_empty() || self.status.contains(&status))
            && self.header.as_ref().is_none_or(|(name, re)| {
                headers
                    .get_all(name)
                    .iter()
                    .any(|v| re.is_match(v.as_bytes()))
            })
    }

    /// The rule's `body_bytes` when it has a body condition.
    pub(super) fn body_bytes(&self) -> Option<usize> {
        self.body.as_ref().map(|(_, n)| *n)
    }

    /// The body condition holds on the decoded body (a rule without one: it holds).
    pub(super) fn body_matches(&self, decoded: &[u8]) -> bool {
        match &self.body {
            Some((re, n)) => re.is_match(&decoded[..decoded.len().min(*n)]),
            None => true,
        }
    }

    pub(super) fn ban(&self, index: usize) -> Ban<'_> {
        Ban {
            index,
            rule: &self.name,
            kind: self.kind,
            by_body: self.body.is_some(),
        }
    }
}

impl Host {
    fn matches(&self, host: &str) -> bool {
        match self {
            Host::Exact(h) => h == host,
            Host::Under(suffix) => host.len() > suffix.len() && host.ends_with(suffix.as_str()),
        }
    }
}

/// A rule name: 1–64 of `a-z`, `0-9`, `_`, `-`.
pub(super) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// The rules of entry `index`: one, or a built-in set's.
pub(super) fn compile(index: usize, e: &BanEntry) -> Result<Vec<Rule>, BanError> {
    let err = |rule: Option<&str>, key: &'static str, message: String| BanError {
        index,
        rule: rule.map(str::to_string),
        key,
        message,
    };
    let hosts = e
        .host
        .iter()
        .map(|h| host(h))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|m| err(e.name.as_deref(), "host", m))?;
    if let Some(set) = &e.builtin {
        let given = [
            ("name", e.name.is_some()),
            ("status", e.status.is_some()),
            ("header", e.header.is_some()),
            ("body", e.body.is_some()),
            ("body_bytes", e.body_bytes.is_some()),
        ];
        if let Some((key, _)) = given.iter().find(|(_, g)| *g) {
            return Err(err(
                None,
                key,
                format!("a builtin = {set:?} entry takes no {key} (only host); write a rule of your own beside it"),
            ));
        }
        let rules = builtin::set(set).ok_or_else(|| {
            let known: Vec<&str> = super::BUILTIN_SETS.iter().map(|s| s.name).collect();
            err(
                None,
                "builtin",
                format!("unknown built-in set {set:?} (known: {})", known.join(", ")),
            )
        })?;
        return rules
            .iter()
            .map(|b| {
                let entry = BanEntry {
                    name: Some(b.name.into()),
                    header: b.header.map(str::to_string),
                    body: b.body.map(str::to_string),
                    status: (!b.status.is_empty()).then(|| b.status.to_vec()),
                    ..BanEntry::default()
                };
                one(&entry, hosts.clone()).map_err(|(key, m)| err(Some(b.name), key, m))
            })
            .collect();
    }
    let name = match e.name.as_deref() {
        Some(n) if valid_name(n) => n,
        Some(n) => {
            return Err(err(
                None,
                "name",
                format!("{n:?} is not a rule name: 1-{MAX_NAME} characters of a-z, 0-9, _ and -"),
            ))
        }
        None => {
            return Err(err(
                None,
                "name",
                "every rule needs a name (or builtin = \"SET\")".into(),
            ))
        }
    };
    Ok(vec![
        one(e, hosts).map_err(|(key, m)| err(Some(name), key, m))?
    ])
}

/// A rule of a valid name; a problem as (key, message).
fn one(e: &BanEntry, hosts: Vec<Host>) -> Result<Rule, (&'static str, String)> {
    let name = e.name.as_deref().unwrap_or_default();
    let status = e.status.clone().unwrap_or_default();
    if e.status.as_ref().is_some_and(Vec::is_empty) {
        return Err((
            "status",
            "an empty list matches no answer; leave status out to match any".into(),
        ));
    }
    if let Some(bad) = status.iter().find(|s| !(100..=599).contains(*s)) {
        return Err(("status", format!("{bad} is not an HTTP status (100-599)")));
    }
    let header = e.header.as_deref().map(header).transpose()?;
    let body = match e.body.as_deref() {
        Some(p) => Some(body(p, e.body_bytes)?),
        None if e.body_bytes.is_some() => {
            return Err((
                "body_bytes",
                "applies to a body condition, and this rule has none".into(),
            ))
        }
        None => None,
    };
    if status.is_empty() && header.is_none() && body.is_none() {
        return Err((
            "",
            "needs at least one condition: status, header or body".into(),
        ));
    }
    let kind = if header.is_none() && body.is_none() {
        BanKind::Status
    } else {
        BanKind::Content
    };
    Ok(Rule {
        name: name.into(),
        kind,
        status,
        header,
        body,
        hosts,
    })
}

/// `"Name: regex"`: a header name, then a regex on its value (empty: any value).
fn header(spec: &str) -> Result<(HeaderName, Regex), (&'static str, String)> {
    let (name, pattern) = spec.split_once(':').ok_or((
        "header",
        format!("{spec:?}: write \"Name: regex\" (e.g. \"cf-mitigated: ^challenge$\")"),
    ))?;
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| ("header", format!("{:?} is not a header name", name.trim())))?;
    let re = regex(pattern.trim_start()).map_err(|m| ("header", m))?;
    Ok((name, re))
}

/// A body regex and how many decoded bytes it looks at.
fn body(pattern: &str, bytes: Option<usize>) -> Result<(Regex, usize), (&'static str, String)> {
    let re = regex(pattern).map_err(|m| ("body", m))?;
    if re.is_match(b"") {
        return Err((
            "body",
            format!("{pattern:?} matches an empty body, so it would match every answer"),
        ));
    }
    let n = bytes.unwrap_or(DEFAULT_BODY_BYTES);
    if !(1..=MAX_BODY_BYTES).contains(&n) {
        return Err((
            "body_bytes",
            format!("{n} is out of range (1-{MAX_BODY_BYTES})"),
        ));
    }
    Ok((re, n))
}

/// A linear-time regex (no backreferences or look-around exist in this syntax), refused
/// when its compiled form would pass [`REGEX_SIZE_LIMIT`].
fn regex(pattern: &str) -> Result<Regex, String> {
    if pattern.len() > MAX_PATTERN {
        return Err(format!(
            "the pattern is {} bytes long (at most {MAX_PATTERN})",
            pattern.len()
        ));
    }
    RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| {
            // The parser's message spans lines (the pattern, a caret): one line here.
            let m = e.to_string();
            let m = m.split_whitespace().collect::<Vec<_>>().join(" ");
            format!("{pattern:?} is not a usable regex: {m}")
        })
}

/// A `host` entry: a host as leases name it, or `*.` and one.
fn host(raw: &str) -> Result<Host, String> {
    let (under, name) = match raw.trim().strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, raw.trim()),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let name = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(&name)
        .to_string();
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':'));
    if !ok {
        return Err(format!(
            "{raw:?} is not a host: write \"shop.example\" or \"*.shop.example\" (no scheme, port or path; leave host out for every host)"
        ));
    }
    if name.contains(':') && (under || name.parse::<std::net::Ipv6Addr>().is_err()) {
        return Err(format!("{raw:?}: a host has no port"));
    }
    Ok(match under {
        true => Host::Under(format!(".{name}")),
        false => match name.parse::<std::net::Ipv6Addr>() {
            Ok(ip) => Host::Exact(ip.to_string()),
            Err(_) => Host::Exact(name),
        },
    })
}
