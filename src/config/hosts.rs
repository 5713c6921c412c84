//! Lists of hosts as an operator writes them (`[[gateway]] intercept`,
//! `insecure_origins`): exact hosts, `*.` wildcards and `"*"`, checked once and matched
//! against a canonical host (lower case, no trailing dot, IPv6 without brackets: the form
//! every front gives a destination).

use std::fmt;

use rustc_hash::FxHashSet;

use super::pace::site_host;

/// Whether `"*"` (every host) may be written in a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Everything {
    /// `"*"` matches every host.
    Allowed,
    /// `"*"` is refused, with this reason.
    Refused(&'static str),
}

/// A checked list of host patterns. `*.example.org` matches the names under
/// `example.org` at any depth (`a.example.org`, `a.b.example.org`) but not `example.org`
/// itself, which is written on its own when it is meant too.
#[derive(Clone, Default)]
pub struct HostPatterns {
    /// As written after checking (canonical), in order: what `Debug` and equality see.
    written: Vec<String>,
    any: bool,
    exact: FxHashSet<Box<str>>,
    /// The part after `*.` of each wildcard.
    suffixes: FxHashSet<Box<str>>,
}

impl HostPatterns {
    /// Check every entry; the first bad one is named by its index.
    pub fn parse(entries: &[String], star: Everything) -> Result<HostPatterns, String> {
        let mut p = HostPatterns::default();
        for (i, raw) in entries.iter().enumerate() {
            let entry = pattern(raw, star).map_err(|m| format!("entry {i} ({raw:?}): {m}"))?;
            if p.written.contains(&entry) {
                continue;
            }
            match entry.strip_prefix("*.") {
                _ if entry == "*" => p.any = true,
                Some(suffix) => {
                    p.suffixes.insert(suffix.into());
                }
                None => {
                    p.exact.insert(entry.as_str().into());
                }
            }
            p.written.push(entry);
        }
        Ok(p)
    }

    /// Whether `host` (canonical: lower case, no trailing dot, IPv6 without brackets) is
    /// in the list.
    pub fn matches(&self, host: &str) -> bool {
        if self.any || self.exact.contains(host) {
            return true;
        }
        if self.suffixes.is_empty() {
            return false;
        }
        // Each proper suffix after a dot: `a.b.example.org` tries `b.example.org`,
        // `example.org`, `org`.
        host.match_indices('.')
            .any(|(i, _)| self.suffixes.contains(&host[i + 1..]))
    }

    /// No entry: matches nothing.
    pub fn is_empty(&self) -> bool {
        self.written.is_empty()
    }

    /// The entries, canonical, as checked.
    pub fn entries(&self) -> &[String] {
        &self.written
    }
}

impl PartialEq for HostPatterns {
    fn eq(&self, other: &Self) -> bool {
        self.written == other.written
    }
}

impl fmt::Debug for HostPatterns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.written).finish()
    }
}

/// One entry in its canonical form, or why it is refused.
fn pattern(raw: &str, star: Everything) -> Result<String, String> {
    let s = raw.trim();
    if s == "*" {
        return match star {
            Everything::Allowed => Ok("*".into()),
            Everything::Refused(why) => Err(why.into()),
        };
    }
    let (wild, host) = match s.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    if host.contains('*') {
        return Err(
            "a wildcard is written \"*.\" before a name (\"*.example.org\"), or \"*\" alone".into(),
        );
    }
    let host = site_host(host)?;
    if host.len() > 253 || host.split('.').any(|l| l.is_empty() || l.len() > 63) {
        return Err("not a host name (labels of 1-63 characters, 253 in all)".into());
    }
    if wild && (host.contains(':') || host.parse::<std::net::Ipv4Addr>().is_ok()) {
        return Err("\"*.\" goes before a name, not an IP address".into());
    }
    Ok(if wild { format!("*.{host}") } else { host })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> HostPatterns {
        let v: Vec<String> = entries.iter().map(|s| s.to_string()).collect();
        HostPatterns::parse(&v, Everything::Allowed).unwrap()
    }

    #[test]
    fn matching_table() {
        let p = list(&[
            "Shop.Example.",
            "*.example.org",
            "10.0.0.1",
            "[::1]",
            "*.A.B",
        ]);
        let cases = [
            ("shop.example", true),
            ("www.shop.example", false),
            ("example.org", false),
            ("a.example.org", true),
            ("a.b.example.org", true),
            ("xexample.org", false),
            ("example.org.evil", false),
            ("org", false),
            ("10.0.0.1", true),
            ("10.0.0.2", false),
            ("::1", true),
            ("x.a.b", true),
            ("a.b", false),
            ("", false),
        ];
        for (host, want) in cases {
            assert_eq!(p.matches(host), want, "{host}");
        }
        assert_eq!(
            p.entries(),
            ["shop.example", "*.example.org", "10.0.0.1", "::1", "*.a.b"]
        );
        let all = list(&["*"]);
        assert!(all.matches("anything.at.all") && all.matches("::1"));
        let none = list(&[]);
        assert!(none.is_empty() && !none.matches("shop.example"));
    }

    #[test]
    fn bad_entries_are_named() {
        let refused = Everything::Refused("name the hosts");
        let cases: &[(&str, Everything, &str)] = &[
            ("", Everything::Allowed, "is empty"),
            ("*", refused, "name the hosts"),
            ("a*.example.org", Everything::Allowed, "wildcard"),
            ("*example.org", Everything::Allowed, "wildcard"),
            ("*.*.example.org", Everything::Allowed, "wildcard"),
            ("**", Everything::Allowed, "wildcard"),
            ("*.", Everything::Allowed, "is empty"),
            ("*.10.0.0.1", Everything::Allowed, "IP address"),
            ("*.[::1]", Everything::Allowed, "IP address"),
            ("https://shop.example/", Everything::Allowed, "not a URL"),
            ("shop.example:443", Everything::Allowed, "without a port"),
            ("shop example", Everything::Allowed, "not a host name"),
            ("a..b", Everything::Allowed, "labels"),
            (&"a".repeat(64), Everything::Allowed, "labels"),
        ];
        for (entry, star, want) in cases {
            let e =
                HostPatterns::parse(&["ok.example".into(), entry.to_string()], *star).unwrap_err();
            assert!(e.starts_with("entry 1 "), "{entry:?}: {e}");
            assert!(e.contains(want), "{entry:?}: {e}");
        }
    }

    #[test]
    fn duplicates_count_once_and_equality_is_by_entries() {
        let a = list(&["A.example", "a.example", "*.x.example"]);
        assert_eq!(a.entries(), ["a.example", "*.x.example"]);
        assert_eq!(a, list(&["a.example", "*.x.example"]));
        assert_ne!(a, list(&["*.x.example", "a.example"]));
        assert_eq!(format!("{a:?}"), r#"["a.example", "*.x.example"]"#);
    }
}
