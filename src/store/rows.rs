//! The rows the store reads and the writes it applies, as plain data shared with the pool
//! engine, the server and the CLI.

use std::time::SystemTime;

use serde::Serialize;

use super::{fmt_time, pairs};
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::event_kind::EventKind;
use crate::health::blame::Blame;
use crate::health::{Phase, Reason, State};
use crate::tags::Tags;

/// A stored endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointRow {
    pub id: EndpointId,
    /// URL with credentials.
    pub url: ProxyUrl,
    pub pool: String,
    /// Operator label.
    pub label: Option<String>,
    /// Who added it: `cli`, `config`, `source:NAME`.
    pub source: Option<String>,
    /// Health state.
    pub state: State,
    /// Last reason.
    pub reason: Option<Reason>,
    /// Last phase.
    pub phase: Option<Phase>,
    /// Last detail.
    pub detail: Option<String>,
    /// Consecutive failures.
    pub streak: u32,
    /// Consecutive failures of `reason`.
    pub reason_streak: u32,
    /// Length of the current/last cooldown.
    pub cooldown_ms: Option<u64>,
    /// Wall-clock end of the cooldown.
    pub cooldown_until: Option<SystemTime>,
    /// RFC 3339.
    pub state_changed_at: String,
    /// RFC 3339.
    pub created_at: String,
    /// `key=value` tags (docs/selection.md, "Tags").
    pub tags: Tags,
}

/// The JSON shape of an endpoint in `list --json`, `show --json` and the socket.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
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
}

impl EndpointRow {
    /// JSON view; `secrets` keeps the password.
    pub fn view(&self, secrets: bool) -> EndpointView {
        EndpointView {
            id: self.id,
            url: if secrets {
                self.url.to_secret_string()
            } else {
                self.url.to_redacted_string()
            },
            pool: self.pool.clone(),
            label: self.label.clone(),
            source: self.source.clone(),
            state: self.state,
            reason: self.reason,
            phase: self.phase,
            detail: self.detail.clone(),
            streak: self.streak,
            cooldown_until: self.cooldown_until.map(fmt_time),
            cooldown_ms: self.cooldown_ms,
            state_changed_at: self.state_changed_at.clone(),
            created_at: self.created_at.clone(),
            tags: self.tags.clone(),
            stats: None,
        }
    }
}

/// An endpoint to insert.
#[derive(Debug, Clone)]
pub struct NewEndpoint {
    pub url: ProxyUrl,
    pub pool: String,
    pub label: Option<String>,
    /// Who adds it.
    pub source: Option<String>,
    /// Initial state (depends on the pool mode).
    pub state: State,
    pub tags: Tags,
}

/// An event row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRow {
    /// Id (the order things happened).
    pub id: i64,
    /// RFC 3339 UTC.
    pub at: String,
    /// Kind, e.g. `state_changed`.
    pub kind: String,
    /// Endpoint id.
    pub endpoint: Option<EndpointId>,
    /// State before.
    pub from: Option<String>,
    /// State after.
    pub to: Option<String>,
    pub reason: Option<String>,
    pub phase: Option<String>,
    pub detail: Option<String>,
    /// Lease id.
    pub lease: Option<String>,
    /// The pair's destination; null for endpoint-scoped events (docs/destinations.md,
    /// "Events").
    #[serde(default)]
    pub destination: Option<String>,
    /// HTTP status the report carried.
    #[serde(default)]
    pub status: Option<u16>,
    /// Whom a failure counted against (`endpoint`, `pair`, `target`, `pending`).
    #[serde(default)]
    pub blame: Option<String>,
}

/// An event to append.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub endpoint: Option<EndpointId>,
    pub kind: EventKind,
    /// State before.
    pub from: Option<State>,
    /// State after.
    pub to: Option<State>,
    pub reason: Option<Reason>,
    pub phase: Option<Phase>,
    /// Detail (never a password).
    pub detail: Option<String>,
    /// Lease id.
    pub lease: Option<String>,
    /// Whom a failure counted against.
    pub blame: Option<Blame>,
}

impl NewEvent {
    /// An event of `kind` about nothing in particular yet; fill in with struct update.
    pub fn new(kind: EventKind) -> NewEvent {
        NewEvent {
            endpoint: None,
            kind,
            from: None,
            to: None,
            reason: None,
            phase: None,
            detail: None,
            lease: None,
            blame: None,
        }
    }
}

/// The persisted health of an endpoint after a transition.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthRecord {
    /// Endpoint.
    pub id: EndpointId,
    pub state: State,
    pub reason: Option<Reason>,
    pub phase: Option<Phase>,
    pub detail: Option<String>,
    pub streak: u32,
    /// Same-reason streak.
    pub reason_streak: u32,
    /// Cooldown length.
    pub cooldown_ms: Option<u64>,
    /// Wall-clock deadline.
    pub cooldown_until: Option<SystemTime>,
}

/// One durable write; a batch of them commits atomically.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Update an endpoint's health and append its event.
    Transition(HealthRecord, NewEvent),
    /// Append an event only.
    Event(NewEvent),
    /// Delete endpoints (the only deletion), with a `removed` event each.
    Remove(Vec<EndpointId>),
    /// Per-destination health (docs/destinations.md, "Pairs"): a pair transition or event.
    Pair(pairs::PairWrite),
    /// An endpoint-scoped event that carries the HTTP status of its report.
    EventStatus(NewEvent, Option<u16>),
    /// Record a source's last sniff.
    SourceResult {
        pool: String,
        /// Source name.
        name: String,
        /// Succeeded.
        ok: bool,
        /// Why / what.
        detail: Option<String>,
        /// Endpoints returned.
        count: Option<usize>,
    },
}

/// The last sniff of a source.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceRow {
    pub pool: String,
    /// Source name.
    pub name: String,
    /// RFC 3339 of the last sniff.
    pub last_at: Option<String>,
    /// Whether it succeeded.
    pub last_ok: Option<bool>,
    /// Why it failed, or a summary.
    pub last_detail: Option<String>,
    /// How many endpoints it returned.
    pub last_count: Option<i64>,
}
