//! Endpoint tags (docs/selection.md, "Tags"): `key=value` labels that a lease, a gateway
//! username and `list` select endpoints by. Pure: parsing, checking, matching, and the
//! stored form.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Tags one endpoint may carry at most.
pub const MAX_TAGS: usize = 16;
/// Longest key.
pub const MAX_KEY: usize = 32;
/// Longest value.
pub const MAX_VALUE: usize = 64;
/// Keys the gateway username already uses for itself.
pub const RESERVED_KEYS: [&str; 2] = ["pool", "session"];

/// A tag that cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TagError {
    #[error("tag {0:?} is not KEY=VALUE (e.g. country=us)")]
    Form(String),
    #[error("tag key {key:?}: {why}")]
    Key { key: String, why: &'static str },
    #[error("tag {key}={value:?}: {why}")]
    Value {
        key: String,
        value: String,
        why: &'static str,
    },
    #[error("tag key {0:?} is given twice")]
    Repeated(String),
    #[error("{0} tags: an endpoint carries at most {MAX_TAGS}")]
    TooMany(usize),
    #[error("stored tags {0:?} are not a JSON object of strings")]
    Stored(String),
}

/// Why a key may not be used, if it may not.
fn key_problem(key: &str) -> Option<&'static str> {
    if key.is_empty() {
        return Some("is empty");
    }
    if key.len() > MAX_KEY {
        return Some("is longer than 32 characters");
    }
    if !key.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Some("must start with a lower-case letter");
    }
    if !key
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        // `-` would split a gateway username segment.
        return Some("may hold only a-z, 0-9 and _");
    }
    if RESERVED_KEYS.contains(&key) {
        return Some("is reserved (the gateway username's pool and session)");
    }
    None
}

fn value_problem(value: &str) -> Option<&'static str> {
    if value.is_empty() {
        return Some("the value is empty");
    }
    if value.len() > MAX_VALUE {
        return Some("the value is longer than 64 characters");
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._:+-".contains(&b))
    {
        return Some("the value may hold only letters, digits and . _ : + -");
    }
    None
}

/// Check one key (a lease or username may name keys on their own).
pub fn check_key(key: &str) -> Result<(), TagError> {
    match key_problem(key) {
        Some(why) => Err(TagError::Key {
            key: key.to_string(),
            why,
        }),
        None => Ok(()),
    }
}

/// Check one tag.
pub fn check(key: &str, value: &str) -> Result<(), TagError> {
    check_key(key)?;
    match value_problem(value) {
        Some(why) => Err(TagError::Value {
            key: key.to_string(),
            value: value.to_string(),
            why,
        }),
        None => Ok(()),
    }
}

/// `KEY=VALUE` split (not checked); `KEY=` has an empty value.
pub fn split(arg: &str) -> Result<(&str, &str), TagError> {
    arg.split_once('=')
        .map(|(k, v)| (k.trim(), v.trim()))
        .ok_or_else(|| TagError::Form(arg.to_string()))
}

/// An endpoint's tags (or what a lease asks for): checked keys and values, in key order.
/// JSON: an object of strings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(
    try_from = "BTreeMap<String, String>",
    into = "BTreeMap<String, String>"
)]
pub struct Tags(BTreeMap<String, String>);

impl TryFrom<BTreeMap<String, String>> for Tags {
    type Error = TagError;
    fn try_from(map: BTreeMap<String, String>) -> Result<Tags, TagError> {
        if map.len() > MAX_TAGS {
            return Err(TagError::TooMany(map.len()));
        }
        for (k, v) in &map {
            check(k, v)?;
        }
        Ok(Tags(map))
    }
}

impl From<Tags> for BTreeMap<String, String> {
    fn from(t: Tags) -> Self {
        t.0
    }
}

impl Tags {
    /// Tags from `KEY=VALUE` arguments (`--tag`), each key once.
    pub fn parse_args<S: AsRef<str>>(args: &[S]) -> Result<Tags, TagError> {
        let mut map = BTreeMap::new();
        for a in args {
            let (k, v) = split(a.as_ref())?;
            check(k, v)?;
            if map.insert(k.to_string(), v.to_string()).is_some() {
                return Err(TagError::Repeated(k.to_string()));
            }
        }
        Tags::try_from(map)
    }

