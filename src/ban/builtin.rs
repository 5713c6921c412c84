//! Named sets of rules for challenge pages whose marks their vendors document
//! (docs/ban-rules.md, "Built-in sets" cites each). A mark that is only folklore has no
//! place here: a wrong built-in bans good proxies on every site that uses the vendor.

/// One rule of a set, as a config entry would write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltinRule {
    /// The rule's name (on events, the page and the metric).
    pub name: &'static str,
    /// `status`, or empty.
    pub status: &'static [u16],
    /// `header`.
    pub header: Option<&'static str>,
    /// `body`.
    pub body: Option<&'static str>,
}

/// A set enabled by `builtin = NAME`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltinSet {
    /// What `builtin` names.
    pub name: &'static str,
    /// Its rules, in order.
    pub rules: &'static [BuiltinRule],
}

/// Every built-in set.
pub const BUILTIN_SETS: &[BuiltinSet] = &[BuiltinSet {
    name: "cloudflare",
    // Cloudflare: every Challenge Page answer carries `cf-mitigated: challenge`, and
    // `challenge` is the header's only valid value.
    rules: &[BuiltinRule {
        name: "cloudflare-challenge",
        status: &[],
        header: Some("cf-mitigated: ^challenge$"),
        body: None,
    }],
}];

pub(super) fn set(name: &str) -> Option<&'static [BuiltinRule]> {
    BUILTIN_SETS
        .iter()
        .find(|s| s.name == name)
        .map(|s| s.rules)
}
