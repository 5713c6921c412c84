//! Where a pool's state lives, told from the text of `--db`, `PROXYPOOL_DB`, `[store]
//! url` or `[store] path` (docs/reference.md, "Database strings"): a PostgreSQL URL, a
//! SQLite file, or a string refused because it is neither. A connection string is never
//! taken for a file name: a file named after one would hold its password, and be shown.

use std::path::{Path, PathBuf};

use super::postgres::{self, url::names_a_keyword, PgTarget};
use super::StoreError;

/// The forms a database string may take, for the errors that refuse one.
const FORMS: &str = "name a SQLite file by its path, or a PostgreSQL database as postgresql://user[:password]@host[:port]/dbname[?option=value&...] (docs/reference.md, \"Database strings\")";

/// Where the pool's state lives: `--db`, `PROXYPOOL_DB`, `[store] path` or `[store] url`.
#[derive(Debug, Clone, PartialEq)]
pub enum Location {
    /// A SQLite file.
    File(PathBuf),
    /// A PostgreSQL database shared by a fleet of daemons.
    Postgres(Box<PgTarget>),
}

impl Location {
    /// A database string: a `postgres://` or `postgresql://` URL, else a SQLite path unless
    /// it has the shape of a connection string ([`refusal`]). Errors never quote it but as
    /// a URL with its password hidden.
    pub fn parse(value: &Path) -> Result<Location, StoreError> {
        let Some(s) = value.to_str() else {
            // Not UTF-8: no URL or libpq string is.
            return Ok(Location::File(value.to_path_buf()));
        };
        if postgres::is_url(s) {
            return Ok(Location::Postgres(Box::new(PgTarget::parse(s)?)));
        }
        match refusal(s) {
            Some(why) => Err(StoreError::Config(format!("{why}: {FORMS}"))),
            None => Ok(Location::File(value.to_path_buf())),
        }
    }

    /// What to call it in messages and `status`: the file's absolute path, or the
    /// PostgreSQL hosts and database without the password.
    pub fn describe(&self) -> String {
        match self {
            Location::File(p) => std::path::absolute(p)
                .unwrap_or_else(|_| p.clone())
                .display()
                .to_string(),
            Location::Postgres(t) => t.describe(),
        }
    }
}

/// Why a string that is not a PostgreSQL URL is not taken as a path either: the shapes of
/// a connection string, each of which may carry a password.
fn refusal(s: &str) -> Option<&'static str> {
    if s.trim().is_empty() {
        return Some("an empty database string");
    }
    if s.contains("://") {
        return Some("a URL that is not postgresql:// or postgres:// is not a database");
    }
    let lower = s.to_ascii_lowercase();
    if lower.starts_with("postgres:") || lower.starts_with("postgresql:") {
        return Some("a PostgreSQL URL without \"//\" after its scheme");
    }
    if s.find(':').is_some_and(|colon| s[colon..].contains('@')) {
        return Some("user:password@host without postgresql:// in front is not a path");
    }
    if names_a_keyword(s) {
        return Some("a libpq key=value connection string (host=... dbname=...) is not taken; write it as a URL");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_strings_are_a_url_a_path_or_refused() {
        // (string, Some(what the refusal says), None: a path)
        let cases: &[(&str, Option<&str>)] = &[
            ("/var/lib/proxypool/pool.db", None),
            ("pool.db", None),
            ("./data/v=2/pool.db", None),
            ("a=b.db", None),
            ("me@home/pool.db", None),
            ("pool:v2.db", None),
            ("", Some("empty")),
            ("  ", Some("empty")),
            ("mysql://u:pw@h/db", Some("not postgresql://")),
            ("sqlite:///x.db", Some("not postgresql://")),
            ("postgresql:/u:pw@h/db", Some("without \"//\"")),
            ("Postgres:u@h", Some("without \"//\"")),
            ("pp:pw@127.0.0.1:5432/ppdb", Some("user:password@host")),
            ("pp:p/w@h/db", Some("user:password@host")),
            (
                "host=127.0.0.1 password=KvSecret5 dbname=ppdb",
                Some("key=value"),
            ),
            ("dbname = ppdb password = KvSecret5", Some("key=value")),
            ("/srv/password=KvSecret5", Some("key=value")),
        ];
        for (s, want) in cases {
            match (Location::parse(Path::new(s)), want) {
                (Ok(Location::File(p)), None) => assert_eq!(p, Path::new(s)),
                (Err(e), Some(w)) => {
                    let e = e.to_string();
                    assert!(e.contains(w), "{s:?}: {e}");
                    assert!(e.contains("postgresql://user[:password]@host"), "{e}");
                    for secret in ["pw", "KvSecret5", "p/w"] {
                        assert!(!e.contains(secret), "{s:?}: {e}");
                    }
                }
                (got, _) => panic!("{s:?}: {got:?}"),
            }
        }
        let url = Location::parse(Path::new("postgresql://app:pw@db1/pool")).unwrap();
        assert_eq!(url.describe(), "postgresql://app@db1:5432/pool");
        let rel = Location::parse(Path::new("rel/pool.db"))
            .unwrap()
            .describe();
        assert_eq!(
            rel,
            std::env::current_dir()
                .unwrap()
                .join("rel/pool.db")
                .display()
                .to_string()
        );
    }
}