    /// Tags from pairs (checked).
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Tags, TagError> {
        Tags::try_from(
            pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect::<BTreeMap<_, _>>(),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// In key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Every tag of `want` is one of these.
    pub fn contains_all(&self, want: &Tags) -> bool {
        want.iter().all(|(k, v)| self.get(k) == Some(v))
    }

    /// These tags with `changes` applied: a value sets its key, an empty value removes it.
    pub fn edited(&self, changes: &BTreeMap<String, String>) -> Result<Tags, TagError> {
        let mut map = self.0.clone();
        for (k, v) in changes {
            check_key(k)?;
            if v.is_empty() {
                map.remove(k);
            } else {
                check(k, v)?;
                map.insert(k.clone(), v.clone());
            }
        }
        Tags::try_from(map)
    }

    /// The stored form: a JSON object, or NULL for none.
    pub fn to_column(&self) -> Option<String> {
        (!self.is_empty()).then(|| serde_json::to_string(&self.0).unwrap_or_default())
    }

    /// Tags as stored (NULL or an empty text: none).
    pub fn from_column(text: Option<&str>) -> Result<Tags, TagError> {
        match text.map(str::trim).filter(|t| !t.is_empty()) {
            None => Ok(Tags::default()),
            Some(t) => serde_json::from_str::<Tags>(t).map_err(|_| TagError::Stored(t.to_string())),
        }
    }
}

impl fmt::Display for Tags {
    /// `k=v,k=v` (nothing for none).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, v)) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_tag_may_be() {
        let ok = [
            ("country", "us"),
            ("tier", "dc"),
            ("asn", "AS13335"),
            ("region", "us-east-1"),
            ("k_2", "a.b:c+d"),
        ];
        for (k, v) in ok {
            assert_eq!(check(k, v), Ok(()), "{k}={v}");
        }
        let bad = [
            ("", "x", "is empty"),
            ("Country", "us", "lower-case letter"),
            ("1st", "x", "lower-case letter"),
            ("my-key", "x", "a-z, 0-9 and _"),
            ("pool", "x", "reserved"),
            ("session", "x", "reserved"),
            ("country", "", "value is empty"),
            ("country", "u s", "letters, digits"),
            ("country", "us,eu", "letters, digits"),
        ];
        for (k, v, why) in bad {
            let e = check(k, v).unwrap_err().to_string();
            assert!(e.contains(why), "{k}={v}: {e}");
        }
        assert!(check(&"k".repeat(33), "x").is_err());
        assert!(check("k", &"v".repeat(65)).is_err());
    }

    #[test]
    fn arguments_column_and_matching() {
        let t = Tags::parse_args(&["tier=dc", "country = us"]).unwrap();
        assert_eq!(t.to_string(), "country=us,tier=dc");
        assert_eq!(
            t.to_column().as_deref(),
            Some(r#"{"country":"us","tier":"dc"}"#)
        );
        assert_eq!(Tags::from_column(t.to_column().as_deref()), Ok(t.clone()));
        assert_eq!(Tags::from_column(None), Ok(Tags::default()));
        assert_eq!(Tags::default().to_column(), None);
        assert!(Tags::from_column(Some("[1]")).is_err());
        assert!(Tags::from_column(Some(r#"{"Bad":"x"}"#)).is_err());
        let want = Tags::parse_args(&["country=us"]).unwrap();
        assert!(t.contains_all(&want));
        assert!(t.contains_all(&Tags::default()));
        assert!(!want.contains_all(&t));
        assert!(!t.contains_all(&Tags::parse_args(&["country=de"]).unwrap()));
        assert_eq!(
            Tags::parse_args(&["a=1", "a=2"]),
            Err(TagError::Repeated("a".into()))
        );
        assert_eq!(
            Tags::parse_args(&["country"]),
            Err(TagError::Form("country".into()))
        );
        let many: Vec<String> = (0..17).map(|i| format!("k{i}=v")).collect();
        assert_eq!(Tags::parse_args(&many), Err(TagError::TooMany(17)));
    }

    #[test]
    fn edits_set_and_remove() {
        let t = Tags::parse_args(&["country=us", "tier=dc"]).unwrap();
        let changes: BTreeMap<String, String> =
            [("country".into(), "de".into()), ("tier".into(), "".into())].into();
        assert_eq!(t.edited(&changes).unwrap().to_string(), "country=de");
        let bad: BTreeMap<String, String> = [("Bad".into(), "x".into())].into();
        assert!(t.edited(&bad).is_err());
    }

    #[test]
    fn json_is_an_object_and_is_checked() {
        let t: Tags = serde_json::from_str(r#"{"country":"us"}"#).unwrap();
        assert_eq!(serde_json::to_string(&t).unwrap(), r#"{"country":"us"}"#);
        assert!(serde_json::from_str::<Tags>(r#"{"pool":"x"}"#).is_err());
        assert!(serde_json::from_str::<Tags>(r#"{"country":1}"#).is_err());
    }
}
