//! An endpoint as `list --json`, `show --json`, the socket's `endpoints` and the web API
//! show it.

use serde::{Deserialize, Serialize};

use crate::endpoint::EndpointId;
use crate::health::{Phase, Reason, State};
use crate::tags::Tags;

/// The JSON shape of an endpoint in `list --json`, `show --json` and the socket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndpointView {
    pub id: EndpointId,
    /// URL, password redacted unless secrets were asked for.
    pub url: String,
    pub pool: String,
    pub label: Option<String>,
    pub source: Option<String>,
    pub state: State,
    pub reason: Option<Reason>,
    pub phase: Option<Phase>,
    pub detail: Option<String>,
    pub streak: u32,
    /// RFC 3339 UTC or null.
    pub cooldown_until: Option<String>,
    /// Cooldown length.
    pub cooldown_ms: Option<u64>,
    /// RFC 3339 UTC.
    pub state_changed_at: String,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// Tags, an object of strings (`{}` for none).
    #[serde(default)]
    pub tags: Tags,
    /// What the running daemon saw the endpoint do (absent without a daemon).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<crate::stats::EndpointStats>,
    /// Its state for the destination an `endpoints` request named: its (endpoint,
    /// destination) pair's when it is available and that pair is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_state: Option<State>,
    /// Its slow-down for that destination's host, when pacing holds one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowed: Option<SlowedView>,
    /// The address it leaves from (docs/exit.md); null while unknown.
    #[serde(default)]
    pub exit_ip: Option<String>,
    /// RFC 3339 UTC: when `exit_ip` was last learned; null while unknown.
    #[serde(default)]
    pub exit_seen_at: Option<String>,
}

/// A slow-down pacing holds for one (endpoint, host) pair (docs/selection.md, "Slow
/// down, not banned").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlowedView {
    /// The spacing of its uses now.
    pub spacing_ms: u64,
    /// The time until its next use may be.
    pub next_use_in_ms: u64,
}
