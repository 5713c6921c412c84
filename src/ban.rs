//! `[[ban]]` rules (docs/ban-rules.md): which answers of a destination are bans although
//! they came through, judged on the status, a response header and the first bytes of the
//! decoded body. Pure: the gateway hands in what it saw and gets the first rule that
//! matches, and learns before reading any body whether it needs to.
//!
//! Files: `rule` (one rule compiled from what the config says), `builtin` (the named sets
//! of vendor rules), `decode` (gzip, deflate and br, bounded by output).

use std::fmt;
use std::sync::Arc;

use hyper::HeaderMap;

mod builtin;
mod decode;
mod rule;

pub use builtin::BUILTIN_SETS;
pub use decode::{decode, Coding, BROTLI_RING_CAP};
use rule::Rule;

/// `body_bytes` when a rule names none.
pub const DEFAULT_BODY_BYTES: usize = 32 * 1024;
/// The largest `body_bytes`: what one answer may hold back from its client.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Rules at most (each is a metric series and a regex or two).
pub const MAX_RULES: usize = 256;
/// A compiled regex at most this large; a pattern that would be larger is refused.
pub const REGEX_SIZE_LIMIT: usize = 1024 * 1024;

/// One `[[ban]]` entry as written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BanEntry {
    /// `name`: required unless `builtin`.
    pub name: Option<String>,
    /// `builtin`: the name of a set of vendor rules.
    pub builtin: Option<String>,
    /// `status`.
    pub status: Option<Vec<u16>>,
    /// `header`: `"Name: regex"`.
    pub header: Option<String>,
    /// `body`: a regex over the decoded body's first `body_bytes`.
    pub body: Option<String>,
    /// `host`: exact hosts and `*.` suffixes; empty = every host.
    pub host: Vec<String>,
    /// `body_bytes`.
    pub body_bytes: Option<usize>,
}

/// A `[[ban]]` entry that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", rule.as_ref().map(|r| format!("rule {r:?}: ")).unwrap_or_default())]
pub struct BanError {
    /// Which entry (0-based, in file order).
    pub index: usize,
    /// Its name, when it has a usable one.
    pub rule: Option<String>,
    /// The key at fault.
    pub key: &'static str,
    /// What is wrong.
    pub message: String,
}

/// What a matching rule makes of the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BanKind {
    /// A rule of statuses only: reported as `destination_status`.
    Status,
    /// A rule with a header or body condition: reported as `body_mismatch`.
    Content,
}

/// The first rule an answer matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ban<'a> {
    /// The rule's position in the file (the index of its metric series).
    pub index: usize,
    /// The rule's name.
    pub rule: &'a str,
    /// Status rule or content rule.
    pub kind: BanKind,
    /// Decided by the body (a body condition held), not by the head alone.
    pub by_body: bool,
}

impl Ban<'_> {
    /// The detail a report of this ban carries: `ban rule NAME: WHAT`. Read back by
    /// [`rule_in_detail`].
    pub fn detail(&self, what: &str) -> String {
        format!("{DETAIL_PREFIX}{}: {what}", self.rule)
    }
}

const DETAIL_PREFIX: &str = "ban rule ";

/// The rule named in a report's detail (as [`Ban::detail`] writes it, wherever it stands
/// in the detail: the gateway puts the destination first).
pub fn rule_in_detail(detail: &str) -> Option<&str> {
    let at = detail.find(DETAIL_PREFIX)? + DETAIL_PREFIX.len();
    let rest = &detail[at..];
    let name = &rest[..rest.find(':')?];
    rule::valid_name(name).then_some(name)
}

/// What the rules say of a response head.
#[derive(Debug)]
pub enum Screen<'a> {
    /// No rule can match, whatever the body: pass the answer on untouched.
    Clean,
    /// A rule matched on the head alone, and no rule before it waits for the body.
    Banned(Ban<'a>),
    /// Some rule can only be decided by the body: hold at most [`BodyScreen::hold`] bytes
    /// of it, then [`BodyScreen::judge`] them.
    NeedsBody(BodyScreen<'a>),
}

/// The rules still open once the head is known, in file order; the last may be a rule
/// the head alone matched (the answer when no body rule before it holds).
#[derive(Debug)]
pub struct BodyScreen<'a> {
    rules: &'a BanRules,
    open: Vec<usize>,
    coding: Coding,
    hold: usize,
}

