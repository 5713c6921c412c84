//! Requests: one message per op, and `Request`, the line they travel in.
//!
//! A new op is a message struct here, a variant of `Request`, its name in `OPS` and in
//! `Request::op`; the server answers it in its own file under `src/server/ops/`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::values::{duration_ms, Dur, EndpointRef, ReportOutcome, RetryAfter};
use crate::endpoint::EndpointId;
use crate::tags::Tags;

/// Every op the server knows.
pub const OPS: &[&str] = &[
    "lease",
    "report",
    "release",
    "status",
    "endpoints",
    "probe",
    "import",
    "disable",
    "enable",
    "add",
    "remove",
    "edit",
    "ping",
];

/// A request, tagged by `op`; its other fields are the op's message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Lease(LeaseMessage),
    Report(ReportMessage),
    Release(ReleaseMessage),
    Status(StatusMessage),
    Endpoints(EndpointsMessage),
    Disable(DisableMessage),
    Enable(EnableMessage),
    Add(AddMessage),
    Import(ImportMessage),
    Remove(RemoveMessage),
    Probe(ProbeMessage),
    Edit(EditMessage),
    Ping(PingMessage),
}

impl Request {
    /// The op's name, as in `OPS`.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Lease(_) => "lease",
            Request::Report(_) => "report",
            Request::Release(_) => "release",
            Request::Status(_) => "status",
            Request::Endpoints(_) => "endpoints",
            Request::Disable(_) => "disable",
            Request::Enable(_) => "enable",
            Request::Add(_) => "add",
            Request::Import(_) => "import",
            Request::Remove(_) => "remove",
            Request::Probe(_) => "probe",
            Request::Edit(_) => "edit",
            Request::Ping(_) => "ping",
        }
    }
}

/// `lease`: take an endpoint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseMessage {
    /// Pool (default `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Lease lifetime (default 60s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<Dur>,
    /// How long to wait for an endpoint (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<Dur>,
    /// Sticky key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// `host` or `host:port` the lease is for: its banned pairs are skipped, a target that
    /// is down refused (docs/blame.md, "A target that is down").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    /// Only endpoints of these schemes (docs/destinations.md, "`schemes` and
    /// `duration_ms`").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schemes: Option<Vec<String>>,
    /// Only endpoints with every one of these tags (docs/selection.md, "Tags").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Tags>,
}

/// `report`: say how a lease (or the endpoint bound to a session) went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportMessage {
    /// Lease id; or `pool` (default `default`) and `session` instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// Pool of `session`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Report on the endpoint bound to this sticky session (docs/destinations.md, "Report
    /// by session").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// `host` or `host:port` the use was for: decides whom a failure counts against
    /// (docs/blame.md, "Targets and hosts").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    /// success | failure.
    pub outcome: ReportOutcome,
    /// Required for failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Optional phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// HTTP status seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Retry-After seen (seconds, humantime or an HTTP date).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<RetryAfter>,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// How long the use took, in milliseconds (feeds the latency estimate).
    #[serde(
        default,
        deserialize_with = "duration_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub duration_ms: Option<f64>,
}

/// `release`: give a lease back without an outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseMessage {
    /// Lease id.
    pub lease: String,
}

/// `status`: counts by state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusMessage {
    /// One pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
}

/// `endpoints`: list endpoints (passwords redacted).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointsMessage {
    /// Pool filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// State filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Only this endpoint (`show` asks for one endpoint's statistics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<EndpointId>,
    /// Only endpoints with every one of these tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Tags>,
    /// Each endpoint's state for this destination (host) too (`destination_state`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
}

/// `disable`: operator disable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DisableMessage {
    pub endpoint: EndpointRef,
    /// Name endpoints of this pool only: the same URL may be in several pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Operator's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `enable`: operator enable; or, with `target` instead of `endpoint`, clear a target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnableMessage {
    /// The endpoint (required unless `target` is given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<EndpointRef>,
    /// Name endpoints of this pool only: the same URL may be in several pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Straight to available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub now: Option<bool>,
    /// Clear only the endpoint's pair for this destination (docs/destinations.md, "Pairs").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    /// Clear this target (`host:port`) instead of an endpoint: what the pools know of it,
    /// down or not (docs/blame.md, "A target that is down").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// `add`: operator add (used by the CLI while a daemon runs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddMessage {
    pub urls: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Who adds them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Tags of every endpoint added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Tags>,
}

/// `import`: operator add of a large batch from a file the CLI wrote (one URL a line).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportMessage {
    /// Absolute path of the file.
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Tags of every endpoint imported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Tags>,
    /// Pass over endpoints already in the pool (and lines listed twice), counting them in
    /// the answer's `skipped`, instead of refusing the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_existing: Option<bool>,
}

/// `remove`: operator remove (used by the CLI while a daemon runs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoveMessage {
    pub endpoints: Vec<EndpointRef>,
    /// Name endpoints of this pool only: the same URL may be in several pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
}

/// `probe`: probe endpoints now (used by the CLI while a daemon runs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeMessage {
    /// Endpoints; empty with `all` or `pool` = every endpoint (of the pool).
    #[serde(default)]
    pub endpoints: Vec<EndpointRef>,
    /// Only this pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Every endpoint.
    #[serde(default)]
    pub all: bool,
    /// Parallel probes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
}

/// `edit`: a new URL (same pool) and/or label, keeping id, state and history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditMessage {
    pub endpoint: EndpointRef,
    /// Name endpoints of this pool only: the same URL may be in several pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Replacement URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// New label; "" clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Tags to set; an empty value removes its key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
}

/// `ping`: liveness. Any other field is ignored, as it always was.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PingMessage {}
