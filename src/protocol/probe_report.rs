//! One probe's outcome as the CLI prints it and the socket's `probe` op returns it.

use serde::{Deserialize, Serialize};

use crate::endpoint::{EndpointId, ProxyUrl};
use crate::health::{Phase, Reason, State};

/// One probe's outcome, as `probe` prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// Endpoint id.
    pub id: EndpointId,
    /// Redacted URL.
    pub url: String,
    pub pool: String,
    /// Passed.
    pub ok: bool,
    /// Not run (e.g. its single attempt is already claimed).
    pub skipped: Option<String>,
    /// Failure reason.
    pub reason: Option<Reason>,
    /// Failure phase.
    pub phase: Option<Phase>,
    /// HTTP status seen.
    pub status: Option<u16>,
    /// Failure detail.
    pub detail: Option<String>,
    /// Milliseconds per phase.
    pub phases_ms: Vec<(Phase, f64)>,
    /// Total milliseconds.
    pub total_ms: f64,
    /// State after the result was applied.
    pub state: Option<State>,
    /// This probe was the endpoint's single recovery attempt.
    pub trial: bool,
}

impl ProbeReport {
    /// A report for a probe not run yet: the single recovery attempt, already claimed.
    pub(crate) fn claimed(id: EndpointId, url: &ProxyUrl, pool: &str) -> Self {
        ProbeReport {
            id,
            url: url.to_redacted_string(),
            pool: pool.to_string(),
            ok: false,
            skipped: None,
            reason: None,
            phase: None,
            status: None,
            detail: None,
            phases_ms: Vec::new(),
            total_ms: 0.0,
            state: Some(State::ProbeAllowed),
            trial: true,
        }
    }
}