impl<'a> BodyScreen<'a> {
    /// Bytes of the body as sent (still encoded) to hold back before judging: the
    /// largest `body_bytes` of the open rules.
    pub fn hold(&self) -> usize {
        self.hold
    }

    /// The first open rule that matches, given the first bytes of the body as sent
    /// (at most [`hold`](Self::hold) are looked at; fewer when the body was shorter or
    /// ended early). Decodes once, at most `hold` bytes of output.
    pub fn judge(&self, held: &[u8]) -> Option<Ban<'a>> {
        let held = &held[..held.len().min(self.hold)];
        let decoded = decode(self.coding, held, self.hold);
        self.open.iter().find_map(|&i| {
            let r = &self.rules.rules[i];
            r.body_matches(&decoded).then(|| r.ban(i))
        })
    }
}

/// Every `[[ban]]` rule of the config, compiled, in file order.
#[derive(Clone, Default)]
pub struct BanRules {
    rules: Arc<[Rule]>,
    /// As written (what two configs are compared by).
    entries: Arc<[BanEntry]>,
}

impl PartialEq for BanRules {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries
    }
}

impl fmt::Debug for BanRules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl BanRules {
    /// Check and compile the entries; a built-in set becomes its rules, in place.
    pub fn compile(entries: Vec<BanEntry>) -> Result<BanRules, BanError> {
        let mut rules: Vec<Rule> = Vec::new();
        for (index, e) in entries.iter().enumerate() {
            for r in rule::compile(index, e)? {
                if rules.iter().any(|o| o.name == r.name) {
                    return Err(BanError {
                        index,
                        rule: Some(r.name.to_string()),
                        key: if e.builtin.is_some() {
                            "builtin"
                        } else {
                            "name"
                        },
                        message: "a rule of this name is defined above; names are unique".into(),
                    });
                }
                rules.push(r);
            }
            if rules.len() > MAX_RULES {
                return Err(BanError {
                    index,
                    rule: None,
                    key: "name",
                    message: format!("more than {MAX_RULES} ban rules"),
                });
            }
        }
        Ok(BanRules {
            rules: rules.into(),
            entries: entries.into(),
        })
    }

    /// No rule at all: every answer is [`Screen::Clean`] without looking.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules' names in order (the index of a [`Ban`] is a position here).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().map(|r| &*r.name)
    }

    /// Judge an answer's head: `host` as leases name it (lower case, no port).
    pub fn screen(&self, host: &str, status: u16, headers: &HeaderMap) -> Screen<'_> {
        let mut open = Vec::new();
        let mut coding = None;
        let mut hold = 0;
        for (i, r) in self.rules.iter().enumerate() {
            if !r.head_matches(host, status, headers) {
                continue;
            }
            let Some(bytes) = r.body_bytes() else {
                // The head decides this rule: it is the answer unless a body rule before
                // it matches.
                if open.is_empty() {
                    return Screen::Banned(r.ban(i));
                }
                open.push(i);
                break;
            };
            // An encoding this cannot decode: the body condition cannot hold.
            if coding.get_or_insert_with(|| Coding::of(headers)).is_none() {
                continue;
            }
            hold = hold.max(bytes);
            open.push(i);
        }
        match (open.is_empty(), coding.flatten()) {
            (true, _) => Screen::Clean,
            (false, Some(coding)) => Screen::NeedsBody(BodyScreen {
                rules: self,
                open,
                coding,
                hold,
            }),
            // Only a head rule is open (the body rules before it were skipped).
            (false, None) => Screen::Banned(self.rules[open[0]].ban(open[0])),
        }
    }
}

#[cfg(test)]
mod tests;
